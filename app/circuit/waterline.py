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

__all__ = ["Waterlines", "advance", "is_late", "late_mask", "merged_waterline", "next_waterline"]

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
