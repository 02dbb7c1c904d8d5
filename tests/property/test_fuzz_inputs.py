"""Fuzzing the two places untrusted input enters Tidemark (SPEC L7, S7).

1. The program compiler (``compile_program``) on generated and mutated program text: it either
   accepts or raises a :class:`~app.errors.ProgramError` (a TidemarkError with diagnostics),
   never any other exception.
2. The Avro decoding path (``LateGate.classify``) on generated and mutated record bytes and
   headers: every verdict is one of the S7 kinds with a message, never an exception, and every
   accepted row fits the Arrow columns Spark reads (a value that would not fit must be a dead
   letter, or the task would fail and stop the service).
3. The key decoders (``'key.format'`` raw, avro, json) on generated and mutated keys: the
   same, for each record's key.
4. The Debezium change-event decoder (``'format' = 'debezium-json'``) on generated, mutated
   and wrapped events: the same, with ``delete`` and ``skipped`` among the verdicts.
5. The ``'format' = 'json-registry'`` decoder on records confluent-kafka's JSONSerializer
   wrote with the tests' schema registry, mutated (schema ids included) and random: the same.
6. The ``'format' = 'protobuf-confluent'`` decoder on records confluent-kafka's
   ProtobufSerializer wrote with the tests' schema registry (messages of a file whose field
   types fit the columns, and of one whose types do not), mutated (schema ids and message
   indexes included) and random: the same.
7. The ``'format' = 'debezium-avro-confluent'`` decoder on change events confluent-kafka's
   AvroSerializer wrote in Kafka Connect's envelope (every op, images present or not, and an
   envelope whose row types do not fit the table), mutated, random and null: the same, with
   ``delete`` and ``skipped`` among the verdicts.
8. The ``'format' = 'raw'`` decoder (one column's bytes, each raw type) on generated and
   mutated values: the same.

CI runs a short pass. The longer run (a few minutes) is ``slow``:
``TIDEMARK_FUZZ_EXAMPLES=20000 .venv/bin/pytest -m slow tests/property/test_fuzz_inputs.py``
(see docs/reliability.md).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.circuit.metadata import REGISTRY_FORMATS
from app.connectors.kafka_source import arrow_type
from app.connectors.late_gate import LateGate
from app.connectors.record_metadata import RecordMeta
from app.errors import ProgramError, TidemarkError
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [p.read_text() for p in sorted((ROOT / "pipelines").glob("*.sql"))] + [
    p.read_text() for p in sorted((ROOT / "tests/fixtures/programs/rejected").glob("*.sql"))[:20]
]
TOKENS = [
    "CREATE", "TABLE", "VIEW", "SELECT", "FROM", "WHERE", "GROUP BY", "TUMBLE", "HOP", "(", ")",
    ",", ";", "'", "LATENESS", "INTERVAL '1' SECOND", "EMIT", "AFTER WATERMARK", "NOT NULL",
    "TIMESTAMP", "BIGINT", "DECIMAL(38, 10)", "COUNT(*)", "SUM(", "CAST(", " AS ", "WITH (",
    "'topic' = 'x'", "--", "/*", "*/", "\x00", "\u00e9", "9" * 40, "-", "NULL", "DESCRIPTOR(",
]

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    sensor  BIGINT NOT NULL,
    qty     INT,
    day     DATE,
    price   DECIMAL(5, 2),
    label   VARCHAR,
    blob    VARBINARY,
    ok      BOOLEAN,
    ratio   REAL,
    amount  DOUBLE NOT NULL
) WITH ('topic' = 'in', 'max_future' = INTERVAL '1' HOUR);
"""
NOW = 1_800_000_000_000
KINDS = {"ok", "late", "malformed", "invalid", "future", "punctuation"}
#: A changelog table's verdicts add deletions and skipped tombstones.
CHANGELOG_KINDS = KINDS | {"delete", "skipped"}


def _examples(default: int) -> int:
    return int(os.environ.get("TIDEMARK_FUZZ_EXAMPLES", default))


@st.composite
def _program_text(draw: Callable[..., Any]) -> str:
    """A seed program with random splices: deletions, duplications, tokens, raw text."""
    text: str = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(text)))
        edit = draw(st.sampled_from(["delete", "token", "text", "duplicate"]))
        if edit == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 30)):]
        elif edit == "token":
            text = text[:at] + draw(st.sampled_from(TOKENS)) + text[at:]
        elif edit == "text":
            text = text[:at] + draw(st.text(max_size=12)) + text[at:]
        else:
            text = text[:at] + text[at:at + draw(st.integers(1, 80))] + text[at:]
    return text


def _compile_clean(text: str, tmp: Path) -> None:
    try:
        compile_program(tmp / "fuzz.sql", text)
    except ProgramError as exc:
        assert exc.diagnostics, "a rejection names at least one problem"
        assert all(str(d) for d in exc.diagnostics)
    except TidemarkError:
        pass


def _gate(tmp: Path) -> LateGate:
    path = tmp / "gate.sql"
    path.write_text(PROGRAM)
    return LateGate(source_spec(compile_program(path).table("reading")), {"ts": NOW - 5_000}, NOW)


def _valid_records(gate: LateGate) -> st.SearchStrategy[bytes]:
    parsed = fastavro.parse_schema(
        {**gate.spec.avro_schema, "fields": [
            {**f, "type": _loose(f["type"])} for f in gate.spec.avro_schema["fields"]]}
    )

    def encode(record: dict[str, Any]) -> bytes:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, record)
        return buffer.getvalue()

    longs = st.integers(-(2**63), 2**63 - 1)
    record = st.fixed_dictionaries({
        "ts": st.one_of(longs, st.integers(NOW - 20_000, NOW + 7_200_000)),
        "sensor": longs,
        "qty": st.one_of(st.none(), longs),
        "day": st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
        "price": st.one_of(st.none(), st.decimals(allow_nan=False, allow_infinity=False,
                                                   places=2, max_value=10**9,
                                                   min_value=-(10**9))),
        "label": st.one_of(st.none(), st.text(max_size=20)),
        "blob": st.one_of(st.none(), st.binary(max_size=20)),
        "ok": st.one_of(st.none(), st.booleans()),
        "ratio": st.one_of(st.none(), st.floats(width=32)),
        "amount": st.floats(),
    })
    return record.map(encode)


def _loose(kind: Any) -> Any:
    """Writer types wider than the table's: longs for ints, wide decimals (to reach ranges)."""
    options = kind if isinstance(kind, list) else [kind]
    out = []
    for k in options:
        if k == "int":
            out.append("long")
        elif isinstance(k, dict) and k.get("logicalType") == "decimal":
            out.append({**k, "precision": 20})
        elif isinstance(k, dict) and k.get("logicalType") == "timestamp-millis":
            out.append("long")
        else:
            out.append(k)
    return out if isinstance(kind, list) else out[0]


def _mutate(data: bytes, draw: Callable[..., Any]) -> bytes:
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(data)))
        choice = draw(st.sampled_from(["flip", "cut", "insert"]))
        if choice == "flip" and at < len(data):
            data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]
        elif choice == "cut":
            data = data[:at]
        else:
            data = data[:at] + draw(st.binary(max_size=9)) + data[at:]
    return data


def _check_verdict(gate: LateGate, value: bytes | None, headers: list[Any],
                   key: bytes | None = None) -> None:
    verdict = gate.classify(value, headers, RecordMeta(key, NOW, 0, 0))
    assert verdict.kind in (CHANGELOG_KINDS if gate.spec.format.startswith("debezium-")
                            else KINDS)
    if verdict.kind in ("malformed", "invalid", "future", "late"):
        assert verdict.message
    if (value is not None and any(k == "__value_schema_id" for k, _ in headers)
            and gate.spec.format in REGISTRY_FORMATS):
        assert verdict.kind == "malformed"  # its schema is named where it is not read
    if verdict.row is not None:
        for column in gate.spec.columns:
            cell = verdict.row.get(column.name)
            kind = arrow_type(column.kind)
            if pa.types.is_timestamp(kind):
                pa.array([cell], pa.int64()).cast(pa.timestamp("ms")).cast(kind)
            elif pa.types.is_date32(kind):
                pa.array([cell], pa.int32())
            else:
                pa.array([cell], kind)


_HEADERS = st.lists(
    st.tuples(
        st.sampled_from(["tidemark.bound", "tidemark.bound.ts", "tidemark.bound.x", "origin",
                         "__value_schema_id", "__key_schema_id"]),
        st.one_of(st.none(), st.binary(max_size=30),
                  st.sampled_from([b"1700000000000", b"2024-01-01T00:00:00Z", b"-9" * 30])),
    ),
    max_size=3,
)


def _decoding_property(tmp: Path, examples: int) -> None:
    gate = _gate(tmp)
    valid = _valid_records(gate)

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        source = data.draw(st.sampled_from(["random", "valid", "mutated", "null"]))
        headers = data.draw(_HEADERS)
        value: bytes | None
        if source == "random":
            value = data.draw(st.binary(max_size=200))
        elif source == "null":
            value = None
        else:
            value = data.draw(valid)
            if source == "mutated":
                value = _mutate(value, data.draw)
        _check_verdict(gate, value, headers)

    check()


KEYED = """
CREATE TABLE keyed (
    k      {key_type} NOT NULL,
    k2     INT,
    amount BIGINT NOT NULL
) WITH ('topic' = 'in', 'format' = 'json', 'key.format' = '{key_format}',
        'key.fields' = '{fields}');
"""
KEY_TABLES = [("BIGINT", "raw", "k"), ("VARCHAR", "raw", "k"), ("DOUBLE", "raw", "k"),
              ("VARCHAR", "avro", "k;k2"), ("DECIMAL(5, 2)", "json", "k;k2"),
              ("TIMESTAMP", "json", "k")]


def _key_property(tmp: Path, examples: int) -> None:
    gates = []
    for number, (key_type, key_format, fields) in enumerate(KEY_TABLES):
        path = tmp / f"keyed{number}.sql"
        path.write_text(KEYED.format(key_type=key_type, key_format=key_format, fields=fields))
        gates.append(LateGate(source_spec(compile_program(path).table("keyed")), {}, NOW))
    seeds = [b"\x00" * 8, b"card-1", b"\x0acard1\x02\x0e", b'{"k": 12.5, "k2": 3}',
             b'{"k": "2026-01-01T00:00:00Z"}', b"\x3f\xf0\x00\x00\x00\x00\x00\x00"]

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        gate = data.draw(st.sampled_from(gates))
        key: bytes | None = data.draw(st.one_of(
            st.none(), st.binary(max_size=24),
            st.sampled_from(seeds).map(lambda k: _mutate(k, data.draw))))
        _check_verdict(gate, b'{"amount": 1}', data.draw(_HEADERS), key)

    check()


CHANGELOG = """
CREATE TABLE rates (
    changed  TIMESTAMP NOT NULL METADATA FROM 'value.source.timestamp'
             LATENESS INTERVAL '10' SECOND,
    seen     TIMESTAMP METADATA FROM 'value.ingestion-timestamp',
    tbl      VARCHAR METADATA FROM 'value.source.table',
    currency VARCHAR NOT NULL,
    rate     DECIMAL(5, 2) NOT NULL,
    day      DATE,
    qty      INT,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = 'rates', 'format' = 'debezium-json', 'max_future' = INTERVAL '1' HOUR);
"""


def _json_value(draw: Callable[..., Any]) -> Any:
    return draw(st.one_of(
        st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=12),
        st.floats(allow_nan=False, allow_infinity=False), st.just({}), st.just([1]),
        st.sampled_from(["1.25", "2027-01-15", "2027-01-15T08:00:00Z", "\ud800", "EUR"])))


def _changelog_property(tmp: Path, examples: int) -> None:
    path = tmp / "changelog.sql"
    path.write_text(CHANGELOG)
    gate = LateGate(source_spec(compile_program(path).table("rates")),
                    {"changed": NOW - 5_000}, NOW)
    fields = ["currency", "rate", "day", "qty"]

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        def image() -> Any:
            if data.draw(st.integers(0, 5)) == 0:
                return _json_value(data.draw)
            return {f: _json_value(data.draw) for f in data.draw(
                st.lists(st.sampled_from(fields), unique=True))}

        event: dict[str, Any] = {
            "op": data.draw(st.one_of(st.sampled_from(["c", "r", "u", "d", "t", "m"]),
                                      st.just(None), st.integers())),
            "before": image(),
            "after": image(),
            "source": data.draw(st.one_of(st.just(None), st.fixed_dictionaries({
                "ts_ms": st.one_of(st.integers(NOW - 20_000, NOW + 7_200_000),
                                   st.integers(-(2**64), 2**64), st.text(max_size=5)),
                "table": st.one_of(st.text(max_size=8), st.integers(), st.just("\ud800")),
            }))),
            "ts_ms": data.draw(st.one_of(st.integers(-(2**64), 2**64), st.none())),
        }
        if data.draw(st.booleans()):
            event = {"schema": {}, "payload": event}
        text = json.dumps(event)  # a lone surrogate is written as its escape
        value: bytes | None = text.encode()
        how = data.draw(st.sampled_from(["valid", "mutated", "random", "null"]))
        if how == "mutated":
            value = _mutate(text.encode(), data.draw)
        elif how == "random":
            value = data.draw(st.binary(max_size=120))
        elif how == "null":
            value = None
        _check_verdict(gate, value, data.draw(_HEADERS), b'{"currency": "EUR"}')

    check()


def test_fuzzed_change_events_are_verdicts_never_exceptions_s7(tmp_path: Path) -> None:
    _changelog_property(tmp_path, _examples(300))


def test_fuzzed_keys_are_verdicts_never_exceptions_s7(tmp_path: Path) -> None:
    _key_property(tmp_path, _examples(300))


RAW = """
CREATE TABLE raw_in (
    v  {value_type},
    ts TIMESTAMP NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '5' SECOND
) WITH ('topic' = 'in', 'format' = 'raw');
"""
RAW_TYPES = ("VARCHAR NOT NULL", "VARBINARY", "INT", "BIGINT NOT NULL", "REAL", "DOUBLE",
             "BOOLEAN")


def _raw_property(tmp: Path, examples: int) -> None:
    gates = []
    for number, value_type in enumerate(RAW_TYPES):
        path = tmp / f"raw{number}.sql"
        path.write_text(RAW.format(value_type=value_type))
        gates.append(LateGate(source_spec(compile_program(path).table("raw_in")), {}, NOW))
    seeds = [b"\x00" * 8, b"\x00\x00\x00\x07", b"\x01", "é-line".encode(),
             b"\x3f\xf0\x00\x00\x00\x00\x00\x00"]

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        gate = data.draw(st.sampled_from(gates))
        value: bytes | None = data.draw(st.one_of(
            st.none(), st.binary(max_size=24),
            st.sampled_from(seeds).map(lambda v: _mutate(v, data.draw))))
        _check_verdict(gate, value, data.draw(_HEADERS))

    check()


def test_fuzzed_raw_values_are_verdicts_never_exceptions_s7(tmp_path: Path) -> None:
    _raw_property(tmp_path, _examples(300))


def _compiler_property(tmp: Path, examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(text=st.one_of(_program_text(), st.text(max_size=300)))
    def check(text: str) -> None:
        _compile_clean(text, tmp)

    check()


def test_fuzzed_record_bytes_are_verdicts_never_exceptions_s7(tmp_path: Path) -> None:
    _decoding_property(tmp_path, _examples(400))


def test_fuzzed_program_text_is_accepted_or_a_program_error_l7(tmp_path: Path) -> None:
    _compiler_property(tmp_path, _examples(150))


def test_fuzz_finding_a_function_call_around_tumble_is_a_program_error_l7(tmp_path: Path) -> None:
    """The compiler crash the fuzzer found ('FROM f(TUMBLE(...))' raised AttributeError),
    kept as a regression test."""
    text = (
        "CREATE TABLE purchase (\n    date_time TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,\n"
        "    note VARCHAR\n) WITH ('topic' = 'purchases');\nCREATE VIEW v AS\n"
        "SELECT window_end, COUNT(*) AS n\n"
        "FROM ABLE(TUMBLE(TABLE purchase, DESCRIPTOR(date_time), INTERVAL '1' HOUR))\n"
        "GROUP BY window_end;\n"
    )
    with pytest.raises(ProgramError):
        compile_program(tmp_path / "found.sql", text)


JSON_REGISTRY = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    sensor  BIGINT NOT NULL,
    qty     INT,
    price   DECIMAL(5, 2),
    label   VARCHAR,
    amount  DOUBLE NOT NULL
) WITH ('topic' = '{topic}', 'format' = 'json-registry', 'schema-registry.url' = '{url}',
        'max_future' = INTERVAL '1' HOUR);
"""
READING_SCHEMA = {
    "type": "object",
    "properties": {
        "ts": {"type": ["string", "integer"]},
        "sensor": {"type": "integer"},
        "qty": {"type": ["integer", "null"]},
        "price": {"type": ["number", "string", "null"]},
        "label": {"type": ["string", "null"]},
        "amount": {"type": "number"},
    },
    "required": ["ts", "sensor", "amount"],
}


def _json_registry_property(tmp: Path, url: str, examples: int) -> None:
    import json
    import uuid

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = f"fuzz-{uuid.uuid4().hex[:8]}"
    path = tmp / "json_registry.sql"
    path.write_text(JSON_REGISTRY.format(topic=topic, url=url))
    gate = LateGate(source_spec(compile_program(path).table("reading")), {"ts": NOW - 5_000}, NOW)
    serializer = JSONSerializer(json.dumps(READING_SCHEMA), SchemaRegistryClient({"url": url}),
                                conf={"validate": False})  # invalid documents too
    context = SerializationContext(topic, MessageField.VALUE)
    longs = st.integers(-(2**63), 2**63 - 1)
    document = st.fixed_dictionaries({
        "ts": st.one_of(longs, st.integers(NOW - 20_000, NOW + 7_200_000),
                        st.sampled_from(["2027-01-15T08:00:00Z", "later", ""])),
        "sensor": st.one_of(longs, st.text(max_size=3)),
        "qty": st.one_of(st.none(), longs),
        "price": st.one_of(st.none(), st.floats(), st.text(max_size=8)),
        "label": st.one_of(st.none(), st.text(max_size=20)),
        "amount": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.booleans()),
    })

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        source = data.draw(st.sampled_from(["random", "valid", "mutated"]))
        if source == "random":
            value = data.draw(st.binary(max_size=120))
        else:
            value = bytes(serializer(data.draw(document), context) or b"")
            if source == "mutated":
                value = _mutate(value, data.draw)
        _check_verdict(gate, value, data.draw(_HEADERS))

    check()


def test_fuzzed_registry_json_records_are_verdicts_never_exceptions_s7(
    tmp_path: Path, schema_registry: str
) -> None:
    _json_registry_property(tmp_path, schema_registry, _examples(150))


PROTOBUF_REGISTRY = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    sensor  BIGINT NOT NULL,
    qty     INT,
    price   DECIMAL(5, 2),
    label   VARCHAR,
    day     DATE,
    amount  DOUBLE NOT NULL
) WITH ('topic' = '{topic}', 'format' = 'protobuf-confluent', 'schema-registry.url' = '{url}',
        'max_future' = INTERVAL '1' HOUR);
"""


def _reading_classes() -> tuple[Any, Any]:
    """Message classes of two files, built at run time: ``Reading`` whose fields fit the
    table's columns (some wider: uint64 and uint32 integers), and ``Other`` (nested in a
    second message) whose ``sensor`` is a string."""
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2
    from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
    from google.protobuf.message_factory import GetMessageClass
    from google.type import date_pb2

    fd = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.DescriptorPool()
    for module in (timestamp_pb2, decimal_pb2, date_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    fields = [
        ("ts", fd.TYPE_MESSAGE, ".google.protobuf.Timestamp"),
        ("sensor", fd.TYPE_UINT64, None), ("qty", fd.TYPE_UINT32, None),
        ("price", fd.TYPE_MESSAGE, ".confluent.type.Decimal"),
        ("label", fd.TYPE_STRING, None), ("day", fd.TYPE_MESSAGE, ".google.type.Date"),
        ("amount", fd.TYPE_DOUBLE, None),
    ]
    deps = ["google/protobuf/timestamp.proto", "confluent/type/decimal.proto",
            "google/type/date.proto"]
    good = descriptor_pb2.FileDescriptorProto(name="reading.proto", package="fuzz",
                                              syntax="proto3", dependency=deps)
    reading = good.message_type.add(name="Reading")
    for number, (name, kind, type_name) in enumerate(fields, start=1):
        added = reading.field.add(name=name, number=number, type=kind,
                                  label=fd.LABEL_OPTIONAL)
        if type_name is not None:
            added.type_name = type_name
    other = descriptor_pb2.FileDescriptorProto(name="other.proto", package="fuzz",
                                               syntax="proto3")
    outer = other.message_type.add(name="Outer")
    nested = outer.nested_type.add(name="Other")
    nested.field.add(name="sensor", number=2, type=fd.TYPE_STRING, label=fd.LABEL_OPTIONAL)
    pool.Add(good)
    pool.Add(other)
    return (GetMessageClass(pool.FindMessageTypeByName("fuzz.Reading")),
            GetMessageClass(pool.FindMessageTypeByName("fuzz.Outer.Other")))


def _protobuf_registry_property(tmp: Path, url: str, examples: int) -> None:
    import uuid

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = f"fuzz-{uuid.uuid4().hex[:8]}"
    path = tmp / "protobuf_registry.sql"
    path.write_text(PROTOBUF_REGISTRY.format(topic=topic, url=url))
    gate = LateGate(source_spec(compile_program(path).table("reading")), {"ts": NOW - 5_000}, NOW)
    registry = SchemaRegistryClient({"url": url})
    reading, other = _reading_classes()
    serializers = {
        "reading": ProtobufSerializer(reading, registry),
        "other": ProtobufSerializer(
            other, registry, {"subject.name.strategy": lambda ctx, name: f"{topic}-other"}),
    }
    context = SerializationContext(topic, MessageField.VALUE)
    int32 = st.integers(-(2**31), 2**31 - 1)

    @st.composite
    def message(draw: Callable[..., Any]) -> Any:
        found = reading()
        if draw(st.booleans()):
            found.ts.seconds = draw(st.one_of(
                st.integers(-(2**63), 2**63 - 1), st.integers((NOW - 20_000) // 1000,
                                                              (NOW + 7_200_000) // 1000)))
            found.ts.nanos = draw(int32)
        found.sensor = draw(st.integers(0, 2**64 - 1))
        found.qty = draw(st.integers(0, 2**32 - 1))
        if draw(st.booleans()):
            found.price.value = draw(st.binary(max_size=20))
            found.price.scale = draw(st.one_of(st.integers(-3, 6), int32))
            found.price.precision = draw(st.integers(0, 2**32 - 1))
        found.label = draw(st.text(max_size=10))
        if draw(st.booleans()):
            found.day.year, found.day.month, found.day.day = draw(int32), draw(int32), draw(int32)
        found.amount = draw(st.floats())
        return found

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        source = data.draw(st.sampled_from(["random", "valid", "other", "mutated"]))
        if source == "random":
            value = data.draw(st.binary(max_size=120))
        elif source == "other":
            value = bytes(serializers["other"](other(sensor=data.draw(st.text(max_size=5))),
                                               context) or b"")
        else:
            value = bytes(serializers["reading"](data.draw(message()), context) or b"")
            if source == "mutated":
                value = _mutate(value, data.draw)
        _check_verdict(gate, value, data.draw(_HEADERS))

    check()


def test_fuzzed_registry_protobuf_records_are_verdicts_never_exceptions_s7(
    tmp_path: Path, schema_registry: str
) -> None:
    _protobuf_registry_property(tmp_path, schema_registry, _examples(150))


DEBEZIUM_AVRO = """
CREATE TABLE rates (
    changed  TIMESTAMP NOT NULL METADATA FROM 'value.source.timestamp'
             LATENESS INTERVAL '10' SECOND,
    seen     TIMESTAMP METADATA FROM 'value.ingestion-timestamp',
    tbl      VARCHAR METADATA FROM 'value.source.table',
    currency VARCHAR NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = '{topic}', 'format' = 'debezium-avro-confluent',
        'schema-registry.url' = '{url}', 'max_future' = INTERVAL '1' HOUR);
"""


def _debezium_avro_property(tmp: Path, url: str, examples: int) -> None:
    import copy
    import uuid
    from decimal import Decimal

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from debezium_avro import ENVELOPE

    topic = f"fuzz-{uuid.uuid4().hex[:8]}"
    path = tmp / "debezium_avro.sql"
    path.write_text(DEBEZIUM_AVRO.format(topic=topic, url=url))
    gate = LateGate(source_spec(compile_program(path).table("rates")),
                    {"changed": NOW - 5_000}, NOW)
    registry = SchemaRegistryClient({"url": url})
    # An envelope whose row does not fit the table: the rate a string, the currency a long.
    misfit = copy.deepcopy(ENVELOPE)
    misfit["fields"][0]["type"][1]["fields"] = [{"name": "currency", "type": "long"},
                                                {"name": "rate", "type": "string"}]
    serializers = {
        "fits": AvroSerializer(registry, json.dumps(ENVELOPE)),
        "misfit": AvroSerializer(registry, json.dumps(misfit), conf={
            "subject.name.strategy": lambda ctx, name: f"{topic}-misfit"}),
    }
    context = SerializationContext(topic, MessageField.VALUE)
    longs = st.integers(-(2**63), 2**63 - 1)

    @st.composite
    def event(draw: Callable[..., Any], fits: bool) -> dict[str, Any]:
        def image() -> dict[str, Any] | None:
            if draw(st.booleans()):
                return None
            if fits:
                return {"currency": draw(st.text(max_size=4)),
                        "rate": Decimal(draw(st.integers(-(10**10) + 1, 10**10 - 1))) / 100}
            return {"currency": draw(longs), "rate": draw(st.text(max_size=6))}

        return {
            "before": image(), "after": image(),
            # Mostly applied ops at times near the waterline: rows and deletions, not only
            # dead letters.
            "op": draw(st.one_of(st.sampled_from(["c", "r", "u", "d"]),
                                 st.sampled_from(["c", "r", "u", "d", "t", "m"]),
                                 st.text(max_size=2))),
            "ts_ms": draw(st.one_of(st.none(), longs)),
            "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "fx",
                       "ts_ms": draw(st.one_of(longs, st.integers(NOW - 20_000, NOW + 60_000),
                                               st.integers(NOW - 20_000, NOW + 7_200_000))),
                       "snapshot": draw(st.sampled_from(["true", "false", None])),
                       "db": "fx", "schema": "public", "table": draw(st.text(max_size=6)),
                       "lsn": None},
        }

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        how = data.draw(st.sampled_from(["fits", "misfit", "mutated", "random", "null"]))
        value: bytes | None
        if how == "random":
            value = data.draw(st.binary(max_size=120))
        elif how == "null":
            value = None  # a tombstone
        else:
            writer = "misfit" if how == "misfit" else "fits"
            value = bytes(serializers[writer](data.draw(event(writer == "fits")), context)
                          or b"")
            if how == "mutated":
                value = _mutate(value, data.draw)
        _check_verdict(gate, value, data.draw(_HEADERS), b'{"currency": "EUR"}')

    check()


def test_fuzzed_registry_debezium_avro_events_are_verdicts_never_exceptions_s7(
    tmp_path: Path, schema_registry: str
) -> None:
    _debezium_avro_property(tmp_path, schema_registry, _examples(150))


@pytest.mark.slow
def test_long_fuzz_run_of_decoding_and_compiling_s7_l7(tmp_path: Path) -> None:
    """The few-minute run of docs/reliability.md."""
    _decoding_property(tmp_path, _examples(20_000))
    _key_property(tmp_path, _examples(20_000) // 4)
    _raw_property(tmp_path, _examples(20_000) // 4)
    _changelog_property(tmp_path, _examples(20_000) // 4)
    _compiler_property(tmp_path, _examples(20_000) // 4)
