"""UNION ALL on Spark through the real broker (SPEC S5, S6, S14, S17), seed 003's merge.

Orders and trades (each LATENESS 0 on ``rowtime``, two partitions) run in one streaming query:
each table keeps its own late gate, waterline and dead-letter topic; the union forwards every
branch's rows; a view reading the union filters it; every output record's
``tidemark.waterline`` is the minimum of the two tables' waterlines (the merged bound).

    step  orders                         trades                            w(o)   w(t)   union
    1     ORCL 10:01, MSFT 10:04         YHOO 10:02, IBM 10:03             10:04  10:03  10:03
    2     bound 10:06, late 10:00 IBM    GOOG 10:03:30, ZERO 10:04 (0)     10:06  10:04  10:04
    3     -                              IBM 10:05:30                      10:06  10:05:30 10:05:30

(ZERO has amount 0: the trades branch's WHERE drops it, but it is accepted and moves w(t).)
Each step is one ``--once`` run; outputs are compared with these hand-written expectations and
with the reference evaluator fed the same rows.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from table_steps import frozen, oracle_written, run_steps, written

from app.circuit.reference import evaluate
from app.connectors.avro_codec import AvroCodec
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.physical import physical_plan

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE orders (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    ticker  VARCHAR NOT NULL
) WITH ('topic' = '{orders}');

CREATE TABLE trades (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    ticker  VARCHAR NOT NULL,
    amount  INT NOT NULL
) WITH ('topic' = '{trades}');

CREATE VIEW activity WITH ('topic' = '{activity}') AS
SELECT rowtime, ticker, 'order' AS kind FROM orders
UNION ALL
SELECT rowtime, ticker, 'trade' AS kind FROM trades WHERE amount > 0;

CREATE VIEW trade_tickers WITH ('topic' = '{tickers}') AS
SELECT rowtime, LOWER(ticker) AS ticker FROM activity WHERE kind = 'trade';
"""


def _ms(clock: str) -> int:
    hour, minute, *second = (int(x) for x in clock.split(":"))
    return int(
        datetime(2026, 11, 26, hour, minute, second[0] if second else 0, tzinfo=UTC).timestamp()
        * 1000
    )


def _w(clock: str) -> str:
    return format_time_value(_ms(clock), "ms")


#: Per step, per table: rows, or ("bound", clock) punctuations.
STEPS: list[dict[str, list[Any]]] = [
    {
        "orders": [("ORCL", "10:01"), ("MSFT", "10:04")],
        "trades": [("YHOO", "10:02", 5), ("IBM", "10:03", 7)],
    },
    {
        "orders": [("bound", "10:06"), ("IBM", "10:00")],
        "trades": [("GOOG", "10:03:30", 1), ("ZERO", "10:04", 0)],
    },
    {"orders": [], "trades": [("IBM", "10:05:30", 2)]},
]


def _row(table: str, entry: tuple[Any, ...]) -> Any:
    if entry[0] == "bound":
        return ("bound", _ms(entry[1]))
    row: dict[str, Any] = {"rowtime": _ms(entry[1]), "ticker": entry[0]}
    if table == "trades":
        row["amount"] = entry[2]
    return row


def _expected(rows: list[tuple[str, str, str, str]]) -> Counter[tuple[Any, ...]]:
    """(clock, ticker, kind or '', header clock) -> the records as ``written`` reads them."""
    out: Counter[tuple[Any, ...]] = Counter()
    for clock, ticker, kind, header in rows:
        value = {"rowtime": _ms(clock), "ticker": ticker} | ({"kind": kind} if kind else {})
        out[(frozen(value), _w(header))] += 1
    return out


def test_union_all_merges_two_tables_with_the_min_waterline_s17(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {k: unique_topic(k) for k in ("orders", "trades", "activity", "tickers")}
    for name in ("orders", "trades"):
        kafka.create_topic(topics[name], partitions=2)
    path = tmp_path / "merge.sql"
    path.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(path)
    # One query reads both tables (the physical plan's), in the step sink's cached shape.
    (query,) = physical_plan(circuit).queries
    assert query.tables == ("orders", "trades") and (query.shape, query.batch) == (
        "step_sink",
        "cached",
    )
    steps = [{t: [_row(t, e) for e in entries] for t, entries in step.items()} for step in STEPS]
    reports, inputs = run_steps(kafka, tmp_path, circuit, topics, steps)

    activity = written(kafka, circuit, "activity", topics["activity"])
    assert activity == _expected(
        [
            ("10:01", "ORCL", "order", "10:03"),
            ("10:04", "MSFT", "order", "10:03"),
            ("10:02", "YHOO", "trade", "10:03"),
            ("10:03", "IBM", "trade", "10:03"),
            ("10:03:30", "GOOG", "trade", "10:04"),
            ("10:05:30", "IBM", "trade", "10:05:30"),
        ]
    )
    tickers = written(kafka, circuit, "trade_tickers", topics["tickers"])
    assert tickers == _expected(
        [
            ("10:02", "yhoo", "", "10:03"),
            ("10:03", "ibm", "", "10:03"),
            ("10:03:30", "goog", "", "10:04"),
            ("10:05:30", "ibm", "", "10:05:30"),
        ]
    )
    # Each table's own gate: the late order in the orders' dead letters, none for trades.
    dead = read_topic(kafka.conf(), circuit.table("orders").dead_letter_topic)
    assert [dict(m.headers())["tidemark.error.reason"] for m in dead] == [b"late"]
    orders = AvroCodec(circuit.table("orders").avro_schema)
    assert orders.decode(dead[0].value()) == _row("orders", ("IBM", "10:00"))
    assert read_topic(kafka.conf(), circuit.table("trades").dead_letter_topic) == []
    # One report per table and step, with the table's own waterline.
    last = {r.table: r.waterlines for r in reports if r.step is not None}
    assert last == {"orders": {"rowtime": _ms("10:06")}, "trades": {"rowtime": _ms("10:05:30")}}

    # The reference evaluator agrees, record for record and header for header.
    oracle = evaluate(circuit, inputs)
    assert activity == oracle_written(oracle, "activity")
    assert tickers == oracle_written(oracle, "trade_tickers")
