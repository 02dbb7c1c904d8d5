"""How an ``avro-confluent`` or ``json-registry`` output finds the schema it writes with,
against the tests' real schema registry (app/connectors/output_schemas.py): Confluent's
``auto.register.schemas``, ``use.latest.version`` and subject name strategies, and the
refusals at start."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from app.connectors.json_encoder import json_schema
from app.connectors.output_schemas import SerializerSettings, output_schema
from app.errors import SubjectSchemaError
from app.program.compile import compile_program

PROGRAM = """
CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, card BIGINT NOT NULL,
                note VARCHAR) WITH ('topic' = 't');
CREATE VIEW v WITH ('topic' = 'out', 'encoding' = 'avro-confluent', 'key' = 'card') AS
SELECT ts, card, note FROM t;
"""
LATEST = SerializerSettings(auto_register_schemas=False, use_latest_version=True)


def _view_schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    out = compile_program("p.sql", PROGRAM).view("v").output
    assert out is not None and out.key_schema is not None
    return out.key_schema, out.value_schema


def _register(url: str, subject: str, schema: dict[str, Any]) -> tuple[int, int]:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": url})
    client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
    latest = client.get_latest_version(subject)
    return int(latest.schema_id), int(latest.version)


def _purchase(*extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "Purchase",
        "namespace": "com.example",
        "fields": [
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "card", "type": "long"},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            *extra,
        ],
    }


def test_each_strategy_registers_under_its_subject(schema_registry: str) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    key, value = _view_schemas()
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    registry = {"url": schema_registry}
    found = {
        strategy: (
            output_schema(registry, "view v", topic, "key", key,
                          SerializerSettings(key_subject_name_strategy=strategy)).subject,
            output_schema(registry, "view v", topic, "value", value,
                          SerializerSettings(value_subject_name_strategy=strategy)).subject,
        )
        for strategy in ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
    }
    assert found == {
        "TopicNameStrategy": (f"{topic}-key", f"{topic}-value"),
        "RecordNameStrategy": ("tidemark.v_key", "tidemark.v"),
        "TopicRecordNameStrategy": (f"{topic}-tidemark.v_key", f"{topic}-tidemark.v"),
    }
    subjects = set(SchemaRegistryClient({"url": schema_registry}).get_subjects())
    assert {s for pair in found.values() for s in pair} <= subjects


def test_a_subject_named_outright_is_registered_in_place_of_the_strategys(
        schema_registry: str) -> None:
    """Flink's ``'key.avro-confluent.subject'`` / ``'value.avro-confluent.subject'`` (as
    the Avro Confluent format page overrides them: ``<topic>-key2``, ``<topic>-value2``)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    key, value = _view_schemas()
    topic = f"user_events-{uuid.uuid4().hex[:8]}"
    named = SerializerSettings(key_subject=f"{topic}-key2", value_subject=f"{topic}-value2")
    registry = {"url": schema_registry}
    found = (output_schema(registry, "view v", topic, "key", key, named),
             output_schema(registry, "view v", topic, "value", value, named))
    assert [f.subject for f in found] == [f"{topic}-key2", f"{topic}-value2"]
    client = SchemaRegistryClient(registry)
    assert [client.get_latest_version(f.subject).schema_id for f in found] == [
        f.schema_id for f in found]
    assert not {f"{topic}-key", f"{topic}-value"} & set(client.get_subjects())


def test_use_latest_version_writes_with_the_registered_schema(schema_registry: str) -> None:
    _, value = _view_schemas()
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    registered = _purchase({"name": "channel", "type": "string", "default": "web"})
    schema_id, version = _register(schema_registry, f"{topic}-value", registered)
    found = output_schema({"url": schema_registry}, "view v", topic, "value", value, LATEST)
    assert (found.subject, found.schema_id, found.version) == (f"{topic}-value", schema_id,
                                                               version)
    assert found.schema == registered


def test_a_latest_schema_that_cannot_carry_the_rows_is_refused_naming_it(
    schema_registry: str,
) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    _, value = _view_schemas()
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    incompatible = _purchase({"name": "channel", "type": "string"})
    incompatible["fields"][1] = {"name": "card", "type": "int"}
    schema_id, version = _register(schema_registry, f"{topic}-value", incompatible)
    with pytest.raises(SubjectSchemaError) as refused:
        output_schema({"url": schema_registry}, "view v", topic, "value", value, LATEST)
    assert str(refused.value).startswith(
        f"view v: the latest schema of subject {topic}-value (schema id {schema_id}, version"
        f" {version}) cannot carry the view's rows: column card is long, which field card of"
        " type int cannot hold; field channel has no default and the view has no column"
        " channel: register a version that can"
    )
    versions = SchemaRegistryClient({"url": schema_registry}).get_versions(f"{topic}-value")
    assert versions == [version], "nothing registered"


def test_without_auto_registration_the_subject_must_have_the_schema(schema_registry: str) -> None:
    key, value = _view_schemas()
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    lookup = SerializerSettings(auto_register_schemas=False)
    with pytest.raises(SubjectSchemaError, match=f"view v: the view's schema is not registered"
                       f" under subject {topic}-value and auto.register.schemas is false"):
        output_schema({"url": schema_registry}, "view v", topic, "value", value, lookup)
    with pytest.raises(SubjectSchemaError, match=f"subject {topic}-key has no registered version"):
        output_schema({"url": schema_registry}, "view v", topic, "key", key, LATEST)
    schema_id, _ = _register(schema_registry, f"{topic}-value", value)
    found = output_schema({"url": schema_registry}, "view v", topic, "value", value, lookup)
    assert (found.schema_id, found.schema) == (schema_id, value)


def test_a_record_strategy_refuses_a_bare_key(schema_registry: str) -> None:
    with pytest.raises(SubjectSchemaError, match="the key of topic out is a bare long"):
        output_schema({"url": schema_registry}, "view v", "out", "key", {"type": "long"},
                      SerializerSettings(key_subject_name_strategy="RecordNameStrategy"))


JSON_PROGRAM = """
CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, card BIGINT NOT NULL,
                note VARCHAR) WITH ('topic' = 't');
CREATE VIEW v WITH ('topic' = 'out', 'encoding' = 'json-registry') AS SELECT ts, card, note FROM t;
"""


def _json_view() -> dict[str, Any]:
    out = compile_program("p.sql", JSON_PROGRAM).view("v").output
    assert out is not None
    return out.value_schema


def _register_json(url: str, subject: str, document: dict[str, Any]) -> tuple[int, int]:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": url})
    client.register_schema(subject, Schema(json.dumps(document), "JSON"))
    latest = client.get_latest_version(subject)
    return int(latest.schema_id), int(latest.version)


def test_use_latest_version_writes_a_json_output_with_the_registered_json_schema(
    schema_registry: str,
) -> None:
    value = _json_view()
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    registered = {
        "type": "object",
        "properties": {
            "card": {"type": "number"},
            "note": {"oneOf": [{"type": "null"}, {"type": "string"}]},
            "ts": {"type": "string", "format": "date-time"},
            "channel": {"type": "string"},
        },
        "required": ["card"],
    }
    schema_id, version = _register_json(schema_registry, f"{topic}-value", registered)
    found = output_schema({"url": schema_registry}, "view v", topic, "value", value, LATEST,
                          json_schema(value))
    assert (found.subject, found.schema_id, found.version) == (f"{topic}-value", schema_id,
                                                               version)
    assert found.schema == value, "the objects written stay those of the view's columns"


def test_a_latest_json_schema_that_cannot_carry_the_rows_is_refused_naming_it(
    schema_registry: str,
) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    value = _json_view()
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    incompatible = {
        "type": "object",
        "properties": {"card": {"type": "string"}, "ts": {"type": "string"}},
        "additionalProperties": False,
    }
    schema_id, version = _register_json(schema_registry, f"{topic}-value", incompatible)
    with pytest.raises(SubjectSchemaError) as refused:
        output_schema({"url": schema_registry}, "view v", topic, "value", value, LATEST,
                      json_schema(value))
    assert str(refused.value) == (
        f"view v: the latest schema of subject {topic}-value (schema id {schema_id}, version"
        f" {version}) cannot carry the view's rows: column card (long) is written as integer,"
        ' and property card takes no integer (its type is "string"); it has no property note'
        " for column note: register a version that can (for every column a property that"
        " takes what is written for it, no other required property), or change the view's"
        " columns"
    )
    versions = SchemaRegistryClient({"url": schema_registry}).get_versions(f"{topic}-value")
    assert versions == [version], "nothing registered"


def test_a_json_output_refuses_a_latest_avro_schema(schema_registry: str) -> None:
    value = _json_view()
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    schema_id, version = _register(schema_registry, f"{topic}-value", _purchase())
    with pytest.raises(SubjectSchemaError) as refused:
        output_schema({"url": schema_registry}, "view v", topic, "value", value, LATEST,
                      json_schema(value))
    assert str(refused.value) == (
        f"view v: the latest schema of subject {topic}-value (schema id {schema_id}, version"
        f" {version}) is an Avro schema, not a JSON Schema: register a JSON Schema version, or"
        " use auto.register.schemas"
    )
