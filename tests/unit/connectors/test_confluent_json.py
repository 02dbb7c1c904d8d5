"""``'format' = 'json-registry'`` values, written by confluent-kafka's own JSONSerializer with
the tests' real schema registry and read by ConfluentJsonRecords (app/connectors/confluent_json.py,
SPEC L1, S7): the row as a ``'format' = 'json'`` table reads the document, and every bad record
a dead-letter reason naming what is wrong."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import Any

import pytest

from app.connectors.confluent_avro import frame
from app.connectors.confluent_json import ConfluentJsonRecords
from app.connectors.json_records import JsonRecordError

COLUMNS = [("ts", "timestamp"), ("card", "int64"), ("price", "decimal(5,2)"), ("note", "string")]
SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Purchase",
    "type": "object",
    "properties": {
        "ts": {"type": "string"},
        "card": {"type": "integer"},
        "price": {"type": ["number", "null"]},
        "note": {"type": ["string", "null"]},
    },
    "required": ["ts", "card"],
}


def _serialized(url: str, topic: str, record: dict[str, Any]) -> bytes:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = JSONSerializer(json.dumps(SCHEMA), SchemaRegistryClient({"url": url}))
    data = serializer(record, SerializationContext(topic, MessageField.VALUE))
    assert data is not None
    return bytes(data)


def _reason(decoder: ConfluentJsonRecords, value: bytes) -> tuple[str, str]:
    with pytest.raises(JsonRecordError) as refused:
        decoder.decode(value)
    return refused.value.reason, refused.value.message


def test_l1_a_json_schema_record_is_the_row_a_json_table_reads(schema_registry: str) -> None:
    topic = f"purchases-{uuid.uuid4().hex[:8]}"
    decoder = ConfluentJsonRecords("purchase", topic, COLUMNS, {"url": schema_registry})
    value = _serialized(schema_registry, topic, {
        "ts": "2026-11-26T10:00:00Z", "card": 7, "price": 12.34, "note": None,
    })
    assert decoder.decode(value) == {
        "ts": 1_795_687_200_000, "card": 7, "price": Decimal("12.34"), "note": None
    }


def test_s7_each_bad_record_is_a_dead_letter_with_its_reason(schema_registry: str) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    topic = f"purchases-{uuid.uuid4().hex[:8]}"
    decoder = ConfluentJsonRecords("purchase", topic, COLUMNS, {"url": schema_registry})
    good = _serialized(schema_registry, topic, {"ts": "2026-11-26T10:00:00Z", "card": 7})
    json_id = int.from_bytes(good[1:5], "big")
    avro_id = SchemaRegistryClient({"url": schema_registry}).register_schema(
        f"{topic}-avro", Schema('{"type": "record", "name": "R", "fields": []}', "AVRO")
    )
    refuses = frame(json_id, b'{"ts": "2026-11-26T10:00:00Z", "card": "seven"}')
    found = {
        "unframed": _reason(decoder, b'{"ts": 1, "card": 2}'),
        "short": _reason(decoder, b"\x00\x00"),
        "unknown id": _reason(decoder, frame(999_999, b"{}")),
        "beyond ids": _reason(decoder, frame(2**31, b"{}")),
        "avro id": _reason(decoder, frame(avro_id, b"{}")),
        "not json": _reason(decoder, frame(json_id, b"{oops")),
        "refused": _reason(decoder, refuses),
        "no fit": _reason(decoder, frame(json_id, b'{"ts": "yesterday", "card": 1}')),
    }
    assert {k: reason for k, (reason, _) in found.items()} == {
        "unframed": "malformed", "short": "malformed", "unknown id": "invalid",
        "beyond ids": "invalid",
        "avro id": "invalid", "not json": "malformed", "refused": "invalid", "no fit": "invalid",
    }
    message = {k: text for k, (_, text) in found.items()}
    assert message["unframed"].startswith(
        "not a registry-framed JSON record of table purchase: the first byte is 0x7b"
    )
    assert message["unknown id"].startswith("schema id 999999 is not in the schema registry")
    assert message["beyond ids"] == (
        "schema id 2147483648 is beyond the signed 32-bit ids registries assign"
    )
    assert message["avro id"] == f"schema id {avro_id} is an Avro schema, not a JSON Schema"
    assert message["refused"].startswith(
        f"schema id {json_id}: the JSON Schema refuses the record: 'seven' is not of type"
    )
    assert message["no fit"].startswith("column ts: expected")


def test_s13_a_json_registry_output_is_read_by_confluents_json_deserializer(
    schema_registry: str,
) -> None:
    """``tidemark run`` registers the view's JSON Schema at start (keys too, under their
    subjects); confluent-kafka's JSONSerializer then frames each record with its id and a
    JSONDeserializer of the registry reads it back."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from app.cli import with_schema_registry
    from app.config import Settings
    from app.program.compile import compile_program
    from app.runtime.step.encode import ViewEncoding, encode_record

    topic = f"counts-{uuid.uuid4().hex[:8]}"
    circuit = with_schema_registry(compile_program("p.sql", f"""
        CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL,
                        price DECIMAL(5, 2))
        WITH ('topic' = 'in');
        CREATE VIEW v WITH ('topic' = '{topic}', 'encoding' = 'json-registry',
                            'value.subject.name.strategy' = 'RecordNameStrategy') AS
        SELECT k, COUNT(*) AS n, MAX(price) AS top FROM t GROUP BY k;
        """), Settings(schema_registry_url=schema_registry))
    out = circuit.view("v").output
    assert out is not None
    assert (out.key_subject, out.value_subject) == (f"{topic}-key", "tidemark.v")
    enc = ViewEncoding.for_view(circuit.view("v"))
    key, value = encode_record(enc, {"k": 3, "n": 2, "top": Decimal("9.50")}, None)
    assert key is not None and value is not None
    assert value[:5] == b"\x00" + (out.value_schema_id or 0).to_bytes(4, "big")
    reader = JSONDeserializer(None, schema_registry_client=SchemaRegistryClient(
        {"url": schema_registry}))
    assert reader(value, SerializationContext(topic, MessageField.VALUE)) == {
        "k": 3, "n": 2, "top": "9.50"
    }
    assert reader(key, SerializationContext(topic, MessageField.KEY)) == {"k": 3}


def test_s13_use_latest_version_writes_with_the_subjects_json_schema(
    schema_registry: str,
) -> None:
    """With auto-registration off and ``use.latest.version``, a ``json-registry`` output's
    keys and values are framed with the ids of the JSON Schemas registered beforehand (a
    property no column fills, ``number`` for an integer, Java's ``oneOf`` for a nullable
    one), read by confluent-kafka's JSONDeserializer, and nothing is registered. The writer's
    registry client starts cold, as on an executor."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from app.cli import with_schema_registry
    from app.config import Settings
    from app.connectors.confluent_avro import REGISTRY_CLIENTS
    from app.program.compile import compile_program
    from app.runtime.step.encode import ViewEncoding, encode_record

    topic = f"counts-{uuid.uuid4().hex[:8]}"
    client = SchemaRegistryClient({"url": schema_registry})
    value_schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "com.example.CardCount",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "k": {"type": "integer"},
            "n": {"type": "number"},
            "top": {"oneOf": [{"type": "null", "title": "Not included"},
                              {"type": "string"}]},
            "region": {"type": "string"},
        },
        "required": ["k", "n"],
    }
    key_schema = {"type": "object", "properties": {"k": {"type": "number"}}}
    value_id = client.register_schema(f"{topic}-value", Schema(json.dumps(value_schema), "JSON"))
    key_id = client.register_schema(f"{topic}-key", Schema(json.dumps(key_schema), "JSON"))
    circuit = with_schema_registry(compile_program("p.sql", f"""
        CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL,
                        price DECIMAL(5, 2))
        WITH ('topic' = 'in');
        CREATE VIEW v WITH ('topic' = '{topic}', 'encoding' = 'json-registry',
                            'auto.register.schemas' = 'false',
                            'use.latest.version' = 'true') AS
        SELECT k, COUNT(*) AS n, MAX(price) AS top FROM t GROUP BY k;
        """), Settings(schema_registry_url=schema_registry))
    out = circuit.view("v").output
    assert out is not None
    assert (out.key_schema_id, out.value_schema_id) == (key_id, value_id)
    REGISTRY_CLIENTS.get().close()
    enc = ViewEncoding.for_view(circuit.view("v"))
    key, value = encode_record(enc, {"k": 3, "n": 2, "top": Decimal("9.50")}, None)
    _, no_top = encode_record(enc, {"k": 4, "n": 1, "top": None}, None)
    assert key is not None and value is not None and no_top is not None
    assert value[:5] == b"\x00" + value_id.to_bytes(4, "big")
    assert key[:5] == b"\x00" + key_id.to_bytes(4, "big")
    reader = JSONDeserializer(None, schema_registry_client=client)
    assert reader(value, SerializationContext(topic, MessageField.VALUE)) == {
        "k": 3, "n": 2, "top": "9.50"
    }
    assert reader(no_top, SerializationContext(topic, MessageField.VALUE)) == {
        "k": 4, "n": 1, "top": None
    }
    assert reader(key, SerializationContext(topic, MessageField.KEY)) == {"k": 3}
    assert client.get_versions(f"{topic}-value") == [1]
    assert client.get_versions(f"{topic}-key") == [1]


def test_s13_the_serializer_validates_against_the_schema_of_its_id(schema_registry: str) -> None:
    """JsonRegistryWriter's serializer validates each document against the schema of the id
    it writes with, fetched from the registry, not against the view's own JSON Schema it is
    built with: a registered ``maxLength`` the view's schema does not have refuses a
    record."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from app.connectors.confluent_json import JsonRegistryWriter
    from app.errors import SerializationError

    topic = f"notes-{uuid.uuid4().hex[:8]}"
    ours = {"type": "record", "name": "v", "namespace": "tidemark",
            "fields": [{"name": "note", "type": "string"}]}
    short = {"type": "object", "properties": {"note": {"type": "string", "maxLength": 3}}}
    schema_id = SchemaRegistryClient({"url": schema_registry}).register_schema(
        f"{topic}-value", Schema(json.dumps(short), "JSON")
    )
    writer = JsonRegistryWriter(ours, {"url": schema_registry}, topic, "value", schema_id,
                                f"{topic}-value")
    assert writer.encode({"note": "abc"}) == frame(schema_id, b'{"note":"abc"}')
    with pytest.raises(SerializationError, match="'abcd' is too long"):
        writer.encode({"note": "abcd"})
