"""SPEC S10 and S18 in the compiler: the time attributes of an aggregate view's rows.

A windowed ``EMIT AFTER WATERMARK`` aggregate writes each window once, final, when the
waterline passes its ``window_end``: every later row's ``window_end`` is above that
waterline, and so is any monotone expression of it. Flink's cascade spelling selects
``window_end - INTERVAL '1' MILLISECOND AS rowtime`` (what Flink's ``window_time`` is) and
windows the next view on it; ``window_start`` or ``window_end`` renamed are time attributes
as they are. An OVER window may be ordered by such a view's ``window_end``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from app.circuit.ir import Circuit, Over
from app.circuit.reference import Punctuation, StepInput, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.compose import compose

CLICKS = """
CREATE TABLE clicks (ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,
                     usr VARCHAR NOT NULL) WITH ('topic' = 'clicks');
"""

CASCADE = """
CREATE LOCAL VIEW per_min AS
SELECT {rowtime} AS rowtime, usr, COUNT(*) AS c
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr EMIT AFTER WATERMARK;
CREATE VIEW per_10 WITH ('topic' = 'p10', 'format' = 'append') AS
SELECT window_start, window_end, usr, SUM(c) AS c
FROM TABLE(TUMBLE(TABLE per_min, DESCRIPTOR(rowtime), INTERVAL '10' MINUTE))
GROUP BY window_start, window_end, usr EMIT AFTER WATERMARK;
"""
FLINK = "window_end - INTERVAL '1' MILLISECOND"

TABLE_T = """
CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND, k VARCHAR NOT NULL,
                v BIGINT NOT NULL) WITH ('topic' = 't');
CREATE LOCAL VIEW m AS
SELECT window_start, window_end, k, SUM(v) AS sv
FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, k EMIT AFTER WATERMARK;
"""
RUNNING = """
CREATE VIEW r WITH ('topic' = 'r', 'format' = 'append') AS
SELECT k, window_end, sv, SUM(sv) OVER (PARTITION BY k ORDER BY {order}
    RANGE BETWEEN INTERVAL '10' MINUTE PRECEDING AND CURRENT ROW) AS running
FROM m;
"""

DAY = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def at(clock: str) -> int:
    hours, minutes, seconds = (int(p) for p in clock.split(":"))
    return int((DAY + dt.timedelta(hours=hours, minutes=minutes,
                                   seconds=seconds)).timestamp() * 1000)


def cascade(rowtime: str) -> Circuit:
    return compile_program("p.sql", CLICKS + CASCADE.format(rowtime=rowtime))


def click(clock: str, usr: str) -> dict[str, Any]:
    return {"ts": at(clock), "usr": usr}


# The minute 10:09-10:10 is complete in step 2 (w = 10:10:01); the punctuation completes
# every later window.
CLICK_STEPS = [
    StepInput({"clicks": [click("10:00:10", "u1"), click("10:09:30", "u1"),
                          click("10:09:59", "u2")]}),
    StepInput({"clicks": [click("10:10:06", "u1")]}),
    StepInput({}, punctuations={"clicks": [Punctuation(at("11:00:00"))]}),
]


def per_10_rows(circuit: Circuit) -> list[list[tuple[str, str, str, int]]]:
    def clock(ms: int) -> str:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%H:%M")

    return [[(clock(r.value["window_start"]), clock(r.value["window_end"]), r.value["usr"],
              r.value["c"]) for r in result.outputs["per_10"]]
            for result in evaluate(circuit, CLICK_STEPS)]


# -- the cascade spelling ------------------------------------------------------------------


def test_s10_window_end_minus_a_millisecond_is_a_derived_time_attribute() -> None:
    """S10: ``window_end - INTERVAL '1' MILLISECOND`` of a windowed EMIT AFTER WATERMARK
    aggregate is a time attribute derived from window_end: w(rowtime) = w(clicks.ts) - 1 ms;
    a window on it closes by that waterline."""
    circuit = cascade(FLINK)
    attrs = {a.column: a for a in circuit.view("per_min").time_attributes}
    assert list(attrs) == ["rowtime"]
    rowtime = attrs["rowtime"]
    assert (rowtime.kind, rowtime.table, rowtime.source_column) == ("derived", "clicks", "ts")
    assert rowtime.derivation is not None
    assert rowtime.derivation.source.kind == "window_end"
    assert [(s.op, s.amount) for s in rowtime.steps] == [("shift", -1)]
    per_10 = circuit.view("per_10")
    assert per_10.state.kind == "window"
    assert per_10.state.description == ("a group is freed once (w(clicks.ts) - 1 millisecond) "
                                         ">= window_end")


def test_s18_a_minute_lands_in_the_ten_minutes_flinks_window_time_puts_it_in() -> None:
    """Hand-checked: the minute 10:09-10:10 (rowtime 10:09:59.999) counts in [10:00, 10:10),
    written in the step that completes that minute; 10:10-10:11 in [10:10, 10:20)."""
    assert per_10_rows(cascade(FLINK)) == [
        [],
        [("10:00", "10:10", "u1", 2), ("10:00", "10:10", "u2", 1)],
        [("10:10", "10:20", "u1", 1)],
    ]


def test_s10_window_start_renamed_is_the_same_cascade_and_window_end_the_next_window() -> None:
    """``window_start AS rowtime`` puts a minute where its start is, as the cascade does;
    ``window_end AS rowtime`` puts 10:09-10:10 in [10:10, 10:20), which is why Flink
    subtracts a millisecond."""
    start = cascade("window_start")
    assert [(a.column, a.kind) for a in start.view("per_min").time_attributes] == [
        ("rowtime", "window_start")]
    assert per_10_rows(start) == per_10_rows(cascade(FLINK))
    end = cascade("window_end")
    assert [(a.column, a.kind) for a in end.view("per_min").time_attributes] == [
        ("rowtime", "window_end")]
    assert per_10_rows(end)[1:] == [
        [("10:00", "10:10", "u1", 1)],
        [("10:10", "10:20", "u1", 2), ("10:10", "10:20", "u2", 1)],
    ]


@pytest.mark.parametrize("rowtime", [FLINK, "window_start", "window_end"])
def test_s19_spark_runs_the_cascade(rowtime: str) -> None:
    """The reader of the cascade runs on Spark (a stage boundary where one query cannot)."""
    assert compose(cascade(rowtime)).refused == ()


def test_s10_other_expressions_of_the_window_stay_plain_columns() -> None:
    """A window_start is a time attribute verbatim only (its waterline follows its window,
    which a derivation does not carry); an aggregate's value is no time attribute."""
    circuit = compile_program("p.sql", CLICKS + """
CREATE LOCAL VIEW per_min AS
SELECT window_start + INTERVAL '1' MINUTE AS a, MAX(ts) AS b, window_end AS d, usr
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr EMIT AFTER WATERMARK;""")
    assert [a.column for a in circuit.view("per_min").time_attributes] == ["d"]
    with pytest.raises(ProgramError, match="column rowtime is not a time attribute"):
        compile_program("p.sql", CLICKS + CASCADE.format(
            rowtime="window_start + INTERVAL '1' MINUTE"))


# -- OVER ordered by an aggregate's window_end ---------------------------------------------


def test_s10_an_over_window_orders_by_an_aggregate_views_window_end() -> None:
    """Hand-checked running sums over ten minutes of per-minute sums, each minute written
    once the waterline passes its window_end (S12: after the aggregate wrote it, final)."""
    circuit = compile_program("p.sql", TABLE_T + RUNNING.format(order="window_end"))
    over = next(op for op in circuit.view("r").operators if isinstance(op, Over))
    assert over.order_column == "window_end"
    assert [(a.column, a.kind) for a in circuit.view("r").time_attributes] == [
        ("window_end", "window_end")]

    def row(clock: str, k: str, v: int) -> dict[str, Any]:
        return {"ts": at(clock), "k": k, "v": v}

    steps = [
        StepInput({"t": [row("10:00:10", "x", 1), row("10:05:30", "x", 2),
                         row("10:05:40", "y", 7)]}),
        StepInput({"t": [row("10:12:00", "x", 4)]}),
        StepInput({}, punctuations={"t": [Punctuation(at("11:00:00"))]}),
    ]
    written = [[(r.value["k"], r.value["window_end"], r.value["sv"], r.value["running"])
                for r in result.outputs["r"]] for result in evaluate(circuit, steps)]
    assert written == [
        [("x", at("10:01:00"), 1, 1)],
        # x's frame [9:56, 10:06] holds 10:01 and 10:06.
        [("x", at("10:06:00"), 2, 3), ("y", at("10:06:00"), 7, 7)],
        # x's frame [10:03, 10:13] holds 10:06 and 10:13, no longer 10:01.
        [("x", at("10:13:00"), 4, 6)],
    ]
    assert compose(circuit).refused == ()


@pytest.mark.parametrize(("order", "message"), [
    ("window_start", "unsupported: an OVER window ordered by window_start, a window start"),
    ("sv", "column sv is not a time attribute of the input"),
])
def test_l7_an_over_window_names_the_columns_it_can_order_by(order: str, message: str) -> None:
    """L7: the fix lists the columns an OVER window can be ordered by, and only those."""
    with pytest.raises(ProgramError) as info:
        compile_program("p.sql", TABLE_T + RUNNING.format(order=order))
    first = info.value.diagnostics[0]
    assert first.message.startswith(message), first.message
    assert first.fix is not None and first.fix.endswith("(window_end)"), first.fix
