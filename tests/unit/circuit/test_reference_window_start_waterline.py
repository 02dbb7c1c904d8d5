"""SPEC S10: the waterline of ``window_start``.

``w(window_end) = w(c)``, but ``w(window_start)`` is the smallest start of a window that a
row with ``c >= w(c)`` can still fall in: TUMBLE and CUMULATE the start of ``w(c)``'s window,
HOP the first start above ``w(c) - size``; a SESSION's start carries no waterline. With
``w(window_start) = w(c)`` a window on a view's window starts completes too early: a minute
that starts below ``w(c)`` is still open, and its row, written later, lands in a window
already written.

The table ``ev`` has LATENESS 0 on ``ts``, so ``w(ts)`` is the largest ``ts`` so far. Times
are seconds after 8:00 written as ``at("8:01:30")``.
"""

from __future__ import annotations

from typing import Any

import pytest
from circuit_builders import at

from app.circuit.ir import Window
from app.circuit.reference import Punctuation, StepInput, StepResult, evaluate
from app.circuit.waterline import (
    completion_threshold,
    derived_waterline,
    window_start_waterline,
)
from app.circuit.windows import window_bounds
from app.program.compile import compile_program

TABLE = """
CREATE TABLE ev (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    k  VARCHAR NOT NULL
) WITH ('topic' = 'ev');
"""

PER_MINUTE = """
CREATE LOCAL VIEW per_minute AS
SELECT window_start AS minute_start, window_end AS minute_end, COUNT(*) AS n
FROM TABLE({window})
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;
"""

TUMBLE_MINUTE = "TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE)"

PER_NINETY = """
CREATE VIEW per_ninety WITH ('topic' = 'per_ninety', 'format' = 'append') AS
SELECT window_start, window_end, SUM(n) AS total
FROM TABLE(TUMBLE(TABLE per_minute, DESCRIPTOR(minute_start), INTERVAL '90' SECOND))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;
"""

MINUTE_MS = 60_000


def ev(clock: str) -> dict[str, Any]:
    return {"ts": at(clock), "k": "a"}


def run(program: str, steps: list[list[dict[str, Any]]]) -> list[StepResult]:
    circuit = compile_program("test.sql", text=TABLE + program)
    return evaluate(circuit, [StepInput({"ev": rows}, i * MINUTE_MS)
                              for i, rows in enumerate(steps)])


def values(results: list[StepResult], view: str) -> list[list[dict[str, Any]]]:
    return [[dict(r.value) for r in result.outputs[view] if r.value is not None]
            for result in results]


def ninety(start: str, end: str, total: int) -> dict[str, Any]:
    return {"window_start": at(start), "window_end": at(end), "total": total}


# w(ts) after each step: 8:00:10, 8:01:10, 8:01:40, 8:02:10, 8:06:40.
STEPS = [
    [ev("8:00:10")],  # minute [8:00, 8:01)
    [ev("8:01:10")],  # minute [8:01, 8:02), its window_start 8:01 in [8:00, 8:01:30)
    [ev("8:01:40")],  # w(ts) = 8:01:40 >= 8:01:30, but minute 8:01 is still open
    [ev("8:02:10")],  # completes minute 8:01 (n = 2): [8:00, 8:01:30) is complete now
    [ev("8:06:40")],  # completes minute 8:02, so [8:01:30, 8:03)
]


def test_s10_tumble_over_window_starts_writes_each_window_once_with_its_total() -> None:
    """A 90-second TUMBLE over 1-minute window starts: [8:00, 8:01:30) holds the minutes
    8:00 (n = 1) and 8:01 (n = 2); it is written once, with total 3, in the step that
    completes minute 8:01 (w(minute_start) = 8:02 >= 8:01:30), never with total 1 before."""
    results = run(PER_MINUTE.format(window=TUMBLE_MINUTE) + PER_NINETY, STEPS)
    assert values(results, "per_ninety") == [
        [],
        [],
        [],  # w(ts) = 8:01:40 but w(minute_start) = 8:01 < 8:01:30
        [ninety("8:00", "8:01:30", 3)],
        [ninety("8:01:30", "8:03", 1)],
    ]


def test_s10_s14_output_waterline_of_a_window_start_is_its_windows_start() -> None:
    """S14 publishes the waterline of per_ninety's first time attribute, its window_start:
    the 90-second start of the 1-minute start of w(ts)."""
    results = run(PER_MINUTE.format(window=TUMBLE_MINUTE) + PER_NINETY, STEPS)
    expected = [at("8:00"), at("8:00"), at("8:00"), at("8:01:30"), at("8:06")]
    assert [r.view_waterlines["per_ninety"] for r in results] == expected
    assert [r.waterline for r in results[3].outputs["per_ninety"]] == [at("8:01:30")]


def test_s10_s14_window_start_column_of_a_view_publishes_its_start_waterline() -> None:
    """A view whose first time attribute is its window_start: TUMBLE's is the start of
    w(ts)'s minute, never w(ts) itself (a row of that minute can still come)."""
    program = """
CREATE VIEW per_minute WITH ('topic' = 'per_minute', 'format' = 'append') AS
SELECT window_start, window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;
"""
    results = run(program, STEPS)
    assert [r.view_waterlines["per_minute"] for r in results] == [
        at("8:00"), at("8:01"), at("8:01"), at("8:02"), at("8:06")]


def test_s10_hop_start_waterline_is_the_first_start_above_w_less_size() -> None:
    """HOP (slide 1 minute, size 2 minutes): a row at ts >= w(ts) falls in windows starting
    after w(ts) - 2 minutes, so w(minute_start) is 7:59, 8:00, 8:01, 8:03 after the steps.
    The 90-second TUMBLE over these starts completes [8:00, 8:01:30) (starts 8:00 and 8:01)
    only once w(minute_start) >= 8:01:30: not at w(ts) = 8:02:10, when [8:01, 8:03) is open."""
    hop = "HOP(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '2' MINUTE)"
    steps = [
        [ev("8:00:10")],  # in [7:59, 8:01) and [8:00, 8:02)
        [ev("8:01:10")],  # in [8:00, 8:02) and [8:01, 8:03); completes [7:59, 8:01)
        [ev("8:02:10")],  # in [8:01, 8:03) and [8:02, 8:04); completes [8:00, 8:02)
        [ev("8:04:00")],  # completes [8:01, 8:03) and [8:02, 8:04)
    ]
    results = run(PER_MINUTE.format(window=hop) + PER_NINETY, steps)
    assert [r.view_waterlines["per_ninety"] for r in results] == [
        at("7:58:30"), at("8:00"), at("8:00"), at("8:03")]
    assert values(results, "per_ninety") == [
        [],
        [ninety("7:58:30", "8:00", 1)],  # the start 7:59; w(minute_start) = 8:00
        [],  # the start 8:00 (2 rows); w(minute_start) = 8:01 < 8:01:30
        # the starts 8:01 (2 rows) and 8:02 (1 row); w(minute_start) = 8:03
        [ninety("8:00", "8:01:30", 4), ninety("8:01:30", "8:03", 1)],
    ]


def test_s10_cumulate_start_waterline_is_the_start_of_w_s_window() -> None:
    """CUMULATE (step 1 minute, size 2 minutes): every window of one start shares the start
    of the 2-minute TUMBLE; a row at ts >= w(ts) is in windows starting at the start of
    w(ts)'s 2-minute window or later."""
    cumulate = "CUMULATE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '2' MINUTE)"
    steps = [
        [ev("8:00:10")],  # in [8:00, 8:01) and [8:00, 8:02)
        [ev("8:01:10")],  # in [8:00, 8:02); [8:00, 8:01) complete
        [ev("8:01:40")],  # w(start) = 8:00 still: [8:00, 8:02) is open
        [ev("8:02:10")],  # w(start) = 8:02: every window starting 8:00 is complete
    ]
    results = run(PER_MINUTE.format(window=cumulate) + PER_NINETY, steps)
    assert [r.view_waterlines["per_ninety"] for r in results] == [
        at("8:00"), at("8:00"), at("8:00"), at("8:01:30")]
    # The two windows of start 8:00: [8:00, 8:01) with 1 row, [8:00, 8:02) with 3.
    assert values(results, "per_ninety") == [[], [], [], [ninety("8:00", "8:01:30", 4)]]


def test_s10_session_start_carries_no_waterline() -> None:
    """A SESSION's start is no time attribute: a session open long ago may still close, so
    a reader may not window on it (and its view publishes its window_end's waterline)."""
    session = """
CREATE LOCAL VIEW sessions AS
SELECT window_start AS s_start, window_end AS s_end, k, COUNT(*) AS n
FROM TABLE(SESSION(TABLE ev PARTITION BY k, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, k
EMIT AFTER WATERMARK;
"""
    circuit = compile_program("test.sql", text=TABLE + session)
    view = circuit.view("sessions")
    assert [a.column for a in view.time_attributes] == ["s_end"]
    with pytest.raises(ValueError, match="SESSION"):
        window_start_waterline(Window("SESSION", "ts", MINUTE_MS, MINUTE_MS), 0)


# -- the rule itself (app/circuit/waterline.py) ---------------------------------------------

WINDOWS = [
    Window("TUMBLE", "ts", 60, 60),
    Window("TUMBLE", "ts", 60, 60, offset=15),
    Window("HOP", "ts", 60, 20),
    Window("HOP", "ts", 60, 25, offset=7),
    Window("HOP", "ts", 20, 60, offset=3),  # gaps: a row may fall in no window
    Window("CUMULATE", "ts", 60, 20),
    Window("CUMULATE", "ts", 60, 15, offset=-10),
]


def _smallest_start(window: Window, waterline: int) -> int:
    """S10 by brute force: the smallest start of a window holding some c >= waterline."""
    horizon = waterline + 3 * (window.size + window.slide)
    return min(start for c in range(waterline, horizon)
               for start, _ in window_bounds(window.kind, c, window.size, window.slide,
                                             window.offset))


@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: f"{w.kind}-{w.size}-{w.slide}")
def test_s10_window_start_waterline_is_the_smallest_start_a_row_can_still_have(
    window: Window,
) -> None:
    for waterline in range(-130, 131):
        assert window_start_waterline(window, waterline) == _smallest_start(window, waterline)
    assert window_start_waterline(window, None) is None


@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: f"{w.kind}-{w.size}-{w.slide}")
def test_s10_s11_completion_threshold_inverts_the_window_start_waterline(
    window: Window,
) -> None:
    """The least w(c) at which w(window_start) reaches a bound, through more steps too."""
    for bound in range(-100, 101):
        least = completion_threshold((window,), bound)
        reached = derived_waterline((window,), least)
        below = derived_waterline((window,), least - 1)
        assert reached is not None and below is not None
        assert below < bound <= reached


JOIN_TABLES = """
CREATE TABLE orders (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    orderid INT NOT NULL
) WITH ('topic' = 'orders');
CREATE TABLE trades (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    orderid INT NOT NULL,
    amount  INT NOT NULL
) WITH ('topic' = 'trades');
CREATE LOCAL VIEW o5 AS
SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rowtime), INTERVAL '5' MINUTE));
CREATE LOCAL VIEW t5 AS
SELECT * FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(rowtime), INTERVAL '5' MINUTE));
CREATE VIEW matched WITH ('topic' = 'matched', 'format' = 'append') AS
SELECT a.window_start, a.window_end, a.orderid, b.amount
FROM o5 a JOIN t5 b
  ON a.window_start = b.window_start AND a.window_end = b.window_end
 AND a.orderid = b.orderid;
"""


def test_s10_s16_window_join_start_waterline_is_the_start_over_both_sides() -> None:
    """A window join's window_start: a match found later is of a window ending after both
    sides' waterlines, so its start is at least the 5-minute start of the lower one. With
    w(orders) = 10:06 and w(trades) = 10:04 a trade at 10:04:30 can still match an order of
    [10:00, 10:05): the waterline is 10:00, not min(10:05, 10:04)."""
    circuit = compile_program("test.sql", text=JOIN_TABLES)
    results = evaluate(circuit, [
        StepInput({"orders": [{"rowtime": at("10:01"), "orderid": 1}],
                   "trades": [{"rowtime": at("10:04"), "orderid": 1, "amount": 60}]}),
        StepInput({"orders": [{"rowtime": at("10:06"), "orderid": 2}]}),
        StepInput({}, punctuations={"trades": [Punctuation(at("10:05"))]}),
        StepInput({"trades": [{"rowtime": at("10:07"), "orderid": 2, "amount": 5}]}),
    ])
    assert [r.view_waterlines["matched"] for r in results] == [
        at("10:00"), at("10:00"), at("10:05"), at("10:05")]
    assert [[(dict(r.value or {}), r.waterline) for r in x.outputs["matched"]]
            for x in results] == [
        [({"window_start": at("10:00"), "window_end": at("10:05"), "orderid": 1,
           "amount": 60}, at("10:00"))],
        [],
        [],
        [({"window_start": at("10:05"), "window_end": at("10:10"), "orderid": 2,
           "amount": 5}, at("10:05"))],
    ]
