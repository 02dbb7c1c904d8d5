"""S8 as a property: without late rows, every view equals its query over all rows in one batch,
however the input is split into steps.

The one-batch answer is computed by :func:`batch_windows` / :func:`batch_aggregate`, written
here from the SPEC's words (brute-force window enumeration, plain loops for COUNT/SUM/MIN/MAX/
ARG_MAX), not by the evaluator. Late rows are removed from the generated input first by
replaying S3/S5; removing them changes no waterline (a late row's ``c - L`` is below ``w(t-1)``
already), so the remaining input has no late row at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from circuit_builders import (
    BIGINT,
    TIMESTAMP,
    VARCHAR,
    agg,
    circuit,
    grouped,
    make_table,
    make_view,
    ref,
    window_attributes,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.circuit.ir import (
    Call,
    Circuit,
    Column,
    EmitPolicy,
    Filter,
    Literal_,
    SqlType,
    View,
    Window,
)
from app.circuit.reference import Punctuation, Reference, StepInput, StepResult

BOOL = SqlType("BOOLEAN")
BIGINT_N = SqlType("BIGINT")
TS_N = SqlType("TIMESTAMP")
DOUBLE = SqlType("DOUBLE")
KEYS = ("window_start", "window_end", "k")

Row = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# The one-batch evaluation, independent of app.circuit.


def batch_windows(c: int, kind: str, size: int, slide: int, offset: int) -> list[tuple[int, int]]:
    """Every [s, s + size) with s = k * slide + offset containing c, by enumeration (S9)."""
    step = size if kind == "TUMBLE" else slide
    k = (c - offset - size) // step - 1
    found = []
    while k * step + offset <= c:
        s = k * step + offset
        if s <= c < s + size:
            found.append((s, s + size))
        k += 1
    return found


def batch_aggregate(rows: Sequence[Row], window: tuple[str, int, int, int], x_above: int | None,
                    having_min: int | None) -> dict[tuple[Any, ...], Row]:
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for row in rows:
        if x_above is not None and not (row["x"] is not None and row["x"] > x_above):
            continue
        for start, end in batch_windows(row["ts"], *window):
            groups.setdefault((start, end, row["k"]), []).append(row)
    result = {}
    for (start, end, k), members in groups.items():
        xs = [m["x"] for m in members if m["x"] is not None]
        arg = None
        best = None
        for m in members:  # arrival order: the first strict maximum wins ties
            if m["x"] is not None and (best is None or m["x"] > best):
                best, arg = m["x"], m["ts"]
        value = {
            "window_start": start, "window_end": end, "k": k,
            "n": len(members), "nx": len(xs), "s": sum(xs) if xs else None,
            "hi": max(xs) if xs else None, "lo": min(xs) if xs else None,
            "avg": sum(xs) / len(xs) if xs else None, "at_hi": arg,
        }
        if having_min is None or value["n"] >= having_min:
            result[(start, end, k)] = value
    return result


# ---------------------------------------------------------------------------------------------
# The circuit under test.


def windowed_view(name: str, window: Window, x_above: int | None, having_min: int | None,
                  emit: EmitPolicy, fmt: str) -> View:
    ops: list[Any] = [window]
    if x_above is not None:
        ops.append(Filter(Call(">", (ref("x", BIGINT_N), Literal_(x_above, BIGINT)), BOOL)))
    having = None
    if having_min is not None:
        having = Call(">=", (ref("n", BIGINT), Literal_(having_min, BIGINT)), BOOL)
    x = ref("x", BIGINT_N)
    ops += grouped(
        [("window_start", ref("window_start", TIMESTAMP)),
         ("window_end", ref("window_end", TIMESTAMP)), ("k", ref("k", VARCHAR))],
        [("n", agg("COUNT", type_=BIGINT)), ("nx", agg("COUNT", x, type_=BIGINT)),
         ("s", agg("SUM", x, type_=BIGINT_N)), ("hi", agg("MAX", x, type_=BIGINT_N)),
         ("lo", agg("MIN", x, type_=BIGINT_N)), ("avg", agg("AVG", x, type_=DOUBLE)),
         ("at_hi", agg("ARG_MAX", ref("ts", TIMESTAMP), x, type_=TS_N))],
        having=having,
    )
    columns = [Column("window_start", TIMESTAMP), Column("window_end", TIMESTAMP),
               Column("k", VARCHAR), Column("n", BIGINT), Column("nx", BIGINT),
               Column("s", BIGINT_N), Column("hi", BIGINT_N), Column("lo", BIGINT_N),
               Column("avg", DOUBLE), Column("at_hi", TS_N)]
    return make_view(name, "ev", ops, columns, key=KEYS,
                     time_attributes=window_attributes("ev", "ts"), emit=emit, fmt=fmt)


def build(lateness: int, window: Window, x_above: int | None, having_min: int | None) -> Circuit:
    table = make_table("ev", [Column("ts", TIMESTAMP), Column("k", VARCHAR),
                              Column("x", BIGINT_N)], lateness={"ts": lateness})
    filtered = make_view(
        "filtered", "ev",
        [Filter(Call(">", (ref("x", BIGINT_N), Literal_(3, BIGINT)), BOOL))],
        list(table.columns), fmt="append",
    )
    return circuit([table], [
        windowed_view("upsert", window, x_above, having_min, EmitPolicy(), "upsert"),
        windowed_view("stream", window, x_above, having_min, EmitPolicy(stream=True),
                      "changelog"),
        windowed_view("final", window, x_above, having_min, EmitPolicy(after_watermark=True),
                      "upsert"),
        filtered,
    ])


# ---------------------------------------------------------------------------------------------
# Inputs.


_row = st.fixed_dictionaries({
    "ts": st.integers(-20, 80),
    "k": st.sampled_from([None, "a", "b"]),
    "x": st.one_of(st.none(), st.integers(-3, 6)),
})


@st.composite
def rows_strategy(draw: st.DrawFn) -> list[Row]:
    """Up to 40 rows; often nearly in time order, so windows close while rows still come."""
    count = draw(st.integers(0, 40))
    rows = draw(st.lists(_row, min_size=count, max_size=count))
    if draw(st.booleans()):
        rows.sort(key=lambda r: r["ts"] + draw(st.integers(-6, 6)))
    return rows


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    rows = draw(rows_strategy())
    cuts = sorted(draw(st.lists(st.integers(0, len(rows)), max_size=6)))
    bounds = [0, *cuts, len(rows)]
    batches = [rows[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    kind = draw(st.sampled_from(["TUMBLE", "HOP"]))
    size = draw(st.sampled_from([5, 10, 30]))
    slide = size if kind == "TUMBLE" else draw(st.sampled_from([2, 5, 10, 40]))
    return {
        "batches": batches,
        "window": Window(kind, "ts", size, slide, draw(st.sampled_from([0, 3, -7]))),
        "lateness": draw(st.sampled_from([0, 4, 25, 1000])),
        "x_above": draw(st.sampled_from([None, 0])),
        "having_min": draw(st.sampled_from([None, 2])),
        "punctuate": draw(st.booleans()),
    }


def drop_late(batches: list[list[Row]], lateness: int) -> list[list[Row]]:
    """Replay S3/S5 on ts; keep only on-time rows (their waterlines are the same)."""
    waterline: int | None = None
    kept = []
    for batch in batches:
        kept.append([r for r in batch if waterline is None or r["ts"] >= waterline])
        if batch:
            top = max(r["ts"] for r in batch) - lateness
            waterline = top if waterline is None else max(waterline, top)
    return kept


def run(scenario: dict[str, Any]) -> tuple[list[list[Row]], list[StepResult], Circuit]:
    batches = drop_late(scenario["batches"], scenario["lateness"])
    circ = build(scenario["lateness"], scenario["window"], scenario["x_above"],
                 scenario["having_min"])
    steps = [StepInput({"ev": batch}, batch_time_ms=i) for i, batch in enumerate(batches)]
    if scenario["punctuate"]:
        steps.append(StepInput({}, len(steps), punctuations={"ev": [Punctuation(10_000)]}))
        batches.append([])
    reference = Reference(circ)
    return batches, [reference.step(s) for s in steps], circ


def apply_upsert(table: dict[tuple[Any, ...], Row], result: StepResult, view: str) -> None:
    for record in result.outputs[view]:
        assert record.key is not None
        key = tuple(record.key[k] for k in KEYS)
        if record.value is None:
            assert key in table, "tombstone for a key never written"
            del table[key]
        else:
            table[key] = dict(record.value)


def apply_changelog(table: dict[tuple[Any, ...], Row], result: StepResult, view: str,
                    versions: dict[tuple[Any, ...], int]) -> None:
    for record in result.outputs[view]:
        assert record.value is not None
        value = dict(record.value)
        undo, ver, _ = value.pop("undo"), value.pop("ver"), value.pop("ptime")
        key = tuple(value[k] for k in KEYS)
        assert ver == versions.get(key, 0), "ver counts the group's records from 0"
        versions[key] = ver + 1
        if undo:
            assert table.pop(key) == value, "a retraction retracts the current row"
        else:
            assert key not in table, "a new row follows the retraction of the old one"
            table[key] = value


PROPERTY = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def check(scenario: dict[str, Any]) -> None:
    batches, results, _ = run(scenario)
    window = scenario["window"]
    shape = (window.kind, window.size, window.slide, window.offset)
    upsert: dict[tuple[Any, ...], Row] = {}
    stream: dict[tuple[Any, ...], Row] = {}
    final: dict[tuple[Any, ...], Row] = {}
    versions: dict[tuple[Any, ...], int] = {}
    seen: list[Row] = []
    filtered: list[Row] = []
    for batch, result in zip(batches, results, strict=True):
        assert result.dead_letters == ()
        seen += batch
        apply_upsert(upsert, result, "upsert")
        apply_changelog(stream, result, "stream", versions)
        for record in result.outputs["final"]:
            key = tuple(record.value[k] for k in KEYS) if record.value else None
            assert key not in final, "AFTER WATERMARK writes one final row per group"
        apply_upsert(final, result, "final")
        filtered += [dict(r.value) for r in result.outputs["filtered"]]
        expected = batch_aggregate(seen, shape, scenario["x_above"], scenario["having_min"])
        assert upsert == expected  # S8 after every step
        assert stream == expected
        waterline = result.waterlines["ev"]["ts"]
        complete = {k: v for k, v in expected.items()
                    if waterline is not None and k[1] <= waterline}
        assert final == complete  # S11/S12: exactly the complete groups, final values
        held = [k for k in expected if waterline is None or k[1] > waterline]
        assert result.state_rows["final"] >= len(held)  # incomplete groups are kept
    assert filtered == [r for r in seen if r["x"] is not None and r["x"] > 3]
    if scenario["punctuate"]:  # S4 + S11: a bound past every window frees all state
        assert {results[-1].state_rows[v] for v in ("upsert", "stream", "final")} == {0}


@PROPERTY
@given(scenarios())
def test_s8_views_equal_one_batch_evaluation_however_input_is_split(
    scenario: dict[str, Any]
) -> None:
    check(scenario)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_s8_views_equal_one_batch_evaluation_many_examples(scenario: dict[str, Any]) -> None:
    check(scenario)


@PROPERTY
@given(rows_strategy(), st.data())
def test_s8_splitting_steps_changes_no_final_upsert_table(rows: list[Row], data: Any) -> None:
    """One step vs. many steps: the same materialized views (without late rows)."""
    circ = build(10_000, Window("HOP", "ts", 10, 5, 0), None, None)

    def materialized(batches: list[list[Row]]) -> dict[tuple[Any, ...], Row]:
        reference = Reference(circ)
        table: dict[tuple[Any, ...], Row] = {}
        for i, batch in enumerate(batches):
            apply_upsert(table, reference.step(StepInput({"ev": batch}, i)), "upsert")
        return table

    cut = data.draw(st.integers(0, len(rows)))
    assert materialized([rows]) == materialized([rows[:cut], rows[cut:]])


def test_s9_batch_windows_enumeration_matches_the_paper_hop_example() -> None:
    assert batch_windows(7, "HOP", 10, 5, 0) == [(0, 10), (5, 15)]
    assert batch_windows(-1, "TUMBLE", 10, 10, 0) == [(-10, 0)]
