"""SESSION windows on Spark through the real broker (SPEC L4, S9, S11, S14): Spark's own
``session_window`` in the table's query, each session written once, when the waterline
passes its end (``last + gap``), equal to the reference evaluator record for record.

clicks (LATENESS 1 minute), sessions of 10 minutes per user:

    step  clicks                                   w after   written
    1     8:00 ann, 8:05 ann, 8:03 ann, 8:02 bob   8:04      -
    2     8:14 cid                                 8:13      bob [8:02, 8:12) 1
    3     8:15 ann, 8:01 ann (late), 8:26 cid      8:25      cid [8:14, 8:24) 1
    4     bound 8:27                               8:26      ann [8:00, 8:25) 4
    5     bound 8:38                               8:37      cid [8:26, 8:36) 1

8:15 is at the end of ann's session [8:00, 8:15): it joins it (Flink's and Spark's rule),
which then ends at 8:25 and is written once w passes 8:25, not at 8:25.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from table_steps import clock_ms, frozen, new_values_per_step, oracle_written, run_steps, written

from app.circuit.reference import evaluate
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

# Slow (CI's budget): CI's native differential runs 11 SESSION aggregates.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROGRAM = """
CREATE TABLE clicks (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    usr  VARCHAR NOT NULL,
    url  VARCHAR
) WITH ('topic' = '{clicks}', 'dead_letter' = '{clicks_dlq}');

CREATE VIEW visits WITH ('topic' = '{visits}', 'format' = 'append') AS
SELECT usr, window_start, window_end, COUNT(*) AS clicks, MAX(ts) AS last_click
FROM TABLE(SESSION(TABLE clicks PARTITION BY usr, DESCRIPTOR(ts), INTERVAL '10' MINUTE))
GROUP BY usr, window_start, window_end
EMIT AFTER WATERMARK;
"""


def _click(clock: str, usr: str) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "usr": usr, "url": f"/{usr}"}


def _visit(usr: str, start: str, end: str, clicks: int, last: str) -> Any:
    return frozen({"usr": usr, "window_start": clock_ms(start), "window_end": clock_ms(end),
                   "clicks": clicks, "last_click": clock_ms(last)})


def test_s11_each_session_is_written_once_its_end_is_below_the_waterline(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {name: unique_topic(name) for name in ("clicks", "clicks_dlq", "visits")}
    kafka.create_topic(topics["clicks"], partitions=2)
    program = tmp_path / "sessions.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    assert plan.placement("visits").placement == "native"
    steps: list[dict[str, list[Any]]] = [
        {"clicks": [_click("8:00", "ann"), _click("8:05", "ann"), _click("8:03", "ann"),
                    _click("8:02", "bob")]},
        {"clicks": [_click("8:14", "cid")]},
        {"clicks": [_click("8:15", "ann"), _click("8:01", "ann"), _click("8:26", "cid")]},
        {"clicks": [("bound", clock_ms("8:27"))]},
        {"clicks": [("bound", clock_ms("8:38"))]},
    ]
    seen, new_rows = new_values_per_step(kafka, circuit, "visits", topics["visits"])
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=new_rows)
    assert seen == [
        Counter(),
        Counter([_visit("bob", "8:02", "8:12", 1, "8:02")]),
        Counter([_visit("cid", "8:14", "8:24", 1, "8:14")]),
        Counter([_visit("ann", "8:00", "8:25", 4, "8:15")]),
        Counter([_visit("cid", "8:26", "8:36", 1, "8:26")]),
    ]
    late = read_topic(kafka.conf(), topics["clicks_dlq"])
    assert [dict(m.headers())["tidemark.error.reason"] for m in late] == [b"late"]
    oracle = evaluate(circuit, inputs)
    assert written(kafka, circuit, "visits", topics["visits"]) == oracle_written(oracle, "visits")
