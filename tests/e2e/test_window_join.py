"""An INNER window join on Spark through the real broker (SPEC S9, S10, S14, S16): users who
clicked and ordered in the same minute. Each table is windowed by a one-minute TUMBLE in a
local view; the join matches on ``window_start``, ``window_end`` and the user, in one Spark
query of both tables (ADR 0013) on Spark's stream-stream join. LATENESS 0 on both tables:

    step  clicks                              orders                          w(c)      w(o)
    1     10:00:05 ann home, 10:00:20 bob     10:00:30 ann 30                 10:00:20  10:00:30
    2     10:01:10 ann news                   10:00:50 bob 12                 10:01:10  10:00:50
    3     10:00:40 ann (late), 10:02:05 cid   10:01:40 cid 7, 10:01:45 ann 5  10:02:05  10:01:45

A match is written in the step its second row arrives; window_start leads the view, so its
header is S10's start waterline, the start of the minute holding min(w(c), w(o)); cid's click
and order fall in different minutes; the late click is a dead letter of clicks. Hand-written
expectations, and the reference evaluator record for record.
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
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE clicks (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    usr  VARCHAR   NOT NULL,
    page VARCHAR   NOT NULL
) WITH ('topic' = '{clicks}', 'dead_letter' = '{clicks_dlq}');

CREATE TABLE orders (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    usr    VARCHAR   NOT NULL,
    amount INT       NOT NULL
) WITH ('topic' = '{orders}', 'dead_letter' = '{orders_dlq}');

CREATE LOCAL VIEW click_minutes AS
SELECT * FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE));

CREATE LOCAL VIEW order_minutes AS
SELECT window_start, window_end, usr, amount
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' MINUTE));

CREATE VIEW clicked_and_ordered WITH ('topic' = '{out}', 'format' = 'append') AS
SELECT c.window_start, c.window_end, c.usr, c.page, o.amount
FROM click_minutes AS c JOIN order_minutes AS o
  ON c.window_start = o.window_start AND c.window_end = o.window_end AND c.usr = o.usr;
"""


def _click(clock: str, usr: str, page: str) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "usr": usr, "page": page}


def _order(clock: str, usr: str, amount: int) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "usr": usr, "amount": amount}


STEPS: list[dict[str, list[Any]]] = [
    {
        "clicks": [_click("10:00:05", "ann", "home"), _click("10:00:20", "bob", "cart")],
        "orders": [_order("10:00:30", "ann", 30)],
    },
    {"clicks": [_click("10:01:10", "ann", "news")], "orders": [_order("10:00:50", "bob", 12)]},
    {
        "clicks": [_click("10:00:40", "ann", "late"), _click("10:02:05", "cid", "home")],
        "orders": [_order("10:01:40", "cid", 7), _order("10:01:45", "ann", 5)],
    },
]


def _match(minute: str, usr: str, page: str, amount: int, header: str) -> Any:
    start = clock_ms(minute)
    value = {
        "window_start": start,
        "window_end": start + 60_000,
        "usr": usr,
        "page": page,
        "amount": amount,
    }
    return (frozen(value), format_time_value(clock_ms(header), "ms"))


@pytest.mark.slow  # CI's budget: the FULL OUTER case below runs the same steps
def test_a_window_join_runs_on_spark_and_matches_within_the_minute_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {n: unique_topic(n) for n in ("clicks", "clicks_dlq", "orders", "orders_dlq", "out")}
    for table in ("clicks", "orders"):
        kafka.create_topic(topics[table], partitions=2)
    path = tmp_path / "window_join.sql"
    path.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(path)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    (query,) = plan.queries
    assert query.tables == ("clicks", "orders")

    reports, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS)

    matches = written(kafka, circuit, "clicked_and_ordered", topics["out"])
    assert matches == Counter(
        [
            _match("10:00", "ann", "home", 30, "10:00"),
            _match("10:00", "bob", "cart", 12, "10:00"),
            _match("10:01", "ann", "news", 5, "10:01"),
        ]
    )
    dead = read_topic(kafka.conf(), topics["clicks_dlq"])
    assert [dict(m.headers())["tidemark.error.reason"] for m in dead] == [b"late"]
    assert read_topic(kafka.conf(), topics["orders_dlq"]) == []
    last = {r.table: r.waterlines for r in reports if r.step is not None}
    assert last == {"clicks": {"ts": clock_ms("10:02:05")}, "orders": {"ts": clock_ms("10:01:45")}}

    assert matches == oracle_written(evaluate(circuit, inputs), "clicked_and_ordered")


def test_a_full_outer_window_join_pads_a_window_once_the_other_side_passes_it_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """The same steps as FULL OUTER JOIN, on Tidemark's join operator (ADR 0017): matches in
    the same steps; cid's order of the 10:01 minute is written padded in step 3, when
    w(clicks) = 10:02:05 passes that window's end (no click of it can come); cid's click of
    10:02 waits for w(orders) to pass 10:03, which these steps do not reach."""
    topics = {n: unique_topic(n) for n in ("clicks", "clicks_dlq", "orders", "orders_dlq", "out")}
    for table in ("clicks", "orders"):
        kafka.create_topic(topics[table], partitions=2)
    path = tmp_path / "outer_window_join.sql"
    path.write_text(
        PROGRAM.format(**topics).replace("AS c JOIN", "AS c FULL OUTER JOIN"), encoding="utf-8"
    )
    circuit = compile_program(path)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    assert plan.placement("clicked_and_ordered").state == "join_operator"
    seen, new_rows = new_values_per_step(kafka, circuit, "clicked_and_ordered", topics["out"])
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS, after_step=new_rows)

    def value(minute: str | None, usr: str | None, page: str | None, amount: int) -> Any:
        start = None if minute is None else clock_ms(minute)
        return frozen({
            "window_start": start, "window_end": None if start is None else start + 60_000,
            "usr": usr, "page": page, "amount": amount,
        })

    assert seen == [
        Counter([value("10:00", "ann", "home", 30)]),
        Counter([value("10:00", "bob", "cart", 12)]),
        Counter([value("10:01", "ann", "news", 5), value(None, None, None, 7)]),
    ]
    assert written(kafka, circuit, "clicked_and_ordered", topics["out"]) == oracle_written(
        evaluate(circuit, inputs), "clicked_and_ordered"
    )
