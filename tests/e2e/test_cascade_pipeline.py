"""A cascade of windows on Spark through the real broker: pipelines/click_rollups.sql, as
shipped on test topics (SPEC S10, S11, S12, S18).

Clicks per minute (a local view), per hour over the minutes' window end, per day over the
hours' window end, each EMIT AFTER WATERMARK, in one Spark query: each level's final rows
feed the next level's aggregation. LATENESS 1 minute; all times on 2026-11-26:

    step  clicks (user time)                          w after   final hours       final days
    1     1 0:00:10, 1 0:00:50, 2 0:00:30, 1 0:01:05  0:00:05   -                 -
    2     1 0:59, 2 1:00, 1 1:01                      1:00      [0:00, 1:00)      -
    3     3 0:30 (late), 1 5:00                       4:59      [1:00, 2:00)      -
    4     bound 11-27 0:01                            24:00     [5:00, 6:00)      11-26
    5     bound 11-27 0:02                            24:01     -                 -

A level's row reaches the next level only once final (S18), and every level is complete once
the clicks' waterline passes its window's end (S11): so a day's row is written in the step
that completes it, or the step right after (S12), with that step's waterline as header
(S14). Hand-written expectations, and the reference evaluator record for record.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from table_steps import clock_ms, frozen, run_steps, shipped_program, written

from app.circuit.reference import StepResult, evaluate
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

pytestmark = pytest.mark.e2e

SHIPPED = {
    "clicks": "clicks",
    "clicks.dlq": "clicks_dlq",
    "clicks.per_hour": "per_hour",
    "clicks.per_day": "per_day",
}


def _click(user: int, clock: str) -> dict[str, Any]:
    return {"user_id": user, "url": f"/u{user}", "ts": clock_ms(clock)}


STEPS: list[dict[str, list[Any]]] = [
    {"clicks": [_click(1, "0:00:10"), _click(1, "0:00:50"), _click(2, "0:00:30"),
                _click(1, "0:01:05")]},
    {"clicks": [_click(1, "0:59"), _click(2, "1:00"), _click(1, "1:01")]},
    {"clicks": [_click(3, "0:30"), _click(1, "5:00")]},
    {"clicks": [("bound", clock_ms("0:01", day=27))]},
    {"clicks": [("bound", clock_ms("0:02", day=27))]},
]


def _values(records: Counter[tuple[Any, ...]]) -> Counter[Any]:
    return Counter(value for (value, _), n in records.items() for _ in range(n))


def _oracle(results: list[StepResult], view: str) -> dict[Any, set[str]]:
    """The reference's records of ``view`` (each value once here) and the headers S12 allows
    each: the waterline of the step that wrote it or of the step after."""
    allowed: dict[Any, set[str]] = {}
    for index, result in enumerate(results):
        after = results[min(index + 1, len(results) - 1)].view_waterlines[view]
        for record in result.outputs[view]:
            value = frozen(record.value or {})
            assert value not in allowed, value
            allowed[value] = {format_time_value(w, "ms") for w in (record.waterline, after)}
    return allowed


@pytest.mark.slow  # ~1 min; CI runs the one-output cascade and the composed cascades
def test_cascade_of_windows_runs_on_spark_s11_s18(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    circuit, topics = shipped_program(
        kafka, unique_topic, tmp_path, "click_rollups.sql", SHIPPED, ["clicks"]
    )
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    (query,) = plan.queries
    assert {v.view: v.placement for v in query.views} == {
        "per_minute": "native", "per_hour": "native", "per_day": "native"}

    reports, inputs = run_steps(kafka, tmp_path, circuit, {"clicks": topics["clicks"]}, STEPS)

    hours = written(kafka, circuit, "per_hour", topics["per_hour"])
    days = written(kafka, circuit, "per_day", topics["per_day"])

    def hour(end: str, user: int, clicks: int) -> Any:
        return frozen({"hour_end": clock_ms(end), "user_id": user, "clicks": clicks})

    assert _values(hours) == Counter([
        hour("1:00", 1, 3), hour("1:00", 2, 1),
        hour("2:00", 1, 2), hour("2:00", 2, 1),
        hour("6:00", 1, 1),
    ])
    day = clock_ms("0:00")
    assert _values(days) == Counter([
        frozen({"day": day, "user_id": 1, "clicks": 6, "busiest_hour": 3}),
        frozen({"day": day, "user_id": 2, "clicks": 2, "busiest_hour": 1}),
    ])
    dead = read_topic(kafka.conf(), topics["clicks_dlq"])
    assert [dict(m.headers())["tidemark.error.reason"] for m in dead] == [b"late"]
    assert [r.waterlines for r in reports if r.step is not None][-1] == {
        "ts": clock_ms("0:01", day=27)}

    oracle = evaluate(circuit, inputs)
    for view, got in (("per_hour", hours), ("per_day", days)):
        allowed = _oracle(oracle, view)
        assert _values(got) == Counter(allowed.keys()), view
        for value, header in got:
            assert header in allowed[value], (view, value, header, allowed[value])


def test_a_cascade_with_one_output_is_one_branch_of_its_query_s18(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """The shipped cascade less its day level: one output, so its query has one branch and,
    in local mode, a step is one job (ADR 0008) through both aggregations."""
    circuit, topics = shipped_program(
        kafka, unique_topic, tmp_path, "click_rollups.sql", SHIPPED, ["clicks"]
    )
    text = (tmp_path / "click_rollups.sql").read_text(encoding="utf-8")
    path = tmp_path / "hours_only.sql"
    path.write_text(text[: text.index("-- Clicks per user and day")], encoding="utf-8")
    circuit = compile_program(path)
    (query,) = physical_plan(circuit).queries
    assert (query.writing_stage, query.scans_once) == ("aggregate", True)

    _, inputs = run_steps(kafka, tmp_path, circuit, {"clicks": topics["clicks"]}, STEPS)

    hours = written(kafka, circuit, "per_hour", topics["per_hour"])
    allowed = _oracle(evaluate(circuit, inputs), "per_hour")
    assert _values(hours) == Counter(allowed.keys())
    assert len(allowed) == 5
    for value, header in hours:
        assert header in allowed[value], (value, header, allowed[value])
