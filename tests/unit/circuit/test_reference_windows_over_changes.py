"""SPEC S18: a TUMBLE, HOP or CUMULATE aggregate over an updating view takes its retractions.

``per_min`` counts ``ev`` per minute and key with EMIT STREAM: it updates a minute's count
every step, retracting the old count (weight -1) before the new one (+1). A window on its
``minute_end`` (a time attribute: a GROUP BY key of ``per_min``) puts each change, with its
weight, in every window that holds the minute (S9), and the windows' accumulators subtract
what is retracted, as Flink 1.19's window aggregate over a changelog does (FLINK-20281).
The table ``ev`` has LATENESS 30 seconds on ``ts``. Expected changes are written by hand,
step by step, with the waterline after each step; a minute ending at ``e`` is in the windows
that contain ``e`` (a HOP of 2 minutes sliding by 1: ``[e - 1 min, e + 1 min)`` and
``[e, e + 2 min)``).
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

PER_MIN = TABLE + """
CREATE LOCAL VIEW per_min AS
SELECT window_end AS minute_end, k, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, k EMIT STREAM;
"""

READER = """
CREATE VIEW windows WITH ('topic' = 'windows'{format}) AS
SELECT window_start, window_end, SUM(n) AS total, COUNT(*) AS keys
FROM TABLE({window}(TABLE per_min, DESCRIPTOR(minute_end), {sizes}))
GROUP BY window_start, window_end{emit};
"""

HOP = "HOP", "INTERVAL '1' MINUTE, INTERVAL '2' MINUTE"
CUMULATE = "CUMULATE", "INTERVAL '1' MINUTE, INTERVAL '3' MINUTE"


def ev(clock: str, k: str) -> dict[str, Any]:
    return {"ts": at(clock), "k": k}


# w after each step: 8:00:00, 8:00:35, 8:01:10, 8:02:30.
# per_min changes:    +8:01 a 2, +8:01 b 1 | -8:01 b 1 +8:01 b 2, +8:02 a 1
#                   | +8:01 c 1, -8:02 a 1 +8:02 a 2 | +8:04 a 1
STEPS = [
    [ev("8:00:10", "a"), ev("8:00:20", "a"), ev("8:00:30", "b")],
    [ev("8:00:50", "b"), ev("8:01:05", "a")],
    [ev("8:00:40", "c"), ev("8:01:40", "a")],  # 8:00:40 is on time: w was 8:00:35
    [ev("8:03:00", "a")],
]


def run(window: tuple[str, str], emit: str = " EMIT STREAM",
        fmt: str = "") -> tuple[Circuit, list[StepResult]]:
    kind, sizes = window
    circuit = compile_program("test.sql", text=PER_MIN + READER.format(
        window=kind, sizes=sizes, emit=emit, format=fmt))
    return circuit, evaluate(circuit, [StepInput({"ev": rows}, batch_time_ms=1)
                                       for rows in STEPS])


Change = tuple[bool, int, int, int, int]


def changes(results: list[StepResult]) -> list[list[Change]]:
    """Per step: (undo, window start, window end, total, keys), in the order written."""
    return [[(r.value["undo"], r.value["window_start"], r.value["window_end"],
              r.value["total"], r.value["keys"])
             for r in result.outputs["windows"] if r.value is not None] for result in results]


def window(start: str, end: str, total: int, keys: int, undo: bool = False) -> Change:
    return (undo, at(start), at(end), total, keys)


def gone(start: str, end: str, total: int, keys: int) -> Change:
    return window(start, end, total, keys, undo=True)


def test_s18_s9_hop_over_an_updating_view_puts_each_change_in_every_window_with_its_weight(
) -> None:
    """Each change of a minute goes into both HOP windows that hold its end, with its weight.

        step  per_min changes               [8:00,8:02)   [8:01,8:03)   [8:02,8:04)
        1     +8:01 a 2, +8:01 b 1          3, 2 keys     3, 2 keys     -
        2     -8:01 b 1 +8:01 b 2, +8:02 a  4, 2          5, 3          1, 1
        3     +8:01 c 1, -8:02 a 1 +8:02 a 2 5, 3         7, 4          2, 1
        4     +8:04 a 1                     (complete)    -             -     [8:03,8:05),
                                                                            [8:04,8:06): 1, 1
    """
    circuit, results = run(HOP)
    assert circuit.updating("windows")
    assert changes(results) == [
        [window("8:00", "8:02", 3, 2), window("8:01", "8:03", 3, 2)],
        [gone("8:00", "8:02", 3, 2), window("8:00", "8:02", 4, 2),
         gone("8:01", "8:03", 3, 2), window("8:01", "8:03", 5, 3),
         window("8:02", "8:04", 1, 1)],
        [gone("8:00", "8:02", 4, 2), window("8:00", "8:02", 5, 3),
         gone("8:01", "8:03", 5, 3), window("8:01", "8:03", 7, 4),
         gone("8:02", "8:04", 1, 1), window("8:02", "8:04", 2, 1)],
        [window("8:03", "8:05", 1, 1), window("8:04", "8:06", 1, 1)],
    ]


def test_s11_s18_a_window_over_an_updating_view_frees_a_window_once_its_end_is_passed() -> None:
    """S11: a change of minute ``e`` comes only while ``w < e`` (a row of that minute is
    on time only then, S5), and every window holding ``e`` ends after it: a window is freed
    once ``w(minute_end) >= window_end``, and no change reaches a freed window."""
    circuit, results = run(HOP)
    state = circuit.view("windows").state
    assert state.kind == "window"
    # Step 4 (w 8:02:30) frees [8:00, 8:02) and adds [8:03, 8:05), [8:04, 8:06).
    assert [r.state_rows["windows"] for r in results] == [2, 3, 3, 4]


def test_s18_s9_cumulate_over_an_updating_view_retracts_from_every_growing_window() -> None:
    """CUMULATE of 1-minute steps up to 3 minutes: minute end 8:01 is in the windows
    [8:00, 8:02) and [8:00, 8:03); 8:02 in [8:00, 8:03); 8:04 in [8:03, 8:05), [8:03, 8:06).

        step  per_min changes                [8:00,8:02)   [8:00,8:03)
        1     +8:01 a 2, +8:01 b 1           3, 2 keys     3, 2 keys
        2     -8:01 b 1 +8:01 b 2, +8:02 a 1 4, 2          5, 3
        3     +8:01 c 1, -8:02 a 1 +8:02 a 2 5, 3          7, 4
        4     +8:04 a 1                      -             -        [8:03,8:05), [8:03,8:06): 1
    """
    _, results = run(CUMULATE)
    assert changes(results) == [
        [window("8:00", "8:02", 3, 2), window("8:00", "8:03", 3, 2)],
        [gone("8:00", "8:02", 3, 2), window("8:00", "8:02", 4, 2),
         gone("8:00", "8:03", 3, 2), window("8:00", "8:03", 5, 3)],
        [gone("8:00", "8:02", 4, 2), window("8:00", "8:02", 5, 3),
         gone("8:00", "8:03", 5, 3), window("8:00", "8:03", 7, 4)],
        [window("8:03", "8:05", 1, 1), window("8:03", "8:06", 1, 1)],
    ]


def test_s11_s18_a_final_window_over_an_updating_view_is_written_once_complete() -> None:
    """With EMIT AFTER WATERMARK the HOP writes a window once, final, in the step whose
    waterline reaches its end: no change of a minute in it can come later (S11, S18).
    Only [8:00, 8:02) is complete by step 4 (w 8:02:30), with every change taken."""
    circuit, results = run(HOP, emit=" EMIT AFTER WATERMARK", fmt=", 'format' = 'append'")
    assert not circuit.updating("windows")
    assert [[(r.value["window_end"], r.value["total"], r.value["keys"])
             for r in result.outputs["windows"]] for result in results] == [
        [], [], [], [(at("8:02"), 5, 3)]]


def test_s18_tumble_over_a_filter_of_an_updating_view_takes_what_the_filter_passes() -> None:
    """A filter of ``per_min`` passes its changes on; a TUMBLE aggregate over it takes each
    retraction the filter passes: a count that leaves ``n < 2`` leaves its window, and a
    window none of whose rows is left is retracted (deleted), then written anew.

        step  quiet (n < 2) changes           [8:00,8:02)       [8:02,8:04)   [8:04,8:06)
        1     +8:01 b 1                       1 key, total 1    -             -
        2     -8:01 b 1, +8:02 a 1            (empty: retract)  1, 1          -
        3     +8:01 c 1, -8:02 a 1            1, 1              (retract)     -
        4     +8:04 a 1                       -                 -             1, 1
    """
    text = PER_MIN + """
    CREATE LOCAL VIEW quiet AS SELECT minute_end, k, n FROM per_min WHERE n < 2;
    CREATE VIEW windows WITH ('topic' = 'windows') AS
    SELECT window_start, window_end, SUM(n) AS total, COUNT(*) AS keys
    FROM TABLE(TUMBLE(TABLE quiet, DESCRIPTOR(minute_end), INTERVAL '2' MINUTE))
    GROUP BY window_start, window_end EMIT STREAM;
    """
    circuit = compile_program("test.sql", text=text)
    results = evaluate(circuit, [StepInput({"ev": rows}, batch_time_ms=1) for rows in STEPS])
    assert changes(results) == [
        [window("8:00", "8:02", 1, 1)],
        [gone("8:00", "8:02", 1, 1), window("8:02", "8:04", 1, 1)],
        [window("8:00", "8:02", 1, 1), gone("8:02", "8:04", 1, 1)],
        [window("8:04", "8:06", 1, 1)],
    ]


def _rejected(reader: str) -> str:
    with pytest.raises(ProgramError) as caught:
        compile_program("test.sql", text=PER_MIN + reader)
    return str(caught.value)


def test_s18_session_over_an_updating_view_is_refused_as_flink_does() -> None:
    message = _rejected("""
    CREATE VIEW s WITH ('topic' = 's', 'format' = 'append') AS
    SELECT window_end, COUNT(*) AS c
    FROM TABLE(SESSION(TABLE per_min, DESCRIPTOR(minute_end), INTERVAL '1' MINUTE))
    GROUP BY window_start, window_end EMIT AFTER WATERMARK;""")
    assert "SESSION windows of view per_min, whose rows are updated" in message
    assert "FLINK-20281 leaves SESSION out" in message


def test_s18_window_rows_of_an_updating_view_must_be_aggregated() -> None:
    message = _rejected("""
    CREATE VIEW w AS
    SELECT window_end, k, n
    FROM TABLE(TUMBLE(TABLE per_min, DESCRIPTOR(minute_end), INTERVAL '2' MINUTE));""")
    assert "reads the TUMBLE windows of view per_min, whose rows are updated, without " \
        "aggregating them" in message
    # A window join's sides are such window rows.
    message = _rejected("""
    CREATE VIEW j AS
    SELECT a.window_end, a.k, a.n, b.n AS other
    FROM TABLE(TUMBLE(TABLE per_min, DESCRIPTOR(minute_end), INTERVAL '2' MINUTE)) a
    JOIN TABLE(TUMBLE(TABLE per_min, DESCRIPTOR(minute_end), INTERVAL '2' MINUTE)) b
    ON a.window_start = b.window_start AND a.window_end = b.window_end AND a.k = b.k;""")
    assert "without aggregating them" in message and "window join" in message


def test_s18_over_and_window_top_n_over_an_updating_view_are_refused_as_flink_does() -> None:
    over = _rejected("""
    CREATE VIEW o AS
    SELECT minute_end, k, SUM(n) OVER (PARTITION BY k ORDER BY minute_end
                                       RANGE BETWEEN INTERVAL '2' MINUTE PRECEDING
                                       AND CURRENT ROW) AS s
    FROM per_min;""")
    assert "runs OVER view per_min, whose rows are updated" in over
    assert "Flink refuses them too" in over
    top_n = _rejected("""
    CREATE VIEW top AS
    SELECT * FROM (
      SELECT window_start, window_end, k, n,
             ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY n DESC) AS rn
      FROM TABLE(TUMBLE(TABLE per_min, DESCRIPTOR(minute_end), INTERVAL '2' MINUTE)))
    WHERE rn <= 1;""")
    assert "ranks or runs OVER view per_min, whose rows are updated" in top_n


def test_s18_arg_max_in_a_window_over_an_updating_view_stays_refused() -> None:
    message = _rejected("""
    CREATE VIEW w WITH ('topic' = 'w') AS
    SELECT window_start, window_end, ARG_MAX(k, n) AS top
    FROM TABLE(TUMBLE(TABLE per_min, DESCRIPTOR(minute_end), INTERVAL '2' MINUTE))
    GROUP BY window_start, window_end;""")
    assert "ARG_MAX in view w, over the updated rows of view per_min" in message


def test_s10_s18_a_window_over_an_updating_view_needs_one_of_its_time_attributes() -> None:
    """``n`` is no time attribute of ``per_min``; nor is any column of a view that holds
    its changes (EMIT AFTER DELAY), whose changes can come after the waterline passed."""
    message = _rejected("""
    CREATE VIEW w WITH ('topic' = 'w') AS
    SELECT window_start, window_end, COUNT(*) AS c
    FROM TABLE(TUMBLE(TABLE per_min, DESCRIPTOR(n), INTERVAL '2' MINUTE))
    GROUP BY window_start, window_end;""")
    assert "column n is not a time attribute" in message
    delayed = PER_MIN.replace("EMIT STREAM", "EMIT AFTER DELAY INTERVAL '1' MINUTE")
    with pytest.raises(ProgramError, match="column minute_end of view per_min is not a time "
                       "attribute: view per_min holds its changes back"):
        compile_program("test.sql", text=delayed + """
        CREATE VIEW w WITH ('topic' = 'w') AS
        SELECT window_start, window_end, COUNT(*) AS c
        FROM TABLE(TUMBLE(TABLE per_min, DESCRIPTOR(minute_end), INTERVAL '2' MINUTE))
        GROUP BY window_start, window_end;""")
    # Through a filter of it too: the filter's changes are the held ones.
    with pytest.raises(ProgramError, match="column minute_end of view busy is not a time "
                       "attribute: view per_min holds its changes back"):
        compile_program("test.sql", text=delayed + """
        CREATE LOCAL VIEW busy AS SELECT minute_end, n FROM per_min WHERE n > 1;
        CREATE VIEW w WITH ('topic' = 'w') AS
        SELECT window_start, window_end, COUNT(*) AS c
        FROM TABLE(TUMBLE(TABLE busy, DESCRIPTOR(minute_end), INTERVAL '2' MINUTE))
        GROUP BY window_start, window_end;""")
