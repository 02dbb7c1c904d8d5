"""Processing time (seed 004's processing-time attribute): the step's recorded batch time.

Tidemark's processing time is never read from a clock while rows are evaluated: it is the
batch time of the step (SPEC S13's ``ptime``; Spark's batch timestamp, kept in its offset log;
the reference evaluator's ``StepInput.batch_time_ms``), so a replayed step computes identical
values (S15). A re-run from scratch has other batch times, so processing-time results are
deterministic across replays of a step only, not across runs.

* A table column ``pt AS PROCTIME()`` (:attr:`~app.circuit.ir.Column.processing_time`) is
  the batch time of the step its row arrives in. It is a time attribute (S10) whose waterline
  is the current step's batch time: every later row has a larger one, so no row is ever late
  for it, and a window on it is complete in the first step whose batch time reaches its end.
* ``NOW()``, ``CURRENT_TIMESTAMP``, ``LOCALTIMESTAMP`` and ``PROCTIME()`` in an expression are
  one call, :data:`NOW`: the batch time of the step that evaluates it, read from the row's
  :data:`BATCH_TIME_COLUMN` (the reference evaluator and the Spark runtime put it there), so
  there is one rendering of it wherever a view's expressions are evaluated.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

from app.circuit.ir import (
    Aggregate,
    Call,
    Case,
    Cast,
    Circuit,
    Expr,
    Filter,
    Join,
    Operator,
    Project,
    SqlType,
    Table,
    TimeAttribute,
    UnionAll,
    UnionBranch,
    View,
    Window,
)

__all__ = [
    "BATCH_TIME_COLUMN",
    "NOW",
    "attribute_is_processing_time",
    "column_is_processing_time",
    "mark_processing_windows",
    "now",
    "now_after_aggregate",
    "operator_expressions",
    "processing_time_columns",
    "reads_now",
    "view_reads_now",
]

#: The catalog name of NOW(), CURRENT_TIMESTAMP, LOCALTIMESTAMP and PROCTIME() in expressions.
NOW = "NOW"
#: The column a row carries the evaluating step's batch time in (TIMESTAMP, epoch ms).
BATCH_TIME_COLUMN = "_ptime"


def now() -> Call:
    """The expression of processing time: TIMESTAMP NOT NULL, the step's batch time."""
    return Call(NOW, (), SqlType("TIMESTAMP", False))


def reads_now(expr: Expr) -> bool:
    """``expr`` reads processing time (contains :func:`now`)."""
    if isinstance(expr, Call):
        return expr.fn == NOW or any(reads_now(a) for a in expr.args)
    if isinstance(expr, Cast):
        return reads_now(expr.expr)
    if isinstance(expr, Case):
        parts = [e for pair in expr.whens for e in pair]
        return any(map(reads_now, parts)) or (expr.else_ is not None and reads_now(expr.else_))
    return False


def operator_expressions(op: Operator) -> Iterator[Expr]:
    """The scalar expressions an operator evaluates (a UNION ALL's branches' included)."""
    if isinstance(op, Filter):
        yield op.predicate
    elif isinstance(op, Project):
        yield from (e for _, e in op.outputs)
    elif isinstance(op, Aggregate):
        yield from (e for _, e in op.keys)
        yield from (a for _, call in op.aggregates for a in call.args)
    elif isinstance(op, UnionAll):
        for branch in op.branches:
            for inner in branch.operators:
                yield from operator_expressions(inner)
    elif isinstance(op, Join):
        yield from (e for pair in op.keys for e in pair)
        if op.residual is not None:
            yield op.residual


def view_reads_now(view: View) -> bool:
    """Some expression of ``view`` reads processing time."""
    return any(reads_now(e) for op in view.operators for e in operator_expressions(op))


def now_after_aggregate(view: View) -> bool:
    """HAVING or the SELECT list of ``view``'s aggregate reads processing time: the batch
    time of the step of the group's last change (the step that recomputes its row)."""
    aggregate = next((op for op in view.operators if isinstance(op, Aggregate)), None)
    if aggregate is None:
        return False
    after = view.operators[view.operators.index(aggregate) + 1 :]
    return any(reads_now(e) for op in after for e in operator_expressions(op))


def processing_time_columns(table: Table) -> tuple[str, ...]:
    """The table's ``AS PROCTIME()`` columns, in declaration order."""
    return tuple(c.name for c in table.columns if c.processing_time)


def attribute_is_processing_time(circuit: Circuit, attribute: TimeAttribute) -> bool:
    """The time attribute's waterline is processing time: it forwards (or windows) a table's
    ``AS PROCTIME()`` column, through any views; a UNION ALL column when some branch's is, a
    JOIN column when its own side's is."""
    if attribute.merged:
        return any(attribute_is_processing_time(circuit, a) for a in attribute.merged)
    if attribute.join is not None:
        return attribute_is_processing_time(circuit, attribute.join.own)
    if attribute.kind == "view_lateness":
        return False
    owner, column = attribute.table, attribute.source_column
    if any(t.name == owner for t in circuit.tables):
        return circuit.table(owner).column(column).processing_time
    upstream = next(
        (a for a in circuit.view(owner).time_attributes if a.column == column), None
    )
    if upstream is None or upstream == attribute:
        return False
    return attribute_is_processing_time(circuit, upstream)


def column_is_processing_time(circuit: Circuit, relation: str, column: str) -> bool:
    """``relation.column`` is a processing-time attribute (a table's ``AS PROCTIME()``
    column, or a view's time attribute that forwards or windows one)."""
    if any(t.name == relation for t in circuit.tables):
        table = circuit.table(relation)
        return any(c.name == column and c.processing_time for c in table.columns)
    attribute = next(
        (a for a in circuit.view(relation).time_attributes if a.column == column), None
    )
    return attribute is not None and attribute_is_processing_time(circuit, attribute)


def _marked(circuit: Circuit, source: str, operators: Sequence[Operator]) -> tuple[Operator, ...]:
    out: list[Operator] = []
    for op in operators:
        if isinstance(op, Window) and column_is_processing_time(circuit, source, op.time_column):
            op = replace(op, processing_time=True)
        out.append(op)
    return tuple(out)


def mark_processing_windows(circuit: Circuit) -> Circuit:
    """The circuit with every window on a processing-time attribute marked
    (:attr:`~app.circuit.ir.Window.processing_time`), views in order (a view's input is
    marked before it is read)."""
    views: list[View] = []
    for view in circuit.views:
        known = replace(circuit, views=tuple(views))
        union = view.union
        if union is not None:
            branches = tuple(
                UnionBranch(b.source, _marked(known, b.source, b.operators))
                for b in union.branches
            )
            operators: tuple[Operator, ...] = (UnionAll(branches),)
        elif view.join is not None:
            operators = view.operators
        else:
            operators = _marked(known, view.source, view.operators)
        views.append(replace(view, operators=operators))
    return replace(circuit, views=tuple(views))
