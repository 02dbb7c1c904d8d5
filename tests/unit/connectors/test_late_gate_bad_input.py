"""The LateGate's bad-input classification (SPEC S7), one record at a time, without a broker.

The end-to-end test (tests/e2e/test_bad_input.py) sends the same kinds through Kafka and Spark;
this one pins each verdict and message, including the values Spark could not hold (they must be
dead letters, never a failed task).
"""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest

from app.connectors.late_gate import LateGate
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec

NOW = 1_800_000_000_000

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    sensor  BIGINT NOT NULL,
    qty     INT,
    day     DATE,
    price   DECIMAL(5, 2),
    amount  DOUBLE NOT NULL
) WITH ('topic' = 'in', 'max_future' = INTERVAL '1' HOUR);
"""


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> LateGate:
    path = tmp_path_factory.mktemp("gate") / "p.sql"
    path.write_text(PROGRAM)
    table = compile_program(path).table("reading")
    return LateGate(source_spec(table), {"ts": NOW - 60_000}, NOW)


def _bytes(gate: LateGate, record: dict[str, Any], changes: dict[str, Any] | None = None,
           extra: list[Any] | None = None) -> bytes:
    schema = gate.spec.avro_schema
    fields = [{**f, "type": (changes or {}).get(f["name"], f["type"])} for f in schema["fields"]]
    buffer = io.BytesIO()
    parsed = fastavro.parse_schema({**schema, "fields": fields + (extra or [])})
    fastavro.schemaless_writer(buffer, parsed, record)
    return buffer.getvalue()


def _row(**changes: Any) -> dict[str, Any]:
    return {"ts": NOW, "sensor": 1, "qty": 2, "day": 19000, "price": Decimal("1.50"),
            "amount": 0.5, **changes}


@pytest.mark.parametrize(
    ("case", "reason", "words"),
    [
        ("good", "ok", ""),
        ("garbage", "malformed", "Avro schema"),
        ("empty_bytes", "malformed", "Avro schema"),
        ("other_schema", "malformed", "another schema"),
        ("wrong_type", "malformed", "Avro schema"),
        ("null_in_not_null", "invalid", "amount is NOT NULL"),
        ("every_column_nullable", "invalid", "is NOT NULL"),
        ("int_beyond_32_bits", "invalid", "32-bit range of INT"),
        ("timestamp_beyond_9999", "invalid", "TIMESTAMP range"),
        ("date_beyond_9999", "invalid", "DATE range"),
        ("decimal_too_wide", "invalid", "DECIMAL(5, 2)"),
        ("far_future", "future", "ahead of the wall clock"),
        ("late", "late", "below the waterline"),
        ("null_without_bound", "malformed", "tidemark.bound"),
    ],
)
def test_each_kind_of_bad_record_gets_its_reason_and_a_readable_message_s7(
    gate: LateGate, case: str, reason: str, words: str
) -> None:
    nullable = ["null", "long"]
    value: bytes | None = {
        "good": lambda: _bytes(gate, _row()),
        "garbage": lambda: b"\x00\xff\xfe not avro",
        "empty_bytes": lambda: b"",
        "other_schema": lambda: _bytes(
            gate, {**_row(), "extra": "x"}, extra=[{"name": "extra", "type": "string"}]),
        "wrong_type": lambda: _bytes(gate, _row(sensor="forty-two"), {"sensor": "string"}),
        "null_in_not_null": lambda: _bytes(
            gate, _row(amount=None), {"amount": ["null", "double"]}),
        "every_column_nullable": lambda: _bytes(
            gate, _row(sensor=None, amount=None),
            {"ts": nullable, "sensor": nullable, "amount": ["null", "double"]}),
        "int_beyond_32_bits": lambda: _bytes(gate, _row(qty=2**40), {"qty": nullable}),
        "timestamp_beyond_9999": lambda: _bytes(gate, _row(ts=2**62), {"ts": "long"}),
        "date_beyond_9999": lambda: _bytes(gate, _row(day=2**30), {"day": ["null", "int"]}),
        "decimal_too_wide": lambda: _bytes(gate, _row(price=Decimal("123456.78")), {
            "price": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12,
                               "scale": 2}]}),
        "far_future": lambda: _bytes(gate, _row(ts=NOW + 2 * 3_600_000)),
        "late": lambda: _bytes(gate, _row(ts=NOW - 120_000)),
        "null_without_bound": lambda: None,
    }[case]()
    verdict = gate.classify(value, [("origin", b"test")])
    assert verdict.kind == reason, verdict
    assert words in verdict.message
    assert len(verdict.message) < 400
    if reason in ("malformed", "invalid"):
        assert verdict.row is None, "no half-decoded values reach Spark's columns"


def test_a_null_bound_header_value_and_an_unknown_bound_column_are_malformed_s4_s7(
    gate: LateGate,
) -> None:
    assert gate.classify(None, [("tidemark.bound", b"yesterday")]).kind == "malformed"
    unknown = gate.classify(None, [("tidemark.bound.sensor", b"1000")])
    assert unknown.kind == "malformed" and "not a LATENESS column" in unknown.message
    assert gate.classify(None, [("tidemark.bound", b"1000")]).kind == "punctuation"


def test_the_gate_program_compiles_from_a_file(tmp_path: Path) -> None:
    """Guard: the fixture's program is accepted as written (a typo would skip every case)."""
    path = tmp_path / "p.sql"
    path.write_text(PROGRAM)
    assert [c.name for c in compile_program(path).table("reading").columns][-1] == "amount"
