"""``dead-letters show``: records as text or JSON lines, values decoded with a program's
table schema when one is given."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from app.connectors.avro_codec import AvroCodec
from app.connectors.sink.headers import format_time_value
from app.dead_letters.show import HEX_SHOWN, ProgramDecoder, letter_json, letter_text
from app.errors import TidemarkError
from app.program.compile import compile_program

T0 = 1_767_225_600_000

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    day     DATE,
    amount  DECIMAL(10, 2),
    label   VARCHAR
) WITH ('topic' = 'readings');

CREATE TABLE event (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    n    BIGINT,
    p    INT METADATA FROM 'partition'
) WITH ('topic' = 'events', 'format' = 'json');
"""


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "p.sql"
    path.write_text(PROGRAM)
    return path


def test_values_decode_with_their_tables_schema(program: Path, letter: Any) -> None:
    from decimal import Decimal

    codec = AvroCodec(compile_program(program).table("reading").avro_schema)
    value = codec.encode({"ts": T0, "day": 20454, "amount": Decimal("12.50"), "label": "x"})
    decoder = ProgramDecoder(program)
    row, why = decoder.decode(letter("late", value=value, late=("ts", T0, T0 + 1)))
    assert why is None
    assert row == {"ts": format_time_value(T0, "ms"), "day": "2026-01-01", "amount": "12.50",
                   "label": "x"}
    row, why = decoder.decode(letter("late", table="event", value=b'{"ts": 5, "n": 7}'))
    # The metadata column is not in the value (it comes from the record).
    assert why is None and row == {"ts": format_time_value(5, "ms"), "n": 7}


def test_what_does_not_decode_says_why(program: Path, letter: Any) -> None:
    decoder = ProgramDecoder(program)
    row, why = decoder.decode(letter("malformed", value=b"\xff\xfe"))
    assert row is None and why is not None and why.startswith("not a row of table reading")
    row, why = decoder.decode(letter("malformed", table="event", value=b"[1]"))
    assert row is None and why is not None and why.startswith("not a row of table event")
    assert decoder.decode(letter("late", table="gone"))[1] == f"table gone is not in {program}"
    assert decoder.decode(letter("malformed", value=None)) == (None, "no value")


def test_a_missing_program_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TidemarkError, match="does not exist"):
        ProgramDecoder(tmp_path / "none.sql")


def test_text_shows_headers_key_and_undecoded_value_as_hex(letter: Any) -> None:
    value = bytes(range(HEX_SHOWN + 2))
    late = letter("late", 1, 7, late=("ts", T0 - 5, T0), key=b"\xff\x00", value=value)
    text = letter_text(late, None, ["fix"])
    assert text.startswith("readings.dlq partition 1 offset 7 at 2026-01-01T00:00:00.000Z:"
                           " late, table reading\n")
    assert "  source:    readings partition 1 offset 47\n" in text
    waterline = format_time_value(T0, "ms")
    assert f"  late:      ts = {format_time_value(T0 - 5, 'ms')}, waterline {waterline}\n" in text
    assert "  key:       hex ff 00 (2 bytes)\n" in text
    assert "  value:     hex 00 01 02 03 04 05 06 07 08 09 0a 0b 0c" in text
    assert f"... ({HEX_SHOWN + 2} bytes)\n" in text
    assert "  headers:   origin=feed\n" in text and "  replayed:  to fix\n" in text
    text = letter_text(letter("invalid", key=b"k-1", value=None), (None, "no value"))
    assert '  key:       "k-1"\n' in text and "  value:     null\n" in text


def test_json_carries_every_detail_and_the_exact_bytes(letter: Any) -> None:
    late = letter("late", 1, 7, late=("ts", T0 - 5, T0), value=b"\x00\xff")
    data = letter_json(late, ({"ts": "x"}, None), ["fix", "fix"])
    assert data["reason"] == "late" and data["table"] == "reading"
    assert (data["partition"], data["offset"]) == (1, 7)
    assert data["source"] == {"topic": "readings", "partition": 1, "offset": 47}
    assert data["late"] == {"column": "ts", "value": format_time_value(T0 - 5, "ms"),
                            "waterline": format_time_value(T0, "ms")}
    assert base64.b64decode(data["value_base64"]) == b"\x00\xff"
    assert data["value"] == {"ts": "x"} and data["value_not_decoded"] is None
    assert data["headers"] == [["origin", "feed"]] and data["replayed_to"] == ["fix"]
    binary = letter_json(letter("malformed", own=(("trace", b"\xff"),)))
    assert binary["headers"] == [["trace", "base64:/w=="]]
    json.dumps(binary)
