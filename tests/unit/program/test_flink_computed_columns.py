"""SPEC L1, L2, L7, S5, S7 for Flink programs: computed columns, a WATERMARK on one,
CURRENT_WATERMARK and the dead-letter options of a Flink table (docs/porting-from-flink.md).

Flink's Kafka connector page declares event time derived from an epoch-millis field
(``ts AS TO_TIMESTAMP_LTZ(epoch_ms, 3)``, ``WATERMARK FOR ts AS ts - INTERVAL '5' SECOND``);
such a column is computed when its record is decoded, so the late gate, the dead letters and
the waterline see it.
"""

from __future__ import annotations

import pytest

from app.circuit.reference import StepInput, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program

KAFKA = ("'connector' = 'kafka', 'topic' = 'orders', "
         "'properties.bootstrap.servers' = 'localhost:9092', 'format' = 'json'")


def refused(text: str) -> tuple[int, int, str, str]:
    """(line, column, message, fix) of the first error of ``text``."""
    with pytest.raises(ProgramError) as info:
        compile_program("flink.sql", text)
    first = info.value.diagnostics[0]
    return first.position.line, first.position.column, first.message, first.fix or ""


def test_s6_dead_letter_connect_headers_is_read_as_tidemarks_option() -> None:
    on = compile_program("flink.sql", "CREATE TABLE orders (\n  id BIGINT,\n  ts TIMESTAMP(3),\n"
                         "  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND\n) WITH (" + KAFKA
                         + ", 'dead_letter.connect-headers' = 'true');\n")
    assert on.table("orders").dead_letter_connect_headers is True
    off = compile_program("flink.sql", "CREATE TABLE orders (\n  id BIGINT\n) WITH (" + KAFKA
                          + ", 'dead_letter.connect-headers' = 'false');\n")
    assert off.table("orders").dead_letter_connect_headers is False


def test_l7_a_bad_dead_letter_connect_headers_value_is_refused_at_it() -> None:
    line, column, message, fix = refused(
        "CREATE TABLE orders (\n  id BIGINT\n) WITH (" + KAFKA
        + ",\n  'dead_letter.connect-headers' = 'yes');\n")
    assert (line, column) == (4, 35)
    assert message == "'dead_letter.connect-headers' is 'yes'"
    assert fix.startswith("write 'true'")


ORDERS = ("CREATE TABLE orders (\n  id BIGINT,\n  epoch_ms BIGINT,\n"
          "  ts AS TO_TIMESTAMP_LTZ(epoch_ms, 3),\n"
          "  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND\n) WITH (" + KAFKA + ");\n"
          "CREATE TABLE fresh (id BIGINT, ts TIMESTAMP(3), wm TIMESTAMP(3)) WITH ("
          "'connector' = 'kafka', 'topic' = 'fresh', 'format' = 'json');\n")


def test_s5_current_watermark_is_the_waterline_the_rows_step_started_with() -> None:
    circuit = compile_program("flink.sql", ORDERS + "INSERT INTO fresh SELECT id, ts, "
                              "CURRENT_WATERMARK(ts) FROM orders\nWHERE CURRENT_WATERMARK(ts) "
                              "IS NULL OR ts > CURRENT_WATERMARK(ts);\n")
    results = evaluate(circuit, [
        StepInput(rows={"orders": [{"id": 1, "epoch_ms": 10_000}, {"id": 2, "epoch_ms": None}]}),
        StepInput(rows={"orders": [{"id": 3, "epoch_ms": 4_000}, {"id": 4, "epoch_ms": 5_000},
                                   {"id": 5, "epoch_ms": 6_000}]}),
    ])
    assert [[r.value for r in result.outputs["fresh"]] for result in results] == [
        [{"id": 1, "ts": 10_000, "wm": None}],
        [{"id": 5, "ts": 6_000, "wm": 5_000}],  # 4 is on time (= w) but not above it
    ]
    assert [(d.reason, d.column) for result in results for d in result.dead_letters] == [
        ("invalid", "ts"), ("late", "ts")]


def test_l7_current_watermark_of_a_column_without_a_waterline_is_refused_at_it() -> None:
    line, column, message, fix = refused(ORDERS + "INSERT INTO fresh SELECT id, ts, "
                                         "CURRENT_WATERMARK(id) FROM orders;\n")
    assert (line, column) == (8, 52)
    assert message == ("CURRENT_WATERMARK(id): id is not a LATENESS column of the table this "
                       "view reads")
    assert fix.startswith("write CURRENT_WATERMARK(ts) in a view that reads the table")


def test_l7_to_timestamp_ltz_takes_seconds_or_milliseconds_of_an_integer() -> None:
    circuit = compile_program("flink.sql", ORDERS.replace("epoch_ms, 3", "epoch_ms, 0"))
    results = evaluate(circuit, [StepInput(rows={"orders": [{"id": 1, "epoch_ms": 7}]})])
    assert results[0].waterlines["orders"]["ts"] == 2_000
    _, _, message, _ = refused(ORDERS.replace("epoch_ms, 3", "epoch_ms, 6"))
    assert message == "TO_TIMESTAMP_LTZ's precision must be 0 (seconds) or 3 (milliseconds)"
