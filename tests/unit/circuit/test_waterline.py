"""SPEC S3 (the waterline) and S5 (the late test), in the one module every gate uses."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from app.circuit.waterline import Waterlines, advance, is_late, late_mask, next_waterline

INT64 = st.integers(-(2**63), 2**63 - 1)


def test_s3_waterline_starts_at_minus_infinity_and_follows_the_largest_value() -> None:
    assert next_waterline(None, None, 10) is None
    assert next_waterline(None, 100, 10) == 90
    assert next_waterline(90, 95, 10) == 90  # never decreases
    assert next_waterline(90, None, 10) == 90  # a step without values keeps w(t-1)
    assert next_waterline(90, 200, 10) == 190


def test_s5_equal_is_on_time_null_is_never_late_nothing_is_late_below_minus_infinity() -> None:
    assert not is_late(95, 95)
    assert is_late(94, 95)
    assert not is_late(None, 95)
    assert not is_late(-(2**70), None)


def test_s3_s5_a_step_is_judged_by_the_waterline_it_started_with() -> None:
    """The worked example of tests/e2e/test_lateness_pipeline.py, lateness 10."""
    marks = Waterlines([("ts", 10)])
    steps = [([100, 105], []), ([95, 94, 200, 96], [94]), ([150, 190, 185], [150, 185])]
    for values, late in steps:
        rows = [{"ts": v} for v in values]
        assert [r["ts"] for r in rows if marks.late_column(r) == "ts"] == late
        marks.advance(rows)
    assert marks.values == {"ts": 190}


def test_s4_punctuation_moves_the_waterline_like_a_row_for_its_column_or_all() -> None:
    marks = Waterlines([("a", 5), ("b", 1)])
    marks.advance([], [("a", 100)])
    assert marks.values == {"a": 95, "b": None}
    marks.advance([], [(None, 50)])
    assert marks.values == {"a": 95, "b": 49}
    assert marks.late_column({"a": 96, "b": 48}) == "b"
    assert marks.late_column({"a": 94, "b": 48}) == "a"  # the first column in order


def test_advance_is_max_with_none_as_minus_infinity() -> None:
    assert advance(None, None) is None
    assert advance(None, 3) == 3
    assert advance(3, None) == 3
    assert advance(3, 2) == 3


@given(st.lists(INT64, max_size=40), st.one_of(st.none(), st.integers(-(2**70), 2**70)))
def test_s5_per_column_agrees_with_per_value(values: list[int], waterline: int | None) -> None:
    column = np.array(values, dtype=np.int64)
    assert late_mask(column, waterline).tolist() == [is_late(v, waterline) for v in values]
