"""Debezium change events in Avro through the registry (``'format' =
'debezium-avro-confluent'``; ADR 0028, SPEC S7, S16): events written by confluent-kafka's
AvroSerializer in the envelope Kafka Connect's AvroConverter registers, read by the gate of a
compiled table exactly as the same events in JSON are, and every bad event a dead letter with
its reason."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

from debezium_avro import ENVELOPE, avro_events

from app.connectors.confluent_avro import frame
from app.connectors.late_gate import LateGate
from app.connectors.record_metadata import RecordMeta
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec

NOW = 1_800_000_000_000
RATES = """
CREATE TABLE rates (
    changed  TIMESTAMP NOT NULL METADATA FROM 'value.source.timestamp'
             LATENESS INTERVAL '0' SECOND,
    ingested TIMESTAMP METADATA FROM 'value.ingestion-timestamp',
    tbl      VARCHAR METADATA FROM 'value.source.table',
    currency VARCHAR NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = '{topic}', 'format' = '{fmt}', 'schema-registry.url' = '{url}');
"""


def _gate(tmp: Path, url: str, topic: str, fmt: str = "debezium-avro-confluent") -> LateGate:
    path = tmp / f"{fmt}.sql"
    path.write_text(RATES.format(topic=topic, fmt=fmt, url=url) if fmt != "debezium-json"
                    else RATES.replace(", 'schema-registry.url' = '{url}'", "").format(
                        topic=topic, fmt=fmt))
    return LateGate(source_spec(compile_program(path).table("rates")), {"changed": None}, NOW)


def _verdict(gate: LateGate, value: bytes | None) -> tuple[str, Any, str]:
    found = gate.classify(value, [], RecordMeta(b"k", NOW, 0, 0))
    return found.kind, found.row, found.message or ""


def test_s16_every_op_is_the_row_or_deletion_the_json_event_gives(
    tmp_path: Path, schema_registry: str
) -> None:
    topic = f"rates-{uuid.uuid4().hex[:8]}"
    event = avro_events(schema_registry, topic)
    avro = _gate(tmp_path, schema_registry, topic)
    plain = _gate(tmp_path, schema_registry, topic, "debezium-json")

    def as_json(op: str, ts: int, currency: str, before: str | None,
                after: str | None) -> bytes:
        def image(rate: str | None) -> dict[str, Any] | None:
            return None if rate is None else {"currency": currency, "rate": rate}

        return json.dumps({"before": image(before), "after": image(after), "op": op,
                           "ts_ms": ts + 150, "source": {"ts_ms": ts, "table": "rates"}}
                          ).encode()

    cases = [("c", 1_000, "EUR", None, "1.10"), ("r", 1_000, "GBP", None, "1.25"),
             ("u", 2_000, "EUR", "1.10", "1.12"), ("d", 3_000, "GBP", "1.25", None)]
    verdicts = [_verdict(avro, event(*case)) for case in cases]
    assert verdicts == [_verdict(plain, as_json(*case)) for case in cases]
    assert [(kind, row) for kind, row, _ in verdicts] == [
        ("ok", {"changed": 1_000, "ingested": 1_150, "tbl": "rates", "currency": "EUR",
                "rate": Decimal("1.10")}),
        ("ok", {"changed": 1_000, "ingested": 1_150, "tbl": "rates", "currency": "GBP",
                "rate": Decimal("1.25")}),
        ("ok", {"changed": 2_000, "ingested": 2_150, "tbl": "rates", "currency": "EUR",
                "rate": Decimal("1.12")}),
        ("delete", {"changed": 3_000, "ingested": 3_150, "tbl": "rates", "currency": "GBP",
                    "rate": None}),
    ]
    assert _verdict(avro, None)[0] == "skipped"  # the tombstone after a delete event


def test_s7_bad_events_are_dead_letters_with_their_reason(
    tmp_path: Path, schema_registry: str
) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    topic = f"rates-{uuid.uuid4().hex[:8]}"
    event = avro_events(schema_registry, topic)
    gate = _gate(tmp_path, schema_registry, topic)
    client = SchemaRegistryClient({"url": schema_registry})
    no_op = {**ENVELOPE, "fields": [f for f in ENVELOPE["fields"] if f["name"] != "op"]}
    no_op_id = client.register_schema(f"{topic}-no-op", Schema(json.dumps(no_op), "AVRO"))
    good = event("c", 1_000, "EUR", None, "1.10")
    found = {
        "unframed": _verdict(gate, b'{"op": "c", "after": {"currency": "EUR"}}'),
        "truncate": _verdict(gate, event("t", 1_000, "EUR", None, None)),
        "no after": _verdict(gate, event("c", 1_000, "EUR", None, None)),
        "garbage": _verdict(gate, good[:5] + b"\x02\xff"),
        "no op": _verdict(gate, frame(no_op_id, b"\x00\x00")),
    }
    assert {k: kind for k, (kind, _, _) in found.items()} == {
        "unframed": "malformed", "truncate": "invalid", "no after": "invalid",
        "garbage": "malformed", "no op": "invalid",
    }
    message = {k: m for k, (_, _, m) in found.items()}
    assert message["truncate"].startswith('op "t" is a truncate that table rates does not apply')
    assert message["no after"] == "a 'c' event without after: it has no row"
    assert message["no op"].endswith("the writer's schema has no field op and table rates's"
                                     " schema gives it no default")
