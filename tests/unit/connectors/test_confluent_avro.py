"""``'format' = 'avro-confluent'`` values: Confluent framing, writer schemas fetched by id from
a real schema registry (the ``schema_registry`` fixture) and resolved to the table's schema.

The values are written by confluent-kafka's own ``AvroSerializer``, as a producer with a
schema registry writes them, and decoded by the late gate as the source's tasks decode them.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from app.connectors.avro_codec import AvroCodec
from app.connectors.confluent_avro import (
    REGISTRY_CLIENTS,
    SchemaRegistryUnavailable,
    frame,
    framed_schema_id,
    unframe,
)
from app.connectors.late_gate import LateGate, SourceColumn, SourceSpec
from app.errors import SerializationError

#: The table: ts TIMESTAMP NOT NULL LATENESS 1 s, k BIGINT NOT NULL, note VARCHAR (nullable).
TABLE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "purchase",
    "namespace": "tidemark",
    "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "k", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
#: What a producer writes first: another record name, no ``note``.
V1: dict[str, Any] = {
    "type": "record",
    "name": "Purchase",
    "namespace": "com.example.shop",
    "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "k", "type": "int"},  # promoted to the table's long
    ],
}
#: Its evolution: ``note`` added with a default, and a field the table does not read.
V2: dict[str, Any] = {
    **V1,
    "fields": [
        *V1["fields"],
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "channel", "type": "string", "default": "web"},
    ],
}


def _spec(registry_url: str, schema: dict[str, Any] = TABLE_SCHEMA) -> SourceSpec:
    return SourceSpec(
        table="purchase",
        topic="purchases",
        columns=(
            SourceColumn("ts", "timestamp", False),
            SourceColumn("k", "int64", False),
            SourceColumn("note", "string", True),
        ),
        avro_schema=schema,
        lateness=(("ts", 1000),),
        max_future_ms=None,
        dead_letter_topic="purchases.dlq",
        format="avro-confluent",
        registry={"url": registry_url},
    )


def _gate(registry_url: str, waterline: int | None = None) -> LateGate:
    return LateGate(_spec(registry_url), {"ts": waterline}, wall_clock_ms=0)


class _Producer:
    """Values as a producer with confluent-kafka's AvroSerializer writes them, to a subject of
    its own (``<topic>-value``, the topic-name strategy)."""

    def __init__(self, registry_url: str) -> None:
        self.client = SchemaRegistryClient({"url": registry_url})
        self.topic = f"purchases-{uuid.uuid4().hex[:8]}"
        self.context = SerializationContext(self.topic, MessageField.VALUE)

    def value(self, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
        serializer = AvroSerializer(self.client, json.dumps(schema))
        data = serializer(record, self.context)
        assert data is not None
        return bytes(data)


def test_frame_and_unframe_are_the_wire_format() -> None:
    assert frame(7, b"\x02") == b"\x00\x00\x00\x00\x07\x02"
    assert unframe(frame(2**31 - 1, b"abc")) == (2**31 - 1, b"abc")
    with pytest.raises(ValueError, match="not the magic byte"):
        unframe(b"\x01\x00\x00\x00\x07\x02")
    with pytest.raises(ValueError, match="fewer than the 5"):
        unframe(b"\x00\x00")
    assert framed_schema_id(frame(42, b"\x02")) == 42
    assert framed_schema_id(b"\x02\x00\x00\x00\x2a\x02") is None
    assert framed_schema_id(frame(0, b"\x02")) is None


def test_values_of_an_evolving_producer_resolve_to_the_table(schema_registry: str) -> None:
    producer = _Producer(schema_registry)
    first = producer.value(V1, {"ts": 1_000, "k": 1})
    second = producer.value(V2, {"ts": 2_000, "k": 2, "note": "gift", "channel": "app"})
    assert unframe(first)[0] != unframe(second)[0]  # two schema ids
    gate = _gate(schema_registry)
    ok1, ok2 = gate.classify(first, None), gate.classify(second, None)
    assert (ok1.kind, ok1.row) == ("ok", {"ts": 1_000, "k": 1, "note": None})
    assert (ok2.kind, ok2.row) == ("ok", {"ts": 2_000, "k": 2, "note": "gift"})
    # Decoded values go through the gate's checks as any table's: late below the waterline.
    late = _gate(schema_registry, waterline=1_500).classify(first, None)
    assert (late.kind, late.column, late.value) == ("late", "ts", 1_000)


def test_a_value_without_the_framing_is_malformed(schema_registry: str) -> None:
    plain = AvroCodec(TABLE_SCHEMA).encode({"ts": 1_000, "k": 1, "note": "a gift"})
    verdict = _gate(schema_registry).classify(plain, None)
    assert verdict.kind == "malformed"
    assert verdict.message == (
        "not a Confluent-framed Avro record of table purchase: the first byte is 0xd0, not the "
        "magic byte 0x00 (a producer with a schema registry serializer writes magic byte 0 and "
        "a 4-byte schema id)"
    )


def test_an_unknown_schema_id_is_invalid_naming_it(schema_registry: str) -> None:
    body = AvroCodec(TABLE_SCHEMA).encode({"ts": 1_000, "k": 1, "note": None})
    verdict = _gate(schema_registry).classify(frame(987_654, body), None)
    assert verdict.kind == "invalid"
    assert verdict.message.startswith(
        "schema id 987654 is not in the schema registry: "
    ), verdict.message


def test_an_id_beyond_what_registries_assign_is_invalid_not_a_task_failure(
    schema_registry: str,
) -> None:
    """Apicurio answers such an id with status 500, which would fail the task on every retry
    (found by tests/property/test_fuzz_inputs.py's mutated ids)."""
    body = AvroCodec(TABLE_SCHEMA).encode({"ts": 1_000, "k": 1, "note": None})
    verdict = _gate(schema_registry).classify(frame(2**32 - 1, body), None)
    assert (verdict.kind, verdict.message) == (
        "invalid", "schema id 4294967295 is beyond the signed 32-bit ids registries assign"
    )


def _registered(registry_url: str, schema: dict[str, Any]) -> int:
    client = SchemaRegistryClient({"url": registry_url})
    subject = f"other-{uuid.uuid4().hex[:8]}-value"
    return int(client.register_schema(subject, Schema(json.dumps(schema), "AVRO")))


def _body(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    import io

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def test_a_writer_without_a_column_the_table_needs_is_invalid(schema_registry: str) -> None:
    writer = {**V1, "fields": [V1["fields"][0]]}  # no k, which the table has no default for
    schema_id = _registered(schema_registry, writer)
    verdict = _gate(schema_registry).classify(frame(schema_id, _body(writer, {"ts": 5})), None)
    assert (verdict.kind, verdict.message) == (
        "invalid",
        f"schema id {schema_id}: the writer's schema has no field k and table purchase's "
        "schema gives it no default",
    )


def test_a_writer_type_that_does_not_resolve_is_invalid(schema_registry: str) -> None:
    writer = {**V1, "fields": [V1["fields"][0], {"name": "k", "type": "string"}]}
    schema_id = _registered(schema_registry, writer)
    value = frame(schema_id, _body(writer, {"ts": 5, "k": "one"}))
    verdict = _gate(schema_registry).classify(value, None)
    assert verdict.kind == "invalid"
    assert verdict.message.startswith(
        f"schema id {schema_id}: the writer's schema does not resolve to table purchase's: "
    ), verdict.message


def test_a_time_field_of_another_unit_is_invalid_not_misread(schema_registry: str) -> None:
    micros = {"type": "long", "logicalType": "timestamp-micros"}
    writer = {**V1, "fields": [{"name": "ts", "type": micros}, V1["fields"][1]]}
    schema_id = _registered(schema_registry, writer)
    value = frame(schema_id, _body(writer, {"ts": 5_000, "k": 1}))
    verdict = _gate(schema_registry).classify(value, None)
    assert (verdict.kind, verdict.message) == (
        "invalid",
        f"schema id {schema_id}: field ts is timestamp-micros in the writer's schema, "
        "timestamp-millis in table purchase's",
    )


def test_a_null_in_a_not_null_column_is_invalid_naming_the_column(
    schema_registry: str,
) -> None:
    writer = {**V1, "fields": [V1["fields"][0], {"name": "k", "type": ["null", "long"]}]}
    value = _Producer(schema_registry).value(writer, {"ts": 5, "k": None})
    verdict = _gate(schema_registry).classify(value, None)
    assert (verdict.kind, verdict.message) == (
        "invalid",
        "column k is NOT NULL but the record has null",
    )


def test_a_garbled_body_is_malformed_naming_the_schema_id(schema_registry: str) -> None:
    value = _Producer(schema_registry).value(V1, {"ts": 1_000, "k": 1})
    schema_id = unframe(value)[0]
    verdict = _gate(schema_registry).classify(value + b"\x00\x01", None)
    assert (verdict.kind, verdict.message) == (
        "malformed",
        f"2 bytes left after decoding the record of schema id {schema_id}",
    )


def test_a_framed_value_in_a_plain_avro_table_hints_at_avro_confluent(
    schema_registry: str,
) -> None:
    value = _Producer(schema_registry).value(TABLE_SCHEMA, {"ts": 1_000, "k": 1, "note": None})
    schema_id = unframe(value)[0]
    spec = SourceSpec(**{**_spec(schema_registry).__dict__, "format": "avro", "registry": None})
    verdict = LateGate(spec, {"ts": None}, 0).classify(value, None)
    assert verdict.kind == "malformed"
    assert verdict.message.endswith(
        f"(it starts like a Confluent-framed record of schema id {schema_id}: if its producer "
        "uses a schema registry, declare the table 'format' = 'avro-confluent')"
    ), verdict.message
    with pytest.raises(SerializationError, match="Confluent-framed"):
        AvroCodec(TABLE_SCHEMA).decode(value)


def test_an_unreachable_registry_fails_the_task_not_the_record() -> None:
    import socket

    with socket.socket() as sock:  # a loopback port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    gate = _gate(f"http://127.0.0.1:{port}")
    body = AvroCodec(TABLE_SCHEMA).encode({"ts": 1_000, "k": 1, "note": None})
    with pytest.raises(SchemaRegistryUnavailable, match="did not return schema id 3"):
        gate.classify(frame(3, body), None)


def test_each_process_keeps_one_client_per_registry(schema_registry: str) -> None:
    clients = REGISTRY_CLIENTS.get()
    assert clients.get({"url": schema_registry}) is clients.get({"url": schema_registry})
    assert clients.get({"url": schema_registry}) is not clients.get(
        {"url": schema_registry, "basic.auth.user.info": "u:p"}
    )


def _slice_rows(spec: SourceSpec, values: list[bytes | None], columnar: bool) -> list[Any]:
    from confluent_kafka import Message

    from app.connectors.kafka_source import KafkaPartitionSlice, decode_slice

    headers = [[("tidemark.bound", b"2500")] if v is None else None for v in values]
    msgs = [
        Message(topic="in", partition=0, offset=i, key=str(i).encode(), value=v, headers=h)
        for i, (v, h) in enumerate(zip(values, headers, strict=True))
    ]
    part = KafkaPartitionSlice(0, 0, len(msgs), 1, 0, {"ts": 1_500})
    batches = list(decode_slice(spec, part, msgs, columnar=columnar))
    return pa.Table.from_batches(batches).to_pylist()


def test_bodies_of_the_tables_own_record_take_the_columnar_path(schema_registry: str) -> None:
    """The same rows as the per-record path, whose verdicts define them; and the columnar
    decoder reads a chunk only when every value is a body of the table's own record."""
    from app.connectors.kafka_source import KafkaPartitionSlice, _SliceReader

    producer = _Producer(schema_registry)
    own = {**TABLE_SCHEMA, "name": "Purchase", "namespace": "com.example.shop"}
    values: list[bytes | None] = [
        producer.value(own, {"ts": 1_000 + 500 * i, "k": i, "note": f"n{i}" if i % 2 else None})
        for i in range(6)
    ]
    values[1] = (values[1] or b"") + b"\x00"  # bytes left over: malformed
    values[4] = None  # a punctuation
    spec = _spec(schema_registry)
    rows = _slice_rows(spec, values, columnar=True)
    assert rows == _slice_rows(spec, values, columnar=False)
    assert [r["_kind"] for r in rows] == ["late", "malformed", "ok", "ok", "ok", "probe"]

    def columnar(chunk: list[bytes | None]) -> bool:
        from confluent_kafka import Message

        reader = _SliceReader(spec, KafkaPartitionSlice(0, 0, len(chunk), 1, 0, {"ts": None}))
        msgs = [Message(topic="in", partition=0, offset=i, value=v) for i, v in enumerate(chunk)]
        return reader._columnar(msgs) is not None

    evolved = producer.value(V2, {"ts": 9, "k": 1, "note": None, "channel": "web"})
    assert columnar(values)
    assert not columnar([*values, evolved])  # two schema ids: resolution per record
    assert not columnar([evolved])  # another record than the table's


def test_output_records_are_framed_and_read_back_by_confluents_deserializer(
    schema_registry: str,
) -> None:
    """An ``avro-confluent`` output's key and value schemas are registered under the
    topic-name strategy; both encoders frame with their ids, byte for byte alike."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    from app.connectors.confluent_avro import register_output_schemas
    from app.program.compile import compile_program
    from app.runtime.step.encode import ViewEncoding, encode_record, encode_view_rows

    circuit = compile_program(
        "p.sql",
        """
        CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL)
        WITH ('topic' = 'in');
        CREATE VIEW v WITH ('topic' = 'out', 'encoding' = 'avro-confluent') AS
        SELECT k, COUNT(*) AS n FROM t GROUP BY k;
        """,
    )
    out = circuit.view("v").output
    assert out is not None and (out.format, out.encoding) == ("upsert", "avro-confluent")
    topic = f"counts-{uuid.uuid4().hex[:8]}"
    registry = {"url": schema_registry}
    key_id, value_id = register_output_schemas(registry, topic, out.key_schema, out.value_schema)
    assert key_id is not None and key_id != value_id
    assert register_output_schemas(registry, topic, out.key_schema, out.value_schema) == (
        key_id,
        value_id,
    ), "registering again gives the same ids"

    enc = ViewEncoding(
        "v", topic, "upsert", ["k", "n"], ["k"], out.value_schema, out.key_schema,
        (key_id, value_id),
    )
    key, value = encode_record(enc, {"k": 7, "n": 3}, None)
    assert key is not None and value is not None
    assert (unframe(key)[0], unframe(value)[0]) == (key_id, value_id)
    tombstone = encode_record(enc, {"k": 7, "n": 3, "_delete": True}, None)
    assert tombstone == (key, None)
    batch = pa.RecordBatch.from_pydict({"k": [7], "n": [3]})
    (columnar,) = encode_view_rows(iter([batch]), enc)
    assert (columnar.column("key")[0].as_py(), columnar.column("value")[0].as_py()) == (
        key,
        value,
    )

    client = SchemaRegistryClient({"url": schema_registry})
    read = AvroDeserializer(client)
    assert read(key, SerializationContext(topic, MessageField.KEY)) == {"k": 7}
    assert read(value, SerializationContext(topic, MessageField.VALUE)) == {"k": 7, "n": 3}


def test_a_value_whose_schema_is_named_by_a_header_is_a_malformed_dead_letter(
    schema_registry: str,
) -> None:
    """S6: a value written with confluent-kafka's ``header_schema_id_serializer`` has no
    prefix; its schema GUID is in the ``__value_schema_id`` header (magic byte 1 and 16
    bytes), which Tidemark does not resolve. It is ``malformed`` with that reason on both
    paths, also when its bytes happen to start like a prefix of the table's own schema."""
    producer = _Producer(schema_registry)
    own = {**TABLE_SCHEMA, "name": "Purchase", "namespace": "com.example.shop"}
    framed = producer.value(own, {"ts": 2_000, "k": 1, "note": None})
    schema_id, body = unframe(framed)
    header = [("__value_schema_id", b"\x01" + uuid.uuid4().bytes)]
    spec = _spec(schema_registry)
    for value in (body, framed):  # a bare body, and one that reads as the table's record
        verdict = LateGate(spec, {"ts": 1_500}, 0).classify(value, header)
        assert verdict.kind == "malformed"
        assert "__value_schema_id header (a schema GUID" in (verdict.message or "")
    from confluent_kafka import Message

    from app.connectors.kafka_source import KafkaPartitionSlice, decode_slice

    values = [framed, framed, producer.value(own, {"ts": 3_000, "k": 2, "note": "x"})]
    msgs = [Message(topic="in", partition=0, offset=i, value=v,
                    headers=header if i == 1 else [("trace", b"t")])
            for i, v in enumerate(values)]
    part = KafkaPartitionSlice(0, 0, len(msgs), 1, 0, {"ts": 1_500})
    for columnar in (True, False):
        rows = pa.Table.from_batches(list(decode_slice(spec, part, msgs, columnar))).to_pylist()
        assert [r["_kind"] for r in rows] == ["ok", "malformed", "ok", "probe"]
    assert schema_id > 0
