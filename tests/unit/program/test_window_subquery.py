"""SPEC S16, S18 and L7 in the compiler: NEXMark Q7 as the paper's listing 1 states it.

``WHERE B.price = (SELECT MAX(B1.price) FROM <window function over bid> B1 WHERE
B1.window_end = B.window_end)`` is decorrelated into the join form (listing 2,
``pipelines/nexmark_q7.sql``): a generated local view of the aggregate per window (written
once per window, final) and the INNER window join of the query's rows with it ON
``window_end`` and the price. It writes the join form's rows in the join form's steps.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from app.circuit.ir import Aggregate, Circuit, ColumnRef, Filter
from app.circuit.reference import Punctuation, StepInput, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.compose import compose

ROOT = Path(__file__).resolve().parents[3]
PIPELINE = ROOT / "pipelines" / "nexmark_q7.sql"

TUMBLE = "TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE))"
AS_WRITTEN = f"""
CREATE VIEW q7_as_written WITH ('topic' = 'q7w', 'format' = 'append') AS
SELECT B.window_start AS wstart, B.window_end AS wend, B.bidtime, B.price, B.item
FROM {TUMBLE} AS B
WHERE B.price = (SELECT MAX(B1.price) FROM {TUMBLE} B1
                 WHERE B1.window_end = B.window_end);
"""

DAY = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
LATENESS_MS = 4 * 60_000  # the pipeline's


def at(clock: str) -> int:
    hours, minutes = (int(p) for p in clock.split(":"))
    return int((DAY + dt.timedelta(hours=hours, minutes=minutes)).timestamp() * 1000)


def with_pipeline(text: str) -> Circuit:
    """The shipped Q7 program (ARG_MAX and join forms) with ``text`` after it."""
    return compile_program(PIPELINE, PIPELINE.read_text(encoding="utf-8") + text)


def steps(events: list[tuple[str, tuple[Any, ...]]]) -> list[StepInput]:
    """One step per event of the paper's notation: ("wm", t) moves the waterline to t,
    ("insert", bidtime, price, item) inserts a bid."""
    out = []
    for ptime, event in events:
        if event[0] == "wm":
            bound = at(event[1]) + LATENESS_MS
            out.append(StepInput({}, at(ptime), punctuations={"bid": [Punctuation(bound)]}))
        else:
            _, bidtime, price, item = event
            out.append(StepInput({"bid": [{"bidtime": at(bidtime), "price": price,
                                           "item": item}]}, at(ptime)))
    return out


#: The paper's data set (section 4), listing 3 its answer.
PAPER = [
    ("8:07", ("wm", "8:05")),
    ("8:08", ("insert", "8:07", 2, "A")),
    ("8:12", ("insert", "8:11", 3, "B")),
    ("8:13", ("insert", "8:05", 4, "C")),
    ("8:14", ("wm", "8:08")),
    ("8:15", ("insert", "8:09", 5, "D")),
    ("8:16", ("wm", "8:12")),
    ("8:17", ("insert", "8:13", 1, "E")),
    ("8:18", ("insert", "8:17", 6, "F")),
    ("8:21", ("wm", "8:20")),
]


def written(circuit: Circuit, view: str, events: list[tuple[str, tuple[Any, ...]]],
            ) -> list[list[dict[str, Any]]]:
    return [[dict(r.value or {}) for r in result.outputs[view]]
            for result in evaluate(circuit, steps(events))]


# -- the circuit ---------------------------------------------------------------------------


def test_s16_the_per_window_subquery_is_a_window_join_with_the_aggregate() -> None:
    """The subquery is the generated view ``q7_as_written.b1``: MAX(price) per window_start,
    window_end, each window once, final; the window function of FROM is the side
    ``q7_as_written.b``; the view is their INNER window join with the price as a key."""
    circuit = with_pipeline(AS_WRITTEN)
    names = [v.name for v in circuit.views]
    assert names[-3:] == ["q7_as_written.b", "q7_as_written.b1", "q7_as_written"]
    aggregate = circuit.view("q7_as_written.b1")
    assert aggregate.emit.after_watermark and aggregate.output is None
    assert [c.name for c in aggregate.columns] == ["window_start", "window_end", "max_price"]
    grouped = next(op for op in aggregate.operators if isinstance(op, Aggregate))
    assert [name for name, _ in grouped.keys] == ["window_start", "window_end"]
    assert [call.fn for _, call in grouped.aggregates] == ["MAX"]
    join = circuit.view("q7_as_written").join
    assert join is not None and (join.form, join.kind) == ("window", "inner")
    assert join.left.source == "q7_as_written.b" and join.right.source == "q7_as_written.b1"
    assert join.keys == ((ColumnRef("b.price", join.keys[0][0].type),
                          ColumnRef("b1.max_price", join.keys[0][1].type)),)
    assert [c.name for c in circuit.view("q7_as_written").columns] == [
        "wstart", "wend", "bidtime", "price", "item"]
    assert circuit.warnings == ()


# -- rows (reference evaluator) ------------------------------------------------------------


def test_s16_q7_as_written_writes_the_join_forms_rows_in_its_steps() -> None:
    """On the paper's data set: listing 3's rows (D at 8:16, F at 8:21), each step exactly
    the rows the join form writes."""
    circuit = with_pipeline(AS_WRITTEN)
    as_written = written(circuit, "q7_as_written", PAPER)
    assert as_written == written(circuit, "max_bid_join", PAPER)
    emitted = [(ptime, [r["item"] for r in rows])
               for (ptime, _), rows in zip(PAPER, as_written, strict=True) if rows]
    assert emitted == [("8:16", ["D"]), ("8:21", ["F"])]
    assert as_written[5] == [] and as_written[6] == [
        {"wstart": at("8:00"), "wend": at("8:10"), "bidtime": at("8:09"), "price": 5,
         "item": "D"}]


def test_s16_two_bids_at_a_windows_top_price_are_both_written_as_by_the_join_form() -> None:
    """A tie: the join form writes both bids (the ARG_MAX form the earlier), and so does the
    subquery form."""
    events = [("8:05", ("insert", "8:01", 5, "P")), ("8:05", ("insert", "8:04", 5, "Q")),
              ("8:05", ("insert", "8:02", 2, "R")), ("8:30", ("wm", "8:30"))]
    circuit = with_pipeline(AS_WRITTEN)
    as_written = written(circuit, "q7_as_written", events)
    assert as_written == written(circuit, "max_bid_join", events)
    assert sorted(r["item"] for r in as_written[-1]) == ["P", "Q"]


def test_s16_a_correlation_on_another_column_is_a_group_key_and_a_join_key() -> None:
    """``B1.item = B.item``: the top bid of each item in each window (GROUP BY window_start,
    window_end, item; joined on window_end, item and price); a condition of the subquery on
    its own rows filters the aggregate's input; ``SELECT *`` is the query's own columns."""
    circuit = with_pipeline(f"""
CREATE VIEW per_item WITH ('topic' = 'per_item', 'format' = 'append') AS
SELECT * FROM {TUMBLE} AS B
WHERE B.price = (SELECT MAX(B1.price) FROM {TUMBLE} B1
                 WHERE B1.item = B.item AND B1.window_end = B.window_end AND B1.price < 6)
  AND B.price > 1;
""")
    aggregate = circuit.view("per_item.b1")
    grouped = next(op for op in aggregate.operators if isinstance(op, Aggregate))
    assert [name for name, _ in grouped.keys] == ["window_start", "item", "window_end"]
    assert any(isinstance(op, Filter) for op in aggregate.operators)
    view = circuit.view("per_item")
    assert any(isinstance(op, Filter) for op in view.operators)  # B.price > 1
    assert [c.name for c in view.columns] == [
        "bidtime", "price", "item", "window_start", "window_end"]
    events = [("8:01", ("insert", "8:01", 3, "A")), ("8:02", ("insert", "8:02", 4, "A")),
              ("8:03", ("insert", "8:03", 9, "A")), ("8:04", ("insert", "8:04", 1, "B")),
              ("8:05", ("insert", "8:05", 2, "C")), ("8:30", ("wm", "8:30"))]
    rows = written(circuit, "per_item", events)
    # A's top below 6 is 4 (9 is filtered out of the aggregate); B's is 1, filtered by
    # B.price > 1; C's is 2.
    assert [(r["item"], r["price"]) for r in rows[-1]] == [("A", 4), ("C", 2)]
    assert all(not r for r in rows[:-1])


def test_s16_min_over_a_windowed_view_and_unqualified_columns() -> None:
    """MIN, a windowed LOCAL view in both FROMs, and the query's bare columns, which name its
    own relation (the subquery was the only other)."""
    circuit = with_pipeline(f"""
CREATE LOCAL VIEW windowed AS SELECT * FROM {TUMBLE};
CREATE VIEW lowest WITH ('topic' = 'lowest', 'format' = 'append') AS
SELECT window_end, item, price FROM windowed AS w
WHERE price = (SELECT MIN(v.price) FROM windowed v WHERE v.window_end = w.window_end);
""")
    grouped = next(op for op in circuit.view("lowest.v").operators
                   if isinstance(op, Aggregate))
    assert [name for name, _ in grouped.keys] == ["window_end"]
    assert [call.fn for _, call in grouped.aggregates] == ["MIN"]
    rows = written(circuit, "lowest", PAPER)
    assert [(r["item"], r["price"]) for rs in rows for r in rs] == [("A", 2), ("E", 1)]


def test_s19_spark_runs_q7_as_written() -> None:
    """The decorrelated views run on Spark (stage boundaries where one query cannot)."""
    assert compose(with_pipeline(AS_WRITTEN)).refused == ()


# -- errors (L7) ---------------------------------------------------------------------------

ERRORS = [
    (f"WHERE B.price = (SELECT MAX(B1.price) FROM {TUMBLE} B1)",
     "unsupported: a subquery in WHERE whose MAX is not per window",
     "add WHERE b1.window_end = b.window_end to the subquery"),
    (f"WHERE B.price = (SELECT MAX(B1.price) FROM {TUMBLE} B1\n"
     " WHERE B1.window_end >= B.window_end)",
     "unsupported: B1.window_end >= B.window_end in a subquery compared per window",
     "write the join form"),
    (f"WHERE B.price IN (SELECT MAX(B1.price) FROM {TUMBLE} B1\n"
     " WHERE B1.window_end = B.window_end)",
     "unsupported: a subquery in IN: (SELECT MAX(B1.price) FROM TABLE(...) AS B1",
     "as NEXMark Q7's WHERE price"),
    (f"WHERE B.price = (SELECT AVG(B1.price) FROM {TUMBLE} B1\n"
     " WHERE B1.window_end = B.window_end)",
     "unsupported: a subquery in WHERE", "as NEXMark Q7's WHERE price"),
]


@pytest.mark.parametrize(("where", "message", "fix"), ERRORS,
                         ids=[e[1][:40] for e in ERRORS])
def test_l7_subqueries_that_state_no_per_window_comparison_are_refused(
        where: str, message: str, fix: str) -> None:
    """L7: a subquery compared without a per-window correlation, or correlated otherwise
    than by equalities, is refused at the subquery with the form that states it; other
    subqueries in WHERE keep the join form as the fix."""
    text = (f"CREATE VIEW v WITH ('topic' = 'v', 'format' = 'append') AS\n"
            f"SELECT B.item FROM {TUMBLE} AS B\n{where};\n")
    with pytest.raises(ProgramError) as info:
        with_pipeline(text)
    first = info.value.diagnostics[0]
    assert first.message.startswith(message), first.message
    assert first.fix is not None and fix in first.fix, first.fix
