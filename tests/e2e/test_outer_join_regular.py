"""OUTER joins without a time bound on Spark (SPEC S16, S18, S19), through the real broker,
step by step against hand-written changes and against the reference evaluator.

No waterline can prove a row unmatched, so a row without a match is written padded with
NULLs at once and retracted when its first match comes. On Spark the join runs on
Tidemark's join operator in its ``regular`` mode (ADR 0017's addendum): each side's rows per
key as a Z-set, each step's touched keys' content after less before written with ``undo``.
The first program joins two tables in one query; the second joins an EMIT STREAM count
(an updating aggregate) with a table, reading the count's changelog through a stage
boundary (ADR 0023).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from table_steps import clock_ms, internal_dead_letters, run_steps

from app.circuit.ir import Circuit
from app.circuit.reference import StepResult, evaluate
from app.connectors.output_reader import OutputReader
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.compose import compose

# 53 s each on 2 shared cores, 85-129 s under load; the second runs two queries, one after
# the other, each step (slow: CI's composed differential draws such joins).
pytestmark = [pytest.mark.e2e]

TABLES = """
CREATE TABLE orders (
    ts       TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    id       BIGINT NOT NULL,
    customer BIGINT
) WITH ('topic' = '{orders}', 'dead_letter' = '{orders_dlq}');

CREATE TABLE customers (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    id   BIGINT,
    name VARCHAR NOT NULL
) WITH ('topic' = '{customers}', 'dead_letter' = '{customers_dlq}');
"""

ENRICHED = TABLES + """
CREATE VIEW enriched WITH ('topic' = '{out}') AS
SELECT o.id AS order_id, o.customer, c.name
FROM orders AS o LEFT JOIN customers AS c ON o.customer = c.id;
"""

LISTED = TABLES + """
CREATE LOCAL VIEW per_customer AS
SELECT customer, COUNT(*) AS n FROM orders GROUP BY customer EMIT STREAM;

CREATE VIEW listed WITH ('topic' = '{out}') AS
SELECT p.customer, p.n, c.name
FROM per_customer AS p LEFT JOIN customers AS c ON p.customer = c.id;
"""

#: A change of a changelog: (undo, its row's values in column order).
Change = tuple[Any, ...]


def _order(clock: str, id_: int, customer: int | None) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "id": id_, "customer": customer}


def _customer(clock: str, id_: int | None, name: str) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "id": id_, "name": name}


def _run(
    kafka: Any,
    unique_topic: Any,
    tmp_path: Path,
    text: str,
    steps: Sequence[Mapping[str, list[Any]]],
    columns: tuple[str, ...],
) -> tuple[Circuit, list[Counter[Change]], list[StepResult], dict[str, str]]:
    """Run ``steps`` on Spark; each step's changes of the output ``out`` (as a Counter: a
    step's records come in no order across the operator's slots), and the reference
    evaluator's results over the same accepted rows."""
    names = ("orders", "orders_dlq", "customers", "customers_dlq", "out")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["orders"], partitions=2)
    kafka.create_topic(topics["customers"], partitions=2)
    # One partition, so that the records read after each step follow those read before
    # (a reader takes several partitions in no fixed order).
    kafka.create_topic(topics["out"], partitions=1)
    program = tmp_path / "outer.sql"
    program.write_text(text.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    view = next(v for v in circuit.views if v.output is not None)
    assert view.output is not None and view.output.format == "changelog"
    assert compose(circuit).refused == ()
    reader = OutputReader(view.name, view.output)
    per_step: list[Counter[Change]] = []
    seen = 0

    def after_step() -> None:
        nonlocal seen
        records = [reader.value(m.value()) for m in read_topic(kafka.conf(), topics["out"])]
        per_step.append(Counter((r["undo"], *(r[c] for c in columns)) for r in records[seen:]))
        seen = len(records)

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, list(steps), after_step=after_step)
    for table in ("orders_dlq", "customers_dlq"):
        assert read_topic(kafka.conf(), topics[table]) == []
    return circuit, per_step, evaluate(circuit, inputs), topics


def _oracle(results: list[StepResult], view: str,
            columns: tuple[str, ...]) -> list[Counter[Change]]:
    return [Counter((r.value["undo"], *(r.value[c] for c in columns))
                    for r in result.outputs[view] if r.value is not None)
            for result in results]


def test_s16_s18_a_left_join_of_tables_retracts_padded_orders_when_the_customer_comes(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """``orders LEFT JOIN customers`` in one query, customer 7 arriving after its orders:

        step  orders                  customers    enriched changes
        1     1 -> 7, 2 -> 7, 3 -> NULL  8 cy        +(1 7 NULL), +(2 7 NULL), +(3 NULL NULL)
        2                             7 ann        -(1 7 NULL), -(2 7 NULL), +(1 7 ann),
                                                   +(2 7 ann)
        3     4 -> 7, 5 -> 8          7 bob        +(1 7 bob), +(2 7 bob), +(4 7 ann),
                                                   +(4 7 bob), +(5 8 cy)

    Step 3: the second customers row of 7 adds pairs only; orders 4 and 5, matched in their
    own step, are never written padded; the NULL customer stays padded.
    """
    columns = ("order_id", "customer", "name")
    steps = [
        {"orders": [_order("8:00:01", 1, 7), _order("8:00:02", 2, 7),
                    _order("8:00:03", 3, None)],
         "customers": [_customer("8:00:04", 8, "cy")]},
        {"customers": [_customer("8:00:10", 7, "ann")]},
        {"orders": [_order("8:00:20", 4, 7), _order("8:00:21", 5, 8)],
         "customers": [_customer("8:00:22", 7, "bob")]},
    ]
    circuit, per_step, oracle, _ = _run(kafka, unique_topic, tmp_path, ENRICHED, steps, columns)
    assert per_step == [
        Counter([(False, 1, 7, None), (False, 2, 7, None), (False, 3, None, None)]),
        Counter([(True, 1, 7, None), (True, 2, 7, None), (False, 1, 7, "ann"),
                 (False, 2, 7, "ann")]),
        Counter([(False, 1, 7, "bob"), (False, 2, 7, "bob"), (False, 4, 7, "ann"),
                 (False, 4, 7, "bob"), (False, 5, 8, "cy")]),
    ]
    assert _oracle(oracle, "enriched", columns) == per_step


@pytest.mark.slow
def test_s16_s18_a_left_join_of_an_emit_stream_count_with_customers_on_spark(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """``per_customer LEFT JOIN customers``: the count's changes come through a stage
    boundary, each retraction taking back the pair (or padded row) it made:

        step  orders       customers   per_customer changes       listed changes
        1     7, 7, 9                  +(7 2), +(9 1)             +(7 2 NULL), +(9 1 NULL)
        2                  7 ann                                  -(7 2 NULL), +(7 2 ann)
        3     7, 9         9 bo        -(7 2), +(7 3), -(9 1),    -(7 2 ann), +(7 3 ann),
                                       +(9 2)                     -(9 1 NULL), +(9 2 bo)

    Step 3: customer 9 and the count's new row (9 2) meet in one step, so (9 2 NULL) is
    never written.
    """
    columns = ("customer", "n", "name")
    steps = [
        {"orders": [_order("8:00:01", 1, 7), _order("8:00:02", 2, 7), _order("8:00:03", 3, 9)]},
        {"customers": [_customer("8:00:10", 7, "ann")]},
        {"orders": [_order("8:00:20", 4, 7), _order("8:00:21", 5, 9)],
         "customers": [_customer("8:00:22", 9, "bo")]},
    ]
    circuit, per_step, oracle, _ = _run(kafka, unique_topic, tmp_path, LISTED, steps, columns)
    assert "per_customer" in compose(circuit).boundaries
    assert per_step == [
        Counter([(False, 7, 2, None), (False, 9, 1, None)]),
        Counter([(True, 7, 2, None), (False, 7, 2, "ann")]),
        Counter([(True, 7, 2, "ann"), (False, 7, 3, "ann"), (True, 9, 1, None),
                 (False, 9, 2, "bo")]),
    ]
    assert _oracle(oracle, "listed", columns) == per_step
    assert internal_dead_letters(kafka, tmp_path / "ck", "per_customer") == []
