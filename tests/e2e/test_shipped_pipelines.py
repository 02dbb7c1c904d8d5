"""pipelines/hop_purchases.sql and pipelines/nexmark_q7.sql as shipped, on test topics, through
the real broker and Spark (SPEC S5, S12, S13, S14): a few records in three ``--once`` steps,
a late one among them, compared with hand-written expectations and with the reference
evaluator record for record.

hop_purchases (HOP 15 minutes every 5, LATENESS 1 hour; times on 2026-11-26):

    step  purchases                                    w before  dead letters  w after
    1     10:01 #1 50.00, 10:07 #2 20.00, 10:12 #1 -60  -inf      -             09:12
    2     10:20 #1 30.00, 09:00 #2 10.00 (late)         09:12     late          09:20
    3     11:40 #2 5.00                                 09:20     -             10:40

nexmark_q7 (10-minute windows, LATENESS 4 minutes; the top bid of a window once final, by
ARG_MAX and, in the same query, by the paper's join of the bids with each window's maximum):

    step  bids                                         w after  rows written
    1     10:01 10 a, 10:03 30 b, 10:07 20 c            10:03    -
    2     10:12 5 d, 10:02 99 e (late), 10:05 40 f      10:08    -
    3     10:25 1 g                                     10:21    [10:00, 10:10) f, [10:10, 10:20) d
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from table_steps import (
    clock_ms,
    frozen,
    keyed_oracle,
    keyed_written,
    run_steps,
    shipped_copy,
)

from app.circuit.ir import Circuit
from app.circuit.reference import evaluate
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def _program(tmp: Path, name: str, topics: Mapping[str, str]) -> Circuit:
    return compile_program(shipped_copy(tmp, f"{name}.sql", topics))


def _late(kafka: Any, dlq: str) -> list[dict[str, str]]:
    return [
        {k: v.decode() for k, v in m.headers() if k.startswith("tidemark.")}
        for m in read_topic(kafka.conf(), dlq)
    ]


def _purchase(clock: str, card: int, amount: str) -> dict[str, Any]:
    return {"date_time": clock_ms(clock), "credit_card": card, "amount": Decimal(amount)}


def test_hop_purchases_runs_as_shipped_s12_s13_s14(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {k: unique_topic(k) for k in ("purchases", "card_spend", "changes")}
    kafka.create_topic(topics["purchases"], partitions=2)
    circuit = _program(
        tmp_path,
        "hop_purchases",
        {
            "purchases": topics["purchases"],
            "purchases.card_spend_15m": topics["card_spend"],
            "purchases.spend_15m_changes": topics["changes"],
        },
    )
    steps = [
        {
            "purchase": [
                _purchase("10:01", 1, "50.00"),
                _purchase("10:07", 2, "20.00"),
                _purchase("10:12", 1, "-60.00"),
            ]
        },
        {"purchase": [_purchase("10:20", 1, "30.00"), _purchase("09:00", 2, "10.00")]},
        {"purchase": [_purchase("11:40", 2, "5.00")]},
    ]
    reports, inputs = run_steps(kafka, tmp_path, circuit, {"purchase": topics["purchases"]}, steps)
    expected = evaluate(circuit, inputs)

    data_steps = [r for r in reports if r.step is not None]
    assert [r.waterlines["date_time"] for r in data_steps] == [
        clock_ms("09:12"),
        clock_ms("09:20"),
        clock_ms("10:40"),
    ]
    assert [r.dead_letters.get("late", 0) for r in data_steps] == [0, 1, 0]
    [late] = _late(kafka, topics["purchases"] + ".dlq")
    assert late["tidemark.error.reason"] == "late"
    assert late["tidemark.late.value"] == "2026-11-26T09:00:00.000Z"

    card_spend = keyed_written(kafka, circuit, "card_spend_15m", topics["card_spend"])
    assert card_spend == keyed_oracle(expected, "card_spend_15m")
    final: dict[tuple[int, int], Any] = {}
    for key, value, _mark in card_spend.elements():
        assert key is not None
        k = dict(key)
        if value is None:  # HAVING SUM(amount) > 0 no longer holds: a tombstone
            final.pop((k["window_start"], k["credit_card"]), None)
        else:
            final[(k["window_start"], k["credit_card"])] = (
                dict(value)["purchases"],
                dict(value)["total"],
            )
    # Card 1's 10:12 refund makes its 10:00, 10:05 and 10:10 windows non-positive.
    assert final[(clock_ms("09:50"), 1)] == (1, Decimal("50.00"))
    assert (clock_ms("10:00"), 1) not in final and (clock_ms("10:05"), 1) not in final
    assert (clock_ms("10:10"), 1) not in final, "-60.00, then -30.00: never positive"
    assert final[(clock_ms("10:15"), 1)] == (1, Decimal("30.00"))
    assert final[(clock_ms("10:20"), 1)] == (1, Decimal("30.00"))
    assert final[(clock_ms("11:30"), 2)] == (1, Decimal("5.00"))

    changes = keyed_written(kafka, circuit, "spend_15m_changes", topics["changes"])
    assert changes == keyed_oracle(expected, "spend_15m_changes")
    firsts = [dict(v) for _k, v, _m in changes if v is not None and dict(v)["ver"] == 0]
    assert {v["window_end"] for v in firsts} >= {
        clock_ms("10:05"),
        clock_ms("10:35"),
        clock_ms("11:45"),
    }


def _bid(clock: str, price: int, item: str) -> dict[str, Any]:
    return {"bidtime": clock_ms(clock), "price": price, "item": item}


def test_nexmark_q7_runs_as_shipped_s5_s12_s14(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {k: unique_topic(k) for k in ("bids", "q7", "q7_join")}
    kafka.create_topic(topics["bids"], partitions=2)
    circuit = _program(
        tmp_path,
        "nexmark_q7",
        {
            "nexmark.bids": topics["bids"],
            "nexmark.q7": topics["q7"],
            "nexmark.q7_join": topics["q7_join"],
        },
    )
    steps = [
        {"bid": [_bid("10:01", 10, "a"), _bid("10:03", 30, "b"), _bid("10:07", 20, "c")]},
        {"bid": [_bid("10:12", 5, "d"), _bid("10:02", 99, "e"), _bid("10:05", 40, "f")]},
        {"bid": [_bid("10:25", 1, "g")]},
    ]
    reports, inputs = run_steps(kafka, tmp_path, circuit, {"bid": topics["bids"]}, steps)
    expected = evaluate(circuit, inputs)

    data_steps = [r for r in reports if r.step is not None]
    assert [r.waterlines["bidtime"] for r in data_steps] == [
        clock_ms("10:03"),
        clock_ms("10:08"),
        clock_ms("10:21"),
    ]
    [late] = _late(kafka, topics["bids"] + ".dlq")
    assert late["tidemark.late.value"] == "2026-11-26T10:02:00.000Z"

    rows = keyed_written(kafka, circuit, "max_bid", topics["q7"])
    assert rows == keyed_oracle(expected, "max_bid")
    # The paper's join form (listing 2), in the same query: the same rows (no two bids of a
    # window tie), each written once its window's maximum is final.
    joined = keyed_written(kafka, circuit, "max_bid_join", topics["q7_join"])
    assert joined == keyed_oracle(expected, "max_bid_join")
    assert Counter(value for _, value, _ in joined) == Counter(value for _, value, _ in rows)
    # wstart leads the view, so the header is the start of w(bidtime)'s window (S10).
    header = "2026-11-26T10:20:00.000Z"
    assert rows == Counter(
        [
            (
                None,
                frozen(
                    {
                        "wstart": clock_ms("10:00"),
                        "wend": clock_ms("10:10"),
                        "bidtime": clock_ms("10:05"),
                        "price": 40,
                        "item": "f",
                    }
                ),
                header,
            ),
            (
                None,
                frozen(
                    {
                        "wstart": clock_ms("10:10"),
                        "wend": clock_ms("10:20"),
                        "bidtime": clock_ms("10:12"),
                        "price": 5,
                        "item": "d",
                    }
                ),
                header,
            ),
        ]
    )
