"""Window Top-N on Spark through the real broker (docs/language.md, S11, S12, S14, ADR 0020):
each window's best rows written once, when the waterline completes the window, equal to the
reference evaluator record for record, in both of Spark's shapes: ranked per step over an
EMIT AFTER WATERMARK aggregate's final rows (ROW_NUMBER and RANK), and held in Spark's state
over a window function's rows (ROW_NUMBER's best rows; every row of the window for RANK and
for ORDER BY keys in both directions).

bid (LATENESS 1 minute), windows of 10 minutes:

    step  bids                                          w after  [8:00, 8:10) complete?
    1     a 5 8:01, b 7 8:02, a 4 8:03, c 7 8:04, d 1 8:05  8:04
    2     e 20 8:09, b 1 8:12                              8:11     yes: written
    3     a 100 8:05 (late), c 3 8:15                      8:14
    4     bound 8:21                                       8:20     [8:10, 8:20) written

Sums in [8:00, 8:10): e 20, a 9, b 7, c 7, d 1; in [8:10, 8:20): c 3, b 1. The second
aggregate leaves out bids of 1: Spark reuses the exchange of two equal aggregations in one
query, and the second then writes its windows a step later (on the next input).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from table_steps import clock_ms, frozen, new_values_per_step, oracle_written, run_steps, written

from app.circuit.reference import evaluate
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

# Slow (CI's budget): CI's native differential runs 5 window Top-N views, and
# test_top_n_composed one over an aggregate read through a stage boundary.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROGRAM = """
CREATE TABLE bid (
    ts    TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    item  VARCHAR NOT NULL,
    price BIGINT NOT NULL
) WITH ('topic' = '{bid}', 'dead_letter' = '{bid_dlq}');

CREATE VIEW top_items WITH ('topic' = '{top_items}') AS
SELECT * FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end
                               ORDER BY total DESC) AS rownum
  FROM (SELECT window_start, window_end, item, SUM(price) AS total
        FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' MINUTES))
        GROUP BY window_start, window_end, item))
WHERE rownum <= 2;

CREATE VIEW ranked_items WITH ('topic' = '{ranked_items}') AS
WITH sums AS (SELECT window_start, window_end, item, SUM(price) AS total
              FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' MINUTES))
              WHERE price > 1
              GROUP BY window_start, window_end, item)
SELECT window_end, item, total, r FROM (
  SELECT *, RANK() OVER (PARTITION BY window_end ORDER BY total DESC) AS r FROM sums)
WHERE r <= 3;

CREATE VIEW top_bids WITH ('topic' = '{top_bids}') AS
SELECT item, price, window_end FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end
                               ORDER BY price DESC) AS rownum
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' MINUTES)))
WHERE rownum <= 2;

CREATE VIEW rank_bids WITH ('topic' = '{rank_bids}') AS
SELECT item, price, window_end, r FROM (
  SELECT *, RANK() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) AS r
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' MINUTES)))
WHERE r <= 2;

CREATE VIEW first_bids WITH ('topic' = '{first_bids}') AS
SELECT item, price, window_end, rn FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end
                               ORDER BY price DESC, item ASC) AS rn
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' MINUTES)))
WHERE rn <= 2;
"""


def _bid(clock: str, item: str, price: int) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "item": item, "price": price}


def test_s12_each_windows_best_rows_are_written_once_when_the_window_is_complete(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    names = ("bid", "bid_dlq", "top_items", "ranked_items", "top_bids", "rank_bids",
             "first_bids")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["bid"], partitions=2)
    program = tmp_path / "top_n.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    steps: list[dict[str, list[Any]]] = [
        {"bid": [_bid("8:01", "a", 5), _bid("8:02", "b", 7), _bid("8:03", "a", 4),
                 _bid("8:04", "c", 7), _bid("8:05", "d", 1)]},
        {"bid": [_bid("8:09", "e", 20), _bid("8:12", "b", 1)]},
        {"bid": [_bid("8:05", "a", 100), _bid("8:15", "c", 3)]},
        {"bid": [("bound", clock_ms("8:21"))]},
    ]
    views = ("top_items", "ranked_items", "top_bids", "rank_bids", "first_bids")
    seen = {}
    callbacks = []
    for view in views:
        seen[view], callback = new_values_per_step(kafka, circuit, view, topics[view])
        callbacks.append(callback)

    def after_step() -> None:
        for callback in callbacks:
            callback()

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)

    def item(name: str, total: int, start: str, end: str, rownum: int) -> Any:
        return frozen({"window_start": clock_ms(start), "window_end": clock_ms(end),
                       "item": name, "total": total, "rownum": rownum})

    def ranked(name: str, total: int, end: str, r: int) -> Any:
        return frozen({"window_end": clock_ms(end), "item": name, "total": total, "r": r})

    def bid(name: str, price: int, end: str) -> Any:
        return frozen({"item": name, "price": price, "window_end": clock_ms(end)})

    assert seen["top_items"] == [
        Counter(),
        Counter([item("e", 20, "8:00", "8:10", 1), item("a", 9, "8:00", "8:10", 2)]),
        Counter(),
        Counter([item("c", 3, "8:10", "8:20", 1), item("b", 1, "8:10", "8:20", 2)]),
    ]
    # RANK: b and c tie third, so four rows pass r <= 3; bids of 1 are filtered out.
    assert seen["ranked_items"] == [
        Counter(),
        Counter([ranked("e", 20, "8:10", 1), ranked("a", 9, "8:10", 2),
                 ranked("b", 7, "8:10", 3), ranked("c", 7, "8:10", 3)]),
        Counter(),
        Counter([ranked("c", 3, "8:20", 1)]),
    ]
    # ROW_NUMBER over the bids: b and c tie at 7; c (8:04) is second by the tie rule.
    assert [sum(s.values()) for s in seen["top_bids"]] == [0, 2, 0, 2]
    assert sum(seen["top_bids"], Counter()) == Counter(
        [bid("e", 20, "8:10"), bid("c", 7, "8:10"), bid("c", 3, "8:20"), bid("b", 1, "8:20")])
    # RANK over the bids: b and c tie second at 7, both kept; ROW_NUMBER by price DESC,
    # item ASC: b before c.
    def place(name: str, price: int, end: str, column: str, number: int) -> Any:
        return frozen({"item": name, "price": price, "window_end": clock_ms(end),
                       column: number})

    assert seen["rank_bids"] == [
        Counter(),
        Counter([place("e", 20, "8:10", "r", 1), place("b", 7, "8:10", "r", 2),
                 place("c", 7, "8:10", "r", 2)]),
        Counter(),
        Counter([place("c", 3, "8:20", "r", 1), place("b", 1, "8:20", "r", 2)]),
    ]
    assert seen["first_bids"] == [
        Counter(),
        Counter([place("e", 20, "8:10", "rn", 1), place("b", 7, "8:10", "rn", 2)]),
        Counter(),
        Counter([place("c", 3, "8:20", "rn", 1), place("b", 1, "8:20", "rn", 2)]),
    ]
    late = read_topic(kafka.conf(), topics["bid_dlq"])
    assert [dict(m.headers())["tidemark.error.reason"] for m in late] == [b"late"]
    oracle = evaluate(circuit, inputs)
    for view in views:
        assert written(kafka, circuit, view, topics[view]) == oracle_written(oracle, view), view
