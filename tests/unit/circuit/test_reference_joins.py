"""SPEC S16: JOIN in the reference evaluator, from SQL text, step by step.

Seed 003's streaming joins over ``orders`` and ``trades`` (each with LATENESS 0 on
``rowtime``, so a punctuation at x moves its table's waterline to x): query #1 (orders matched
by a trade within ten minutes), query #2 (the same pairs seen from the trade) and query #3 (the
outer join, with an unmatched order and an unmatched trade). Tidemark writes a match in the
step its second row arrives (insert-only) and an unmatched row once the other side's waterline
proves no match can come; SQLstream holds rows back to write them in rowtime order, so where the
seed writes a match a step or two later, the rows are the same and Tidemark's are earlier (the
view's S14 waterline then says which of them the seed would have written). Expected outputs
are written by hand.
"""

from __future__ import annotations

from typing import Any

from circuit_builders import at

from app.circuit.ir import Circuit
from app.circuit.reference import Punctuation, StepInput, StepResult, evaluate
from app.program.compile import compile_program

TABLES = """
CREATE TABLE orders (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    orderid INT NOT NULL,
    ticker  VARCHAR NOT NULL,
    amount  INT NOT NULL
) WITH ('topic' = 'orders');

CREATE TABLE trades (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    orderid INT NOT NULL,
    ticker  VARCHAR NOT NULL,
    amount  INT NOT NULL
) WITH ('topic' = 'trades');
"""

# Query #1: "Orders AS o JOIN Trades OVER (RANGE INTERVAL '10' MINUTE FOLLOWING) AS t".
QUERY_1 = """
CREATE VIEW matched WITH ('topic' = 'matched') AS
SELECT o.rowtime, o.orderid, o.ticker, o.amount AS orderamount, t.amount AS tradeamount
FROM orders AS o
JOIN trades AS t
  ON o.orderid = t.orderid
 AND t.rowtime BETWEEN o.rowtime AND o.rowtime + INTERVAL '10' MINUTE;
"""

# Query #2: "Orders OVER (RANGE INTERVAL '10' MINUTE PRECEDING) AS o JOIN Trades AS t".
QUERY_2 = """
CREATE VIEW matched WITH ('topic' = 'matched') AS
SELECT t.rowtime, o.orderid, o.ticker, o.amount AS orderamount, t.amount AS tradeamount
FROM orders AS o
JOIN trades AS t
  ON o.orderid = t.orderid
 AND o.rowtime BETWEEN t.rowtime - INTERVAL '10' MINUTE AND t.rowtime;
"""

# Query #3: query #1 as an outer join (SQLstream's OUTER JOIN keeps both sides: FULL).
QUERY_3 = """
CREATE VIEW everything WITH ('topic' = 'everything') AS
SELECT o.rowtime AS order_time, o.orderid, o.ticker, o.amount AS orderamount,
       t.rowtime AS trade_time, t.orderid AS trade_order, t.ticker AS trade_ticker,
       t.amount AS tradeamount
FROM orders AS o
FULL OUTER JOIN trades AS t
  ON o.orderid = t.orderid
 AND t.rowtime BETWEEN o.rowtime AND o.rowtime + INTERVAL '10' MINUTE;
"""


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=TABLES + text)


def order(clock: str, orderid: int, ticker: str, amount: int) -> dict[str, Any]:
    return {"rowtime": at(clock), "orderid": orderid, "ticker": ticker, "amount": amount}


trade = order


def bound(table: str, clock: str, plus_ms: int = 0) -> StepInput:
    """S4: a punctuation; with LATENESS 0 it moves the waterline to exactly this time."""
    return StepInput({}, punctuations={table: [Punctuation(at(clock) + plus_ms)]})


# The seed's steps for queries #1 and #2 (its step 4 bound is on Orders, step 3's on Trades).
SEED_STEPS = [
    StepInput({"orders": [order("10:00", 1, "ORCL", 100), order("10:03", 2, "YHOO", 25)]}),
    StepInput({"trades": [trade("10:02", 1, "ORCL", 60), trade("10:04", 2, "YHOO", 25),
                          trade("10:07:30", 1, "ORCL", 30)]}),
    bound("trades", "10:11"),
    bound("orders", "10:10"),
    StepInput({"trades": [trade("10:12", 1, "ORCL", 10)]}),
]


def values(result: StepResult, view: str) -> list[Any]:
    return [r.value for r in result.outputs[view]]


def match(clock: str, orderid: int, ticker: str, order_amount: int,
          trade_amount: int) -> dict[str, Any]:
    return {"rowtime": at(clock), "orderid": orderid, "ticker": ticker,
            "orderamount": order_amount, "tradeamount": trade_amount}


# -- seed 003, query #1 ---------------------------------------------------------------------


def test_s16_seed_query_1_matches_are_written_when_the_second_row_arrives() -> None:
    """S16 (insert-only matches): the three trades of step 2 each match an order and are
    written in step 2, in arrival order, with the order's rowtime (the seed's rows). The
    seed writes YHOO's match only in step 3, after the trades bound, to keep its output in
    rowtime order; Tidemark's view is a relation and writes it at once. The late trade of
    step 5 (10:12, order 1) matches nothing: order 1 was freed in step 3."""
    results = evaluate(compile_sql(QUERY_1), SEED_STEPS)
    assert [values(r, "matched") for r in results] == [
        [],
        [match("10:00", 1, "ORCL", 100, 60), match("10:03", 2, "YHOO", 25, 25),
         match("10:00", 1, "ORCL", 100, 30)],
        [],
        [],
        [],
    ]
    assert all(r.outputs["matched"][0].key is None for r in results[1:2])  # append (L6)


def test_s16_seed_query_1_state_is_freed_by_the_other_sides_waterline() -> None:
    """S16: an order at x is freed once w(trades) > x + 10 minutes, a trade at y once
    w(orders) > y. Step 1: both orders. Step 2: w(orders) = 10:03 frees the 10:02 trade.
    Step 3: w(trades) = 10:11 frees order 1 (10:00), not order 2 (10:03 + 10 = 10:13).
    Step 4: w(orders) = 10:10 frees the 10:04 and 10:07:30 trades. Step 5: the 10:12 trade
    is held until w(orders) passes 10:12 (seed: "keep this trade in memory")."""
    results = evaluate(compile_sql(QUERY_1), SEED_STEPS)
    assert [r.state_rows["matched"] for r in results] == [2, 4, 3, 1, 2]
    assert [r.waterlines["trades"]["rowtime"] for r in results] == [
        None, at("10:07:30"), at("10:11"), at("10:11"), at("10:12")]


def test_s16_s14_join_waterline_is_held_back_by_the_other_side() -> None:
    """S10, S14, S16: o.rowtime keeps orders' waterline held back by trades' by the bound:
    w = min(w(orders), w(trades) - 10 minutes), None while trades has none. No row the
    view writes later has o.rowtime below it."""
    results = evaluate(compile_sql(QUERY_1), SEED_STEPS)
    assert [r.view_waterlines["matched"] for r in results] == [
        None, at("9:57:30"), at("10:01"), at("10:01"), at("10:02")]


# -- seed 003, query #2 ---------------------------------------------------------------------


def test_s16_seed_query_2_pairs_seen_from_the_trade() -> None:
    """S16: the same pairs with the trade's rowtime. The seed writes the 10:02 match in
    step 2 and the 10:04 and 10:07:30 ones in step 4, once the orders bound proves no other
    order can pair with them; Tidemark writes all three in step 2, and the view's waterline
    min(w(trades), w(orders)) reaches 10:03 in step 2 and 10:10 in step 4: exactly the
    rows the seed had written by then are below it."""
    results = evaluate(compile_sql(QUERY_2), SEED_STEPS)
    assert [values(r, "matched") for r in results] == [
        [],
        [match("10:02", 1, "ORCL", 100, 60), match("10:04", 2, "YHOO", 25, 25),
         match("10:07:30", 1, "ORCL", 100, 30)],
        [], [], [],
    ]
    assert [r.view_waterlines["matched"] for r in results] == [
        None, at("10:03"), at("10:03"), at("10:10"), at("10:10")]
    # Step 5: the unpaired 10:12 trade is kept until w(orders) > 10:12 (seed: "until the
    # Orders stream reaches 10:12:00"), beside order 2 (until w(trades) > 10:13).
    assert [r.state_rows["matched"] for r in results] == [2, 4, 3, 1, 2]


# -- seed 003, query #3 (outer) ------------------------------------------------------------

OUTER_STEPS = [
    StepInput({"orders": [order("10:00", 0, "IBM", 110), order("10:00", 1, "ORCL", 100),
                          order("10:03", 2, "YHOO", 25)]}),
    SEED_STEPS[1],
    bound("trades", "10:11"),
    bound("orders", "10:10"),
    StepInput({"trades": [trade("10:12", 1, "ORCL", 10)]}),
    bound("orders", "10:12"),
    bound("orders", "10:12", plus_ms=1),
]


def outer(order_row: tuple[str, int, str, int] | None,
          trade_row: tuple[str, int, str, int] | None) -> dict[str, Any]:
    o_time, o_id, o_ticker, o_amount = order_row or (None, None, None, None)
    t_time, t_id, t_ticker, t_amount = trade_row or (None, None, None, None)
    return {"order_time": at(o_time) if o_time else None, "orderid": o_id,
            "ticker": o_ticker, "orderamount": o_amount,
            "trade_time": at(t_time) if t_time else None, "trade_order": t_id,
            "trade_ticker": t_ticker, "tradeamount": t_amount}


def test_s16_seed_query_3_unmatched_rows_wait_for_the_other_sides_waterline() -> None:
    """S16, SQLstream's rule: the outer join writes the matches of query #1 when found,
    and an unmatched row padded with NULLs once the other side's waterline proves that no
    match can come, never earlier.

    IBM (order 0 at 10:00) could match a trade up to 10:10; it is written in step 3, when
    the trades bound 10:11 passes 10:10 (the seed's step 3), not in step 2. The 10:12 trade
    could match an order from 10:02 to 10:12: in step 5 w(orders) is 10:10 (an order at
    10:05 could still come), in step 6 it is 10:12 (an order at exactly 10:12 is on time and
    would match), so it is written in step 7, when w(orders) passes 10:12. The seed's table
    shows that row in step 5, with rowtime 10:12, before its own orders bound proves it;
    Tidemark waits for the proof."""
    results = evaluate(compile_sql(QUERY_3), OUTER_STEPS)
    assert [values(r, "everything") for r in results] == [
        [],
        [outer(("10:00", 1, "ORCL", 100), ("10:02", 1, "ORCL", 60)),
         outer(("10:03", 2, "YHOO", 25), ("10:04", 2, "YHOO", 25)),
         outer(("10:00", 1, "ORCL", 100), ("10:07:30", 1, "ORCL", 30))],
        [outer(("10:00", 0, "IBM", 110), None)],
        [],
        [],
        [],
        [outer(None, ("10:12", 1, "ORCL", 10))],
    ]
    # Matched rows are never written again as unmatched; each side is freed as in #1.
    assert [r.state_rows["everything"] for r in results] == [3, 5, 3, 1, 2, 2, 1]


def test_s16_s5_s6_late_rows_go_to_their_own_sides_dead_letters() -> None:
    """S5, S6, S16: each table keeps its own gate: a trade below w(trades) and an order
    below w(orders) are dead letters of their own table and match nothing."""
    steps = [*SEED_STEPS[:4],
             StepInput({"orders": [order("10:09", 1, "ORCL", 5)],
                        "trades": [trade("10:10:30", 2, "YHOO", 7)]})]
    results = evaluate(compile_sql(QUERY_1), steps)
    assert [(d.table, d.reason, d.row["ticker"], d.waterline)
            for d in results[4].dead_letters] == [
        ("orders", "late", "ORCL", at("10:10")),
        ("trades", "late", "YHOO", at("10:11")),
    ]
    assert values(results[4], "matched") == []
    assert results[4].state_rows["matched"] == 1


# -- other forms -----------------------------------------------------------------------------


def test_s16_left_join_residual_decides_matching_not_filtering() -> None:
    """S16: an ON condition that fails leaves the order unmatched (padded once proven),
    where WHERE would drop it."""
    circuit = compile_sql("""
CREATE VIEW big WITH ('topic' = 'big') AS
SELECT o.orderid, t.amount AS tradeamount FROM orders o
LEFT JOIN trades t ON o.orderid = t.orderid AND t.amount >= 50
 AND t.rowtime BETWEEN o.rowtime AND o.rowtime + INTERVAL '10' MINUTE;""")
    results = evaluate(circuit, [
        StepInput({"orders": [order("10:00", 1, "ORCL", 100), order("10:01", 2, "SAP", 9)],
                   "trades": [trade("10:02", 1, "ORCL", 60), trade("10:03", 2, "SAP", 5)]}),
        bound("trades", "10:10"),
        bound("trades", "10:11:30"),
    ])
    assert [values(r, "big") for r in results] == [
        [{"orderid": 1, "tradeamount": 60}],
        [],  # 10:10 is not past 10:00 + 10 minutes: a trade at 10:10 may still come
        [{"orderid": 2, "tradeamount": None}],  # order 1 matched: freed silently
    ]


WINDOWED = """
CREATE LOCAL VIEW o5 AS
SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rowtime), INTERVAL '5' MINUTE));
CREATE LOCAL VIEW t5 AS
SELECT * FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(rowtime), INTERVAL '5' MINUTE));
CREATE VIEW same_window WITH ('topic' = 'same_window') AS
SELECT a.window_end, a.orderid, a.ticker, b.amount AS tradeamount
FROM o5 a LEFT JOIN t5 b
  ON a.window_start = b.window_start AND a.window_end = b.window_end
 AND a.orderid = b.orderid;
"""


def test_s16_s11_window_join_pairs_rows_of_the_same_window() -> None:
    """S16 window join: an order and a trade of the same 5-minute window and order match
    when the second arrives; an order whose window has no trade is written padded once
    w(trades) >= its window_end (S11's completeness), and then freed."""
    results = evaluate(compile_sql(WINDOWED), [
        StepInput({"orders": [order("10:01", 1, "ORCL", 100), order("10:02", 2, "SAP", 5)]}),
        StepInput({"trades": [trade("10:04", 1, "ORCL", 60)]}),
        bound("trades", "10:05"),
    ])
    assert [values(r, "same_window") for r in results] == [
        [],
        [{"window_end": at("10:05"), "orderid": 1, "ticker": "ORCL", "tradeamount": 60}],
        [{"window_end": at("10:05"), "orderid": 2, "ticker": "SAP", "tradeamount": None}],
    ]
    # Step 2: w(trades) = 10:04 < 10:05: a trade of SAP's window may still come, so both
    # orders and the trade are held. Step 3: the orders' window is complete for trades; the
    # trade waits for w(orders) >= 10:05.
    assert [r.state_rows["same_window"] for r in results] == [2, 3, 1]
    # S14: window_end's waterline is min(w(orders), w(trades)).
    assert [r.view_waterlines["same_window"] for r in results] == [
        None, at("10:02"), at("10:02")]


def test_s16_l7_regular_join_keeps_every_row() -> None:
    """S16, L7: without a time bound a row can match any later row of the other side, so
    none is ever freed (the compiler warned)."""
    circuit = compile_sql("""
CREATE VIEW forever WITH ('topic' = 'forever') AS
SELECT o.orderid, t.amount FROM orders o JOIN trades t ON o.orderid = t.orderid;""")
    assert len(circuit.warnings) == 1
    results = evaluate(circuit, [
        StepInput({"orders": [order("10:00", 1, "ORCL", 100)]}),
        StepInput({"trades": [trade("23:00", 1, "ORCL", 60)]}),
        StepInput({"trades": [trade("23:30", 1, "ORCL", 30)]}),
    ])
    assert [values(r, "forever") for r in results] == [
        [], [{"orderid": 1, "amount": 60}], [{"orderid": 1, "amount": 30}]]
    assert [r.state_rows["forever"] for r in results] == [1, 2, 3]
    assert [r.view_waterlines["forever"] for r in results] == [None, None, None]


def test_s16_self_join_pairs_a_row_with_itself_once() -> None:
    """S16: a relation joined with itself sees each row on both sides; the pair of a row
    with itself is found once, when its right-side copy arrives."""
    circuit = compile_sql("""
CREATE VIEW pairs WITH ('topic' = 'pairs') AS
SELECT a.amount AS first, b.amount AS second FROM trades a JOIN trades b
  ON a.orderid = b.orderid AND b.rowtime BETWEEN a.rowtime AND a.rowtime + INTERVAL '1' MINUTE;
""")
    results = evaluate(circuit, [
        StepInput({"trades": [trade("10:00", 1, "ORCL", 1), trade("10:00:30", 1, "ORCL", 2)]}),
    ])
    assert values(results[0], "pairs") == [
        {"first": 1, "second": 1}, {"first": 1, "second": 2}, {"first": 2, "second": 2}]


def test_s16_s18_a_window_over_the_join_closes_only_when_no_match_can_come() -> None:
    """S10, S11, S16, S18: an AFTER WATERMARK count per 5 minutes of the join's o.rowtime.
    Orders run ahead (w(orders) = 10:20 in step 1) while trades have no waterline; the
    order at 10:00 is matched in step 2 by a trade at 10:04. Had o.rowtime kept orders'
    waterline alone, [10:00, 10:05) would have been complete in step 1 and this match would
    have reached a window already written. With the held-back waterline
    min(w(orders), w(trades) - 10 minutes) the window is written in step 3, with the match."""
    circuit = compile_sql(QUERY_1.replace("CREATE VIEW matched WITH ('topic' = 'matched')",
                                          "CREATE LOCAL VIEW matched") + """
CREATE VIEW per_five WITH ('topic' = 'per_five') AS
SELECT window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE matched, DESCRIPTOR(rowtime), INTERVAL '5' MINUTE))
GROUP BY window_end
EMIT AFTER WATERMARK;""")
    results = evaluate(circuit, [
        StepInput({"orders": [order("10:00", 1, "ORCL", 100), order("10:20", 2, "SAP", 5)]}),
        StepInput({"trades": [trade("10:04", 1, "ORCL", 60)]}),
        bound("trades", "10:20"),
    ])
    assert [values(r, "per_five") for r in results] == [
        [], [], [{"window_end": at("10:05"), "n": 1}]]
    assert [r.view_waterlines["per_five"] for r in results] == [None, at("9:54"), at("10:10")]


def test_s16_s13_join_view_as_a_changelog() -> None:
    """S12, S13: a join view is insert-only; with EMIT STREAM it is written as a changelog
    of insertions (undo false, ver 0, the step's ptime)."""
    circuit = compile_sql(QUERY_1.replace("MINUTE;\n", "MINUTE\nEMIT STREAM;\n"))
    view = circuit.view("matched")
    assert view.output is not None and view.output.format == "changelog"
    results = evaluate(circuit, [SEED_STEPS[0],
                                 StepInput(SEED_STEPS[1].rows, batch_time_ms=7)])
    assert values(results[1], "matched")[0] == {
        **match("10:00", 1, "ORCL", 100, 60), "undo": False, "ptime": 7, "ver": 0}


def test_s16_s18_window_join_of_two_after_watermark_aggregates() -> None:
    """S16, S18: a FULL window join of per-5-minute counts. Each side's rows reach the join
    only once final (S18); a count is matched in the step the later side's count is final,
    and a count without a partner is written padded in that same step, once the other
    side's waterline has passed the window's end (nothing can come for it any more)."""
    circuit = compile_sql("""
CREATE LOCAL VIEW order_counts AS
SELECT window_start, window_end, ticker, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rowtime), INTERVAL '5' MINUTE))
GROUP BY window_start, window_end, ticker EMIT AFTER WATERMARK;
CREATE LOCAL VIEW trade_counts AS
SELECT window_start, window_end, ticker, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(rowtime), INTERVAL '5' MINUTE))
GROUP BY window_start, window_end, ticker EMIT AFTER WATERMARK;
CREATE VIEW both_counts WITH ('topic' = 'both_counts') AS
SELECT COALESCE(o.window_end, t.window_end) AS window_end,
       COALESCE(o.ticker, t.ticker) AS ticker, o.n AS orders, t.n AS trades
FROM order_counts o FULL JOIN trade_counts t
  ON o.window_start = t.window_start AND o.window_end = t.window_end
 AND o.ticker = t.ticker;""")
    assert join_form(circuit, "both_counts") == "window"
    results = evaluate(circuit, [
        StepInput({"orders": [order("10:01", 1, "ORCL", 1), order("10:02", 2, "SAP", 1)],
                   "trades": [trade("10:03", 1, "ORCL", 1), trade("10:04", 3, "IBM", 1)]}),
        bound("orders", "10:05"),
        bound("trades", "10:05"),
    ])
    end = at("10:05")
    assert [values(r, "both_counts") for r in results] == [
        [],
        [],  # orders' counts are final; trades' window may still grow
        [{"window_end": end, "ticker": "ORCL", "orders": 1, "trades": 1},
         {"window_end": end, "ticker": "SAP", "orders": 1, "trades": None},
         {"window_end": end, "ticker": "IBM", "orders": None, "trades": 1}],
    ]
    assert [r.state_rows["both_counts"] for r in results] == [0, 2, 0]


def join_form(circuit: Circuit, view: str) -> str:
    join = circuit.view(view).join
    assert join is not None
    return join.form
