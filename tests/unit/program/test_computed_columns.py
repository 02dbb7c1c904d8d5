"""SPEC L1, L7, S10 in the compiler: Flink's computed columns in CREATE TABLE.

A table has the columns its records carry (or their Kafka metadata), a processing-time
attribute ``pt AS PROCTIME()``, and computed columns ``c AS expr`` of the others, computed
when a record is decoded. Another processing-time expression is named as such, with ``AS
PROCTIME()`` as the fix; LATENESS on a PROCTIME column is refused (it is never late). A
computed column's errors are at its expression.
"""

from __future__ import annotations

import pytest

from app.circuit.explain import explain_text
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


def test_l1_computed_column_takes_its_expressions_type_and_is_no_value_field() -> None:
    circuit = compile_program("p.sql", "CREATE TABLE t (\n"
                              "    ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,\n"
                              "    price DECIMAL(10, 2) NOT NULL, qty INT,\n"
                              "    total AS CAST(price * qty AS DECIMAL(12, 2)), note VARCHAR\n"
                              ") WITH ('topic' = 't');\n")
    table = circuit.table("t")
    total = table.column("total")
    assert str(total.type) == "DECIMAL(12, 2)"
    assert total.computed is not None
    assert total.computed.written == "CAST(price * qty AS DECIMAL(12, 2))"
    assert [f["name"] for f in table.avro_schema["fields"]] == ["ts", "price", "qty", "note"]
    assert "total DECIMAL(12, 2) AS CAST(price * qty AS DECIMAL(12, 2))" in explain_text(circuit)


def test_l2_lateness_on_a_computed_column_makes_it_a_not_null_time_attribute() -> None:
    circuit = compile_program("p.sql", "CREATE TABLE t (\n    epoch_ms BIGINT,\n"
                              "    ts AS TIMESTAMP_MILLIS(epoch_ms) LATENESS INTERVAL '5' SECOND\n"
                              ") WITH ('topic' = 't');\n"
                              "CREATE VIEW v WITH ('topic' = 'v') AS SELECT ts FROM t;\n")
    table = circuit.table("t")
    assert str(table.column("ts").type) == "TIMESTAMP NOT NULL"
    assert [(lt.column, lt.amount) for lt in table.lateness] == [("ts", 5000)]
    assert [a.column for a in circuit.view("v").time_attributes] == ["ts"]


@pytest.mark.parametrize(("columns", "at", "message", "fix"), [
    ("doubled AS 2 * nothing", (3, 20), "unknown column nothing", "available columns: ts"),
    ("a INT, b AS a + 1, c AS b * 2", (3, 29), "unknown column b", "available columns: ts, a"),
    ("n VARCHAR, big AS n LATENESS INTERVAL '1' SECOND", (3, 25),
     "LATENESS on t.big, a VARCHAR column", ""),
    ("pt AS NOW()", (3, 5), "unsupported: processing-time column pt AS NOW()", "write pt AS"),
])
def test_l7_computed_column_errors_are_at_the_expression(
        columns: str, at: tuple[int, int], message: str, fix: str) -> None:
    line, column, got, got_fix = rejected(columns)
    assert (line, column) == at
    assert got.startswith(message)
    assert got_fix.startswith(fix)
