"""Table columns read from the Kafka record (``METADATA FROM 'key'``): what compiles, what the
circuit holds, and the refusals (SPEC L1, L7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.circuit.explain import explain_json, explain_text
from app.circuit.ir import Column, SqlType
from app.circuit.reference import Reference, StepInput
from app.errors import ProgramError
from app.program.compile import compile_text

TABLE = """CREATE TABLE clicks (
    id BIGINT,
    ts TIMESTAMP NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '5' SECOND,
    p INT METADATA FROM 'partition',
    o BIGINT METADATA FROM 'offset',
    k VARBINARY METADATA FROM 'key',
    ks VARCHAR METADATA FROM 'key' VIRTUAL,
    src VARCHAR METADATA FROM 'headers.source',
    "partition" INT METADATA
) WITH ('topic' = 'clicks');
"""


def _errors(text: str) -> list[tuple[int, int, str, str | None]]:
    with pytest.raises(ProgramError) as info:
        compile_text("p.sql", text)
    return [(d.position.line, d.position.column, d.message, d.fix)
            for d in info.value.diagnostics]


def test_each_metadata_kind_compiles_to_a_column_with_its_key() -> None:
    table = compile_text("p.sql", TABLE).table("clicks")
    assert table.columns == (
        Column("id", SqlType("BIGINT")),
        Column("ts", SqlType("TIMESTAMP", False), "timestamp"),
        Column("p", SqlType("INT"), "partition"),
        Column("o", SqlType("BIGINT"), "offset"),
        Column("k", SqlType("VARBINARY"), "key"),
        Column("ks", SqlType("VARCHAR"), "key"),
        Column("src", SqlType("VARCHAR"), "headers.source"),
        Column("partition", SqlType("INT"), "partition"),
    )
    assert [lt.column for lt in table.lateness] == ["ts"]
    # The value schema has the value columns only.
    assert [f["name"] for f in table.avro_schema["fields"]] == ["id"]


def test_keys_are_case_insensitive_but_header_names_are_not() -> None:
    table = compile_text("p.sql", "CREATE TABLE t (a BIGINT, ts TIMESTAMP METADATA FROM "
                         "'TimeStamp', h VARCHAR METADATA FROM 'Headers.Trace-Id') "
                         "WITH ('topic' = 't');").table("t")
    assert [c.metadata for c in table.columns] == [None, "timestamp", "headers.Trace-Id"]


def test_a_view_of_a_table_has_plain_columns() -> None:
    circuit = compile_text("p.sql", TABLE + "CREATE VIEW v WITH ('topic' = 'out') AS "
                           "SELECT id, ts, src FROM clicks;")
    view = circuit.view("v")
    assert [c.metadata for c in view.columns] == [None, None, None]
    assert view.output is not None
    assert [f["name"] for f in view.output.value_schema["fields"]] == ["id", "ts", "src"]


def test_explain_shows_where_a_metadata_column_is_read() -> None:
    circuit = compile_text("p.sql", TABLE)
    text = explain_text(circuit)
    assert ("columns:      id BIGINT, ts TIMESTAMP NOT NULL METADATA FROM 'timestamp', "
            "p INT METADATA FROM 'partition'") in text
    assert "src VARCHAR METADATA FROM 'headers.source'" in text
    columns = explain_json(circuit)["tables"][0]["columns"]
    assert columns[0] == {"name": "id", "type": "BIGINT", "metadata": None}
    assert columns[6] == {"name": "src", "type": "VARCHAR", "metadata": "headers.source"}


def test_a_schema_file_needs_no_field_for_a_metadata_column(tmp_path: Path) -> None:
    schema = tmp_path / "clicks.avsc"
    schema.write_text(json.dumps({"type": "record", "name": "clicks", "fields": [
        {"name": "id", "type": "long"}, {"name": "extra", "type": "string"}]}))
    table = compile_text(str(tmp_path / "p.sql"), (
        f"CREATE TABLE clicks (id BIGINT NOT NULL, ts TIMESTAMP NOT NULL METADATA FROM "
        f"'timestamp' LATENESS INTERVAL '1' SECOND) WITH ('topic' = 'c', 'schema' = "
        f"'{schema}');")).table("clicks")
    assert table.avro_schema["fields"][1]["name"] == "extra"


@pytest.mark.parametrize(("column", "col", "message", "fix"), [
    ("p VARCHAR METADATA FROM 'partition'", 27, "column t.p is VARCHAR, but METADATA FROM "
     "'partition' is INT or BIGINT", "declare it INT or BIGINT"),
    ("o INT METADATA FROM 'offset'", 27, "column t.o is INT, but METADATA FROM 'offset' is BIGINT",
     "declare it BIGINT"),
    ("ts BIGINT METADATA FROM 'timestamp'", 27,
     "is BIGINT, but METADATA FROM 'timestamp' is TIMESTAMP",
     "declare it TIMESTAMP"),
    ("k INT METADATA FROM 'key'", 27, "is INT, but METADATA FROM 'key' is VARBINARY or VARCHAR",
     "declare it VARBINARY or VARCHAR"),
    ("h DOUBLE METADATA FROM 'headers.x'", 27,
     "column t.h is DOUBLE, but METADATA FROM 'headers.x'",
     "declare it VARBINARY or VARCHAR"),
    ("t TIMESTAMP METADATA FROM 'topic'", 53, "unknown metadata key 'topic' of column t.t",
     "metadata keys are 'timestamp', 'partition', 'offset', 'key', 'headers.<name>'"),
    ("h VARCHAR METADATA FROM 'headers.'", 51, "unknown metadata key 'headers.'", None),
    ("ts TIMESTAMP METADATA", 40, "unknown metadata key 'ts' of column t.ts", None),
    ("k VARCHAR METADATA FROM key", 51, "expected a quoted metadata key like 'timestamp', "
     "found key", "write METADATA FROM 'timestamp'"),
])
def test_a_bad_metadata_column_is_refused_at_its_position(column: str, col: int, message: str,
                                                          fix: str | None) -> None:
    [(line, column_no, text, found_fix)] = _errors(
        f"CREATE TABLE t (a BIGINT, {column}) WITH ('topic' = 't');")
    assert (line, column_no) == (1, col), text
    assert message in text
    if fix is not None:
        assert found_fix is not None and fix in found_fix


def test_lateness_on_a_nullable_kafka_timestamp_asks_for_not_null() -> None:
    [(_, _, text, fix)] = _errors("CREATE TABLE t (ts TIMESTAMP METADATA FROM 'timestamp' "
                                  "LATENESS INTERVAL '1' SECOND) WITH ('topic' = 't');")
    assert text == "LATENESS on nullable column t.ts"
    assert fix is not None and "NOT NULL" in fix


def test_the_reference_reads_metadata_columns_from_its_rows() -> None:
    """Past the gate a metadata column is an ordinary column: the oracle gates the Kafka
    timestamp like any LATENESS column and NULL in a NOT NULL one is invalid."""
    circuit = compile_text("p.sql", TABLE + "CREATE VIEW v WITH ('topic' = 'out') AS "
                           "SELECT id, ts, p, src FROM clicks;")
    evaluator = Reference(circuit)
    first = evaluator.step(StepInput({"clicks": [
        {"id": 1, "ts": 10_000, "p": 0, "src": "web"},
        {"id": 2, "ts": None, "p": 1},
    ]}))
    assert [r.value["id"] for r in first.outputs["v"] if r.value] == [1]
    assert [d.reason for d in first.dead_letters] == ["invalid"]
    second = evaluator.step(StepInput({"clicks": [{"id": 3, "ts": 4_999, "p": 0}]}))
    assert [d.reason for d in second.dead_letters] == ["late"]
