"""Which expressions keep a time attribute (SPEC S10, docs/semantics.md "Derived time
attributes").

A column is a time attribute when its values can be bounded from below by a waterline. A
monotone non-decreasing function ``f`` of one time attribute ``c`` keeps that: every accepted
row has ``c >= w(c)`` (S5), so ``f(c) >= f(w(c))``, and ``f(w(c))`` is the derived column's
waterline (:func:`app.circuit.waterline.derived_waterline`). The functions recognised here,
nested in any order, are the ones Flink and SQLstream users write for it:

- ``c + INTERVAL``, ``c - INTERVAL`` (and ``INTERVAL + c``); on an INT/BIGINT time column,
  ``c + n``, ``c - n`` with an integer constant ``n``;
- ``FLOOR(c TO unit)`` and ``DATE_TRUNC(unit, c)``;
- ``CEIL(c TO unit)``.

Every other expression loses the property (an arbitrary function can move rows below any
bound).
"""

from __future__ import annotations

from app.circuit.ir import Call, ColumnRef, Expr, Literal_, TimeStep

__all__ = ["monotone_steps"]

_TIME_TYPES = ("TIMESTAMP", "INT", "BIGINT")
_INTEGER_CONSTANTS = ("INT", "BIGINT")


def _constant(expr: Expr) -> int | None:
    if isinstance(expr, Literal_) and expr.type.name in _INTEGER_CONSTANTS \
            and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return expr.value
    return None


def monotone_steps(expr: Expr) -> tuple[ColumnRef, tuple[TimeStep, ...]] | None:
    """The column ``expr`` is a monotone non-decreasing function of, and that function as
    :class:`~app.circuit.ir.TimeStep` s applied in order (empty for the column itself); None
    for any other expression."""
    if isinstance(expr, ColumnRef):
        return (expr, ()) if expr.type.name in _TIME_TYPES else None
    if not isinstance(expr, Call) or expr.type.name not in _TIME_TYPES:
        return None
    if expr.fn in ("+", "-") and len(expr.args) == 2:
        left, right = expr.args
        amount, inner = _constant(right), left
        if amount is None and expr.fn == "+":
            amount, inner = _constant(left), right
        if amount is None:
            return None
        found = monotone_steps(inner)
        if found is None:
            return None
        column, steps = found
        shift = amount if expr.fn == "+" else -amount
        return column, (*steps, TimeStep("shift", amount=shift))
    if expr.fn in ("DATE_TRUNC", "DATE_CEIL") and len(expr.args) == 2:
        unit, inner = expr.args
        if not isinstance(unit, Literal_) or not isinstance(unit.value, str):
            return None
        found = monotone_steps(inner)
        if found is None:
            return None
        column, steps = found
        step = TimeStep("floor" if expr.fn == "DATE_TRUNC" else "ceil", unit=unit.value.upper())
        return column, (*steps, step)
    return None
