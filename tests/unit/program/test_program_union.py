"""SPEC S17 and S10 in the compiler: UNION ALL's columns, types, time attributes and IR, and
how explain shows them (text and JSON)."""

from __future__ import annotations

import json

import pytest

from app.circuit.explain import explain_json, explain_text
from app.circuit.ir import Circuit, Project, UnionAll
from app.errors import ProgramError
from app.program.compile import compile_program

TABLES = """
CREATE TABLE a (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    k  BIGINT NOT NULL,
    x  BIGINT
) WITH ('topic' = 'a');
CREATE TABLE b (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '2' MINUTE,
    k  BIGINT,
    y  BIGINT NOT NULL
) WITH ('topic' = 'b');
CREATE TABLE plain (ts TIMESTAMP NOT NULL, k BIGINT NOT NULL) WITH ('topic' = 'plain');
"""


def compile_sql(text: str) -> Circuit:
    return compile_program("p.sql", TABLES + text)


def test_s17_columns_are_named_by_the_first_branch_and_nullable_if_any_is() -> None:
    circuit = compile_sql("""
        CREATE VIEW u WITH ('topic' = 'u') AS
        SELECT ts, k, x AS v FROM a WHERE x > 0
        UNION ALL SELECT ts AS t, k AS key, y FROM b;""")
    view = circuit.view("u")
    assert view.sources == ("a", "b")
    assert [(c.name, str(c.type)) for c in view.columns] == [
        ("ts", "TIMESTAMP NOT NULL"), ("k", "BIGINT"), ("v", "BIGINT")]
    assert view.is_stateless and view.state.kind == "none"
    assert view.output is not None and view.output.format == "append"
    (union,) = view.operators
    assert isinstance(union, UnionAll)
    assert [b.source for b in union.branches] == ["a", "b"]
    for branch in union.branches:
        project = branch.operators[-1]
        assert isinstance(project, Project)
        assert [name for name, _ in project.outputs] == ["ts", "k", "v"]
    with pytest.raises(ValueError, match="UNION ALL of a, b"):
        _ = view.source


def test_s10_time_attribute_needs_one_in_every_branch() -> None:
    circuit = compile_sql("""
        CREATE VIEW u WITH ('topic' = 'u') AS
        SELECT ts, k FROM a UNION ALL SELECT ts, k FROM plain;""")
    assert circuit.view("u").time_attributes == ()


def test_s10_window_end_in_every_branch_stays_window_end_window_start_does_not() -> None:
    circuit = compile_sql("""
        CREATE VIEW u WITH ('topic' = 'u') AS
        SELECT window_start, window_end, k
        FROM TABLE(TUMBLE(TABLE a, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
        UNION ALL
        SELECT window_start, window_end, k
        FROM TABLE(HOP(TABLE b, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '2' MINUTE));
        CREATE VIEW n WITH ('topic' = 'n') AS
        SELECT window_end, k, COUNT(*) AS c FROM u GROUP BY window_end, k
        EMIT AFTER WATERMARK;""")
    (attr,) = circuit.view("u").time_attributes
    assert (attr.column, attr.kind) == ("window_end", "window_end")
    assert [(m.table, m.source_column, m.kind) for m in attr.merged] == [
        ("a", "ts", "window_end"), ("b", "ts", "window_end")]
    assert circuit.view("n").state.kind == "window"
    assert "w(u.window_end) >= window_end" in circuit.view("n").state.description


def test_s17_explain_shows_the_union_its_branches_and_min_waterline() -> None:
    circuit = compile_sql("""
        CREATE LOCAL VIEW u AS
        SELECT ts, k FROM a WHERE k > 1 UNION ALL SELECT ts, k FROM b;
        CREATE VIEW n WITH ('topic' = 'n') AS
        SELECT window_end, COUNT(*) AS c
        FROM TABLE(TUMBLE(TABLE u, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
        GROUP BY window_end;""")
    text = explain_text(circuit)
    assert "view u <- a UNION ALL b (local)" in text
    assert "  1. UNION ALL of 2 branches (a, b): every branch's rows, in arrival order" in text
    assert "     branch 1 <- a: Filter (k > 1); Project ts, k" in text
    assert "     branch 2 <- b: Project ts, k" in text
    assert "ts (forwarded: UNION ALL: w = min(w(a.ts), w(b.ts)))" in text
    assert ("late rows of a are removed before any view sees them; late rows of b are "
            "removed before any view sees them") in text
    assert "a group is freed once w(u.ts) >= window_end" in text
    data = json.loads(json.dumps(explain_json(circuit)))
    union = data["views"][0]
    assert union["sources"] == ["a", "b"]
    assert [b["source"] for b in union["branches"]] == ["a", "b"]
    assert union["time_attributes"][0]["waterline"] == "min(w(a.ts), w(b.ts))"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # AFTER WATERMARK alone changes nothing (a warning); STREAM is no 'append'.
        ("CREATE VIEW u WITH ('topic' = 'u', 'format' = 'append') AS SELECT ts, k FROM a "
         "UNION ALL SELECT ts, k FROM b EMIT STREAM AFTER WATERMARK;",
         "EMIT STREAM writes a changelog, not 'append'"),
        ("CREATE LOCAL VIEW u AS SELECT ts, k FROM a UNION ALL SELECT ts, k FROM b;\n"
         "CREATE LOCAL VIEW w AS SELECT ts, k FROM u;\nLATENESS w.ts INTERVAL '1' MINUTE;",
         "LATENESS on view w, which reads the UNION ALL view u"),
        ("CREATE VIEW u AS SELECT ts, k FROM a UNION DISTINCT SELECT ts, k FROM b;",
         "unsupported: UNION DISTINCT without ALL"),
        ("CREATE VIEW u AS SELECT ts, k FROM a UNION ALL SELECT ts FROM b;",
         "branch 2 of the UNION ALL of view u has 1 columns, the first branch has 2"),
        ("CREATE VIEW u AS SELECT ts, k FROM a INTERSECT SELECT ts, k FROM b;",
         "unsupported: INTERSECT"),
        ("CREATE VIEW u WITH ('topic' = 'u', 'format' = 'upsert') AS "
         "SELECT ts, k FROM a UNION ALL SELECT ts, k FROM b;", "cannot be written as 'upsert'"),
    ],
)
def test_l7_union_errors_name_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ProgramError, match=message):
        compile_sql(text)
