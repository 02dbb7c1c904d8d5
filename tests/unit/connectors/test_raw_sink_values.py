"""SPEC S13 for raw values written (a Flink table INSERT INTO writes with ``'format' =
'raw'``): each value is its one column's bytes as Kafka's Java serializers write them
(confluent-kafka's serializers of the same names write the same bytes), a NULL a null value
(as Flink's raw format writes it), read back as a ``'raw'`` table reads them."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from confluent_kafka.serialization import (
    DoubleSerializer,
    IntegerSerializer,
    StringSerializer,
)

from app.circuit.ir import View
from app.connectors.output_reader import OutputReader
from app.program.compile import compile_program
from app.runtime.step.encode import ViewEncoding, encode_record


def _sink(column_type: str, keyed: bool = False) -> View:
    """The view of table ``out``: a raw value of ``column_type``, beside a raw BIGINT key
    ``k`` when ``keyed``."""
    columns = f"k BIGINT, v {column_type}" if keyed else f"v {column_type}"
    key = ("'key.format' = 'raw', 'key.fields' = 'k', 'value.fields-include' = 'EXCEPT_KEY', "
           if keyed else "")
    circuit = compile_program("flink.sql", f"""
CREATE TABLE src ({columns}) WITH ('connector' = 'kafka', 'topic' = 'src', 'format' = 'json');
CREATE TABLE out ({columns}) WITH ('connector' = 'kafka', 'topic' = 'out', {key}'format' = 'raw');
INSERT INTO out SELECT * FROM src;
""")
    return circuit.view("out")


@pytest.mark.parametrize("column_type, value, expected", [
    ("STRING", "héllo", StringSerializer("utf_8")("héllo")),
    ("INT", -2, IntegerSerializer()(-2)),
    ("BIGINT", 2**40 + 5, struct.pack(">q", 2**40 + 5)),  # LongSerializer
    ("DOUBLE", 2.5, DoubleSerializer()(2.5)),
    ("FLOAT", 1.5, struct.pack(">f", 1.5)),  # FloatSerializer
    ("BOOLEAN", True, b"\x01"),
    ("BYTES", b"\x00\xff", b"\x00\xff"),  # ByteArraySerializer
])
def test_s13_a_raw_value_is_the_java_serializers_bytes(
    column_type: str, value: Any, expected: bytes
) -> None:
    view = _sink(column_type)
    assert view.output is not None and view.output.encoding == "raw"
    key, data = encode_record(ViewEncoding.for_view(view), {"v": value}, None)
    assert (key, data) == (None, expected)
    assert OutputReader("out", view.output).value(data) == {"v": value}


def test_s13_a_null_raw_value_is_a_null_value() -> None:
    key, data = encode_record(ViewEncoding.for_view(_sink("STRING")), {"v": None}, None)
    assert (key, data) == (None, None)


def test_s13_a_raw_value_beside_a_raw_key_under_except_key() -> None:
    view = _sink("STRING", keyed=True)
    assert view.output is not None
    key, data = encode_record(ViewEncoding.for_view(view), {"k": 7, "v": "buy"}, None)
    assert (key, data) == (struct.pack(">q", 7), b"buy")
    reader = OutputReader("out", view.output)
    assert (reader.key(key), reader.value(data)) == ({"k": 7}, {"v": "buy"})


def test_s13_a_raw_upsert_kafka_value_deletes_with_a_tombstone() -> None:
    circuit = compile_program("flink.sql", """
CREATE TABLE src (user_id BIGINT) WITH ('connector' = 'kafka', 'topic' = 'src', 'format' = 'json');
CREATE TABLE per_user (user_id BIGINT, n BIGINT, PRIMARY KEY (user_id) NOT ENFORCED)
WITH ('connector' = 'upsert-kafka', 'topic' = 'per_user', 'key.format' = 'raw',
  'value.format' = 'raw', 'value.fields-include' = 'EXCEPT_KEY');
INSERT INTO per_user SELECT user_id, COUNT(*) FROM src GROUP BY user_id;
""")
    enc = ViewEncoding.for_view(circuit.view("per_user"))
    assert encode_record(enc, {"user_id": 3, "n": 2}, None) == (
        struct.pack(">q", 3), struct.pack(">q", 2))
    assert encode_record(enc, {"user_id": 3, "n": 2, "_delete": True}, None) == (
        struct.pack(">q", 3), None)
