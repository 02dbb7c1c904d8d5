"""Tables joined with themselves on Spark through the real broker (SPEC S5, S9, S14, S16).

Bids (NEXMark's shape), LATENESS 0 (w = the largest ``ts`` seen), in one query that reads
``bids`` once; both sides of each join are its rows under two aliases:

    step  bids                                                        w(bids)
    1     10:00:00 #1 ann 10, 10:00:04 #1 bob 12, 10:00:03 #2 cid 5   10:00:04
    2     10:00:09 #1 cid 15, 10:00:12 #2 ann 7                       10:00:12
    3     10:00:02 #1 dan 11 (late), 10:00:16 #1 ann 20               10:00:16

- ``outbid``: each bid with the bids of other bidders on its auction in the ten seconds up to
  it (INNER interval join, Spark's stream-stream join); a pair is written in the step its
  later row arrives, and a bid is never paired with itself (``a.bidder <> b.bidder``).
- ``outbid_or_first``: the same as LEFT OUTER JOIN (Tidemark's join operator, ADR 0017): a
  bid without an earlier one is written padded in the step the waterline passes it.
- ``same_window``: each bid's 10-second TUMBLE joined with the 10-second HOPs (every 5 s) of
  the same auction ending with it (INNER window join): every pair of bids of one auction and
  one tumbling window, a bid with itself included.

Dan's late bid is one dead letter of ``bids`` and is on no side. Hand-written expectations,
and the reference evaluator record for record.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from table_steps import (
    clock_ms,
    frozen,
    oracle_written,
    run_steps,
    watch_views,
    written,
)

from app.circuit.reference import evaluate
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

pytestmark = pytest.mark.e2e

BIDS = """
CREATE TABLE bids (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    auction BIGINT    NOT NULL,
    bidder  VARCHAR   NOT NULL,
    price   BIGINT    NOT NULL
) WITH ('topic' = '{bids}', 'dead_letter' = '{bids_dlq}');

CREATE VIEW outbid WITH ('topic' = '{outbid}', 'format' = 'append') AS
SELECT a.ts, a.auction, a.bidder, a.price, b.bidder AS earlier, b.price AS earlier_price
FROM bids AS a JOIN bids AS b
  ON a.auction = b.auction AND b.ts BETWEEN a.ts - INTERVAL '10' SECOND AND a.ts
 AND a.bidder <> b.bidder;

CREATE VIEW outbid_or_first WITH ('topic' = '{outbid_or_first}', 'format' = 'append') AS
SELECT a.ts, a.auction, a.bidder, a.price, b.bidder AS earlier, b.price AS earlier_price
FROM bids AS a LEFT JOIN bids AS b
  ON a.auction = b.auction AND b.ts BETWEEN a.ts - INTERVAL '10' SECOND AND a.ts
 AND a.bidder <> b.bidder;

CREATE LOCAL VIEW tens AS SELECT window_end, auction, bidder
FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND));

CREATE LOCAL VIEW hops AS SELECT window_start, window_end, auction, price
FROM TABLE(HOP(TABLE bids, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '10' SECOND));

CREATE VIEW same_window WITH ('topic' = '{same_window}', 'format' = 'append') AS
SELECT t.window_end, t.auction, t.bidder, h.price
FROM tens AS t JOIN hops AS h ON t.window_end = h.window_end AND t.auction = h.auction;
"""

VIEWS = ("outbid", "outbid_or_first", "same_window")


def _bid(clock: str, auction: int, bidder: str, price: int) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "auction": auction, "bidder": bidder, "price": price}


BID_STEPS: list[dict[str, list[Any]]] = [
    {"bids": [_bid("10:00:00", 1, "ann", 10), _bid("10:00:04", 1, "bob", 12),
              _bid("10:00:03", 2, "cid", 5)]},
    {"bids": [_bid("10:00:09", 1, "cid", 15), _bid("10:00:12", 2, "ann", 7)]},
    {"bids": [_bid("10:00:02", 1, "dan", 11), _bid("10:00:16", 1, "ann", 20)]},
]


def _pair(bid: tuple[str, int, str, int], earlier: tuple[str, int] | None) -> Any:
    clock, auction, bidder, price = bid
    return frozen({
        "ts": clock_ms(clock), "auction": auction, "bidder": bidder, "price": price,
        "earlier": None if earlier is None else earlier[0],
        "earlier_price": None if earlier is None else earlier[1],
    })


def _windowed(end: str, auction: int, pairs: list[tuple[str, int]]) -> Counter[Any]:
    return Counter(
        frozen({"window_end": clock_ms(end), "auction": auction, "bidder": b, "price": p})
        for b, p in pairs
    )


@pytest.mark.slow
def test_a_table_joined_with_itself_runs_on_spark_in_its_one_query_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {n: unique_topic(n) for n in ("bids", "bids_dlq", *VIEWS)}
    kafka.create_topic(topics["bids"], partitions=2)
    path = tmp_path / "self_join.sql"
    path.write_text(BIDS.format(**topics), encoding="utf-8")
    circuit = compile_program(path)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    (query,) = plan.queries
    assert query.tables == ("bids",)
    assert [plan.placement(v).state for v in VIEWS] == ["join", "join_operator", "join"]
    seen, after_step = watch_views(kafka, circuit, VIEWS, topics)
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, BID_STEPS, after_step=after_step)

    bob, cid1, ann2 = ("10:00:04", 1, "bob", 12), ("10:00:09", 1, "cid", 15), (
        "10:00:12", 2, "ann", 7)
    second = [_pair(cid1, ("ann", 10)), _pair(cid1, ("bob", 12)), _pair(ann2, ("cid", 5))]
    third = [_pair(("10:00:16", 1, "ann", 20), ("cid", 15))]
    assert seen["outbid"] == [Counter([_pair(bob, ("ann", 10))]), Counter(second),
                              Counter(third)]
    assert seen["outbid_or_first"] == [
        Counter([
            _pair(bob, ("ann", 10)),
            _pair(("10:00:00", 1, "ann", 10), None),
            _pair(("10:00:03", 2, "cid", 5), None),
        ]),
        Counter(second),
        Counter(third),
    ]
    assert seen["same_window"] == [
        _windowed("10:00:10", 1, [("ann", 10), ("ann", 12), ("bob", 10), ("bob", 12)])
        + _windowed("10:00:10", 2, [("cid", 5)]),
        _windowed("10:00:10", 1, [("cid", 10), ("cid", 12), ("cid", 15), ("ann", 15),
                                  ("bob", 15)])
        + _windowed("10:00:20", 2, [("ann", 7)]),
        _windowed("10:00:20", 1, [("ann", 20)]),
    ]
    dead = read_topic(kafka.conf(), topics["bids_dlq"])
    assert [dict(m.headers())["tidemark.error.reason"] for m in dead] == [b"late"]
    results = evaluate(circuit, inputs)
    for view in VIEWS:
        assert written(kafka, circuit, view, topics[view]) == oracle_written(results, view), view


RATES = """
CREATE TABLE rates (
    rowtime  TIMESTAMP      NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '0' SECOND,
    currency VARCHAR        NOT NULL METADATA FROM 'key',
    base     VARCHAR        NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = '{rates}', 'dead_letter' = '{rates_dlq}');

CREATE VIEW crossed WITH ('topic' = '{crossed}') AS
SELECT r.rowtime, r.currency, r.rate, b.rate AS base_rate
FROM rates AS r
LEFT JOIN rates FOR SYSTEM_TIME AS OF r.rowtime AS b
  ON r.base = b.currency;
"""


def _rate(clock: str, currency: str, base: str, rate: str) -> dict[str, Any]:
    return {"rowtime": clock_ms(clock), "currency": currency, "base": base, "rate": Decimal(rate)}


def _crossed(clock: str, currency: str, rate: str, base_rate: str | None) -> Any:
    return frozen({
        "rowtime": clock_ms(clock), "currency": currency, "rate": Decimal(rate),
        "base_rate": None if base_rate is None else Decimal(base_rate),
    })


def test_a_temporal_join_of_a_table_with_itself_sees_deletions_on_its_versions_side_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """Each rate with its base currency's rate valid at its time (Tidemark's join operator,
    ADR 0017), rates keyed by currency on a compacted topic: a row is written once
    w(rates) passes its time, USD's with its own version; EUR's tombstone at 9:20 ends EUR's
    rate for CHF at 9:25 (LEFT pads it) and is no probe row itself."""
    topics = {n: unique_topic(n) for n in ("rates", "rates_dlq", "crossed")}
    kafka.create_topic(topics["rates"], partitions=2, config={"cleanup.policy": "compact"})
    path = tmp_path / "temporal_self_join.sql"
    path.write_text(RATES.format(**topics), encoding="utf-8")
    circuit = compile_program(path)
    assert circuit.table("rates").deletes_by_tombstone
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    assert plan.placement("crossed").state == "join_operator"
    steps: list[dict[str, list[Any]]] = [
        {"rates": [_rate("9:00", "USD", "USD", "1.00"), _rate("9:00", "EUR", "USD", "1.10"),
                   _rate("9:10", "GBP", "EUR", "1.20")]},
        {"rates": [("delete", {"rowtime": clock_ms("9:20"), "currency": "EUR"}),
                   _rate("9:25", "CHF", "EUR", "1.05")]},
        {"rates": [("bound", clock_ms("9:40"))]},
    ]
    seen, after_step = watch_views(kafka, circuit, ["crossed"], topics)
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)
    assert seen["crossed"] == [
        Counter([_crossed("9:00", "USD", "1.00", "1.00"), _crossed("9:00", "EUR", "1.10", "1.00")]),
        Counter([_crossed("9:10", "GBP", "1.20", "1.10")]),
        Counter([_crossed("9:25", "CHF", "1.05", None)]),
    ]
    assert read_topic(kafka.conf(), topics["rates_dlq"]) == []
    oracle = oracle_written(evaluate(circuit, inputs), "crossed")
    assert written(kafka, circuit, "crossed", topics["crossed"]) == oracle
