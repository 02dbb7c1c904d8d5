"""The ranks of a window Top-N (:class:`~app.circuit.ir.TopN`): one rule, read by the
reference evaluator and by the Spark runtime's ranking of a step's rows.

Order: the ORDER BY keys in turn, NULL the smallest value (Spark's order: NULLs first
ascending, last descending). Rows equal on every key are ordered by all their columns, in
column order, in the direction of the last ORDER BY key: so ROW_NUMBER numbers tied rows
the same way whatever order they arrived in (Flink numbers them by arrival, which a
distributed step does not keep). RANK is 1 + the number of rows strictly before a row on
the ORDER BY keys, so tied rows share a rank and a partition can pass more than ``limit``
rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cmp_to_key
from typing import Any, TypeVar

from app.circuit.ir import TopN
from app.circuit.scalar import evaluate_expr

__all__ = ["rank_keyed", "ranked"]


def _compare(a: Any, b: Any, descending: bool) -> int:
    """-1 when ``a`` comes first, 1 when ``b`` does, 0 when equal; NULL is the smallest."""
    if a is None or b is None:
        order = 0 if a is None and b is None else (-1 if a is None else 1)
    else:
        order = -1 if a < b else (1 if a > b else 0)
    return -order if descending else order


def ranked(top_n: TopN, rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, Mapping[str, Any]]]:
    """The rows of one partition whose rank is at most ``top_n.limit``, first to last, each
    with its rank (ROW_NUMBER or RANK)."""
    keyed = [
        (tuple(evaluate_expr(key.expr, row) for key in top_n.order), tuple(row.values()), row)
        for row in rows
    ]
    return rank_keyed(top_n.function, [k.descending for k in top_n.order], top_n.limit, keyed)


Row = TypeVar("Row")


def rank_keyed(
    function: str,
    descending: Sequence[bool],
    limit: int,
    keyed: Sequence[tuple[tuple[Any, ...], tuple[Any, ...], Row]],
) -> list[tuple[int, Row]]:
    """:func:`ranked` over rows given as (ORDER BY key values, every column's value in
    column order, row), for a runtime that computes the keys itself."""
    last = descending[-1] if descending else False

    def by_keys(a: tuple[Any, ...], b: tuple[Any, ...]) -> int:
        for down, x, y in zip(descending, a, b, strict=True):
            found = _compare(x, y, down)
            if found:
                return found
        return 0

    def by_row(a: tuple[Any, ...], b: tuple[Any, ...]) -> int:
        found = by_keys(a[0], b[0])
        if found:
            return found
        for x, y in zip(a[1], b[1], strict=True):
            found = _compare(x, y, last)
            if found:
                return found
        return 0

    ordered = sorted(keyed, key=cmp_to_key(by_row))
    out: list[tuple[int, Row]] = []
    for index, (keys, _, row) in enumerate(ordered):
        if function == "ROW_NUMBER":
            rank = index + 1
        elif index and by_keys(ordered[index - 1][0], keys) == 0:
            rank = out[-1][0]
        else:
            rank = index + 1
        if rank > limit:
            break
        out.append((rank, row))
    return out
