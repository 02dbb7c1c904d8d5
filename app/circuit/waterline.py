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
from typing import Any

import numpy as np
import numpy.typing as npt

from app.circuit.functions import timestamp_ceil, timestamp_floor
from app.circuit.ir import TimeAttribute, TimeStep

__all__ = [
    "Waterlines",
    "advance",
    "attribute_waterline",
    "completion_threshold",
    "derived_waterline",
    "is_late",
    "late_mask",
    "merged_waterline",
    "next_waterline",
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


def _step(step: TimeStep, value: int) -> int:
    if step.op == "shift":
        return value + step.amount
    if step.op == "floor":
        return timestamp_floor(value, step.unit)
    # Past the TIMESTAMP range no row can be: the value stands.
    ceiling = timestamp_ceil(value, step.unit)
    return value if ceiling is None else ceiling


def derived_waterline(steps: Sequence[TimeStep], waterline: int | None) -> int | None:
    """S10, derived time attributes: ``w(f(c)) = f(w(c))`` for a monotone non-decreasing
    ``f`` (the ``steps``, in order). An accepted row has ``c >= w(c)`` (S5), so its
    ``f(c) >= f(w(c))``: no accepted row is below the stepped waterline. -inf stays -inf."""
    if waterline is None:
        return None
    for step in steps:
        waterline = _step(step, waterline)
    return waterline


def attribute_waterline(attribute: TimeAttribute, source: int | None) -> int | None:
    """The waterline of a time attribute from ``source``, the waterline of its
    ``table``.``source_column`` (its table's, a view's own LATENESS, or a UNION ALL or JOIN
    column's, each computed where it is kept): every consumer (the reference evaluator, the
    S14 headers, the state operator) turns one into the other here."""
    return derived_waterline(attribute.steps, source)


def _first_reaching(step: TimeStep, bound: int) -> int:
    """The least ``x`` whose step is ``>= bound``."""
    if step.op == "shift":
        return bound - step.amount
    if step.op == "floor":
        # floor(x) >= bound iff x reaches the first boundary at or after bound.
        ceiling = timestamp_ceil(bound, step.unit)
        return bound if ceiling is None else ceiling
    # ceil(x) >= bound iff x is above the last boundary below bound.
    return timestamp_floor(bound - 1, step.unit) + 1


def completion_threshold(steps: Sequence[TimeStep], bound: int) -> int:
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
