"""SPEC S17: UNION ALL in the reference evaluator, from SQL text.

Seed 003's merge: orders and trades, each with its own LATENESS (0) on ``rowtime``. The union
forwards every branch's rows in arrival order (not reordered by time); each table keeps its
own late gate and dead letters (S5, S6); a time column of the union has the minimum of the
branches' waterlines, so an aggregate over the union frees a window only once every input
has passed its end. Expected outputs are written by hand, step by step.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from circuit_builders import at

from app.circuit.ir import Circuit
from app.circuit.reference import Punctuation, StepInput, StepResult, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program

ROOT = Path(__file__).resolve().parents[3]

MERGE = """
CREATE TABLE orders (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    ticker  VARCHAR NOT NULL
) WITH ('topic' = 'orders');

CREATE TABLE trades (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    ticker  VARCHAR NOT NULL,
    amount  INT NOT NULL
) WITH ('topic' = 'trades');

CREATE VIEW activity WITH ('topic' = 'activity') AS
SELECT rowtime, ticker, 'order' AS kind FROM orders
UNION ALL
SELECT rowtime AS t, ticker, 'trade' AS what FROM trades WHERE amount > 0;

CREATE VIEW per_five WITH ('topic' = 'per_five') AS
SELECT window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE activity, DESCRIPTOR(rowtime), INTERVAL '5' MINUTE))
GROUP BY window_end
EMIT AFTER WATERMARK;
"""


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=text)


def order(clock: str, ticker: str) -> dict[str, Any]:
    return {"rowtime": at(clock), "ticker": ticker}


def trade(clock: str, ticker: str, amount: int = 10) -> dict[str, Any]:
    return {"rowtime": at(clock), "ticker": ticker, "amount": amount}


def act(clock: str, ticker: str, kind: str) -> dict[str, Any]:
    return {"rowtime": at(clock), "ticker": ticker, "kind": kind}


STEPS = [
    StepInput({"orders": [order("10:01", "ORCL"), order("10:04", "MSFT")],
               "trades": [trade("10:02", "YHOO"), trade("10:03", "IBM")]}),
    StepInput({}, punctuations={"orders": [Punctuation(at("10:06"))]}),
    StepInput({"orders": [order("10:05:30", "HPQ")],
               "trades": [trade("10:03:30", "GOOG"), trade("10:02:30", "SAP"),
                          trade("10:04", "ZERO", 0)]}),
    StepInput({}, punctuations={"trades": [Punctuation(at("10:05"))]}),
]


def run() -> list[StepResult]:
    return evaluate(compile_sql(MERGE), STEPS)


def values(result: StepResult, view: str) -> list[Any]:
    return [r.value for r in result.outputs[view]]


def test_s17_union_forwards_each_branchs_rows_in_arrival_order() -> None:
    """Tables in program order, rows in arrival order; never reordered by time (S17)."""
    results = run()
    assert [values(r, "activity") for r in results] == [
        [act("10:01", "ORCL", "order"), act("10:04", "MSFT", "order"),
         act("10:02", "YHOO", "trade"), act("10:03", "IBM", "trade")],
        [],
        [act("10:03:30", "GOOG", "trade")],  # HPQ and SAP are late; ZERO fails WHERE
        [],
    ]


def test_s5_s6_each_table_of_a_union_keeps_its_own_gate() -> None:
    """HPQ (10:05:30) is late for orders (w = 10:06) though the union's waterline is 10:03;
    SAP (10:02:30) is late for trades (w = 10:03)."""
    results = run()
    assert [(d.table, d.reason, d.row["ticker"], d.waterline)
            for d in results[2].dead_letters] == [
        ("orders", "late", "HPQ", at("10:06")),
        ("trades", "late", "SAP", at("10:03")),
    ]
    assert [r.waterlines for r in results] == [
        {"orders": {"rowtime": at("10:04")}, "trades": {"rowtime": at("10:03")}},
        {"orders": {"rowtime": at("10:06")}, "trades": {"rowtime": at("10:03")}},
        {"orders": {"rowtime": at("10:06")}, "trades": {"rowtime": at("10:04")}},
        {"orders": {"rowtime": at("10:06")}, "trades": {"rowtime": at("10:05")}},
    ]


def test_s17_s14_union_waterline_is_the_minimum_of_its_branches() -> None:
    results = run()
    assert [r.view_waterlines["activity"] for r in results] == [
        at("10:03"), at("10:03"), at("10:04"), at("10:05")]
    assert [r.view_waterlines["per_five"] for r in results] == [
        at("10:03"), at("10:03"), at("10:04"), at("10:05")]


def test_s17_s11_aggregate_over_union_is_freed_by_the_minimum_waterline() -> None:
    """orders' bound 10:06 does not close [10:00, 10:05): trades is still at 10:03, and
    GOOG (10:03:30) joins it; the trades bound 10:05 closes it with 5 rows."""
    results = run()
    assert [values(r, "per_five") for r in results] == [
        [], [], [], [{"window_end": at("10:05"), "n": 5}]]
    assert [r.state_rows["per_five"] for r in results] == [1, 1, 1, 0]


def test_s17_union_of_one_table_twice_has_each_row_twice() -> None:
    circuit = compile_sql(MERGE.split("CREATE VIEW activity")[0] + """
        CREATE VIEW twice WITH ('topic' = 'twice') AS
        SELECT ticker FROM orders UNION ALL SELECT ticker FROM orders
        UNION ALL SELECT ticker FROM trades;""")
    results = evaluate(circuit, STEPS[:1])
    assert values(results[0], "twice") == [
        {"ticker": "ORCL"}, {"ticker": "ORCL"}, {"ticker": "MSFT"}, {"ticker": "MSFT"},
        {"ticker": "YHOO"}, {"ticker": "IBM"}]


def test_s10_a_branch_without_time_attribute_makes_the_column_plain() -> None:
    text = MERGE.split("CREATE VIEW activity")[0] + """
        CREATE LOCAL VIEW shifted AS SELECT CASE WHEN ticker = 'x' THEN rowtime
        - INTERVAL '1' DAY ELSE rowtime END AS rowtime, ticker FROM orders;
        CREATE LOCAL VIEW mixed AS
        SELECT rowtime, ticker FROM shifted UNION ALL SELECT rowtime, ticker FROM trades;
        CREATE VIEW bad WITH ('topic' = 'bad') AS SELECT window_end, COUNT(*) AS n
        FROM TABLE(TUMBLE(TABLE mixed, DESCRIPTOR(rowtime), INTERVAL '5' MINUTE))
        GROUP BY window_end;"""
    with pytest.raises(ProgramError, match="column rowtime is not a time attribute"):
        compile_sql(text)


def test_s17_time_attribute_of_a_union_names_every_branch() -> None:
    circuit = compile_sql(MERGE)
    (attr,) = circuit.view("activity").time_attributes
    assert (attr.column, attr.table, attr.kind) == ("rowtime", "activity", "forwarded")
    assert [(m.table, m.source_column) for m in attr.merged] == [
        ("orders", "rowtime"), ("trades", "rowtime")]
    assert circuit.view("activity").sources == ("orders", "trades")
    assert [c.name for c in circuit.view("activity").columns] == ["rowtime", "ticker", "kind"]


def test_s17_union_of_after_watermark_aggregates_cascades() -> None:
    """Each branch is a final per-minute count (S18); the union's window_end is a time
    attribute with the minimum waterline, so the 2-minute sum closes once both pass."""
    text = MERGE.split("CREATE VIEW activity")[0] + """
        CREATE LOCAL VIEW order_minutes AS SELECT window_end AS minute_end, COUNT(*) AS n
        FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rowtime), INTERVAL '1' MINUTE))
        GROUP BY window_end EMIT AFTER WATERMARK;
        CREATE LOCAL VIEW trade_minutes AS SELECT window_end AS minute_end, COUNT(*) AS n
        FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(rowtime), INTERVAL '1' MINUTE))
        GROUP BY window_end EMIT AFTER WATERMARK;
        CREATE LOCAL VIEW minutes AS SELECT minute_end, n FROM order_minutes
        UNION ALL SELECT minute_end, n FROM trade_minutes;
        CREATE VIEW sums WITH ('topic' = 'sums') AS SELECT minute_end, SUM(n) AS n
        FROM minutes GROUP BY minute_end EMIT AFTER WATERMARK;"""
    circuit = compile_sql(text)
    assert circuit.view("minutes").time_attributes[0].kind == "window_end"
    results = evaluate(circuit, STEPS)
    # Minutes ending 10:02: ORCL; 10:03: YHOO; 10:04: IBM, GOOG; 10:05: MSFT and ZERO (no
    # WHERE here). Union waterline after each step: 10:03, 10:03, 10:04, 10:05.
    assert [values(r, "sums") for r in results] == [
        [{"minute_end": at("10:02"), "n": 1}, {"minute_end": at("10:03"), "n": 1}],
        [],
        [{"minute_end": at("10:04"), "n": 2}],
        [{"minute_end": at("10:05"), "n": 2}],
    ]


def test_l3_language_doc_union_example_compiles_and_runs() -> None:
    """The UNION ALL example of docs/language.md is this file's MERGE program."""
    doc = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
    section = doc[doc.index("## UNION ALL"):]
    example = re.search(r"```sql\n(CREATE TABLE orders.*?)```", section, re.S)
    assert example is not None
    assert example[1].strip() == MERGE.strip()
    results = evaluate(compile_sql(example[1]), STEPS)
    assert [values(r, "per_five") for r in results] == [
        [], [], [], [{"window_end": at("10:05"), "n": 5}]]
