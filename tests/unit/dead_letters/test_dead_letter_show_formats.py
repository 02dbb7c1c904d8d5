"""``show --program`` decodes a dead letter as its table's source reads it, whatever the
table's ``'format'`` (Avro, JSON, ``avro-confluent`` through a real schema registry) and its
keys where the table declares a ``'key.format'``.

The ``avro-confluent`` values are written by confluent-kafka's own ``AvroSerializer``, with a
writer schema that is not the table's own (another name, a field the table does not read), so
the decoder must fetch it by the id the value carries and resolve it, as the source does.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from app.dead_letters.show import ProgramDecoder, letter_json, letter_text

T0 = 1_767_225_600_000

PROGRAM = """
CREATE TABLE purchase (
    ts    TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    card  VARCHAR NOT NULL,
    qty   BIGINT
) WITH ('topic' = 'purchases', 'format' = 'avro-confluent',
        'key.format' = 'raw', 'key.fields' = 'card');

CREATE TABLE click (
    ts    BIGINT NOT NULL LATENESS 10,
    user_id BIGINT NOT NULL,
    page  VARCHAR
) WITH ('topic' = 'clicks', 'format' = 'json',
        'key.format' = 'json', 'key.fields' = 'user_id');
"""

#: What the shop's producer registered: its own record name, and a field the table skips.
WRITER: dict[str, Any] = {
    "type": "record",
    "name": "Purchase",
    "namespace": "com.example.shop",
    "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "card", "type": "string"},
        {"name": "qty", "type": ["null", "long"], "default": None},
        {"name": "channel", "type": "string", "default": "web"},
    ],
}


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "p.sql"
    path.write_text(PROGRAM)
    return path


def _framed(registry_url: str, topic: str, row: dict[str, Any]) -> bytes:
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(WRITER))
    value = serializer(row, SerializationContext(topic, MessageField.VALUE))
    assert value is not None and value[0] == 0  # magic byte, then the registry's schema id
    return value


def test_avro_confluent_values_and_raw_keys_decode_through_the_registry(
    program: Path, letter: Any, schema_registry: str
) -> None:
    topic = f"purchases-{uuid.uuid4().hex[:8]}"
    value = _framed(schema_registry, topic, {"ts": T0, "card": "c-7", "qty": 3, "channel": "pos"})
    decoder = ProgramDecoder(program, lambda url: {"url": url or schema_registry})
    late = letter("late", table="purchase", key=b"c-7", value=value,
                  late=("ts", T0, T0 + 20_000))
    # The key's column comes from the key, the others from the value (the table's own
    # schema: the writer's ``card`` and ``channel`` are not read from it).
    assert decoder.decode(late) == ({"ts": "2026-01-01T00:00:00.000Z", "qty": 3}, None)
    assert decoder.decode_key(late) == ({"card": "c-7"}, None)
    text = letter_text(late, decoder.decode(late), (), decoder.decode_key(late))
    assert '  key:       {"card": "c-7"}\n' in text
    assert '  value:     {"ts": "2026-01-01T00:00:00.000Z", "qty": 3}\n' in text
    # A value that is not framed says why, as the source's dead letter did.
    row, why = decoder.decode(letter("malformed", table="purchase", value=b"{}"))
    assert row is None and why is not None
    assert why.startswith("not a row of table purchase: not a Confluent-framed Avro record")


def test_json_values_and_json_keys_decode(program: Path, letter: Any) -> None:
    decoder = ProgramDecoder(program)
    dead = letter("late", table="click", key=b'{"user_id": 42}',
                  value=b'{"ts": 5, "user_id": 42, "page": "/a"}')
    shown = letter_json(dead, decoder.decode(dead), (), decoder.decode_key(dead))
    assert shown["value"] == {"ts": 5, "page": "/a"}  # user_id is the key's column
    assert shown["key_columns"] == {"user_id": 42}
    assert shown["key_not_decoded"] is None
    assert shown["key"] == '{"user_id": 42}'  # the bytes as text, as before
    bad = letter("malformed", table="click", key=b"42x", value=b"{")
    shown = letter_json(bad, decoder.decode(bad), (), decoder.decode_key(bad))
    assert shown["value"] is None and shown["value_not_decoded"].startswith(
        "not a row of table click"
    )
    assert shown["key_columns"] is None
    assert shown["key_not_decoded"].startswith("not a key of table click: key:")


def test_without_a_registry_avro_confluent_says_how_to_give_one(
    program: Path, letter: Any
) -> None:
    decoder = ProgramDecoder(program, lambda url: None)
    dead = letter("late", table="purchase", key=b"c-7", value=b"\x00\x00\x00\x00\x01")
    row, why = decoder.decode(dead)
    assert row is None and why is not None
    assert why.startswith("'format' = 'avro-confluent' is not decoded without a schema registry")
    assert "--schema-registry-url" in why
    # The raw key needs no registry.
    assert decoder.decode_key(dead) == ({"card": "c-7"}, None)


def test_a_table_without_a_key_format_shows_its_key_as_bytes(
    tmp_path: Path, letter: Any
) -> None:
    path = tmp_path / "plain.sql"
    path.write_text(
        "CREATE TABLE reading (ts BIGINT NOT NULL LATENESS 5) WITH ('topic' = 'r',"
        " 'format' = 'json');"
    )
    decoder = ProgramDecoder(path)
    dead = letter("late", key=b"\xff\x00", value=b'{"ts": 1}')
    assert decoder.decode_key(dead) == (None, None)
    text = letter_text(dead, decoder.decode(dead), (), decoder.decode_key(dead))
    assert "  key:       hex ff 00 (2 bytes)\n" in text
