"""SPEC L1, L2, L7, S5, S7 for Flink programs: computed columns, a WATERMARK on one,
CURRENT_WATERMARK and the dead-letter options of a Flink table (docs/porting-from-flink.md).

Flink's Kafka connector page declares event time derived from an epoch-millis field
(``ts AS TO_TIMESTAMP_LTZ(epoch_ms, 3)``, ``WATERMARK FOR ts AS ts - INTERVAL '5' SECOND``);
such a column is computed when its record is decoded, so the late gate, the dead letters and
the waterline see it.
"""

from __future__ import annotations

import pytest

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
