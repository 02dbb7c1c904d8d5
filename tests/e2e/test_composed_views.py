"""Views over views on Spark through stage boundaries (SPEC S18, S19, ADR 0023), through the
real broker, step by step against hand-written rows and against the reference evaluator.

The alert a Flink SQL or ksqlDB user writes first: clicks counted per minute, EMIT AFTER
WATERMARK, in a LOCAL view; a filter over it, and two cascades over it, on the minute's start
(2 minutes) and on its end (3 minutes). One query cannot run the filter or the cascade on the
start (Spark's aggregation writes rows, not readable rows); the planner writes ``per_min`` to
an internal topic and a second query reads it back, with its waterline from the punctuations
the first query writes after each step.

clicks (LATENESS 10 s), minutes:

    step  clicks                          w(ts) after  per_min final rows
    1     a 8:00:10, a 8:00:20, b 8:00:30  8:00:20     -
    2     a 8:00:50, b 8:01:15, a 8:01:20  8:01:10     [8:00, 8:01) a 3, b 1
    3     a 8:01:30, b 8:02:20              8:02:10     [8:01, 8:02) a 2, b 1
    4     bound 8:07                        8:06:50     [8:02, 8:03) b 1

alerts (c > 1): (8:01, a, 3) in step 2, (8:02, a, 2) in step 3: the second query reads
``per_min``'s rows in the step that writes them. per_3min (TUMBLE on minute_end) runs in the
first query, as before: [8:00, 8:03) 7 and [8:03, 8:06) 1 in step 4. per_2min (TUMBLE on
minute_start) runs in the second query, whose table lists minute_start first, with its own
waterline (S10: the start of the minute w(ts) is in, 8:02 after step 3), not one derived
from minute_end: [8:00, 8:02) 7 is written in step 3, as the reference evaluator writes it
in one query, and [8:02, 8:04) 1 in step 4 (S19: a composed view's rows may come steps
later, never earlier, and equal).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from table_steps import (
    clock_ms,
    frozen,
    internal_dead_letters,
    oracle_values,
    run_steps,
    values_written,
    watch_views,
)

from app.circuit.reference import evaluate
from app.connectors.output_reader import OutputReader
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.compose import compose
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr VARCHAR NOT NULL
) WITH ('topic' = '{clicks}', 'dead_letter' = '{clicks_dlq}');

CREATE LOCAL VIEW per_min AS
SELECT window_start AS minute_start, window_end AS minute_end, usr, COUNT(*) AS c
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr EMIT AFTER WATERMARK;

CREATE VIEW alerts WITH ('topic' = '{alerts}') AS
SELECT minute_end, usr, c FROM per_min WHERE c > 1;

CREATE VIEW per_2min WITH ('topic' = '{per_2min}', 'format' = 'append') AS
SELECT window_start, window_end, SUM(c) AS total
FROM TABLE(TUMBLE(TABLE per_min, DESCRIPTOR(minute_start), INTERVAL '2' MINUTE))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;

CREATE VIEW per_3min WITH ('topic' = '{per_3min}', 'format' = 'append') AS
SELECT window_start, window_end, SUM(c) AS total
FROM TABLE(TUMBLE(TABLE per_min, DESCRIPTOR(minute_end), INTERVAL '3' MINUTE))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;
"""


def _click(clock: str, usr: str) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "usr": usr}


def test_s19_a_filter_and_a_cascade_over_an_aggregate_view_run_through_a_stage_boundary(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    names = ("clicks", "clicks_dlq", "alerts", "per_2min", "per_3min")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["clicks"], partitions=2)
    program = tmp_path / "alerts.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    # One query refuses the filter and the cascade on the start; composed, nothing is refused.
    assert refused_by_spark(circuit, physical_plan(circuit)) != ()
    composed = compose(circuit)
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"per_min"})
    steps: list[dict[str, list[Any]]] = [
        {"clicks": [_click("8:00:10", "a"), _click("8:00:20", "a"), _click("8:00:30", "b")]},
        {"clicks": [_click("8:00:50", "a"), _click("8:01:15", "b"), _click("8:01:20", "a")]},
        {"clicks": [_click("8:01:30", "a"), _click("8:02:20", "b")]},
        {"clicks": [("bound", clock_ms("8:07"))]},
    ]
    views = ("alerts", "per_2min", "per_3min")
    seen, after_step = watch_views(kafka, circuit, views, topics)
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)

    def alert(end: str, usr: str, c: int) -> Any:
        return frozen({"minute_end": clock_ms(end), "usr": usr, "c": c})

    def total(start: str, end: str, n: int) -> Any:
        return frozen({"window_start": clock_ms(start), "window_end": clock_ms(end), "total": n})

    assert seen["alerts"] == [
        Counter(), Counter([alert("8:01", "a", 3)]), Counter([alert("8:02", "a", 2)]), Counter()
    ]
    assert seen["per_3min"] == [
        Counter(), Counter(), Counter(),
        Counter([total("8:00", "8:03", 7), total("8:03", "8:06", 1)]),
    ]
    assert seen["per_2min"] == [
        Counter(), Counter(), Counter([total("8:00", "8:02", 7)]),
        Counter([total("8:02", "8:04", 1)]),
    ]
    # Nothing is late downstream: a late row is routed once, by its table (S19).
    assert read_topic(kafka.conf(), topics["clicks_dlq"]) == []
    assert internal_dead_letters(kafka, tmp_path / "ck", "per_min") == []
    # Equal to the reference evaluator, which runs the program in one query (S8, S19).
    oracle = evaluate(circuit, inputs)
    for view in views:
        assert values_written(kafka, circuit, view, topics[view]) == oracle_values(
            oracle, view), view


TRADING = """
CREATE TABLE orders (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,
    id  BIGINT NOT NULL,
    sym VARCHAR NOT NULL,
    qty BIGINT NOT NULL
) WITH ('topic' = '{orders}', 'dead_letter' = '{orders_dlq}');

CREATE TABLE trades (
    ts    TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,
    sym   VARCHAR NOT NULL,
    price BIGINT NOT NULL
) WITH ('topic' = '{trades}', 'dead_letter' = '{trades_dlq}');

CREATE VIEW matched WITH ('topic' = '{matched}') AS
SELECT o.id, o.sym, o.ts, o.qty, t.price FROM orders o JOIN trades t
ON o.sym = t.sym AND t.ts BETWEEN o.ts - INTERVAL '1' MINUTE AND o.ts + INTERVAL '1' MINUTE;

CREATE VIEW trades_per_min WITH ('topic' = '{trades_per_min}', 'format' = 'append') AS
SELECT window_start, window_end, sym, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, sym EMIT AFTER WATERMARK;

CREATE VIEW hourly WITH ('topic' = '{hourly}', 'format' = 'append') AS
SELECT window_start, window_end, sym, SUM(qty * price) AS notional
FROM TABLE(TUMBLE(TABLE matched, DESCRIPTOR(ts), INTERVAL '1' HOUR))
GROUP BY window_start, window_end, sym EMIT AFTER WATERMARK;

CREATE VIEW orders_min WITH ('topic' = '{orders_min}') AS
SELECT window_start AS os, window_end AS oe, sym, SUM(qty) AS qty
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, sym EMIT AFTER WATERMARK;

CREATE VIEW big_minutes WITH ('topic' = '{big_minutes}') AS
SELECT sym, oe, qty FROM orders_min WHERE qty >= 3;

CREATE LOCAL VIEW trades_5min AS
SELECT window_start AS ts5, window_end AS te, sym, MAX(price) AS top
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '5' MINUTE))
GROUP BY window_start, window_end, sym EMIT AFTER WATERMARK;

CREATE VIEW aligned WITH ('topic' = '{aligned}') AS
SELECT m.sym, m.oe, m.qty, f.te, f.top FROM orders_min m JOIN trades_5min f
ON m.sym = f.sym AND m.oe BETWEEN f.te - INTERVAL '5' MINUTE AND f.te;
"""


@pytest.mark.slow  # three stages per step: ~3 min (`-m slow -k joins_and_aggregates`)
def test_s19_joins_and_aggregates_over_each_other_run_through_stage_boundaries(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """orders JOIN trades beside trades counted per minute; an hourly sum over the join
    view (which also writes its own topic); a filter over an upsert-written aggregate; a join
    of two aggregate views whose windows differ (1 and 5 minutes). LATENESS 5 s.

        step  orders (ts id sym qty)          trades (ts sym price)
        1     8:00:10 1 X 2, 8:00:40 2 Y 1    8:00:20 X 10, 8:00:30 Y 20
        2     8:01:10 3 X 3                   8:01:20 X 11, 8:02:00 X 12
        3     bound 9:10                      bound 9:10

    The join matches o1-t1 and o2-t2 in step 1, o3 with t1, t3 and t4 in step 2. Hourly
    X = 2*10 + 3*(10+11+12) = 119, Y = 20, once both waterlines pass 9:00 (step 3).
    """
    names = ("orders", "orders_dlq", "trades", "trades_dlq", "matched", "trades_per_min",
             "hourly", "orders_min", "big_minutes", "aligned")
    topics = {name: unique_topic(name) for name in names}
    for table in ("orders", "trades"):
        kafka.create_topic(topics[table], partitions=2)
    program = tmp_path / "trading.sql"
    program.write_text(TRADING.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    composed = compose(circuit)
    assert composed.refused == ()
    assert {"matched", "orders_min", "trades_5min"} <= composed.boundaries
    ms = clock_ms
    steps: list[dict[str, list[Any]]] = [
        {"orders": [{"ts": ms("8:00:10"), "id": 1, "sym": "X", "qty": 2},
                    {"ts": ms("8:00:40"), "id": 2, "sym": "Y", "qty": 1}],
         "trades": [{"ts": ms("8:00:20"), "sym": "X", "price": 10},
                    {"ts": ms("8:00:30"), "sym": "Y", "price": 20}]},
        {"orders": [{"ts": ms("8:01:10"), "id": 3, "sym": "X", "qty": 3}],
         "trades": [{"ts": ms("8:01:20"), "sym": "X", "price": 11},
                    {"ts": ms("8:02:00"), "sym": "X", "price": 12}]},
        {"orders": [("bound", ms("9:10"))], "trades": [("bound", ms("9:10"))]},
    ]
    views = ("matched", "trades_per_min", "hourly", "big_minutes", "aligned")
    seen, after_step = watch_views(kafka, circuit, views, topics)
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)

    def row(**values: Any) -> Any:
        return frozen({k: ms(v) if isinstance(v, str) and ":" in v else v
                       for k, v in values.items()})

    assert seen["matched"] == [
        Counter([row(id=1, sym="X", ts="8:00:10", qty=2, price=10),
                 row(id=2, sym="Y", ts="8:00:40", qty=1, price=20)]),
        Counter([row(id=3, sym="X", ts="8:01:10", qty=3, price=p) for p in (10, 11, 12)]),
        Counter(),
    ]
    assert seen["trades_per_min"] == [
        Counter(),
        Counter([row(window_start="8:00", window_end="8:01", sym=s, n=1) for s in "XY"]),
        Counter([row(window_start="8:01", window_end="8:02", sym="X", n=1),
                 row(window_start="8:02", window_end="8:03", sym="X", n=1)]),
    ]
    assert seen["hourly"] == [
        Counter(), Counter(),
        Counter([row(window_start="8:00", window_end="9:00", sym="X", notional=119),
                 row(window_start="8:00", window_end="9:00", sym="Y", notional=20)]),
    ]
    assert seen["big_minutes"] == [Counter(), Counter(), Counter([row(sym="X", oe="8:02", qty=3)])]
    assert seen["aligned"] == [
        Counter(), Counter(),
        Counter([row(sym="X", oe="8:01", qty=2, te="8:05", top=12),
                 row(sym="Y", oe="8:01", qty=1, te="8:05", top=20),
                 row(sym="X", oe="8:02", qty=3, te="8:05", top=12)]),
    ]
    for table in ("orders", "trades"):
        assert read_topic(kafka.conf(), topics[f"{table}_dlq"]) == []
    for boundary in composed.boundaries:
        assert internal_dead_letters(kafka, tmp_path / "ck", boundary) == [], boundary
    oracle = evaluate(circuit, inputs)
    for view in views:
        assert values_written(kafka, circuit, view, topics[view]) == oracle_values(
            oracle, view), view


FOUR_LEVELS = (Path(__file__).resolve().parents[1] / "fixtures" / "programs" / "composed"
               / "four_levels.sql")


@pytest.mark.slow  # two stages per step, five steps: `-m slow -k four_levels`
def test_s18_s19_four_levels_of_filter_aggregate_filter_aggregate_s11(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """clicks -> shop (a filter) -> per_min (a count per minute, AFTER WATERMARK) -> busy
    (a filter over it, read through a boundary) -> busy_per_5 (a 5-minute window on the
    minute's end). LATENESS 5 s.

        step  clicks (ts usr page)                                   per_min final rows
        1     a 10:00:05 shop1, a 10:00:20 shop2, b 10:00:30 shop1,   -
              b 10:00:40 home
        2     a 10:01:10, b 10:01:20, b 10:01:30, c 10:02:10,         [10:00] a 2, b 1
              c 10:02:20 (all shop)
        3-5   bound 10:20                                             [10:01] a 1, b 2;
                                                                      [10:02] c 2

    busy: a at 10:01, b at 10:02, c at 10:03 (minute ends); busy_per_5: [10:00, 10:05)
    with 3 busy users, peak 2, once the boundary's waterline passes 10:05.
    """
    topics = {"clicks": unique_topic("clicks"), "b5": unique_topic("b5")}
    kafka.create_topic(topics["clicks"], partitions=2)
    path = tmp_path / "four_levels.sql"
    path.write_text(FOUR_LEVELS.read_text(encoding="utf-8")
                    .replace("'topic' = 'clicks'", f"'topic' = '{topics['clicks']}'")
                    .replace("'topic' = 'b5'", f"'topic' = '{topics['b5']}'"), encoding="utf-8")
    circuit = compile_program(path)
    composed = compose(circuit)
    assert composed.refused == () and composed.boundaries == frozenset({"per_min"})

    def click(clock: str, usr: str, page: str) -> dict[str, Any]:
        return {"ts": clock_ms(clock), "usr": usr, "page": page}

    steps: list[dict[str, list[Any]]] = [
        {"clicks": [click("10:00:05", "a", "shop1"), click("10:00:20", "a", "shop2"),
                    click("10:00:30", "b", "shop1"), click("10:00:40", "b", "home")]},
        {"clicks": [click("10:01:10", "a", "shop"), click("10:01:20", "b", "shop"),
                    click("10:01:30", "b", "shop"), click("10:02:10", "c", "shop"),
                    click("10:02:20", "c", "shop")]},
        *[{"clicks": [("bound", clock_ms("10:20"))]} for _ in range(3)],
    ]
    _, inputs = run_steps(kafka, tmp_path, circuit, {"clicks": topics["clicks"]}, steps)
    got = values_written(kafka, circuit, "busy_per_5", topics["b5"])
    assert got == oracle_values(evaluate(circuit, inputs), "busy_per_5")
    assert got == Counter([frozen({"window_start": clock_ms("10:00"),
                                   "window_end": clock_ms("10:05"),
                                   "busy_users": 3, "peak": 2})])


RETRACTING = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr VARCHAR NOT NULL
) WITH ('topic' = '{clicks}', 'dead_letter' = '{clicks_dlq}');

CREATE LOCAL VIEW per_min AS
SELECT window_end AS minute_end, usr, COUNT(*) AS c
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr EMIT STREAM;

CREATE VIEW busy WITH ('topic' = '{busy}') AS
SELECT minute_end, usr, c FROM per_min WHERE c >= 2;
"""


def test_s18_a_changelog_reader_of_an_emit_stream_aggregate_sees_its_retractions(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """``per_min`` updates each minute's count every step (EMIT STREAM); ``busy`` filters
    its changes, so each count it wrote before is retracted when the count moves on (S18),
    in its changelog (S13: ``undo``), the retraction before the row that replaces it.

        step  clicks                      per_min changes           busy changes
        1     a :10, a :20, b :30         +a 2, +b 1                +a 2
        2     a :50, b :55                -a 2 +a 3, -b 1 +b 2      -a 2 +a 3, +b 2
        3     a :58, b 8:01:05            -a 3 +a 4, +(8:02) b 1    -a 3 +a 4
        4     bound 8:03                  (the minutes close)       -

    The reader runs in a query after the aggregate's, reading its changelog through a stage
    boundary (ADR 0023); Spark writes what the reference evaluator writes, in the same step.
    """
    names = ("clicks", "clicks_dlq", "busy")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["clicks"], partitions=2)
    program = tmp_path / "busy.sql"
    program.write_text(RETRACTING.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    composed = compose(circuit)
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"per_min"})
    output = circuit.view("busy").output
    assert output is not None and output.format == "changelog"
    steps: list[dict[str, list[Any]]] = [
        {"clicks": [_click("8:00:10", "a"), _click("8:00:20", "a"), _click("8:00:30", "b")]},
        {"clicks": [_click("8:00:50", "a"), _click("8:00:55", "b")]},
        {"clicks": [_click("8:00:58", "a"), _click("8:01:05", "b")]},
        {"clicks": [("bound", clock_ms("8:03"))]},
    ]
    reader = OutputReader("busy", output)
    per_step: list[list[tuple[bool, str, int, int]]] = []

    def after_step() -> None:
        records = [reader.value(m.value()) for m in read_topic(kafka.conf(), topics["busy"])]
        rows = [(r["undo"], r["usr"], r["c"], r["minute_end"]) for r in records]
        per_step.append(rows[sum(map(len, per_step)):])

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)
    minute = clock_ms("8:01")
    assert per_step[0] == [(False, "a", 2, minute)]
    assert Counter(per_step[1]) == Counter(
        [(True, "a", 2, minute), (False, "a", 3, minute), (False, "b", 2, minute)])
    assert per_step[1].index((True, "a", 2, minute)) < per_step[1].index((False, "a", 3, minute))
    assert per_step[2] == [(True, "a", 3, minute), (False, "a", 4, minute)]
    assert per_step[3] == []
    assert read_topic(kafka.conf(), topics["clicks_dlq"]) == []
    assert internal_dead_letters(kafka, tmp_path / "ck", "per_min") == []
    # The reference evaluator, in one query, writes the same changes in the same steps.
    oracle = evaluate(circuit, inputs)
    assert [Counter((r.value["undo"], r.value["usr"], r.value["c"], r.value["minute_end"])
                    for r in result.outputs["busy"] if r.value is not None)
            for result in oracle] == [Counter(rows) for rows in per_step]


DELAYED = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND,
    usr VARCHAR NOT NULL
) WITH ('topic' = '{clicks}', 'dead_letter' = '{clicks_dlq}');

CREATE LOCAL VIEW per_10s AS
SELECT window_end AS slot_end, usr, COUNT(*) AS c
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY window_start, window_end, usr EMIT AFTER DELAY INTERVAL '{delay_s}' SECOND;

CREATE VIEW slots WITH ('topic' = '{slots}') AS
SELECT slot_end, usr, c FROM per_10s;

CREATE VIEW per_usr WITH ('topic' = '{per_usr}', 'format' = 'upsert') AS
SELECT usr, SUM(c) AS total FROM per_10s GROUP BY usr;

CREATE VIEW per_slot WITH ('topic' = '{per_slot}', 'format' = 'upsert') AS
SELECT slot_end, SUM(c) AS total FROM per_10s GROUP BY slot_end;
"""
#: Longer than a ``--once`` run takes from its step with input to the step after it (a
#: shorter d lets a change come out in the run that holds it).
DELAY_S = 60


@pytest.mark.slow  # waits out d three times, and needs a --once run under d: `-k held_change`;
# CI's unit test_boundary_gate holds the gate's rule
def test_s18_a_held_change_that_crosses_a_boundary_is_never_late_at_the_reader(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """``per_10s`` holds each change for d (EMIT AFTER DELAY); its readers run in a later
    query, through a boundary whose waterline follows the table's. A held change can come
    out after that waterline has passed its ``slot_end``; it is a change of an updating view,
    never late at its reader (S18, S19: a late row is routed once, by its table), so it
    reaches every reader and no boundary dead letter is written. ``slot_end`` is no time
    attribute of a view that holds its changes, so ``per_slot`` keeps the group 8:00:10 that
    d's change reaches a step after the waterline has passed it (S11).

        step  clicks                         w(ts) after  per_10s changes written
        1     a :05                          8:00:04      - (held)
        2     b :25, c :45, d :07 (after d)  8:00:44      +(:10, a, 1) (due)
        3     c :46 (after d)                8:00:45      +(:30, b, 1), +(:50, c, 2),
                                                          +(:10, d, 1) (due)

    In step 3 the boundary's waterline is 8:00:44, above ``slot_end`` 8:00:30 of b's change.
    """
    names = ("clicks", "clicks_dlq", "slots", "per_usr", "per_slot")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["clicks"], partitions=2)
    program = tmp_path / "delayed.sql"
    program.write_text(DELAYED.format(delay_s=DELAY_S, **topics), encoding="utf-8")
    circuit = compile_program(program)
    composed = compose(circuit)
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"per_10s"})
    steps: list[dict[str, list[Any]]] = [
        {"clicks": [_click("8:00:05", "a")]},
        {"clicks": [_click("8:00:25", "b"), _click("8:00:45", "c"), _click("8:00:07", "d")]},
        {"clicks": [_click("8:00:46", "c")]},
    ]
    slots = circuit.view("slots").output
    assert slots is not None and slots.format == "changelog"
    slots_reader = OutputReader("slots", slots)
    changes: list[list[tuple[bool, int, str, int]]] = []

    def after_step() -> None:
        rows = [slots_reader.value(m.value()) for m in read_topic(kafka.conf(), topics["slots"])]
        seen = [(r["undo"], r["slot_end"], r["usr"], r["c"]) for r in rows]
        changes.append(seen[sum(map(len, changes)):])
        time.sleep(DELAY_S + 0.5)  # the next step's batch time is past every pending change's due

    run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)
    assert internal_dead_letters(kafka, tmp_path / "ck", "per_10s") == []
    assert read_topic(kafka.conf(), topics["clicks_dlq"]) == []
    assert changes[0] == [], f"a change came out within its run: too slow for d = {DELAY_S} s"
    assert changes[1] == [(False, clock_ms("8:00:10"), "a", 1)]
    assert sorted(changes[2]) == [(False, clock_ms("8:00:10"), "d", 1),
                                  (False, clock_ms("8:00:30"), "b", 1),
                                  (False, clock_ms("8:00:50"), "c", 2)]

    def totals(view: str, key_column: str) -> dict[Any, int | None]:
        output = circuit.view(view).output
        assert output is not None
        reader = OutputReader(view, output)
        held: dict[Any, int | None] = {}
        for m in read_topic(kafka.conf(), topics[view]):
            key = reader.key(m.key())
            assert key is not None
            value = reader.value(m.value()) if m.value() is not None else None
            held[key[key_column]] = None if value is None else value["total"]
        return held

    assert totals("per_usr", "usr") == {"a": 1, "b": 1, "c": 2, "d": 1}
    assert totals("per_slot", "slot_end") == {clock_ms("8:00:10"): 2, clock_ms("8:00:30"): 1,
                                              clock_ms("8:00:50"): 2}


WINDOWED_CHANGES = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr VARCHAR NOT NULL
) WITH ('topic' = '{clicks}', 'dead_letter' = '{clicks_dlq}');

CREATE LOCAL VIEW per_min AS
SELECT window_end AS minute_end, usr, COUNT(*) AS c
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr EMIT STREAM;

CREATE VIEW per_2min WITH ('topic' = '{per_2min}') AS
SELECT window_start, window_end, usr, SUM(c) AS total, MAX(c) AS peak, COUNT(*) AS minutes
FROM TABLE(TUMBLE(TABLE per_min, DESCRIPTOR(minute_end), INTERVAL '2' MINUTE))
GROUP BY window_start, window_end, usr EMIT STREAM;
"""


@pytest.mark.slow  # CI's composed differential draws windows over updating views: `-k tumble`
def test_s18_s19_a_tumble_over_an_emit_stream_aggregate_takes_its_retractions_back(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """``per_min`` updates each minute's count per user every step (EMIT STREAM);
    ``per_2min`` windows those changes on ``minute_end`` (a time attribute: a GROUP BY key
    of ``per_min``) into 2-minute windows, as Flink 1.19's window aggregate over a
    changelog does: a minute's old count leaves its window as its new one comes in (S18).
    Changes are (undo, window end, usr, total, peak, minutes); a minute ending at 8:02
    falls in [8:02, 8:04).

        step  clicks                        w after  per_min changes
        1     a :10, a :20, b :30           8:00:20  +8:01 a 2, +8:01 b 1
        2     a :50, b 8:01:15, a 8:01:20   8:01:10  -8:01 a 2 +8:01 a 3, +8:02 b 1, +8:02 a 1
        3     a 8:01:30, b 8:01:40,         8:02:10  -8:02 a 1 +8:02 a 2, -8:02 b 1 +8:02 b 2,
              a 8:02:20                              +8:03 a 1
        4     bound 8:05                    8:04:50  -

        step  per_2min changes
        1     +(8:02 a 2 2 1), +(8:02 b 1 1 1)
        2     -(8:02 a 2 2 1) +(8:02 a 3 3 1), +(8:04 b 1 1 1), +(8:04 a 1 1 1)
        3     -(8:04 a 1 1 1) +(8:04 a 3 2 2), -(8:04 b 1 1 1) +(8:04 b 2 2 1)
        4     -  (the windows close; an EMIT STREAM aggregate writes nothing more)

    ``per_2min`` runs in the query after ``per_min``'s, reading its changelog through a
    stage boundary (ADR 0023) on the Python state operator, each retraction with weight -1;
    Spark writes what the reference evaluator writes, in the same steps.
    """
    names = ("clicks", "clicks_dlq", "per_2min")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["clicks"], partitions=2)
    program = tmp_path / "per_2min.sql"
    program.write_text(WINDOWED_CHANGES.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    assert circuit.updating("per_2min")
    composed = compose(circuit)
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"per_min"})
    output = circuit.view("per_2min").output
    assert output is not None and output.format == "changelog"
    steps: list[dict[str, list[Any]]] = [
        {"clicks": [_click("8:00:10", "a"), _click("8:00:20", "a"), _click("8:00:30", "b")]},
        {"clicks": [_click("8:00:50", "a"), _click("8:01:15", "b"), _click("8:01:20", "a")]},
        {"clicks": [_click("8:01:30", "a"), _click("8:01:40", "b"), _click("8:02:20", "a")]},
        {"clicks": [("bound", clock_ms("8:05"))]},
    ]
    reader = OutputReader("per_2min", output)
    Change = tuple[bool, int, str, int, int, int]
    per_step: list[list[Change]] = []

    def change(value: Any) -> Change:
        return (value["undo"], value["window_end"], value["usr"], value["total"],
                value["peak"], value["minutes"])

    def after_step() -> None:
        records = [reader.value(m.value()) for m in read_topic(kafka.conf(), topics["per_2min"])]
        rows = [change(r) for r in records]
        per_step.append(rows[sum(map(len, per_step)):])

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)
    two, four = clock_ms("8:02"), clock_ms("8:04")
    assert Counter(per_step[0]) == Counter([(False, two, "a", 2, 2, 1),
                                            (False, two, "b", 1, 1, 1)])
    assert Counter(per_step[1]) == Counter([
        (True, two, "a", 2, 2, 1), (False, two, "a", 3, 3, 1),
        (False, four, "b", 1, 1, 1), (False, four, "a", 1, 1, 1)])
    assert Counter(per_step[2]) == Counter([
        (True, four, "a", 1, 1, 1), (False, four, "a", 3, 2, 2),
        (True, four, "b", 1, 1, 1), (False, four, "b", 2, 2, 1)])
    # A group's retraction comes before the row that replaces it (S13).
    assert per_step[2].index((True, four, "a", 1, 1, 1)) < per_step[2].index(
        (False, four, "a", 3, 2, 2))
    assert per_step[3] == []
    assert read_topic(kafka.conf(), topics["clicks_dlq"]) == []
    assert internal_dead_letters(kafka, tmp_path / "ck", "per_min") == []
    # The reference evaluator, in one query, writes the same changes in the same steps.
    oracle = evaluate(circuit, inputs)
    assert [Counter(change(r.value) for r in result.outputs["per_2min"] if r.value is not None)
            for result in oracle] == [Counter(rows) for rows in per_step]


SECOND_COLUMN = """
CREATE TABLE orders (
    placed  TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,
    shipped TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    id      BIGINT NOT NULL,
    amount  BIGINT NOT NULL
) WITH ('topic' = '{orders}', 'dead_letter' = '{orders_dlq}');

CREATE VIEW placed_per_min WITH ('topic' = '{placed_per_min}', 'format' = 'append') AS
SELECT window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(placed), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;

CREATE VIEW shipped_per_min WITH ('topic' = '{shipped_per_min}', 'format' = 'append') AS
SELECT window_end, SUM(amount) AS total
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(shipped), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;

CREATE VIEW due WITH ('topic' = '{due}', 'format' = 'append') AS
SELECT CEIL(shipped TO MINUTE) AS due_by, COUNT(*) AS n
FROM orders GROUP BY CEIL(shipped TO MINUTE) EMIT AFTER WATERMARK;
"""


@pytest.mark.slow  # two stages per step: `-m slow -k second_lateness`
def test_s10_s19_windows_and_a_time_key_on_a_tables_second_lateness_column(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """Spark keeps one watermark per query, the first LATENESS column's (``placed``): the
    window and the GROUP BY time key on ``shipped`` run in a later query, which reads the
    table passed through a stage boundary with ``shipped`` first, its waterline the
    table's (S10, ADR 0023). Flink, with one watermark per table, cannot window on a second
    column at all.

        step  orders (placed shipped id amount)                  w(placed)  w(shipped)
        1     8:00:10 8:00:40 1 10, 8:00:20 8:01:30 2 20           8:00:15    8:01:20
        2     8:01:05 8:01:50 3 30, 8:00:50 8:02:30 4 40           8:01:00    8:02:20
        3     bound 9:00

    placed_per_min: [8:00, 8:01) 3 once w(placed) reaches 8:01 (step 2), [8:01, 8:02) 1.
    shipped_per_min: [8:00, 8:01) 10, [8:01, 8:02) 50, [8:02, 8:03) 40. due (CEIL of
    shipped TO MINUTE, complete once the waterline passes it): 8:01 1, 8:02 2, 8:03 1."""
    names = ("orders", "orders_dlq", "placed_per_min", "shipped_per_min", "due")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["orders"], partitions=2)
    program = tmp_path / "orders.sql"
    program.write_text(SECOND_COLUMN.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    composed = compose(circuit)
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"orders"})
    later = composed.circuit.table("__in_orders")
    assert [x.column for x in later.lateness] == ["shipped", "placed"]

    def order(placed: str, shipped: str, id_: int, amount: int) -> dict[str, Any]:
        return {"placed": clock_ms(placed), "shipped": clock_ms(shipped), "id": id_,
                "amount": amount}

    steps: list[dict[str, list[Any]]] = [
        {"orders": [order("8:00:10", "8:00:40", 1, 10), order("8:00:20", "8:01:30", 2, 20)]},
        {"orders": [order("8:01:05", "8:01:50", 3, 30), order("8:00:50", "8:02:30", 4, 40)]},
        {"orders": [("bound", clock_ms("9:00"))]},
    ]
    views = ("placed_per_min", "shipped_per_min", "due")
    seen, after_step = watch_views(kafka, circuit, views, topics)
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)

    def counted(*rows: dict[str, Any]) -> Counter[Any]:
        return Counter(frozen(row) for row in rows)

    assert seen["placed_per_min"] == [
        Counter(), counted({"window_end": clock_ms("8:01"), "n": 3}),
        counted({"window_end": clock_ms("8:02"), "n": 1}),
    ]
    assert sum(seen["shipped_per_min"], Counter()) == counted(
        {"window_end": clock_ms("8:01"), "total": 10},
        {"window_end": clock_ms("8:02"), "total": 50},
        {"window_end": clock_ms("8:03"), "total": 40},
    )
    assert sum(seen["due"], Counter()) == counted(
        {"due_by": clock_ms("8:01"), "n": 1}, {"due_by": clock_ms("8:02"), "n": 2},
        {"due_by": clock_ms("8:03"), "n": 1},
    )
    assert read_topic(kafka.conf(), topics["orders_dlq"]) == []
    assert internal_dead_letters(kafka, tmp_path / "ck", "orders") == []
    # Equal to the reference evaluator, and never earlier than it (S19).
    oracle = evaluate(circuit, inputs)
    for view in views:
        assert values_written(kafka, circuit, view, topics[view]) == oracle_values(
            oracle, view), view
        wrote = [sum(len(r.outputs[view]) for r in oracle[: i + 1]) for i in range(3)]
        spark = [sum(sum(c.values()) for c in seen[view][: i + 1]) for i in range(3)]
        assert all(s <= w for s, w in zip(spark, wrote, strict=True)), (view, spark, wrote)
