"""``'format' = 'protobuf-confluent'`` values, written by confluent-kafka's own ProtobufSerializer
with the tests' real schema registry and read by ConfluentProtobufRecords
(app/connectors/confluent_protobuf.py, SPEC L1, S7): the row of the message's fields by name,
each type as docs/language.md maps it, and every bad record a dead-letter reason naming what is
wrong; outputs written by ProtobufSerializer and read back by ProtobufDeserializer."""

from __future__ import annotations

import base64
import json
import uuid
from decimal import Decimal
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2, wrappers_pb2
from google.protobuf.message_factory import GetMessageClass
from google.type import date_pb2

from app.connectors.confluent_avro import ConfluentRecordError, frame
from app.connectors.confluent_protobuf import (
    ConfluentProtobufRecords,
    proto_file,
    proto_text,
    protobuf_fit_problems,
)

FD = descriptor_pb2.FieldDescriptorProto
COLUMNS = [
    ("ts", "timestamp"), ("card", "int64"), ("qty", "int32"), ("price", "decimal(6,2)"),
    ("note", "string"), ("ok", "bool"), ("rate", "float64"), ("ratio", "float32"),
    ("blob", "binary"), ("day", "date"), ("tip", "int64"),
]


def _file(name: str, fields: list[tuple[str, int, str | None]], *,
          optional: tuple[str, ...] = (), repeated: tuple[str, ...] = (),
          extra_message: bool = False) -> descriptor_pb2.FileDescriptorProto:
    """A proto3 file of message ``Purchase`` (and ``Other`` before it with
    ``extra_message``): each field (name, type, message type name or None)."""
    proto = descriptor_pb2.FileDescriptorProto(name=f"{name}.proto", package="shop",
                                               syntax="proto3")
    if extra_message:
        other = proto.message_type.add(name="Other")
        other.field.add(name="id", number=1, type=FD.TYPE_STRING, label=FD.LABEL_OPTIONAL)
    message = proto.message_type.add(name="Purchase")
    for number, (field, kind, type_name) in enumerate(fields, start=1):
        added = message.field.add(
            name=field, number=number, type=kind,
            label=FD.LABEL_REPEATED if field in repeated else FD.LABEL_OPTIONAL)
        if type_name is not None:
            added.type_name = "." + type_name
            dependency = {
                "google.protobuf.Timestamp": "google/protobuf/timestamp.proto",
                "google.type.Date": "google/type/date.proto",
                "confluent.type.Decimal": "confluent/type/decimal.proto",
            }.get(type_name, "google/protobuf/wrappers.proto")
            if dependency not in proto.dependency:
                proto.dependency.append(dependency)
        if field in optional:
            added.proto3_optional = True
            added.oneof_index = len(message.oneof_decl)
            message.oneof_decl.add(name=f"_{field}")
    return proto


def _class(proto: descriptor_pb2.FileDescriptorProto, message: str = "shop.Purchase") -> Any:
    """The message class of ``proto``, built as a producer without generated code builds it."""
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2

    pool = descriptor_pool.DescriptorPool()
    for module in (timestamp_pb2, wrappers_pb2, date_pb2, decimal_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    return GetMessageClass(pool.FindMessageTypeByName(message))


PURCHASE = _file("purchase", [
    ("ts", FD.TYPE_MESSAGE, "google.protobuf.Timestamp"),
    ("card", FD.TYPE_INT64, None),
    ("qty", FD.TYPE_SINT32, None),
    ("price", FD.TYPE_MESSAGE, "confluent.type.Decimal"),
    ("note", FD.TYPE_STRING, None),
    ("ok", FD.TYPE_BOOL, None),
    ("rate", FD.TYPE_FLOAT, None),
    ("ratio", FD.TYPE_FLOAT, None),
    ("blob", FD.TYPE_BYTES, None),
    ("day", FD.TYPE_MESSAGE, "google.type.Date"),
    ("tip", FD.TYPE_MESSAGE, "google.protobuf.Int64Value"),
    ("ignored", FD.TYPE_STRING, None),
], optional=("note",))


def _serialized(url: str, topic: str, message: Any) -> bytes:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = ProtobufSerializer(type(message), SchemaRegistryClient({"url": url}))
    data = serializer(message, SerializationContext(topic, MessageField.VALUE))
    assert data is not None
    return bytes(data)


def _reason(decoder: ConfluentProtobufRecords, value: bytes) -> tuple[str, str]:
    with pytest.raises(ConfluentRecordError) as refused:
        decoder.decode(value)
    return refused.value.reason, refused.value.message


def _decoder(url: str) -> ConfluentProtobufRecords:
    return ConfluentProtobufRecords("purchase", COLUMNS, {"url": url})


def test_l1_a_protobuf_record_is_the_row_of_its_fields(schema_registry: str) -> None:
    cls = _class(PURCHASE)
    message = cls(card=7, qty=-3, ok=True, rate=0.5, ratio=0.25, blob=b"\x00\xff", ignored="x")
    message.ts.FromMilliseconds(1_795_687_200_123)
    message.ts.nanos += 999  # below the millisecond: truncated
    message.price.value = (-1230).to_bytes(2, "big", signed=True)
    message.price.scale = 2
    message.day.year, message.day.month, message.day.day = 2026, 11, 26
    message.tip.value = 0
    value = _serialized(schema_registry, f"p-{uuid.uuid4().hex[:8]}", message)
    assert _decoder(schema_registry).decode(value) == {
        "ts": 1_795_687_200_123, "card": 7, "qty": -3, "price": Decimal("-12.30"),
        "note": None, "ok": True, "rate": 0.5, "ratio": 0.25, "blob": b"\x00\xff",
        "day": 20_783, "tip": 0,
    }


def test_l1_presence_tells_null_from_zero(schema_registry: str) -> None:
    """An unset field with presence (a message, a wrapper, proto3 optional) is NULL; a
    scalar without presence is its value, zero when not written."""
    cls = _class(PURCHASE)
    value = _serialized(schema_registry, f"p-{uuid.uuid4().hex[:8]}", cls(note=""))
    row = _decoder(schema_registry).decode(value)
    assert row == {"ts": None, "card": 0, "qty": 0, "price": None, "note": "", "ok": False,
                   "rate": 0.0, "ratio": 0.0, "blob": b"", "day": None, "tip": None}


def test_l1_a_column_the_message_lacks_is_null_and_a_later_message_of_the_file_is_read(
    schema_registry: str,
) -> None:
    proto = _file("two", [("card", FD.TYPE_UINT32, None)], extra_message=True)
    value = _serialized(schema_registry, f"p-{uuid.uuid4().hex[:8]}", _class(proto)(card=9))
    assert value[5:7] == b"\x02\x02"  # one index, 1: the file's second message
    row = _decoder(schema_registry).decode(value)
    assert row["card"] == 9 and all(row[c] is None for c, _ in COLUMNS if c != "card")


def test_s7_bad_records_are_dead_letters_with_their_reason(schema_registry: str) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    decoder = _decoder(schema_registry)
    good = _serialized(schema_registry, f"p-{uuid.uuid4().hex[:8]}", _class(PURCHASE)(card=1))
    schema_id = int.from_bytes(good[1:5], "big")
    client = SchemaRegistryClient({"url": schema_registry})
    avro_id = client.register_schema(f"a-{uuid.uuid4().hex[:8]}", Schema(json.dumps(
        {"type": "record", "name": "A", "fields": [{"name": "card", "type": "long"}]}), "AVRO"))
    text_id = client.register_schema(f"t-{uuid.uuid4().hex[:8]}", Schema(
        'syntax = "proto3";\nmessage T { int64 card = 1; }\n', "PROTOBUF"))
    wrong = _file("wrong", [("card", FD.TYPE_STRING, None)])
    wrong_value = _serialized(schema_registry, f"p-{uuid.uuid4().hex[:8]}", _class(wrong)())
    listed = _file("listed", [("card", FD.TYPE_INT64, None)], repeated=("card",))
    listed_value = _serialized(schema_registry, f"p-{uuid.uuid4().hex[:8]}", _class(listed)())
    huge = _file("huge", [("card", FD.TYPE_UINT64, None)])
    huge_value = _serialized(schema_registry, f"p-{uuid.uuid4().hex[:8]}",
                             _class(huge)(card=2**64 - 1))

    reasons = {
        "short": _reason(decoder, b"\x00\x00\x01"),
        "magic": _reason(decoder, b"\x08" + good[1:]),
        "index": _reason(decoder, frame(schema_id, b"\x81")),
        "no message": _reason(decoder, frame(schema_id, b"\x02\x06") + good[6:]),
        "body": _reason(decoder, good + b"\xff"),
        "unknown": _reason(decoder, frame(999_999, b"\x00")),
        "avro": _reason(decoder, frame(avro_id, b"\x00\x02")),
        "text": _reason(decoder, frame(text_id, b"\x00\x08\x01")),
        "wrong": _reason(decoder, wrong_value),
        "repeated": _reason(decoder, listed_value),
        "huge": _reason(decoder, huge_value),
    }
    assert {k: r for k, (r, _) in reasons.items()} == {
        "short": "malformed", "magic": "malformed", "index": "malformed",
        "no message": "invalid", "body": "malformed", "unknown": "invalid",
        "avro": "invalid", "text": "invalid", "wrong": "invalid", "repeated": "invalid",
        "huge": "invalid",
    }
    message = {k: m for k, (_, m) in reasons.items()}
    assert "the first byte is 0x08, not the magic byte 0x00" in message["magic"]
    assert "message-index array" in message["index"]
    assert f"schema id {schema_id} has no message at index [3]" in message["no message"]
    assert message["unknown"].startswith("schema id 999999 is not in the schema registry")
    assert message["avro"] == f"schema id {avro_id} is an Avro or JSON Schema, not Protobuf"
    assert ".proto source text, which Tidemark does not parse" in message["text"]
    assert message["wrong"].endswith(
        "field card is string, which column card of type BIGINT cannot hold")
    assert "field card is a repeated field" in message["repeated"]
    assert message["huge"] == (
        "column card = 18446744073709551615 is outside the 64-bit range of BIGINT")


def test_s7_the_gate_refuses_a_null_in_a_not_null_column(schema_registry: str) -> None:
    from app.connectors.late_gate import LateGate, SourceColumn, SourceSpec

    spec = SourceSpec(
        table="purchase", topic="p", format="protobuf-confluent", avro_schema={},
        columns=(SourceColumn("ts", "timestamp", False), SourceColumn("card", "int64", True)),
        lateness=(("ts", 0),), max_future_ms=None, dead_letter_topic="p.dlq",
        registry={"url": schema_registry},
    )
    verdict = LateGate(spec, {"ts": None}, 0).classify(
        _serialized(schema_registry, f"p-{uuid.uuid4().hex[:8]}", _class(PURCHASE)(card=1)),
        None)
    assert (verdict.kind, verdict.message) == (
        "invalid", "column ts is NOT NULL but the record has null")


OUTPUT = {"type": "record", "name": "v", "namespace": "tidemark", "fields": [
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "card", "type": "long"},
    {"name": "n", "type": ["null", "int"]},
    {"name": "total", "type": ["null", {"type": "bytes", "logicalType": "decimal",
                                        "precision": 10, "scale": 2}]},
    {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
    {"name": "undo", "type": "boolean"},
]}


def test_s13_an_output_registers_a_proto3_file_of_its_columns() -> None:
    proto = proto_file(OUTPUT)
    assert (proto.package, proto.syntax, [m.name for m in proto.message_type]) == (
        "tidemark", "proto3", ["v"])
    fields = {f.name: f for f in proto.message_type[0].field}
    assert [(f.number, f.type) for f in fields.values()] == [
        (1, FD.TYPE_MESSAGE), (2, FD.TYPE_INT64), (3, FD.TYPE_INT32), (4, FD.TYPE_MESSAGE),
        (5, FD.TYPE_MESSAGE), (6, FD.TYPE_BOOL)]
    assert fields["ts"].type_name == ".google.protobuf.Timestamp"
    assert fields["total"].type_name == ".confluent.type.Decimal"
    assert fields["day"].type_name == ".google.type.Date"
    assert fields["n"].proto3_optional and not fields["card"].proto3_optional
    assert descriptor_pb2.FileDescriptorProto.FromString(
        base64.b64decode(proto_text(OUTPUT))) == proto


def test_s13_use_latest_version_fits_a_registered_message_or_says_why() -> None:
    ours = proto_text(OUTPUT)
    assert protobuf_fit_problems(ours, OUTPUT) == []
    other = _file("other", [
        ("card", FD.TYPE_INT32, None), ("n", FD.TYPE_INT64, None),
        ("ts", FD.TYPE_MESSAGE, "google.protobuf.Timestamp"),
        ("total", FD.TYPE_MESSAGE, "confluent.type.Decimal"),
        ("extra", FD.TYPE_STRING, None)])
    problems = protobuf_fit_problems(
        base64.b64encode(other.SerializeToString()).decode(), OUTPUT)
    assert problems == [
        "column card is BIGINT, which field card of type int32 cannot hold",
        "column n may be NULL but field n (int64) has no presence (declare it optional, or a"
        " wrapper)",
        "message shop.Purchase has no field day for column day",
        "message shop.Purchase has no field undo for column undo",
    ]
    assert protobuf_fit_problems('{"type": "string"}', OUTPUT) == [
        "it is an Avro or JSON Schema, not Protobuf"]


def test_s13_a_protobuf_output_is_read_by_confluents_protobuf_deserializer(
    schema_registry: str,
) -> None:
    """``tidemark run`` registers the view's Protobuf file at start (keys too, under their
    subjects); confluent-kafka's ProtobufSerializer frames each record with its id and message
    index, and a ProtobufDeserializer of a class built from the registered file reads it."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from app.cli import with_schema_registry
    from app.config import Settings
    from app.program.compile import compile_program
    from app.runtime.step.encode import ViewEncoding, encode_record

    topic = f"counts-{uuid.uuid4().hex[:8]}"
    circuit = with_schema_registry(compile_program("p.sql", f"""
        CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL,
                        price DECIMAL(5, 2))
        WITH ('topic' = 'in');
        CREATE VIEW v WITH ('topic' = '{topic}', 'encoding' = 'protobuf-confluent',
                            'value.subject.name.strategy' = 'RecordNameStrategy') AS
        SELECT k, COUNT(*) AS n, MAX(price) AS top FROM t GROUP BY k;
        """), Settings(schema_registry_url=schema_registry))
    out = circuit.view("v").output
    assert out is not None
    assert (out.key_subject, out.value_subject) == (f"{topic}-key", "tidemark.v")
    enc = ViewEncoding.for_view(circuit.view("v"))
    key, value = encode_record(enc, {"k": 3, "n": 2, "top": Decimal("9.50")}, None)
    assert key is not None and value is not None
    assert value[:6] == b"\x00" + (out.value_schema_id or 0).to_bytes(4, "big") + b"\x00"
    client = SchemaRegistryClient({"url": schema_registry})
    registered = client.get_schema(out.value_schema_id, fmt="serialized")
    value_class = _class(descriptor_pb2.FileDescriptorProto.FromString(
        base64.b64decode(registered.schema_str)), "tidemark.v")
    message = ProtobufDeserializer(value_class, {}, client)(
        value, SerializationContext(topic, MessageField.VALUE))
    assert (message.k, message.n, message.top.scale) == (3, 2, 2)
    assert int.from_bytes(message.top.value, "big", signed=True) == 950
    key_row = ConfluentProtobufRecords("v_key", [("k", "int64")], {"url": schema_registry})
    assert key_row.decode(key) == {"k": 3}
    no_top = encode_record(enc, {"k": 4, "n": 1, "top": None}, None)[1]
    assert no_top is not None
    assert not ProtobufDeserializer(value_class, {}, client)(
        no_top, SerializationContext(topic, MessageField.VALUE)).HasField("top")


def test_l7_protobuf_is_read_through_the_registry_in_both_dialects() -> None:
    from app.errors import ProgramError
    from app.program.compile import compile_program

    ours = compile_program("p.sql", """
        CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, card BIGINT)
        WITH ('topic' = 't', 'format' = 'protobuf-confluent',
              'schema-registry.url' = 'http://r:8081');
        CREATE VIEW v WITH ('topic' = 'o', 'encoding' = 'protobuf-confluent',
                            'auto.register.schemas' = 'false',
                            'use.latest.version' = 'true') AS SELECT ts, card FROM t;
        """)
    flink = compile_program("f.sql", """
        CREATE TABLE t (ts TIMESTAMP(3), card BIGINT,
                        WATERMARK FOR ts AS ts - INTERVAL '1' MINUTE)
        WITH ('connector' = 'kafka', 'topic' = 't', 'value.format' = 'protobuf-confluent',
              'value.protobuf-confluent.url' = 'http://r:8081');
        """)
    for circuit in (ours, flink):
        table = circuit.tables[0]
        assert (table.format, table.schema_registry) == (
            "protobuf-confluent", {"url": "http://r:8081"})
    out = ours.view("v").output
    assert out is not None and out.encoding == "protobuf-confluent"
    assert dict(out.serializer) == {"auto.register.schemas": "false",
                                    "use.latest.version": "true"}
    with pytest.raises(ProgramError) as refused:
        compile_program("g.sql", """
            CREATE TABLE t (card BIGINT) WITH ('connector' = 'kafka', 'topic' = 't',
                                               'format' = 'protobuf');
            """)
    assert "declare 'format' = 'protobuf-confluent'" in str(refused.value)


def test_s13_governed_subjects_write_with_the_registered_protobuf_file(
    schema_registry: str,
) -> None:
    """auto.register.schemas off: use.latest.version writes with the subject's latest file
    (another field order, a field no column fills) once it fits, and refuses one that does
    not, naming the subject and the column; without it, the view's own file must be
    registered (a lookup)."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from app.connectors.confluent_protobuf import ProtobufRegistryWriter
    from app.connectors.output_schemas import SerializerSettings, output_schema
    from app.errors import SubjectSchemaError

    ours = {"type": "record", "name": "v", "namespace": "tidemark", "fields": [
        {"name": "card", "type": "long"}, {"name": "note", "type": ["null", "string"]}]}
    registry = {"url": schema_registry}
    client = SchemaRegistryClient(registry)
    latest = SerializerSettings(auto_register_schemas=False, use_latest_version=True)
    topic = f"gov-{uuid.uuid4().hex[:8]}"
    owned = _file("owned", [("extra", FD.TYPE_STRING, None), ("note", FD.TYPE_STRING, None),
                            ("card", FD.TYPE_SINT64, None)], optional=("note",))
    client.register_schema(f"{topic}-value", Schema(
        base64.b64encode(owned.SerializeToString()).decode(), "PROTOBUF"))
    found = output_schema(registry, "view v", topic, "value", ours, latest, protobuf=True)
    assert (found.subject, found.version) == (f"{topic}-value", 1)
    writer = ProtobufRegistryWriter(ours, registry, topic, "value", found.schema_id,
                                    found.subject)
    value = writer.encode({"card": -5, "note": None})
    message = ProtobufDeserializer(_class(owned), {}, client)(
        value, SerializationContext(topic, MessageField.VALUE))
    assert (message.card, message.HasField("note"), message.extra) == (-5, False, "")

    narrow = f"gov-{uuid.uuid4().hex[:8]}"
    client.register_schema(f"{narrow}-value", Schema(base64.b64encode(_file(
        "narrow", [("card", FD.TYPE_INT32, None), ("note", FD.TYPE_STRING, None)],
    ).SerializeToString()).decode(), "PROTOBUF"))
    with pytest.raises(SubjectSchemaError) as refused:
        output_schema(registry, "view v", narrow, "value", ours, latest, protobuf=True)
    assert f"subject {narrow}-value (schema id" in str(refused.value)
    assert "column card is BIGINT, which field card of type int32 cannot hold" in str(
        refused.value)
    assert "column note may be NULL but field note (string) has no presence" in str(
        refused.value)

    lookup = SerializerSettings(auto_register_schemas=False)
    mine = f"gov-{uuid.uuid4().hex[:8]}"
    with pytest.raises(SubjectSchemaError, match="is not registered under subject"):
        output_schema(registry, "view v", mine, "value", ours, lookup, protobuf=True)
    registered = output_schema(registry, "view v", mine, "value", ours, SerializerSettings(),
                               protobuf=True)
    assert output_schema(registry, "view v", mine, "value", ours, lookup,
                         protobuf=True).schema_id == registered.schema_id
