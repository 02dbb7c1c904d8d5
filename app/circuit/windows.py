"""Window assignment of SPEC S9, as pure functions shared by the oracle and the Spark runtime.

A SESSION window is no function of one row: :func:`sessions` splits one group's times.
A CUMULATE window's rows share a start with a TUMBLE of its size: :func:`cumulate_bounds`.

TUMBLE and HOP are defined on integers in the time column's unit (epoch milliseconds for
TIMESTAMP), so one definition serves TIMESTAMP, INT and BIGINT time columns. Floor division is
used on purpose: a row before the epoch (or before ``offset``) still lands in the window that
contains it, ``[start, start + size)``, never in the one after (Python's ``//`` floors; C-style
truncation would not).
"""

from __future__ import annotations

__all__ = ["cumulate_bounds", "hop_starts", "sessions", "tumble_start", "window_bounds"]


def tumble_start(c: int, size: int, offset: int = 0) -> int:
    """Start of the TUMBLE window containing ``c`` (SPEC S9).

    ``window_start = floor((c - offset) / size) * size + offset``; the window is
    ``[start, start + size)``.

    >>> tumble_start(7, 10, 0), tumble_start(-1, 10, 0), tumble_start(12, 10, 5)
    (0, -10, 5)
    """
    if size <= 0:
        raise ValueError(f"window size must be positive, got {size}")
    return ((c - offset) // size) * size + offset


def hop_starts(c: int, size: int, slide: int, offset: int = 0) -> list[int]:
    """Starts of every HOP window ``[s, s + size)`` with ``s = k * slide + offset`` holding ``c``.

    Ascending order, so a row's copies come out in window order (SPEC S9). When ``slide >
    size`` (gaps between windows) a row may fall in no window and the list is empty.

    >>> hop_starts(7, 10, 5)
    [0, 5]
    """
    if size <= 0 or slide <= 0:
        raise ValueError(f"window size and slide must be positive, got {size} and {slide}")
    # The last start not after c, then walk back while the window still contains c.
    last = ((c - offset) // slide) * slide + offset
    starts: list[int] = []
    s = last
    while s > c - size:
        starts.append(s)
        s -= slide
    starts.reverse()
    return starts


def window_bounds(
    kind: str, c: int, size: int, slide: int, offset: int = 0
) -> list[tuple[int, int]]:
    """``(window_start, window_end)`` pairs of a TUMBLE, HOP or CUMULATE window (whose
    ``slide`` is its step) for time value ``c``."""
    if kind == "TUMBLE":
        start = tumble_start(c, size, offset)
        return [(start, start + size)]
    if kind == "HOP":
        return [(s, s + size) for s in hop_starts(c, size, slide, offset)]
    if kind == "CUMULATE":
        return cumulate_bounds(c, size, slide, offset)
    raise ValueError(f"unknown window kind {kind!r}")


def cumulate_bounds(c: int, size: int, step: int, offset: int = 0) -> list[tuple[int, int]]:
    """Every CUMULATE window ``[s, s + k * step)`` (``k = 1 .. size / step``) holding ``c``,
    Flink's definition: ``s = floor((c - offset) / size) * size + offset`` is the start of the
    TUMBLE of ``size`` holding ``c``, and the row is in each window of that start whose end is
    after ``c``. Ascending ends, so a row's copies come out in window order (SPEC S9).

    >>> cumulate_bounds(7, 10, 2)
    [(0, 8), (0, 10)]
    >>> cumulate_bounds(-1, 10, 5), cumulate_bounds(12, 10, 5, 5)
    ([(-10, 0)], [(5, 15)])
    """
    if size <= 0 or step <= 0 or size % step:
        raise ValueError(f"CUMULATE size must be a positive multiple of its step, got {size} "
                         f"and {step}")
    start = tumble_start(c, size, offset)
    first = (c - start) // step + 1  # the first k whose end start + k * step is after c
    return [(start, start + k * step) for k in range(first, size // step + 1)]


def sessions(times: list[int], gap: int) -> list[tuple[int, int, int]]:
    """The sessions of one group's row times: ``(start, end, count)`` with ``end = last +
    gap``, in time order; two rows are in one session when a chain of rows at most ``gap``
    apart links them (a row at a session's end joins it: Flink's session windows merge
    windows that touch, and Spark's ``session_window`` does too).

    >>> sessions([1, 3, 10, 4, 16], 5)
    [(1, 9, 3), (10, 15, 1), (16, 21, 1)]
    >>> sessions([0, 5], 5)
    [(0, 10, 2)]
    """
    if gap <= 0:
        raise ValueError(f"session gap must be positive, got {gap}")
    found: list[tuple[int, int, int]] = []
    for t in sorted(times):
        if found and t <= found[-1][1]:
            start, _, count = found[-1]
            found[-1] = (start, t + gap, count + 1)
        else:
            found.append((t, t + gap, 1))
    return found
