"""SPEC L1, L7, S10 in the compiler: Flink's computed columns in CREATE TABLE.

A table has the columns its records carry (or their Kafka metadata), and one computed column
form: ``pt AS PROCTIME()``, a processing-time attribute. Another processing-time expression
is named as such, with ``AS PROCTIME()`` as the fix; LATENESS on a PROCTIME column is refused
(it is never late); any other ``c AS expr`` is named as a computed column, with the view that
computes it as the fix. Each error is at the column's name (or the LATENESS), with the
expression as written.
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


@pytest.mark.parametrize("written", ["NOW()", "CURRENT_TIMESTAMP",
                                     "CAST(PROCTIME() AS TIMESTAMP(3))"])
def test_l7_other_processing_time_columns_are_refused_naming_proctime(written: str) -> None:
    line, column, message, fix = rejected(f"pt AS {written},\n    usr VARCHAR")
    assert (line, column) == (3, 5)
    assert message == (f"unsupported: processing-time column pt AS {written} (a table's "
                       "processing-time column is exactly pt AS PROCTIME())")
    assert fix.startswith("write pt AS PROCTIME()")


def test_s10_proctime_column_is_a_timestamp_time_attribute_outside_the_value_schema() -> None:
    circuit = compile_program("p.sql", "CREATE TABLE t (\n"
                              "    ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,\n"
                              "    pt AS PROCTIME(), usr VARCHAR\n"
                              ") WITH ('topic' = 't');\n"
                              "CREATE VIEW v WITH ('topic' = 'v') AS SELECT usr, pt FROM t;\n")
    table = circuit.table("t")
    assert [(c.name, str(c.type), c.processing_time) for c in table.columns] == [
        ("ts", "TIMESTAMP NOT NULL", False), ("pt", "TIMESTAMP NOT NULL", True),
        ("usr", "VARCHAR", False)]
    assert [f["name"] for f in table.avro_schema["fields"]] == ["ts", "usr"]
    assert [lt.column for lt in table.lateness] == ["ts"]
    assert [a.column for a in circuit.view("v").time_attributes] == ["pt"]


def test_l7_lateness_on_a_proctime_column_is_refused_with_the_fix() -> None:
    line, column, message, fix = rejected("pt AS PROCTIME() LATENESS INTERVAL '1' SECOND")
    assert (line, column) == (3, 22)
    assert message == ("LATENESS on processing-time column pt AS PROCTIME(): its value is the "
                       "batch time of the step its row arrives in, never late")
    assert fix.startswith("write pt AS PROCTIME() without LATENESS")


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
