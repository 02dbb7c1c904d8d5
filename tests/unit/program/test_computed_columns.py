"""SPEC L1, L7, S10 in the compiler: Flink's computed columns in CREATE TABLE are refused.

A table has the columns its records carry (or their Kafka metadata), and time is event time
only: ``pt AS PROCTIME()`` is named as processing time, with the event-time forms as the fix;
any other ``c AS expr`` is named as a computed column, with the view that computes it as the
fix. Each error is at the column's name, with the expression as written.
"""

from __future__ import annotations

import pytest

from app.errors import ProgramError
from app.program.compile import compile_program


def rejected(columns: str) -> tuple[int, int, str, str]:
    """(line, column, message, fix) of the first error of a table with ``columns``."""
    text = ("CREATE TABLE t (\n"
            "    ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,\n"
            f"    {columns}\n"
            ") WITH ('topic' = 't');\n")
    with pytest.raises(ProgramError) as info:
        compile_program("p.sql", text)
    first = info.value.diagnostics[0]
    return first.position.line, first.position.column, first.message, first.fix or ""


@pytest.mark.parametrize("written", ["PROCTIME()", "NOW()", "CURRENT_TIMESTAMP",
                                     "CAST(PROCTIME() AS TIMESTAMP(3))"])
def test_l7_processing_time_column_is_refused_with_the_event_time_fix(written: str) -> None:
    line, column, message, fix = rejected(f"pt AS {written},\n    usr VARCHAR")
    assert (line, column) == (3, 5)
    assert message == (f"unsupported: processing-time column pt AS {written} (processing "
                       "time is not supported yet)")
    assert "ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND" in fix
    assert "the Kafka record's timestamp: ts TIMESTAMP NOT NULL METADATA FROM 'timestamp'" in fix


def test_l7_computed_column_is_refused_with_the_view_that_computes_it() -> None:
    line, column, message, fix = rejected(
        "price DECIMAL(10, 2) NOT NULL,\n    qty INT,\n"
        "    total AS CAST(price * qty AS DECIMAL(12, 2)), note VARCHAR")
    assert (line, column) == (5, 5)
    assert message == ("unsupported: computed column total AS CAST(price * qty AS DECIMAL(12, "
                       "2)) (a table has the columns its records carry)")
    assert fix == ("compute it in a view that reads the table: SELECT ..., CAST(price * qty AS "
                   "DECIMAL(12, 2)) AS total FROM ...")


def test_l7_computed_column_last_in_the_table() -> None:
    line, column, message, _ = rejected("doubled AS 2 * 2")
    assert (line, column) == (3, 5)
    assert message.startswith("unsupported: computed column doubled AS 2 * 2 ")
