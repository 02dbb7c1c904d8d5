"""SPEC S16 (and S10, L7) in the compiler: JOIN's parsing, its classification into interval,
window and regular joins, its errors with positions and fixes, the time attributes it keeps,
and how explain shows it."""

from __future__ import annotations

import json

import pytest

from app.circuit.explain import explain_json, explain_text
from app.circuit.ir import Circuit, ColumnRef, Filter, Join, JoinBound, Project
from app.errors import ProgramError
from app.program.compile import compile_program

MINUTE = 60_000

TABLES = """
CREATE TABLE orders (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    orderid INT NOT NULL,
    ticker  VARCHAR NOT NULL,
    amount  INT NOT NULL,
    placed  TIMESTAMP
) WITH ('topic' = 'orders');
CREATE TABLE trades (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    orderid INT NOT NULL,
    tradeid BIGINT NOT NULL,
    amount  INT NOT NULL,
    seq     BIGINT NOT NULL LATENESS 5
) WITH ('topic' = 'trades');
"""
# Line of the first line of a view written right after TABLES.
FIRST = TABLES.count("\n") + 1

BOUND = "t.rowtime BETWEEN o.rowtime AND o.rowtime + INTERVAL '10' MINUTE"


def compile_sql(text: str) -> Circuit:
    return compile_program("p.sql", TABLES + text)


def rejected(text: str) -> tuple[int, int, str, str | None]:
    with pytest.raises(ProgramError) as info:
        compile_sql(text)
    first = info.value.diagnostics[0]
    return first.position.line - FIRST + 1, first.position.column, first.message, first.fix


def join_of(circuit: Circuit, view: str) -> Join:
    join = circuit.view(view).join
    assert join is not None
    return join


# -- classification -----------------------------------------------------------------------


def test_s16_interval_join_between_two_time_attributes() -> None:
    """S16: equality keys plus a bound between the sides' time attributes is an interval
    join; the bound reads ``o.rowtime + lower <= t.rowtime <= o.rowtime + upper``."""
    circuit = compile_sql(f"""CREATE VIEW m WITH ('topic' = 'm') AS
SELECT o.rowtime, o.orderid, o.amount AS order_amount, t.amount AS trade_amount
FROM orders AS o JOIN trades AS t ON o.orderid = t.orderid AND {BOUND};""")
    view = circuit.view("m")
    join = join_of(circuit, "m")
    assert view.sources == ("orders", "trades")
    assert (join.kind, join.form) == ("inner", "interval")
    assert (join.left.source, join.left.alias, join.right.source, join.right.alias) == (
        "orders", "o", "trades", "t")
    assert [(a.name, b.name) for a, b in join.keys] == [("o.orderid", "t.orderid")]  # type: ignore[union-attr]
    assert join.bound == JoinBound("rowtime", "rowtime", 0, 10 * MINUTE)
    assert join.residual is None
    assert [type(op) for op in view.operators] == [Join, Project]
    assert [c.name for c in view.columns] == ["rowtime", "orderid", "order_amount",
                                              "trade_amount"]
    assert view.is_stateless and view.key == ()
    assert view.output is not None and view.output.format == "append"
    assert view.state.kind == "window"
    assert view.state.description == (
        "rows of o are freed once w(trades.rowtime) > o.rowtime + 10 minutes; rows of t once "
        "w(orders.rowtime) > t.rowtime")
    assert circuit.warnings == ()


@pytest.mark.parametrize("condition, lower, upper", [
    ("t.rowtime >= o.rowtime - INTERVAL '5' MINUTE AND t.rowtime <= o.rowtime + INTERVAL "
     "'10' MINUTE", -5 * MINUTE, 10 * MINUTE),
    ("o.rowtime + INTERVAL '10' MINUTE >= t.rowtime AND o.rowtime - INTERVAL '5' MINUTE <= "
     "t.rowtime", -5 * MINUTE, 10 * MINUTE),
    ("o.rowtime BETWEEN t.rowtime - INTERVAL '10' MINUTE AND t.rowtime", 0, 10 * MINUTE),
    ("t.rowtime > o.rowtime AND t.rowtime < o.rowtime + INTERVAL '1' SECOND", 1, 999),
    ("t.rowtime = o.rowtime", 0, 0),
])
def test_s16_bound_forms_normalise_to_right_minus_left(condition: str, lower: int,
                                                      upper: int) -> None:
    """S16: BETWEEN, >=/<= pairs written from either side, strict comparisons (one unit
    inside) and an equality of times are all the same bound on t.rowtime - o.rowtime."""
    circuit = compile_sql(f"""CREATE VIEW m AS SELECT o.orderid FROM orders o
JOIN trades t ON o.orderid = t.orderid AND {condition};""")
    join = join_of(circuit, "m")
    assert join.form == "interval"
    assert join.bound == JoinBound("rowtime", "rowtime", lower, upper)
    assert join.residual is None


def test_s16_integer_time_attributes_bound_in_their_own_unit() -> None:
    """S10: a BIGINT LATENESS column is a time attribute; its bound is in its unit."""
    circuit = compile_sql("""CREATE VIEW m AS SELECT a.seq FROM trades a
JOIN trades b ON a.orderid = b.orderid AND b.seq BETWEEN a.seq - 3 AND a.seq + 7;""")
    join = join_of(circuit, "m")
    assert join.bound == JoinBound("seq", "seq", -3, 7)
    assert circuit.view("m").state.description == (
        "rows of a are freed once w(trades.seq) > a.seq + 7; rows of b once w(trades.seq) > "
        "b.seq + 3")
    assert "seq (forwarded: JOIN: w = min(w(trades.seq), w(trades.seq) - 7))" in explain_text(
        circuit)


def test_s16_other_conditions_are_the_residual() -> None:
    """S16: ON conjuncts that are neither keys nor the bound are kept as the residual
    predicate of the match (for an outer join they decide matching, not filtering)."""
    circuit = compile_sql(f"""CREATE VIEW m AS SELECT o.orderid FROM orders o
LEFT JOIN trades t ON o.orderid = t.orderid AND t.amount > o.amount AND {BOUND}
WHERE o.amount > 0;""")
    join = join_of(circuit, "m")
    assert join.kind == "left" and join.form == "interval"
    assert join.residual is not None
    assert [r.name for r in _refs(join.residual)] == ["t.amount", "o.amount"]
    ops = circuit.view("m").operators
    assert isinstance(ops[1], Filter) and isinstance(ops[2], Project)


def _refs(expr: object) -> list[ColumnRef]:
    if isinstance(expr, ColumnRef):
        return [expr]
    return [r for arg in getattr(expr, "args", ()) for r in _refs(arg)]


@pytest.mark.parametrize("words, kind", [
    ("JOIN", "inner"), ("INNER JOIN", "inner"), ("LEFT JOIN", "left"),
    ("LEFT OUTER JOIN", "left"), ("RIGHT JOIN", "right"), ("RIGHT OUTER JOIN", "right"),
    ("FULL JOIN", "full"), ("FULL OUTER JOIN", "full"),
])
def test_s16_join_kinds_and_the_padded_sides_become_nullable(words: str, kind: str) -> None:
    """S16: an outer side's unmatched rows are padded with NULLs, so the other side's
    columns are nullable in the view."""
    circuit = compile_sql(f"""CREATE VIEW m AS SELECT o.orderid AS o_id, t.tradeid
FROM orders o {words} trades t ON o.orderid = t.orderid AND {BOUND};""")
    assert join_of(circuit, "m").kind == kind
    nullable = {c.name: c.type.nullable for c in circuit.view("m").columns}
    assert nullable == {"o_id": kind in ("right", "full"), "tradeid": kind in ("left", "full")}


WINDOWED = """
CREATE LOCAL VIEW o5 AS
SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rowtime), INTERVAL '5' MINUTE));
CREATE LOCAL VIEW t5 AS
SELECT * FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(rowtime), INTERVAL '5' MINUTE));
"""


def test_s16_window_join_on_window_end_of_two_windowed_views() -> None:
    """S16: two windowed relations joined on window_end (and window_start, and keys) are a
    window join; window_start and window_end of each side stay time attributes (S10)."""
    circuit = compile_sql(WINDOWED + """CREATE VIEW w WITH ('topic' = 'w') AS
SELECT a.window_start, a.window_end, a.orderid, b.window_end AS trade_end, b.tradeid
FROM o5 a JOIN t5 b ON a.window_start = b.window_start AND a.window_end = b.window_end
  AND a.orderid = b.orderid;""")
    join = join_of(circuit, "w")
    assert join.form == "window"
    assert join.bound == JoinBound("window_end", "window_end", 0, 0)
    assert [(a.name, b.name) for a, b in join.keys] == [  # type: ignore[union-attr]
        ("a.window_start", "b.window_start"), ("a.orderid", "b.orderid")]
    attrs = {a.column: a for a in circuit.view("w").time_attributes}
    assert {c: a.kind for c, a in attrs.items()} == {
        "window_start": "window_start", "window_end": "window_end", "trade_end": "window_end"}
    held = attrs["window_end"].join
    assert held is not None and held.side == "left" and held.lag == 0
    assert (held.own.table, held.other.table) == ("orders", "trades")
    assert circuit.view("w").state.description == (
        "rows of a are freed once w(trades.rowtime) >= a.window_end; rows of b once "
        "w(orders.rowtime) >= b.window_end")


def test_s16_a_regular_join_warns_of_unbounded_state_l7() -> None:
    """S16, L7: an inner join without a time bound is allowed; it keeps every row of both
    sides (a warning at the JOIN, with the fix), and keeps no time attribute."""
    circuit = compile_sql("""CREATE VIEW r AS
SELECT o.rowtime, t.tradeid FROM orders o JOIN trades t ON o.orderid = t.orderid;""")
    join = join_of(circuit, "r")
    assert (join.form, join.bound) == ("regular", None)
    view = circuit.view("r")
    assert view.state.kind == "unbounded" and view.time_attributes == ()
    (warning,) = circuit.warnings
    assert warning.severity == "warning"
    assert (warning.position.line - FIRST + 1, warning.position.column) == (2, 43)
    assert warning.message == ("view r keeps unbounded state: its join has no time bound, so "
                               "no row of either side is ever freed")
    assert warning.fix is not None and "b.ts BETWEEN a.ts - INTERVAL" in warning.fix


def test_s16_a_bound_with_one_end_is_no_bound_l7() -> None:
    """S16: a bound must have both ends to free both sides; one end is named in the warning
    and stays in the residual."""
    circuit = compile_sql("""CREATE VIEW r AS SELECT o.orderid FROM orders o
JOIN trades t ON o.orderid = t.orderid AND t.rowtime >= o.rowtime;""")
    join = join_of(circuit, "r")
    assert join.form == "regular" and join.residual is not None
    (warning,) = circuit.warnings
    assert "its join has no time bound (its time bound on o.rowtime and t.rowtime has no " \
           "upper end)" in warning.message


@pytest.mark.parametrize("condition", [
    "t.amount > o.amount",
    "t.rowtime > o.placed",
    "t.rowtime >= o.rowtime AND t.amount BETWEEN o.amount - 5 AND o.amount + 5",
])
def test_s16_comparisons_not_meant_as_a_bound_stay_in_the_residual(condition: str) -> None:
    """S16, L7: a comparison of plain numbers, or one end on a column that is not a time
    attribute, is no attempted bound: it is residual, and the join is regular (warned)."""
    circuit = compile_sql(f"""CREATE VIEW r AS SELECT o.orderid FROM orders o
JOIN trades t ON o.orderid = t.orderid AND {condition};""")
    join = join_of(circuit, "r")
    assert join.form == "regular" and join.residual is not None
    assert len(circuit.warnings) == 1


# -- time attributes (S10, S16) --------------------------------------------------------------


def test_s16_bound_columns_keep_their_side_waterline_held_by_the_other() -> None:
    """S10, S16: each side's bound column forwarded verbatim is a time attribute whose
    waterline is its own side's, held back by the other side's by the bound:
    w(o.rowtime) = min(w(orders), w(trades) - upper), w(t.rowtime) = min(w(trades),
    w(orders) + lower). Other time attributes of the sides (trades.seq) lose it."""
    circuit = compile_sql("""CREATE VIEW m AS
SELECT o.rowtime AS order_time, t.rowtime AS trade_time, t.seq
FROM orders o JOIN trades t ON o.orderid = t.orderid
 AND t.rowtime BETWEEN o.rowtime - INTERVAL '2' MINUTE AND o.rowtime + INTERVAL '10' MINUTE;
""")
    attrs = {a.column: a for a in circuit.view("m").time_attributes}
    assert set(attrs) == {"order_time", "trade_time"}
    order_time, trade_time = attrs["order_time"], attrs["trade_time"]
    assert (order_time.table, order_time.source_column, order_time.kind) == (
        "m", "order_time", "forwarded")
    assert order_time.join is not None and trade_time.join is not None
    assert (order_time.join.own.table, order_time.join.other.table, order_time.join.lag) == (
        "orders", "trades", 10 * MINUTE)
    assert (trade_time.join.own.table, trade_time.join.other.table, trade_time.join.lag) == (
        "trades", "orders", 2 * MINUTE)


def test_s16_a_reader_windows_the_join_on_its_time_attribute() -> None:
    """S10, S11, S18: a view reading the join may window on a kept time attribute; its
    groups are freed by the join's held-back waterline."""
    circuit = compile_sql(f"""CREATE LOCAL VIEW m AS
SELECT o.rowtime, o.orderid FROM orders o JOIN trades t ON o.orderid = t.orderid AND {BOUND};
CREATE VIEW per_hour WITH ('topic' = 'per_hour') AS
SELECT window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE m, DESCRIPTOR(rowtime), INTERVAL '1' HOUR))
GROUP BY window_end EMIT AFTER WATERMARK;""")
    view = circuit.view("per_hour")
    assert view.state.kind == "window"
    assert view.state.description == "a group is freed once w(m.rowtime) >= window_end"
    assert circuit.join_upstream("per_hour") == "m"
    assert circuit.join_upstream("orders") is None


def test_s16_a_join_view_reads_several_relations_and_has_no_single_source() -> None:
    """The IR: ``sources`` holds both sides; ``source`` refuses to pick one."""
    circuit = compile_sql(f"""CREATE VIEW m AS SELECT o.orderid FROM orders o
JOIN trades t ON o.orderid = t.orderid AND {BOUND};""")
    with pytest.raises(ValueError, match="view m is a JOIN of orders, trades"):
        _ = circuit.view("m").source


def test_s16_self_join_with_aliases_and_star_per_side() -> None:
    """S16: a relation may be joined with itself under two aliases; ``x.*`` selects one
    side's columns."""
    circuit = compile_sql("""CREATE VIEW s AS SELECT a.*, b.tradeid AS other
FROM trades a JOIN trades b ON a.orderid = b.orderid
 AND b.rowtime BETWEEN a.rowtime AND a.rowtime + INTERVAL '1' MINUTE;""")
    assert circuit.view("s").sources == ("trades", "trades")
    assert [c.name for c in circuit.view("s").columns] == [
        "rowtime", "orderid", "tradeid", "amount", "seq", "other"]


# -- errors (L7) ---------------------------------------------------------------------------

ERRORS = [
    ("CREATE VIEW v AS SELECT x.orderid FROM orders o JOIN trades t\n"
     f" ON o.orderid = t.orderid AND {BOUND};",
     (1, 25, "unknown table or view alias x in x.orderid", "the relations of the join are "
      "o, t")),
    ("CREATE VIEW v AS SELECT amount FROM orders o JOIN trades t\n"
     f" ON o.orderid = t.orderid AND {BOUND};",
     (1, 25, "ambiguous column amount: both sides of the join have it",
      "qualify it: o.amount or t.amount")),
    ("CREATE VIEW v AS SELECT t.ticker FROM orders o JOIN trades t\n"
     f" ON o.orderid = t.orderid AND {BOUND};",
     (1, 25, "unknown column ticker in t", None)),
    ("CREATE VIEW v AS SELECT o.orderid FROM orders o JOIN trades t\n"
     f" ON o.ticker = t.orderid AND {BOUND};",
     (2, 5, "join keys of different types: o.ticker is VARCHAR, t.orderid is INT",
      "CAST one side, e.g. CAST(t.orderid AS VARCHAR)")),
    ("CREATE VIEW v AS SELECT o.orderid FROM orders o, trades t;",
     (1, 48, "two relations in FROM need their join condition in WHERE",
      "add WHERE a.k = b.k")),
    ("CREATE VIEW v AS SELECT o.orderid FROM orders o\n"
     " FULL OUTER JOIN trades t ON o.amount < t.amount;",
     (2, 2, "unsupported: a FULL OUTER join without a time bound needs an equality key",
      "add a key to ON, e.g. o.k = t.k, or bound it on a time attribute of each side")),
    ("CREATE VIEW v AS SELECT o.orderid FROM orders o JOIN trades t ON o.orderid = t.orderid\n"
     " AND t.rowtime BETWEEN o.placed AND o.placed + INTERVAL '1' MINUTE;",
     (2, 6, "column o.placed is not a time attribute, so the join's time bound on it cannot "
      "free state", "add LATENESS to orders.placed, or bound the join on a column that has "
      "it")),
    (WINDOWED + "CREATE VIEW v AS SELECT a.orderid FROM o5 a JOIN t5 b ON a.orderid = "
     "b.orderid\n AND b.window_start BETWEEN a.window_start AND a.window_start + "
     "INTERVAL '5' MINUTE;",
     (7, 6, "the join's time bound uses a.window_start, a window start",
      "bound the join on window_end, or join windowed relations on equal window_end")),
    ("CREATE VIEW v AS SELECT o.orderid FROM orders o JOIN trades t ON o.orderid = t.orderid\n"
     " AND t.rowtime BETWEEN o.rowtime + INTERVAL '5' MINUTE AND o.rowtime;",
     (2, 6, "the join's time bound is empty", "check the signs of the INTERVALs")),
    ("CREATE VIEW v AS SELECT o.orderid FROM orders o JOIN trades t ON o.orderid = t.orderid\n"
     " JOIN trades t ON t.orderid = o.orderid;",
     (2, 7, "two relations of the join are named t", "give one side an alias")),
    ("CREATE VIEW v AS SELECT o.orderid FROM orders o JOIN trades FOR SYSTEM_TIME AS OF "
     "o.rowtime AS t\n ON o.orderid = t.orderid;",
     (1, 54, "table trades has no PRIMARY KEY, so FOR SYSTEM_TIME AS OF cannot read its "
      "rows as versions of a key", "declare one in CREATE TABLE trades: PRIMARY KEY")),
    ("CREATE VIEW v AS SELECT o.orderid FROM orders o CROSS JOIN trades t;",
     (1, 49, "unsupported: CROSS JOIN", None)),
    ("CREATE VIEW v AS SELECT o.orderid FROM orders o JOIN trades t USING (orderid);",
     (1, 49, "unsupported: JOIN ... USING", "write the keys in ON")),
    ("CREATE VIEW v AS SELECT o.orderid FROM orders o JOIN trades t;",
     (1, 49, "JOIN needs an ON condition", None)),
    ("CREATE VIEW v AS SELECT o.orderid FROM orders o OUTER JOIN trades t ON o.orderid = "
     "t.orderid;",
     (1, 49, "OUTER JOIN needs LEFT, RIGHT or FULL", "write FULL OUTER JOIN")),
    ("CREATE VIEW v AS SELECT orders.orderid FROM orders JOIN orders ON true;",
     (1, 57, "both sides of the join are named orders", "give one side an alias")),
    ("CREATE VIEW v AS SELECT * FROM orders o JOIN trades t\n"
     f" ON o.orderid = t.orderid AND {BOUND};",
     (1, 18, "duplicate column name rowtime in view v", "give each column its own name with "
      "AS")),
    ("CREATE VIEW v WITH ('topic' = 'v', 'format' = 'upsert') AS SELECT o.orderid FROM "
     "orders o\n LEFT JOIN trades t ON o.orderid = t.orderid;",
     (1, 47, "view v is a LEFT OUTER join without a time bound: a row without a match is "
      "written padded with NULLs at once and retracted when its first match comes (SPEC S16, "
      "S18), which 'changelog' writes and 'upsert' cannot", "use 'format' = 'changelog'")),
    ("CREATE VIEW agg AS SELECT window_end AS we, orderid, COUNT(*) AS n FROM TABLE(TUMBLE("
     "TABLE orders, DESCRIPTOR(rowtime), INTERVAL '1' MINUTE)) GROUP BY window_start, "
     "window_end, orderid;\n"
     "CREATE VIEW v AS SELECT a.orderid FROM agg a JOIN trades t ON a.orderid = t.orderid "
     "AND t.rowtime BETWEEN a.we - INTERVAL '1' MINUTE AND a.we;",
     (2, 40, "unsupported: view v joins view agg, whose rows are updated (it aggregates "
      "without EMIT AFTER WATERMARK, or reads such a view), in an interval join",
      "add EMIT AFTER WATERMARK to agg, or join without a time bound")),
    ("CREATE VIEW v AS SELECT o.orderid FROM orders o JOIN missing t ON o.orderid = "
     "t.orderid;",
     (1, 54, "unknown table or view missing", None)),
    ("CREATE VIEW v AS SELECT o.orderid FROM orders o JOIN trades t ON o.orderid = t.orderid "
     f"AND {BOUND}\nUNION ALL SELECT orderid FROM trades;",
     (1, 49, "unsupported: branch 1 of the UNION ALL of view v joins",
      "join in a LOCAL view")),
    (f"CREATE VIEW v AS SELECT o.rowtime FROM orders o JOIN trades t ON {BOUND};\n"
     "LATENESS v.rowtime INTERVAL '1' MINUTE;",
     (2, 1, "LATENESS on view v, a JOIN", "declare LATENESS on each side's input")),
]


@pytest.mark.parametrize("text, expected", ERRORS, ids=[e[1][2][:40] for e in ERRORS])
def test_l7_join_errors_name_position_message_and_fix(
        text: str, expected: tuple[int, int, str, str | None]) -> None:
    """L7: every rejected join names line:column (relative to the view here), what is
    wrong, and the fix where one exists; nothing unsupported is mis-executed (S16)."""
    line, column, message, fix = rejected(text)
    want_line, want_column, want_message, want_fix = expected
    assert message.startswith(want_message), message
    assert (line, column) == (want_line, want_column), message
    if want_fix is not None:
        assert fix is not None and want_fix in fix


# -- explain ---------------------------------------------------------------------------------


def test_s16_explain_prints_the_join_node_its_bound_state_and_time() -> None:
    """S16 via explain: the join's form and kind, keys, bound, what outer rows do, when
    each side's state is freed, and the held-back waterline of the kept time attributes."""
    circuit = compile_sql(f"""CREATE VIEW m WITH ('topic' = 'm') AS
SELECT o.rowtime, o.orderid, t.tradeid FROM orders o LEFT JOIN trades t
  ON o.orderid = t.orderid AND t.amount > 0 AND {BOUND};""")
    text = explain_text(circuit)
    block = text[text.index("view m <-"):]
    lines = block.splitlines()
    assert lines[0] == "view m <- orders LEFT JOIN trades"
    assert lines[1] == (
        "  1. INTERVAL JOIN (LEFT OUTER) orders AS o, trades AS t; keys o.orderid = "
        "t.orderid; bound o.rowtime <= t.rowtime <= o.rowtime + 10 minutes; and (t.amount > "
        "0); a match is written when its second row arrives; unmatched o rows are written "
        "with NULLs once proven unmatched")
    assert lines[2] == "  2. Project rowtime = o.rowtime, orderid = o.orderid, tradeid = t.tradeid"
    assert "  time:         rowtime (forwarded: JOIN: w = min(w(orders.rowtime), " \
           "w(trades.rowtime) - 10 minutes))" in lines
    assert ("  state:        window: rows of o are freed once w(trades.rowtime) > o.rowtime + "
            "10 minutes; rows of t once w(orders.rowtime) > t.rowtime") in lines
    assert ("  late:         late rows of orders are removed before any view sees them; late "
            "rows of trades are removed before any view sees them") in lines
    data = json.loads(json.dumps(explain_json(circuit)))
    (view,) = data["views"]
    assert view["source"] == "orders LEFT JOIN trades"
    assert view["sources"] == ["orders", "trades"]
    assert view["operators"][0].startswith("INTERVAL JOIN (LEFT OUTER)")
    assert view["time_attributes"][0]["waterline"] == (
        "min(w(orders.rowtime), w(trades.rowtime) - 10 minutes)")
