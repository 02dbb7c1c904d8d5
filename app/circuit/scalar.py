"""Scalar expression evaluation over one decoded row, for the reference evaluator (SPEC S8).

The catalog (:mod:`app.circuit.functions`) owns every operator's and function's Python
semantics, CAST included, so the oracle and the Spark rendering agree by construction; this
module adds only what the evaluator needs on top: SQL predicate truth for WHERE/HAVING and the
conversion of an aggregate's exact result to its declared type (:func:`conform`).

Values are in the representation the Avro decoder produces after Tidemark's conversion:
TIMESTAMP = epoch milliseconds (int), DATE = days since the epoch (int), DECIMAL =
:class:`decimal.Decimal` at the column's scale, VARCHAR = str, VARBINARY = bytes, BOOLEAN =
bool, INT/BIGINT = int, REAL/DOUBLE = float, NULL = None.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from app.circuit import functions
from app.circuit.ir import Expr, SqlType

__all__ = ["cast_value", "conform", "evaluate_expr", "is_true"]

cast_value = functions.cast_value

_EXACT_SOURCE = {
    int: SqlType("BIGINT"),
    float: SqlType("DOUBLE"),
}


def is_true(value: Any) -> bool:
    """SQL predicate truth: only TRUE passes a WHERE/HAVING; NULL and FALSE do not (S8)."""
    return value is True


def evaluate_expr(expr: Expr, row: Mapping[str, Any]) -> Any:
    """The value of ``expr`` over ``row`` (column name -> value), with the catalog's semantics."""
    return functions.evaluate(expr, row)


def conform(value: Any, type_: SqlType) -> Any:
    """An exact Python number (int, float or Decimal) as a value of SQL type ``type_``.

    Goes through the catalog's CAST, so DECIMAL rounds HALF_UP to the type's scale and integers
    truncate toward zero exactly as CAST does; non-numeric values are returned unchanged.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, Decimal):
        source = SqlType("DECIMAL", True, 38, max(0, -int(value.as_tuple().exponent)))
    elif type(value) in _EXACT_SOURCE:
        source = _EXACT_SOURCE[type(value)]
    else:
        return value
    # A Python int is unbounded, so an int "BIGINT" may lie outside BIGINT (a SUM past its
    # limits): it goes through CAST, which makes a value outside its type NULL (integer
    # overflow is NULL), where returning it unchanged failed the record's Avro encoding.
    if (
        source.name == type_.name
        and type_.name != "BIGINT"
        and (type_.name != "DECIMAL" or source.scale == type_.scale)
    ):
        return value
    if type_.name == "DECIMAL" and (type_.precision is None or type_.scale is None):
        return value
    return cast_value(value, source, type_)
