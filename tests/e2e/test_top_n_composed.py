"""A window Top-N over an aggregate's final rows read through a stage boundary, on Spark
through the real broker (docs/language.md, S11, S12, S19, ADR 0020, ADR 0023): Flink's own
documentation example, a DECIMAL SUM per item ranked per window, which one query cannot run
(the Python state operator computes a DECIMAL SUM and writes records, not readable rows).

The planner writes the ranked subquery to an internal topic; a later query reads it back and
holds each window's rows in Spark's own aggregation, keyed by ``window_end``, until the
punctuated waterline passes the window's end, then ranks them with the reference
evaluator's rule. Each query reads at most 4 records a step, so a window's rows reach the
ranking query over several of its steps (ranking each step's rows alone would be wrong).

bid (LATENESS 1 minute), windows of 10 minutes; the bids of a step lie within a minute of
each other, so however a query splits a step, none is late but the one meant to be:

    step  bids                                          w(ts) after  complete
    1     a 5.00 8:09:00, b 7.25 8:09:10, a 4.50 8:09:20, 8:08:50      -
          c 7.25 8:09:30, d 1.00 8:09:40, e 12.50 8:09:50
    2     b 2.00 8:10:30, a 100.00 8:08 (late),          8:10         [8:00, 8:10)
          f 3.00 8:11:00
    3     bound 8:21                                     8:20         [8:10, 8:20)

Sums in [8:00, 8:10): e 12.50, a 9.50, b 7.25, c 7.25, d 1.00; in [8:10, 8:20): f 3.00,
b 2.00. ROW_NUMBER's tie of b and c is broken by the rows' columns in the key's direction
(c before b). The ranking query writes each window in the step the reference evaluator
does: the step's no-data batch evicts the groups, the punctuation that follows them moves the
reader's waterline, and the reader's own no-data batch writes the window.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from table_steps import clock_ms, frozen, internal_dead_letters, new_values_per_step, run_steps

from app.circuit.reference import evaluate
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.compose import compose
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE bid (
    ts    TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    item  VARCHAR NOT NULL,
    price DECIMAL(10, 2) NOT NULL
) WITH ('topic' = '{bid}', 'dead_letter' = '{bid_dlq}');

CREATE VIEW top_items WITH ('topic' = '{top_items}') AS
SELECT * FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY total DESC)
         AS rownum
  FROM (SELECT window_start, window_end, item, SUM(price) AS total
        FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' MINUTES))
        GROUP BY window_start, window_end, item))
WHERE rownum <= 3;
"""


def _bid(clock: str, item: str, price: str) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "item": item, "price": Decimal(price)}


def test_s19_a_window_top_n_ranks_an_aggregates_final_rows_read_through_a_stage_boundary(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any, monkeypatch: Any
) -> None:
    names = ("bid", "bid_dlq", "top_items")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["bid"], partitions=2)
    program = tmp_path / "top_n.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    # One query refuses the Top-N (its aggregate runs on the Python state operator);
    # composed, the aggregate is a boundary and the Top-N is held in the reading query.
    assert refused_by_spark(circuit, physical_plan(circuit)) != ()
    composed = compose(circuit)
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"top_items.subquery1.subquery1"})
    assert {v.view: v.top_n for q in composed.physical.queries for v in q.views
            if v.top_n is not None} == {"top_items": "held"}
    # A window's rows reach the ranking query over several of its steps.
    settings = kafka.settings
    monkeypatch.setattr(kafka, "settings", lambda checkpoint, **values: settings(
        checkpoint, max_records_per_step=4, **values))
    steps: list[dict[str, list[Any]]] = [
        {"bid": [_bid("8:09:00", "a", "5.00"), _bid("8:09:10", "b", "7.25"),
                 _bid("8:09:20", "a", "4.50"), _bid("8:09:30", "c", "7.25"),
                 _bid("8:09:40", "d", "1.00"), _bid("8:09:50", "e", "12.50")]},
        {"bid": [_bid("8:10:30", "b", "2.00"), _bid("8:08", "a", "100.00"),
                 _bid("8:11", "f", "3.00")]},
        {"bid": [("bound", clock_ms("8:21"))]},
    ]
    seen, after_step = new_values_per_step(kafka, circuit, "top_items", topics["top_items"])
    reports, inputs = run_steps(kafka, tmp_path, circuit, topics, steps,
                                after_step=after_step)

    def item(name: str, total: str, start: str, end: str, rownum: int) -> Any:
        return frozen({"window_start": clock_ms(start), "window_end": clock_ms(end),
                       "item": name, "total": Decimal(total), "rownum": rownum})

    assert seen == [
        Counter(),
        Counter([item("e", "12.50", "8:00", "8:10", 1), item("a", "9.50", "8:00", "8:10", 2),
                 item("c", "7.25", "8:00", "8:10", 3)]),
        Counter([item("f", "3.00", "8:10", "8:20", 1), item("b", "2.00", "8:10", "8:20", 2)]),
    ]
    # No step of the ranking query read all five rows of [8:00, 8:10): Spark held them.
    reading = [r.accepted for r in reports if r.table == "__in_top_items_subquery1_subquery1"]
    assert sum(reading) == 7 and max(reading) < 5, reading
    # The late bid is routed once, by its table; nothing is late downstream (S19).
    late = read_topic(kafka.conf(), topics["bid_dlq"])
    assert [dict(m.headers())["tidemark.error.reason"] for m in late] == [b"late"]
    assert internal_dead_letters(kafka, tmp_path / "ck", "top_items.subquery1.subquery1") == []
    # Equal to the reference evaluator, which runs the program in one query (S8, S19): here
    # in the same steps too.
    oracle = evaluate(circuit, inputs)
    assert seen == [Counter(frozen(r.value or {}) for r in result.outputs["top_items"])
                    for result in oracle]
