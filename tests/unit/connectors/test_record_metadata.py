"""Metadata columns are read from each Kafka record (key, timestamp, partition, offset,
headers), not its value: the gate's verdicts on them, and the source's two paths giving the
same rows, over real ``confluent_kafka.Message`` objects (no broker)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Message

from app.connectors.avro_codec import AvroCodec
from app.connectors.kafka_source import KafkaPartitionSlice, decode_slice
from app.connectors.late_gate import LateGate, SourceSpec, nullable_schema
from app.connectors.record_metadata import RecordMeta
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec

NOW = 1_800_000_000_000

PROGRAM = """
CREATE TABLE clicks (
    id      BIGINT NOT NULL,
    ts      TIMESTAMP NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '5' SECOND,
    p       INT METADATA FROM 'partition',
    "offset" BIGINT METADATA,
    k       VARCHAR METADATA FROM 'key',
    kb      VARBINARY METADATA FROM 'key',
    src     VARCHAR METADATA FROM 'headers.source',
    raw     VARBINARY METADATA FROM 'headers.raw'
) WITH ('topic' = 'in', 'format' = '{fmt}', 'max_future' = INTERVAL '1' HOUR);
"""
WATERLINES: dict[str, int | None] = {"ts": NOW - 10_000}


def _spec(tmp_path: Path, fmt: str = "avro") -> SourceSpec:
    path = tmp_path / "p.sql"
    path.write_text(PROGRAM.replace("{fmt}", fmt))
    return source_spec(compile_program(path).table("clicks"))


def _value(spec: SourceSpec, ident: int | None) -> bytes:
    if spec.format == "json":
        return json.dumps({"id": ident}).encode()
    return AvroCodec(spec.avro_schema).encode({"id": ident})


def _message(
    spec: SourceSpec,
    offset: int,
    ident: int | None = 1,
    key: bytes | None = b"user-1",
    timestamp: int | None = NOW,
    headers: Any = None,
) -> Any:
    return Message(
        topic="in",
        partition=3,
        offset=offset,
        key=key,
        value=_value(spec, ident),
        headers=headers,
        timestamp=(1, timestamp) if timestamp is not None else (0, 0),
    )


def _rows(spec: SourceSpec, msgs: Sequence[Any]) -> list[dict[str, Any]]:
    """The rows of both paths (asserted equal), without the probe."""
    part = KafkaPartitionSlice(3, 0, 10**6, 7, NOW, dict(WATERLINES))
    fast = pa.Table.from_batches(list(decode_slice(spec, part, msgs))).to_pylist()
    slow = pa.Table.from_batches(list(decode_slice(spec, part, msgs, columnar=False))).to_pylist()
    assert fast == slow
    return [r for r in fast if r["_kind"] != "probe"]


def test_the_value_schema_has_no_metadata_field(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    assert [f["name"] for f in spec.avro_schema["fields"]] == ["id"]
    assert [c.name for c in spec.value_columns] == ["id"]
    assert SourceSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize("fmt", ["avro", "json"])
def test_each_metadata_kind_is_decoded_from_the_record(tmp_path: Path, fmt: str) -> None:
    spec = _spec(tmp_path, fmt)
    msgs = [
        _message(spec, 40, headers=[("source", b"web"), ("raw", b"\x00\xff"),
                                    ("source", b"app")]),
        _message(spec, 41, ident=2, key=None, timestamp=NOW - 1_000),
        _message(spec, 42, ident=3, key="é".encode(), headers=[("raw", None)]),
    ]
    rows = _rows(spec, msgs)
    picked = [{c: r[c] for c in ("id", "ts", "p", "offset", "k", "kb", "src", "raw")}
              for r in rows]
    stamp = pa.scalar(NOW, pa.timestamp("ms")).cast(pa.timestamp("us", tz="UTC")).as_py()
    earlier = pa.scalar(NOW - 1_000, pa.timestamp("ms")).cast(
        pa.timestamp("us", tz="UTC")).as_py()
    assert picked == [
        # The last header of a name is its value (Kafka's lastHeader).
        {"id": 1, "ts": stamp, "p": 3, "offset": 40, "k": "user-1", "kb": b"user-1",
         "src": "app", "raw": b"\x00\xff"},
        {"id": 2, "ts": earlier, "p": 3, "offset": 41, "k": None, "kb": None, "src": None,
         "raw": None},
        {"id": 3, "ts": stamp, "p": 3, "offset": 42, "k": "é", "kb": "é".encode(), "src": None,
         "raw": None},
    ]
    assert [r["_kind"] for r in rows] == ["ok", "ok", "ok"]


def test_the_kafka_timestamp_gates_late_and_future_records(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    msgs = [
        _message(spec, 1, timestamp=NOW - 10_001),  # below w(t-1) = NOW - 10 s: late
        _message(spec, 2, timestamp=NOW - 10_000),  # equal is on time (S5)
        _message(spec, 3, timestamp=NOW + 3_600_001),  # beyond max_future
    ]
    rows = _rows(spec, msgs)
    assert [r["_kind"] for r in rows] == ["late", "ok", "future"]
    assert rows[0]["_late_column"] == "ts" and rows[0]["_late_value"] == NOW - 10_001
    assert rows[0]["_late_waterline"] == NOW - 10_000
    # Well-formed rows move the waterline's maximum (S3), future ones do not; the probe
    # starts at w(t-1) + L, the earlier steps' highest value.
    for waterline, highest in ((NOW - 10_000, NOW - 5_000), (NOW - 30_000, NOW - 10_000)):
        part = KafkaPartitionSlice(3, 0, 10**6, 7, NOW, {"ts": waterline})
        probe = list(decode_slice(spec, part, msgs))[-1].to_pylist()[0]
        assert probe["ts"].timestamp() * 1000 == highest


def test_a_record_without_what_a_not_null_metadata_column_needs_is_invalid(
    tmp_path: Path,
) -> None:
    spec = _spec(tmp_path)
    rows = _rows(spec, [
        _message(spec, 5, timestamp=None),
        _message(spec, 6, key=b"\xff\xfe"),
        _message(spec, 7, key=b"\xed\xa0\x80"),  # an encoded surrogate: no UTF-8 text
        _message(spec, 8, key=b"\xc0\xaf"),  # an overlong form
        _message(spec, 9, key=b"\xf4\x8f\xbf\xbf"),  # U+10FFFF, the last code point
    ])
    assert [r["_kind"] for r in rows] == ["invalid", "invalid", "invalid", "invalid", "ok"]
    assert rows[0]["_message"] == "column ts is NOT NULL but the record has no timestamp"
    assert rows[1]["_message"].startswith("column k: the record's key is not UTF-8 text")
    # The dead letter keeps the record as it came.
    assert rows[1]["_key"] == b"\xff\xfe" and rows[1]["_offset"] == 6
    assert rows[0]["ts"] is None and rows[1]["id"] is None


def test_the_gate_names_a_missing_header_of_a_not_null_column(tmp_path: Path) -> None:
    path = tmp_path / "h.sql"
    path.write_text("CREATE TABLE t (id BIGINT, src VARCHAR NOT NULL METADATA FROM "
                    "'headers.source') WITH ('topic' = 'in');")
    spec = source_spec(compile_program(path).table("t"))
    gate = LateGate(spec, {}, NOW)
    value = AvroCodec(spec.avro_schema).encode({"id": 1})
    meta = RecordMeta(None, NOW, 0, 9)
    assert gate.classify(value, [("other", b"x")], meta).message == (
        "column src is NOT NULL but the record has no header source")
    verdict = gate.classify(value, [("source", b"\xe2\x82")], meta)
    assert verdict.kind == "invalid" and "header source is not UTF-8" in verdict.message
    assert gate.classify(value, [("source", b"web")], meta).row == {"id": 1, "src": "web"}


def test_a_metadata_column_is_never_taken_for_a_value_field(tmp_path: Path) -> None:
    """Bytes that only a writer schema with every value field nullable reads, and without a
    null in a NOT NULL value field, are malformed: a metadata column is no field there."""
    spec = _spec(tmp_path)
    message = _message(spec, 7)
    message.set_value(AvroCodec(nullable_schema(spec.avro_schema)).encode({"id": 2}))
    rows = _rows(spec, [message])
    assert rows[0]["_kind"] == "malformed"
    json_spec = _spec(tmp_path, "json")
    rows = _rows(json_spec, [_message(json_spec, 8, ident=None)])
    assert rows[0]["_message"] == "column id is NOT NULL but the record has null"


def test_an_avro_confluent_table_reads_metadata_on_both_paths(
    tmp_path: Path, schema_registry: str
) -> None:
    """Framed bodies of the table's own record take the columnar path, an evolved writer the
    per-record one; both read the Kafka timestamp and key alike."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from app.connectors.kafka_source import _SliceReader

    path = tmp_path / "c.sql"
    path.write_text(
        "CREATE TABLE clicks (id BIGINT NOT NULL, ts TIMESTAMP NOT NULL METADATA FROM "
        "'timestamp' LATENESS INTERVAL '5' SECOND, k VARCHAR METADATA FROM 'key') WITH ("
        f"'topic' = 'in', 'format' = 'avro-confluent', 'schema-registry.url' = "
        f"'{schema_registry}');"
    )
    spec = source_spec(compile_program(path).table("clicks"))
    client = SchemaRegistryClient({"url": schema_registry})
    context = SerializationContext(f"clicks-{tmp_path.name}", MessageField.VALUE)
    own = AvroSerializer(client, json.dumps(spec.avro_schema))
    evolved_schema = {**spec.avro_schema, "fields": [
        *spec.avro_schema["fields"], {"name": "extra", "type": "string", "default": ""}]}
    evolved = AvroSerializer(client, json.dumps(evolved_schema))

    def message(offset: int, value: bytes, timestamp: int) -> Any:
        return Message(topic="in", partition=3, offset=offset, key=b"u%d" % offset,
                       value=value, timestamp=(1, timestamp))

    plain = [message(i, own({"id": i}, context), NOW - 20_000 + i * 5_000) for i in range(4)]
    part = KafkaPartitionSlice(3, 0, 10**6, 7, NOW, dict(WATERLINES))
    assert _SliceReader(spec, part)._columnar(plain) is not None
    rows = _rows(spec, plain + [message(9, evolved({"id": 9, "extra": "x"}, context), NOW)])
    assert [(r["id"], r["k"], r["_kind"]) for r in rows] == [
        (0, "u0", "late"), (1, "u1", "late"), (2, "u2", "ok"), (3, "u3", "ok"),
        (9, "u9", "ok"),
    ]
    assert [r["ts"].timestamp() * 1000 for r in rows[2:]] == [NOW - 10_000, NOW - 5_000, NOW]


KEYED = """
CREATE TABLE rates (
    ts       TIMESTAMP NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '0' SECOND,
    currency VARCHAR NOT NULL METADATA FROM 'key',
    rate     DOUBLE NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = 'in', 'max_future' = INTERVAL '1' HOUR);
"""


def _keyed_spec(tmp_path: Path, text: str = KEYED) -> SourceSpec:
    path = tmp_path / "k.sql"
    path.write_text(text)
    return source_spec(compile_program(path).table("rates"))


def _tombstone(offset: int, key: bytes | None, timestamp: int, headers: Any = None) -> Any:
    return Message(topic="in", partition=3, offset=offset, key=key, value=None,
                   headers=headers, timestamp=(1, timestamp))


def test_s16_a_tombstone_of_a_table_keyed_by_its_kafka_key_deletes_its_key(
    tmp_path: Path,
) -> None:
    """A null value without a tidemark.bound header is the deletion of its key at its
    timestamp: a row of the metadata columns, gated like a row (late, future, a missing
    key), whose time moves the waterline (S3); with the header it stays punctuation."""
    spec = _keyed_spec(tmp_path)
    assert spec.deletes
    rate = AvroCodec(spec.avro_schema).encode({"rate": 1.1})
    msgs = [
        Message(topic="in", partition=3, offset=1, key=b"EUR", value=rate, timestamp=(1, NOW)),
        _tombstone(2, b"EUR", NOW + 5),
        _tombstone(3, b"GBP", NOW - 10_001),  # below w(t-1): late
        _tombstone(4, None, NOW),
        _tombstone(5, b"CHF", NOW + 3_600_001),
        _tombstone(6, None, NOW, headers=[("tidemark.bound", str(NOW + 7).encode())]),
    ]
    rows = _rows(spec, msgs)
    assert [r["_kind"] for r in rows] == ["ok", "delete", "late", "invalid", "future"]
    deleted = rows[1]
    assert (deleted["currency"], deleted["rate"]) == ("EUR", None)
    assert deleted["ts"].timestamp() * 1000 == NOW + 5
    assert rows[3]["_message"] == "column currency is NOT NULL but the tombstone has a null key"
    part = KafkaPartitionSlice(3, 0, 10**6, 7, NOW, dict(WATERLINES))
    probe = list(decode_slice(spec, part, msgs))[-1].to_pylist()[0]
    # The deletion and the late tombstone are well-formed; the punctuation is the highest.
    assert probe["ts"].timestamp() * 1000 == NOW + 7
    assert probe["_accepted"] == 2


def test_s16_a_tombstone_without_a_time_from_the_record_is_invalid(tmp_path: Path) -> None:
    """A deletion's time is its LATENESS column: read from the value, a tombstone has none."""
    spec = _keyed_spec(tmp_path, KEYED.replace("METADATA FROM 'timestamp' ", ""))
    verdict = LateGate(spec, {}, NOW).classify(None, None, RecordMeta(b"EUR", NOW, 0, 1))
    assert verdict.kind == "invalid"
    assert "declare ts METADATA FROM 'timestamp'" in verdict.message
    keyless = KEYED.replace("METADATA FROM 'key'", "")
    verdict = LateGate(_keyed_spec(tmp_path, keyless), {}, NOW).classify(None, None, None)
    assert verdict.kind == "malformed"
