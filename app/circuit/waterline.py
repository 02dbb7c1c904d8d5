"""The waterline (SPEC S3) and the late test (SPEC S5), written once.

S3, per LATENESS column ``c`` with lateness ``L`` of a table (or of a view with its own
LATENESS, L2)::

    w_c(0) = -inf
    w_c(t) = max(w_c(t-1), max{ r.c : r in D(t) } - L)

``D(t)`` is every well-formed row of step ``t`` (late rows included) and every punctuation
bound for ``c`` (S4). A step without such a row keeps ``w_c(t-1)``; waterlines never
decrease. ``-inf`` is ``None`` here, and times are integers (epoch milliseconds for
TIMESTAMP columns).

S5: a row ``r`` of step ``t`` is late on ``c`` iff ``r.c < w_c(t-1)``: the waterline the
step started with, so the rows of the step that moves a waterline are judged by its previous
value, and a row equal to the waterline is on time. A NULL value is never late.

Every gate uses these functions: the reference evaluator (:class:`Waterlines`), the table's
gate in the Kafka source (per record and per decoded column), a view's LATENESS gate on
Spark, and the step's driver-side waterline update.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.circuit.functions import timestamp_ceil, timestamp_floor
from app.circuit.ir import TimeAttribute, TimeStep, Window
from app.circuit.windows import tumble_start

if TYPE_CHECKING:  # numpy is imported where a column is masked, not by every importer
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "WaterlineStep",
    "Waterlines",
    "advance",
    "attribute_waterline",
    "completion_threshold",
    "derived_waterline",
    "is_late",
    "late_mask",
    "merged_waterline",
    "next_waterline",
    "window_start_waterline",
]

_INT64 = (-(2**63), 2**63 - 1)


def advance(current: int | None, candidate: int | None) -> int | None:
    """``max`` with None as -inf: a waterline (or a running maximum) never decreases."""
    if candidate is None:
        return current
    if current is None:
        return candidate
    return max(current, candidate)


def next_waterline(previous: int | None, highest: int | None, lateness: int) -> int | None:
    """S3: ``w(t) = max(w(t-1), highest - L)``, where ``highest`` is the step's largest
    value of the column (None when the step had none: the waterline stands)."""
    return advance(previous, None if highest is None else highest - lateness)


def merged_waterline(inputs: Iterable[int | None]) -> int | None:
    """S17: a UNION ALL column's waterline, the minimum of its inputs' (SQLstream's merge);
    -inf (None) while any input is -inf."""
    values = list(inputs)
    if not values or any(value is None for value in values):
        return None
    return min(value for value in values if value is not None)


def _start_grid(window: Window) -> int:
    """The distance between two window starts: a TUMBLE's and a CUMULATE's size (every
    window of a CUMULATE start shares the start of the TUMBLE of its size), a HOP's slide."""
    if window.kind == "SESSION":
        raise ValueError("a SESSION's window_start carries no waterline (S10): a session open "
                         "long ago may still close")
    return window.slide if window.kind == "HOP" else window.size


def window_start_waterline(window: Window, waterline: int | None) -> int | None:
    """S10: ``w(window_start)`` of ``window`` on a column whose waterline is ``waterline``:
    the smallest start of a window that a row with ``c >= w(c)`` can still fall in. A window
    ``[s, s + size)`` holds such a row only if ``s > w(c) - size``, and every start on the
    window's grid above that has one, so it is the first start above ``w(c) - size``: for
    TUMBLE and CUMULATE the start of ``w(c)``'s window, for HOP possibly an earlier one. A
    SESSION's start carries none (ValueError). -inf stays -inf.

    ``w(window_end) = w(c)``; taking that for the start too would be too high: a window that
    starts below ``w(c)`` still takes rows, so a reader completing its own windows on the
    start would write them before all their rows are in."""
    grid = _start_grid(window)
    if waterline is None:
        return None
    return tumble_start(waterline - window.size, grid, window.offset) + grid


#: One step of a waterline's derivation: a monotone function of a derived time attribute
#: (:class:`~app.circuit.ir.TimeStep`) or the start of a window on it (a ``window_start``,
#: :func:`window_start_waterline`).
WaterlineStep = TimeStep | Window


def _step(step: WaterlineStep, value: int) -> int:
    if isinstance(step, Window):
        start = window_start_waterline(step, value)
        assert start is not None
        return start
    if step.op == "shift":
        return value + step.amount
    if step.op == "floor":
        return timestamp_floor(value, step.unit)
    # Past the TIMESTAMP range no row can be: the value stands.
    ceiling = timestamp_ceil(value, step.unit)
    return value if ceiling is None else ceiling


def derived_waterline(steps: Sequence[WaterlineStep], waterline: int | None) -> int | None:
    """S10, derived time attributes: ``w(f(c)) = f(w(c))`` for a monotone non-decreasing
    ``f`` (the ``steps``, in order). An accepted row has ``c >= w(c)`` (S5), so its
    ``f(c) >= f(w(c))``: no accepted row is below the stepped waterline. A :class:`Window`
    step is the ``window_start`` of that window (:func:`window_start_waterline`), so a time
    attribute derived from a window start, or a window on one, has its waterline through
    the same steps. -inf stays -inf."""
    if waterline is None:
        return None
    for step in steps:
        waterline = _step(step, waterline)
    return waterline


def attribute_waterline(attribute: TimeAttribute, source: int | None) -> int | None:
    """The waterline of a time attribute from ``source``, the waterline of its
    ``table``.``source_column`` (its table's, a view's own LATENESS, or a UNION ALL or JOIN
    column's, each computed where it is kept): every consumer (the reference evaluator, the
    S14 headers, the state operator) turns one into the other here. The attribute does not
    name the window a ``window_start`` comes from: its waterline is
    :func:`window_start_waterline` of that window over this one (the reference evaluator's
    time sources carry the window as a step)."""
    return derived_waterline(attribute.steps, source)


def _first_reaching(step: WaterlineStep, bound: int) -> int:
    """The least ``x`` whose step is ``>= bound``."""
    if isinstance(step, Window):
        # The first start above x - size is >= bound iff the last start below bound is at
        # or below x - size.
        grid = _start_grid(step)
        return tumble_start(bound - 1, grid, step.offset) + step.size
    if step.op == "shift":
        return bound - step.amount
    if step.op == "floor":
        # floor(x) >= bound iff x reaches the first boundary at or after bound.
        ceiling = timestamp_ceil(bound, step.unit)
        return bound if ceiling is None else ceiling
    # ceil(x) >= bound iff x is above the last boundary below bound.
    return timestamp_floor(bound - 1, step.unit) + 1


def completion_threshold(steps: Sequence[WaterlineStep], bound: int) -> int:
    """The least source waterline ``w`` with ``derived_waterline(steps, w) >= bound``: a
    group that is complete once its attribute's waterline reaches ``bound`` (S11) is complete
    once the waterline of the attribute's source column reaches this. Without steps it is
    ``bound`` itself (``f`` non-decreasing, so the inverse images are intervals)."""
    for step in reversed(steps):
        bound = _first_reaching(step, bound)
    return bound


def is_late(value: int | None, waterline: int | None) -> bool:
    """S5: ``value < w(t-1)``; NULL is never late, and nothing is late below -inf."""
    return value is not None and waterline is not None and value < waterline


def late_mask(values: npt.NDArray[Any], waterline: int | None) -> npt.NDArray[np.bool_]:
    """S5 over a column of int64 values: which are below ``waterline``. Any Python int
    waterline is exact (no int64 overflow); the caller masks NULL slots itself."""
    import numpy as np

    if waterline is None or waterline <= _INT64[0]:
        return np.zeros(len(values), np.bool_)
    if waterline > _INT64[1]:
        return np.ones(len(values), np.bool_)
    result: npt.NDArray[np.bool_] = values < waterline
    return result


class Waterlines:
    """The waterlines of one relation's LATENESS columns, step by step (S3/S5).

    ``columns`` are ``(column, lateness)`` in declaration order. :meth:`late_column` judges
    rows against ``w(t-1)``; :meth:`advance` then moves the waterlines over the whole step.
    """

    def __init__(self, columns: Sequence[tuple[str, int]]) -> None:
        self.columns = tuple(columns)
        self.values: dict[str, int | None] = {name: None for name, _ in self.columns}

    def late_column(self, row: Mapping[str, Any]) -> str | None:
        """The first LATENESS column on which ``row`` is late, if any."""
        for name, _ in self.columns:
            if is_late(row.get(name), self.values[name]):
                return name
        return None

    def advance(
        self, rows: Iterable[Mapping[str, Any]], bounds: Iterable[tuple[str | None, int]] = ()
    ) -> None:
        """Move every waterline over one step: its well-formed ``rows`` and its punctuation
        ``bounds`` (``(column, bound)``, column None for every LATENESS column)."""
        highest: dict[str, int | None] = {name: None for name, _ in self.columns}
        for row in rows:
            for name in highest:
                highest[name] = advance(highest[name], row.get(name))
        for column, bound in bounds:
            for name in highest:
                if column is None or column == name:
                    highest[name] = advance(highest[name], bound)
        for name, lateness in self.columns:
            self.values[name] = next_waterline(self.values[name], highest[name], lateness)
