"""SPEC S3, S5, S7 of computed columns in the Kafka source's LateGate, against the oracle.

A Flink table whose event time is computed from an epoch-millis field
(``ts AS TO_TIMESTAMP_LTZ(epoch_ms, 3)`` with a WATERMARK on it): real JSON and Avro bytes
through ``decode_slice`` over real ``confluent_kafka.Message`` objects, with the spec sent
as the tasks receive it (JSON), give the rows, verdicts, messages and waterline probe the
reference evaluator gives for the same records.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Message

from app.circuit.reference import Reference, StepInput
from app.connectors.avro_codec import AvroCodec
from app.connectors.kafka_source import KafkaPartitionSlice, decode_slice
from app.connectors.late_gate import SourceSpec
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec

PROGRAM = """
CREATE TABLE orders (
  id BIGINT,
  epoch_ms BIGINT,
  price DECIMAL(10, 2),
  quantity INT,
  ts AS TO_TIMESTAMP_LTZ(epoch_ms, 3),
  cost AS price * quantity,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'orders', 'format' = '{fmt}');
"""
T0 = 1_700_000_000_000
#: On time, NULL epoch (invalid), beyond TIMESTAMP's range (invalid), late (below T0 - 5 s),
#: on time with a NULL cost (a nullable computed column).
ROWS: list[dict[str, Any]] = [
    {"id": 1, "epoch_ms": T0, "price": Decimal("2.50"), "quantity": 4},
    {"id": 2, "epoch_ms": None, "price": Decimal("1.00"), "quantity": 1},
    {"id": 3, "epoch_ms": 2**62, "price": Decimal("1.00"), "quantity": 1},
    {"id": 4, "epoch_ms": T0 - 60_000, "price": Decimal("1.00"), "quantity": 1},
    {"id": 5, "epoch_ms": T0 + 9_000, "price": None, "quantity": 3},
]


def _spec(fmt: str) -> tuple[SourceSpec, Reference]:
    circuit = compile_program("p.sql", PROGRAM.format(fmt=fmt))
    spec = source_spec(circuit.table("orders"))
    return SourceSpec.from_json(json.loads(json.dumps(spec.to_json()))), Reference(circuit)


def _value(fmt: str, spec: SourceSpec, row: dict[str, Any]) -> bytes:
    if fmt == "json":
        return json.dumps({k: (str(v) if isinstance(v, Decimal) else v)
                           for k, v in row.items()}).encode()
    return AvroCodec(spec.avro_schema).encode(row)


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_s5_s7_the_source_computes_event_time_as_the_reference_does(fmt: str) -> None:
    spec, reference = _spec(fmt)
    reference.step(StepInput(rows={"orders": [ROWS[0]]}))  # w(ts) = T0 - 5 s
    waterline = T0 - 5_000
    expected = reference.step(StepInput(rows={"orders": ROWS[1:]}))
    messages = [Message(topic="orders", partition=0, offset=i, value=_value(fmt, spec, r))
                for i, r in enumerate(ROWS[1:])]
    part = KafkaPartitionSlice(0, 0, len(messages), 2, T0, {"ts": waterline})
    batches = list(decode_slice(spec, part, messages))
    rows = pa.Table.from_batches(batches[:-1]).to_pylist()
    probe = batches[-1].to_pylist()[0]
    dead = [(r["_kind"], r["_message"], r["_late_column"]) for r in rows if r["_kind"] != "ok"]
    assert dead == [
        ("invalid", "column ts is NOT NULL but TO_TIMESTAMP_LTZ(epoch_ms, 3) is NULL for the "
         "record", None),
        ("invalid", "column ts is NOT NULL but TO_TIMESTAMP_LTZ(epoch_ms, 3) is NULL for the "
         "record", None),
        ("late", f"ts = {T0 - 60_000} is below the waterline {waterline}", "ts"),
    ]
    assert [(d.reason, d.message.split(" for ")[0]) for d in expected.dead_letters[:2]] == [
        ("invalid", "column ts is NOT NULL but TO_TIMESTAMP_LTZ(epoch_ms, 3) is NULL")] * 2
    assert [(d.reason, d.column, d.value) for d in expected.dead_letters[2:]] == [
        ("late", "ts", T0 - 60_000)]
    accepted = [r for r in rows if r["_kind"] == "ok"]
    assert [(r["id"], int(r["ts"].timestamp() * 1000), r["cost"]) for r in accepted] == [
        (5, T0 + 9_000, None)]
    # The late row moves the waterline too (S3): the probe is the greatest ts, T0 + 9 s.
    assert int(probe["ts"].timestamp() * 1000) == T0 + 9_000
    assert expected.waterlines["orders"]["ts"] == T0 + 4_000


def test_s8_a_nullable_computed_column_is_the_expressions_value() -> None:
    spec, _ = _spec("json")
    messages = [Message(topic="orders", partition=0, offset=0,
                        value=_value("json", spec, ROWS[0]))]
    part = KafkaPartitionSlice(0, 0, 1, 1, T0, {"ts": None})
    rows = pa.Table.from_batches(list(decode_slice(spec, part, messages))[:-1]).to_pylist()
    assert [(r["_kind"], r["cost"]) for r in rows] == [("ok", Decimal("10.00"))]
