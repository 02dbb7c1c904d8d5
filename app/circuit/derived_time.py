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

from collections.abc import Mapping
from dataclasses import dataclass, replace

from app.circuit.ir import (
    Aggregate,
    Call,
    Circuit,
    ColumnRef,
    Derivation,
    Expr,
    Literal_,
    Project,
    TimeAttribute,
    TimeStep,
    View,
    Window,
)
from app.circuit.waterline import completion_threshold

__all__ = [
    "GroupCompletion",
    "expression_time",
    "group_completion",
    "input_attributes",
    "monotone_steps",
]

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


def expression_time(expr: Expr, attributes: Mapping[str, TimeAttribute],
                    column: str) -> TimeAttribute | None:
    """The time attribute of output ``column`` computed by ``expr`` over columns with
    ``attributes`` (S10): the input's, renamed, for a column read verbatim; a ``derived`` one
    for a monotone expression of one time attribute; None for any other expression."""
    found = monotone_steps(expr)
    if found is None or found[0].name not in attributes:
        return None
    ref, steps = found
    attr = attributes[ref.name]
    if not steps:
        kind = "forwarded" if attr.kind == "view_lateness" else attr.kind
        return replace(attr, column=column, kind=kind)
    return replace(attr, column=column, kind="derived",
                   derivation=Derivation(attr, (*attr.steps, *steps)))


@dataclass(frozen=True)
class GroupCompletion:
    """S11 for an aggregate view's groups: the group whose key ``key_index`` has value ``v``
    is complete once the waterline of ``attribute`` (that key's time attribute) reaches
    ``v + offset``: ``offset`` 0 for a ``window_end``, the window's size for a
    ``window_start``, 1 for any other time attribute (complete once ``w > v``)."""

    key_index: int
    offset: int
    attribute: TimeAttribute

    def threshold(self, value: int) -> int:
        """The waterline of ``attribute.table``.``attribute.source_column`` at which the
        group of key value ``value`` is complete."""
        return completion_threshold(self.attribute.steps, value + self.offset)


def input_attributes(circuit: Circuit, relation: str) -> dict[str, TimeAttribute]:
    """The time attributes of a table or view, by column (S10)."""
    if any(t.name == relation for t in circuit.tables):
        table = circuit.table(relation)
        return {**{lt.column: TimeAttribute(lt.column, relation, lt.column, "forwarded")
                   for lt in table.lateness},
                **{a.column: a for a in table.derived_attributes}}
    return {a.column: a for a in circuit.view(relation).time_attributes}


def group_completion(circuit: Circuit, view: View) -> GroupCompletion | None:
    """The key whose time attribute completes ``view``'s groups (S11), as the compiler and
    the reference evaluator pick it: a ``window_end`` key first (a CUMULATE's windows of one
    start differ in it only), then ``window_start``, then any other time attribute key. None
    for a view of several inputs, without an aggregate or without such a key."""
    if len(view.sources) != 1 or view.join is not None or view.union is not None:
        return None
    attributes = input_attributes(circuit, view.source)
    size = 0
    for op in view.operators:
        if isinstance(op, Window):
            base = attributes.get(op.time_column)
            size = op.size
            attributes = dict(attributes)
            attributes.pop("window_start", None)
            attributes.pop("window_end", None)
            if base is not None:
                attributes["window_end"] = replace(base, column="window_end", kind="window_end")
                if op.kind != "SESSION":  # a session's start bounds nothing
                    attributes["window_start"] = replace(base, column="window_start",
                                                         kind="window_start")
        elif isinstance(op, Project):
            attributes = {name: attr for name, expr in op.outputs
                          if (attr := expression_time(expr, attributes, name)) is not None}
        elif isinstance(op, Aggregate):
            keyed = [(i, attr) for i, (name, expr) in enumerate(op.keys)
                     if (attr := expression_time(expr, attributes, name)) is not None]
            for wanted, offset in (("window_end", 0), ("window_start", size)):
                for index, attr in keyed:
                    if attr.kind == wanted:
                        return GroupCompletion(index, offset, attr)
            for index, attr in keyed:
                return GroupCompletion(index, 1, attr)
            return None
    return None
