"""Seed 003 on Spark through the real broker: pipelines/orders_trades.sql, as shipped on test
topics (SPEC S5, S14, S16, S17).

Its UNION ALL merge and join queries #1 and #2 (orders matched by a trade within ten
minutes, seen from the order and from the trade) run in one Spark query of both tables
(ADR 0013): the merge as the union of both tables' rows, each join as Spark's stream-stream
join. The seed's steps, with LATENESS 0 (a punctuation at x moves its table's waterline to x):

    step  orders                         trades                            w(o)   w(t)
    1     10:00 #1 ORCL, 10:03 #2 YHOO   -                                 10:03  -inf
    2     -                              10:02 #1, 10:04 #2, 10:07:30 #1   10:03  10:07:30
    3     -                              bound 10:11                       10:03  10:11
    4     bound 10:10                    -                                 10:10  10:11
    5     10:09 #3 (late: w = 10:10)     10:12 #1 (its order is past it)   10:10  10:12

Every match is written in the step its second row arrives (step 2), with the view's S14
waterline min(w(own side), w(other side) - bound) as header; the merge's header is
min(w(o), w(t)); the late order is a dead letter of orders. The merge's count per five
minutes (S11, S17) completes [10:00, 10:05) and [10:05, 10:10) in step 4, where the minimum
reaches 10:10 (the trades' 10:11 alone does not), and leaves [10:10, 10:15) open.
Hand-written expectations, and the reference evaluator record for record.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from table_steps import (
    clock_ms,
    frozen,
    new_values_per_step,
    oracle_written,
    run_steps,
    shipped_program,
    written,
)

from app.circuit.reference import evaluate
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

pytestmark = pytest.mark.e2e

SHIPPED = {
    "orders": "orders",
    "trades": "trades",
    "orders.dlq": "orders_dlq",
    "trades.dlq": "trades_dlq",
    "orders_trades.activity": "activity",
    "orders_trades.by_order": "by_order",
    "orders_trades.by_trade": "by_trade",
    "orders_trades.per_five": "per_five",
    "orders_trades.outer": "outer",
}


def _row(clock: str, orderid: int, ticker: str, amount: int) -> dict[str, Any]:
    return {"rowtime": clock_ms(clock), "orderid": orderid, "ticker": ticker, "amount": amount}


STEPS: list[dict[str, list[Any]]] = [
    {"orders": [_row("10:00", 1, "ORCL", 100), _row("10:03", 2, "YHOO", 25)]},
    {
        "trades": [
            _row("10:02", 1, "ORCL", 60),
            _row("10:04", 2, "YHOO", 25),
            _row("10:07:30", 1, "ORCL", 30),
        ]
    },
    {"trades": [("bound", clock_ms("10:11"))]},
    {"orders": [("bound", clock_ms("10:10"))]},
    {"orders": [_row("10:09", 3, "MSFT", 5)], "trades": [_row("10:12", 1, "ORCL", 10)]},
]


def _match(clock: str, orderid: int, ticker: str, amounts: tuple[int, int], header: str) -> Any:
    value = {
        "rowtime": clock_ms(clock),
        "orderid": orderid,
        "ticker": ticker,
        "orderamount": amounts[0],
        "tradeamount": amounts[1],
    }
    return (frozen(value), format_time_value(clock_ms(header), "ms"))


def _merged(clock: str, ticker: str, amount: int, kind: str, header: str | None) -> Any:
    value = {"rowtime": clock_ms(clock), "ticker": ticker, "amount": amount, "kind": kind}
    return (frozen(value), format_time_value(None if header is None else clock_ms(header), "ms"))


def _window(start: str, end: str, n: int, amount: int) -> Any:
    value = {"window_start": clock_ms(start), "window_end": clock_ms(end), "n": n,
             "amount": amount}
    return (frozen(value), format_time_value(clock_ms("10:10"), "ms"))


@pytest.mark.slow  # ~1.5 min; CI runs a late join side over the same tables
def test_seed_merge_and_join_queries_run_on_spark_s16_s17(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    circuit, topics = shipped_program(
        kafka, unique_topic, tmp_path, "orders_trades.sql", SHIPPED, ["orders", "trades"]
    )
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    (query,) = plan.queries
    assert query.tables == ("orders", "trades")

    reports, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS)

    activity = written(kafka, circuit, "activity", topics["activity"])
    assert activity == Counter(
        [
            _merged("10:00", "ORCL", 100, "order", None),
            _merged("10:03", "YHOO", 25, "order", None),
            _merged("10:02", "ORCL", 60, "trade", "10:03"),
            _merged("10:04", "YHOO", 25, "trade", "10:03"),
            _merged("10:07:30", "ORCL", 30, "trade", "10:03"),
            _merged("10:12", "ORCL", 10, "trade", "10:10"),
        ]
    )
    per_five = written(kafka, circuit, "activity_per_five", topics["per_five"])
    # Written once w = min(w(o), w(t)) reaches 10:10 (step 4; Spark writes it then or in
    # the step right after, S12, where the minimum is still 10:10).
    assert per_five == Counter(
        [
            _window("10:00", "10:05", 4, 100 + 25 + 60 + 25),
            _window("10:05", "10:10", 1, 30),
        ]
    )
    by_order = written(kafka, circuit, "order_fills", topics["by_order"])
    # Step 2's header: min(w(orders) = 10:03, w(trades) - 10 min = 9:57:30).
    assert by_order == Counter(
        [
            _match("10:00", 1, "ORCL", (100, 60), "9:57:30"),
            _match("10:03", 2, "YHOO", (25, 25), "9:57:30"),
            _match("10:00", 1, "ORCL", (100, 30), "9:57:30"),
        ]
    )
    by_trade = written(kafka, circuit, "trade_orders", topics["by_trade"])
    # min(w(trades) = 10:07:30, w(orders) - 0 = 10:03).
    assert by_trade == Counter(
        [
            _match("10:02", 1, "ORCL", (100, 60), "10:03"),
            _match("10:04", 2, "YHOO", (25, 25), "10:03"),
            _match("10:07:30", 1, "ORCL", (100, 30), "10:03"),
        ]
    )
    dead = read_topic(kafka.conf(), circuit.table("orders").dead_letter_topic)
    assert [dict(m.headers())["tidemark.error.reason"] for m in dead] == [b"late"]
    assert read_topic(kafka.conf(), circuit.table("trades").dead_letter_topic) == []
    last = {r.table: r.waterlines for r in reports if r.step is not None}
    assert last == {
        "orders": {"rowtime": clock_ms("10:10")}, "trades": {"rowtime": clock_ms("10:12")}}
    assert read_topic(kafka.conf(), topics["orders_dlq"])[0].value() == dead[0].value()

    oracle = evaluate(circuit, inputs)
    assert activity == oracle_written(oracle, "activity")
    assert by_order == oracle_written(oracle, "order_fills")
    assert by_trade == oracle_written(oracle, "trade_orders")
    assert per_five == oracle_written(oracle, "activity_per_five")


def test_a_join_side_that_starts_late_still_matches_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """Orders run ahead of trades, which have no waterline yet (``-infinity``): every order
    is kept for the trades to come (S16), and a trade is on time by its own table's waterline
    (S5), however far the orders' is. Spark's query watermark, the minimum over its inputs,
    counts an input it has seen no row of at the epoch, so the orders alone do not move it:
    no trade is dropped as late and no order freed unmatched. Each step is a new run of the
    query (``--once``), whose watermark map starts empty: a restart is covered too."""
    circuit, topics = shipped_program(
        kafka, unique_topic, tmp_path, "orders_trades.sql", SHIPPED, ["orders", "trades"]
    )
    steps: list[dict[str, list[Any]]] = [
        {"orders": [_row("10:00", 1, "ORCL", 100), _row("10:03", 2, "YHOO", 25),
                    ("bound", clock_ms("10:30"))]},
        {"orders": [_row("10:31", 3, "MSFT", 5)]},
        {"trades": [_row("10:02", 1, "ORCL", 60), _row("10:04", 2, "YHOO", 25)]},
    ]
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps)
    by_order = written(kafka, circuit, "order_fills", topics["by_order"])
    oracle = evaluate(circuit, inputs)
    assert by_order == oracle_written(oracle, "order_fills")
    assert sum(by_order.values()) == 2
    assert read_topic(kafka.conf(), topics["trades_dlq"]) == []


def _outer(order: tuple[str, int, str, int] | None, trade: tuple[str, int, int] | None) -> Any:
    o_time, o_id, o_ticker, o_amount = order or (None, None, None, None)
    t_time, t_id, t_amount = trade or (None, None, None)
    return frozen(
        {
            "order_time": clock_ms(o_time) if o_time else None,
            "orderid": o_id,
            "ticker": o_ticker,
            "orderamount": o_amount,
            "trade_time": clock_ms(t_time) if t_time else None,
            "trade_order": t_id,
            "tradeamount": t_amount,
        }
    )


@pytest.mark.slow  # CI's budget: test_window_join's FULL OUTER case pads on the same operator
def test_seed_outer_join_writes_unmatched_rows_when_the_other_side_proves_it_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """Seed 003's query #3 (query #1 as a FULL OUTER join) step by step, on Tidemark's own
    join operator (ADR 0017). The matches of query #1 are written when found (step 2). IBM
    (order 0 at 10:00) could match a trade up to 10:10: it is written in step 3, when the
    trades' bound 10:11 passes 10:10, not before. The 10:12 trade could match an order from
    10:02 to 10:12: w(orders) is 10:10 in step 5 and 10:12 in step 6 (an order at exactly
    10:12 is on time and would match), so it is written in step 7, when w(orders) passes
    10:12. Spark's own outer join would wait for the minimum of both waterlines."""
    circuit, topics = shipped_program(
        kafka, unique_topic, tmp_path, "orders_trades.sql", SHIPPED, ["orders", "trades"]
    )
    assert refused_by_spark(circuit, physical_plan(circuit)) == ()
    steps: list[dict[str, list[Any]]] = [
        {
            "orders": [
                _row("10:00", 0, "IBM", 110),
                _row("10:00", 1, "ORCL", 100),
                _row("10:03", 2, "YHOO", 25),
            ]
        },
        STEPS[1],
        {"trades": [("bound", clock_ms("10:11"))]},
        {"orders": [("bound", clock_ms("10:10"))]},
        {"trades": [_row("10:12", 1, "ORCL", 10)]},
        {"orders": [("bound", clock_ms("10:12"))]},
        {"orders": [("bound", clock_ms("10:12") + 1)]},
    ]
    seen, new_rows = new_values_per_step(kafka, circuit, "order_trade_outer", topics["outer"])
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=new_rows)
    assert seen == [
        Counter(),
        Counter(
            [
                _outer(("10:00", 1, "ORCL", 100), ("10:02", 1, 60)),
                _outer(("10:03", 2, "YHOO", 25), ("10:04", 2, 25)),
                _outer(("10:00", 1, "ORCL", 100), ("10:07:30", 1, 30)),
            ]
        ),
        Counter([_outer(("10:00", 0, "IBM", 110), None)]),
        Counter(),
        Counter(),
        Counter(),
        Counter([_outer(None, ("10:12", 1, 10))]),
    ]
    oracle = evaluate(circuit, inputs)
    assert written(kafka, circuit, "order_trade_outer", topics["outer"]) == oracle_written(
        oracle, "order_trade_outer"
    )
