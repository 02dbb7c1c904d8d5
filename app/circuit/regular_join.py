"""SPEC S16, S18: a join without a time bound that is OUTER or reads an updating relation's
changes (``Join.per_key``), per key.

No waterline can prove a row unmatched (an OUTER join), and a retracted row must leave its
side (an updating input), so the view is updating: per equality key k, with
``L_k`` and ``R_k`` the Z-sets of each side's rows so far (row -> weight, consolidated: a
row whose weight sums to 0 leaves), the view's content for k is every pair ``(l, r)`` with
``cond(l, r)``, of weight ``w_l * w_r``; for LEFT (and FULL) every ``l`` of positive weight
with no ``r`` of positive weight satisfying ``cond``, padded with NULLs, of weight ``w_l``;
symmetrically for RIGHT and FULL. A row whose key is NULL matches nothing: it is padded at
once and stays so. A step writes, for the keys it touched, content after the step less
content before, retractions first (the convention of updating views: the old row retracted
before the new one), so a padded row matched within the same step is never written.

The rules are plain Python over any hashable row, so that the reference evaluator (rows as
value tuples) and the Spark join operator (rows as JSON text, app/runtime/operators/
join_slots.py) run the same code and agree by construction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, MutableMapping
from typing import TypeVar

__all__ = ["Pair", "add_weight", "key_changes", "key_content"]

L = TypeVar("L", bound=Hashable)
R = TypeVar("R", bound=Hashable)
#: A row of the view before its projection: the left row and the right row, None for the
#: side a padded row has not.
Pair = tuple[L | None, R | None]


def add_weight(rows: MutableMapping[L, int], row: L, weight: int) -> None:
    """Consolidate ``weight`` of ``row`` into a side's Z-set: a row whose weight sums to 0
    leaves."""
    total = rows.get(row, 0) + weight
    if total:
        rows[row] = total
    else:
        rows.pop(row, None)


def key_content(
    kind: str,
    left: Mapping[L, int],
    right: Mapping[R, int],
    matches: Callable[[L, R], bool],
) -> Counter[Pair[L, R]]:
    """The view's rows of one key (module docstring), as pair -> weight, no zero weights.
    ``kind``: left, right or full; ``matches``: the residual condition of a pair (the
    keys are equal already)."""
    out: Counter[Pair[L, R]] = Counter()
    matched_right: set[R] = set()
    for l_row, l_weight in left.items():
        matched = False
        for r_row, r_weight in right.items():
            if not matches(l_row, r_row):
                continue
            out[(l_row, r_row)] += l_weight * r_weight
            matched = matched or r_weight > 0
            if l_weight > 0:
                matched_right.add(r_row)
        if kind in ("left", "full") and l_weight > 0 and not matched:
            out[(l_row, None)] += l_weight
    if kind in ("right", "full"):
        for r_row, r_weight in right.items():
            if r_weight > 0 and r_row not in matched_right:
                out[(None, r_row)] += r_weight
    return Counter({pair: weight for pair, weight in out.items() if weight})


def key_changes(
    changes: Iterable[tuple[Counter[Pair[L, R]], Counter[Pair[L, R]]]],
) -> list[tuple[Pair[L, R], int]]:
    """The changes of a step from each touched key's (before, after) content: every
    retraction, then every insertion, each of weight -1 or +1 (a row of weight 2 is two
    records), keys in the order given."""
    retractions: list[tuple[Pair[L, R], int]] = []
    insertions: list[tuple[Pair[L, R], int]] = []
    for before, after in changes:
        for pair in [*before, *(p for p in after if p not in before)]:
            delta = after.get(pair, 0) - before.get(pair, 0)
            if delta < 0:
                retractions.extend([(pair, -1)] * -delta)
            elif delta > 0:
                insertions.extend([(pair, 1)] * delta)
    return [*retractions, *insertions]
