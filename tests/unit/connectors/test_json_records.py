"""Values of ``'format' = 'json'`` tables (SPEC L1, S6, S7; docs/language.md "JSON values").

Real JSON bytes through :class:`JsonRecords`, the :class:`LateGate` and the source's
``decode_slice`` over real ``confluent_kafka.Message`` objects: every column type and every
convention, each malformed and invalid value with its reason and message, and the Arrow
columns of a JSON slice equal to those of the same rows sent as Avro.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Message

from app.connectors.avro_codec import AvroCodec
from app.connectors.json_records import JsonRecordError, JsonRecords
from app.connectors.kafka_source import KafkaPartitionSlice, decode_slice
from app.connectors.late_gate import LateGate, SourceSpec
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec

NOW = 1_800_000_000_000  # 2027-01-15T08:00:00Z

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    seq     BIGINT NOT NULL,
    qty     INT,
    day     DATE,
    label   VARCHAR,
    blob    VARBINARY,
    flag    BOOLEAN,
    ratio   REAL,
    amount  DOUBLE,
    price   DECIMAL(10, 2)
) WITH ('topic' = 'in'{format}, 'max_future' = INTERVAL '1' HOUR);
"""
WATERLINES: dict[str, int | None] = {"ts": NOW - 60_000}


def _spec(tmp: Path, fmt: str) -> SourceSpec:
    path = tmp / f"{fmt}.sql"
    path.write_text(PROGRAM.format(format=f", 'format' = '{fmt}'"))
    return source_spec(compile_program(path).table("reading"))


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> SourceSpec:
    return _spec(tmp_path_factory.mktemp("json"), "json")


@pytest.fixture(scope="module")
def avro_spec(tmp_path_factory: pytest.TempPathFactory) -> SourceSpec:
    return _spec(tmp_path_factory.mktemp("avro"), "avro")


@pytest.fixture(scope="module")
def records(spec: SourceSpec) -> JsonRecords:
    return JsonRecords(spec.table, [(c.name, c.kind) for c in spec.columns])


@pytest.fixture(scope="module")
def gate(spec: SourceSpec) -> LateGate:
    return LateGate(spec, WATERLINES, NOW)


def _json(**fields: Any) -> bytes:
    return json.dumps({"ts": NOW, "seq": 1, **fields}).encode()


def _ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


def test_the_spec_carries_the_format_through_its_json_round_trip_l1(
    spec: SourceSpec, avro_spec: SourceSpec
) -> None:
    assert spec.format == "json" and avro_spec.format == "avro"
    assert SourceSpec.from_json(spec.to_json()) == spec
    assert SourceSpec.from_json(avro_spec.to_json()) == avro_spec
    legacy = {k: v for k, v in avro_spec.to_json().items() if k != "format"}
    assert SourceSpec.from_json(legacy).format == "avro"


def test_every_column_type_decodes_to_the_values_the_avro_path_gives_l1(
    records: JsonRecords,
) -> None:
    value = (
        b'{"ts": "2026-11-26T10:00:00Z", "seq": 9223372036854775807, "qty": -2147483648,'
        b' "day": "2024-02-29", "label": "caf\\u00e9 \xe2\x98\x95", "blob": "AAH/",'
        b' "flag": false, "ratio": 0.1, "amount": -1.5e300, "price": 12345678.9}'
    )
    assert records.decode(value) == {
        "ts": _ms(2026, 11, 26, 10),
        "seq": 2**63 - 1,
        "qty": -(2**31),
        "day": (date(2024, 2, 29) - date(1970, 1, 1)).days,
        "label": "café ☕",
        "blob": b"\x00\x01\xff",
        "flag": False,
        "ratio": 0.10000000149011612,  # single precision, as an Avro float reads
        "amount": -1.5e300,
        "price": Decimal("12345678.90"),
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"2026-11-26T10:00:00Z"', _ms(2026, 11, 26, 10)),
        ('"2026-11-26T10:00:00"', _ms(2026, 11, 26, 10)),  # no zone: UTC
        ('"2026-11-26 10:00:00"', _ms(2026, 11, 26, 10)),
        ('"2026-11-26T11:30:00+01:30"', _ms(2026, 11, 26, 10)),
        ('"2026-11-26T10:00:00.123456Z"', _ms(2026, 11, 26, 10) + 123),  # truncated to ms
        ('"2026-11-26"', _ms(2026, 11, 26)),
        ("1795687200000", _ms(2026, 11, 26, 10)),  # epoch milliseconds
        ("-1", -1),
    ],
)
def test_a_timestamp_is_an_iso_8601_string_utc_without_zone_or_epoch_ms_l1(
    records: JsonRecords, text: str, expected: int
) -> None:
    assert records.decode(f'{{"ts": {text}}}'.encode())["ts"] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12.5", Decimal("12.50")),
        ('"12.5"', Decimal("12.50")),
        ("12.500", Decimal("12.50")),  # trailing zeros are exact
        ("-7", Decimal("-7.00")),
        ('"-1e3"', Decimal("-1000.00")),
        ("0.1", Decimal("0.10")),
        ('"99999999.99"', Decimal("99999999.99")),
        # beyond a double's 17 digits: read exactly, never through a float
        ("0.30000000000000000000000000001", Decimal("0.30000000000000000000000000001")),
    ],
)
def test_a_decimal_is_a_number_or_string_read_exactly_l1(
    records: JsonRecords, text: str, expected: Decimal
) -> None:
    got = records.decode(f'{{"price": {text}}}'.encode())["price"]
    assert got == expected and str(got) == str(expected)


def test_missing_fields_and_null_are_null_and_extra_fields_are_ignored_l1(
    records: JsonRecords,
) -> None:
    row = records.decode(b'{"ts": 5, "qty": null, "other": {"nested": [1, 2]}, "Label": "x"}')
    assert row == {
        "ts": 5,
        "seq": None,
        "qty": None,
        "day": None,
        "label": None,
        "blob": None,
        "flag": None,
        "ratio": None,
        "amount": None,
        "price": None,
    }, "names are case-sensitive: Label is not label"


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (
            b"{not json",
            "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        (b"", "Expecting value: line 1 column 1 (char 0)"),
        (b'{"ts": 1} {"ts": 2}', "Extra data: line 1 column 11 (char 10)"),
        (b"\xff\xfe{}", "not UTF-8 text (invalid start byte at byte 0)"),
        ('{"label": "x"}'.encode("utf-16"), "not UTF-8 text (invalid start byte at byte 0)"),
        (b'{"amount": NaN}', "NaN is not a JSON value"),
        (b'{"amount": -Infinity}', "-Infinity is not a JSON value"),
        (b"[1, 2]", "the value is an array, not a JSON object"),
        (b'"text"', 'the value is "text", not a JSON object'),
        (b"42", "the value is 42, not a JSON object"),
        (b"null", "the value is null, not a JSON object"),
    ],
)
def test_a_value_that_is_not_a_utf8_json_object_is_malformed_s7(
    gate: LateGate, value: bytes, detail: str
) -> None:
    verdict = gate.classify(value, None)
    assert verdict.kind == "malformed" and verdict.row is None
    assert verdict.message == f"not a JSON record of table reading: {detail}"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"price": True}, "column price: expected a DECIMAL(10,2) number or string, got true"),
        ({"price": "12,5"}, 'column price: expected a DECIMAL(10,2) number or string, got "12,5"'),
        ({"price": "NaN"}, 'column price: expected a DECIMAL(10,2) number or string, got "NaN"'),
        ({"price": " 1"}, 'column price: expected a DECIMAL(10,2) number or string, got " 1"'),
        ({"seq": "1"}, 'column seq: expected a BIGINT (a JSON integer), got "1"'),
        ({"seq": 1.0}, "column seq: expected a BIGINT (a JSON integer), got 1.0"),
        ({"seq": 2**63}, "column seq = 9223372036854775808 is outside the 64-bit range of BIGINT"),
        ({"qty": True}, "column qty: expected an INT (a JSON integer), got true"),
        ({"qty": 1e3}, "column qty: expected an INT (a JSON integer), got 1000.0"),
        ({"flag": 1}, "column flag: expected a BOOLEAN (true or false), got 1"),
        ({"flag": "true"}, 'column flag: expected a BOOLEAN (true or false), got "true"'),
        ({"amount": "1.5"}, 'column amount: expected a DOUBLE number, got "1.5"'),
        ({"amount": False}, "column amount: expected a DOUBLE number, got false"),
        ({"ratio": 1e39}, "column ratio = 1E+39 is outside the range of REAL"),
        ({"label": 5}, "column label: expected a VARCHAR string, got 5"),
        ({"label": ["a"]}, "column label: expected a VARCHAR string, got an array"),
        ({"label": {"a": 1}}, "column label: expected a VARCHAR string, got an object"),
        (
            {"day": "2024-02-30"},
            "column day: expected a DATE string 'YYYY-MM-DD', got \"2024-02-30\"",
        ),
        ({"day": 19000}, "column day: expected a DATE string 'YYYY-MM-DD', got 19000"),
        (
            {"blob": "not base64!"},
            'column blob: expected a VARBINARY base64 string, got "not base64!"',
        ),
        ({"blob": "AAE"}, 'column blob: expected a VARBINARY base64 string, got "AAE"'),
        (
            {"ts": "yesterday"},
            "column ts: expected a TIMESTAMP ISO-8601 string or epoch milliseconds "
            '(a JSON integer), got "yesterday"',
        ),
        (
            {"ts": 1.8e12},
            "column ts: expected a TIMESTAMP ISO-8601 string or epoch milliseconds "
            "(a JSON integer), got 1800000000000.0",
        ),
    ],
)
def test_a_field_of_the_wrong_type_is_invalid_naming_column_and_expectation_s7(
    gate: LateGate, fields: dict[str, Any], message: str
) -> None:
    verdict = gate.classify(_json(**fields), None)
    assert (verdict.kind, verdict.row, verdict.message) == ("invalid", None, message)


def test_a_lone_surrogate_is_invalid_and_its_message_stays_utf8_s6_s7(gate: LateGate) -> None:
    verdict = gate.classify(b'{"ts": 1800000000000, "seq": 1, "label": "a\\ud800"}', None)
    assert verdict.kind == "invalid"
    assert verdict.message == (
        'column label = "a\\ud800" is not valid Unicode text (a lone surrogate)'
    )
    verdict.message.encode("utf-8")


def test_a_long_wrong_value_is_shortened_in_the_message_s6(gate: LateGate) -> None:
    verdict = gate.classify(_json(seq="9" * 200), None)
    assert verdict.kind == "invalid"
    assert verdict.message == 'column seq: expected a BIGINT (a JSON integer), got "' + (
        "9" * 56 + "..."
    )


def _row(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict.fromkeys(
        ("qty", "day", "label", "blob", "flag", "ratio", "amount", "price")
    )
    return {**base, "ts": NOW, "seq": 1, **changes}


@pytest.mark.parametrize(
    ("fields", "reason", "message"),
    [
        ({"seq": None}, "invalid", "column seq is NOT NULL but the record has null"),
        ({"ts": None}, "invalid", "column ts is NOT NULL but the record has null"),
        ({"qty": 2**32}, "invalid", "column qty = 4294967296 is outside the 32-bit range of INT"),
        (
            {"price": "123456789.5"},
            "invalid",
            "column price = 123456789.50 is more digits than DECIMAL(10, 2) holds",
        ),
        (
            {"price": 1.005},
            "invalid",
            "column price = 1.005 is more digits than DECIMAL(10, 2) holds",
        ),
        (
            {"ts": 253_402_300_800_000},
            "invalid",
            "column ts = 253402300800000 is outside the TIMESTAMP range (years 1 to 9999)",
        ),
        (
            {"ts": NOW + 3_600_001},
            "future",
            f"ts = {NOW + 3_600_001} ms is more than 3600000 ms ahead of the wall clock {NOW} ms",
        ),
        (
            {"ts": NOW - 60_001},
            "late",
            f"ts = {NOW - 60_001} is below the waterline {NOW - 60_000}",
        ),
        ({"ts": NOW - 60_000}, "ok", ""),
    ],
)
def test_the_gate_checks_json_rows_as_it_checks_avro_rows_s5_s7(
    gate: LateGate, fields: dict[str, Any], reason: str, message: str
) -> None:
    verdict = gate.classify(_json(**fields), None)
    assert (verdict.kind, verdict.message) == (reason, message)
    assert (verdict.row is not None) == (reason in ("ok", "late", "future"))


def test_a_missing_not_null_field_is_invalid_s7(gate: LateGate) -> None:
    verdict = gate.classify(b'{"ts": 1800000000000}', None)
    assert (verdict.kind, verdict.message) == (
        "invalid",
        "column seq is NOT NULL but the record has null",
    )


def test_a_null_value_is_punctuation_not_json_s4(gate: LateGate) -> None:
    verdict = gate.classify(None, [("tidemark.bound", b"2027-01-15T08:00:00Z")])
    assert verdict.kind == "punctuation" and verdict.bounds == {"ts": NOW}


def test_decoding_errors_are_typed_with_their_reason(records: JsonRecords) -> None:
    with pytest.raises(JsonRecordError) as bad:
        records.decode(b"[]")
    assert bad.value.reason == "malformed"
    with pytest.raises(JsonRecordError) as wrong:
        records.decode(b'{"qty": "1"}')
    assert wrong.value.reason == "invalid"


# -- the source: a JSON slice's Arrow columns -------------------------------------------------


def _messages(values: list[bytes | None], headers: list[Any] | None = None) -> list[Any]:
    return [
        Message(
            topic="in",
            partition=3,
            offset=100 + i,
            key=f"k{i}".encode(),
            value=v,
            headers=headers[i] if headers else [("origin", b"test")],
        )
        for i, v in enumerate(values)
    ]


ROWS: list[dict[str, Any]] = [
    _row(),
    _row(
        ts=NOW - 1_000,
        seq=-5,
        qty=7,
        day=19_000,
        label="ä",
        blob=b"\x00\xff",
        flag=True,
        ratio=0.5,
        amount=2.25,
        price=Decimal("-3.10"),
    ),
    _row(ts=NOW - 61_000, seq=2, label=""),  # late
    _row(ts=NOW + 30_000, seq=3, price=Decimal("99999999.99")),  # moves the probe
    _row(ts=NOW + 7_200_000, seq=4),  # future
]


def _as_json(row: dict[str, Any]) -> bytes:
    shown = {
        **row,
        "day": None if row["day"] is None else str(date.fromordinal(719_163 + row["day"])),
        "blob": None if row["blob"] is None else base64.b64encode(row["blob"]).decode(),
        "price": None if row["price"] is None else str(row["price"]),
        "ts": datetime.fromtimestamp(row["ts"] / 1000, UTC).isoformat(),
    }
    return json.dumps(shown).encode()


def _table(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return pa.Table.from_batches(batches).to_pylist()


def test_a_json_slice_has_the_arrow_columns_of_the_same_rows_sent_as_avro_s2_s3(
    spec: SourceSpec, avro_spec: SourceSpec
) -> None:
    part = KafkaPartitionSlice(3, 100, 200, 7, NOW, dict(WATERLINES))
    codec = AvroCodec(avro_spec.avro_schema)
    from_json = _table(list(decode_slice(spec, part, _messages([_as_json(r) for r in ROWS]))))
    from_avro = _table(
        list(decode_slice(avro_spec, part, _messages([codec.encode(r) for r in ROWS])))
    )
    assert [r["_kind"] for r in from_json] == ["ok", "ok", "late", "ok", "future", "probe"]
    payload = {"_value"}  # the original bytes differ; every other column is the same
    assert [{k: v for k, v in r.items() if k not in payload} for r in from_json] == [
        {k: v for k, v in r.items() if k not in payload} for r in from_avro
    ]
    assert from_json[-1]["ts"] == datetime.fromtimestamp((NOW + 30_000) / 1000, UTC)
    assert from_json[-1]["_accepted"] == 3
    assert [r["_value"] for r in from_json[:-1]] == [_as_json(r) for r in ROWS]


def test_bad_json_records_are_dead_letters_with_their_bytes_and_headers_s6_s7(
    spec: SourceSpec,
) -> None:
    part = KafkaPartitionSlice(3, 100, 200, 7, NOW, dict(WATERLINES))
    values: list[bytes | None] = [
        _as_json(_row()),
        b"\x00garbage",
        _json(price=True),
        b'{"ts": 1800000000000}',
        None,  # punctuation: no row, moves the probe
        _as_json(_row(seq=9)),
    ]
    headers: list[Any] = [
        [("origin", b"a")],
        [("origin", b"b")],
        None,
        [],
        [("tidemark.bound", str(NOW + 5).encode())],
        [("origin", b"f")],
    ]
    rows = _table(list(decode_slice(spec, part, _messages(values, headers))))
    assert [r["_kind"] for r in rows] == ["ok", "malformed", "invalid", "invalid", "ok", "probe"]
    dead = rows[1:4]
    assert [r["_message"] for r in dead] == [
        "not a JSON record of table reading: Expecting value: line 1 column 1 (char 0)",
        "column price: expected a DECIMAL(10,2) number or string, got true",
        "column seq is NOT NULL but the record has null",
    ]
    assert [r["_value"] for r in dead] == values[1:4], "the original bytes, for replay"
    assert [r["_key"] for r in dead] == [b"k1", b"k2", b"k3"]
    assert [r["_offset"] for r in dead] == [101, 102, 103]
    assert dead[0]["_headers"] == [{"key": "origin", "value": b"b"}]
    assert all(r["ts"] is None and r["seq"] is None for r in dead), "a dead letter has no row"
    probe = rows[-1]
    assert probe["ts"] == datetime.fromtimestamp((NOW + 5) / 1000, UTC)
    assert probe["_accepted"] == 2
