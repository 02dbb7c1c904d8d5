"""One slot's step of Tidemark's join operator (app/runtime/operators/join_operator.py, ADR 0017),
by hand against SPEC S16. OUTER interval joins: matches when found, an unmatched row once the
*other* side's waterline passes its bound (never earlier), a NULL time padded at once.
Temporal joins: a probe row once the versions' waterline passes its time, with the version
valid at its time, the versions no lookup can find freed."""

from __future__ import annotations

import json
from typing import Any

from app.circuit.ir import Call, ColumnRef, SqlType
from app.runtime.operators.join_slots import JoinOperatorSpec, step_slot

# r.t BETWEEN l.t - 2 AND l.t + 3 (ms), LATENESS 1 on the left table, 0 on the right.
FULL = JoinOperatorSpec("full", "interval", -2, 3, 1, 0)


def _row(side: str, key: str | None, t: int | None, offset: int) -> dict[str, Any]:
    return {"side": side, "k": key, "t": t, "tbl": None, "pt": 0, "of": offset,
            "row": f"{side}{offset}"}


def _probe(table: str, top: int) -> dict[str, Any]:
    return {"side": "P", "k": None, "t": top, "tbl": table, "pt": 0, "of": 0, "row": None}


def test_a_match_is_written_when_its_second_row_arrives() -> None:
    out, doc = step_slot(FULL, None, [_row("L", "a", 10, 1), _probe("L", 10)])
    assert out == []
    assert doc["w"] == {"L": 9, "R": None}
    # r.t = 13 = l.t + 3: within the bound (inclusive).
    out, doc = step_slot(FULL, doc, [_row("R", "a", 13, 2), _probe("R", 13)])
    assert out == [("L1", "R2")]


def test_an_unmatched_row_waits_for_the_other_sides_waterline_s16() -> None:
    out, doc = step_slot(FULL, None, [_row("L", "a", 10, 1), _probe("L", 10)])
    # w(R) = 13 = l.t + 3: a right row at 13 could still come and match.
    out, doc = step_slot(FULL, doc, [_probe("R", 13)])
    assert out == []
    # Its own table's waterline moving proves nothing.
    out, doc = step_slot(FULL, doc, [_probe("L", 100)])
    assert out == []
    out, doc = step_slot(FULL, doc, [_probe("R", 14)])
    assert out == [("L1", None)]
    assert doc["held"]["L"] == []


def test_a_matched_row_is_freed_without_a_padded_row() -> None:
    out, doc = step_slot(
        FULL, None, [_row("L", "a", 10, 1), _row("R", "a", 8, 2), _probe("L", 10), _probe("R", 8)]
    )
    assert out == [("L1", "R2")]
    # The right row at 8 is done once w(L) > 8 + 2; the left one once w(R) > 13.
    out, doc = step_slot(FULL, doc, [_probe("L", 12), _probe("R", 20)])
    assert out == []
    assert doc["held"] == {"L": [], "R": []}


def test_keys_must_be_equal_and_a_null_time_is_padded_at_once() -> None:
    out, doc = step_slot(
        FULL,
        None,
        [_row("L", "a", 10, 1), _row("R", "b", 10, 2), _row("R", None, 10, 3),
         _row("L", None, 10, 5), _row("L", "a", None, 4)],
    )
    assert out == [("L4", None)]
    # A NULL key matches nothing (not even a NULL key) and waits like any other row.
    assert [r[2] for r in doc["held"]["L"]] == ["L1", "L5"]
    assert [r[2] for r in doc["held"]["R"]] == ["R2", "R3"]
    out, doc = step_slot(FULL, doc, [_probe("L", 100), _probe("R", 100)])
    assert out == [("L1", None), ("L5", None), (None, "R2"), (None, "R3")]


def test_only_the_outer_side_is_padded() -> None:
    left = JoinOperatorSpec("left", "interval", -2, 3, 1, 0)
    right = JoinOperatorSpec("right", "interval", -2, 3, 1, 0)
    rows = [_row("L", "a", 10, 1), _row("R", "b", 10, 2), _probe("L", 100), _probe("R", 100)]
    assert step_slot(left, None, rows)[0] == [("L1", None)]
    assert step_slot(right, None, rows)[0] == [(None, "R2")]


def test_waterlines_take_the_highest_probe_and_never_move_back_s3() -> None:
    _, doc = step_slot(FULL, None, [_probe("L", 10), _probe("L", 30), _probe("R", 5)])
    assert doc["w"] == {"L": 29, "R": 5}
    _, doc = step_slot(FULL, doc, [_probe("L", 20)])
    assert doc["w"] == {"L": 29, "R": 5}


# amounts (L, LATENESS 0) FOR SYSTEM_TIME AS OF rates (R, LATENESS 0).
TEMPORAL = JoinOperatorSpec("left", "temporal", 0, 0, 0, 0)


def test_a_probe_row_waits_until_the_versions_waterline_passes_its_time_s16() -> None:
    out, doc = step_slot(TEMPORAL, None, [_row("R", "eur", 900, 1), _probe("R", 900)])
    assert out == []
    out, doc = step_slot(TEMPORAL, doc, [_row("L", "eur", 930, 2), _probe("L", 930)])
    # w(rates) = 900: a version at or below 930 could still come.
    assert out == []
    out, doc = step_slot(TEMPORAL, doc, [_probe("R", 930)])
    # w(rates) = 930 = the row's time: a version at exactly 930 is on time (S5).
    assert out == []
    out, doc = step_slot(TEMPORAL, doc, [_row("R", "eur", 1000, 3), _probe("R", 1000)])
    assert out == [("L2", "R1")]
    assert doc["held"]["L"] == []


def test_the_version_is_the_latest_at_or_below_the_row_time_in_any_arrival_order() -> None:
    rows = [_row("R", "eur", 1000, 1), _row("R", "eur", 900, 2), _row("L", "eur", 950, 3),
            _row("L", "eur", 1000, 4), _row("L", "eur", 899, 5), _probe("R", 2000)]
    out, _ = step_slot(TEMPORAL, None, rows)
    # In arrival order; the 899 row is before every version: padded (LEFT).
    assert out == [("L3", "R2"), ("L4", "R1"), ("L5", None)]
    inner = JoinOperatorSpec("inner", "temporal", 0, 0, 0, 0)
    assert step_slot(inner, None, rows)[0] == [("L3", "R2"), ("L4", "R1")]


def test_a_later_row_at_a_versions_time_replaces_it_and_null_keys_match_nothing() -> None:
    rows = [_row("R", "eur", 900, 1), _row("R", "eur", 900, 2), _row("R", None, 900, 3),
            _row("L", "eur", 930, 4), _row("L", None, 930, 5), _row("L", "eur", None, 6),
            _probe("R", 1000)]
    out, _ = step_slot(TEMPORAL, None, rows)
    # A NULL time is written padded at once (valid for no version), before the step's
    # released rows.
    assert out == [("L6", None), ("L4", "R2"), ("L5", None)]


def test_versions_no_lookup_can_find_are_freed_one_per_key_stays() -> None:
    rows = [_row("R", "eur", t, t) for t in (100, 200, 300, 400)]
    _, doc = step_slot(TEMPORAL, None, [*rows, _probe("R", 400), _probe("L", 250)])
    # A lookup is at or above min(w(amounts), w(rates)) = 250: 200 is the latest version
    # at or below it, 100 can never be found again.
    assert [v[0] for v in doc["versions"]['eur']] == [200, 300, 400]
    _, doc = step_slot(TEMPORAL, doc, [_probe("L", 1000)])
    assert [v[0] for v in doc["versions"]['eur']] == [400]


def test_versions_stay_for_an_aggregate_whose_rows_come_a_step_after_its_waterline() -> None:
    """A native aggregate's final row of a window ending at 400 reaches the operator the step
    after w(L) passed 400 (Spark's watermark lags a batch): the version valid at 400 must
    still be there, so versions are freed by the w(L) the step started with."""
    lagging = JoinOperatorSpec("left", "temporal", 0, 0, 0, 0, probe_lags=True)
    rows = [_row("R", "eur", t, t) for t in (300, 450)]
    _, doc = step_slot(lagging, None, [*rows, _probe("R", 500), _probe("L", 420)])
    _, doc = step_slot(lagging, doc, [_probe("R", 500), _probe("L", 480)])
    assert [v[0] for v in doc["versions"]["eur"]] == [300, 450]
    out, doc = step_slot(lagging, doc, [_row("L", "eur", 400, 9)])
    assert out == [("L9", "R300")]
    # Without the lag, w(L) = 480 frees 300 at once: the late row would find nothing.
    _, eager = step_slot(TEMPORAL, None, [*rows, _probe("R", 500), _probe("L", 480)])
    assert [v[0] for v in eager["versions"]["eur"]] == [450]


def _deletion(key: str, t: int, offset: int) -> dict[str, Any]:
    """A tombstone of a table keyed by its Kafka key: a versioned row without its columns."""
    return {**_row("R", key, t, offset), "row": None}


def test_a_deletion_ends_its_keys_version_until_the_next_one_s16() -> None:
    rows = [_row("R", "gbp", 900, 1), _deletion("gbp", 940, 2), _row("R", "gbp", 1005, 3),
            _row("L", "gbp", 930, 4), _row("L", "gbp", 945, 5), _row("L", "gbp", 1010, 6),
            _probe("R", 2000)]
    out, _ = step_slot(TEMPORAL, None, rows)
    assert out == [("L4", "R1"), ("L5", None), ("L6", "R3")]
    inner = JoinOperatorSpec("inner", "temporal", 0, 0, 0, 0)
    assert step_slot(inner, None, rows)[0] == [("L4", "R1"), ("L6", "R3")]
    # At one time, the later record wins: a row after the deletion brings the key back.
    again = [_row("R", "gbp", 900, 1), _deletion("gbp", 900, 2), _row("L", "gbp", 950, 3),
             _probe("R", 1000)]
    assert step_slot(TEMPORAL, None, again)[0] == [("L3", None)]
    back = [*again[:2], _row("R", "gbp", 900, 4), again[2], again[3]]
    assert step_slot(TEMPORAL, None, back)[0] == [("L3", "R4")]


def test_a_deleted_key_is_freed_once_no_lookup_can_reach_it_s11() -> None:
    rows = [_row("R", "gbp", 900, 1), _deletion("gbp", 940, 2), _row("R", "eur", 900, 3)]
    _, doc = step_slot(TEMPORAL, None, [*rows, _probe("R", 1000), _probe("L", 930)])
    # A lookup at 930 could still find 900: both stay.
    assert [v[0] for v in doc["versions"]["gbp"]] == [900, 940]
    _, doc = step_slot(TEMPORAL, doc, [_probe("L", 950)])
    # Every lookup is at or above 950, where gbp is deleted: the key holds no state.
    assert "gbp" not in doc["versions"]
    assert [v[0] for v in doc["versions"]["eur"]] == [900]


def test_a_window_join_pads_a_window_once_the_other_side_reaches_its_end_s10_s16() -> None:
    """A window join is one on window_end with a bound of 0; a future row's window_end is
    above the waterline (S10), so a window ending at 60 is done once the other side's w
    reaches 60, not only once it passes it."""
    window = JoinOperatorSpec("full", "window", 0, 0, 0, 0)
    out, doc = step_slot(window, None, [_row("L", "a", 60, 1), _probe("L", 30), _probe("R", 59)])
    assert out == []
    out, doc = step_slot(window, doc, [_probe("R", 60)])
    assert out == [("L1", None)]
    assert doc["held"]["L"] == []


def test_a_pair_must_pass_the_conditions_of_both_sides_s16() -> None:
    """``l.x < r.x`` (both sides) is checked on each pair with the reference evaluator's
    functions: a pair that fails it is no match, so the row stays unmatched and is padded;
    a NULL value makes it fail (SQL truth)."""
    x = ColumnRef("l.x", SqlType("BIGINT")), ColumnRef("r.x", SqlType("BIGINT"))
    spec = JoinOperatorSpec(
        "left", "interval", -2, 3, 1, 0, pair=Call("<", x, SqlType("BOOLEAN")),
        pair_types=(("l.x", "BIGINT"), ("r.x", "BIGINT")),
    )

    def row(side: str, t: int, offset: int, value: int | None) -> dict[str, Any]:
        name = "l.x" if side == "L" else "r.x"
        return {**_row(side, "a", t, offset), "vals": json.dumps({name: value})}

    # Spark's to_json leaves a NULL field out of ``vals``: L5's x is NULL as L3's is.
    omitted = {**_row("L", "a", 10, 5), "vals": "{}"}
    out, doc = step_slot(spec, None, [
        row("L", 10, 1, 5), row("L", 10, 2, 9), row("L", 10, 3, None), omitted,
        row("R", 11, 4, 7), _probe("L", 10), _probe("R", 11),
    ])
    assert out == [("L1", "R4")]
    out, _ = step_slot(spec, doc, [_probe("R", 20)])
    assert out == [("L2", None), ("L3", None), ("L5", None)]


# -- OUTER joins without a time bound (S16, S18) ---------------------------------------------

LEFT_REGULAR = JoinOperatorSpec("left", "regular", 0, 0, 0, 0)


def _change(side: str, key: str | None, row: str, weight: int = 1,
            vals: str | None = None) -> dict[str, Any]:
    return {"side": side, "k": key, "t": None, "tbl": None, "pt": 0, "of": 0, "row": row,
            "w": weight, "vals": vals}


def test_s16_s18_a_regular_outer_row_is_padded_at_once_and_retracted_on_its_match() -> None:
    """As the reference evaluator (test_reference_outer_join.py): padded at once, then
    retracted before its pair is written; a second match adds a pair only."""
    out, doc = step_slot(LEFT_REGULAR, None, [_change("L", "7", "o1"), _change("L", "7", "o2")])
    assert out == [("o1", None, False), ("o2", None, False)]
    out, doc = step_slot(LEFT_REGULAR, doc, [_change("R", "7", "ann")])
    assert out == [("o1", None, True), ("o2", None, True), ("o1", "ann", False),
                   ("o2", "ann", False)]
    out, doc = step_slot(LEFT_REGULAR, doc, [_change("R", "7", "bob")])
    assert out == [("o1", "bob", False), ("o2", "bob", False)]
    assert json.loads(json.dumps(doc)) == doc  # the state is a JSON document


def test_s16_s18_a_retracted_match_brings_the_padded_row_back() -> None:
    """An updating right side (weights): its row retracted, the left row is padded again;
    a NULL key (or a row failing its side's conditions) matches nothing."""
    out, doc = step_slot(LEFT_REGULAR, None, [_change("L", "7", "c7"), _change("R", "7", "n1")])
    assert out == [("c7", "n1", False)]
    out, doc = step_slot(LEFT_REGULAR, doc, [_change("R", "7", "n1", -1)])
    assert out == [("c7", "n1", True), ("c7", None, False)]
    assert doc["rows"]["R"] == {}
    out, doc = step_slot(LEFT_REGULAR, doc, [_change("L", None, "x"), _change("R", None, "y")])
    assert out == [("x", None, False)]


def test_s16_s18_a_regular_join_checks_its_conditions_of_both_sides() -> None:
    """``l.v <= r.c`` on the rows' values: a pair failing it is no match."""
    pair = Call("<=", (ColumnRef("l.v", SqlType("BIGINT")), ColumnRef("r.c", SqlType("BIGINT"))),
                SqlType("BOOLEAN"))
    spec = JoinOperatorSpec("full", "regular", 0, 0, 0, 0, pair=pair,
                            pair_types=(("l.v", "BIGINT"), ("r.c", "BIGINT")))
    out, doc = step_slot(spec, None, [_change("L", "7", "o", vals='{"l.v": 50}'),
                                      _change("R", "7", "ann", vals='{"r.c": 10}')])
    assert out == [("o", None, False), (None, "ann", False)]
    out, doc = step_slot(spec, doc, [_change("R", "7", "bob", vals='{"r.c": 100}')])
    assert out == [("o", None, True), ("o", "bob", False)]
