"""An aggregate over a join in one SELECT on Spark (SPEC S16, S18, S19), through the real
broker, step by step against hand-written rows and against the reference evaluator.

Flink SQL's ``SELECT c.region, SUM(o.amount) ... FROM orders o JOIN customers c ON ...
GROUP BY c.region``: the compiler plans the joined rows as a generated local view and the
aggregate over it (ADR 0031); on Spark the join runs in the tables' query and the
aggregate reads it through a stage boundary (ADR 0023).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from table_steps import clock_ms, internal_dead_letters, run_steps

from app.circuit.reference import evaluate
from app.connectors.output_reader import OutputReader
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.compose import compose

# Slow (about 100 s: the join's query and the aggregate's, one after the other, each step);
# CI's composed differential draws the form (tests/property/differential_composed.py).
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROGRAM = """
CREATE TABLE orders (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    cid    BIGINT NOT NULL,
    amount BIGINT NOT NULL
) WITH ('topic' = '{orders}', 'dead_letter' = '{orders_dlq}');

CREATE TABLE customers (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    id     BIGINT NOT NULL,
    region VARCHAR NOT NULL
) WITH ('topic' = '{customers}', 'dead_letter' = '{customers_dlq}');

CREATE VIEW per_region WITH ('topic' = '{out}') AS
SELECT c.region, SUM(o.amount) AS total, COUNT(*) AS n
FROM orders o JOIN customers c ON o.cid = c.id
WHERE o.amount > 0
GROUP BY c.region;
"""


def _order(clock: str, cid: int, amount: int) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "cid": cid, "amount": amount}


def _customer(clock: str, id_: int, region: str) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "id": id_, "region": region}


def test_s16_s19_flinks_sum_per_region_over_a_join_runs_on_spark(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """Upsert by region, each step's changed regions:

        step  orders (cid amount)       customers     per_region
        1     (1 10), (2 5), (1 -3)     1 eu, 2 us    eu 10 1, us 5 1
        2     (1 7)                     3 eu          eu 17 2
        3     (3 4), (4 9)                            eu 21 3

    Step 1: the order of -3 fails WHERE. Step 3: customer 3 is in eu; customer 4 has no
    row, so its order matches nothing.
    """
    names = ("orders", "orders_dlq", "customers", "customers_dlq", "out")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["orders"], partitions=2)
    kafka.create_topic(topics["customers"], partitions=2)
    # One partition, so that the records read after each step follow those read before.
    kafka.create_topic(topics["out"], partitions=1)
    program = tmp_path / "per_region.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    composed = compose(circuit)
    assert composed.refused == ()
    assert "per_region.o_join_c" in composed.boundaries
    view = circuit.view("per_region")
    assert view.output is not None and view.output.format == "upsert"
    reader = OutputReader(view.name, view.output)
    per_step: list[list[tuple[Any, ...]]] = []
    seen = 0

    def after_step() -> None:
        nonlocal seen
        records = [reader.value(m.value()) for m in read_topic(kafka.conf(), topics["out"])]
        per_step.append(sorted((r["region"], r["total"], r["n"]) for r in records[seen:]))
        seen = len(records)

    steps = [
        {"orders": [_order("8:00:01", 1, 10), _order("8:00:02", 2, 5),
                    _order("8:00:03", 1, -3)],
         "customers": [_customer("8:00:04", 1, "eu"), _customer("8:00:05", 2, "us")]},
        {"orders": [_order("8:00:10", 1, 7)], "customers": [_customer("8:00:11", 3, "eu")]},
        {"orders": [_order("8:00:20", 3, 4), _order("8:00:21", 4, 9)]},
    ]
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)
    assert per_step == [
        [("eu", 10, 1), ("us", 5, 1)],
        [("eu", 17, 2)],
        [("eu", 21, 3)],
    ]
    oracle = [sorted((r.value["region"], r.value["total"], r.value["n"])
                     for r in result.outputs["per_region"] if r.value is not None)
              for result in evaluate(circuit, inputs)]
    assert oracle == per_step
    for table in ("orders_dlq", "customers_dlq"):
        assert read_topic(kafka.conf(), topics[table]) == []
    assert internal_dead_letters(kafka, tmp_path / "ck", "per_region.o_join_c") == []
