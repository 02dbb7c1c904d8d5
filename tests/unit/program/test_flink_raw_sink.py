"""SPEC L6/L7 for raw values written (Flink's ``'format' = 'raw'`` on a table INSERT INTO
writes, Tidemark's ``'encoding' = 'raw'`` of a view): the value is one column's bytes, as a
``'raw'`` table reads them, so the value has one column of a type a raw value can hold, and
the refusals say so at the option. The bytes are in
tests/unit/connectors/test_raw_sink_values.py."""

# ruff: noqa: E501 - the pages' SQL is kept as they write it, long lines included

from __future__ import annotations

import pytest

from app.circuit.ir import Circuit, Output
from app.errors import ProgramError
from app.program.compile import compile_program

SOURCE = """CREATE TABLE src (log STRING, user_id BIGINT, at TIMESTAMP(3))
WITH ('connector' = 'kafka', 'topic' = 'src', 'format' = 'json');
"""

#: The Raw format page's table, written by an INSERT INTO.
NGINX_LOG = """CREATE TABLE nginx_log (
  log STRING
) WITH (
  'connector' = 'kafka',
  'topic' = 'nginx_log',
  'properties.bootstrap.servers' = 'localhost:9092',
  'properties.group.id' = 'testGroup',
  'format' = 'raw'
);
INSERT INTO nginx_log SELECT log FROM src;
"""

#: A raw value beside a key of its own (the key columns leave the value under EXCEPT_KEY).
KEYED = """CREATE TABLE user_log (user_id BIGINT, log STRING) WITH (
  'connector' = 'kafka',
  'topic' = 'user_log',
  'key.format' = 'raw',
  'key.fields' = 'user_id',
  'value.format' = 'raw',
  'value.fields-include' = 'EXCEPT_KEY'
);
INSERT INTO user_log SELECT user_id, log FROM src;
"""


def compiled(text: str) -> Circuit:
    return compile_program("flink.sql", text)


def output(circuit: Circuit, view: str) -> Output:
    out = circuit.view(view).output
    assert out is not None
    return out


def refused(text: str) -> tuple[int, int, str, str]:
    with pytest.raises(ProgramError) as info:
        compile_program("flink.sql", text)
    first = info.value.diagnostics[0]
    return first.position.line, first.position.column, first.message, first.fix or ""


def test_l6_the_raw_pages_table_is_written_as_raw_values() -> None:
    circuit = compiled(SOURCE + NGINX_LOG)
    out = output(circuit, "nginx_log")
    assert (out.encoding, out.format, out.key_columns) == ("raw", "append", ())
    assert [f["name"] for f in out.value_schema["fields"]] == ["log"]
    assert [w.message.split(":")[0] for w in circuit.warnings] == [
        "option 'properties.group.id' of table nginx_log changes nothing in Tidemark"]


def test_l6_a_raw_value_beside_its_key_under_except_key() -> None:
    out = output(compiled(SOURCE + KEYED), "user_log")
    assert (out.encoding, out.key_format, out.key_columns) == ("raw", "raw", ("user_id",))
    assert [f["name"] for f in out.value_schema["fields"]] == ["log"]


def test_l6_a_tidemark_view_of_one_column_writes_raw_values() -> None:
    circuit = compile_program("p.sql", """
    CREATE TABLE t (card VARCHAR NOT NULL, amount BIGINT NOT NULL) WITH ('topic' = 't');
    CREATE VIEW amounts WITH ('topic' = 'amounts', 'encoding' = 'raw', 'key' = 'amount',
                              'key.format' = 'raw') AS SELECT amount FROM t;
    """)
    out = output(circuit, "amounts")
    assert (out.encoding, out.key_format, out.key_columns) == ("raw", "raw", ("amount",))


def test_l7_raw_values_of_several_columns_are_refused_at_the_format() -> None:
    line, column, message, fix = refused(SOURCE + KEYED.replace("'EXCEPT_KEY'", "'ALL'"))
    assert (line, column) == (8, 20)
    assert message == ("view user_log writes raw values, one column's bytes, but its value "
                       "has 2 columns (user_id, log)")
    assert fix.startswith("write one column (Flink: the key columns in the key, with "
                          "'value.fields-include' = 'EXCEPT_KEY')")


def test_l7_a_raw_value_of_a_type_it_cannot_hold_is_refused() -> None:
    text = NGINX_LOG.replace("log STRING", "log TIMESTAMP(3)").replace(
        "SELECT log", "SELECT at")
    line, column, message, fix = refused(SOURCE + text)
    assert (line, column) == (10, 14)
    assert message == "column nginx_log.log is TIMESTAMP, which a raw value cannot hold"
    assert fix.startswith("a raw value is one VARCHAR, VARBINARY, INT, BIGINT, REAL, DOUBLE "
                          "or BOOLEAN column")


def test_l7_a_raw_changelog_and_a_raw_record_key_are_refused() -> None:
    _, _, message, fix = refused("""
    CREATE TABLE t (card VARCHAR NOT NULL, amount BIGINT NOT NULL) WITH ('topic' = 't');
    CREATE VIEW amounts WITH ('topic' = 'amounts', 'encoding' = 'raw',
                              'format' = 'changelog') AS SELECT amount FROM t;
    """)
    assert message.startswith("view amounts is written as 'changelog', whose values carry "
                              "undo, ptime and ver")
    line, column, message, fix = refused("""
    CREATE TABLE t (card VARCHAR NOT NULL, amount BIGINT NOT NULL) WITH ('topic' = 't');
    CREATE VIEW amounts WITH ('topic' = 'amounts', 'encoding' = 'raw', 'key' = 'card')
    AS SELECT amount, card FROM t;
    """)
    assert message.startswith("view amounts writes raw values, one column's bytes, but its "
                              "value has 2 columns")
    line, column, message, fix = refused("""
    CREATE TABLE t (card VARCHAR NOT NULL, amount BIGINT NOT NULL) WITH ('topic' = 't');
    CREATE VIEW amounts WITH ('topic' = 'amounts', 'encoding' = 'raw', 'key' = 'amount')
    AS SELECT amount FROM t;
    """)
    assert (line, column) == (3, 65)
    assert message == ("view amounts writes raw values and a key of amount, whose record a "
                       "raw value's encoding cannot write")
    assert fix == "add 'key.format' ('raw' for one column's bytes, or 'json', 'avro')"


def test_l7_raw_options_other_than_the_defaults_are_refused_on_a_written_table() -> None:
    text = NGINX_LOG.replace("'format' = 'raw'", "'format' = 'raw',\n  'raw.endianness' = 'little-endian'")
    _, _, message, fix = refused(SOURCE + text)
    assert message == ("unsupported option 'raw.endianness' of table nginx_log: raw values "
                       "are written as UTF-8 text and big-endian numbers, as Kafka's Java "
                       "serializers write them, not 'little-endian'")
    assert fix == "remove it"
    assert output(compiled(SOURCE + NGINX_LOG.replace(
        "'format' = 'raw'", "'format' = 'raw',\n  'raw.charset' = 'UTF-8'")),
        "nginx_log").encoding == "raw"
