"""Views over the forms a Flink SQL user stacks, on Spark through the real broker (SPEC
S16-S19; ADR 0023): a filter over a window Top-N view, a filter over an OVER view, OVER
over an aggregate's final rows, a join of three relations in one FROM (two interval joins),
Flink's window Top-N over a window join in one query, and SESSION windows over a filtered
view and over a UNION ALL. Each reads its input
through a stage boundary where the input's query cannot compute it; every output is
compared with hand-written rows and with the reference evaluator's (the whole run's rows:
a view read through a boundary may be written a step later, S19).

Tables (LATENESS 10 s), then three steps with a punctuation to 10:30 on every table:

    step  clicks (usr ts n)                        buys (usr ts amount)   users (usr ts region)
    1     a 10:00:05 3, b 10:00:20 5,              a 10:00:30 7           a 10:00:00 eu,
          c 10:00:40 1, a 10:00:50 2                                      b 10:00:10 us
    2     a 10:01:10 4, b 10:01:30 1,              b 10:01:40 9,          c 10:01:00 eu
          c 10:01:45 6                             c 10:02:00 3
    3     b 10:03:00 2, a 10:09:00 1
"""

from __future__ import annotations

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
)

from app.circuit.reference import evaluate
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.compose import compose

# Slow (several stages per step): `-m slow -k composed_forms`.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROGRAM = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr VARCHAR NOT NULL,
    n   BIGINT NOT NULL
) WITH ('topic' = '{clicks}');

CREATE TABLE buys (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr    VARCHAR NOT NULL,
    amount BIGINT NOT NULL
) WITH ('topic' = '{buys}');

CREATE TABLE users (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr    VARCHAR NOT NULL,
    region VARCHAR
) WITH ('topic' = '{users}');

-- A filter over a window Top-N view.
CREATE LOCAL VIEW top2 AS
SELECT * FROM (
  SELECT window_start, window_end, usr, n,
         ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY n DESC) AS rk
  FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
) WHERE rk <= 2;

CREATE VIEW top_big WITH ('topic' = '{top_big}') AS
SELECT window_end, usr, n FROM top2 WHERE n >= 3;

-- A filter over an OVER view.
CREATE LOCAL VIEW recent AS
SELECT ts, usr, SUM(n) OVER (PARTITION BY usr ORDER BY ts
                             RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW) AS s
FROM clicks;

CREATE VIEW heavy WITH ('topic' = '{heavy}') AS SELECT ts, usr, s FROM recent WHERE s >= 5;

-- OVER over an aggregate's final rows.
CREATE LOCAL VIEW per_min AS
SELECT window_start, window_end, usr, SUM(n) AS n
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr EMIT AFTER WATERMARK;

CREATE VIEW rolling WITH ('topic' = '{rolling}') AS
SELECT window_end, usr, n,
       SUM(n) OVER (PARTITION BY usr ORDER BY window_end
                    RANGE BETWEEN INTERVAL '2' MINUTE PRECEDING AND CURRENT ROW) AS n3
FROM per_min;

-- Three relations in one FROM.
CREATE VIEW bought WITH ('topic' = '{bought}') AS
SELECT c.ts, c.usr, b.amount, u.region
FROM clicks AS c
JOIN buys AS b ON c.usr = b.usr AND b.ts BETWEEN c.ts AND c.ts + INTERVAL '1' MINUTE
JOIN users AS u ON c.usr = u.usr AND u.ts BETWEEN c.ts - INTERVAL '1' MINUTE AND c.ts;

-- Flink's window Top-N over a window join, in one query as written.
CREATE VIEW top_pairs WITH ('topic' = '{top_pairs}') AS
SELECT * FROM (
  SELECT L.window_start, L.window_end, L.usr, R.amount,
         ROW_NUMBER() OVER (PARTITION BY L.window_start, L.window_end
                            ORDER BY R.amount DESC) AS rk
  FROM (SELECT * FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))) L
  JOIN (SELECT * FROM TABLE(TUMBLE(TABLE buys, DESCRIPTOR(ts), INTERVAL '1' MINUTE))) R
  ON L.usr = R.usr AND L.window_start = R.window_start AND L.window_end = R.window_end
) WHERE rk <= 2;

-- SESSION windows over a filtered view and over a UNION ALL.
CREATE LOCAL VIEW big AS SELECT ts, usr, n FROM clicks WHERE n >= 2;

CREATE VIEW big_sessions WITH ('topic' = '{big_sessions}') AS
SELECT usr, window_start, window_end, COUNT(*) AS c, SUM(n) AS n
FROM TABLE(SESSION(TABLE big PARTITION BY usr, DESCRIPTOR(ts), INTERVAL '2' MINUTE))
GROUP BY usr, window_start, window_end EMIT AFTER WATERMARK;

CREATE LOCAL VIEW acts AS SELECT ts, usr FROM clicks UNION ALL SELECT ts, usr FROM buys;

CREATE VIEW sessions WITH ('topic' = '{sessions}') AS
SELECT usr, window_start, window_end, COUNT(*) AS c
FROM TABLE(SESSION(TABLE acts PARTITION BY usr, DESCRIPTOR(ts), INTERVAL '2' MINUTE))
GROUP BY usr, window_start, window_end EMIT AFTER WATERMARK;
"""

OUTPUTS = ("top_big", "heavy", "rolling", "bought", "top_pairs", "big_sessions", "sessions")


def _click(clock: str, usr: str, n: int) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "usr": usr, "n": n}


def _buy(clock: str, usr: str, amount: int) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "usr": usr, "amount": amount}


def _user(clock: str, usr: str, region: str) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "usr": usr, "region": region}


STEPS: list[dict[str, list[Any]]] = [
    {"clicks": [_click("10:00:05", "a", 3), _click("10:00:20", "b", 5),
                _click("10:00:40", "c", 1), _click("10:00:50", "a", 2)],
     "buys": [_buy("10:00:30", "a", 7)],
     "users": [_user("10:00:00", "a", "eu"), _user("10:00:10", "b", "us")]},
    {"clicks": [_click("10:01:10", "a", 4), _click("10:01:30", "b", 1),
                _click("10:01:45", "c", 6)],
     "buys": [_buy("10:01:40", "b", 9), _buy("10:02:00", "c", 3)],
     "users": [_user("10:01:00", "c", "eu")]},
    {"clicks": [_click("10:03:00", "b", 2), _click("10:09:00", "a", 1)]},
    *[{table: [("bound", clock_ms("10:30"))] for table in ("clicks", "buys", "users")}
      for _ in range(3)],
]


def _rows(*rows: dict[str, Any]) -> Counter[Any]:
    return Counter(frozen(row) for row in rows)


def _expected() -> dict[str, Counter[Any]]:
    """Each output's rows, by hand (times as epoch ms)."""
    t = clock_ms
    return {
        # Each minute's two largest n, then n >= 3: [10:00) b 5, a 3; [10:01) c 6, a 4.
        "top_big": _rows({"window_end": t("10:01"), "usr": "b", "n": 5},
                         {"window_end": t("10:01"), "usr": "a", "n": 3},
                         {"window_end": t("10:02"), "usr": "c", "n": 6},
                         {"window_end": t("10:02"), "usr": "a", "n": 4}),
        # The sum of the user's n over the minute up to each click, then s >= 5.
        "heavy": _rows({"ts": t("10:00:50"), "usr": "a", "s": 5},
                       {"ts": t("10:01:10"), "usr": "a", "s": 6},
                       {"ts": t("10:00:20"), "usr": "b", "s": 5},
                       {"ts": t("10:01:45"), "usr": "c", "s": 6}),
        # Per user and minute, n and the sum over the minute ends of the last two minutes.
        "rolling": _rows({"window_end": t("10:01"), "usr": "a", "n": 5, "n3": 5},
                         {"window_end": t("10:02"), "usr": "a", "n": 4, "n3": 9},
                         {"window_end": t("10:10"), "usr": "a", "n": 1, "n3": 1},
                         {"window_end": t("10:01"), "usr": "b", "n": 5, "n3": 5},
                         {"window_end": t("10:02"), "usr": "b", "n": 1, "n3": 6},
                         {"window_end": t("10:04"), "usr": "b", "n": 2, "n3": 3},
                         {"window_end": t("10:01"), "usr": "c", "n": 1, "n3": 1},
                         {"window_end": t("10:02"), "usr": "c", "n": 6, "n3": 7}),
        # a's click at 10:00:05 bought at 10:00:30, its user row at 10:00:00; c's at
        # 10:01:45 bought at 10:02:00, its user row at 10:01:00. b's user row at 10:00:10 is
        # more than a minute before b's click at 10:01:30.
        "bought": _rows({"ts": t("10:00:05"), "usr": "a", "amount": 7, "region": "eu"},
                        {"ts": t("10:01:45"), "usr": "c", "amount": 3, "region": "eu"}),
        # Each minute's clicks paired with the user's buys of the minute: a's two clicks of
        # [10:00) with its buy of 7 (two equal rows), b's click of [10:01) with its buy of 9.
        "top_pairs": _rows(
            {"window_start": t("10:00"), "window_end": t("10:01"), "usr": "a", "amount": 7,
             "rk": 1},
            {"window_start": t("10:00"), "window_end": t("10:01"), "usr": "a", "amount": 7,
             "rk": 2},
            {"window_start": t("10:01"), "window_end": t("10:02"), "usr": "b", "amount": 9,
             "rk": 1}),
        # Clicks with n >= 2, sessions with a gap of 2 minutes: a's three clicks, b's two
        # (2 min 40 s apart), c's one.
        "big_sessions": _rows(
            {"usr": "a", "window_start": t("10:00:05"), "window_end": t("10:03:10"),
             "c": 3, "n": 9},
            {"usr": "b", "window_start": t("10:00:20"), "window_end": t("10:02:20"),
             "c": 1, "n": 5},
            {"usr": "b", "window_start": t("10:03:00"), "window_end": t("10:05:00"),
             "c": 1, "n": 2},
            {"usr": "c", "window_start": t("10:01:45"), "window_end": t("10:03:45"),
             "c": 1, "n": 6}),
        # Clicks and buys together.
        "sessions": _rows(
            {"usr": "a", "window_start": t("10:00:05"), "window_end": t("10:03:10"), "c": 4},
            {"usr": "a", "window_start": t("10:09:00"), "window_end": t("10:11:00"), "c": 1},
            {"usr": "b", "window_start": t("10:00:20"), "window_end": t("10:05:00"), "c": 4},
            {"usr": "c", "window_start": t("10:00:40"), "window_end": t("10:04:00"), "c": 3}),
    }


def test_s16_s19_views_over_top_n_over_sessions_and_three_way_joins_run_on_spark(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {name: unique_topic(name)
              for name in ("clicks", "buys", "users", *OUTPUTS)}
    for table in ("clicks", "buys", "users"):
        kafka.create_topic(topics[table], partitions=2)
    program = tmp_path / "composed_forms.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    composed = compose(circuit)
    assert composed.refused == ()
    assert {"top2", "recent", "per_min", "big", "acts"} <= composed.boundaries
    _, inputs = run_steps(kafka, tmp_path, circuit,
                          {t: topics[t] for t in ("clicks", "buys", "users")}, STEPS)
    results = evaluate(circuit, inputs)
    expected = _expected()
    for view in OUTPUTS:
        got = values_written(kafka, circuit, view, topics[view])
        assert got == oracle_values(results, view), view
        assert got == expected[view], view
    for table in ("clicks", "buys", "users"):
        assert read_topic(kafka.conf(), circuit.table(table).dead_letter_topic) == []
    for boundary in composed.boundaries:
        assert internal_dead_letters(kafka, tmp_path / "ck", boundary) == []
