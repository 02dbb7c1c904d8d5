"""SPEC L3, S18 and L7 in the compiler: WITH queries and subqueries in FROM are local views.

Each WITH query and each subquery in FROM becomes a local view named ``<view>.<name>``, placed
just before the view that reads it: the circuit of a program written with them equals the
circuit of the same program written with explicit LOCAL views (operators, columns, time
attributes, emit and state), up to the views' names. A WITH name is seen by its view's query
only; errors keep the file's line and column; scalar subqueries stay refused, with the JOIN
form as the fix.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest

from app.circuit.ir import Circuit, EmitPolicy, Join, Position, UnionAll, Window
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.physical import explain_physical_text, physical_plan
from app.runtime.planner.support import refused_by_spark

ROOT = Path(__file__).resolve().parents[3]

BID = """
CREATE TABLE bid (
    bidtime TIMESTAMP NOT NULL LATENESS INTERVAL '4' MINUTE,
    price   BIGINT    NOT NULL,
    item    VARCHAR   NOT NULL
) WITH ('topic' = 'bids');
"""


def compile_sql(text: str) -> Circuit:
    return compile_program("p.sql", BID + text)


def rejected(text: str) -> tuple[int, int, str, str]:
    """(line, column, message, fix) of the first error; lines count from the view's text."""
    with pytest.raises(ProgramError) as info:
        compile_sql(text)
    first = info.value.diagnostics[0]
    offset = BID.count("\n")
    return first.position.line - offset, first.position.column, first.message, first.fix or ""


def plain(value: Any, names: dict[str, str]) -> Any:
    """A comparable form of IR values: positions left out (where a statement is written
    changes no plan), every string that is a renamed relation given its other name."""
    if is_dataclass(value) and not isinstance(value, type):
        return {"node": type(value).__name__} | {
            f.name: plain(getattr(value, f.name), names) for f in fields(value)
            if not isinstance(getattr(value, f.name), Position)}
    if isinstance(value, tuple | list):
        return [plain(v, names) for v in value]
    if isinstance(value, dict):
        return {plain(k, names): plain(v, names) for k, v in value.items()}
    if isinstance(value, str):
        return names.get(value, value)
    return value


def assert_same_circuit(inlined: Circuit, explicit: Circuit, names: dict[str, str]) -> None:
    """The two circuits have the same views in the same order (``names`` maps the explicit
    local views' names to the generated ones) and the same warnings' texts."""
    assert [v.name for v in inlined.views] == [names.get(v.name, v.name)
                                               for v in explicit.views]
    for mine, theirs in zip(inlined.views, explicit.views, strict=True):
        assert plain(mine, {}) == plain(theirs, names), mine.name
    assert [w.message for w in inlined.warnings] == [
        plain(w.message, names) for w in explicit.warnings]


# -- the inlined circuit is the explicit one -----------------------------------------------

Q7_WITH = """
CREATE VIEW q7 WITH ('topic' = 'q7', 'format' = 'append') AS
WITH max_price AS (
    SELECT window_end AS wend, MAX(price) AS maxprice
    FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE))
    GROUP BY window_start, window_end
)
SELECT m.wend - INTERVAL '10' MINUTE AS wstart, m.wend AS wend, b.bidtime AS bidtime,
       b.price AS price, b.item AS item
FROM bid AS b
JOIN max_price AS m
  ON b.price = m.maxprice
 AND b.bidtime >= m.wend - INTERVAL '10' MINUTE AND b.bidtime < m.wend;
"""

Q7_SUBQUERY = """
CREATE VIEW q7 WITH ('topic' = 'q7', 'format' = 'append') AS
SELECT m.wend - INTERVAL '10' MINUTE AS wstart, m.wend AS wend, b.bidtime AS bidtime,
       b.price AS price, b.item AS item
FROM bid AS b
JOIN (
    SELECT window_end AS wend, MAX(price) AS maxprice
    FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE))
    GROUP BY window_start, window_end
) AS m
  ON b.price = m.maxprice
 AND b.bidtime >= m.wend - INTERVAL '10' MINUTE AND b.bidtime < m.wend;
"""

Q7_EXPLICIT = """
CREATE LOCAL VIEW max_price AS
SELECT window_end AS wend, MAX(price) AS maxprice
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;

CREATE VIEW q7 WITH ('topic' = 'q7', 'format' = 'append') AS
SELECT m.wend - INTERVAL '10' MINUTE AS wstart, m.wend AS wend, b.bidtime AS bidtime,
       b.price AS price, b.item AS item
FROM bid AS b
JOIN max_price AS m
  ON b.price = m.maxprice
 AND b.bidtime >= m.wend - INTERVAL '10' MINUTE AND b.bidtime < m.wend;
"""


def test_s18_with_query_is_the_local_view_written_by_hand() -> None:
    """NEXMark Q7's join form (pipelines/nexmark_q7.sql) with its per-window maximum as a WITH
    query: the same two views, the generated one named ``q7.max_price``, before q7."""
    inlined = compile_sql(Q7_WITH)
    assert_same_circuit(inlined, compile_sql(Q7_EXPLICIT), {"max_price": "q7.max_price"})
    generated = inlined.view("q7.max_price")
    assert generated.output is None
    assert generated.emit == EmitPolicy(after_watermark=True)
    assert [(a.column, a.kind) for a in generated.time_attributes] == [("wend", "window_end")]
    join = inlined.view("q7").join
    assert join is not None and join.right.source == "q7.max_price"
    assert join.right.alias == "m"


def test_s16_subquery_as_a_join_side_is_the_local_view_written_by_hand() -> None:
    inlined = compile_sql(Q7_SUBQUERY)
    assert_same_circuit(inlined, compile_sql(Q7_EXPLICIT), {"max_price": "q7.m"})


def test_s18_with_chain_reads_earlier_with_queries() -> None:
    """A WITH query reads the ones before it; each is its own local view, in WITH order."""
    inlined = compile_sql("""
        CREATE VIEW big WITH ('topic' = 'big') AS
        WITH priced AS (SELECT bidtime AS t, price * 2 AS doubled, item FROM bid),
             large AS (SELECT t, doubled FROM priced WHERE doubled > 100)
        SELECT t, doubled FROM large;""")
    explicit = compile_sql("""
        CREATE LOCAL VIEW priced AS SELECT bidtime AS t, price * 2 AS doubled, item FROM bid;
        CREATE LOCAL VIEW large AS SELECT t, doubled FROM priced WHERE doubled > 100;
        CREATE VIEW big WITH ('topic' = 'big') AS SELECT t, doubled FROM large;""")
    assert_same_circuit(inlined, explicit, {"priced": "big.priced", "large": "big.large"})
    time = inlined.view("big").time_attributes
    assert [(a.column, a.table, a.source_column) for a in time] == [("t", "bid", "bidtime")]


def test_s18_nested_with_and_subqueries_are_named_by_their_path() -> None:
    circuit = compile_sql("""
        CREATE VIEW n WITH ('topic' = 'n') AS
        WITH a AS (SELECT * FROM (SELECT bidtime, price FROM bid) AS x),
             b AS (WITH z AS (SELECT * FROM a) SELECT * FROM z)
        SELECT * FROM b;""")
    assert [v.name for v in circuit.views] == ["n.a.x", "n.a", "n.b.z", "n.b", "n"]
    assert [v.sources for v in circuit.views] == [
        ("bid",), ("n.a.x",), ("n.a",), ("n.b.z",), ("n.b",)]


def test_s10_windowed_aggregate_in_a_with_query_is_a_cascade() -> None:
    """pipelines/click_rollups.sql with its minutes as a WITH query of per_hour: the same
    circuit, the minutes' window end a time attribute of the WITH query (S10), each window
    read once final (S18), and on Spark the same physical plan as the shipped program."""
    shipped = (ROOT / "pipelines" / "click_rollups.sql").read_text(encoding="utf-8")
    start = shipped.index("-- Clicks per user and minute")
    end = shipped.index("-- Clicks per user and hour")
    with_form = shipped[:start] + shipped[end:].replace(
        "SELECT window_end AS hour_end, user_id, SUM(clicks) AS clicks\n",
        "WITH per_minute AS (\n"
        "    SELECT window_end AS minute_end, user_id, COUNT(*) AS clicks\n"
        "    FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))\n"
        "    GROUP BY window_start, window_end, user_id\n"
        ")\n"
        "SELECT window_end AS hour_end, user_id, SUM(clicks) AS clicks\n", 1)
    assert "WITH per_minute AS" in with_form
    inlined = compile_program("click_rollups.sql", with_form)
    explicit = compile_program("click_rollups.sql", shipped)
    names = {"per_minute": "per_hour.per_minute"}
    assert_same_circuit(inlined, explicit, names)
    minutes = inlined.view("per_hour.per_minute")
    assert minutes.emit.after_watermark and minutes.state.kind == "window"
    assert isinstance(inlined.view("per_hour").operators[0], Window)

    plan, explicit_plan = physical_plan(inlined), physical_plan(explicit)
    assert plain(plan, {}) == plain(explicit_plan, names)
    assert refused_by_spark(inlined, plan) == ()
    assert explain_physical_text(plan) == explain_physical_text(explicit_plan).replace(
        "per_minute", "per_hour.per_minute")


def test_s17_subqueries_in_union_all_branches_and_a_union_in_a_with_query() -> None:
    circuit = compile_sql("""
        CREATE VIEW u WITH ('topic' = 'u') AS
        WITH cheap AS (SELECT bidtime, item FROM bid WHERE price < 5)
        SELECT bidtime, item FROM cheap
        UNION ALL
        SELECT s.bidtime, s.item FROM (SELECT bidtime, item FROM bid WHERE price > 100) AS s;

        CREATE VIEW per_minute WITH ('topic' = 'per_minute') AS
        WITH both_ AS (SELECT bidtime, item FROM bid UNION ALL SELECT bidtime, item FROM bid)
        SELECT window_end, COUNT(*) AS n
        FROM TABLE(TUMBLE(TABLE both_, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE))
        GROUP BY window_end EMIT AFTER WATERMARK;""")
    union = circuit.view("u")
    assert union.sources == ("u.cheap", "u.s")
    assert isinstance(union.operators[0], UnionAll)
    assert [a.column for a in union.time_attributes] == ["bidtime"]
    assert circuit.view("per_minute").sources == ("per_minute.both_",)
    assert circuit.view("per_minute").state.kind == "window"


def test_s16_windowed_subqueries_on_both_sides_form_a_window_join() -> None:
    circuit = compile_program("p.sql", BID + """
        CREATE TABLE ask (
            asktime TIMESTAMP NOT NULL LATENESS INTERVAL '4' MINUTE,
            price   BIGINT    NOT NULL,
            item    VARCHAR   NOT NULL
        ) WITH ('topic' = 'asks');
        CREATE VIEW spread WITH ('topic' = 'spread') AS
        SELECT b.window_end, b.item, b.price AS bid_price, a.price AS ask_price
        FROM (SELECT * FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime),
                                         INTERVAL '1' MINUTE))) AS b
        JOIN (SELECT * FROM TABLE(TUMBLE(TABLE ask, DESCRIPTOR(asktime),
                                         INTERVAL '1' MINUTE))) AS a
          ON b.item = a.item AND b.window_start = a.window_start
         AND b.window_end = a.window_end;""")
    join = circuit.view("spread").join
    assert join is not None and join.form == "window"
    assert (join.left.source, join.right.source) == ("spread.b", "spread.a")
    assert [a.column for a in circuit.view("spread").time_attributes] == ["window_end"]
    assert refused_by_spark(circuit, physical_plan(circuit)) == ()


def test_l3_subquery_without_alias_is_named_by_its_place() -> None:
    circuit = compile_sql("CREATE VIEW v WITH ('topic' = 'v') AS "
                          "SELECT price FROM (SELECT price FROM bid WHERE price > 1);")
    assert [v.name for v in circuit.views] == ["v.subquery1", "v"]


# -- scoping ---------------------------------------------------------------------------------

def test_l3_with_names_are_seen_by_their_view_only() -> None:
    """Two views may each have a WITH query ``w``; each reads its own."""
    circuit = compile_sql("""
        CREATE VIEW a WITH ('topic' = 'a') AS
        WITH w AS (SELECT item FROM bid WHERE price > 10) SELECT item FROM w;
        CREATE VIEW b WITH ('topic' = 'b') AS
        WITH w AS (SELECT price FROM bid) SELECT price FROM w;""")
    assert [v.name for v in circuit.views] == ["a.w", "a", "b.w", "b"]
    assert circuit.view("a").sources == ("a.w",)
    assert circuit.view("b").sources == ("b.w",)
    assert [c.name for c in circuit.view("b").columns] == ["price"]


def test_l7_another_views_with_query_is_not_visible() -> None:
    line, column, message, fix = rejected("""
CREATE VIEW a AS WITH w AS (SELECT item FROM bid) SELECT item FROM w;
CREATE VIEW b AS SELECT item FROM w;""")
    assert (line, column, message) == (3, 35, "unknown table or view w")
    assert "w is a WITH query of view a" in fix and "CREATE LOCAL VIEW w" in fix
    line, column, message, _ = rejected("""
CREATE VIEW a AS WITH w AS (SELECT item FROM bid) SELECT item FROM w;
CREATE VIEW b AS SELECT item FROM "a.w";""")
    assert (line, column, message) == (3, 35, "unknown table or view a.w")


def test_l3_with_query_shadows_a_table_of_the_same_name() -> None:
    circuit = compile_sql("CREATE VIEW v WITH ('topic' = 'v') AS "
                          "WITH bid AS (SELECT item FROM bid) SELECT item FROM bid;")
    assert circuit.view("v.bid").sources == ("bid",)
    assert circuit.view("v").sources == ("v.bid",)


def test_l3_generated_names_never_meet_user_names() -> None:
    """A '.' is reserved for generated names; a WITH query and a subquery of one name get
    two views."""
    line, column, message, _ = rejected('\nCREATE VIEW "v.w" AS SELECT item FROM bid;')
    assert (line, column) == (2, 13) and "names containing a . are reserved" in message
    circuit = compile_sql("CREATE VIEW c WITH ('topic' = 'c') AS WITH s AS (SELECT * FROM bid) "
                          "SELECT * FROM (SELECT * FROM s) AS s;")
    assert [v.name for v in circuit.views] == ["c.s", "c.s#2", "c"]
    assert circuit.view("c.s#2").sources == ("c.s",)


def test_l7_unused_with_query_is_compiled_warned_about_and_not_computed() -> None:
    circuit = compile_sql("""
CREATE VIEW v WITH ('topic' = 'v') AS
WITH unused AS (SELECT a.item FROM bid AS a JOIN bid AS b ON a.item = b.item
                WHERE a.price > 1),
     used AS (SELECT item FROM bid)
SELECT item FROM used;""")
    assert [v.name for v in circuit.views] == ["v.used", "v"]
    (warning,) = circuit.warnings
    assert (warning.position.line - BID.count("\n"), warning.position.column) == (3, 6)
    assert warning.message == "WITH query unused of view v is never read, so it is not computed"
    line, column, message, _ = rejected("""
CREATE VIEW v AS
WITH unused AS (SELECT nope FROM bid)
SELECT item FROM bid;""")
    assert (line, column, message) == (3, 24, "unknown column nope")


# -- errors (L7) ----------------------------------------------------------------------------

@pytest.mark.parametrize(("sql", "where", "message", "fix"), [
    ("CREATE VIEW v AS WITH w AS (\n  SELECT nope FROM bid)\nSELECT * FROM w;",
     (3, 10), "unknown column nope", "available columns: bidtime, price, item"),
    ("CREATE VIEW v AS SELECT * FROM (SELECT bidtime\n  FROM bidz) AS s;",
     (3, 8), "unknown table or view bidz", "did you mean bid?"),
    ("CREATE VIEW v AS WITH a AS (SELECT * FROM b), b AS (SELECT * FROM bid)\n"
     "SELECT * FROM a;", (2, 43), "unknown table or view b",
     "WITH query b is defined after a: move it before a"),
    ("CREATE VIEW v AS WITH a AS (SELECT * FROM a) SELECT * FROM a;",
     (2, 43), "unknown table or view a", "cannot read itself"),
    ("CREATE VIEW v AS WITH a AS (SELECT * FROM bid), a AS (SELECT * FROM bid)\n"
     "SELECT * FROM a;", (2, 49), "duplicate WITH query name a", "rename one of them"),
    ("CREATE VIEW v AS WITH a AS (SELECT * FROM bid EMIT AFTER WATERMARK) SELECT * FROM a;",
     (2, 47), "EMIT in WITH query a: EMIT belongs to the view's own query",
     "as EMIT AFTER WATERMARK"),
    ("CREATE VIEW v AS SELECT * FROM (SELECT * FROM bid EMIT STREAM) AS s;",
     (2, 51), "EMIT in a subquery", "put EMIT after the view's query"),
    ("CREATE VIEW v AS WITH a AS (SELECT * FROM bid LATENESS x) SELECT * FROM a;",
     (2, 47), "LATENESS in WITH query a", "LATENESS view.column"),
    ("CREATE VIEW v AS WITH a WITH ('topic' = 'a') AS (SELECT * FROM bid) SELECT * FROM a;",
     (2, 25), "WITH query a has options", "CREATE VIEW name WITH ('topic'"),
    ("CREATE VIEW v AS WITH a (x) AS (SELECT price FROM bid) SELECT * FROM a;",
     (2, 25), "unsupported: a column list after WITH query a", "x AS a"),
    ("CREATE VIEW v AS WITH RECURSIVE a AS (SELECT * FROM bid) SELECT * FROM a;",
     (2, 23), "unsupported: WITH RECURSIVE", None),
    ("CREATE VIEW v AS WITH v AS (SELECT * FROM bid) SELECT * FROM v;",
     (2, 23), "WITH query v has the name of its view", "rename the WITH query"),
    ("CREATE VIEW v AS WITH a AS (SELECT item, COUNT(*) AS n FROM bid GROUP BY item)\n"
     "SELECT * FROM a;", (2, 65), "WITH query a aggregates without a window",
     "GROUP BY window_start, window_end of a TUMBLE or HOP"),
    ("CREATE VIEW v AS SELECT * FROM bid JOIN (SELECT item AS i2 FROM bid) ON item = i2;",
     (2, 41), "a subquery as a side of a JOIN needs a name", "JOIN (SELECT ...) AS s"),
    ("CREATE VIEW v AS SELECT * FROM (SELECT price FROM bid) AS s (p);",
     (2, 61), "unsupported: a column list after subquery s", "x AS a"),
    ("CREATE VIEW v AS WITH a AS (SELECT * FROM bid)", (2, 47),
     "a WITH list needs a SELECT after it", "WITH w AS (SELECT ...) SELECT ... FROM w"),
])
def test_l7_errors_in_with_queries_and_subqueries_name_the_sql_as_written(
        sql: str, where: tuple[int, int], message: str, fix: str | None) -> None:
    line, column, found, found_fix = rejected("\n" + sql)
    assert (line, column) == where, found
    assert message in found
    if fix is not None:
        assert fix in found_fix


@pytest.mark.parametrize(("sql", "where", "message"), [
    ("CREATE VIEW v AS SELECT item FROM bid\nWHERE price = (SELECT MAX(price) FROM bid);",
     (3, 15), "unsupported: a subquery in WHERE: (SELECT MAX(price) FROM bid)"),
    ("CREATE VIEW v AS SELECT (SELECT MAX(price) FROM bid) AS m FROM bid;",
     (2, 25), "unsupported: a subquery in SELECT: (SELECT MAX(price) FROM bid)"),
    ("CREATE VIEW v AS SELECT item FROM bid WHERE price IN (SELECT price FROM bid);",
     (2, 54), "unsupported: a subquery in IN: (SELECT price FROM bid)"),
    ("CREATE VIEW v AS SELECT item FROM bid WHERE EXISTS (SELECT 1 FROM bid);",
     (2, 52), "unsupported: a subquery in WHERE: EXISTS(SELECT 1 FROM bid)"),
])
def test_l7_scalar_subqueries_are_refused_with_the_join_form(
        sql: str, where: tuple[int, int], message: str) -> None:
    line, column, found, fix = rejected("\n" + sql)
    assert (line, column) == where
    assert found == message
    assert "write it as a JOIN with the subquery in FROM" in fix
    assert "pipelines/nexmark_q7.sql" in fix


def test_l7_the_join_form_in_the_scalar_subquery_fix_compiles() -> None:
    """The fix's own SQL is a program that compiles: the bids at their window's top price."""
    circuit = compile_sql("""
        CREATE VIEW top WITH ('topic' = 'top') AS
        SELECT b.bidtime, b.price, b.item
        FROM bid AS b JOIN (SELECT window_end, MAX(price) AS maxprice
                            FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime),
                                              INTERVAL '10' MINUTE))
                            GROUP BY window_start, window_end) AS m
          ON b.price = m.maxprice AND b.bidtime >= m.window_end - INTERVAL '10' MINUTE
         AND b.bidtime < m.window_end;""")
    join = circuit.view("top").join
    assert isinstance(join, Join) and join.bound is not None
    assert circuit.view("top.m").emit.after_watermark
