"""``'format' = 'json-registry'`` tables and ``'encoding' = 'json-registry'`` outputs through a
real broker, the tests' real schema registry and Spark (SPEC L1, S7, S13).

The producer is confluent-kafka's own JSONSerializer; one record it was told not to validate
breaks its schema (``card`` a string), one is unframed JSON: both are dead letters with
their reasons and original bytes. The view's JSON Schema is registered at start and its
records are read back with confluent-kafka's JSONDeserializer.

With auto-registration off and ``use.latest.version`` (docs/adr/0026), a view writes with the
JSON Schema its subject was given beforehand, read back by the JSONDeserializer; a subject
whose latest JSON Schema cannot carry the view's rows refuses ``tidemark run`` at start,
naming the subject, the schema id and version and what does not fit, with nothing written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.cli import with_schema_registry
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
CREATE TABLE purchase (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    card   BIGINT NOT NULL,
    amount DECIMAL(10, 2) NOT NULL,
    note   VARCHAR
) WITH ('topic' = '{topic}', 'format' = 'json-registry');

CREATE VIEW large_purchase WITH ('topic' = '{out}', 'encoding' = 'json-registry') AS
SELECT ts, card, amount, note FROM purchase WHERE amount >= 100;
"""
SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "com.example.Purchase",
    "type": "object",
    "properties": {
        "ts": {"type": "string"},
        "card": {"type": "integer"},
        "amount": {"type": "number"},
        "note": {"type": ["string", "null"]},
    },
    "required": ["ts", "card", "amount"],
}


def test_l1_s13_json_schema_records_in_and_out_with_confluents_serdes(
    kafka: Any, schema_registry: str, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic, out = unique_topic("purchases"), unique_topic("large")
    kafka.create_topic(topic)
    program = tmp_path / "p.sql"
    program.write_text(PROGRAM.format(topic=topic, out=out), encoding="utf-8")
    settings = kafka.settings(tmp_path / "ck", shuffle_partitions=2,
                              schema_registry_url=schema_registry)
    circuit = with_schema_registry(compile_program(program), settings)

    registry = SchemaRegistryClient({"url": schema_registry})
    context = SerializationContext(topic, MessageField.VALUE)
    serializer = JSONSerializer(json.dumps(SCHEMA), registry)
    unchecked = JSONSerializer(json.dumps(SCHEMA), registry, conf={"validate": False})
    refused = bytes(unchecked(
        {"ts": "2026-11-26T10:02:00Z", "card": "seven", "amount": 500}, context) or b"")
    unframed = b'{"ts": "2026-11-26T10:03:00Z", "card": 4, "amount": 900}'
    records = [
        (b"a", serializer({"ts": "2026-11-26T10:00:00Z", "card": 1, "amount": 150.25,
                           "note": "gift"}, context)),
        (b"b", serializer({"ts": "2026-11-26T10:01:00Z", "card": 2, "amount": 20}, context)),
        (b"refused", refused),
        (b"unframed", unframed),
    ]
    producer = Producer({**kafka.conf(), "log_level": 3})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    reports: list[StepReport] = []
    service = Service(circuit, settings, on_step=reports.append)
    service.start(once=True)
    service.wait(timeout_seconds=300)
    assert sum(r.accepted for r in reports if r.step is not None) == 2

    output = circuit.view("large_purchase").output
    reader = JSONDeserializer(None, schema_registry_client=registry)
    written = read_topic(kafka.conf(), out)
    assert {m.value()[:5] for m in written} == {
        b"\x00" + (output.value_schema_id or 0).to_bytes(4, "big")
    }
    assert [reader(m.value(), SerializationContext(out, MessageField.VALUE))
            for m in written] == [
        {"ts": "2026-11-26T10:00:00.000Z", "card": 1, "amount": "150.25", "note": "gift"}
    ]
    assert registry.get_latest_version(f"{out}-value").schema_id == output.value_schema_id

    dead = {
        m.key(): (m.value(), {k: v.decode() for k, v in m.headers()})
        for m in read_topic(kafka.conf(), circuit.table("purchase").dead_letter_topic)
    }
    assert {k: v for k, (v, _) in dead.items()} == {b"refused": refused, b"unframed": unframed}
    reason = {k: h["tidemark.error.reason"] for k, (_, h) in dead.items()}
    assert reason == {b"refused": "invalid", b"unframed": "malformed"}
    assert dead[b"refused"][1]["tidemark.error.message"].endswith(
        "the JSON Schema refuses the record: 'seven' is not of type 'integer'"
    )


PINNED = """
CREATE TABLE purchase (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    card   BIGINT NOT NULL,
    amount DECIMAL(10, 2) NOT NULL,
    note   VARCHAR
) WITH ('topic' = '{topic}', 'format' = 'json-registry');

CREATE VIEW pinned WITH ('topic' = '{out}', 'encoding' = 'json-registry',
                         'auto.register.schemas' = 'false', 'use.latest.version' = 'true') AS
SELECT ts, card, amount, note FROM purchase WHERE amount >= 100;
"""
#: What the subject's owners registered: another title, the columns in another order, a
#: property no column fills, Java's oneOf for a nullable one, no other properties.
AGREED = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "com.example.LargePurchase",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "card": {"type": "number"},
        "channel": {"type": "string"},
        "note": {"oneOf": [{"type": "null", "title": "Not included"}, {"type": "string"}]},
        "amount": {"type": "string"},
        "ts": {"type": "string", "format": "date-time"},
    },
    "required": ["ts", "card", "amount"],
}


def _register(url: str, subject: str, schema: dict[str, Any]) -> Any:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": url})
    client.register_schema(subject, Schema(json.dumps(schema), "JSON"))
    return client.get_latest_version(subject)


@pytest.mark.slow  # CI's unit test_confluent_json writes with the latest ids from the program
def test_l6_s13_a_json_output_writes_with_the_subjects_latest_json_schema(
    kafka: Any, schema_registry: str, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic, out = unique_topic("purchases"), unique_topic("pinned")
    kafka.create_topic(topic)
    agreed = _register(schema_registry, f"{out}-value", AGREED)
    program = tmp_path / "p.sql"
    program.write_text(PINNED.format(topic=topic, out=out), encoding="utf-8")
    settings = kafka.settings(tmp_path / "ck", shuffle_partitions=2,
                              schema_registry_url=schema_registry)
    circuit = with_schema_registry(compile_program(program), settings)
    output = circuit.view("pinned").output
    assert (output.value_subject, output.value_schema_id) == (f"{out}-value", agreed.schema_id)

    registry = SchemaRegistryClient({"url": schema_registry})
    context = SerializationContext(topic, MessageField.VALUE)
    serializer = JSONSerializer(json.dumps(SCHEMA), registry)
    producer = Producer({**kafka.conf(), "log_level": 3})
    for row in (
        {"ts": "2026-11-26T10:00:00Z", "card": 1, "amount": 150.25, "note": "gift"},
        {"ts": "2026-11-26T10:01:00Z", "card": 2, "amount": 20},
        {"ts": "2026-11-26T10:02:00Z", "card": 3, "amount": 300},
    ):
        producer.produce(topic, value=serializer(row, context))
    assert producer.flush(30) == 0
    reports: list[StepReport] = []
    service = Service(circuit, settings, on_step=reports.append)
    service.start(once=True)
    service.wait(timeout_seconds=300)
    assert sum(r.accepted for r in reports if r.step is not None) == 3

    reader = JSONDeserializer(None, schema_registry_client=registry)
    written = read_topic(kafka.conf(), out)
    assert {m.value()[:5] for m in written} == {
        b"\x00" + int(agreed.schema_id).to_bytes(4, "big")
    }
    assert sorted((reader(m.value(), SerializationContext(out, MessageField.VALUE))
                   for m in written), key=lambda r: r["ts"]) == [
        {"ts": "2026-11-26T10:00:00.000Z", "card": 1, "amount": "150.25", "note": "gift"},
        {"ts": "2026-11-26T10:02:00.000Z", "card": 3, "amount": "300.00", "note": None},
    ]
    assert registry.get_versions(f"{out}-value") == [agreed.version], "nothing registered"


def test_l6_a_latest_json_schema_that_cannot_carry_the_rows_refuses_the_start(
    kafka: Any, schema_registry: str, unique_topic: Any, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient

    topic, out = unique_topic("purchases"), unique_topic("pinned")
    kafka.create_topic(topic)
    properties = {k: v for k, v in AGREED["properties"].items() if k != "note"}
    narrow = {**AGREED, "properties": {**properties, "amount": {"type": "number"}}}
    agreed = _register(schema_registry, f"{out}-value", narrow)
    program = tmp_path / "p.sql"
    program.write_text(PINNED.format(topic=topic, out=out), encoding="utf-8")
    checkpoint = tmp_path / "ck"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}
    env |= {f"TIDEMARK_KAFKA_{k.upper().replace('.', '_')}": v
            for k, v in kafka.client_config().items()}
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", str(program), "--once",
         "--bootstrap-servers", kafka.bootstrap_servers, "--checkpoint", str(checkpoint),
         "--schema-registry-url", schema_registry],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, check=False,
    )
    assert result.returncode == 2, result.stderr
    assert (
        f"view pinned: the latest schema of subject {out}-value (schema id"
        f" {agreed.schema_id}, version {agreed.version}) cannot carry the view's rows: column"
        " amount (decimal(10, 2)) is written as string, and property amount takes no string"
        ' (its type is "number"); it has no property note for column note: register a'
        " version that can"
    ) in " ".join(result.stderr.split())
    topics = AdminClient({**kafka.conf(), "log_level": 3}).list_topics(timeout=30).topics
    assert out not in topics, "nothing written"
    assert not checkpoint.exists()
