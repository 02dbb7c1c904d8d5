"""Aggregate accumulators of SPEC L3, as the reference evaluator computes them.

One :class:`Accumulator` per aggregate call per group. ``add(args, seq, weight)`` takes the
evaluated arguments of one input row, its arrival sequence number (``seq``: steps in order,
rows in order; ARG_MAX/ARG_MIN break ties on it) and a Z-set weight: +1 inserts the row, -1
retracts an earlier insertion (only a view reading an updating view ever retracts; tables are
insert-only, so a group never loses rows there).

Rules (the contract with the Spark runtime, also in docs/semantics.md):

* COUNT(*) counts rows; COUNT(x) non-null x; COUNT(DISTINCT x) distinct non-null x.
* SUM/MIN/MAX/AVG ignore NULLs and are NULL when no non-null input was seen.
* SUM of INT/BIGINT is BIGINT (exact Python int); of DECIMAL a Decimal at the result scale.
* AVG of integers is DOUBLE (exact sum / count, rounded once); AVG of DECIMAL is DECIMAL
  quantized half-up to the result type's scale (the compiler gives AVG(DECIMAL(p, s)) scale s);
  an INT/BIGINT result type truncates toward zero.
* ARG_MAX(v, by) is v of the row with the largest non-null ``by``; ties go to the earliest
  row in arrival order. ARG_MIN symmetric. A retraction removes the latest matching row.
* DISTINCT applies to SUM/AVG/MIN/MAX as well (over the distinct non-null values).
* LATEST(v, by), the compiler's own (a changelog table's latest row per key, ADR 0030), is
  v of the row with the largest ``by``; ties go to the *latest* row in arrival order (a
  later version of a key at the same time replaces it). It reads a table: never retracted.
* HELD(i, c1, ..., cn), the compiler's own (an upsert view over updating rows, ADR 0032), is
  c<i+1> of the latest-added row still held: the group's rows are a Z-set of whole rows, a
  row's arrival is that of its latest insertion, a retraction takes one copy back.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import Counter
from decimal import Context, Decimal, localcontext
from typing import Any

from app.circuit.ir import HELD, LATEST, AggCall, SqlType
from app.circuit.scalar import conform

__all__ = [
    "Accumulator",
    "ArgExtreme",
    "Average",
    "Count",
    "CountStar",
    "Extreme",
    "Held",
    "Latest",
    "Sum",
    "accumulator_for",
    "average_result",
    "held_value",
    "hold",
    "sum_result",
]


class Accumulator(ABC):
    """The running value of one aggregate call over one group's rows."""

    def __init__(self, result_type: SqlType, distinct: bool = False) -> None:
        self.result_type = result_type
        self.distinct = distinct

    @abstractmethod
    def add(self, args: tuple[Any, ...], seq: int, weight: int = 1) -> None:
        """Apply one row's evaluated arguments with Z-set ``weight`` (+1 insert, -1 retract)."""

    @abstractmethod
    def result(self) -> Any:
        """The aggregate's value, in the canonical representation of ``result_type``."""

    def snapshot(self) -> list[tuple[Any, int]]:
        """What the accumulator holds, as (value, count) pairs, for a state document."""
        raise NotImplementedError(f"{type(self).__name__} has no snapshot")

    def restore(self, pairs: list[tuple[Any, int]]) -> None:
        """Hold what :meth:`snapshot` gave (on a fresh accumulator)."""
        raise NotImplementedError(f"{type(self).__name__} has no snapshot")


class CountStar(Accumulator):
    """COUNT(*): every row counts, NULLs included."""

    def __init__(self, result_type: SqlType, distinct: bool = False) -> None:
        super().__init__(result_type, distinct)
        self.rows = 0

    def add(self, args: tuple[Any, ...], seq: int, weight: int = 1) -> None:
        self.rows += weight

    def result(self) -> Any:
        return self.rows

    def snapshot(self) -> list[tuple[Any, int]]:
        return [(None, self.rows)]

    def restore(self, pairs: list[tuple[Any, int]]) -> None:
        self.rows = sum(count for _, count in pairs)


class _Values(Accumulator):
    """Keeps the multiset of non-null first arguments (the distinct case needs it anyway)."""

    def __init__(self, result_type: SqlType, distinct: bool = False) -> None:
        super().__init__(result_type, distinct)
        self.values: Counter[Any] = Counter()

    def add(self, args: tuple[Any, ...], seq: int, weight: int = 1) -> None:
        value = args[0]
        if value is None:
            return
        # A Z-set: within a step a retraction may come before the insertion it takes back
        # (a regular join's pairs, S16, S18), so a count may be negative for a while; only
        # values with a positive count are read, and a count of zero is dropped.
        self.values[value] += weight
        if self.values[value] == 0:
            del self.values[value]

    def snapshot(self) -> list[tuple[Any, int]]:
        return list(self.values.items())

    def restore(self, pairs: list[tuple[Any, int]]) -> None:
        self.values = Counter(dict(pairs))

    def _inputs(self) -> list[Any]:
        """The non-null inputs (each distinct value once when DISTINCT)."""
        if self.distinct:
            return [value for value, count in self.values.items() if count > 0]
        return list(self.values.elements())


class Count(_Values):
    """COUNT(x) and COUNT(DISTINCT x): non-null values."""

    def result(self) -> Any:
        return len(self._inputs()) if self.distinct else sum(self.values.values())


class Sum(_Values):
    """SUM(x): NULL without a non-null input; exact for integers and decimals."""

    def result(self) -> Any:
        inputs = self._inputs()
        if not inputs:
            return None
        return sum_result(_exact_sum(inputs), self.result_type)


class Average(_Values):
    """AVG(x): exact sum over count, converted once to the result type."""

    def result(self) -> Any:
        inputs = self._inputs()
        if not inputs:
            return None
        return average_result(_exact_sum(inputs), len(inputs), self.result_type)


class Extreme(_Values):
    """MIN(x) / MAX(x) over non-null values."""

    def __init__(self, result_type: SqlType, distinct: bool = False, *, largest: bool) -> None:
        super().__init__(result_type, distinct)
        self.largest = largest

    def result(self) -> Any:
        held = [value for value, count in self.values.items() if count > 0]
        if not held:
            return None
        return max(held) if self.largest else min(held)


class ArgExtreme(Accumulator):
    """ARG_MAX(v, by) / ARG_MIN(v, by): v of the row with the extreme non-null ``by``.

    Ties: the earliest row in arrival order (smallest ``seq``).
    """

    def __init__(self, result_type: SqlType, distinct: bool = False, *, largest: bool) -> None:
        super().__init__(result_type, distinct)
        self.largest = largest
        self.rows: list[tuple[int, Any, Any]] = []  # (seq, by, value) in insertion order

    def add(self, args: tuple[Any, ...], seq: int, weight: int = 1) -> None:
        value, by = args[0], args[1]
        if by is None:
            return
        for _ in range(weight):
            self.rows.append((seq, by, value))
        for _ in range(-weight):
            for index in range(len(self.rows) - 1, -1, -1):
                if self.rows[index][1:] == (by, value):
                    del self.rows[index]
                    break

    def result(self) -> Any:
        if not self.rows:
            return None
        if self.largest:
            best = min(self.rows, key=lambda row: (_Desc(row[1]), row[0]))
        else:
            best = min(self.rows, key=lambda row: (row[1], row[0]))
        return conform(best[2], self.result_type)


class Latest(Accumulator):
    """LATEST(v, by): v of the row with the largest ``by``, the latest arrival among equal
    ones. Only the best row is kept: the rows of a table are never retracted."""

    def __init__(self, result_type: SqlType, distinct: bool = False) -> None:
        super().__init__(result_type, distinct)
        self.best: tuple[Any, int, Any] | None = None  # (by, seq, value)

    def add(self, args: tuple[Any, ...], seq: int, weight: int = 1) -> None:
        if weight < 0:
            raise ValueError("LATEST reads a table's rows, which are never retracted")
        value, by = args[0], args[1]
        if by is None:
            return
        if self.best is None or (by, seq) >= (self.best[0], self.best[1]):
            self.best = (by, seq, value)

    def result(self) -> Any:
        return None if self.best is None else conform(self.best[2], self.result_type)


class Held(Accumulator):
    """HELD(i, c1, ..., cn): field i of the latest-added row still held (an upsert's
    materialisation of updating rows per key, Flink's SinkUpsertMaterializer). A Z-set: a
    step's retraction may come before the insertion it takes back (a count below zero
    until the step's rows are in); only rows of positive count are held."""

    def __init__(self, result_type: SqlType, distinct: bool = False) -> None:
        super().__init__(result_type, distinct)
        self.index = 0
        self.rows: dict[tuple[Any, ...], tuple[int, int]] = {}  # row -> (count, arrival)

    def add(self, args: tuple[Any, ...], seq: int, weight: int = 1) -> None:
        self.index = int(args[0])
        hold(self.rows, tuple(args[1:]), seq, weight)

    def result(self) -> Any:
        return conform(held_value(self.rows, self.index), self.result_type)


def hold(rows: dict[tuple[Any, ...], tuple[int, Any]], row: tuple[Any, ...], arrival: Any,
         weight: int) -> None:
    """Add ``row`` to HELD's Z-set with ``weight`` (shared with the Spark runtime, whose
    arrivals are (step, partition, offset)): an insertion makes ``arrival`` the row's."""
    count, latest = rows.get(row, (0, arrival))
    count += weight
    if count == 0:
        rows.pop(row, None)
    else:
        rows[row] = (count, arrival if weight > 0 else latest)


def held_value(rows: dict[tuple[Any, ...], tuple[int, Any]], index: int) -> Any:
    """HELD's value (shared with the Spark runtime): field ``index`` of the held row (count
    above zero) of the latest arrival; None when none is held."""
    held = [(arrival, row) for row, (count, arrival) in rows.items() if count > 0]
    return max(held, key=lambda item: item[0])[1][index] if held else None


class _Desc:
    """Reverses the order of a value, to pick (largest ``by``, smallest seq) with one min()."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: _Desc) -> bool:
        return bool(other.value < self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and bool(self.value == other.value)

    def __hash__(self) -> int:
        return hash(self.value)


def sum_result(total: Any, result_type: SqlType) -> Any:
    """SUM's value from the exact total of its inputs (shared with the Spark runtime)."""
    return conform(total, result_type)


def average_result(total: Any, count: int, result_type: SqlType) -> Any:
    """AVG's value from the exact total and count of its inputs, converted once to the result
    type (shared with the Spark runtime so both round alike)."""
    name = result_type.name
    if name == "DECIMAL":
        with localcontext(Context(prec=100)):  # exact enough for DECIMAL(38) sums
            exact = Decimal(total) / count
        return conform(exact, result_type)
    if name in ("INT", "BIGINT"):
        if isinstance(total, int):
            quotient = abs(total) // count
            return quotient if total >= 0 else -quotient
        return int(total / count)
    if isinstance(total, Decimal):
        return float(total / count)
    return total / count


def _exact_sum(values: list[Any]) -> Any:
    if any(isinstance(v, float) for v in values):
        return math.fsum(float(v) for v in values)  # correctly rounded: order-independent
    if any(isinstance(v, Decimal) for v in values):
        return sum((Decimal(v) for v in values), Decimal(0))
    return sum(values)


def accumulator_for(call: AggCall) -> Accumulator:
    """A fresh accumulator for one aggregate call of SPEC L3."""
    fn = call.fn.upper()
    if fn == "COUNT":
        if not call.args:
            return CountStar(call.type)
        return Count(call.type, call.distinct)
    if fn == "SUM":
        return Sum(call.type, call.distinct)
    if fn == "AVG":
        return Average(call.type, call.distinct)
    if fn in ("MIN", "MAX"):
        return Extreme(call.type, call.distinct, largest=fn == "MAX")
    if fn in ("ARG_MAX", "ARG_MIN"):
        return ArgExtreme(call.type, largest=fn == "ARG_MAX")
    if fn == LATEST:
        return Latest(call.type)
    if fn == HELD:
        return Held(call.type)
    raise NotImplementedError(f"aggregate {call.fn} is not part of SPEC L3")
