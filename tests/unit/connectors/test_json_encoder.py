"""``'encoding' = 'json'`` outputs (SPEC S13): one JSON object per key and value, read back by
the JSON table decoder to the same circuit values.

Rows cover every column type, NULLs, TIMESTAMPs before 1970, DECIMALs at and below their
scale, non-ASCII text, non-finite doubles, and every format: append (no key), upsert (key
columns, tombstones) and changelog (undo, ptime, ver).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from app.circuit.explain import explain_json, explain_text
from app.circuit.ir import Column, SqlType
from app.connectors.json_encoder import JsonEncoder, json_decoder, json_timestamp
from app.program.avro_schema import changelog_columns, record_schema
from app.program.compile import compile_text
from app.runtime.step.encode import ViewEncoding, encode_record, encode_view_rows

COLUMNS = (
    Column("k", SqlType("BIGINT", nullable=False)),
    Column("ts", SqlType("TIMESTAMP", nullable=False)),
    Column("day", SqlType("DATE")),
    Column("amount", SqlType("DECIMAL", precision=10, scale=2)),
    Column("name", SqlType("VARCHAR")),
    Column("x", SqlType("DOUBLE")),
    Column("r", SqlType("REAL")),
    Column("ok", SqlType("BOOLEAN")),
    Column("n", SqlType("INT")),
    Column("raw", SqlType("VARBINARY")),
)

ROWS: list[dict[str, Any]] = [
    {
        "k": 1, "ts": 1_764_151_200_123, "day": 20_418, "amount": Decimal("150.00"),
        "name": "zoë \"q\"", "x": 1.5, "r": 0.25, "ok": True, "n": -(2**31), "raw": b"\x00\xff",
    },
    {
        "k": -2, "ts": -1, "day": None, "amount": None, "name": None, "x": None, "r": None,
        "ok": None, "n": None, "raw": None,
    },
    {
        "k": 2**40, "ts": 0, "day": -3653, "amount": Decimal("-0.5"), "name": "",
        "x": 1e300, "r": None, "ok": False, "n": 2**31 - 1, "raw": b"",
    },
]


def test_values_are_json_objects_of_the_documented_forms() -> None:
    encoder = JsonEncoder(record_schema("v", COLUMNS))
    first, second, third = (json.loads(encoder.encode(row)) for row in ROWS)
    assert list(first) == [c.name for c in COLUMNS]
    assert first == {
        "k": 1, "ts": "2025-11-26T10:00:00.123Z", "day": "2025-11-26", "amount": "150.00",
        "name": "zoë \"q\"", "x": 1.5, "r": 0.25, "ok": True, "n": -(2**31), "raw": "AP8=",
    }
    assert second["ts"] == "1969-12-31T23:59:59.999Z"
    assert all(second[c] is None for c in second if c not in ("k", "ts"))
    assert third["amount"] == "-0.50" and third["day"] == "1960-01-01"
    assert third["ts"] == "1970-01-01T00:00:00.000Z" and third["x"] == 1e300
    assert "zoë".encode() in encoder.encode(ROWS[0]), "UTF-8, not \\u escapes"


def test_the_json_table_decoder_reads_back_the_same_values() -> None:
    schema = record_schema("v", COLUMNS)
    encoder, decoder = JsonEncoder(schema), json_decoder("v", schema)
    for row in ROWS:
        assert decoder.decode(encoder.encode(row)) == row


def test_decimals_are_exact_strings_at_the_column_scale() -> None:
    column = Column("d", SqlType("DECIMAL", precision=38, scale=10))
    encoder = JsonEncoder(record_schema("v", [column]))
    big = Decimal("1234567890123456789012345678.0123456789")
    assert json.loads(encoder.encode({"d": big}))["d"] == "1234567890123456789012345678.0123456789"
    assert json.loads(encoder.encode({"d": Decimal("0")}))["d"] == "0.0000000000"
    assert json.loads(encoder.encode({"d": Decimal("1E+2")}))["d"] == "100.0000000000"


def test_non_finite_doubles_are_strings() -> None:
    encoder = JsonEncoder(record_schema("v", [Column("x", SqlType("DOUBLE"))]))
    shown = [json.loads(encoder.encode({"x": x}))["x"] for x in (math.nan, math.inf, -math.inf)]
    assert shown == ["NaN", "Infinity", "-Infinity"]


def test_timestamps_are_iso_utc_with_milliseconds() -> None:
    moment = dt.datetime(2026, 11, 26, 10, 40, 5, 7000, tzinfo=dt.UTC)
    assert json_timestamp(int(moment.timestamp() * 1000)) == "2026-11-26T10:40:05.007Z"
    assert json_timestamp(-86_400_000 - 1) == "1969-12-30T23:59:59.999Z"


def _encoding(fmt: str) -> ViewEncoding:
    extra = changelog_columns() if fmt == "changelog" else ()
    keys = ["k", "ts"] if fmt in ("upsert", "changelog") else []
    by_name = {c.name: c for c in COLUMNS}
    key_schema = record_schema("v_key", [by_name[k] for k in keys]) if keys else None
    return ViewEncoding(
        "v", "out", fmt, [c.name for c in COLUMNS], keys, record_schema("v", COLUMNS, extra),
        key_schema, encoding="json",
    )


@pytest.mark.parametrize("fmt", ["append", "upsert", "changelog"])
def test_records_of_every_format(fmt: str) -> None:
    enc = _encoding(fmt)
    assert enc.columnar() is None, "JSON is written a row at a time"
    row = {**ROWS[0], "_undo": True, "_ver": 3}
    key, value = encode_record(enc, row, 1_764_151_200_000)
    assert value is not None
    decoded = json.loads(value)
    if fmt == "append":
        assert key is None
    else:
        assert key is not None
        assert json.loads(key) == {"k": 1, "ts": "2025-11-26T10:00:00.123Z"}
    if fmt == "changelog":
        assert (decoded["undo"], decoded["ptime"], decoded["ver"]) == (
            True, "2025-11-26T10:00:00.000Z", 3)
        assert list(decoded)[-3:] == ["undo", "ptime", "ver"]
    else:
        assert "undo" not in decoded
    if fmt == "upsert":
        assert encode_record(enc, {**ROWS[0], "_delete": True}, None) == (key, None)


def test_a_stateless_views_rows_encode_to_json() -> None:
    enc = _encoding("append")
    columns = COLUMNS[:2] + COLUMNS[4:5]
    batch = pa.RecordBatch.from_pydict(
        {
            "k": pa.array([7, 8], pa.int64()),
            "ts": pa.array(
                [dt.datetime(2026, 1, 1, 0, 0, 0, 1500, tzinfo=dt.UTC), None],
                pa.timestamp("us", tz="UTC"),
            ),
            "name": pa.array(["a", None], pa.string()),
        }
    )
    enc = ViewEncoding(
        "v", "out", "append", [c.name for c in columns], [], record_schema("v", columns), None,
        encoding="json",
    )
    [out] = list(encode_view_rows(iter([batch]), enc))
    assert out.column("key").to_pylist() == [None, None]
    values = [json.loads(v) for v in out.column("value").to_pylist()]
    assert values == [
        {"k": 7, "ts": "2026-01-01T00:00:00.001Z", "name": "a"},
        {"k": 8, "ts": None, "name": None},
    ]


PROGRAM = """
CREATE TABLE purchase (
    date_time TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,
    card BIGINT NOT NULL,
    amount DECIMAL(10, 2)
) WITH ('topic' = 'purchases');
CREATE VIEW spend WITH ('topic' = 'spend', 'encoding' = 'json') AS
SELECT window_start, card, SUM(amount) AS total
FROM TABLE(TUMBLE(TABLE purchase, DESCRIPTOR(date_time), INTERVAL '1' HOUR))
GROUP BY window_start, card;
"""


def test_a_view_declares_json_and_explain_shows_each_outputs_encoding() -> None:
    circuit = compile_text("p.sql", PROGRAM)
    out = circuit.view("spend").output
    assert out is not None and out.encoding == "json"
    assert "(format upsert, encoding json, Kafka key window_start, card)" in explain_text(
        circuit
    )
    [view] = explain_json(circuit)["views"]
    assert view["output"]["encoding"] == "json"
    assert ViewEncoding.for_view(circuit.view("spend")).encoding == "json"


def test_json_takes_no_schema_registry() -> None:
    from app.errors import ProgramError

    bad = PROGRAM.replace("'encoding' = 'json'", "'encoding' = 'json', "
                          "'schema-registry.url' = 'http://localhost:8081'")
    with pytest.raises(ProgramError, match="schema-registry.url"):
        compile_text("p.sql", bad)
