"""An upsert of updating rows that do not aggregate (SPEC S13, S18; ADR 0032): a view
written as ``'upsert'`` with a ``'key'`` of its own, or an upsert-kafka table INSERT INTO
writes by its PRIMARY KEY, over a join whose rows are updated. The compiler keeps the
view's changes as a local view and writes its upsert from the generated ``<view>.upsert``:
per key, the latest-added row still held, a tombstone once none is.

Expectations are computed by hand from the join's changes (test_reference_changelog_joins
shows them step by step); each step writes one record per key whose row changed.
"""

from __future__ import annotations

import pytest
from test_reference_changelog_joins import CUSTOMERS, ORDERS, STEPS, run

from app.circuit.aggregates import Held
from app.circuit.ir import HELD, SqlType
from app.circuit.reference import StepResult
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.compose import compose

LEFT = CUSTOMERS + ORDERS + """
CREATE VIEW enriched WITH ('topic' = 'enriched', 'format' = 'upsert', 'key' = 'id') AS
SELECT o.id, o.amount, c.region FROM orders AS o LEFT JOIN customers AS c ON o.customer = c.id;
"""

#: An upsert record: the key's id, then (amount, region), or None for a tombstone.
Upsert = tuple[int, tuple[int, str | None] | None]


def upserts(result: StepResult, view: str) -> list[Upsert]:
    return sorted(((r.key or {})["id"],
                   None if r.value is None else (r.value["amount"], r.value["region"]))
                  for r in result.outputs[view])


def test_s13_s18_an_upsert_of_a_left_join_writes_each_orders_latest_row() -> None:
    """The LEFT JOIN's changes (an order padded, then paired, moved, padded again) upserted
    by order id:

        step  enriched changes                         upsert by id
        1     +(1 10 NULL)                             1 -> (10, NULL)
        2     -(1 10 NULL), +(2 20 north),             1 -> (10, north), 2 -> (20, north)
              +(1 10 north)
        3     -(1 10 north), +(1 10 south)             1 -> (10, south)
        4     -(2 20 north), +(2 20 NULL)              2 -> (20, NULL)
        5     +(3 30 NULL), +(4 40 NULL)               3 -> (30, NULL), 4 -> (40, NULL)
        6     -(2 20 NULL), -(3 30 NULL),              2 -> (20, east), 3 -> (30, east)
              +(2 20 east), +(3 30 east)
    """
    circuit = compile_program("p.sql", text=LEFT)
    rows, upsert = circuit.view("enriched"), circuit.view("enriched.upsert")
    assert rows.output is None
    assert upsert.sources == ("enriched",)
    assert upsert.output is not None and upsert.output.format == "upsert"
    assert upsert.output.topic == "enriched" and upsert.output.key_columns == ("id",)
    assert [c.name for c in upsert.columns] == ["id", "amount", "region"]
    composed = compose(circuit)
    assert composed.refused == ()
    assert "enriched" in composed.boundaries
    results = run(circuit, STEPS)
    assert [upserts(r, "enriched.upsert") for r in results] == [
        [(1, (10, None))],
        [(1, (10, "north")), (2, (20, "north"))],
        [(1, (10, "south"))],
        [(2, (20, None))],
        [(3, (30, None)), (4, (40, None))],
        [(2, (20, "east")), (3, (30, "east"))],
    ]
    assert all(not r.dead_letters for r in results)


INNER = LEFT.replace("LEFT JOIN", "JOIN")


def test_s13_s18_a_key_whose_rows_are_all_taken_back_is_deleted() -> None:
    """The INNER join: customer 2's delete takes order 2's pair back, and its key has no
    row left, so the upsert writes its tombstone; order 3 of the deleted customer writes
    nothing until customer 2 is created again."""
    results = run(compile_program("p.sql", text=INNER), STEPS)
    assert [upserts(r, "enriched.upsert") for r in results] == [
        [],
        [(1, (10, "north")), (2, (20, "north"))],
        [(1, (10, "south"))],
        [(2, None)],
        [],
        [(2, (20, "east")), (3, (30, "east"))],
    ]


FLINK = """
CREATE TABLE orders (
    id BIGINT, customer BIGINT, amount DECIMAL(10, 2), ts TIMESTAMP(3),
    WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'orders', 'format' = 'json');
CREATE TABLE customers (
    id BIGINT, name STRING, region STRING, PRIMARY KEY (id) NOT ENFORCED
) WITH ('connector' = 'kafka', 'topic' = 'customers', 'format' = 'debezium-json');
CREATE TABLE enriched (
    order_id BIGINT, amount DECIMAL(10, 2), region STRING, PRIMARY KEY (order_id) NOT ENFORCED
) WITH ('connector' = 'upsert-kafka', 'topic' = 'enriched', 'key.format' = 'json',
        'value.format' = 'json');
INSERT INTO enriched
SELECT o.id, o.amount, c.region FROM orders o LEFT JOIN customers c ON o.customer = c.id;
"""


def test_s13_flinks_left_join_into_an_upsert_kafka_table_is_kept_by_its_primary_key() -> None:
    """Flink's CDC enrichment INSERT INTO an upsert-kafka table, as written: Flink puts a
    SinkUpsertMaterializer before the sink; Tidemark the generated ``enriched.upsert``,
    keyed by the table's PRIMARY KEY."""
    circuit = compile_program("flink.sql", text=FLINK)
    upsert = circuit.view("enriched.upsert")
    assert upsert.output is not None and upsert.output.format == "upsert"
    assert upsert.output.key_columns == ("order_id",)
    assert compose(circuit).refused == ()


def test_held_keeps_the_latest_added_row_of_those_held() -> None:
    """HELD over a Z-set of whole rows: the latest insertion wins; taking it back shows the
    one before; a retraction before its insertion (a count below zero) holds nothing."""
    held = Held(SqlType("VARCHAR", True))
    held.add((1, 7, "a"), 1)
    held.add((1, 7, "b"), 2)
    assert held.result() == "b"
    held.add((1, 7, "b"), 3, -1)
    assert held.result() == "a"
    held.add((1, 7, "c"), 4, -1)
    held.add((1, 7, "a"), 5)  # a second copy of "a": now its latest arrival
    assert held.result() == "a"
    held.add((1, 7, "c"), 6)  # the retraction's insertion: cancelled, never held
    assert held.result() == "a"
    held.add((1, 7, "a"), 7, -1)
    held.add((1, 7, "a"), 8, -1)
    assert held.result() is None
    assert HELD == "HELD"


@pytest.mark.parametrize(("options", "message", "fix"), [
    ("'format' = 'upsert'", "view enriched is a LEFT OUTER join without a time bound",
     "or declare 'key' = '<columns of one row>'"),
    ("'format' = 'upsert', 'key' = 'nope'", "unknown column nope in 'key' of view enriched",
     "available columns: id, amount, region"),
])
def test_l7_an_upsert_of_updating_rows_needs_a_key_of_its_columns(
    options: str, message: str, fix: str,
) -> None:
    text = LEFT.replace("'format' = 'upsert', 'key' = 'id'", options)
    with pytest.raises(ProgramError) as info:
        compile_program("p.sql", text=text)
    found = info.value.diagnostics[0]
    assert message in found.message
    assert found.fix is not None and fix in found.fix


def test_l7_an_upsert_of_rows_written_once_is_an_append() -> None:
    text = ORDERS + ("CREATE VIEW v WITH ('topic' = 'v', 'format' = 'upsert', 'key' = 'id') "
                     "AS SELECT id, amount FROM orders;\n")
    with pytest.raises(ProgramError) as info:
        compile_program("p.sql", text=text)
    found = info.value.diagnostics[0]
    assert "neither aggregates nor updates its rows" in found.message
    assert found.fix is not None and "use 'format' = 'append'" in found.fix
