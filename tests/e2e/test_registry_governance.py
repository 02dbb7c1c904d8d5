"""Schema-registry governance as Confluent shops run it, through a real broker, the tests'
real schema registry and Spark (SPEC L6, S13; docs/adr/0026).

Auto-registration is off for the service (``schema_registry: auto.register.schemas: false``,
the usual production setting). View ``pinned`` writes with the latest schema its subject
``<topic>-value`` was given beforehand (``'use.latest.version' = 'true'``): another record
name, the fields in another order, ``card`` widened to a long, a field ``channel`` the view
has no column for (default ``web``). View ``named`` registers its own schemas
(``'auto.register.schemas' = 'true'``) under RecordNameStrategy (value) and
TopicRecordNameStrategy (key). Both are read back with confluent-kafka's AvroDeserializer.

A subject whose latest schema cannot carry the view's rows is refused by ``tidemark run`` at
start, naming the subject, the schema id and version and what does not fit; no topic is
written and no checkpoint made. The registry served over TLS is reached with a CA file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.cli import with_schema_registry
from app.connectors.confluent_avro import ConfluentAvroRecords, SchemaRegistryUnavailable
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
CREATE TABLE purchase (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    card   INT NOT NULL,
    amount DOUBLE NOT NULL,
    note   VARCHAR
) WITH ('topic' = '{topic}', 'format' = 'avro-confluent');

CREATE VIEW pinned WITH ('topic' = '{pinned}', 'encoding' = 'avro-confluent',
                         'use.latest.version' = 'true') AS
SELECT ts, card, amount, note FROM purchase WHERE amount >= 100;

CREATE VIEW named WITH ('topic' = '{named}', 'encoding' = 'avro-confluent', 'key' = 'card',
                        'auto.register.schemas' = 'true',
                        'value.subject.name.strategy' = 'RecordNameStrategy',
                        'key.subject.name.strategy' = 'TopicRecordNameStrategy') AS
SELECT ts, card, note FROM purchase WHERE amount < 100;
"""

INPUT: dict[str, Any] = {
    "type": "record",
    "name": "Purchase",
    "namespace": "com.example.shop",
    "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "card", "type": "int"},
        {"name": "amount", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
#: What the owners of the pinned view's subject registered: compatible with its rows.
AGREED: dict[str, Any] = {
    "type": "record",
    "name": "LargePurchase",
    "namespace": "com.example.audit",
    "fields": [
        {"name": "card", "type": "long"},
        {"name": "channel", "type": "string", "default": "web"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": "double"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def _utc(minute: int) -> datetime:
    return datetime(2026, 11, 26, 10, minute, tzinfo=UTC)


def _at(minute: int) -> int:
    return int(_utc(minute).timestamp() * 1000)


def _program(tmp_path: Path, topic: str, pinned: str, named: str) -> Path:
    program = tmp_path / "p.sql"
    program.write_text(PROGRAM.format(topic=topic, pinned=pinned, named=named), encoding="utf-8")
    return program


def _register(url: str, subject: str, schema: dict[str, Any]) -> Any:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": url})
    client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
    return client.get_latest_version(subject)


def test_l6_outputs_write_with_the_subjects_latest_schema_and_named_subjects(
    kafka: Any, schema_registry: str, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic, pinned, named = unique_topic("in"), unique_topic("pinned"), unique_topic("named")
    kafka.create_topic(topic)
    agreed = _register(schema_registry, f"{pinned}-value", AGREED)
    settings = kafka.settings(
        tmp_path / "ck",
        shuffle_partitions=2,
        schema_registry={
            "schema.registry.url": schema_registry,
            "auto.register.schemas": "false",
        },
    )
    circuit = with_schema_registry(
        compile_program(_program(tmp_path, topic, pinned, named)), settings
    )
    pinned_out, named_out = circuit.view("pinned").output, circuit.view("named").output
    assert (pinned_out.value_subject, pinned_out.value_schema_id) == (
        f"{pinned}-value", agreed.schema_id
    )
    assert (named_out.key_subject, named_out.value_subject) == (
        f"{named}-tidemark.named_key", "tidemark.named"
    )

    registry = SchemaRegistryClient({"url": schema_registry})
    serializer = AvroSerializer(registry, json.dumps(INPUT))
    context = SerializationContext(topic, MessageField.VALUE)
    rows = [
        {"ts": _at(0), "card": 1, "amount": 150.0, "note": "gift"},
        {"ts": _at(1), "card": 2, "amount": 20.0, "note": None},
        {"ts": _at(2), "card": 3, "amount": 300.0, "note": None},
    ]
    producer = Producer({**kafka.conf(), "log_level": 3})
    for row in rows:
        producer.produce(topic, value=serializer(row, context))
    assert producer.flush(30) == 0
    reports: list[StepReport] = []
    service = Service(circuit, settings, on_step=reports.append)
    service.start(once=True)
    service.wait(timeout_seconds=300)
    assert sum(r.accepted for r in reports if r.step is not None) == 3

    deserializer = AvroDeserializer(registry)
    read_pinned = SerializationContext(pinned, MessageField.VALUE)
    records = read_topic(kafka.conf(), pinned)
    assert {r.value()[1:5] for r in records} == {agreed.schema_id.to_bytes(4, "big")}
    assert sorted((deserializer(r.value(), read_pinned) for r in records),
                  key=lambda r: r["ts"]) == [
        {"card": 1, "channel": "web", "note": "gift", "amount": 150.0, "ts": _utc(0)},
        {"card": 3, "channel": "web", "note": None, "amount": 300.0, "ts": _utc(2)},
    ]
    assert registry.get_versions(f"{pinned}-value") == [agreed.version], "nothing registered"

    named_records = read_topic(kafka.conf(), named)
    assert [
        (deserializer(r.key(), SerializationContext(named, MessageField.KEY)),
         deserializer(r.value(), SerializationContext(named, MessageField.VALUE)))
        for r in named_records
    ] == [({"card": 2}, {"ts": _utc(1), "card": 2, "note": None})]
    assert registry.get_latest_version("tidemark.named").schema_id == named_out.value_schema_id


def test_l6_a_latest_schema_that_cannot_carry_the_rows_refuses_the_start(
    kafka: Any, schema_registry: str, unique_topic: Any, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient

    topic, pinned, named = unique_topic("in"), unique_topic("pinned"), unique_topic("named")
    kafka.create_topic(topic)
    narrow = {**AGREED, "fields": [
        {"name": "card", "type": "int"}, *AGREED["fields"][2:],
        {"name": "region", "type": "string"},
    ]}
    agreed = _register(schema_registry, f"{pinned}-value", narrow)
    config = tmp_path / "tidemark.yaml"
    config.write_text(
        "schema_registry:\n"
        f"  schema.registry.url: {schema_registry}\n"
        "  auto.register.schemas: false\n",
        encoding="utf-8",
    )
    checkpoint = tmp_path / "ck"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}
    env |= {f"TIDEMARK_KAFKA_{k.upper().replace('.', '_')}": v
            for k, v in kafka.client_config().items()}
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", str(_program(tmp_path, topic, pinned, named)),
         "--once", "--bootstrap-servers", kafka.bootstrap_servers,
         "--checkpoint", str(checkpoint), "--config", str(config)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, check=False,
    )
    assert result.returncode == 2, result.stderr
    assert (
        f"view pinned: the latest schema of subject {pinned}-value (schema id"
        f" {agreed.schema_id}, version {agreed.version}) cannot carry the view's rows: field"
        " region has no default and the view has no column region"
    ) in " ".join(result.stderr.split())
    topics = AdminClient({**kafka.conf(), "log_level": 3}).list_topics(timeout=30).topics
    assert pinned not in topics and named not in topics, "nothing written"
    assert not checkpoint.exists()


def test_l1_l6_the_registry_over_tls_is_reached_with_a_ca_file(
    unique_topic: Any, tmp_path: Path
) -> None:
    subprocess.run(["bash", str(ROOT / "scripts" / "fetch-schema-registry.sh")], check=True)
    from local_schema_registry import LocalSchemaRegistry

    from app.config import Settings
    from app.local_kafka import make_tls_files

    tls = make_tls_files(tmp_path / "tls")
    registry = LocalSchemaRegistry(tls=(tls.server_certificate, tls.server_key), ca=tls.ca)
    try:
        registry.start()
    except RuntimeError as exc:
        registry.cleanup()
        pytest.fail(f"the schema registry over TLS did not start: {exc}", pytrace=False)
    try:
        topic, pinned, named = unique_topic("in"), unique_topic("pinned"), unique_topic("named")
        program = compile_program(_program(tmp_path, topic, pinned, named))
        trusted = Settings(schema_registry={
            "schema.registry.url": registry.url,
            "schema.registry.ssl.ca.location": str(tls.ca),
        })
        circuit = with_schema_registry(program, trusted)
        named_out = circuit.view("named").output
        assert named_out.value_schema_id is not None and named_out.key_schema_id is not None
        table = circuit.table("purchase")
        assert table.schema_registry["ssl.ca.location"] == str(tls.ca)
        # A table's decoder fetches a writer schema by id over the same TLS connection.
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        client = SchemaRegistryClient(table.schema_registry)
        writer_id = client.register_schema(f"{topic}-value", Schema(json.dumps(INPUT), "AVRO"))
        from app.connectors.avro_codec import AvroCodec
        from app.connectors.confluent_avro import frame

        body = AvroCodec(INPUT).encode({"ts": 5, "card": 7, "amount": 1.5, "note": None})
        decoder = ConfluentAvroRecords("purchase", table.avro_schema, table.schema_registry)
        assert decoder.decode(frame(writer_id, body)) == {
            "ts": 5, "card": 7, "amount": 1.5, "note": None
        }
        # Without the CA the registry's certificate is not trusted: refused at start.
        untrusted = Settings(schema_registry={"schema.registry.url": registry.url})
        with pytest.raises(SchemaRegistryUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            with_schema_registry(program, untrusted)
    finally:
        registry.cleanup()
