"""INNER interval joins on Spark through the real broker (SPEC S5, S14, S16), seed 003.

Queries #1 and #2 of seed 003 (orders matched by a trade within ten minutes, seen from the
order and from the trade) run as two views of one program: one Spark query reads both
tables (ADR 0013), each view is Spark's stream-stream join of the two. The seed's steps, with
LATENESS 0 (a punctuation at x moves its table's waterline to x):

    step  orders                         trades
    1     10:00 #1 ORCL, 10:03 #2 YHOO   -
    2     -                              10:02 #1, 10:04 #2, 10:07:30 #1
    3     -                              bound 10:11
    4     bound 10:10                    -
    5     10:09 #3 (late: w = 10:10)     10:12 #1 (its order is past the bound)

Every match is written in the step its second row arrives (step 2), with the view's S14
waterline min(w(own side), w(other side) - bound) as header; the late order is a dead letter
of orders. Hand-written expectations, and the reference evaluator record for record.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from table_steps import frozen, oracle_written, run_steps, written

from app.circuit.reference import evaluate
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.physical import physical_plan
from app.runtime.plan import refused_by_spark

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE orders (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    orderid INT NOT NULL,
    ticker  VARCHAR NOT NULL,
    amount  INT NOT NULL
) WITH ('topic' = '{orders}');

CREATE TABLE trades (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    orderid INT NOT NULL,
    ticker  VARCHAR NOT NULL,
    amount  INT NOT NULL
) WITH ('topic' = '{trades}');

CREATE VIEW by_order WITH ('topic' = '{by_order}') AS
SELECT o.rowtime, o.orderid, o.ticker, o.amount AS orderamount, t.amount AS tradeamount
FROM orders AS o
JOIN trades AS t
  ON o.orderid = t.orderid
 AND t.rowtime BETWEEN o.rowtime AND o.rowtime + INTERVAL '10' MINUTE;

CREATE VIEW by_trade WITH ('topic' = '{by_trade}') AS
SELECT t.rowtime, o.orderid, o.ticker, o.amount AS orderamount, t.amount AS tradeamount
FROM orders AS o
JOIN trades AS t
  ON o.orderid = t.orderid
 AND o.rowtime BETWEEN t.rowtime - INTERVAL '10' MINUTE AND t.rowtime;
"""


def _ms(clock: str) -> int:
    hour, minute, *second = (int(x) for x in clock.split(":"))
    moment = datetime(2026, 11, 26, hour, minute, second[0] if second else 0, tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _row(clock: str, orderid: int, ticker: str, amount: int) -> dict[str, Any]:
    return {"rowtime": _ms(clock), "orderid": orderid, "ticker": ticker, "amount": amount}


STEPS: list[dict[str, list[Any]]] = [
    {"orders": [_row("10:00", 1, "ORCL", 100), _row("10:03", 2, "YHOO", 25)]},
    {
        "trades": [
            _row("10:02", 1, "ORCL", 60),
            _row("10:04", 2, "YHOO", 25),
            _row("10:07:30", 1, "ORCL", 30),
        ]
    },
    {"trades": [("bound", _ms("10:11"))]},
    {"orders": [("bound", _ms("10:10"))]},
    {"orders": [_row("10:09", 3, "MSFT", 5)], "trades": [_row("10:12", 1, "ORCL", 10)]},
]


def _match(clock: str, orderid: int, ticker: str, amounts: tuple[int, int], header: str) -> Any:
    value = {
        "rowtime": _ms(clock),
        "orderid": orderid,
        "ticker": ticker,
        "orderamount": amounts[0],
        "tradeamount": amounts[1],
    }
    return (frozen(value), format_time_value(_ms(header), "ms"))


def test_seed_join_queries_1_and_2_run_as_spark_interval_joins_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {k: unique_topic(k) for k in ("orders", "trades", "by_order", "by_trade")}
    for name in ("orders", "trades"):
        kafka.create_topic(topics[name], partitions=2)
    path = tmp_path / "joins.sql"
    path.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(path)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    (query,) = plan.queries
    assert query.tables == ("orders", "trades")

    reports, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS)

    by_order = written(kafka, circuit, "by_order", topics["by_order"])
    # Step 2's header: min(w(orders) = 10:03, w(trades) - 10 min = 9:57:30).
    assert by_order == Counter(
        [
            _match("10:00", 1, "ORCL", (100, 60), "9:57:30"),
            _match("10:03", 2, "YHOO", (25, 25), "9:57:30"),
            _match("10:00", 1, "ORCL", (100, 30), "9:57:30"),
        ]
    )
    by_trade = written(kafka, circuit, "by_trade", topics["by_trade"])
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
    assert last == {"orders": {"rowtime": _ms("10:10")}, "trades": {"rowtime": _ms("10:12")}}

    oracle = evaluate(circuit, inputs)
    assert by_order == oracle_written(oracle, "by_order")
    assert by_trade == oracle_written(oracle, "by_trade")
