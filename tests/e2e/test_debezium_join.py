"""Flink's CDC enrichment on Spark, through the real broker (SPEC S16, S18, S19; ADR 0030):
an insert-only stream of orders joined with a Debezium table of customers by a regular
join, in Flink's dialect, as a Flink user writes it. The join reads ``customers`` as every
reader of a changelog table does, its latest row per key (the generated view
``customers.latest``, an aggregate in the table's query), so it is a regular join of an
updating relation: it runs on Tidemark's join operator (each side's rows per key) in a
later query, reading the latest rows' changes and the orders through stage boundaries
(ADR 0023), and writes a changelog (a Debezium ``enriched`` topic).

    step  orders (id, customer, amount)   customers (events)      enriched changes
    1     1 (1, 10)                       c 2 north               (none: no customer 1)
    2     2 (2, 20)                       c 1 north               +(2 20 north), +(1 10 north)
    3                                     u 1 north -> south,     -(1 10 north), +(1 10 south),
                                          d 2, its tombstone      -(2 20 north)
    4     3 (2, 30)                       c 2 east                +(2 20 east), +(3 30 east)

Step 3's deletion takes customer 2's row out of the join, so order 3 meets only the
re-created row. Hand-written expectations, and the reference evaluator step by step (S19:
the same changes, here in the same steps).
"""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from table_steps import clock_ms, internal_dead_letters, run_steps

from app.circuit.ir import Circuit
from app.circuit.reference import StepInput, StepResult, evaluate
from app.connectors.output_reader import OutputReader
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.compose import Composed, compose

# Slow (minutes on 2 cores with the broker's start): every step runs the orders' and the
# latest rows' queries and then the join's, one after the other (ADR 0023).
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROGRAM = """
CREATE TABLE orders (
    id       BIGINT,
    customer BIGINT,
    amount   DECIMAL(10, 2),
    ts       TIMESTAMP(3),
    WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = '{orders}', 'format' = 'json');

CREATE TABLE customers (
    id     BIGINT,
    name   STRING,
    region STRING,
    PRIMARY KEY (id) NOT ENFORCED
) WITH ('connector' = 'kafka', 'topic' = '{customers}', 'format' = 'debezium-json');

CREATE TABLE enriched (
    id     BIGINT,
    amount DECIMAL(10, 2),
    region STRING
) WITH ('connector' = 'kafka', 'topic' = '{enriched}', 'format' = 'debezium-json');

INSERT INTO enriched
SELECT o.id, o.amount, c.region FROM orders o JOIN customers c ON o.customer = c.id;
"""

#: A change of the changelog: (undo, id, amount, region).
Change = tuple[bool, int, Decimal, str]


def _order(id_: int, customer: int, amount: int, clock: str) -> tuple[str, None, bytes]:
    """An order as a JSON record with no key (the producer spreads them)."""
    value = {"id": id_, "customer": customer, "amount": amount, "ts": clock_ms(clock)}
    return ("record", None, json.dumps(value).encode())


def _customer(op: str, seconds: int, id_: int, before: str | None,
              after: str | None) -> tuple[str, bytes, bytes]:
    """A Debezium change event of customer ``id_`` (its region before and after), keyed
    as Debezium keys it."""

    def image(region: str | None) -> dict[str, Any] | None:
        return None if region is None else {"id": id_, "name": f"c{id_}", "region": region}

    event = {"before": image(before), "after": image(after), "op": op,
             "source": {"ts_ms": seconds * 1_000, "db": "shop", "table": "customers"},
             "ts_ms": seconds * 1_000 + 150}
    return ("record", json.dumps({"id": id_}).encode(), json.dumps(event).encode())


STEPS: list[dict[str, list[Any]]] = [
    {"orders": [_order(1, 1, 10, "9:00:10")],
     "customers": [_customer("c", 10, 2, None, "north")]},
    {"orders": [_order(2, 2, 20, "9:00:20")],
     "customers": [_customer("c", 20, 1, None, "north")]},
    {"customers": [_customer("u", 30, 1, "north", "south"),
                   _customer("d", 31, 2, "north", None),
                   ("record", json.dumps({"id": 2}).encode(), None)]},
    {"orders": [_order(3, 2, 30, "9:00:40")],
     "customers": [_customer("c", 40, 2, None, "east")]},
]


def _oracle(results: list[StepResult]) -> list[Counter[Change]]:
    return [Counter((r.value["undo"], r.value["id"], r.value["amount"], r.value["region"])
                    for r in result.outputs["enriched"] if r.value is not None)
            for result in results]


def _compiled(kafka: Any, unique_topic: Any, tmp_path: Path, text: str,
              output: str) -> tuple[dict[str, str], Circuit, Composed]:
    """The program ``text`` over fresh topics (``output``: the table it writes, on one
    partition, so that the records read after each step follow those read before),
    compiled and composed (nothing refused)."""
    topics = {name: unique_topic(name) for name in ("orders", "customers", output)}
    kafka.create_topic(topics["orders"], partitions=2)
    kafka.create_topic(topics["customers"], partitions=2)
    kafka.create_topic(topics[output], partitions=1)
    program = tmp_path / f"{output}.sql"
    program.write_text(text.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    composed = compose(circuit)
    assert composed.refused == ()
    return topics, circuit, composed


def _enriched(kafka: Any, unique_topic: Any, tmp_path: Path,
              text: str) -> tuple[Circuit, list[Counter[Change]], list[StepInput]]:
    """Run ``STEPS`` through ``text`` (a program writing the changelog ``enriched``) on
    Spark, checking it runs as composed (the orders and the latest rows each through a
    stage boundary); each step's changes of ``enriched`` (a Counter: a step's records come
    in no order across the join's slots) and the reference evaluator's inputs."""
    topics, circuit, composed = _compiled(kafka, unique_topic, tmp_path, text, "enriched")
    assert circuit.dialect == "flink"
    assert circuit.view("enriched").sources == ("orders", "customers.latest")
    assert composed.boundaries == {"orders", "customers.latest"}
    output = circuit.view("enriched").output
    assert output is not None and output.format == "changelog"
    reader = OutputReader("enriched", output)
    per_step: list[Counter[Change]] = []
    seen = 0

    def after_step() -> None:
        nonlocal seen
        records = [reader.value(m.value()) for m in read_topic(kafka.conf(), topics["enriched"])]
        per_step.append(Counter((r["undo"], r["id"], r["amount"], r["region"])
                                for r in records[seen:]))
        seen = len(records)

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS, after_step=after_step)
    for table in ("orders", "customers"):
        assert read_topic(kafka.conf(), circuit.table(table).dead_letter_topic) == []
    for boundary in ("orders", "customers.latest"):
        assert internal_dead_letters(kafka, tmp_path / "ck", boundary) == []
    return circuit, per_step, inputs


def test_s16_s18_flinks_cdc_join_pairs_each_order_with_its_customers_latest_row(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    circuit, per_step, inputs = _enriched(kafka, unique_topic, tmp_path, PROGRAM)
    ten, twenty, thirty = Decimal(10), Decimal(20), Decimal(30)
    assert per_step == [
        Counter(),
        Counter([(False, 2, twenty, "north"), (False, 1, ten, "north")]),
        Counter([(True, 1, ten, "north"), (False, 1, ten, "south"),
                 (True, 2, twenty, "north")]),
        Counter([(False, 2, twenty, "east"), (False, 3, thirty, "east")]),
    ]
    # The reference evaluator, in one query, writes the same changes in the same steps.
    assert _oracle(evaluate(circuit, inputs)) == per_step


PER_REGION = PROGRAM.split("CREATE TABLE enriched")[0] + """
CREATE TABLE per_region (
    region STRING,
    total  DECIMAL(38, 2),
    PRIMARY KEY (region) NOT ENFORCED
) WITH ('connector' = 'upsert-kafka', 'topic' = '{per_region}', 'key.format' = 'json',
        'value.format' = 'json');

INSERT INTO per_region
SELECT c.region, SUM(o.amount)
FROM orders o JOIN customers c ON o.customer = c.id
GROUP BY c.region;
"""


def test_s16_s18_flinks_sum_per_region_over_the_cdc_join_in_one_select(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """The same orders and customers, summed per region in the join's own SELECT (ADR
    0031: the joined rows are a generated view, ``per_region.o_join_c``, that the
    aggregate reads through a stage boundary), into an upsert-kafka table keyed by region:

        step  join changes (above)                      per_region (upsert by region)
        1     (none)                                    (none)
        2     +(2 20 north), +(1 10 north)              north 30
        3     -(1 10 north), +(1 10 south),             north deleted (tombstone), south 10
              -(2 20 north)
        4     +(2 20 east), +(3 30 east)                east 50
    """
    topics, circuit, composed = _compiled(kafka, unique_topic, tmp_path, PER_REGION,
                                          "per_region")
    assert circuit.view("per_region").sources == ("per_region.o_join_c",)
    assert "per_region.o_join_c" in composed.boundaries
    output = circuit.view("per_region").output
    assert output is not None and output.format == "upsert"
    reader = OutputReader("per_region", output)
    per_step: list[list[tuple[str, Decimal | None]]] = []
    seen = 0

    def after_step() -> None:
        nonlocal seen
        records = read_topic(kafka.conf(), topics["per_region"])
        per_step.append(sorted(
            (json.loads(m.key())["region"],
             None if m.value() is None else reader.value(m.value())["total"])
            for m in records[seen:]))
        seen = len(records)

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS, after_step=after_step)
    assert per_step == [
        [],
        [("north", Decimal(30))],
        [("north", None), ("south", Decimal(10))],
        [("east", Decimal(50))],
    ]
    for table in ("orders", "customers"):
        assert read_topic(kafka.conf(), circuit.table(table).dead_letter_topic) == []
    assert internal_dead_letters(kafka, tmp_path / "ck", "per_region.o_join_c") == []
    oracle = [sorted(((r.key or {})["region"], None if r.value is None else r.value["total"])
                     for r in result.outputs["per_region"])
              for result in evaluate(circuit, inputs)]
    assert oracle == per_step


LEFT = PROGRAM.replace("FROM orders o JOIN customers c", "FROM orders o LEFT JOIN customers c")


def test_s16_s18_flinks_cdc_left_join_pads_orders_until_their_customer_comes(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """The same program as a LEFT JOIN: an order without its customer's latest row is
    written padded with NULLs at once and retracted when the customer comes; a deleted
    customer's orders are padded again (S16, S18). The join runs on Tidemark's join
    operator in its regular mode (ADR 0017's addendum), reading the latest rows' changes
    through a stage boundary:

        step  enriched changes
        1     +(1 10 NULL)
        2     -(1 10 NULL), +(1 10 north), +(2 20 north)
        3     -(1 10 north), +(1 10 south), -(2 20 north), +(2 20 NULL)
        4     -(2 20 NULL), +(2 20 east), +(3 30 east)

    Step 4: order 3 and the re-created customer 2 come in one step, so order 3 is never
    written padded.
    """
    circuit, per_step, inputs = _enriched(kafka, unique_topic, tmp_path, LEFT)
    ten, twenty, thirty = Decimal(10), Decimal(20), Decimal(30)
    assert per_step == [
        Counter([(False, 1, ten, None)]),
        Counter([(True, 1, ten, None), (False, 1, ten, "north"), (False, 2, twenty, "north")]),
        Counter([(True, 1, ten, "north"), (False, 1, ten, "south"),
                 (True, 2, twenty, "north"), (False, 2, twenty, None)]),
        Counter([(True, 2, twenty, None), (False, 2, twenty, "east"),
                 (False, 3, thirty, "east")]),
    ]
    assert _oracle(evaluate(circuit, inputs)) == per_step


UPSERT = PROGRAM.split("CREATE TABLE enriched")[0] + """
CREATE TABLE enriched (
    order_id BIGINT,
    amount   DECIMAL(10, 2),
    region   STRING,
    PRIMARY KEY (order_id) NOT ENFORCED
) WITH ('connector' = 'upsert-kafka', 'topic' = '{enriched}', 'key.format' = 'json',
        'value.format' = 'json');

INSERT INTO enriched
SELECT o.id, o.amount, c.region FROM orders o LEFT JOIN customers c ON o.customer = c.id;
"""


def test_s13_s18_flinks_cdc_left_join_into_an_upsert_kafka_table_by_its_primary_key(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """The LEFT JOIN above INSERT INTO an upsert-kafka table keyed by order id, as Flink
    writes it (Flink puts a SinkUpsertMaterializer before the sink): the join's changes go
    through a stage boundary to the generated ``enriched.upsert`` (ADR 0032), which keeps
    each order's latest row and writes it when it changes:

        step  join changes (above)                      enriched (upsert by order_id)
        1     +(1 10 NULL)                              1 -> (10, NULL)
        2     -(1 10 NULL), +(1 10 north), +(2 20 north) 1 -> (10, north), 2 -> (20, north)
        3     -(1 10 north), +(1 10 south),             1 -> (10, south), 2 -> (20, NULL)
              -(2 20 north), +(2 20 NULL)
        4     -(2 20 NULL), +(2 20 east), +(3 30 east)  2 -> (20, east), 3 -> (30, east)
    """
    topics, circuit, composed = _compiled(kafka, unique_topic, tmp_path, UPSERT, "enriched")
    assert circuit.view("enriched.upsert").sources == ("enriched",)
    assert composed.boundaries == {"orders", "customers.latest", "enriched"}
    output = circuit.view("enriched.upsert").output
    assert output is not None and output.format == "upsert"
    reader = OutputReader("enriched.upsert", output)
    Row = tuple[int, tuple[Decimal, str | None] | None]
    per_step: list[list[Row]] = []
    seen = 0

    def after_step() -> None:
        nonlocal seen
        records = read_topic(kafka.conf(), topics["enriched"])
        rows: list[Row] = []
        for m in records[seen:]:
            value = None if m.value() is None else reader.value(m.value())
            rows.append((json.loads(m.key())["order_id"],
                         None if value is None else (value["amount"], value["region"])))
        per_step.append(sorted(rows))
        seen = len(records)

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS, after_step=after_step)
    ten, twenty, thirty = Decimal(10), Decimal(20), Decimal(30)
    assert per_step == [
        [(1, (ten, None))],
        [(1, (ten, "north")), (2, (twenty, "north"))],
        [(1, (ten, "south")), (2, (twenty, None))],
        [(2, (twenty, "east")), (3, (thirty, "east"))],
    ]
    for table in ("orders", "customers"):
        assert read_topic(kafka.conf(), circuit.table(table).dead_letter_topic) == []
    for boundary in ("orders", "customers.latest", "enriched"):
        assert internal_dead_letters(kafka, tmp_path / "ck", boundary) == []
    oracle = [sorted(((r.key or {})["order_id"],
                      None if r.value is None else (r.value["amount"], r.value["region"]))
                     for r in result.outputs["enriched.upsert"])
              for result in evaluate(circuit, inputs)]
    assert oracle == per_step
