"""``'format' = 'json-registry'`` tables and ``'encoding' = 'json-registry'`` outputs through a
real broker, the tests' real schema registry and Spark (SPEC L1, S7, S13).

The producer is confluent-kafka's own JSONSerializer; one record it was told not to validate
breaks its schema (``card`` a string), one is unframed JSON: both are dead letters with
their reasons and original bytes. The view's JSON Schema is registered at start and its
records are read back with confluent-kafka's JSONDeserializer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.cli import with_schema_registry
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

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
