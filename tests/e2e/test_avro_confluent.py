"""``'format' = 'avro-confluent'`` tables through a real broker, a real schema registry and
Spark (SPEC L1, S5-S7).

The producer is confluent-kafka's own ``AvroSerializer`` with the registry, and it evolves its
schema between the steps: step 1 writes ``Purchase`` v1 (no ``note``), step 2 v2 (``note``
added with a default, and a field the table does not read). The table reads ``note`` as a
nullable column, so v1 records decode with ``note`` NULL (the reader's default) and v2 records
with theirs. One ``--once`` run per step; LATENESS 1 minute on ``ts``:

    step  records (times on 2026-11-26)                      dead letters          w after
    1     v1 10:00 card 1 150.0, v1 10:01 card 2 20.0        -                     10:00
    2     v2 10:05 card 1 300.0 "gift", v2 10:06 card 3      late 09:58,           10:05
          100.0 (no note), v1 09:58 card 2 500.0, an         invalid (schema id),
          unknown schema id, schemaless Avro (not framed)    malformed

The view writes purchases of at least 100 with ``'encoding' = 'avro-confluent'``: its value
schema is registered under ``<topic>-value`` at start and its records, framed with that id,
are read back with confluent-kafka's ``AvroDeserializer`` and checked against hand-written
rows; the dead letters by reason, message and original bytes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.cli import with_schema_registry
from app.connectors.avro_codec import AvroCodec
from app.connectors.confluent_avro import frame, unframe
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE purchase (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    card   BIGINT NOT NULL,
    amount DOUBLE NOT NULL,
    note   VARCHAR
) WITH ('topic' = '{topic}', 'format' = 'avro-confluent');

CREATE VIEW large_purchase WITH ('topic' = '{out}', 'encoding' = 'avro-confluent') AS
SELECT ts, card, amount, note FROM purchase WHERE amount >= 100;
"""

V1: dict[str, Any] = {
    "type": "record",
    "name": "Purchase",
    "namespace": "com.example.shop",
    "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "card", "type": "long"},
        {"name": "amount", "type": "double"},
    ],
}
V2: dict[str, Any] = {
    **V1,
    "fields": [
        *V1["fields"],
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "channel", "type": "string", "default": "web"},
    ],
}


def _utc(hour: int, minute: int) -> datetime:
    return datetime(2026, 11, 26, hour, minute, tzinfo=UTC)


def _at(hour: int, minute: int) -> int:
    return int(_utc(hour, minute).timestamp() * 1000)


def test_an_evolving_registry_producer_is_decoded_exactly_l1_s7(
    kafka: Any, schema_registry: str, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic, out = unique_topic("purchases"), unique_topic("large")
    kafka.create_topic(topic, partitions=2)
    program = tmp_path / "p.sql"
    program.write_text(PROGRAM.format(topic=topic, out=out), encoding="utf-8")
    settings = kafka.settings(
        tmp_path / "ck", shuffle_partitions=2, schema_registry_url=schema_registry
    )
    circuit = with_schema_registry(compile_program(program), settings)
    assert circuit.table("purchase").schema_registry == {"url": schema_registry}

    registry = SchemaRegistryClient({"url": schema_registry})
    context = SerializationContext(topic, MessageField.VALUE)
    v1 = AvroSerializer(registry, json.dumps(V1))
    v2 = AvroSerializer(registry, json.dumps(V2))

    def one(serializer: Any, record: dict[str, Any]) -> bytes:
        data = serializer(record, context)
        assert data is not None
        return bytes(data)

    unknown = frame(999_999, one(v1, {"ts": _at(10, 7), "card": 4, "amount": 1.0})[5:])
    unframed = AvroCodec(circuit.table("purchase").avro_schema).encode(
        {"ts": _at(10, 8), "card": 5, "amount": 200.0, "note": "no framing"}
    )
    late = one(v1, {"ts": _at(9, 58), "card": 2, "amount": 500.0})
    steps: list[list[tuple[bytes, bytes]]] = [
        [
            (b"a", one(v1, {"ts": _at(10, 0), "card": 1, "amount": 150.0})),
            (b"b", one(v1, {"ts": _at(10, 1), "card": 2, "amount": 20.0})),
        ],
        [
            (b"c", one(v2, {"ts": _at(10, 5), "card": 1, "amount": 300.0, "note": "gift"})),
            (b"d", one(v2, {"ts": _at(10, 6), "card": 3, "amount": 100.0, "channel": "app"})),
            (b"late", late),
            (b"unknown", unknown),
            (b"unframed", unframed),
        ],
    ]
    assert unframe(steps[0][0][1])[0] != unframe(steps[1][0][1])[0]  # the schema evolved

    producer = Producer({**kafka.conf(), "log_level": 3})
    reports: list[StepReport] = []
    service = Service(circuit, settings, on_step=reports.append)
    for records in steps:
        for i, (key, value) in enumerate(records):
            producer.produce(topic, key=key, value=value, partition=i % 2)
        assert producer.flush(30) == 0
        service.start(once=True)
        service.wait(timeout_seconds=300)

    data_steps = [r for r in reports if r.step is not None]
    assert [{k: n for k, n in r.dead_letters.items() if n} for r in data_steps] == [
        {},
        {"late": 1, "invalid": 1, "malformed": 1},
    ]
    assert [r.accepted for r in data_steps] == [2, 2]
    assert [r.waterlines["ts"] for r in data_steps] == [_at(10, 0), _at(10, 5)]

    # The output, as a consumer with confluent-kafka's own deserializer reads it.
    output = circuit.view("large_purchase").output
    assert output is not None and output.value_schema_id is not None
    assert registry.get_latest_version(f"{out}-value").schema_id == output.value_schema_id
    deserializer = AvroDeserializer(registry)
    read_back = SerializationContext(out, MessageField.VALUE)
    records = read_topic(kafka.conf(), out)
    assert {unframe(m.value())[0] for m in records} == {output.value_schema_id}
    rows = sorted((deserializer(m.value(), read_back) for m in records), key=lambda r: r["ts"])
    assert rows == [
        {"ts": _utc(10, 0), "card": 1, "amount": 150.0, "note": None},
        {"ts": _utc(10, 5), "card": 1, "amount": 300.0, "note": "gift"},
        {"ts": _utc(10, 6), "card": 3, "amount": 100.0, "note": None},
    ]

    dead = {
        m.key(): (m.value(), {k: v.decode() for k, v in m.headers()})
        for m in read_topic(kafka.conf(), circuit.table("purchase").dead_letter_topic)
    }
    assert {key: value for key, (value, _) in dead.items()} == {
        b"late": late,
        b"unknown": unknown,
        b"unframed": unframed,
    }, "the original bytes, for replay"
    reason = {key: h["tidemark.error.reason"] for key, (_, h) in dead.items()}
    message = {key: h["tidemark.error.message"] for key, (_, h) in dead.items()}
    assert reason == {b"late": "late", b"unknown": "invalid", b"unframed": "malformed"}
    assert message[b"unknown"].startswith("schema id 999999 is not in the schema registry: ")
    assert message[b"unframed"].startswith(
        "not a Confluent-framed Avro record of table purchase: the first byte is"
    )
    assert dead[b"late"][1]["tidemark.late.value"] == "2026-11-26T09:58:00.000Z"
