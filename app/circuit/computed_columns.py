"""Computed table columns (``cost AS price * quantity``, Flink's ``ts AS
TO_TIMESTAMP_LTZ(epoch_ms, 3)``): evaluated when a record is decoded, before the late gate.

A computed column is a function of its record's other columns (value, key and metadata ones,
never another computed one), so it is computed where the record is decoded: the reference
evaluator's table gate and the Kafka source's LateGate
(:mod:`app.connectors.late_gate`) both call :func:`computed_values` with the catalog's
Python semantics (:mod:`app.circuit.functions`), and so agree by construction. Past the gate
it is an ordinary column: it can carry LATENESS (or a WATERMARK), be NOT NULL-checked (a NULL
there, an expression that fails included, makes the record an ``invalid`` dead letter with
:func:`null_message`, S7), ranged, judged future and late (S5), and it moves the waterline (S3).

The LateGate runs in Spark's tasks and receives its table as JSON
(:class:`app.connectors.late_gate.SourceSpec`), so an expression travels as
:func:`expr_to_json` and is rebuilt by :func:`expr_from_json`.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from app.circuit import functions
from app.circuit.ir import (
    Call,
    Case,
    Cast,
    Column,
    ColumnRef,
    Computed,
    Expr,
    Literal_,
    SqlType,
    column_names,
)

__all__ = [
    "CURRENT_WATERMARK",
    "WATERMARK_PREFIX",
    "computed_values",
    "current_watermark_column",
    "expr_from_json",
    "expr_to_json",
    "null_message",
]

#: The call of a hidden computed column holding its table's waterline (never in a view's
#: expressions: a view reads the column).
CURRENT_WATERMARK = "CURRENT_WATERMARK"
#: The name of that column is this prefix and its LATENESS column's (no user name starts
#: with ``__``).
WATERMARK_PREFIX = "__watermark__"


def current_watermark_column(table: str, column: Column) -> Column:
    """The hidden computed column of LATENESS column ``column`` that Flink's
    ``CURRENT_WATERMARK(column)`` reads in a view of the table: the waterline the row's step
    started with, w(t-1) (S3, S5: the one the late gate judges the row by), NULL before the
    first. It is evaluated with the table's other computed columns, where the gate's
    waterlines are at hand, so both engines read the same value."""
    kind = column.type.with_nullable(True)
    call = Call(CURRENT_WATERMARK, (ColumnRef(column.name, column.type),), kind)
    return Column(f"{WATERMARK_PREFIX}{column.name}", kind,
                  computed=Computed(call, f"CURRENT_WATERMARK({table}.{column.name})"))


def computed_values(columns: Sequence[Column], row: Mapping[str, Any],
                    waterlines: Mapping[str, int | None]) -> dict[str, Any]:
    """Each computed column of ``columns`` over ``row`` (the record's other columns), with
    ``waterlines`` the table's at the start of the step (w(t-1), for CURRENT_WATERMARK). An
    expression the catalog cannot evaluate is NULL, as its Spark rendering's ``try_*`` is."""
    values: dict[str, Any] = {}
    for column in columns:
        if column.computed is None:
            continue
        expr = column.computed.expr
        if isinstance(expr, Call) and expr.fn == CURRENT_WATERMARK:
            values[column.name] = waterlines.get(column_names(expr)[0])
            continue
        try:
            values[column.name] = functions.evaluate(column.computed.expr, row)
        except (ArithmeticError, ValueError, TypeError, OverflowError):
            values[column.name] = None
    return values


def null_message(name: str, written: str) -> str:
    """The ``invalid`` dead letter's message of a NOT NULL computed column that is NULL."""
    return f"column {name} is NOT NULL but {written} is NULL for the record"


def _type_json(t: SqlType) -> list[Any]:
    return [t.name, t.nullable, t.precision, t.scale]


def _type_from(data: Sequence[Any]) -> SqlType:
    return SqlType(data[0], bool(data[1]), data[2], data[3])


def _value_json(value: Any) -> Any:
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float):
        return {"double": repr(value)}  # NaN and the infinities are no JSON numbers
    return value


def _value_from(data: Any) -> Any:
    if isinstance(data, dict):
        if "decimal" in data:
            return Decimal(data["decimal"])
        if "bytes" in data:
            return base64.b64decode(data["bytes"])
        return float(data["double"])
    return data


def expr_to_json(expr: Expr) -> dict[str, Any]:
    """``expr`` as JSON values (for the source's spec), rebuilt by :func:`expr_from_json`."""
    if isinstance(expr, ColumnRef):
        return {"column": expr.name, "type": _type_json(expr.type)}
    if isinstance(expr, Literal_):
        return {"literal": _value_json(expr.value), "type": _type_json(expr.type)}
    if isinstance(expr, Call):
        return {"call": expr.fn, "args": [expr_to_json(a) for a in expr.args],
                "type": _type_json(expr.type)}
    if isinstance(expr, Cast):
        return {"cast": expr_to_json(expr.expr), "type": _type_json(expr.type)}
    return {"case": [[expr_to_json(c), expr_to_json(v)] for c, v in expr.whens],
            "else": None if expr.else_ is None else expr_to_json(expr.else_),
            "type": _type_json(expr.type)}


def expr_from_json(data: Mapping[str, Any]) -> Expr:
    """The expression :func:`expr_to_json` wrote."""
    kind = _type_from(data["type"])
    if "column" in data:
        return ColumnRef(data["column"], kind)
    if "literal" in data:
        return Literal_(_value_from(data["literal"]), kind)
    if "call" in data:
        return Call(data["call"], tuple(expr_from_json(a) for a in data["args"]), kind)
    if "cast" in data:
        return Cast(expr_from_json(data["cast"]), kind)
    return Case(tuple((expr_from_json(c), expr_from_json(v)) for c, v in data["case"]),
                None if data["else"] is None else expr_from_json(data["else"]), kind)
