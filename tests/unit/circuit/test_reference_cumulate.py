"""CUMULATE windows (SPEC L4, S9, S11, S12) in the reference evaluator, from SQL text, step by
step.

A CUMULATE of step 10 minutes and size 30 minutes puts a sale at 8:05 in the windows
``[8:00, 8:10)``, ``[8:00, 8:20)`` and ``[8:00, 8:30)``: they share the start of the TUMBLE of
30 minutes holding it and end every step up to the size (Flink's definition). Each window is
complete once the waterline of its time column reaches its end. sales has LATENESS 1 minute.
Expected outputs are written by hand.
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path
from typing import Any

import pytest
from circuit_builders import at

from app.circuit import windows
from app.circuit.ir import Circuit
from app.circuit.reference import Punctuation, StepInput, evaluate
from app.circuit.windows import cumulate_bounds, window_bounds
from app.errors import ProgramError
from app.program.compile import compile_program
from app.program.lexer import CompileFailure

TABLE = """
CREATE TABLE sales (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    shop   VARCHAR NOT NULL,
    amount BIGINT
) WITH ('topic' = 'sales');
"""

RUNNING = """
CREATE VIEW running WITH ('topic' = 'running', 'format' = '{fmt}') AS
SELECT shop, window_start, window_end, COUNT(*) AS sales, SUM(amount) AS total
FROM TABLE(CUMULATE(TABLE sales, DESCRIPTOR(ts), INTERVAL '10' MINUTE, INTERVAL '30' MINUTE))
GROUP BY shop, window_start, window_end
{emit};
"""

#: Four steps: 8:05, 8:12 (ann) and 8:01 (bob) move w to 8:11; 8:21 to 8:20; 8:35 (bob) to
#: 8:34, beside ann's 8:09, late (below w = 8:20); a bound of 9:01 moves w to 9:00.
STEPS = [
    StepInput({"sales": [{"ts": at("8:05"), "shop": "ann", "amount": 5},
                         {"ts": at("8:12"), "shop": "ann", "amount": 7},
                         {"ts": at("8:01"), "shop": "bob", "amount": 1}]}),
    StepInput({"sales": [{"ts": at("8:21"), "shop": "ann", "amount": 2}]}),
    StepInput({"sales": [{"ts": at("8:35"), "shop": "bob", "amount": 4},
                         {"ts": at("8:09"), "shop": "ann", "amount": 100}]}),
    StepInput({}, punctuations={"sales": [Punctuation(at("9:01"))]}),
]


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=TABLE + text)


def running(fmt: str, emit: str) -> Circuit:
    return compile_sql(RUNNING.format(fmt=fmt, emit=emit))


def row(shop: str, start: str, end: str, sales: int, total: int) -> dict[str, Any]:
    return {"shop": shop, "window_start": at(start), "window_end": at(end), "sales": sales,
            "total": total}


def test_s9_cumulate_bounds_share_a_start_and_end_every_step_after_the_row() -> None:
    assert cumulate_bounds(0, 30, 10) == [(0, 10), (0, 20), (0, 30)]
    assert cumulate_bounds(29, 30, 10) == [(0, 30)]
    assert cumulate_bounds(30, 30, 10) == [(30, 40), (30, 50), (30, 60)]
    assert cumulate_bounds(-5, 30, 10) == [(-30, 0)]
    assert cumulate_bounds(7, 30, 10, 5) == [(5, 15), (5, 25), (5, 35)]
    assert window_bounds("CUMULATE", 12, 30, 10) == [(0, 20), (0, 30)]
    for bad in ((30, 0), (0, 10), (25, 10)):
        with pytest.raises(ValueError, match="multiple of its step"):
            cumulate_bounds(1, *bad)
    assert doctest.testmod(windows).failed == 0


@pytest.mark.parametrize(("size", "step", "offset"), [(30, 10, 0), (12, 3, 5), (8, 8, 0)])
def test_s9_cumulate_bounds_are_flinks_definition(size: int, step: int, offset: int) -> None:
    """Every window ``[s, s + k * step)`` with ``s = n * size + offset`` and ``k = 1 ..
    size / step`` that holds ``c``, found by brute force."""
    for c in range(-40, 40):
        expected = [
            (s, s + k * step)
            for s in range(offset - 10 * size, 100, size)
            for k in range(1, size // step + 1)
            if s <= c < s + k * step
        ]
        assert cumulate_bounds(c, size, step, offset) == expected, c


def test_s11_each_cumulate_window_is_written_once_the_waterline_reaches_its_end() -> None:
    """EMIT AFTER WATERMARK: w = 8:11 completes the windows ending 8:10, w = 8:20 those ending
    8:20, w = 8:34 those ending 8:30 (ann's late 8:09 is in none), and w = 9:00 bob's three
    windows of 8:30."""
    results = evaluate(running("append", "EMIT AFTER WATERMARK"), STEPS)
    assert [[r.value for r in x.outputs["running"]] for x in results] == [
        [row("ann", "8:00", "8:10", 1, 5), row("bob", "8:00", "8:10", 1, 1)],
        [row("ann", "8:00", "8:20", 2, 12), row("bob", "8:00", "8:20", 1, 1)],
        [row("ann", "8:00", "8:30", 3, 14), row("bob", "8:00", "8:30", 1, 1)],
        [row("bob", "8:30", "8:40", 1, 4), row("bob", "8:30", "8:50", 1, 4),
         row("bob", "8:30", "9:00", 1, 4)],
    ]
    # Held: every window not yet complete; a window is freed in the step that writes it.
    assert [x.state_rows["running"] for x in results] == [4, 2, 3, 0]
    # S14: the waterline of window_start, the start of the 30-minute TUMBLE holding w (S10).
    assert [x.view_waterlines["running"] for x in results] == [
        at("8:00"), at("8:00"), at("8:30"), at("9:00")]
    assert [d.reason for x in results for d in x.dead_letters] == ["late"]


def test_s12_a_cumulate_upsert_view_updates_each_window_of_the_start() -> None:
    """Default EMIT (upsert): each step writes every window a row changed, in key order; ann's
    8:21 changes only the window ending 8:30."""
    results = evaluate(running("upsert", ""), STEPS)
    assert [[r.value for r in x.outputs["running"]] for x in results] == [
        [row("ann", "8:00", "8:10", 1, 5), row("ann", "8:00", "8:20", 2, 12),
         row("ann", "8:00", "8:30", 2, 12), row("bob", "8:00", "8:10", 1, 1),
         row("bob", "8:00", "8:20", 1, 1), row("bob", "8:00", "8:30", 1, 1)],
        [row("ann", "8:00", "8:30", 3, 14)],
        [row("bob", "8:30", "8:40", 1, 4), row("bob", "8:30", "8:50", 1, 4),
         row("bob", "8:30", "9:00", 1, 4)],
        [],
    ]
    assert results[1].outputs["running"][0].key == {
        "shop": "ann", "window_start": at("8:00"), "window_end": at("8:30")}
    # Complete windows are freed once written: the 8:10 ones after step 1, and so on.
    assert [x.state_rows["running"] for x in results] == [4, 2, 3, 0]


def test_s12_a_cumulate_changelog_view_retracts_the_old_value() -> None:
    """EMIT STREAM (changelog): ann's window [8:00, 8:30) goes 2 -> 3 sales in step 2 (its
    ``ver`` 0 was written in step 1)."""
    results = evaluate(running("changelog", "EMIT STREAM"), STEPS[:2])
    ann = [(r.value["undo"], r.value["sales"], r.value["ver"]) for r in results[1].outputs[
        "running"] if r.value is not None]
    assert ann == [(True, 2, 1), (False, 3, 2)]


@pytest.mark.parametrize("emit", [
    "EMIT STREAM AFTER WATERMARK",
    "EMIT AFTER DELAY INTERVAL '1' MINUTE",
    "EMIT STREAM AFTER DELAY INTERVAL '1' MINUTE",
    "EMIT AFTER WATERMARK AND AFTER DELAY INTERVAL '1' MINUTE",
])
def test_s12_every_emit_form_reads_cumulate_windows(emit: str) -> None:
    fmt = "changelog" if "STREAM" in emit else "upsert"
    view = running(fmt, emit).view("running")
    assert view.state.kind == "window"
    assert view.state.window_end_column == "window_end"


def test_s10_cumulate_window_bounds_are_time_attributes() -> None:
    """``w(window_end) = w(ts)``; ``window_start`` is one as a TUMBLE's of the max size (every
    window of a start ends by ``window_start + size``), so a view over the windows' rows may
    group by it alone, complete at ``window_start + size``."""
    circuit = compile_sql("""
CREATE LOCAL VIEW rows_in AS
SELECT shop, amount, window_start, window_end
FROM TABLE(CUMULATE(TABLE sales, DESCRIPTOR(ts), INTERVAL '10' MINUTE, INTERVAL '30' MINUTE));

CREATE VIEW per_start WITH ('topic' = 'per_start', 'format' = 'append') AS
SELECT window_start, COUNT(*) AS copies FROM rows_in GROUP BY window_start
EMIT AFTER WATERMARK;
""")
    assert [a.column for a in circuit.view("rows_in").time_attributes] == [
        "window_start", "window_end"]
    results = evaluate(circuit, STEPS)
    # 8:05 and 8:01 are in 3 windows each, 8:12 in 2, 8:21 in 1; 8:35 in 3.
    assert [[r.value for r in x.outputs["per_start"]] for x in results] == [
        [], [], [{"window_start": at("8:00"), "copies": 9}],
        [{"window_start": at("8:30"), "copies": 3}]]


def test_s9_cumulate_offset_moves_the_start() -> None:
    circuit = compile_sql("""
CREATE VIEW v WITH ('topic' = 'v', 'format' = 'append') AS
SELECT window_start, window_end, COUNT(*) AS n
FROM TABLE(CUMULATE(TABLE sales, DESCRIPTOR(ts), INTERVAL '10' MINUTE, INTERVAL '30' MINUTE,
                    INTERVAL '5' MINUTE))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;
""")
    results = evaluate(circuit, [
        StepInput({"sales": [{"ts": at("8:04"), "shop": "ann", "amount": 1},
                             {"ts": at("8:05"), "shop": "ann", "amount": 1}]}),
        StepInput({}, punctuations={"sales": [Punctuation(at("8:36"))]}),
    ])
    assert [r.value for r in results[1].outputs["v"]] == [
        {"window_start": at("7:35"), "window_end": at("8:05"), "n": 1},
        {"window_start": at("8:05"), "window_end": at("8:15"), "n": 1},
        {"window_start": at("8:05"), "window_end": at("8:25"), "n": 1},
        {"window_start": at("8:05"), "window_end": at("8:35"), "n": 1},
    ]


def test_s11_language_doc_cumulate_example_writes_each_window_when_complete() -> None:
    """docs/language.md's CUMULATE example is the view of these tests; semantics.md's table
    of its steps is what it writes."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "language.md").read_text("utf-8")
    section = doc[doc.index("**CUMULATE**"):doc.index("**SESSION**")]
    example = re.search(r"```sql\n(CREATE TABLE sales.*?)```", section, re.S)
    assert example is not None
    results = evaluate(compile_program("doc.sql", text=example[1]), STEPS)
    expected = evaluate(running("append", "EMIT AFTER WATERMARK"), STEPS)
    assert [[r.value for r in x.outputs["running"]] for x in results] == [
        [r.value for r in x.outputs["running"]] for x in expected]
    assert [r.value for r in results[0].outputs["running"]][0] == row(
        "ann", "8:00", "8:10", 1, 5)


CUMULATE = "FROM TABLE(CUMULATE(TABLE sales, DESCRIPTOR(ts), {args}))"


@pytest.mark.parametrize(("args", "group", "message", "fix"), [
    ("INTERVAL '10' MINUTE, INTERVAL '25' MINUTE", "window_end",
     "CUMULATE size 25 MINUTE is not a multiple of its step 10 MINUTE",
     "make the max size a whole number of steps"),
    ("INTERVAL '1' HOUR, INTERVAL '30' MINUTE", "window_end",
     "CUMULATE step 1 HOUR is larger than its max size 30 MINUTE",
     "use a step at most the size"),
    ("INTERVAL '0' MINUTE, INTERVAL '30' MINUTE", "window_end",
     "CUMULATE step and size must be positive", None),
    ("INTERVAL '10' MINUTE, INTERVAL '30' MINUTE, INTERVAL '30' MINUTE", "window_end",
     "CUMULATE offset must be at least 0 and less than the size", None),
    ("INTERVAL '10' MINUTE", "window_end", "CUMULATE takes 4 or 5 arguments",
     "TABLE(CUMULATE(TABLE t, DESCRIPTOR(col), step, size [, offset]))"),
    ("10, 30", "window_end", "bad CUMULATE argument: ts is TIMESTAMP", "use an INTERVAL"),
    ("INTERVAL '10' MINUTE, INTERVAL '30' MINUTE", "window_start",
     "a CUMULATE aggregate must GROUP BY window_end", "GROUP BY window_start, window_end"),
    ("INTERVAL '10' MINUTE, INTERVAL '30' MINUTE", "shop",
     "a CUMULATE aggregate must GROUP BY window_end", "GROUP BY window_start, window_end"),
])
def test_l7_cumulate_windows_are_refused_with_a_fix(
    args: str, group: str, message: str, fix: str | None
) -> None:
    sql = (f"CREATE VIEW v WITH ('topic' = 'v') AS SELECT {group}, COUNT(*) AS n\n"
           f"{CUMULATE.format(args=args)}\nGROUP BY {group};")
    with pytest.raises((CompileFailure, ProgramError)) as info:
        compile_sql(sql)
    text = str(info.value)
    assert message in text
    assert "test.sql:" in text
    if fix is not None:
        assert fix in text


def test_l7_a_cumulate_aggregate_without_group_by_is_refused_at_its_select() -> None:
    with pytest.raises(ProgramError) as info:
        compile_sql("CREATE VIEW v WITH ('topic' = 'v') AS SELECT COUNT(*) AS n\n"
                    + CUMULATE.format(args="INTERVAL '10' MINUTE, INTERVAL '30' MINUTE") + ";")
    (first,) = info.value.diagnostics
    assert "must GROUP BY window_end" in first.message
    assert (first.position.line, first.position.column) == (7, 39)
