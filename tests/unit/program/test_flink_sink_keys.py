"""SPEC L6/L7, S13 for the Kafka key options of a table INSERT INTO writes (Flink SQL): its
``'key.fields-prefix'`` names the key's fields without the prefix, as Flink's Kafka connector
writes them, and ``'value.fields-include' = 'EXCEPT_KEY'`` leaves the key columns out of the
value; the refusals are a read table's, each at its option with a fix.

The tables are those of Flink's pages (Kafka connector, "Overlapping Format Fields"; Avro
Confluent format, the second example), written by an INSERT INTO; the bytes they write are in
tests/unit/connectors/test_prefixed_sink_keys.py.
"""

# ruff: noqa: E501 - the pages' SQL is kept as they write it, long lines included

from __future__ import annotations

import pytest

from app.circuit.explain import explain_text
from app.circuit.ir import Circuit, Output
from app.errors import ProgramError
from app.program.compile import compile_program

#: Kafka connector page, "Overlapping Format Fields" (its elided options written out).
OVERLAPPING = """CREATE TABLE KafkaTable (
  `k_version` INT,
  `k_user_id` BIGINT,
  `k_item_id` BIGINT,
  `version` INT,
  `behavior` STRING
) WITH (
  'connector' = 'kafka',
  'topic' = 'user_behavior',
  'properties.bootstrap.servers' = 'localhost:9092',
  'key.format' = 'json',
  'key.fields-prefix' = 'k_',
  'key.fields' = 'k_version;k_user_id;k_item_id',

  'value.format' = 'json',
  'value.fields-include' = 'EXCEPT_KEY'
);
"""

#: The rows an INSERT INTO writes to it.
SOURCE = """CREATE TABLE behaviors (v INT, user_id BIGINT, item_id BIGINT, behavior STRING)
WITH ('connector' = 'kafka', 'topic' = 'behaviors', 'format' = 'json');
"""

INSERT = ("INSERT INTO KafkaTable SELECT v, user_id, item_id, v AS version, behavior "
          "FROM behaviors;\n")

#: Avro Confluent format page, the second example: a prefixed Avro key of one column.
USER_CREATED = """CREATE TABLE user_created (
  kafka_key_id STRING,
  id STRING,
  name STRING, 
  email STRING
) WITH (
  'connector' = 'kafka',
  'topic' = 'user_events_example2',
  'properties.bootstrap.servers' = 'localhost:9092',
  'key.format' = 'avro-confluent',
  'key.avro-confluent.url' = 'http://localhost:8082',
  'key.fields' = 'kafka_key_id',
  'key.fields-prefix' = 'kafka_key_',
  'value.format' = 'avro-confluent',
  'value.avro-confluent.url' = 'http://localhost:8082',
  'value.fields-include' = 'EXCEPT_KEY',
  'key.avro-confluent.subject' = 'user_events_example2-key2',
  'value.avro-confluent.subject' = 'user_events_example2-value2'
);
CREATE TABLE users (id STRING, name STRING, email STRING)
WITH ('connector' = 'kafka', 'topic' = 'users', 'format' = 'json');
INSERT INTO user_created SELECT id AS key_id, id, name, email FROM users;
"""


def compiled(text: str) -> Circuit:
    return compile_program("flink.sql", text)


def output(circuit: Circuit, view: str) -> Output:
    out = circuit.view(view).output
    assert out is not None
    return out


def refused(text: str) -> tuple[int, int, str, str]:
    """(line, column, message, fix) of the first error of ``text``."""
    with pytest.raises(ProgramError) as info:
        compile_program("flink.sql", text)
    first = info.value.diagnostics[0]
    return first.position.line, first.position.column, first.message, first.fix or ""


def fields(schema: object) -> list[str]:
    assert isinstance(schema, dict)
    return [f["name"] for f in schema["fields"]]


def test_l6_the_kafka_pages_overlapping_fields_table_is_written_with_unprefixed_key_fields() -> None:
    out = output(compiled(OVERLAPPING + SOURCE + INSERT), "kafkatable")
    assert (out.key_format, out.encoding, out.format) == ("json", "json", "append")
    assert out.key_columns == ("k_version", "k_user_id", "k_item_id")
    # The page: the key format's type is ROW<version, user_id, item_id>, the value's
    # ROW<version, behavior>.
    assert out.key_fields == ("version", "user_id", "item_id")
    assert fields(out.key_schema) == ["version", "user_id", "item_id"]
    assert fields(out.value_schema) == ["version", "behavior"]


def test_l6_explain_names_the_key_fields_of_a_prefixed_key() -> None:
    text = explain_text(compiled(OVERLAPPING + SOURCE + INSERT))
    assert ("Kafka key k_version, k_user_id, k_item_id as json (fields version, user_id, "
            "item_id)") in text


def test_l6_except_key_without_a_prefix_leaves_the_key_columns_out_of_the_value() -> None:
    text = (OVERLAPPING.replace("  'key.fields-prefix' = 'k_',\n", "")
            + SOURCE + INSERT)
    out = output(compiled(text), "kafkatable")
    assert out.key_fields == ()
    assert fields(out.key_schema) == ["k_version", "k_user_id", "k_item_id"]
    assert fields(out.value_schema) == ["version", "behavior"]
    every = output(compiled(text.replace("'EXCEPT_KEY'", "'ALL'")), "kafkatable")
    assert fields(every.value_schema) == ["k_version", "k_user_id", "k_item_id", "version",
                                          "behavior"]


def test_l6_the_avro_confluent_pages_prefixed_key_is_the_unprefixed_record() -> None:
    out = output(compiled(USER_CREATED), "user_created")
    assert (out.key_format, out.encoding) == ("avro-confluent", "avro-confluent")
    assert out.key_columns == ("kafka_key_id",) and out.key_fields == ("id",)
    # Flink's key record: org.apache.flink.avro.generated.record, its field unprefixed.
    assert out.key_schema == {
        "type": "record", "name": "record", "namespace": "org.apache.flink.avro.generated",
        "fields": [{"name": "id", "type": ["null", "string"], "default": None}]}
    assert fields(out.value_schema) == ["id", "name", "email"]
    assert out.schema_registry == {"url": "http://localhost:8082"}


def test_l6_the_avro_confluent_pages_own_subjects_name_what_is_registered() -> None:
    """The page overrides both subjects (``user_events_example2-key2``, ``-value2``): the
    output registers its schemas there, in place of the TopicNameStrategy's ``-key`` and
    ``-value`` (``tidemark run`` reads them as the output's serializer settings)."""
    out = output(compiled(USER_CREATED), "user_created")
    assert dict(out.serializer) == {"key.subject": "user_events_example2-key2",
                                    "value.subject": "user_events_example2-value2"}


def test_l7_a_key_subject_needs_an_avro_confluent_key() -> None:
    line, _, message, _ = refused(USER_CREATED.replace(
        "'key.format' = 'avro-confluent'", "'key.format' = 'avro'").replace(
        "  'key.avro-confluent.url' = 'http://localhost:8082',\n", ""))
    assert (line, message) == (16, "unsupported option 'key.avro-confluent.subject' of "
                               "table user_created: it is an option of 'avro-confluent' keys")


def test_l6_an_upsert_kafka_tables_primary_key_takes_the_prefix() -> None:
    out = output(compiled(SOURCE + """CREATE TABLE per_user (
  k_user_id BIGINT, user_id BIGINT, n BIGINT, PRIMARY KEY (k_user_id) NOT ENFORCED
) WITH ('connector' = 'upsert-kafka', 'topic' = 'per_user', 'key.format' = 'avro',
  'key.fields-prefix' = 'k_', 'value.format' = 'avro', 'value.fields-include' = 'EXCEPT_KEY');
INSERT INTO per_user SELECT user_id, MAX(user_id), COUNT(*) FROM behaviors GROUP BY user_id;
"""), "per_user")
    assert (out.format, out.key_columns, out.key_fields) == ("upsert", ("k_user_id",),
                                                             ("user_id",))
    assert fields(out.key_schema) == ["user_id"]
    assert fields(out.value_schema) == ["user_id", "n"]


@pytest.mark.parametrize("fmt", ["raw", "avro", "avro-confluent"])
def test_l6_a_prefixed_key_of_one_column_in_each_format(fmt: str) -> None:
    registry = ("  'key.avro-confluent.url' = 'http://localhost:8082',\n"
                if fmt == "avro-confluent" else "")
    text = OVERLAPPING.replace("'key.format' = 'json'", f"'key.format' = '{fmt}'").replace(
        "'k_version;k_user_id;k_item_id'", "'k_user_id'").replace(
        "  'value.format'", registry + "  'value.format'")
    out = output(compiled(text + SOURCE + INSERT), "kafkatable")
    assert out.key_columns == ("k_user_id",)
    # A raw key is the column's bytes: no field, whatever the prefix.
    assert out.key_schema == ({"type": "long"} if fmt == "raw" else {
        "type": "record", "name": "record", "namespace": "org.apache.flink.avro.generated",
        "fields": [{"name": "user_id", "type": ["null", "long"], "default": None}]})
    assert fields(out.value_schema) == ["k_version", "k_item_id", "version", "behavior"]


# -- refusals: those of a table that is read ---------------------------------------------------


def test_l7_a_prefix_without_key_fields_is_refused_at_the_prefix() -> None:
    text = OVERLAPPING.replace("  'key.format' = 'json',\n", "").replace(
        "  'key.fields' = 'k_version;k_user_id;k_item_id',\n", "").replace(
        "'EXCEPT_KEY'", "'ALL'")
    line, column, message, fix = refused(text + SOURCE + INSERT)
    assert (line, column) == (11, 3)
    assert message == ("'key.fields-prefix' of table kafkatable needs 'key.fields', the "
                       "columns its key holds")
    assert fix == "add 'key.fields' = 'col' (several: 'col1;col2'), or remove it"


@pytest.mark.parametrize("include", ["  'value.fields-include' = 'ALL'\n", ""])
def test_l7_a_prefix_with_the_key_in_the_value_is_refused_at_the_prefix(include: str) -> None:
    text = OVERLAPPING.replace("  'value.fields-include' = 'EXCEPT_KEY'\n", include).replace(
        "'value.format' = 'json',", "'value.format' = 'json'" + ("," if include else ""))
    line, column, message, fix = refused(text + SOURCE + INSERT)
    assert (line, column) == (12, 3)
    assert message == ("'key.fields-prefix' of table kafkatable renames the key's fields, "
                       "but 'value.fields-include' = 'ALL' writes them to the value too")
    assert fix == ("add 'value.fields-include' = 'EXCEPT_KEY' (Flink requires it with a "
                   "prefix)")


def test_l7_a_key_column_without_the_prefix_is_refused_at_the_prefixs_value() -> None:
    text = OVERLAPPING.replace("'k_',", "'key_',")
    line, column, message, fix = refused(text + SOURCE + INSERT)
    assert (line, column) == (12, 25)
    assert message == ("key column kafkatable.k_version does not start with the "
                       "'key.fields-prefix' 'key_'")
    assert fix == "name it key_<field> (the key's field with the prefix)"
