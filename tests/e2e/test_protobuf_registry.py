"""``'format' = 'protobuf-confluent'`` tables and ``'encoding' = 'protobuf-confluent'`` outputs
through a real broker, the tests' real schema registry and Spark (SPEC L1, S7, S13).

The producer is confluent-kafka's own ProtobufSerializer with a message class built at run
time from a FileDescriptorProto (no generated code, as Tidemark reads it). One record is a
message of another schema whose ``card`` is a string, one has a body that is no protobuf,
one is unframed: each is a dead letter with its reason and original bytes. The view's
Protobuf file is registered at start and its records are read back with confluent-kafka's
ProtobufDeserializer, whose class is built the same way from the registered schema.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
from google.protobuf.message_factory import GetMessageClass

from app.cli import with_schema_registry
from app.connectors.confluent_avro import frame
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
) WITH ('topic' = '{topic}', 'format' = 'protobuf-confluent');

CREATE VIEW large_purchase WITH ('topic' = '{out}', 'encoding' = 'protobuf-confluent') AS
SELECT ts, card, amount, note FROM purchase WHERE amount >= 100;
"""
FD = descriptor_pb2.FieldDescriptorProto


def _pool() -> Any:
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(decimal_pb2.DESCRIPTOR.serialized_pb)
    return pool


def _purchase_class(card_type: int, name: str) -> Any:
    """``com.example.Purchase`` of a file of our own: ts Timestamp, card, amount
    confluent.type.Decimal, note optional string."""
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"{name}.proto", package="com.example", syntax="proto3",
        dependency=["google/protobuf/timestamp.proto", "confluent/type/decimal.proto"])
    message = proto.message_type.add(name="Purchase")
    message.field.add(name="ts", number=1, type=FD.TYPE_MESSAGE,
                      type_name=".google.protobuf.Timestamp", label=FD.LABEL_OPTIONAL)
    message.field.add(name="card", number=2, type=card_type, label=FD.LABEL_OPTIONAL)
    message.field.add(name="amount", number=3, type=FD.TYPE_MESSAGE,
                      type_name=".confluent.type.Decimal", label=FD.LABEL_OPTIONAL)
    message.field.add(name="note", number=4, type=FD.TYPE_STRING, label=FD.LABEL_OPTIONAL,
                      proto3_optional=True, oneof_index=0)
    message.oneof_decl.add(name="_note")
    pool = _pool()
    pool.Add(proto)
    return GetMessageClass(pool.FindMessageTypeByName("com.example.Purchase"))


def _purchase(cls: Any, ms: int, card: Any, cents: int, note: str | None = None) -> Any:
    message = cls(card=card)
    message.ts.FromMilliseconds(ms)
    message.amount.value = cents.to_bytes(8, "big", signed=True)
    message.amount.scale = 2
    if note is not None:
        message.note = note
    return message


def test_l1_s13_protobuf_records_in_and_out_with_confluents_serdes(
    kafka: Any, schema_registry: str, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import (
        ProtobufDeserializer,
        ProtobufSerializer,
    )
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
    purchase = _purchase_class(FD.TYPE_INT64, "purchase")
    serializer = ProtobufSerializer(purchase, registry)
    wrong = _purchase_class(FD.TYPE_STRING, "purchase_v0")
    wrong_serializer = ProtobufSerializer(
        wrong, registry, {"subject.name.strategy": lambda ctx, name: f"{topic}-v0"})
    base = 1_795_687_200_000  # 2026-11-26T10:00:00Z
    first = bytes(serializer(_purchase(purchase, base, 1, 15_025, "gift"), context) or b"")
    schema_id = int.from_bytes(first[1:5], "big")
    refused = bytes(wrong_serializer(_purchase(wrong, base + 120_000, "seven", 50_000),
                                     context) or b"")
    garbage = frame(schema_id, b"\x00\xff\xff\xff")
    unframed = _purchase(purchase, base + 180_000, 4, 90_000).SerializeToString()
    records = [
        (b"a", first),
        (b"b", serializer(_purchase(purchase, base + 60_000, 2, 2_000), context)),
        (b"refused", refused),
        (b"garbage", garbage),
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
    assert output is not None and output.value_schema_id is not None
    registered = registry.get_schema(output.value_schema_id, fmt="serialized")
    proto = descriptor_pb2.FileDescriptorProto.FromString(
        base64.b64decode(registered.schema_str))
    pool = _pool()
    pool.Add(proto)
    view_class = GetMessageClass(pool.FindMessageTypeByName("tidemark.large_purchase"))
    reader = ProtobufDeserializer(view_class, {}, registry)
    written = read_topic(kafka.conf(), out)
    assert {m.value()[:6] for m in written} == {
        b"\x00" + output.value_schema_id.to_bytes(4, "big") + b"\x00"
    }
    rows = []
    for m in written:
        message = reader(m.value(), SerializationContext(out, MessageField.VALUE))
        amount = Decimal(int.from_bytes(message.amount.value, "big", signed=True)).scaleb(
            -message.amount.scale)
        rows.append((message.ts.ToMilliseconds(), message.card, amount, message.note))
    assert rows == [(base, 1, Decimal("150.25"), "gift")]
    assert registry.get_latest_version(f"{out}-value").schema_id == output.value_schema_id

    dead = {
        m.key(): (m.value(), {k: v.decode() for k, v in m.headers()})
        for m in read_topic(kafka.conf(), circuit.table("purchase").dead_letter_topic)
    }
    assert {k: v for k, (v, _) in dead.items()} == {
        b"refused": refused, b"garbage": garbage, b"unframed": unframed}
    reason = {k: h["tidemark.error.reason"] for k, (_, h) in dead.items()}
    assert reason == {b"refused": "invalid", b"garbage": "malformed", b"unframed": "malformed"}
    assert dead[b"refused"][1]["tidemark.error.message"].endswith(
        "field card is string, which column card of type BIGINT cannot hold"
    )
