"""SPEC S9 window assignment: floor division, offsets, negatives, HOP gaps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.circuit.windows import hop_starts, tumble_start, window_bounds


def test_s9_tumble_floors_negative_times_into_the_window_that_contains_them() -> None:
    assert tumble_start(-1, 10) == -10
    assert tumble_start(-10, 10) == -10
    assert tumble_start(-11, 10) == -20


def test_s9_tumble_offset_shifts_window_starts() -> None:
    assert tumble_start(4, 10, offset=5) == -5
    assert tumble_start(5, 10, offset=5) == 5
    assert tumble_start(14, 10, offset=5) == 5


def test_s9_hop_with_slide_larger_than_size_leaves_gaps() -> None:
    assert hop_starts(3, size=5, slide=10) == [0]
    assert hop_starts(7, size=5, slide=10) == []


def test_s9_hop_with_offset_and_negative_time() -> None:
    assert hop_starts(-3, size=10, slide=5, offset=1) == [-9, -4]


def test_s9_window_bounds_end_is_start_plus_size() -> None:
    assert window_bounds("TUMBLE", 17, 10, 10) == [(10, 20)]
    assert window_bounds("HOP", 17, 10, 5) == [(10, 20), (15, 25)]
    with pytest.raises(ValueError):
        window_bounds("SESSION", 1, 1, 1)
    with pytest.raises(ValueError):
        tumble_start(1, 0)


@given(st.integers(-10**13, 10**13), st.integers(1, 10**7), st.integers(-10**7, 10**7))
def test_s9_tumble_window_contains_its_row(c: int, size: int, offset: int) -> None:
    start = tumble_start(c, size, offset)
    assert start <= c < start + size
    assert (start - offset) % size == 0


@given(st.integers(-10**9, 10**9), st.integers(1, 1000), st.integers(1, 1000),
       st.integers(-1000, 1000))
def test_s9_hop_lists_exactly_the_windows_that_contain_the_row(
    c: int, size: int, slide: int, offset: int
) -> None:
    starts = hop_starts(c, size, slide, offset)
    assert all(s <= c < s + size and (s - offset) % slide == 0 for s in starts)
    # Brute force over every start in reach.
    first = ((c - size - offset) // slide) * slide + offset
    expected = [s for s in range(first, c + 1, slide) if s <= c < s + size]
    assert starts == expected
