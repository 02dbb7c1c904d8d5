"""One slot's step of the OUTER interval join operator (app/runtime/outer_join.py, ADR 0017),
by hand against SPEC S16: matches when found, an unmatched row once the *other* side's
waterline passes its bound (never earlier), a NULL key or time padded at once."""

from __future__ import annotations

from typing import Any

from app.runtime.outer_join import OuterJoinSpec, step_slot

# r.t BETWEEN l.t - 2 AND l.t + 3 (ms), LATENESS 1 on the left table, 0 on the right.
FULL = OuterJoinSpec("full", -2, 3, 1, 0)


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
    left = OuterJoinSpec("left", -2, 3, 1, 0)
    right = OuterJoinSpec("right", -2, 3, 1, 0)
    rows = [_row("L", "a", 10, 1), _row("R", "b", 10, 2), _probe("L", 100), _probe("R", 100)]
    assert step_slot(left, None, rows)[0] == [("L1", None)]
    assert step_slot(right, None, rows)[0] == [(None, "R2")]


def test_waterlines_take_the_highest_probe_and_never_move_back_s3() -> None:
    _, doc = step_slot(FULL, None, [_probe("L", 10), _probe("L", 30), _probe("R", 5)])
    assert doc["w"] == {"L": 29, "R": 5}
    _, doc = step_slot(FULL, doc, [_probe("L", 20)])
    assert doc["w"] == {"L": 29, "R": 5}
