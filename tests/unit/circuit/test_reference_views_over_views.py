"""SPEC S18: a view reading an EMIT AFTER WATERMARK aggregate sees only its final rows.

Each window's row reaches the readers once, in the step whose waterline completes the window
(the step the aggregate's own output writes it), never a provisional value or a retraction.
The table ``ev`` has LATENESS 30 seconds on ``ts``; steps bring rows out of order. Expected
outputs are written by hand, step by step, with the waterline after each step noted.
"""

from __future__ import annotations

from typing import Any

import pytest
from circuit_builders import at

from app.circuit.ir import Circuit
from app.circuit.reference import StepInput, StepResult, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program

TABLE = """
CREATE TABLE ev (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    k  VARCHAR NOT NULL
) WITH ('topic' = 'ev');
"""

PER_MINUTE = """
CREATE VIEW per_minute WITH ('topic' = 'per_minute', 'format' = 'append') AS
SELECT window_end AS minute_end, k, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, k
{emit};
"""

READERS = """
CREATE VIEW busy WITH ('topic' = 'busy') AS
SELECT minute_end, k, n FROM per_minute WHERE n >= 2;

CREATE VIEW per_two WITH ('topic' = 'per_two') AS
SELECT window_end AS wend, k, SUM(n) AS total, COUNT(*) AS minutes
FROM TABLE(TUMBLE(TABLE per_minute, DESCRIPTOR(minute_end), INTERVAL '2' MINUTE))
GROUP BY window_end, k;
"""


def ev(clock: str, k: str = "a") -> dict[str, Any]:
    return {"ts": at(clock), "k": k}


# w after each step: 8:00:50, 8:01:10, 8:01:40, 8:04:00.
STEPS = [
    [ev("8:00:10"), ev("8:00:50"), ev("8:01:20")],
    [ev("8:00:55"), ev("8:01:40")],  # 8:00:55 is behind 8:01:20 but not late (>= 8:00:50)
    [ev("8:02:10", "b"), ev("8:01:59")],
    [ev("8:04:30")],
]


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=text)


def run(emit: str = "EMIT AFTER WATERMARK") -> list[StepResult]:
    circuit = compile_sql(TABLE + PER_MINUTE.format(emit=emit) + READERS)
    return evaluate(circuit, [StepInput({"ev": rows}, i * 60_000)
                              for i, rows in enumerate(STEPS)])


def values(result: StepResult, view: str) -> list[Any]:
    return [r.value for r in result.outputs[view]]


def minute(end: str, k: str, n: int) -> dict[str, Any]:
    return {"minute_end": at(end), "k": k, "n": n}


def two(end: str, k: str, total: int, minutes: int) -> dict[str, Any]:
    return {"wend": at(end), "k": k, "total": total, "minutes": minutes}


def test_s18_aggregate_output_is_final_rows_only() -> None:
    results = run()
    assert [values(r, "per_minute") for r in results] == [
        [],
        [minute("8:01", "a", 3)],
        [],
        [minute("8:02", "a", 3), minute("8:03", "b", 1)],
    ]


def test_s18_filter_over_after_watermark_sees_only_final_rows() -> None:
    """An append view over the aggregate writes each window's final row once."""
    results = run()
    assert [values(r, "busy") for r in results] == [
        [],  # (8:01, a) holds 2 rows, but w = 8:00:50 < 8:01: not final
        [minute("8:01", "a", 3)],  # w = 8:01:10 completes 8:01 with its third row
        [],  # (8:02, a) has 3 rows now, but w = 8:01:40 < 8:02
        [minute("8:02", "a", 3)],  # w = 8:04; (8:03, b) has n = 1 and fails WHERE
    ]


def test_s18_window_cascade_over_after_watermark_sees_only_final_rows() -> None:
    """A 2-minute TUMBLE over the 1-minute windows' ends sums final counts only."""
    results = run()
    assert [values(r, "per_two") for r in results] == [
        [],
        [two("8:02", "a", 3, 1)],  # minute 8:01 -> 2-minute window [8:00, 8:02)
        [],
        [two("8:04", "a", 3, 1), two("8:04", "b", 1, 1)],  # minutes 8:02, 8:03 -> [8:02, 8:04)
    ]
    assert [r.key for r in results[3].outputs["per_two"]] == [
        {"wend": at("8:04"), "k": "a"}, {"wend": at("8:04"), "k": "b"}]


def test_s18_after_watermark_and_delay_readers_see_only_final_rows() -> None:
    """With AND AFTER DELAY the aggregate writes coalesced changes early, its readers do not."""
    results = run("EMIT AFTER WATERMARK AND AFTER DELAY INTERVAL '1' MINUTE")
    assert [values(r, "busy") for r in results] == [
        [], [minute("8:01", "a", 3)], [], [minute("8:02", "a", 3)]]
    assert [values(r, "per_two") for r in results] == [
        [], [two("8:02", "a", 3, 1)], [], [two("8:04", "a", 3, 1), two("8:04", "b", 1, 1)]]


def test_s18_readers_of_after_watermark_hold_no_freed_window_twice() -> None:
    """Each final row is delivered once: the cascade's groups are freed once complete."""
    results = run()
    assert [r.state_rows["per_minute"] for r in results] == [2, 1, 2, 1]
    assert [r.state_rows["per_two"] for r in results] == [0, 1, 1, 0]


UPDATING = """
CREATE LOCAL VIEW counts AS
SELECT k, COUNT(*) AS n FROM ev GROUP BY k{emit};

CREATE VIEW busy WITH ('topic' = 'busy') AS
SELECT k, n FROM counts WHERE n >= 2;
"""


def _changes(results: list[StepResult], view: str) -> list[list[tuple[bool, str, int]]]:
    return [[(r.value["undo"], r.value["k"], r.value["n"]) for r in result.outputs[view]
             if r.value is not None] for result in results]


def test_s18_a_filter_of_an_updating_aggregate_passes_its_retractions_on() -> None:
    """``counts`` (no EMIT AFTER WATERMARK) updates each key's count every step; ``busy``
    writes a count once it reaches 2 and retracts it when it moves on, the retraction first.

        step  ev              counts changes       busy changes
        1     a, a, b         +a 2, +b 1           +a 2
        2     a, b            -a 2 +a 3, -b 1 +b 2 -a 2 +a 3, +b 2
        3     b               -b 2 +b 3            -b 2 +b 3
    """
    circuit = compile_sql(TABLE + UPDATING.format(emit=""))
    output = circuit.view("busy").output
    assert output is not None and output.format == "changelog"
    steps = [[ev("8:00:10"), ev("8:00:20"), ev("8:00:30", "b")],
             [ev("8:00:40"), ev("8:00:50", "b")],
             [ev("8:01:00", "b")]]
    results = evaluate(circuit, [StepInput({"ev": rows}, batch_time_ms=1) for rows in steps])
    assert _changes(results, "busy") == [
        [(False, "a", 2)],
        [(True, "a", 2), (False, "a", 3), (False, "b", 2)],
        [(True, "b", 2), (False, "b", 3)],
    ]
    # The same changes whatever the aggregate's own EMIT writes (STREAM: the changelog).
    streamed = compile_sql(TABLE + UPDATING.format(emit=" EMIT STREAM"))
    assert _changes(evaluate(streamed, [StepInput({"ev": rows}, batch_time_ms=1)
                                        for rows in steps]), "busy") == _changes(results, "busy")


def test_s18_a_reader_of_an_updating_view_is_a_changelog_and_windows_time_attributes() -> None:
    with pytest.raises(ProgramError, match="passes their retractions on .* 'upsert' cannot"):
        compile_sql(TABLE + UPDATING.format(emit="").replace(
            "('topic' = 'busy')", "('topic' = 'busy', 'format' = 'upsert')"))
    # ``counts`` has no time attribute: a window over it has none to be on (S10).
    with pytest.raises(ProgramError, match="column k is not a time attribute"):
        compile_sql(TABLE + UPDATING.format(emit="").replace(
            "SELECT k, n FROM counts WHERE n >= 2",
            "SELECT window_end, COUNT(*) AS c FROM TABLE(TUMBLE(TABLE counts, DESCRIPTOR(k), "
            "INTERVAL '1' MINUTE)) GROUP BY window_start, window_end"))
    with pytest.raises(ProgramError, match="ranks or runs OVER view counts, whose rows are"):
        compile_sql(TABLE + UPDATING.format(emit="").replace(
            "SELECT k, n FROM counts WHERE n >= 2",
            "SELECT k, n, SUM(n) OVER (PARTITION BY k ORDER BY n) AS s FROM counts"))


COUNT_OF_COUNTS = """
CREATE LOCAL VIEW per_user AS
SELECT k, COUNT(*) AS c FROM ev GROUP BY k;

CREATE VIEW histogram WITH ('topic' = 'h') AS
SELECT c, COUNT(*) AS users FROM per_user GROUP BY c;

CREATE VIEW crowded WITH ('topic' = 'crowded') AS
SELECT c, users FROM histogram WHERE users >= 2;

CREATE VIEW spread WITH ('topic' = 'spread', 'format' = 'changelog') AS
SELECT MIN(c) AS lo, MAX(c) AS hi, SUM(c) AS total, AVG(c) AS mean,
       COUNT(DISTINCT c) AS kinds, COUNT(*) AS users
FROM per_user;
"""

# The users' counts after each step: a 1 b 1 | a 2 b 1 | a 2 b 2 c 1 | a 2 b 2 c 3.
COUNT_STEPS = [
    [ev("8:00:01"), ev("8:00:02", "b")],
    [ev("8:00:03")],
    [ev("8:00:04", "b"), ev("8:00:05", "c")],
    [ev("8:00:06", "c"), ev("8:00:07", "c")],
]


def _count_of_counts() -> list[StepResult]:
    circuit = compile_sql(TABLE + COUNT_OF_COUNTS)
    return evaluate(circuit, [StepInput({"ev": rows}, batch_time_ms=1) for rows in COUNT_STEPS])


def test_s18_count_of_counts_takes_each_retraction_back() -> None:
    """``histogram`` counts the users per count of ``per_user``, an updating aggregate: a
    user whose count moves on is retracted from its old count's group and added to the new
    one's (S18). A group left empty is deleted (an upsert tombstone), as SQL's GROUP BY of
    the current rows has no row for it.

        step  per_user changes        histogram groups    upserts
        1     +a 1, +b 1              1: 2                (1, 2)
        2     -a 1 +a 2               1: 1, 2: 1          (1, 1), (2, 1)
        3     -b 1 +b 2, +c 1         1: 1, 2: 2          (2, 2)      (1 keeps 1: b left, c came)
        4     -c 1 +c 3               2: 2, 3: 1          1 deleted, (3, 1)
    """
    circuit = compile_sql(TABLE + COUNT_OF_COUNTS)
    histogram = circuit.view("histogram")
    assert histogram.output is not None and histogram.output.format == "upsert"
    assert circuit.updating("histogram") and circuit.updating("crowded")
    results = _count_of_counts()
    assert [[(r.key, r.value) for r in result.outputs["histogram"]] for result in results] == [
        [({"c": 1}, {"c": 1, "users": 2})],
        [({"c": 1}, {"c": 1, "users": 1}), ({"c": 2}, {"c": 2, "users": 1})],
        [({"c": 2}, {"c": 2, "users": 2})],
        [({"c": 1}, None), ({"c": 3}, {"c": 3, "users": 1})],
    ]
    assert [r.state_rows["histogram"] for r in results] == [1, 2, 2, 2]


def test_s18_a_filter_of_a_count_of_counts_passes_its_retractions_on() -> None:
    """``crowded`` (users >= 2) sees the histogram's changes, as any reader of an updating
    view: (1, 2) written in step 1 is retracted in step 2, when count 1 drops to one user."""
    results = _count_of_counts()
    assert [[(r.value["undo"], r.value["c"], r.value["users"]) for r in result.outputs[
        "crowded"] if r.value is not None] for result in results] == [
        [(False, 1, 2)],
        [(True, 1, 2)],
        [(False, 2, 2)],
        [],
    ]


def test_s18_min_max_sum_avg_and_count_distinct_take_retractions_back() -> None:
    """Every aggregate function but ARG_MAX/ARG_MIN over the updating ``per_user``: each
    step's row equals the aggregate of the users' current counts, MIN keeping the multiset
    of counts (step 4 retracts c's 1, the last 1: MIN moves up to 2)."""
    results = _count_of_counts()
    rows = [[(r.value["undo"], *(r.value[c] for c in ("lo", "hi", "total", "mean", "kinds",
                                                       "users")))
             for r in result.outputs["spread"]] for result in results]
    #       lo hi total mean   kinds users (AVG of BIGINT is DOUBLE)
    one = (1, 1, 2, 1.0, 1, 2)
    two = (1, 2, 3, 1.5, 2, 2)
    three = (1, 2, 5, 5 / 3, 2, 3)
    four = (2, 3, 7, 7 / 3, 2, 3)
    assert rows == [
        [(False, *one)],
        [(True, *one), (False, *two)],
        [(True, *two), (False, *three)],
        [(True, *three), (False, *four)],
    ]


PER_MINUTE_STREAM = """
CREATE LOCAL VIEW per_min AS
SELECT window_end AS minute_end, k, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, k EMIT STREAM;

CREATE VIEW keys_per_minute WITH ('topic' = 'kpm', 'format' = 'append') AS
SELECT minute_end, COUNT(*) AS keys, MAX(n) AS peak FROM per_min
GROUP BY minute_end EMIT AFTER WATERMARK;
"""


def test_s11_s18_after_watermark_over_an_updating_view_writes_final_rows_once() -> None:
    """``per_min`` updates each minute's count per key every step (EMIT STREAM); an
    aggregate by its ``minute_end`` (a time attribute: a GROUP BY key of ``per_min``) takes
    each change and writes a minute once, final, when ``w >= minute_end``: no change of
    that minute can come after (its rows would be late, S5).

        step  ev                          w after    per_min changes            written
        1     a :10, a :20, b :30         8:00:00    +a 2, +b 1 (8:01)          -
        2     b :50, a 8:01:05            8:00:35    -b 1 +b 2, +a 1 (8:02)     -
        3     c :40, a 8:01:40            8:01:10    +c 1, -a 1 +a 2 (8:02)     (8:01, 3, 2)
        4     a 8:03:00                   8:02:30    +a 1 (8:04)                (8:02, 1, 2)
    """
    circuit = compile_sql(TABLE + PER_MINUTE_STREAM)
    assert not circuit.updating("keys_per_minute")
    steps = [[ev("8:00:10"), ev("8:00:20"), ev("8:00:30", "b")],
             [ev("8:00:50", "b"), ev("8:01:05")],
             [ev("8:00:40", "c"), ev("8:01:40")],
             [ev("8:03:00")]]
    results = evaluate(circuit, [StepInput({"ev": rows}, batch_time_ms=1) for rows in steps])
    assert [values(r, "keys_per_minute") for r in results] == [
        [], [], [{"minute_end": at("8:01"), "keys": 3, "peak": 2}],
        [{"minute_end": at("8:02"), "keys": 1, "peak": 2}]]
    assert [r.state_rows["keys_per_minute"] for r in results] == [1, 2, 1, 1]


PER_MINUTE_DELAYED = TABLE + """
CREATE LOCAL VIEW per_min AS
SELECT window_end AS minute_end, k, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, k EMIT AFTER DELAY INTERVAL '1' MINUTE;

CREATE VIEW per_minute_total WITH ('topic' = 'per_minute_total', 'format' = 'upsert') AS
SELECT minute_end, SUM(n) AS total FROM per_min GROUP BY minute_end;
"""


def test_s11_s18_a_reader_of_held_changes_keeps_its_groups() -> None:
    """``per_min`` holds each change for a minute of processing time (EMIT AFTER DELAY), so
    a change of minute 8:01 can come out after ``w(minute_end)`` has passed 8:01: b's second
    row, in the step the waterline passes, is written a minute later. ``minute_end`` of a
    view that holds its changes is no time attribute for its readers: the total keeps its
    group and takes the change (S11: a group is freed only once no change can reach it).

        step  batch  ev                 w after   per_min writes          total writes
        1     0 s    a :10, b :15       7:59:45   - (held)                -
        2     60 s   a :20              7:59:50   +a 2, +b 1 (8:01)       (8:01, 3)
        3     90 s   b :30, a 8:01:40   8:01:10   - (held)                -
        4     150 s  -                  8:01:10   -b 1 +b 2, +a 1 (8:02)  (8:01, 4), (8:02, 1)
    """
    circuit = compile_sql(PER_MINUTE_DELAYED)
    assert circuit.view("per_minute_total").time_attributes == ()
    assert circuit.view("per_minute_total").state.kind == "unbounded"
    steps = [([ev("8:00:10"), ev("8:00:15", "b")], 0),
             ([ev("8:00:20")], 60_000),
             ([ev("8:00:30", "b"), ev("8:01:40")], 90_000),
             ([], 150_000)]
    results = evaluate(circuit, [StepInput({"ev": rows}, batch_time_ms=t) for rows, t in steps])
    assert [values(r, "per_minute_total") for r in results] == [
        [],
        [{"minute_end": at("8:01"), "total": 3}],
        [],
        [{"minute_end": at("8:01"), "total": 4}, {"minute_end": at("8:02"), "total": 1}],
    ]


def test_s11_s18_a_held_change_gets_the_unbounded_state_warning_with_its_reason() -> None:
    warnings = compile_sql(PER_MINUTE_DELAYED).warnings
    assert any("per_min holds its changes back (EMIT AFTER DELAY)" in w.message
               and "remove AFTER DELAY from per_min" in (w.fix or "") for w in warnings)
