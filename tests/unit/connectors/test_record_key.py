"""Kafka keys as columns (``'key.format'``, ``'key.fields'``): a table's keys decoded by the
source, bad keys dead letters with their reason, and an output's keys written as Kafka's Java
serializers (and a registry's AvroSerializer) write them, over real
``confluent_kafka.Message`` objects (no broker)."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Message

from app.circuit.ir import Circuit
from app.connectors.avro_codec import AvroCodec
from app.connectors.kafka_source import KafkaPartitionSlice, decode_slice
from app.connectors.late_gate import SourceSpec
from app.connectors.output_reader import OutputReader
from app.connectors.record_key import KeyEncoder
from app.program.compile import compile_text
from app.runtime.operators.source import source_spec
from app.runtime.step.encode import ViewEncoding, encode_record

NOW = 1_800_000_000_000


def _circuit(sql: str) -> Circuit:
    return compile_text("keys.sql", sql)


def _table(options: str, columns: str = "", value: str = "json") -> SourceSpec:
    sql = f"""
    CREATE TABLE t (
        card   VARCHAR NOT NULL,
        shop   BIGINT,
        amount BIGINT NOT NULL{columns}
    ) WITH ('topic' = 't', 'format' = '{value}', {options});
    """
    return source_spec(_circuit(sql).table("t"))


def _rows(spec: SourceSpec, records: Sequence[tuple[bytes | None, bytes | None]]
          ) -> list[dict[str, Any]]:
    msgs = [Message(topic="t", partition=0, offset=i, key=k, value=v, timestamp=(1, NOW))
            for i, (k, v) in enumerate(records)]
    part = KafkaPartitionSlice(0, 0, 10**6, 7, NOW, {})
    batches = decode_slice(spec, part, msgs)
    return [r for r in pa.Table.from_batches(list(batches)).to_pylist() if r["_kind"] != "probe"]


def _verdicts(rows: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(r["_kind"], r["_message"]) for r in rows]


def test_a_raw_string_key_is_a_column_not_a_value_field() -> None:
    spec = _table("'key.format' = 'raw', 'key.fields' = 'card'")
    assert [f["name"] for f in spec.avro_schema["fields"]] == ["shop", "amount"]
    assert SourceSpec.from_json(spec.to_json()) == spec
    rows = _rows(spec, [("4111-é".encode(), b'{"shop": 7, "amount": 3}')])
    assert [(r["card"], r["shop"], r["amount"], r["_kind"]) for r in rows] == [
        ("4111-é", 7, 3, "ok")]


def test_bad_raw_keys_are_dead_letters_with_their_reason() -> None:
    spec = _table("'key.format' = 'raw', 'key.fields' = 'card'")
    value = b'{"amount": 1}'
    rows = _rows(spec, [(b"\xff\xfe", value), (None, value)])
    assert _verdicts(rows) == [
        ("invalid", "key: not UTF-8 text (invalid start byte at byte 0)"),
        ("invalid", "column card is NOT NULL but the record has no key field card (a null "
                    "key, or a key without it)"),
    ]
    # The dead letter keeps the record's key and value as they came.
    assert rows[0]["_key"] == b"\xff\xfe" and rows[0]["_value"] == value


@pytest.mark.parametrize(
    ("sql_type", "layout", "value"),
    [("BIGINT", ">q", -5), ("INT", ">i", 2**31 - 1), ("DOUBLE", ">d", 2.5),
     ("REAL", ">f", 0.5), ("BOOLEAN", ">?", True)],
)
def test_raw_numbers_are_big_endian_as_javas_serializers_write_them(
    sql_type: str, layout: str, value: Any
) -> None:
    sql = f"""
    CREATE TABLE t (k {sql_type} NOT NULL, amount BIGINT NOT NULL)
    WITH ('topic' = 't', 'format' = 'json', 'key.format' = 'raw', 'key.fields' = 'k');
    CREATE VIEW o WITH ('topic' = 'o', 'key' = 'k', 'key.format' = 'raw') AS SELECT * FROM t;
    """
    circuit = _circuit(sql)
    key = struct.pack(layout, value)
    rows = _rows(source_spec(circuit.table("t")), [(key, b'{"amount": 1}'),
                                                   (key + b"\x00", b'{"amount": 1}')])
    assert rows[0]["k"] == value and rows[0]["_kind"] == "ok"
    assert rows[1]["_kind"] == "malformed"
    assert rows[1]["_message"].startswith(f"key: {len(key) + 1} bytes, but a raw ")
    written, _ = encode_record(ViewEncoding.for_view(circuit.view("o")),
                               {"k": value, "amount": 1}, None)
    assert written == key


def test_json_key_fields_read_and_bad_json_keys_are_dead_letters() -> None:
    spec = _table("'key.format' = 'json', 'key.fields' = 'card;shop'")
    value = b'{"amount": 1}'
    rows = _rows(spec, [(b'{"card": "c1", "shop": 9}', value), (b"{nope", value),
                        (b'{"card": "c1", "shop": "x"}', value)])
    assert (rows[0]["card"], rows[0]["shop"], rows[0]["_kind"]) == ("c1", 9, "ok")
    assert [r["_kind"] for r in rows[1:]] == ["malformed", "invalid"]
    assert rows[1]["_message"].startswith("key: not a JSON record of table t's key: ")
    assert rows[2]["_message"] == "key: column shop: expected a BIGINT (a JSON integer), got \"x\""


def test_an_avro_key_of_one_not_null_column_reads_a_bare_value_or_a_record() -> None:
    spec = _table("'key.format' = 'avro', 'key.fields' = 'card'")
    bare = AvroCodec({"type": "record", "name": "x", "fields": [
        {"name": "s", "type": "string"}]}).encode({"s": "c9"})
    rows = _rows(spec, [(bare, b'{"amount": 1}'), (b"\x09", b'{"amount": 1}')])
    assert (rows[0]["card"], rows[0]["_kind"]) == ("c9", "ok")
    assert rows[1]["_kind"] == "malformed" and rows[1]["_message"].startswith("key: ")


def test_flinks_fields_include_all_reads_the_value_and_still_checks_the_key() -> None:
    sql = """
    CREATE TABLE t (card STRING NOT NULL, amount BIGINT NOT NULL) WITH (
      'connector' = 'kafka', 'topic' = 't', 'properties.bootstrap.servers' = 'k:9092',
      'key.format' = 'json', 'key.fields' = 'card', 'value.format' = 'json');
    """
    spec = source_spec(_circuit(sql).table("t"))
    assert spec.key_format == "json" and all(c.metadata is None for c in spec.columns)
    value = b'{"card": "from-value", "amount": 1}'
    rows = _rows(spec, [(b'{"card": "from-key"}', value), (b"garbage", value)])
    assert (rows[0]["card"], rows[0]["_kind"]) == ("from-value", "ok")
    assert rows[1]["_kind"] == "malformed"
    except_key = source_spec(_circuit(sql.replace(
        "'value.format'", "'value.fields-include' = 'EXCEPT_KEY', 'value.format'")).table("t"))
    assert [c.name for c in except_key.value_columns] == ["amount"]
    assert _rows(except_key, [(b'{"card": "from-key"}', value)])[0]["card"] == "from-key"


PROGRAM = """
CREATE TABLE t (card VARCHAR NOT NULL, shop BIGINT NOT NULL, amount BIGINT NOT NULL)
WITH ('topic' = 't', 'key.format' = 'raw', 'key.fields' = 'card');
CREATE VIEW a WITH ('topic' = 'a', 'key' = 'card', 'key.format' = '{fmt}') AS SELECT * FROM t;
CREATE VIEW b WITH ('topic' = 'b', 'key' = 'card', 'key.format' = '{fmt}', 'encoding' = 'json')
AS SELECT card, amount FROM t WHERE amount > 1;
CREATE VIEW c WITH ('topic' = 'c', 'key.format' = '{fmt}', 'format' = 'upsert') AS
SELECT card, COUNT(*) AS n FROM t GROUP BY card;
"""


@pytest.mark.parametrize("fmt", ["raw", "avro", "json"])
def test_equal_key_columns_are_byte_identical_keys_in_every_view(fmt: str) -> None:
    circuit = _circuit(PROGRAM.replace("{fmt}", fmt))
    row = {"card": "4111", "shop": 1, "amount": 5, "n": 2}
    keys = {name: encode_record(ViewEncoding.for_view(circuit.view(name)), row, None)[0]
            for name in ("a", "b", "c")}
    expected = {"raw": b"4111", "avro": b"\x084111", "json": b'{"card":"4111"}'}[fmt]
    assert keys == dict.fromkeys(("a", "b", "c"), expected)
    for name in ("a", "b", "c"):
        output = circuit.view(name).output
        assert output is not None
        assert OutputReader(name, output).key(expected) == {"card": "4111"}


def test_a_view_without_a_declared_key_format_keeps_its_record_key() -> None:
    circuit = _circuit("""
    CREATE TABLE t (card VARCHAR NOT NULL, amount BIGINT NOT NULL) WITH ('topic' = 't');
    CREATE VIEW a WITH ('topic' = 'a', 'key' = 'card', 'encoding' = 'json') AS SELECT * FROM t;
    """)
    output = circuit.view("a").output
    assert output is not None and output.key_format is None
    assert output.key_schema is not None and output.key_schema["name"] == "a_key"
    key, _ = encode_record(ViewEncoding.for_view(circuit.view("a")),
                           {"card": "4111", "amount": 1}, None)
    assert key == b'{"card":"4111"}'


def test_a_bare_null_key_column_is_a_null_key() -> None:
    encoder = KeyEncoder("raw", {"type": "string"}, ["card"])
    assert encoder.encode({"card": None}) is None


def test_avro_confluent_keys_match_confluents_serializers(schema_registry: str) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from app.connectors.confluent_avro import register_output_schemas

    topic = f"keys-{uuid.uuid4().hex[:8]}"
    client = SchemaRegistryClient({"url": schema_registry})
    context = SerializationContext(topic, MessageField.KEY)
    # A producer's primitive string key, as KafkaAvroSerializer writes a String.
    produced = AvroSerializer(client, json.dumps("string"))("4111", context)
    record_key = AvroSerializer(client, json.dumps({
        "type": "record", "name": "K", "fields": [{"name": "card", "type": "string"}]}),
        conf={"auto.register.schemas": True})({"card": "c2"}, SerializationContext(
            f"{topic}-other", MessageField.KEY))
    spec = _table(f"'key.format' = 'avro-confluent', 'key.fields' = 'card', "
                  f"'schema-registry.url' = '{schema_registry}'")
    rows = _rows(spec, [(produced, b'{"amount": 1}'), (record_key, b'{"amount": 1}'),
                        (b"\x01\x02", b'{"amount": 1}')])
    assert [(r["card"], r["_kind"]) for r in rows[:2]] == [("4111", "ok"), ("c2", "ok")]
    assert rows[2]["_kind"] == "malformed"
    assert rows[2]["_message"].startswith("key: not a Confluent-framed Avro key: ")
    # The same key with its schema GUID in a __key_schema_id header: not read by its prefix.
    named = Message(topic="t", partition=0, offset=0, key=produced, value=b'{"amount": 1}',
                    timestamp=(1, NOW), headers=[("__key_schema_id", b"\x01" + bytes(16))])
    (letter,) = [r for r in pa.Table.from_batches(list(decode_slice(
        spec, KafkaPartitionSlice(0, 0, 10**6, 7, NOW, {}), [named]))).to_pylist()
        if r["_kind"] != "probe"]
    assert letter["_kind"] == "malformed"
    assert "__key_schema_id header (a schema GUID" in letter["_message"]

    circuit = _circuit(f"""
    CREATE TABLE t (card VARCHAR NOT NULL, amount BIGINT NOT NULL) WITH ('topic' = 't');
    CREATE VIEW o WITH ('topic' = '{topic}', 'key' = 'card', 'key.format' = 'avro-confluent',
                        'schema-registry.url' = '{schema_registry}') AS SELECT * FROM t;
    """)
    output = circuit.view("o").output
    assert output is not None and output.key_schema == {"type": "string"}
    key_id, value_id = register_output_schemas({"url": schema_registry}, topic,
                                               output.key_schema, None)
    assert value_id is None
    key = KeyEncoder("avro-confluent", output.key_schema, ["card"], key_id).encode(
        {"card": "4111"})
    # The producer's bytes but the schema id, which is whatever the registry gave the subject
    # (the tests' Apicurio gives each client's registration of "string" an id of its own).
    assert key is not None and key[:1] == b"\x00" and key[5:] == produced[5:] == b"\x084111"
    assert AvroDeserializer(client)(key, context) == "4111"


#: Bare bytes keys: empty, ones that start like an Avro length (b"\x06abc" would read as
#: b"abc" length-prefixed), a zero byte, one past a one-byte Avro length, text.
BYTES_KEYS = [b"", b"\x06abc", b"\x02", b"\x00", b"\x00\x00\x00\x00\x01", b"\xff" * 200,
              b"4111"]


def test_avro_confluent_bytes_keys_are_raw_after_the_prefix_as_confluent_writes_them(
    schema_registry: str,
) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from app.connectors.confluent_avro import register_output_schemas

    topic = f"bytes-keys-{uuid.uuid4().hex[:8]}"
    client = SchemaRegistryClient({"url": schema_registry})
    context = SerializationContext(topic, MessageField.KEY)
    # confluent-kafka's AvroSerializer (as Java's KafkaAvroSerializer) writes a "bytes"
    # value as its raw bytes after the 5-byte prefix: no Avro length before them.
    produced = [AvroSerializer(client, json.dumps(schema))(value, context)
                for schema in ("bytes", {"type": "bytes"}) for value in BYTES_KEYS]
    assert [p[5:] for p in produced] == BYTES_KEYS * 2
    spec = source_spec(_circuit(f"""
    CREATE TABLE t (k VARBINARY NOT NULL, amount BIGINT NOT NULL) WITH ('topic' = 't',
      'format' = 'json', 'key.format' = 'avro-confluent', 'key.fields' = 'k',
      'schema-registry.url' = '{schema_registry}');
    """).table("t"))
    rows = _rows(spec, [(key, b'{"amount": 1}') for key in produced])
    assert [(r["k"], r["_kind"]) for r in rows] == [(k, "ok") for k in BYTES_KEYS * 2]

    circuit = _circuit(f"""
    CREATE TABLE t (k VARBINARY NOT NULL, amount BIGINT NOT NULL) WITH ('topic' = 't');
    CREATE VIEW o WITH ('topic' = '{topic}', 'key' = 'k', 'key.format' = 'avro-confluent',
                        'schema-registry.url' = '{schema_registry}') AS SELECT * FROM t;
    """)
    output = circuit.view("o").output
    assert output is not None and output.key_schema == {"type": "bytes"}
    key_id, _ = register_output_schemas({"url": schema_registry}, topic, output.key_schema,
                                        None)
    assert key_id is not None
    encoder = KeyEncoder("avro-confluent", output.key_schema, ["k"], key_id)
    reader = OutputReader("o", output)
    for value in BYTES_KEYS:
        key = encoder.encode({"k": value})
        assert key == b"\x00" + key_id.to_bytes(4, "big") + value
        assert reader.key(key) == {"k": value}
        if value:
            assert AvroDeserializer(client)(key, context) == value
    # An empty value is the prefix alone, as the serializer writes it, which Java's
    # KafkaAvroDeserializer reads as an empty byte[]; confluent-kafka's AvroDeserializer
    # refuses any record of 5 bytes or fewer, its own serializer's included.
    assert produced[0] == b"\x00" + produced[0][1:5]


def test_l1_key_fields_prefix_names_columns_for_the_keys_unprefixed_fields() -> None:
    # Flink's 'key.fields-prefix': the columns are k_card and k_shop, the key's fields
    # card and shop; the value's own card is another column.
    spec = source_spec(_circuit("""
    CREATE TABLE t (k_card VARCHAR NOT NULL, k_shop BIGINT, card VARCHAR, amount BIGINT)
    WITH ('topic' = 't', 'format' = 'json', 'key.format' = 'json',
          'key.fields' = 'k_card;k_shop', 'key.fields-prefix' = 'k_');
    """).table("t"))
    assert [f["name"] for f in spec.key_schema["fields"]] == ["card", "shop"]
    rows = _rows(spec, [(b'{"card": "c1", "shop": 9}', b'{"card": "v", "amount": 1}'),
                        (b'{"k_card": "c1"}', b'{"amount": 1}'), (None, b'{"amount": 1}')])
    assert [(r["k_card"], r["k_shop"], r["card"], r["_kind"]) for r in rows[:1]] == [
        ("c1", 9, "v", "ok")]
    # A key written with the prefixed names has no field card: the NOT NULL column is empty.
    assert [r["_kind"] for r in rows[1:]] == ["invalid", "invalid"]
    assert rows[1]["_message"].startswith("column k_card is NOT NULL")


def test_l1_flinks_avro_confluent_page_reads_prefixed_key_fields(schema_registry: str) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    # The Avro Confluent format page's second table, as the page writes it (registry URL
    # and subjects are the page's but for the tests' registry).
    spec = source_spec(_circuit(f"""
    CREATE TABLE user_created (
      kafka_key_id STRING,
      id STRING,
      name STRING,
      email STRING
    ) WITH (
      'connector' = 'kafka',
      'topic' = 'user_events_example2',
      'properties.bootstrap.servers' = 'localhost:9092',
      'key.format' = 'avro-confluent',
      'key.avro-confluent.url' = '{schema_registry}',
      'key.fields' = 'kafka_key_id',
      'key.fields-prefix' = 'kafka_key_',
      'value.format' = 'avro-confluent',
      'value.avro-confluent.url' = '{schema_registry}',
      'value.fields-include' = 'EXCEPT_KEY',
      'key.avro-confluent.subject' = 'user_events_example2-key2',
      'value.avro-confluent.subject' = 'user_events_example2-value2'
    );""").table("user_created"))
    client = SchemaRegistryClient({"url": schema_registry})
    topic = f"users-{uuid.uuid4().hex[:8]}"
    key = AvroSerializer(client, json.dumps({"type": "record", "name": "K", "fields": [
        {"name": "id", "type": "string"}]}))({"id": "u1"}, SerializationContext(
            topic, MessageField.KEY))
    value = AvroSerializer(client, json.dumps({"type": "record", "name": "V", "fields": [
        {"name": "id", "type": "string"}, {"name": "name", "type": "string"},
        {"name": "email", "type": "string"}]}))(
        {"id": "u1-v", "name": "Ann", "email": "a@x"},
        SerializationContext(topic, MessageField.VALUE))
    msgs = [Message(topic="t", partition=0, offset=0, key=key, value=value,
                    timestamp=(1, NOW))]
    part = KafkaPartitionSlice(0, 0, 10**6, 7, NOW, {})
    rows = [r for r in pa.Table.from_batches(list(decode_slice(spec, part, msgs))).to_pylist()
            if r["_kind"] != "probe"]
    assert [(r["kafka_key_id"], r["id"], r["name"], r["_kind"]) for r in rows] == [
        ("u1", "u1-v", "Ann", "ok")]


def test_l1_a_raw_table_reads_each_value_as_its_one_columns_bytes() -> None:
    # Flink's raw format page: one STRING column, the whole value as UTF-8 text.
    spec = source_spec(compile_text("flink.sql", """
    CREATE TABLE nginx_log (
      log STRING,
      ts TIMESTAMP(3) METADATA FROM 'timestamp'
    ) WITH (
      'connector' = 'kafka',
      'topic' = 'nginx_log',
      'properties.bootstrap.servers' = 'localhost:9092',
      'properties.group.id' = 'testGroup',
      'format' = 'raw'
    );""").table("nginx_log"))
    line = b'127.0.0.1 - - "GET / HTTP/1.1" 200 {"not": "json"}'
    rows = _rows(spec, [(None, line), (None, b"\xff\xfe"), (None, b"")])
    assert [(r["log"], r["_kind"], r["_message"]) for r in rows] == [
        (line.decode(), "ok", None),
        (None, "invalid", "not UTF-8 text (invalid start byte at byte 0)"),
        ("", "ok", None)]
    assert rows[0]["ts"] is not None


def test_l1_raw_numbers_are_read_as_javas_serializers_write_them() -> None:
    spec = source_spec(_circuit("""
    CREATE TABLE t (n BIGINT NOT NULL, k VARCHAR METADATA FROM 'key')
    WITH ('topic' = 't', 'format' = 'raw');
    """).table("t"))
    rows = _rows(spec, [(b"a", struct.pack(">q", -7)), (b"b", b"\x00\x01")])
    assert [(r["k"], r["n"], r["_kind"]) for r in rows] == [
        ("a", -7, "ok"), (None, None, "malformed")]
    assert rows[1]["_message"] == ("2 bytes, but a raw long value is 8 (big-endian, as Kafka's "
                                   "Java serializers write it)")
    assert rows[1]["_value"] == b"\x00\x01"


@pytest.mark.parametrize(("columns", "options", "message"), [
    ("a VARCHAR, b VARCHAR", "", "table t reads raw values, one column's bytes, but 2 of its "
     "columns are read from the value (a, b)"),
    ("a DECIMAL(10, 2)", "", "column t.a is DECIMAL, which a raw value cannot hold"),
    ("a VARCHAR", ", 'schema' = 't.avsc'", "table t reads raw values, which have no schema"),
])
def test_l1_a_raw_table_has_one_value_column_of_a_raw_type(
        columns: str, options: str, message: str) -> None:
    from app.errors import ProgramError

    with pytest.raises(ProgramError) as info:
        _circuit(f"CREATE TABLE t ({columns}) WITH ('topic' = 't', 'format' = 'raw'{options});")
    assert info.value.diagnostics[0].message == message


def test_l7_flinks_raw_options_take_their_defaults_only() -> None:
    from app.errors import ProgramError

    table = """CREATE TABLE t (log STRING) WITH ('connector' = 'kafka', 'topic' = 't',
      'properties.bootstrap.servers' = 'k:9092', 'format' = 'raw'{});"""
    _circuit(table.format(", 'raw.charset' = 'UTF-8', 'raw.endianness' = 'big-endian'"))
    with pytest.raises(ProgramError) as info:
        _circuit(table.format(", 'raw.endianness' = 'little-endian'"))
    assert info.value.diagnostics[0].message.startswith(
        "unsupported option 'raw.endianness' of table t: raw values are read as UTF-8 text and "
        "big-endian numbers")
