"""Key options (``'key.format'``, ``'key.fields'``) of tables and views, as the compiler reads
them (docs/language.md, Key columns and Declared key format): what they build, and each
refusal at its place with its fix."""

from __future__ import annotations

import pytest

from app.errors import ProgramError
from app.program.compile import compile_text

TABLE = """CREATE TABLE t (card VARCHAR NOT NULL, shop BIGINT, ts TIMESTAMP NOT NULL,
  amount BIGINT NOT NULL) WITH ('topic' = 't', {options});"""


def _refused(text: str) -> tuple[int, int, str, str]:
    with pytest.raises(ProgramError) as info:
        compile_text("k.sql", text)
    first = info.value.diagnostics[0]
    return first.position.line, first.position.column, first.message, first.fix or ""


def test_key_fields_are_key_columns_in_key_order_and_no_value_fields() -> None:
    table = compile_text("k.sql", TABLE.format(
        options="'key.format' = 'json', 'key.fields' = 'shop; card'")).table("t")
    assert (table.key_format, table.key_fields) == ("json", ("shop", "card"))
    assert [c.name for c in table.columns if c.metadata == "key"] == ["card", "shop"]
    assert [f["name"] for f in table.avro_schema["fields"]] == ["ts", "amount"]
    assert table.key_schema is not None
    assert [f["name"] for f in table.key_schema["fields"]] == ["shop", "card"]


def test_a_primary_key_of_key_columns_deletes_by_tombstone() -> None:
    table = compile_text("k.sql", TABLE.format(
        options="'key.format' = 'json', 'key.fields' = 'card;shop'").replace(
        "amount BIGINT NOT NULL)", "amount BIGINT NOT NULL, PRIMARY KEY (card, shop) NOT "
        "ENFORCED)")).table("t")
    assert table.deletes_by_tombstone


@pytest.mark.parametrize(("options", "where", "message", "fix"), [
    ("'key.format' = 'raw'", (2, 48),
     "'key.format' of table t needs 'key.fields', the columns its key holds",
     "add 'key.fields' = 'col' (several: 'col1;col2')"),
    ("'key.fields' = 'card'", (2, 48),
     "'key.fields' of table t needs 'key.format', how its key is encoded",
     "add 'key.format' = 'raw' (or 'json', 'avro', 'avro-confluent')"),
    ("'key.format' = 'protobuf', 'key.fields' = 'card'", (2, 63), "bad key format 'protobuf'",
     "use one of 'raw', 'avro', 'avro-confluent', 'json'"),
    ("'key.format' = 'raw', 'key.fields' = 'card;nope'", (2, 91),
     "unknown column nope in 'key.fields' of table t", "columns: card, shop, ts, amount"),
    ("'key.format' = 'raw', 'key.fields' = 'card;shop'", (2, 63),
     "table t has 2 key columns, but a raw key is one column's bytes",
     "key it by one column, or use 'json', 'avro' or 'avro-confluent' for a key of several"),
    ("'key.format' = 'raw', 'key.fields' = 'ts'", (2, 63),
     "key column ts of table t is TIMESTAMP, which a raw key cannot hold",
     "a raw key is one VARCHAR, VARBINARY, INT, BIGINT, REAL, DOUBLE or BOOLEAN column "
     "(Kafka's String, ByteArray, Integer, Long, Float, Double serializers)"),
    ("'key.format' = 'avro-confluent', 'key.fields' = 'card', 'schema-registry.url' = 'x'",
     (2, 128), "'schema-registry.url' x is not an http:// or https:// URL",
     "write 'schema-registry.url' = 'http://host:port'"),
])
def test_l7_bad_table_key_options_are_refused_at_their_place(
        options: str, where: tuple[int, int], message: str, fix: str) -> None:
    line, column, found, found_fix = _refused(TABLE.format(options=options))
    assert (found, found_fix) == (message, fix)
    assert (line, column) == where


def test_l7_a_metadata_key_column_beside_key_fields_is_refused() -> None:
    text = TABLE.format(options="'key.format' = 'raw', 'key.fields' = 'card'").replace(
        "shop BIGINT,", "shop BIGINT, k VARBINARY METADATA FROM 'key',")
    _, _, message, fix = _refused(text)
    assert message == ("column t.k is METADATA FROM 'key', but table t decodes its key by "
                       "'key.format' = 'raw' into 'key.fields'")
    assert fix == "name k in 'key.fields' (without METADATA), or remove the key options"


VIEW = TABLE.format(options="'format' = 'json'") + """
CREATE VIEW v WITH ('topic' = 'v', {options}) AS SELECT card, shop, amount FROM t;"""


def test_view_key_formats_build_view_independent_schemas() -> None:
    circuit = compile_text("k.sql", VIEW.format(
        options="'key' = 'card', 'key.format' = 'avro-confluent', "
                "'schema-registry.url' = 'http://r:8081'"))
    output = circuit.view("v").output
    assert output is not None
    assert (output.key_format, output.key_schema, output.encoding) == (
        "avro-confluent", {"type": "string"}, "avro")
    assert output.schema_registry == {"url": "http://r:8081"}
    several = compile_text("k.sql", VIEW.format(
        options="'key' = 'card, shop', 'key.format' = 'avro'")).view("v").output
    assert several is not None and several.key_schema is not None
    assert (several.key_schema["name"], several.key_schema["namespace"]) == (
        "record", "org.apache.flink.avro.generated")


@pytest.mark.parametrize(("options", "message"), [
    ("'key.format' = 'raw'", "view v has a 'key.format' but no key columns"),
    ("'key' = 'card, shop', 'key.format' = 'raw'",
     "view v has 2 key columns, but a raw key is one column's bytes"),
])
def test_l7_bad_view_key_formats_are_refused(options: str, message: str) -> None:
    assert _refused(VIEW.format(options=options))[2] == message
