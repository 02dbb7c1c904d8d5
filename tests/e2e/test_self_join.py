"""A table joined with itself on Spark through the real broker (SPEC S5, S14, S16): each bid
with the bids of other bidders on the same auction in the ten seconds up to it (NEXMark's
shape). One query reads ``bids`` once; both sides of the join are its rows under two
aliases, and the query's watermark is the table's. LATENESS 0 (w = the largest ``ts`` seen):

    step  bids                                                   w(bids)
    1     10:00:00 #1 ann 10, 10:00:04 #1 bob 12, 10:00:03 #2 cid 5   10:00:04
    2     10:00:09 #1 cid 15, 10:00:12 #2 ann 7                       10:00:12
    3     10:00:02 #1 dan 11 (late), 10:00:16 #1 ann 20              10:00:16

A pair is written in the step its later row arrives; a bid is never paired with itself
(``a.bidder <> b.bidder``) nor with ann's own earlier bid; dan's late bid is a dead letter of
``bids`` and is on neither side. The INNER join runs on Spark's stream-stream join, the LEFT
OUTER one on Tidemark's join operator (ADR 0017), which writes a bid without an earlier one
padded in the step the waterline passes it. Hand-written expectations, and the reference
evaluator record for record.
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
    written,
)

from app.circuit.reference import evaluate
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE bids (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    auction BIGINT    NOT NULL,
    bidder  VARCHAR   NOT NULL,
    price   BIGINT    NOT NULL
) WITH ('topic' = '{bids}', 'dead_letter' = '{bids_dlq}');

CREATE VIEW outbid WITH ('topic' = '{out}', 'format' = 'append') AS
SELECT a.ts, a.auction, a.bidder, a.price, b.bidder AS earlier, b.price AS earlier_price
FROM bids AS a {kind}JOIN bids AS b
  ON a.auction = b.auction AND b.ts BETWEEN a.ts - INTERVAL '10' SECOND AND a.ts
 AND a.bidder <> b.bidder;
"""


def _bid(clock: str, auction: int, bidder: str, price: int) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "auction": auction, "bidder": bidder, "price": price}


STEPS: list[dict[str, list[Any]]] = [
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


def _run(
    kafka: Any, unique_topic: Any, tmp_path: Path, kind: str
) -> tuple[list[Counter[Any]], Counter[Any], Counter[Any], dict[str, str]]:
    """The program with ``kind`` JOIN run step by step: each step's new values, every
    record written, and the reference evaluator's records."""
    topics = {n: unique_topic(n) for n in ("bids", "bids_dlq", "out")}
    kafka.create_topic(topics["bids"], partitions=2)
    path = tmp_path / "self_join.sql"
    path.write_text(PROGRAM.format(kind=kind, **topics), encoding="utf-8")
    circuit = compile_program(path)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    (query,) = plan.queries
    assert query.tables == ("bids",)
    seen, new_rows = new_values_per_step(kafka, circuit, "outbid", topics["out"])
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS, after_step=new_rows)
    records = written(kafka, circuit, "outbid", topics["out"])
    return seen, records, oracle_written(evaluate(circuit, inputs), "outbid"), topics


def test_a_table_joined_with_itself_runs_on_spark_in_one_query_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    seen, records, oracle, topics = _run(kafka, unique_topic, tmp_path, "")
    assert seen == [
        Counter([_pair(("10:00:04", 1, "bob", 12), ("ann", 10))]),
        Counter([
            _pair(("10:00:09", 1, "cid", 15), ("ann", 10)),
            _pair(("10:00:09", 1, "cid", 15), ("bob", 12)),
            _pair(("10:00:12", 2, "ann", 7), ("cid", 5)),
        ]),
        Counter([_pair(("10:00:16", 1, "ann", 20), ("cid", 15))]),
    ]
    dead = read_topic(kafka.conf(), topics["bids_dlq"])
    assert [dict(m.headers())["tidemark.error.reason"] for m in dead] == [b"late"]
    assert records == oracle


def test_a_left_outer_self_join_pads_a_bid_once_the_waterline_passes_it_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """Ann's first bid and cid's bid on #2 have no earlier bid of another bidder: each is
    written padded in step 1, where w = 10:00:04 passes it (no earlier bid can come)."""
    seen, records, oracle, _ = _run(kafka, unique_topic, tmp_path, "LEFT OUTER ")
    assert seen == [
        Counter([
            _pair(("10:00:04", 1, "bob", 12), ("ann", 10)),
            _pair(("10:00:00", 1, "ann", 10), None),
            _pair(("10:00:03", 2, "cid", 5), None),
        ]),
        Counter([
            _pair(("10:00:09", 1, "cid", 15), ("ann", 10)),
            _pair(("10:00:09", 1, "cid", 15), ("bob", 12)),
            _pair(("10:00:12", 2, "ann", 7), ("cid", 5)),
        ]),
        Counter([_pair(("10:00:16", 1, "ann", 20), ("cid", 15))]),
    ]
    assert records == oracle
