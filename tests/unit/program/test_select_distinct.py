"""SPEC L3, L7, S11 in the compiler: SELECT DISTINCT is the GROUP BY of its selected columns.

``SELECT DISTINCT a, b FROM ...`` compiles to the circuit of ``SELECT a, b FROM ... GROUP BY
a, b`` (an Aggregate with no aggregate calls): the same operators, columns, time attributes,
state, emit and output, so the reference evaluator, the physical plan and the Spark runtime's
refusals are those of its twin. With a window key it is bounded and may be EMIT AFTER
WATERMARK; without one it has the twin's unbounded-state warning, at DISTINCT. DISTINCT over
a GROUP BY or aggregates, DISTINCT ON, and DISTINCT in a join view are refused.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_ctes_and_subqueries import plain

from app.circuit.ir import Aggregate, Circuit
from app.circuit.reference import StepInput, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.physical import explain_physical_text, physical_plan
from app.runtime.planner.support import refused_by_spark

CLICKS = """
CREATE TABLE clicks (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    usr  VARCHAR   NOT NULL,
    page VARCHAR   NOT NULL
) WITH ('topic' = 'clicks');
"""

MINUTE_MS = 60_000
ROOT = Path(__file__).resolve().parents[3]


def compile_sql(text: str) -> Circuit:
    return compile_program("p.sql", CLICKS + text)


def rejected(text: str) -> tuple[int, int, str, str]:
    """(line, column, message, fix) of the first error; lines count from the view's text."""
    with pytest.raises(ProgramError) as info:
        compile_sql(text)
    first = info.value.diagnostics[0]
    return (first.position.line - CLICKS.count("\n"), first.position.column, first.message,
            first.fix or "")


def assert_twins(distinct: Circuit, group_by: Circuit) -> None:
    """The same circuit up to positions, hence the same physical plan and Spark refusals."""
    assert plain(distinct.views, {}) == plain(group_by.views, {})
    plan, twin_plan = physical_plan(distinct), physical_plan(group_by)
    assert plain(plan, {}) == plain(twin_plan, {})
    assert refused_by_spark(distinct, plan) == refused_by_spark(group_by, twin_plan)
    assert explain_physical_text(plan) == explain_physical_text(twin_plan)


def _doc_example() -> str:
    """docs/language.md's SELECT DISTINCT example: the table ``clicks`` and view ``visitors``."""
    doc = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
    section = doc[doc.index("### SELECT DISTINCT"):doc.index("### WITH and subqueries in FROM")]
    example = re.search(r"```sql\n(CREATE TABLE clicks.*?)```", section, re.S)
    assert example is not None
    assert example[1].startswith(CLICKS.lstrip())
    return example[1]


def test_l3_select_distinct_over_a_window_is_its_group_by_twin() -> None:
    """The example of docs/language.md, and its GROUP BY twin."""
    example = _doc_example()
    distinct = compile_program("p.sql", example)
    twin = example.replace("SELECT DISTINCT window_start", "SELECT window_start").replace(
        "EMIT AFTER WATERMARK", "GROUP BY window_start, window_end, usr\nEMIT AFTER WATERMARK")
    assert twin != example
    group_by = compile_program("p.sql", twin)
    assert_twins(distinct, group_by)
    view = distinct.view("visitors")
    aggregate = next(op for op in view.operators if isinstance(op, Aggregate))
    assert [name for name, _ in aggregate.keys] == ["window_start", "window_end", "usr"]
    assert aggregate.aggregates == ()
    assert view.state.kind == "window" and view.emit.after_watermark
    assert view.key == ("window_start", "window_end", "usr")
    assert distinct.warnings == ()
    assert refused_by_spark(distinct, physical_plan(distinct)) == ()


def test_s11_select_distinct_writes_each_window_and_user_once_when_final() -> None:
    """Reference evaluator: duplicates within a window are one row, written in the step
    whose waterline passes the window's end, and its group is freed then (S11, S12)."""
    circuit = compile_program("p.sql", _doc_example())

    def click(second: int, usr: str) -> dict[str, object]:
        return {"ts": second * 1000, "usr": usr, "page": "home"}

    steps = [
        StepInput({"clicks": [click(5, "ann"), click(10, "ann"), click(20, "bob")]}),
        StepInput({"clicks": [click(30, "ann"), click(65, "cid")]}),
        StepInput({"clicks": [click(70, "cid"), click(125, "ann")]}),
    ]
    results = evaluate(circuit, steps)
    written = [[(r.value["window_start"], r.value["usr"]) for r in res.outputs["visitors"]]
               for res in results]
    assert written == [[], [(0, "ann"), (0, "bob")], [(MINUTE_MS, "cid")]]
    assert [res.state_rows["visitors"] for res in results] == [2, 1, 1]


def test_l3_select_distinct_star_is_the_group_by_of_every_column() -> None:
    distinct = compile_sql("""
        CREATE VIEW pages WITH ('topic' = 'pages') AS
        SELECT DISTINCT * FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
        EMIT AFTER WATERMARK;""")
    group_by = compile_sql("""
        CREATE VIEW pages WITH ('topic' = 'pages') AS
        SELECT * FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
        GROUP BY ts, usr, page, window_start, window_end
        EMIT AFTER WATERMARK;""")
    assert_twins(distinct, group_by)
    assert [c.name for c in distinct.view("pages").columns] == [
        "ts", "usr", "page", "window_start", "window_end"]


def test_l3_select_distinct_of_expressions_groups_by_the_expressions() -> None:
    distinct = compile_sql("""
        CREATE VIEW users WITH ('topic' = 'users') AS
        SELECT DISTINCT window_end, UPPER(usr) AS usr FROM
        TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) WHERE page <> 'home';""")
    group_by = compile_sql("""
        CREATE VIEW users WITH ('topic' = 'users') AS
        SELECT window_end, UPPER(usr) AS usr FROM
        TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) WHERE page <> 'home'
        GROUP BY window_end, UPPER(usr);""")
    assert_twins(distinct, group_by)
    assert distinct.view("users").state.kind == "window"


def test_l7_select_distinct_without_a_window_warns_of_unbounded_state() -> None:
    distinct = compile_sql("""
CREATE VIEW users WITH ('topic' = 'users') AS
SELECT DISTINCT usr, page FROM clicks;""")
    group_by = compile_sql("""
CREATE VIEW users WITH ('topic' = 'users') AS
SELECT usr, page FROM clicks GROUP BY usr, page;""")
    assert plain(distinct.views, {}) == plain(group_by.views, {})
    assert distinct.view("users").state.kind == "unbounded"
    (warning,) = distinct.warnings
    assert warning.severity == "warning"
    assert (warning.position.line - CLICKS.count("\n"), warning.position.column) == (3, 8)
    assert warning.message == ("view users keeps unbounded state: no column of its SELECT "
                               "DISTINCT is a time attribute, so its groups are never freed")
    assert warning.fix is not None and warning.fix.startswith(
        "select window_start, window_end of a TUMBLE or HOP on a LATENESS column")


def test_l7_select_distinct_without_a_window_cannot_emit_after_watermark() -> None:
    line, column, message, fix = rejected("""
CREATE VIEW users WITH ('topic' = 'users') AS
SELECT DISTINCT usr FROM clicks EMIT AFTER WATERMARK;""")
    assert (line, column) == (3, 33)
    assert message.startswith("EMIT AFTER WATERMARK on view users needs a GROUP BY key that "
                              "is window_end or window_start")


def test_s18_distinct_windowed_subquery_is_read_final() -> None:
    """A DISTINCT subquery keyed by its window is a windowed aggregate: read once final."""
    circuit = compile_sql("""
        CREATE VIEW per_minute WITH ('topic' = 'per_minute') AS
        SELECT minute_end, COUNT(*) AS users
        FROM (SELECT DISTINCT window_end AS minute_end, usr
              FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))) AS d
        GROUP BY minute_end;""")
    generated = circuit.view("per_minute.d")
    assert generated.emit.after_watermark and generated.state.kind == "window"


@pytest.mark.parametrize(("query", "where", "message", "fix"), [
    ("SELECT DISTINCT usr, COUNT(*) AS n FROM clicks GROUP BY usr", (3, 8),
     "unsupported: SELECT DISTINCT with GROUP BY or aggregates",
     "remove DISTINCT: a GROUP BY writes one row per group; to count distinct values, use "
     "COUNT(DISTINCT x)"),
    ("SELECT DISTINCT COUNT(*) AS n FROM clicks", (3, 8),
     "unsupported: SELECT DISTINCT with GROUP BY or aggregates", "remove DISTINCT"),
    ("SELECT DISTINCT ON (usr) usr, page FROM clicks", (3, 8),
     "unsupported: SELECT DISTINCT ON", "GROUP BY the ON columns and aggregate the others"),
    ("SELECT DISTINCT usr FROM clicks HAVING usr <> 'x'", (3, 33),
     "HAVING without GROUP BY or aggregates", "use WHERE"),
])
def test_l7_select_distinct_refused_forms(query: str, where: tuple[int, int], message: str,
                                          fix: str) -> None:
    line, column, found, found_fix = rejected(
        f"\nCREATE VIEW v WITH ('topic' = 'v') AS\n{query};")
    assert (line, column) == where
    assert found.startswith(message)
    assert fix in found_fix
