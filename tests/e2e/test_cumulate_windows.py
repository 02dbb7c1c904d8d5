"""CUMULATE windows on Spark through the real broker (SPEC L4, S9, S11, S12, S14): each row
exploded into its windows (``view_frame``), aggregated by the Python state operator, which
completes a window at its ``window_end``; equal to the reference evaluator record for record.

sales (LATENESS 1 minute), CUMULATE of step 10 minutes, size 30 minutes, per shop:

    step  sales                                  w after   final (AFTER WATERMARK)
    1     8:05 ann 5, 8:12 ann 7, 8:01 bob 1     8:11      ann, bob [8:00, 8:10)
    2     8:21 ann 2                             8:20      ann 2 12, bob 1 1 [8:00, 8:20)
    3     8:35 bob 4, 8:09 ann 100 (late)        8:34      ann 3 14, bob 1 1 [8:00, 8:30)
    4     bound 9:01                             9:00      bob [8:30, 8:40), 8:50, 9:00

The same windows in an upsert view (default EMIT) are written each step a row changes them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from table_steps import (
    clock_ms,
    frozen,
    keyed_oracle,
    keyed_written,
    new_values_per_step,
    oracle_written,
    run_steps,
    written,
)

from app.circuit.reference import evaluate
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

# Slow (CI's budget): CI's differential runs CUMULATE in each of its 9 EMIT forms/formats.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROGRAM = """
CREATE TABLE sales (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    shop   VARCHAR NOT NULL,
    amount BIGINT
) WITH ('topic' = '{sales}', 'dead_letter' = '{sales_dlq}');

CREATE VIEW final_totals WITH ('topic' = '{final_totals}', 'format' = 'append') AS
SELECT shop, window_start, window_end, COUNT(*) AS sales, SUM(amount) AS total
FROM TABLE(CUMULATE(TABLE sales, DESCRIPTOR(ts), INTERVAL '10' MINUTE, INTERVAL '30' MINUTE))
GROUP BY shop, window_start, window_end
EMIT AFTER WATERMARK;

CREATE VIEW running_totals WITH ('topic' = '{running_totals}') AS
SELECT shop, window_start, window_end, COUNT(*) AS sales, SUM(amount) AS total
FROM TABLE(CUMULATE(TABLE sales, DESCRIPTOR(ts), INTERVAL '10' MINUTE, INTERVAL '30' MINUTE))
GROUP BY shop, window_start, window_end;
"""


def _sale(clock: str, shop: str, amount: int) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "shop": shop, "amount": amount}


def _total(shop: str, start: str, end: str, sales: int, total: int) -> Any:
    return frozen({"shop": shop, "window_start": clock_ms(start), "window_end": clock_ms(end),
                   "sales": sales, "total": total})


def test_s11_each_cumulate_window_is_written_once_the_waterline_reaches_its_end(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    names = ("sales", "sales_dlq", "final_totals", "running_totals")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["sales"], partitions=2)
    program = tmp_path / "cumulate.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    assert plan.placement("final_totals").placement == "state_operator"
    assert plan.placement("running_totals").placement == "state_operator"
    steps: list[dict[str, list[Any]]] = [
        {"sales": [_sale("8:05", "ann", 5), _sale("8:12", "ann", 7), _sale("8:01", "bob", 1)]},
        {"sales": [_sale("8:21", "ann", 2)]},
        {"sales": [_sale("8:35", "bob", 4), _sale("8:09", "ann", 100)]},
        {"sales": [("bound", clock_ms("9:01"))]},
    ]
    seen, new_rows = new_values_per_step(kafka, circuit, "final_totals", topics["final_totals"])
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=new_rows)
    assert seen == [
        Counter([_total("ann", "8:00", "8:10", 1, 5), _total("bob", "8:00", "8:10", 1, 1)]),
        Counter([_total("ann", "8:00", "8:20", 2, 12), _total("bob", "8:00", "8:20", 1, 1)]),
        Counter([_total("ann", "8:00", "8:30", 3, 14), _total("bob", "8:00", "8:30", 1, 1)]),
        Counter([_total("bob", "8:30", "8:40", 1, 4), _total("bob", "8:30", "8:50", 1, 4),
                 _total("bob", "8:30", "9:00", 1, 4)]),
    ]
    late = read_topic(kafka.conf(), topics["sales_dlq"])
    assert [dict(m.headers())["tidemark.error.reason"] for m in late] == [b"late"]
    oracle = evaluate(circuit, inputs)
    assert written(kafka, circuit, "final_totals", topics["final_totals"]) == oracle_written(
        oracle, "final_totals"
    )
    running = keyed_written(kafka, circuit, "running_totals", topics["running_totals"])
    assert running == keyed_oracle(oracle, "running_totals")
    # Step 1 writes ann's and bob's three windows; step 2 ann's [8:00, 8:30); step 3 bob's
    # three windows of 8:30.
    assert sum(running.values()) == 6 + 1 + 3
