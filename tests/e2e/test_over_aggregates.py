"""OVER aggregates on Spark through the real broker (docs/semantics.md; SPEC S5, S10, S11,
S12, S14): pipelines/event_costs.sql as shipped, seed 003's windowed aggregation, "a running
average cost of the events of the last hour", per classification, on Tidemark's OVER
operator (ADR 0019). Each event is written once, in the step whose waterline passes its
time, equal to the reference evaluator record for record.

event (seqno, classification, cost), LATENESS 1 minute; the frame is the last hour:

    step  events                                   w after  written (avg over the frame)
    1     #1 8:00 red 10, #2 8:20 blue 4,          8:39     #1 10 (1), #2 4 (1)
          #3 8:40 red 20
    2     #4 9:10 red 30, #5 8:41 blue 6           9:09     #3 15 (2), #5 5 (2)
    3     #6 8:30 red 99 (late), #7 9:10 red 60    9:09     -
    4     bound 9:41                               9:40     #4, #7 (peers): 36.666667 (3)

#3 at 8:40 equals nothing below w = 8:39 after step 1, so it waits (a row at 8:39 could
still come, S5); #4 and #7 share 9:10 and get equal values; 8:00 has left their hour
[8:10, 9:10]; the late #6 is a dead letter, in no frame.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from table_steps import (
    clock_ms,
    frozen,
    new_values_per_step,
    oracle_written,
    run_steps,
    shipped_program,
    written,
)

from app.circuit.reference import evaluate
from app.connectors.topic_reader import read_topic
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

# Slow (CI's budget): CI's differential runs 5 generated OVER views on the OVER operator.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

def _event(seqno: int, clock: str, kind: str, cost: str) -> dict[str, Any]:
    return {"seqno": seqno, "ts": clock_ms(clock), "classification": kind,
            "cost": Decimal(cost)}


def _written(seqno: int, clock: str, kind: str, cost: str, avg: str, events: int) -> Any:
    return frozen({"seqno": seqno, "ts": clock_ms(clock), "classification": kind,
                   "cost": Decimal(cost), "avg_cost": Decimal(avg), "events": events})


def test_s12_each_event_is_written_once_the_waterline_passes_it_with_its_hour(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    circuit, topics = shipped_program(
        kafka, unique_topic, tmp_path, "event_costs.sql",
        {"events": "event", "events.dlq": "event_dlq", "events.avg_cost": "avg_cost"},
        ["event"],
    )
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    assert plan.placement("avg_cost").state == "over_operator"
    steps: list[dict[str, list[Any]]] = [
        {"event": [_event(1, "8:00", "red", "10.00"), _event(2, "8:20", "blue", "4.00"),
                   _event(3, "8:40", "red", "20.00")]},
        {"event": [_event(4, "9:10", "red", "30.00"), _event(5, "8:41", "blue", "6.00")]},
        {"event": [_event(6, "8:30", "red", "99.00"), _event(7, "9:10", "red", "60.00")]},
        {"event": [("bound", clock_ms("9:41"))]},
    ]
    seen, new_rows = new_values_per_step(kafka, circuit, "avg_cost", topics["avg_cost"])
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=new_rows)
    assert seen == [
        Counter([_written(1, "8:00", "red", "10.00", "10.000000", 1),
                 _written(2, "8:20", "blue", "4.00", "4.000000", 1)]),
        Counter([_written(3, "8:40", "red", "20.00", "15.000000", 2),
                 _written(5, "8:41", "blue", "6.00", "5.000000", 2)]),
        Counter(),
        Counter([_written(4, "9:10", "red", "30.00", "36.666667", 3),
                 _written(7, "9:10", "red", "60.00", "36.666667", 3)]),
    ]
    late = read_topic(kafka.conf(), topics["event_dlq"])
    assert [dict(m.headers())["tidemark.error.reason"] for m in late] == [b"late"]
    oracle = evaluate(circuit, inputs)
    # Record for record, with the S14 waterline header of each step.
    assert written(kafka, circuit, "avg_cost", topics["avg_cost"]) == oracle_written(
        oracle, "avg_cost")
