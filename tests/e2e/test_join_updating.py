"""A regular (INNER, no time bound) join of an updating view on Spark (SPEC S16, S18, S19),
through the real broker, step by step against hand-written changes and against the
reference evaluator.

``per_customer`` counts each customer's orders (EMIT STREAM, an updating aggregate);
``enriched`` joins its changes with the ``customers`` table on the customer id; ``per_region``
sums the join's counts per region, taking each retraction back. On Spark the join reads the
count's changelog through a stage boundary (and the table beside it, in the same later
query), runs on Tidemark's join operator keeping each side's rows per key (a retraction
takes its row out, ``Join.per_key``) and writing, per key a step touched, its pairs after
less before; the aggregate reads the join's changelog through another boundary (ADR 0023).
A second program joins two updating aggregates (both sides carry ``_undo``) and takes MIN
over the join, whose step retracts a pair and inserts another.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from table_steps import clock_ms, internal_dead_letters, run_steps

from app.circuit.reference import StepResult, evaluate
from app.connectors.output_reader import OutputReader
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.compose import compose

# Slow (2 to 6 minutes each on 2 shared cores): the join reads the count through a boundary
# and the aggregate reads the join through another, so every step runs three queries one
# after the other. CI's composed differential draws such joins.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROGRAM = """
CREATE TABLE orders (
    ts       TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    customer BIGINT
) WITH ('topic' = '{orders}', 'dead_letter' = '{orders_dlq}');

CREATE TABLE customers (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    id     BIGINT,
    region VARCHAR NOT NULL
) WITH ('topic' = '{customers}', 'dead_letter' = '{customers_dlq}');

CREATE LOCAL VIEW per_customer AS
SELECT customer, COUNT(*) AS n FROM orders GROUP BY customer EMIT STREAM;

CREATE VIEW enriched WITH ('topic' = '{enriched}') AS
SELECT p.customer, p.n, c.region
FROM per_customer AS p JOIN customers AS c ON p.customer = c.id;

CREATE VIEW per_region WITH ('topic' = '{per_region}', 'format' = 'changelog') AS
SELECT region, SUM(n) AS orders, COUNT(*) AS customers FROM enriched GROUP BY region;
"""

#: A change of a changelog: (undo, its row's values in column order).
Change = tuple[Any, ...]


def _order(clock: str, customer: int | None) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "customer": customer}


def _customer(clock: str, id_: int | None, region: str) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "id": id_, "region": region}


def _oracle(results: list[StepResult], view: str,
            columns: tuple[str, ...]) -> list[Counter[Change]]:
    return [Counter((r.value["undo"], *(r.value[c] for c in columns))
                    for r in result.outputs[view] if r.value is not None)
            for result in results]


def test_s16_s18_a_regular_join_of_an_emit_stream_count_retracts_its_pairs_on_spark(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """Each step's changes, by hand (S16, S18: per key a step touched, its pairs after less
    its pairs before; the aggregate takes each retraction back):

        step  per_customer changes        customers rows       enriched changes
        1     +(NULL 1), +(1 2), +(3 1)   1 eu, 2 us, NULL eu  +(1 2 eu)
        2     -(1 2), +(1 3)                                   -(1 2 eu), +(1 3 eu)
        3     +(2 1)                      3 us                 +(3 1 us), +(2 1 us)
        4                                 1 apac               +(1 3 apac)

        step  per_region changes (region, orders, customers)
        1     +(eu 2 1)
        2     -(eu 2 1), +(eu 3 1)
        3     +(us 2 2)
        4     +(apac 3 1)
    """
    names = ("orders", "orders_dlq", "customers", "customers_dlq", "enriched", "per_region")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["orders"], partitions=2)
    kafka.create_topic(topics["customers"], partitions=2)
    program = tmp_path / "enriched.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    assert circuit.updating("enriched") and circuit.updating("per_region")
    composed = compose(circuit)
    assert composed.refused == ()
    assert {"per_customer", "enriched"} <= composed.boundaries
    steps: list[dict[str, list[Any]]] = [
        {"orders": [_order("8:00:01", 1), _order("8:00:02", 1), _order("8:00:03", 3),
                    _order("8:00:04", None)],
         "customers": [_customer("8:00:05", 1, "eu"), _customer("8:00:06", 2, "us"),
                       _customer("8:00:07", None, "eu")]},
        {"orders": [_order("8:00:10", 1)]},
        {"orders": [_order("8:00:20", 2)], "customers": [_customer("8:00:21", 3, "us")]},
        {"customers": [_customer("8:00:30", 1, "apac")]},
    ]
    columns = {"enriched": ("customer", "n", "region"),
               "per_region": ("region", "orders", "customers")}
    readers = {}
    for view in columns:
        output = circuit.view(view).output
        assert output is not None and output.format == "changelog"
        readers[view] = OutputReader(view, output)
    per_step: dict[str, list[Counter[Change]]] = {view: [] for view in columns}
    seen: dict[str, int] = dict.fromkeys(columns, 0)

    def after_step() -> None:
        for view, wanted in columns.items():
            records = [readers[view].value(m.value())
                       for m in read_topic(kafka.conf(), topics[view])]
            new = records[seen[view]:]
            seen[view] = len(records)
            per_step[view].append(Counter((r["undo"], *(r[c] for c in wanted)) for r in new))

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)
    assert per_step["enriched"] == [
        Counter([(False, 1, 2, "eu")]),
        Counter([(True, 1, 2, "eu"), (False, 1, 3, "eu")]),
        Counter([(False, 3, 1, "us"), (False, 2, 1, "us")]),
        Counter([(False, 1, 3, "apac")]),
    ]
    assert per_step["per_region"] == [
        Counter([(False, "eu", 2, 1)]),
        Counter([(True, "eu", 2, 1), (False, "eu", 3, 1)]),
        Counter([(False, "us", 2, 2)]),
        Counter([(False, "apac", 3, 1)]),
    ]
    for table in ("orders_dlq", "customers_dlq"):
        assert read_topic(kafka.conf(), topics[table]) == []
    for boundary in ("per_customer", "enriched"):
        assert internal_dead_letters(kafka, tmp_path / "ck", boundary) == []
    # The reference evaluator, in one query, writes the same changes in the same steps.
    oracle = evaluate(circuit, inputs)
    for view, wanted in columns.items():
        assert _oracle(oracle, view, wanted) == per_step[view], view


TWO_AGGREGATES = """
CREATE TABLE orders (
    ts       TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    customer BIGINT
) WITH ('topic' = '{orders}', 'dead_letter' = '{orders_dlq}');

CREATE TABLE customers (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    id     BIGINT,
    region VARCHAR NOT NULL
) WITH ('topic' = '{customers}', 'dead_letter' = '{customers_dlq}');

CREATE LOCAL VIEW per_customer AS
SELECT customer, COUNT(*) AS n FROM orders GROUP BY customer EMIT STREAM;

CREATE LOCAL VIEW regions AS
SELECT id, MAX(region) AS region FROM customers GROUP BY id;

CREATE VIEW enriched WITH ('topic' = '{enriched}') AS
SELECT p.customer, p.n, r.region
FROM per_customer AS p JOIN regions AS r ON p.customer = r.id;

CREATE VIEW least WITH ('topic' = '{least}', 'format' = 'changelog') AS
SELECT customer, MIN(n) AS least, COUNT(*) AS pairs FROM enriched GROUP BY customer;
"""


def test_s16_s18_a_regular_join_of_two_updating_aggregates_weighs_pairs_by_both_on_spark(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """Both sides updating: step 2 changes both rows of customer 1, and the join writes the
    pair before, retracted, and the pair now:

        step  per_customer      regions            enriched changes
        1     +(1 2)            +(1 eu)            +(1 2 eu)
        2     -(1 2), +(1 3)    -(1 eu), +(1 us)   -(1 2 eu), +(1 3 us)

        step  least changes (customer, least, pairs)
        1     +(1 2 1)
        2     -(1 2 1), +(1 3 1)
    """
    names = ("orders", "orders_dlq", "customers", "customers_dlq", "enriched", "least")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["orders"], partitions=2)
    kafka.create_topic(topics["customers"], partitions=2)
    program = tmp_path / "least.sql"
    program.write_text(TWO_AGGREGATES.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    composed = compose(circuit)
    assert composed.refused == ()
    steps: list[dict[str, list[Any]]] = [
        {"orders": [_order("8:00:01", 1), _order("8:00:02", 1)],
         "customers": [_customer("8:00:03", 1, "eu")]},
        {"orders": [_order("8:00:10", 1)], "customers": [_customer("8:00:11", 1, "us")]},
    ]
    columns = {"enriched": ("customer", "n", "region"),
               "least": ("customer", "least", "pairs")}
    readers = {}
    for view in columns:
        output = circuit.view(view).output
        assert output is not None and output.format == "changelog"
        readers[view] = OutputReader(view, output)
    per_step: dict[str, list[Counter[Change]]] = {view: [] for view in columns}
    seen: dict[str, int] = dict.fromkeys(columns, 0)

    def after_step() -> None:
        for view, wanted in columns.items():
            records = [readers[view].value(m.value())
                       for m in read_topic(kafka.conf(), topics[view])]
            new = records[seen[view]:]
            seen[view] = len(records)
            per_step[view].append(Counter((r["undo"], *(r[c] for c in wanted)) for r in new))

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)
    assert per_step["enriched"] == [
        Counter([(False, 1, 2, "eu")]),
        Counter([(True, 1, 2, "eu"), (False, 1, 3, "us")]),
    ]
    assert per_step["least"] == [
        Counter([(False, 1, 2, 1)]),
        Counter([(True, 1, 2, 1), (False, 1, 3, 1)]),
    ]
    oracle = evaluate(circuit, inputs)
    for view, wanted in columns.items():
        assert _oracle(oracle, view, wanted) == per_step[view], view
