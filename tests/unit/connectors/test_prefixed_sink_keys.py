"""SPEC S13 for a table INSERT INTO writes with Flink's ``'key.fields-prefix'`` and
``'value.fields-include' = 'EXCEPT_KEY'``: the bytes of its keys and values, as the output
encoder writes them for sample rows, read back as a consumer reads them (JSON, schemaless
Avro, Kafka's raw bytes, and through the tests' schema registry with confluent-kafka's
AvroDeserializer): the key's fields are the key columns' names without the prefix, the value
the other columns."""

from __future__ import annotations

import io
import json
import struct
import uuid

import fastavro
import pytest

from app.circuit.ir import Circuit, View
from app.connectors.output_reader import OutputReader
from app.program.compile import compile_program
from app.runtime.step.encode import ViewEncoding, encode_record

PROGRAM = """
CREATE TABLE behaviors (v INT, user_id BIGINT, item_id BIGINT, behavior STRING)
WITH ('connector' = 'kafka', 'topic' = 'behaviors', 'format' = 'json');
CREATE TABLE KafkaTable (
  `k_version` INT,
  `k_user_id` BIGINT,
  `k_item_id` BIGINT,
  `version` INT,
  `behavior` STRING
) WITH (
  'connector' = 'kafka',
  'topic' = '{topic}',
  'key.format' = '{key}',
  'key.fields-prefix' = 'k_',
  'key.fields' = '{fields}',
  'value.format' = '{value}',
  'value.fields-include' = 'EXCEPT_KEY'{more}
);
INSERT INTO KafkaTable SELECT v, user_id, item_id, v + 1 AS version, behavior FROM behaviors;
"""

ROW = {"k_version": 1, "k_user_id": 7, "k_item_id": 9, "version": 2, "behavior": "buy"}


def _circuit(key: str, value: str = "json", fields: str = "k_version;k_user_id;k_item_id",
             topic: str = "user_behavior", more: str = "") -> Circuit:
    return compile_program("flink.sql", PROGRAM.format(key=key, value=value, fields=fields,
                                                       topic=topic, more=more))


def _view(circuit: Circuit) -> View:
    return circuit.view("kafkatable")


def _avro(schema: object, data: bytes) -> object:
    return fastavro.schemaless_reader(io.BytesIO(data), fastavro.parse_schema(schema))


def test_s13_a_prefixed_json_key_has_the_unprefixed_fields_and_the_value_the_others() -> None:
    view = _view(_circuit("json"))
    key, value = encode_record(ViewEncoding.for_view(view), ROW, None)
    assert key is not None and value is not None
    assert json.loads(key) == {"version": 1, "user_id": 7, "item_id": 9}
    assert json.loads(value) == {"version": 2, "behavior": "buy"}
    assert view.output is not None
    reader = OutputReader("kafkatable", view.output)
    # Read back as columns: the key's fields are the prefixed key columns again.
    assert reader.key(key) == {"k_version": 1, "k_user_id": 7, "k_item_id": 9}
    assert reader.value(value) == {"version": 2, "behavior": "buy"}


def test_s13_a_null_key_column_is_a_null_field_of_the_unprefixed_key() -> None:
    enc = ViewEncoding.for_view(_view(_circuit("json")))
    key, _ = encode_record(enc, {**ROW, "k_item_id": None}, None)
    assert key is not None
    assert json.loads(key) == {"version": 1, "user_id": 7, "item_id": None}


def test_s13_a_prefixed_avro_key_is_the_unprefixed_record() -> None:
    view = _view(_circuit("avro", value="avro", fields="k_user_id;k_item_id"))
    assert view.output is not None
    key, value = encode_record(ViewEncoding.for_view(view), ROW, None)
    assert key is not None and value is not None
    # A consumer's schema of Flink's key record: fields user_id and item_id.
    consumer_key = {"type": "record", "name": "record",
                    "namespace": "org.apache.flink.avro.generated", "fields": [
                        {"name": "user_id", "type": ["null", "long"]},
                        {"name": "item_id", "type": ["null", "long"]}]}
    assert _avro(consumer_key, key) == {"user_id": 7, "item_id": 9}
    assert _avro(view.output.value_schema, value) == {
        "k_version": 1, "version": 2, "behavior": "buy"}


def test_s13_a_prefixed_raw_key_is_the_columns_bytes() -> None:
    view = _view(_circuit("raw", fields="k_user_id"))
    key, value = encode_record(ViewEncoding.for_view(view), ROW, None)
    assert key == struct.pack(">q", 7)  # Kafka's LongSerializer
    assert value is not None
    assert json.loads(value) == {"k_version": 1, "k_item_id": 9, "version": 2,
                                 "behavior": "buy"}
    assert view.output is not None
    assert OutputReader("kafkatable", view.output).key(key) == {"k_user_id": 7}


def test_s13_a_prefixed_avro_confluent_key_registers_and_reads_as_the_unprefixed_record(
    schema_registry: str,
) -> None:
    """``tidemark run`` registers the key's record, its fields unprefixed, under
    ``<topic>-key`` (as Flink registers it), and confluent-kafka's AvroDeserializer reads
    the keys and values back through the registry."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from app.cli import with_schema_registry
    from app.config import Settings

    topic = f"behavior-{uuid.uuid4().hex[:8]}"
    circuit = with_schema_registry(_circuit(
        "avro-confluent", value="avro-confluent", fields="k_user_id;k_item_id", topic=topic,
        more=f",\n  'avro-confluent.url' = '{schema_registry}'"),
        Settings(schema_registry_url=schema_registry))
    view = _view(circuit)
    out = view.output
    assert out is not None
    assert (out.key_subject, out.value_subject) == (f"{topic}-key", f"{topic}-value")
    client = SchemaRegistryClient({"url": schema_registry})
    registered = json.loads(client.get_latest_version(f"{topic}-key").schema.schema_str)
    assert [f["name"] for f in registered["fields"]] == ["user_id", "item_id"]
    key, value = encode_record(ViewEncoding.for_view(view), ROW, None)
    assert key is not None and value is not None
    assert key[:5] == b"\x00" + (out.key_schema_id or 0).to_bytes(4, "big")
    reader = AvroDeserializer(client)
    assert reader(key, SerializationContext(topic, MessageField.KEY)) == {
        "user_id": 7, "item_id": 9}
    assert reader(value, SerializationContext(topic, MessageField.VALUE)) == {
        "k_version": 1, "version": 2, "behavior": "buy"}


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_s13_an_upsert_kafka_tables_prefixed_key_deletes_with_a_tombstone(fmt: str) -> None:
    circuit = compile_program("flink.sql", f"""
CREATE TABLE behaviors (user_id BIGINT, behavior STRING)
WITH ('connector' = 'kafka', 'topic' = 'behaviors', 'format' = 'json');
CREATE TABLE per_user (k_user_id BIGINT, n BIGINT, PRIMARY KEY (k_user_id) NOT ENFORCED)
WITH ('connector' = 'upsert-kafka', 'topic' = 'per_user', 'key.format' = '{fmt}',
  'key.fields-prefix' = 'k_', 'value.format' = '{fmt}', 'value.fields-include' = 'EXCEPT_KEY');
INSERT INTO per_user SELECT user_id, COUNT(*) FROM behaviors GROUP BY user_id;
""")
    view = circuit.view("per_user")
    assert view.output is not None
    enc = ViewEncoding.for_view(view)
    key, value = encode_record(enc, {"k_user_id": 7, "n": 3}, None)
    deleted_key, tombstone = encode_record(enc, {"k_user_id": 7, "n": 3, "_delete": True}, None)
    assert key == deleted_key and tombstone is None
    assert key is not None and value is not None
    reader = OutputReader("per_user", view.output)
    assert reader.key(key) == {"k_user_id": 7}
    assert reader.value(value) == {"n": 3}
    if fmt == "json":
        assert (key, value) == (b'{"user_id":7}', b'{"n":3}')
