"""Window Top-N: a ranking SELECT and the SELECT that filters it, planned as one view.

Flink's form (docs/language.md, Window Top-N)::

    SELECT * FROM (
      SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY total DESC)
             AS rownum
      FROM <a windowed relation>)
    WHERE rownum <= 3

The inner SELECT (a subquery, a WITH query or a LOCAL view) is planned by
:func:`plan_ranking` into a :class:`Ranking`: no view of its own, since its rows mean
nothing until a reader limits the rank. The reading SELECT (:func:`plan_top_n`) must limit it
in its WHERE (``rownum <= N``, ``rownum < N`` or ``rownum = 1``, Flink's rule); the view it
becomes reads the ranking's input through ``[Window] [Filter] TopN [Filter] Project``, its
expressions written over the Top-N's rows (the input's columns and the rank).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from sqlglot import exp

from app.circuit.ir import (
    Call,
    Column,
    ColumnRef,
    Expr,
    Filter,
    Operator,
    Position,
    Project,
    SortKey,
    SqlType,
    TimeAttribute,
    TopN,
    substitute,
)
from app.program.lexer import CompileFailure

#: Reads an expression of the SELECT over its input rows (the planner's translator).
Translate = Callable[[exp.Expression], Expr]

__all__ = ["LIMIT_FIX", "Ranking", "TopNPlan", "Translate", "plan_ranking", "plan_top_n",
           "ranking_item"]

_FUNCTIONS: dict[type[exp.Expression], Literal["ROW_NUMBER", "RANK"]] = {
    exp.RowNumber: "ROW_NUMBER",
    exp.Rank: "RANK",
}
#: The reading SELECT's WHERE, Flink's rule for a Top-N.
LIMIT_FIX = ("filter it in the SELECT that reads it: SELECT * FROM (SELECT ..., ROW_NUMBER() "
              "OVER (PARTITION BY window_start, window_end ORDER BY x DESC) AS rownum FROM "
              "...) WHERE rownum <= 3")
_WINDOW_FIX = ("PARTITION BY window_start, window_end [, keys] of the rows of a TUMBLE, HOP or "
               "CUMULATE window, or of a subquery that aggregates with GROUP BY window_start, "
               "window_end")


@dataclass(frozen=True)
class Ranking:
    """A SELECT with ``ROW_NUMBER()`` or ``RANK() OVER (...)``, waiting for the reader that
    limits its rank. ``operators`` (``[Window] [Filter]``) run over ``source``'s rows before
    the ranking; ``outputs`` is its SELECT list over the ranked rows (the rank is
    ``ColumnRef(rank_column)``); ``window`` the time attribute of the partition's window
    end, whose waterline completes a partition."""

    source: str
    operators: tuple[Operator, ...]
    function: Literal["ROW_NUMBER", "RANK"]
    partition: tuple[Expr, ...]
    order: tuple[SortKey, ...]
    window_end: str
    window: TimeAttribute
    rank_column: str
    outputs: tuple[tuple[str, Expr], ...]
    position: Position


def ranking_item(item: exp.Expression) -> exp.Window | None:
    """The ``ROW_NUMBER()``/``RANK() OVER (...)`` of a SELECT item, or None."""
    node = item.this if isinstance(item, exp.Alias) else item
    if isinstance(node, exp.Window) and type(node.this) in _FUNCTIONS:
        return node
    return None


def plan_ranking(window: exp.Window, name: str, position: Position,
                 relation: str, operators: Sequence[Operator],
                 time_attrs: dict[str, TimeAttribute], translate: Translate,
                 outputs: Sequence[tuple[str, Expr]], input_columns: Sequence[str]) -> Ranking:
    """The ranking of one SELECT item ``window`` named ``name``; ``outputs`` is the SELECT
    list with the rank as ``ColumnRef(name)``; ``translate`` reads an expression over the
    input rows (after the window function in FROM and WHERE)."""
    function = _FUNCTIONS[type(window.this)]
    written = f"{function}() OVER (...)"
    if window.args.get("spec") is not None:
        raise CompileFailure(position, f"unsupported: a frame in {written}",
                             "remove ROWS/RANGE BETWEEN: a Top-N ranks a window's rows")
    if name in input_columns:
        raise CompileFailure(position, f"{function}() is named {name}, a column of "
                             f"{relation}", "give the rank another name with AS, e.g. rownum")
    partition = [translate(node) for node in window.args.get("partition_by") or []]
    ends = [e.name for e in partition if isinstance(e, ColumnRef)
            and e.name in time_attrs and time_attrs[e.name].kind == "window_end"]
    if not ends:
        has_window = any(a.kind == "window_end" for a in time_attrs.values())
        what = ("its PARTITION BY has no window_end" if has_window
                else f"{relation} has no window columns")
        raise CompileFailure(position, f"unsupported: {written} over rows of no window "
                             f"({what}); only a window Top-N is computed in a stream",
                             _WINDOW_FIX)
    order = window.args.get("order")
    if order is None or not order.expressions:
        raise CompileFailure(position, f"{written} has no ORDER BY",
                             "rank by a column: ORDER BY total DESC")
    keys: list[SortKey] = []
    for ordered in order.expressions:
        descending = bool(ordered.args.get("desc"))
        if bool(ordered.args.get("nulls_first")) == descending:
            nulls = "FIRST" if descending else "LAST"
            raise CompileFailure(position, f"unsupported: NULLS {nulls} in the ORDER BY of "
                                 f"{written}",
                                 "remove it: NULL is the smallest value, first in ASC and "
                                 "last in DESC")
        keys.append(SortKey(translate(ordered.this), descending))
    return Ranking(relation, tuple(operators), function, tuple(partition), tuple(keys),
                   ends[0], time_attrs[ends[0]], name, tuple(outputs), position)


@dataclass(frozen=True)
class TopNPlan:
    """The view a Top-N reader becomes: its operators over ``ranking.source``, columns,
    time attributes and the Top-N itself."""

    operators: tuple[Operator, ...]
    columns: tuple[Column, ...]
    time_attributes: tuple[TimeAttribute, ...]
    top_n: TopN
    window: TimeAttribute


def _limit(node: exp.Expression, rank: str) -> int | None | Literal[False]:
    """N of a condition ``rank <= N`` / ``rank < N`` / ``rank = 1`` (either side); None for
    a condition that does not read the rank; False for one that reads it otherwise."""
    names = {c.name.lower() if not c.this.args.get("quoted") else c.name
             for c in node.find_all(exp.Column)}
    if rank not in names:
        return None
    inner = node
    while isinstance(inner, exp.Paren):
        inner = inner.this
    ops: dict[type[exp.Expression], str] = {exp.LTE: "<=", exp.LT: "<", exp.EQ: "=",
                                            exp.GTE: ">=", exp.GT: ">"}
    op = ops.get(type(inner))
    if op is None:
        return False
    left, right = inner.this, inner.expression
    flipped = {"<=": ">=", "<": ">", ">=": "<=", ">": "<", "=": "="}
    if isinstance(right, exp.Column) and isinstance(left, exp.Literal):
        left, right, op = right, left, flipped[op]
    if not (isinstance(left, exp.Column) and isinstance(right, exp.Literal)
            and not right.is_string and right.this.isdigit()):
        return False
    amount = int(right.this)
    if op == "<=":
        return amount
    if op == "<":
        return amount - 1
    if op == "=" and amount == 1:
        return 1
    return False


def plan_top_n(ranking: Ranking, relation: str, where: exp.Expression | None,
               where_position: Position, translate_where: Translate,
               outputs: Sequence[tuple[str, Expr]],
               time_attrs: dict[str, TimeAttribute]) -> TopNPlan:
    """The view of the SELECT that reads ``ranking`` (named ``relation``): ``where`` must
    limit the rank; its other conditions and ``outputs`` (over the ranking's columns) are
    rewritten over the Top-N's rows."""
    rank = ranking.rank_column
    limits: list[int] = []
    rest: list[Expr] = []
    for conjunct in _conjuncts(where) if where is not None else []:
        found = _limit(conjunct, rank)
        if found is False:
            raise CompileFailure(where_position, f"unsupported: this condition on {rank}, the "
                                 f"{ranking.function}() of {relation}",
                                 f"limit it with {rank} <= N, {rank} < N or {rank} = 1 (Flink's "
                                 "Top-N), and filter other columns")
        if found is None:
            rest.append(translate_where(conjunct))
        else:
            limits.append(found)
    if not limits:
        raise CompileFailure(where_position, f"{ranking.function}() OVER (...) of {relation} "
                             f"is read without a limit on {rank}", LIMIT_FIX)
    limit = min(limits)
    if limit < 1:
        raise CompileFailure(where_position, f"the limit on {rank} keeps no row",
                             f"write {rank} <= N with N >= 1")
    inner = dict(ranking.outputs)

    def over_top_n(expr: Expr) -> Expr | None:
        if isinstance(expr, ColumnRef) and expr.name in inner:
            return inner[expr.name]
        return None

    top_n = TopN(ranking.function, ranking.partition, ranking.order, limit, rank,
                 ranking.window_end)
    operators: list[Operator] = [*ranking.operators, top_n]
    if rest:
        predicate = rest[0]
        for more in rest[1:]:
            predicate = Call("AND", (predicate, more), SqlType("BOOLEAN", nullable=True))
        operators.append(Filter(substitute(predicate, over_top_n)))
    operators.append(Project(tuple((n, substitute(e, over_top_n)) for n, e in outputs)))
    attrs = tuple(
        replace(a, column=n)  # a derived attribute keeps its derivation
        for n, e in outputs
        if isinstance(e, ColumnRef) and (a := time_attrs.get(e.name)) is not None
    )
    return TopNPlan(tuple(operators), tuple(Column(n, e.type) for n, e in outputs), attrs,
                    top_n, ranking.window)


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    inner = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(inner, exp.And):
        return _conjuncts(inner.this) + _conjuncts(inner.expression)
    return [node]

