"""SPEC S16, L4, L7 in the compiler: Flink's window join, a window function as a side of a JOIN.

``FROM TABLE(TUMBLE(TABLE a, ...)) AS l JOIN TABLE(TUMBLE(TABLE b, ...)) AS r ON
l.window_start = r.window_start AND l.window_end = r.window_end AND ...`` is the join of the
subqueries ``(SELECT * FROM TABLE(TUMBLE(...)))`` of the same names: each side a generated
local view ``<view>.<alias>``, so the circuit, the physical plan and what runs on Spark are
those of the program that windows each side in a LOCAL view (tests/e2e/test_window_join.py).
"""

from __future__ import annotations

import pytest
from test_ctes_and_subqueries import assert_same_circuit, plain

from app.circuit.ir import Circuit
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.physical import explain_physical_text, physical_plan
from app.runtime.planner.support import refused_by_spark

TABLES = """
CREATE TABLE clicks (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    usr  VARCHAR   NOT NULL,
    page VARCHAR   NOT NULL
) WITH ('topic' = 'clicks');

CREATE TABLE orders (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    usr    VARCHAR   NOT NULL,
    amount INT       NOT NULL
) WITH ('topic' = 'orders');
"""

SELECT = """
CREATE VIEW clicked_and_ordered WITH ('topic' = 'out', 'format' = 'append') AS
SELECT c.window_start, c.window_end, c.usr, c.page, o.amount
"""

ON = "  ON c.window_start = o.window_start AND c.window_end = o.window_end AND c.usr = o.usr;\n"
CLICK_MINUTES = "TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))"
ORDER_MINUTES = "TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' MINUTE))"


def window_join(left: str, right: str) -> str:
    """The view joining ``left`` AS c with ``right`` (its alias included) on their windows."""
    return SELECT + f"FROM {left} AS c\nJOIN {right}\n" + ON


WINDOW_FUNCTIONS = window_join(CLICK_MINUTES, f"{ORDER_MINUTES} AS o")
SUBQUERIES = window_join(f"(SELECT * FROM {CLICK_MINUTES})",
                         f"(SELECT * FROM {ORDER_MINUTES}) AS o")

EXPLICIT = """
CREATE LOCAL VIEW click_minutes AS
SELECT * FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE));

CREATE LOCAL VIEW order_minutes AS
SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' MINUTE));
""" + SELECT + "FROM click_minutes AS c JOIN order_minutes AS o\n" + ON

NAMES = {"click_minutes": "clicked_and_ordered.c", "order_minutes": "clicked_and_ordered.o"}


def compile_sql(text: str) -> Circuit:
    return compile_program("p.sql", TABLES + text)


def rejected(text: str) -> tuple[int, int, str, str]:
    """(line, column, message, fix) of the first error; lines count from the view's text."""
    with pytest.raises(ProgramError) as info:
        compile_sql(text)
    first = info.value.diagnostics[0]
    return (first.position.line - TABLES.count("\n"), first.position.column, first.message,
            first.fix or "")


def test_s16_window_functions_as_join_sides_are_windowed_local_views() -> None:
    inlined = compile_sql(WINDOW_FUNCTIONS)
    explicit = compile_sql(EXPLICIT)
    assert [v.name for v in inlined.views] == [
        "clicked_and_ordered.c", "clicked_and_ordered.o", "clicked_and_ordered"]
    assert_same_circuit(inlined, explicit, NAMES)
    assert plain(inlined.views, {}) == plain(compile_sql(SUBQUERIES).views, {})
    join = inlined.view("clicked_and_ordered").join
    assert join is not None and (join.form, join.kind) == ("window", "inner")
    assert (join.left.alias, join.right.alias) == ("c", "o")
    assert [a.column for a in inlined.view("clicked_and_ordered").time_attributes] == [
        "window_start", "window_end"]
    assert inlined.warnings == ()


def test_s16_window_join_of_window_functions_runs_on_spark_as_its_explicit_form() -> None:
    inlined, explicit = compile_sql(WINDOW_FUNCTIONS), compile_sql(EXPLICIT)
    plan, explicit_plan = physical_plan(inlined), physical_plan(explicit)
    # The placement's source is the text "<left> JOIN <right>".
    joined = {"click_minutes JOIN order_minutes":
              "clicked_and_ordered.c JOIN clicked_and_ordered.o"}
    assert plain(plan, {}) == plain(explicit_plan, NAMES | joined)
    assert refused_by_spark(inlined, plan) == ()
    text = explain_physical_text(explicit_plan)
    for explicit_name, generated in NAMES.items():
        text = text.replace(explicit_name, generated)
    assert explain_physical_text(plan) == text


def test_s16_window_function_sides_without_table_and_with_hop() -> None:
    """Calcite's form without the outer TABLE(...), a bare alias, and HOP on one side."""
    circuit = compile_sql(SELECT + (
        "FROM TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '2' MINUTE) c\n"
        "JOIN TABLE(HOP(TABLE orders, DESCRIPTOR(ts),\n"
        "               INTERVAL '1' MINUTE, INTERVAL '2' MINUTE)) o\n"
    ) + ON)
    assert [v.sources for v in circuit.views] == [
        ("clicks",), ("orders",), ("clicked_and_ordered.c", "clicked_and_ordered.o")]
    assert [op.kind for v in circuit.views[:2] for op in v.operators[:1]] == ["TUMBLE", "HOP"]


def test_s16_window_function_joined_with_a_table_is_an_interval_join() -> None:
    """One window function side: as with its subquery, a bound on the window's end."""
    circuit = compile_sql("""
CREATE VIEW ordered_after WITH ('topic' = 'out') AS
SELECT c.window_end, c.usr, o.amount
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) AS c
JOIN orders AS o
  ON c.usr = o.usr AND o.ts >= c.window_end - INTERVAL '1' MINUTE AND o.ts < c.window_end;""")
    join = circuit.view("ordered_after").join
    assert join is not None and join.form == "interval"
    assert (join.left.source, join.right.source) == ("ordered_after.c", "orders")


def test_l7_window_function_side_errors_point_into_the_function() -> None:
    line, column, message, fix = rejected(window_join(
        CLICK_MINUTES.replace("(ts)", "(nope)"), f"{ORDER_MINUTES} AS o"))
    assert (line, column, message) == (4, 44, "unknown column nope in clicks")
    assert fix == "available columns: ts, usr, page"


def test_l7_session_window_as_a_join_side_is_refused_with_its_fix() -> None:
    line, column, message, fix = rejected(window_join(
        CLICK_MINUTES.replace("TUMBLE", "SESSION"), f"{ORDER_MINUTES} AS o"))
    assert (line, column) == (4, 12)
    assert message.startswith("a SESSION window is known only once it closes")
    assert fix.startswith("aggregate the sessions in a view")


def test_l7_window_function_side_without_a_name_is_refused() -> None:
    line, column, message, fix = rejected(window_join(CLICK_MINUTES, ORDER_MINUTES))
    assert (line, column) == (5, 6)
    assert message == "a window function as a side of a JOIN needs a name"
    assert fix.startswith("add an alias after it: JOIN TABLE(TUMBLE(")


def test_l7_window_function_side_with_a_column_list_is_refused() -> None:
    line, column, message, _ = rejected(window_join(
        CLICK_MINUTES, f"{ORDER_MINUTES} AS o").replace(" AS c\n", " AS c (a, b, c, d, e)\n"))
    assert (line, column) == (4, 76)
    assert message == "unsupported: a column list after window function c"


def test_l4_a_window_function_in_from_without_a_join_stays_the_views_own_window() -> None:
    circuit = compile_sql("""
CREATE VIEW per_minute WITH ('topic' = 'out') AS
SELECT window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) AS c
GROUP BY window_end;""")
    assert [v.name for v in circuit.views] == ["per_minute"]
