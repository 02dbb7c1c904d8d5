"""Two cascades over one native aggregate, itself an output, in one Spark query (SPEC S11,
S18; ADR 0014): the aggregate's state is computed once per plan, three times here.

clicks (LATENESS 2 s), seconds after 8:00:

    step  clicks          w after  per_6s final rows     per_4s (on per_6s's end)
    1     1, 3, 8         6        [0, 6) 2              -
    2     bound 8:10      9:58     [6, 12) 1             [4, 8) 2, [12, 16) 1

In step 2 the waterline passes every window at once: ``per_6s`` writes [6, 12) and the
readers complete their windows over it in the same step (S12: or the step after). With
Spark's exchange reuse, the second and third copies of ``per_6s``'s aggregation read the
first's shuffle and evicted a step late, after their readers had taken the step's watermark
as the bound for late rows, and per_4s lost [12, 16): found by the composed differential
(seed 3 of its long run). Hand-written rows, and the reference evaluator's.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from table_steps import clock_ms, frozen, oracle_values, run_steps, values_written

from app.circuit.reference import evaluate
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # ~2 min

PROGRAM = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND,
    usr VARCHAR NOT NULL
) WITH ('topic' = '{clicks}', 'dead_letter' = '{clicks_dlq}');

CREATE VIEW per_6s WITH ('topic' = '{per_6s}', 'format' = 'append') AS
SELECT window_end AS we, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '6' SECOND))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;

CREATE VIEW hop_9s WITH ('topic' = '{hop_9s}', 'format' = 'append') AS
SELECT window_start, window_end, MAX(n) AS most
FROM TABLE(HOP(TABLE per_6s, DESCRIPTOR(we), INTERVAL '3' SECOND, INTERVAL '9' SECOND))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;

CREATE VIEW per_4s WITH ('topic' = '{per_4s}', 'format' = 'append') AS
SELECT window_start, SUM(n) AS total
FROM TABLE(TUMBLE(TABLE per_6s, DESCRIPTOR(we), INTERVAL '4' SECOND))
WHERE n <> 0
GROUP BY window_start, window_end EMIT AFTER WATERMARK;
"""


def _at(second: int) -> int:
    return clock_ms("8:00") + second * 1000


def test_s18_sibling_cascades_over_an_output_aggregate_lose_no_window(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    names = ("clicks", "clicks_dlq", "per_6s", "hop_9s", "per_4s")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["clicks"], partitions=2)
    program = tmp_path / "siblings.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    (query,) = plan.queries
    assert {v.view: v.placement for v in query.views} == {
        "per_6s": "native", "hop_9s": "native", "per_4s": "native"}
    steps: list[dict[str, list[Any]]] = [
        {"clicks": [{"ts": _at(s), "usr": "a"} for s in (1, 3, 8)]},
        {"clicks": [("bound", clock_ms("8:10"))]},
        {"clicks": [("bound", clock_ms("8:11"))]},
    ]
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps)

    def row(**values: int) -> Any:
        return frozen(values)

    expected = {
        "per_6s": Counter([row(we=_at(6), n=2), row(we=_at(12), n=1)]),
        "per_4s": Counter([row(window_start=_at(4), total=2),
                           row(window_start=_at(12), total=1)]),
        "hop_9s": Counter([
            row(window_start=_at(s), window_end=_at(s + 9), most=m)
            for s, m in ((0, 2), (3, 2), (6, 2), (9, 1), (12, 1))
        ]),
    }
    oracle = evaluate(circuit, inputs)
    for view, rows in expected.items():
        assert values_written(kafka, circuit, view, topics[view]) == rows, view
        assert oracle_values(oracle, view) == rows, view
