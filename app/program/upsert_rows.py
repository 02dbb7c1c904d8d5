"""An upsert of updating rows that do not aggregate, materialised per key (ADR 0032).

A view written as ``'upsert'`` keyed by columns of its own (an upsert-kafka table's PRIMARY
KEY, or ``'key'``) whose rows are updated without a GROUP BY (an OUTER join without a time
bound, a join or filter of a changelog table's latest rows, a filter over an updating
aggregate) has no group whose latest row is the key's value. Flink puts a
SinkUpsertMaterializer before such a sink; Tidemark compiles the same thing as a generated
aggregate, ``<view>.upsert``, that reads the view's changes (SPEC S18): ``GROUP BY`` the key,
each other column ``HELD(i, c1, ..., cn)``, the latest-added of the key's rows still held
(app/circuit/aggregates.py). A key whose rows are all taken back has no row, and its group
is deleted: the upsert writes its tombstone. Both runtimes run it as any aggregate over an
updating relation; the view itself becomes local, read by the generated one.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.circuit.ir import (
    HELD,
    AggCall,
    Aggregate,
    Column,
    ColumnRef,
    Literal_,
    Project,
    SqlType,
    StateBound,
)
from app.program.query import PlannedQuery, Relation

__all__ = ["UPSERT_SUFFIX", "plan_upsert", "upsert_state"]

#: The generated view's name is the view's and this.
UPSERT_SUFFIX = ".upsert"


def plan_upsert(rows: Relation, key: Sequence[str]) -> PlannedQuery:
    """The query of ``<view>.upsert`` over ``rows`` (the view's changes, or the table a later
    stage reads them through): its columns in the view's order, grouped by ``key``."""
    columns = rows.columns
    whole = tuple(ColumnRef(c.name, c.type) for c in columns)
    index = SqlType("INT", False)
    held = tuple(
        (c.name, AggCall(HELD, (Literal_(i, index), *whole), False, c.type))
        for i, c in enumerate(columns) if c.name not in key
    )
    by_name = {c.name: c for c in columns}
    keys = tuple((k, ColumnRef(k, by_name[k].type)) for k in key)
    outputs = tuple((c.name, ColumnRef(c.name, c.type)) for c in columns)
    return PlannedQuery(rows.name, [Aggregate(keys, held), Project(outputs)],
                        [Column(c.name, c.type) for c in columns], tuple(key), (), True,
                        None, None, None, tuple(key), {k: k for k in key},
                        retracting=rows.name)


def upsert_state(view: str, key: Sequence[str]) -> StateBound:
    """What ``<view>.upsert`` holds (S11): the view's rows per key, freed as they are taken
    back."""
    return StateBound("unbounded", None, f"the rows of {view} held per key "
                      f"({', '.join(key)}), each key's freed when its last row is taken back")
