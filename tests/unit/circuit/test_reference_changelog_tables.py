"""A changelog table read as its latest row per key (SPEC S16, S18; ADR 0030): the views
of a Debezium table, other than a temporal join's versioned side, read the generated view
``<table>.latest``, an updating relation, as Flink reads a ``debezium-json`` table as a
changelog. Expectations are computed by hand from the events: an update moves a key from
its old group to its new one (a retraction and an insertion), a delete takes it out (and
its tombstone changes nothing more), a re-create puts it back, a late event is a dead
letter and changes nothing (S5, S6), and of two changes of a key at the same time the
later arrival wins (S16's versions)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.circuit.ir import DELETION_COLUMN
from app.circuit.reference import Deletion, StepInput, StepResult, evaluate
from app.connectors.late_gate import LateGate
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec
from app.runtime.planner.compose import compose

NOW = 1_800_000_000_000

CUSTOMERS = """
CREATE TABLE customers (
    changed TIMESTAMP NOT NULL METADATA FROM 'value.source.timestamp'
            LATENESS INTERVAL '1' SECOND,
    id      BIGINT NOT NULL,
    region  VARCHAR NOT NULL,
    name    VARCHAR,
    PRIMARY KEY (id) NOT ENFORCED
) WITH ('topic' = 'customers', 'format' = 'debezium-json');
"""

PROGRAM = CUSTOMERS + """
CREATE VIEW per_region WITH ('topic' = 'per_region', 'format' = 'changelog') AS
SELECT region, COUNT(*) AS customers FROM customers GROUP BY region;

CREATE VIEW north WITH ('topic' = 'north') AS
SELECT id, name FROM customers WHERE region = 'north';
"""


def event(op: str, source_ms: int, before: Any = None, after: Any = None) -> bytes:
    """A Debezium change event as the JsonConverter writes it without schemas."""
    return json.dumps({"before": before, "after": after, "op": op,
                       "source": {"ts_ms": source_ms, "db": "shop", "table": "customers"},
                       "ts_ms": source_ms + 5}).encode()


def customer(id_: int, region: str, name: str | None = None) -> dict[str, Any]:
    return {"id": id_, "region": region, "name": name or f"c{id_}"}


def decoded(gate: LateGate, values: list[bytes | None]) -> list[Any]:
    """The gate's rows and deletions of a step's records, as the source hands them on
    (tombstones after a delete event are skipped: ADR 0028)."""
    out: list[Any] = []
    for value in values:
        verdict = gate.classify(value, None)
        if verdict.kind == "ok":
            out.append(verdict.row)
        elif verdict.kind == "delete":
            assert verdict.row is not None
            out.append(Deletion(verdict.row))
        else:
            assert verdict.kind == "skipped", verdict
    return out


#: Steps of events (times in seconds): a snapshot and two creates; a move of customer 2 from
#: north to south; a delete of 1 and its tombstone; 1 re-created in south; a late update of
#: 3 (at 5 s, below the waterline 39 s) and two updates of 3 at one time (east, then west).
EVENTS: list[list[bytes | None]] = [
    [event("r", 10_000, after=customer(1, "north")),
     event("c", 10_000, after=customer(2, "north")),
     event("c", 10_000, after=customer(3, "south"))],
    [event("u", 20_000, before=customer(2, "north"), after=customer(2, "south"))],
    [event("d", 30_000, before=customer(1, "north")), None],
    [event("c", 40_000, after=customer(1, "south", "again"))],
    [event("u", 5_000, before=customer(3, "south"), after=customer(3, "north")),
     event("u", 50_000, before=customer(3, "south"), after=customer(3, "east")),
     event("u", 50_000, before=customer(3, "east"), after=customer(3, "west"))],
]


def run(tmp_path: Path, program: str = PROGRAM) -> list[StepResult]:
    path = tmp_path / "customers.sql"
    path.write_text(program, encoding="utf-8")
    circuit = compile_program(path)
    gate = LateGate(source_spec(circuit.table("customers")), {}, NOW)
    # The reference gates the rows itself: the gate here only decodes, with no waterline.
    return evaluate(circuit, [StepInput({"customers": decoded(gate, values)})
                              for values in EVENTS])


def changes(result: StepResult, view: str, *columns: str) -> list[tuple[Any, ...]]:
    return [(bool((r.value or {})["undo"]), *((r.value or {})[c] for c in columns))
            for r in result.outputs[view]]


def test_s18_a_count_per_region_follows_each_keys_latest_row(tmp_path: Path) -> None:
    results = run(tmp_path)
    assert [changes(r, "per_region", "region", "customers") for r in results] == [
        [(False, "north", 2), (False, "south", 1)],
        # 2 moves: north loses it, south gets it.
        [(True, "north", 2), (False, "north", 1), (True, "south", 1), (False, "south", 2)],
        # 1 is deleted: north has none left (its tombstone changes nothing more).
        [(True, "north", 1)],
        # 1 is created again, in south.
        [(True, "south", 2), (False, "south", 3)],
        # The late update is a dead letter; of 3's two updates at 50 s the later one wins.
        [(True, "south", 3), (False, "south", 2), (False, "west", 1)],
    ]
    (late,) = results[4].dead_letters
    assert (late.reason, late.column, late.value, late.waterline) == (
        "late", "changed", 5_000, 39_000)
    assert all(not r.dead_letters for r in results[:4])
    # The latest row per key holds one group per key ever seen, a deleted one included.
    assert results[-1].state_rows["customers.latest"] == 3


def test_s18_a_filter_of_the_table_writes_the_changelog_of_its_rows(tmp_path: Path) -> None:
    results = run(tmp_path)
    assert [changes(r, "north", "id", "name") for r in results] == [
        [(False, 1, "c1"), (False, 2, "c2")],
        [(True, 2, "c2")],
        [(True, 1, "c1")],
        [],
        [],
    ]


def test_s16_a_temporal_join_still_reads_the_tables_versions(tmp_path: Path) -> None:
    """The versioned side reads the table itself: no latest view joins the circuit."""
    program = CUSTOMERS + """
CREATE TABLE orders (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    customer BIGINT NOT NULL
) WITH ('topic' = 'orders', 'format' = 'json');
CREATE VIEW placed WITH ('topic' = 'placed') AS
SELECT o.ts, o.customer, c.region FROM orders AS o
JOIN customers FOR SYSTEM_TIME AS OF o.ts AS c ON o.customer = c.id;
"""
    path = tmp_path / "joined.sql"
    path.write_text(program, encoding="utf-8")
    circuit = compile_program(path)
    assert [v.name for v in circuit.views] == ["placed"]
    assert circuit.view("placed").sources == ("orders", "customers")


def test_s18_explain_shows_the_latest_row_per_key(tmp_path: Path) -> None:
    path = tmp_path / "p.sql"
    path.write_text(PROGRAM, encoding="utf-8")
    circuit = compile_program(path)
    latest = circuit.view("customers.latest")
    assert latest.reads_deletions and latest.key == ("id",) and latest.output is None
    assert latest.time_attributes == () and circuit.updating("customers.latest")
    assert [c.name for c in latest.columns] == ["changed", "id", "region", "name"]
    assert DELETION_COLUMN not in [c.name for c in latest.columns]
    assert circuit.view("per_region").sources == ("customers.latest",)
    assert "never freed" in latest.state.description


@pytest.mark.parametrize(("query", "message"), [
    ("SELECT c.id FROM customers AS c JOIN customers AS d ON c.id = d.id\n"
     "AND d.changed BETWEEN c.changed - INTERVAL '1' MINUTE AND c.changed",
     "joins table customers, a changelog table read as its latest row per key"),
    ("SELECT window_start, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE customers, "
     "DESCRIPTOR(changed), INTERVAL '1' MINUTE)) GROUP BY window_start, window_end",
     "TUMBLE windows of table customers, a changelog table read as its latest row per key"),
    ("SELECT id FROM customers", "'changelog' writes and 'append' cannot"),
])
def test_l7_what_reads_no_latest_row_is_refused(tmp_path: Path, query: str,
                                                message: str) -> None:
    """An OUTER join without a time bound reads no updating relation, and the latest row
    per key has no time attribute (a key's row changes whenever a change of it comes): no
    window on it."""
    path = tmp_path / "p.sql"
    fmt = ", 'format' = 'append'" if query == "SELECT id FROM customers" else ""
    path.write_text(CUSTOMERS + f"CREATE VIEW v WITH ('topic' = 'v'{fmt}) AS\n{query};\n",
                    encoding="utf-8")
    with pytest.raises(ProgramError) as info:
        compile_program(path)
    found = info.value.diagnostics[0]
    assert message in found.message
    assert found.position.line > 9


def test_s18_flinks_cdc_count_ports_as_written(tmp_path: Path) -> None:
    """Flink's changelog source counted into an upsert-kafka table compiles as written: the
    count reads the latest row per key and writes upserts keyed by region."""
    path = tmp_path / "flink.sql"
    path.write_text("""
CREATE TABLE customers (
    id BIGINT, region STRING,
    changed TIMESTAMP(3) METADATA FROM 'value.source.timestamp' VIRTUAL,
    WATERMARK FOR changed AS changed - INTERVAL '5' SECOND,
    PRIMARY KEY (id) NOT ENFORCED
) WITH ('connector' = 'kafka', 'topic' = 'customers', 'value.format' = 'debezium-json');
CREATE TABLE per_region (region STRING, n BIGINT, PRIMARY KEY (region) NOT ENFORCED)
WITH ('connector' = 'upsert-kafka', 'topic' = 'per_region', 'key.format' = 'json',
      'value.format' = 'json');
INSERT INTO per_region SELECT region, COUNT(*) FROM customers GROUP BY region;
""", encoding="utf-8")
    circuit = compile_program(path)
    assert circuit.dialect == "flink"
    view = circuit.view("per_region")
    assert view.sources == ("customers.latest",)
    assert view.output is not None and view.output.format == "upsert"


def test_s16_s18_one_table_joined_as_of_and_counted(tmp_path: Path) -> None:
    """The temporal join reads the versions, the count the latest row per key, side by
    side: customer 2's order at 15 s finds north (its move is at 20 s), while the count
    moves it at once."""
    program = PROGRAM + """
CREATE TABLE orders (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    customer BIGINT NOT NULL
) WITH ('topic' = 'orders', 'format' = 'json');
CREATE VIEW placed WITH ('topic' = 'placed') AS
SELECT o.ts, o.customer, c.region FROM orders AS o
JOIN customers FOR SYSTEM_TIME AS OF o.ts AS c ON o.customer = c.id;
"""
    path = tmp_path / "both.sql"
    path.write_text(program, encoding="utf-8")
    circuit = compile_program(path)
    assert circuit.view("placed").sources == ("orders", "customers")
    gate = LateGate(source_spec(circuit.table("customers")), {}, NOW)
    orders = [[], [{"ts": 15_000, "customer": 2}], [], [], []]
    results = evaluate(circuit, [
        StepInput({"customers": decoded(gate, values), "orders": orders[i]})
        for i, values in enumerate(EVENTS)])
    placed = [(r.value or {})["region"] for result in results
              for r in result.outputs["placed"]]
    assert placed == ["north"]
    assert [changes(r, "per_region", "region", "customers") for r in results][1] == [
        (True, "north", 2), (False, "north", 1), (True, "south", 1), (False, "south", 2)]
    # On Spark the join's query holds both tables, and the table cannot move on through a
    # boundary (its deletions would be lost): refused before anything runs, with the way.
    (refused,) = compose(circuit).refused
    assert "latest row per key of changelog table customers" in refused.message
    assert refused.fix is not None and "two programs" in refused.fix


def test_s19_on_spark_the_latest_row_per_key_is_read_through_a_boundary(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.sql"
    path.write_text(PROGRAM, encoding="utf-8")
    composed = compose(compile_program(path))
    assert composed.refused == ()
    assert composed.boundaries == {"customers.latest"}


def test_s18_without_lateness_the_latest_row_is_the_last_arrival(tmp_path: Path) -> None:
    """A changelog table without a LATENESS column orders a key's changes by arrival alone:
    the update at 5 s after the one at 50 s still wins, and nothing is late."""
    time_column = CUSTOMERS[CUSTOMERS.index("    changed"):CUSTOMERS.index("    id")]
    no_time = CUSTOMERS.replace(time_column, "")
    path = tmp_path / "p.sql"
    path.write_text(no_time + """
CREATE VIEW per_region WITH ('topic' = 'per_region', 'format' = 'changelog') AS
SELECT region, COUNT(*) AS customers FROM customers GROUP BY region;
""", encoding="utf-8")
    circuit = compile_program(path)
    assert not circuit.table("customers").lateness
    gate = LateGate(source_spec(circuit.table("customers")), {}, NOW)
    steps = [
        [event("c", 50_000, after=customer(1, "north"))],
        [event("u", 50_000, before=customer(1, "north"), after=customer(1, "east")),
         event("u", 5_000, before=customer(1, "east"), after=customer(1, "west"))],
        [event("d", 1_000, before=customer(1, "west")),
         event("c", 1_000, after=customer(2, "north"))],
    ]
    results = evaluate(circuit, [StepInput({"customers": decoded(gate, values)})
                                 for values in steps])
    assert [changes(r, "per_region", "region", "customers") for r in results] == [
        [(False, "north", 1)],
        [(True, "north", 1), (False, "west", 1)],
        [(False, "north", 1), (True, "west", 1)],
    ]
    assert all(not r.dead_letters for r in results)
