"""Stateless step views over Arrow, in the source's own task (ADR 0007).

Why: a step sink view (:mod:`app.runtime.step.step_views`) computed by Spark sends every accepted
row of the step from the source's slice into the JVM and the view's rows back out to Python
to be encoded and produced. The source's Python task already holds the slice as Arrow
columns, so a view that only filters rows and forwards columns can be evaluated there, with
pyarrow's kernels, and its records encoded and produced in the same task: the rows never
enter the JVM (:mod:`app.runtime.step.slice_writers`).

Only what Arrow computes exactly as Spark and the reference evaluator do is taken here
(:func:`arrow_evaluable`): column references and literals; comparisons of integers,
strings, booleans, dates and timestamps; three-valued AND, OR, NOT; IS [NOT] NULL; a SELECT
list of plain columns. Floating point (Spark orders NaN above everything), decimals,
arithmetic, casts, CASE and every other function stay with Spark
(:func:`app.runtime.operators.view_frame.view_frame`), which remains the definition: the tests hold
this evaluator to the reference evaluator, and the differential tests the whole runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from app.circuit.ir import Call, ColumnRef, Expr, Filter, Literal_, Project, SqlType, View
from app.circuit.processing_time import view_reads_now

__all__ = ["arrow_evaluable", "evaluate", "slice_computable", "view_rows"]

_COMPARISONS = {
    "=": pc.equal,
    "<>": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}
_INTEGERS = ("INT", "BIGINT")
#: Types whose values Arrow compares exactly as Spark does, by family.
_FAMILY = {
    "INT": "integer",
    "BIGINT": "integer",
    "VARCHAR": "string",
    "BOOLEAN": "boolean",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
}


def _comparable(t: SqlType) -> str | None:
    return _FAMILY.get(t.name)


def _negative_literal(expr: Expr) -> bool:
    """``-1``: the parser's unary minus on an integer constant."""
    return (
        isinstance(expr, Call)
        and expr.fn == "-"
        and len(expr.args) == 1
        and isinstance(expr.args[0], Literal_)
        and expr.args[0].type.name in _INTEGERS
    )


def _expr_ok(expr: Expr) -> bool:
    if _negative_literal(expr):
        return True
    if isinstance(expr, ColumnRef):
        return _comparable(expr.type) is not None
    if isinstance(expr, Literal_):
        return _comparable(expr.type) is not None
    if not isinstance(expr, Call):
        return False
    if expr.fn in _COMPARISONS:
        a, b = expr.args
        family = _comparable(a.type)
        return family is not None and family == _comparable(b.type) and _expr_ok(a) and _expr_ok(b)
    if expr.fn in ("AND", "OR", "NOT"):
        return all(a.type.name == "BOOLEAN" and _expr_ok(a) for a in expr.args)
    if expr.fn in ("IS NULL", "IS NOT NULL"):
        return all(map(_expr_ok, expr.args))
    return False


def arrow_evaluable(view: View) -> bool:
    """The view is WHERE filters over comparable values and a SELECT list of plain columns:
    what :func:`view_rows` computes exactly as Spark does."""
    for op in view.operators:
        if isinstance(op, Filter):
            if op.predicate.type.name != "BOOLEAN" or not _expr_ok(op.predicate):
                return False
        elif isinstance(op, Project):
            if not all(isinstance(e, ColumnRef) for _, e in op.outputs):
                return False
        else:
            return False
    return True


def slice_computable(views: Sequence[View]) -> bool:
    """Every one of a table's step views is :func:`arrow_evaluable` and none writes or reads
    the step's batch time (``changelog``, NOW(): it is Spark's, recorded in its offset log)."""
    return all(
        arrow_evaluable(v)
        and (v.output is None or v.output.format != "changelog")
        and not view_reads_now(v)
        for v in views
    )


#: A pa.Array, or a pa.Scalar for an expression of literals alone (pyarrow is untyped).
Value: TypeAlias = Any


def _normalised(value: Value, t: SqlType) -> Value:
    """A value in one type per family, so both sides of a comparison match: integers as
    int64, timestamps as epoch microseconds, dates as days."""
    if t.name in _INTEGERS:
        return value.cast(pa.int64())
    if t.name == "TIMESTAMP":
        return value.cast(pa.timestamp("us")).cast(pa.int64())
    if t.name == "DATE":
        return value.cast(pa.int32())
    return value


def _literal(expr: Literal_) -> pa.Scalar:
    """Literals as the normalised family type (TIMESTAMP literals are epoch ms in the IR)."""
    value, name = expr.value, expr.type.name
    if name in _INTEGERS:
        return pa.scalar(value, pa.int64())
    if name == "TIMESTAMP":
        return pa.scalar(None if value is None else int(value) * 1000, pa.int64())
    if name == "DATE":
        return pa.scalar(value, pa.int32())
    if name == "VARCHAR":
        return pa.scalar(value, pa.string())
    return pa.scalar(value, pa.bool_())


def evaluate(expr: Expr, batch: pa.RecordBatch) -> Value:
    """``expr`` over every row of ``batch`` (SQL NULL semantics); an expression of literals
    alone gives a scalar."""
    if isinstance(expr, ColumnRef):
        return _normalised(batch.column(expr.name), expr.type)
    if isinstance(expr, Literal_):
        return _literal(expr)
    assert isinstance(expr, Call)
    args = [evaluate(a, batch) for a in expr.args]
    if _negative_literal(expr):
        return pc.negate_checked(args[0])
    if expr.fn in _COMPARISONS:
        return _COMPARISONS[expr.fn](*args)
    if expr.fn == "AND":
        return _fold(pc.and_kleene, args)
    if expr.fn == "OR":
        return _fold(pc.or_kleene, args)
    if expr.fn == "NOT":
        return pc.invert(args[0])
    if expr.fn == "IS NULL":
        return pc.is_null(args[0])
    if expr.fn == "IS NOT NULL":
        return pc.is_valid(args[0])
    raise ValueError(f"{expr.fn} is not evaluated over Arrow")


def _fold(kernel: Any, args: Sequence[Value]) -> Value:
    result = args[0]
    for arg in args[1:]:
        result = kernel(result, arg)
    return result


def _rows(view: View, batch: pa.RecordBatch) -> pa.RecordBatch:
    for op in view.operators:
        if isinstance(op, Filter):
            keep = evaluate(op.predicate, batch)
            if isinstance(keep, pa.Scalar):
                keep = pa.repeat(keep, batch.num_rows)
            batch = batch.filter(keep, null_selection_behavior="drop")  # WHERE keeps TRUE
        elif isinstance(op, Project):
            columns = [batch.column(e.name) for _, e in op.outputs if isinstance(e, ColumnRef)]
            batch = pa.RecordBatch.from_arrays(columns, names=[n for n, _ in op.outputs])
    return batch


def view_rows(
    views: Sequence[View], table: str, rows: pa.RecordBatch
) -> dict[str, pa.RecordBatch]:
    """Every view's rows over one batch of the table's accepted rows (views in the circuit's
    order, each reading the table or an earlier one of them)."""
    frames = {table: rows}
    for view in views:
        frames[view.name] = _rows(view, frames[view.source])
    return frames
