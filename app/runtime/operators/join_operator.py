"""Joins by an operator of Tidemark's own (SPEC S16, ADR 0017): OUTER interval and window
joins and temporal joins, those whose rows Spark's stream-stream join would write at other
times.

Spark's join writes a row without a match when the query's one watermark (the minimum of its
tables', ADR 0013) passes the row's bound, later than S16 while the row's own table is the
slower one, and never while that table stays quiet; it has no temporal join at all. S16
writes an OUTER row in the step the *other* side's waterline proves that no match can come,
and a temporal join's probe row in the step the versioned table's waterline passes its time.
So both sides' rows go to one ``transformWithStateInPandas`` (no time mode: Spark drops and
times out nothing), grouped by a slot, a hash of the join keys into :data:`SLOTS`. Each
table's probe rows (the step's maxima, punctuation included, ADR 0001) are copied to every
slot, so every slot is called in every step that reads either table, and computes both
tables' waterlines w(t) itself, by the step sink's rule (S3, :func:`app.circuit.waterline.
next_waterline`). A slot's call then, over the step's rows in arrival order (a table's rows
by Kafka partition and offset, as the reference evaluator takes them):

The rules of a slot's call are :mod:`app.runtime.operators.join_slots`'s, a module of
plain Python that the driver's pre-init of ``transformWithStateInPandas`` imports cheaply.

Rows reach the operator already gated: a late row is a dead letter of its own table and never
arrives. A row's columns travel as JSON of the side's columns (Spark's ``to_json`` and
``from_json`` give back the same values); the state of a slot is one JSON document (both
waterlines, the held rows, the versions), checkpointed with the step's offsets, so a replayed
step starts from the state the first run started from and writes the same rows (S15).
The slots, probes, wire rows and state document are :mod:`app.runtime.operators.slot_operator`'s,
shared with the OVER operator.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import replace
from functools import partial, reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    IntegerType,
    LongType,
    NumericType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from app.circuit.functions import to_spark_sql
from app.circuit.ir import (
    RETRACTION_COLUMN,
    Call,
    Circuit,
    Expr,
    Join,
    JoinSide,
    SqlType,
    TimeStep,
    column_names,
    column_refs,
    conjuncts,
)
from app.circuit.processing_time import BATCH_TIME_COLUMN
from app.connectors.late_gate import ACCEPTED
from app.runtime.operators.join_slots import JoinOperatorSpec, step_slot
from app.runtime.operators.join_support import join_time_source, probe_time
from app.runtime.operators.slot_operator import (
    SLOTS,
    keyed_slot,
    probe_wire,
    run_slots,
    value_sql,
    wire_row,
)
from app.runtime.operators.view_frame import ms_sql, table_columns

__all__ = ["SLOTS", "join_operator_rows", "operator_joined"]

_OUT = StructType([StructField("lrow", StringType()), StructField("rrow", StringType())])
#: Of an OUTER join without a time bound: also whether the row is a retraction (S18).
_OUT_UNDO = StructType([*_OUT.fields, StructField("undo", BooleanType())])

def join_operator_rows(
    circuit: Circuit,
    join: Join,
    frames: Mapping[str, DataFrame],
    sources: Mapping[str, DataFrame],
) -> DataFrame:
    """The rows of a join by Tidemark's operator (ADR 0017): each side's rows and its
    table's probes, whose column of the LATENESS column the join reads on that side holds
    the step's maximum (ADR 0001). Both are taken per side, not per relation: a relation
    joined with itself (a self-join) is both sides, each with its own role (a temporal
    join's versions are its right side's rows alone)."""
    if join.per_key or (join.as_of is not None and join.as_of.processing_time):
        # No waterline frees a row or proves it unmatched: no probes (S16, S18). AS OF
        # processing time, the step's batch time is every side's waterline (S13).
        spec = JoinOperatorSpec(join.kind, join.form, 0, 0, 0, 0,
                                processing_time=not join.per_key)
        return operator_joined(
            join, (frames[join.left.source], _versions(circuit, join, frames, sources)),
            None, spec
        )
    probes: list[DataFrame] = []
    lateness: list[int] = []
    # A temporal join's probe side may be a native aggregate's final rows (ADR 0017).
    lags = any(v.name == join.left.source and not v.is_stateless for v in circuit.views)
    probe_steps: tuple[TimeStep, ...] = ()
    if join.as_of is not None:
        assert join.as_of.version_column is not None, join
        # A derived probe time (a boundary's window_start) follows its LATENESS column's
        # waterline through its steps.
        probe = probe_time(circuit, join, lags)
        assert probe is not None, (join, "refused by check_supported")
        probe_steps = probe[2]
        times = [
            probe[:2],
            join_time_source(circuit, join.right.source, join.as_of.version_column),
        ]
    else:
        assert join.bound is not None, join
        # A window join's rows are windows of their table's column (w(window_end) = w(c)).
        ends = join.form == "window"
        times = [
            join_time_source(circuit, join.left.source, join.bound.left_column, ends),
            join_time_source(circuit, join.right.source, join.bound.right_column, ends),
        ]
    for side, found in zip((join.left, join.right), times, strict=True):
        assert found is not None, (side, "refused by check_supported")
        table = circuit.table(found[0])
        read = next(x for x in table.lateness if x.column == found[1])
        probes.append(
            sources[table.name].filter(F.col("_kind") == "probe").select(
                F.expr(ms_sql(read.column)).alias("t")
            )
        )
        lateness.append(read.amount)
    bound = (0, 0) if join.bound is None else (join.bound.lower, join.bound.upper)
    spec = JoinOperatorSpec(
        join.kind, join.form, *bound, lateness[0], lateness[1], probe_lags=lags,
        probe_steps=probe_steps,
    )
    inputs = (frames[join.left.source], _versions(circuit, join, frames, sources))
    return operator_joined(join, inputs, (probes[0], probes[1]), spec)


def _versions(
    circuit: Circuit, join: Join, frames: Mapping[str, DataFrame], sources: Mapping[str, DataFrame]
) -> DataFrame:
    """The right side's rows; of a temporal join of a table that deletes keys, with the
    deletions of its keys (tombstones, delete events), which end versions: no other view
    reads them, nor the probe side of a table joined with itself."""
    if join.as_of is None or not circuit.root_table(join.right.source).deletes_keys:
        return frames[join.right.source]
    versioned = circuit.root_table(join.right.source)
    return (
        sources[versioned.name]
        .filter(F.col("_kind").isin(*ACCEPTED))
        .select(
            *table_columns(versioned),
            "_partition",
            "_offset",
            (F.col("_kind") == "delete").alias("_deleted"),
        )
    )


def operator_joined(
    join: Join,
    inputs: tuple[DataFrame, DataFrame],
    probes: tuple[DataFrame, DataFrame] | None,
    spec: JoinOperatorSpec,
) -> DataFrame:
    """The joined rows of ``join`` (each side's columns by qualified name), over each side's
    rows in ``inputs`` and each side's table probes in ``probes`` (left, then right; one
    column ``t``, the step's maximum of the side's time column in ms); a temporal join's
    residual applied (a LEFT row whose version fails it is padded, S16). A versioned table's rows
    may carry ``_deleted``: true for the deletion of their key (its row is not sent).

    A join without a time bound kept per key (``join.per_key``) reads no probes; a side's
    rows may carry :data:`RETRACTION_COLUMN` (an updating input's changes, S18), and its
    joined rows carry it: true for the retraction of a row written before (a padded row
    whose first match came, or a pair whose row was retracted)."""
    times: tuple[str | None, str | None]
    if join.as_of is not None and join.as_of.version_column is None:
        # A version's time is its step's batch time (S13), a probe's its AS OF column's
        # (the same), or PROCTIME(): BATCH_TIME_COLUMN stands for the batch time.
        times = (join.as_of.probe_column or BATCH_TIME_COLUMN, BATCH_TIME_COLUMN)
    elif join.as_of is not None:
        times = (join.as_of.probe_column, join.as_of.version_column)
    elif join.per_key:
        times = (None, None)
    else:
        assert join.bound is not None and join.kind != "inner", join
        times = (join.bound.left_column, join.bound.right_column)
    sides = [_side(s, df) for s, df in zip((join.left, join.right), inputs, strict=True)]
    keys = _keys(join, sides)
    usable = _side_conditions(join)
    pair = _pair_condition(join)
    read: dict[str, SqlType] = {}
    if pair is not None:
        read = {ref.name: ref.type for ref in column_refs(pair)}
        spec = replace(
            spec, pair=pair, pair_types=tuple((n, t.name) for n, t in sorted(read.items()))
        )
    wire = []
    for name, side, key, time_column, ok, probe in zip(
        ("L", "R"), sides, keys, times, usable, probes or (None, None), strict=True
    ):
        spec_side = join.left if name == "L" else join.right
        k = F.when(
            # A struct, not an array: an array would coerce its values to one type. A row
            # that fails its side's conditions matches nothing, as a NULL key does.
            reduce(operator.and_, [c.isNotNull() for c in key], ok),
            F.to_json(F.struct(*[c.alias(f"k{i}") for i, c in enumerate(key)])),
        ).otherwise(F.lit(None).cast("string"))
        row = F.to_json(F.struct(*[F.col(f"`{c}`") for c in _columns(spec_side)]))
        if "_deleted" in side.columns:
            row = F.when(~F.col("_deleted"), row)
        mine = [c for c in _columns(spec_side) if c in read]
        vals = (
            F.to_json(F.struct(*[value_sql(c, read[c]).alias(c) for c in mine]))
            if mine
            else F.lit(None).cast("string")
        )
        if time_column is None:
            # A row's weight: -1 for the retraction of an updating input's row (S18).
            weight = (F.when(F.col(RETRACTION_COLUMN), -1).otherwise(1)
                      if RETRACTION_COLUMN in side.columns else F.lit(1))
            wire.append(side.select(
                *wire_row(keyed_slot(k), name, k, F.lit(None), row, vals),
                weight.cast("long").alias("w"),
            ))
            continue
        time = F.expr(
            "unix_millis(current_timestamp())" if time_column == BATCH_TIME_COLUMN
            else f"unix_millis(`{spec_side.qualified(time_column)}`)"
        )
        wire.append(side.select(*wire_row(keyed_slot(k), name, k, time, row, vals)))
        if probe is not None:
            wire.append(probe_wire(probe, name))
    joined = run_slots(wire, partial(step_slot, spec), _OUT_UNDO if join.per_key else _OUT)
    types = [
        StructType([side.schema[c] for c in _columns(s)])
        for side, s in zip(sides, (join.left, join.right), strict=True)
    ]
    undo = [F.col("undo").alias(RETRACTION_COLUMN)] if join.per_key else []
    parsed = joined.select(
        F.from_json("lrow", types[0]).alias("_l"),
        F.from_json("rrow", types[1]).alias("_r"),
        *undo,
    )
    rows = parsed.select(
        *[F.col("_l").getField(c).alias(c) for c in _columns(join.left)],
        *[F.col("_r").getField(c).alias(c) for c in _columns(join.right)],
        *[F.col(RETRACTION_COLUMN) for _ in undo],
    )
    if join.residual is None or join.as_of is None:
        return rows
    # The version found must pass the residual: INNER drops the row, LEFT pads it.
    ok = F.coalesce(F.expr(to_spark_sql(join.residual)), F.lit(False))
    if join.kind == "inner":
        return rows.filter(ok)
    return rows.select(
        *[F.col(f"`{c}`") for c in _columns(join.left)],
        *[F.when(ok, F.col(f"`{c}`")).alias(c) for c in _columns(join.right)],
    )


def _side_conditions(join: Join) -> tuple[Column, Column]:
    """Of an OUTER interval join, each side's part of the residual: the conjuncts that read
    only its columns (a constant one goes with the left), which a pair must pass, so a row
    that fails them matches nothing; TRUE for a temporal join, whose residual is applied to
    its joined rows. A conjunct that reads both sides is the operator's
    (:func:`_pair_condition`)."""
    parts: tuple[list[Column], list[Column]] = ([F.lit(True)], [F.lit(True)])
    if join.residual is None or join.as_of is not None:
        return F.lit(True), F.lit(True)
    right = set(_columns(join.right))
    for conjunct in conjuncts(join.residual):
        reads = set(column_names(conjunct))
        if reads & right and reads - right:
            continue
        condition = F.coalesce(F.expr(to_spark_sql(conjunct)), F.lit(False))
        parts[1 if reads and reads <= right else 0].append(condition)
    return reduce(operator.and_, parts[0]), reduce(operator.and_, parts[1])


def _pair_condition(join: Join) -> Expr | None:
    """Of an OUTER interval or window join, the conjuncts of the residual that read both
    sides, as one condition (their AND), checked on each pair by the operator; None when
    there are none."""
    if join.residual is None or join.as_of is not None:
        return None
    right = set(_columns(join.right))
    both = [
        c
        for c in conjuncts(join.residual)
        if set(column_names(c)) & right and set(column_names(c)) - right
    ]
    if not both:
        return None
    return reduce(lambda a, b: Call("AND", (a, b), SqlType("BOOLEAN")), both)


def _columns(side: JoinSide) -> list[str]:
    return [side.qualified(name) for name in side.columns]


def _side(side: JoinSide, df: DataFrame) -> DataFrame:
    """The side's rows by qualified name (no watermark metadata: Spark drops nothing by
    them), with their arrival coordinates (an aggregate's final rows have none: their
    order is not arrival order, and no later row replaces one) and ``_deleted`` if given."""
    arrival = ("_partition", "_offset")
    return df.select(
        *[F.col(f"`{name}`").alias(side.qualified(name), metadata={}) for name in side.columns],
        *[F.col(c) if c in df.columns else F.lit(0).alias(c) for c in arrival],
        *[F.col(c) for c in ("_deleted", RETRACTION_COLUMN) if c in df.columns],
    )


def _keys(join: Join, sides: list[DataFrame]) -> tuple[list[Column], list[Column]]:
    """Each side's key values, of one type per key pair (S16 compares values: INT 1 matches
    BIGINT 1, and 1.0)."""
    left: list[Column] = []
    right: list[Column] = []
    for a, b in join.keys:
        x, y = F.expr(to_spark_sql(a)), F.expr(to_spark_sql(b))
        tx = sides[0].select(x.alias("v")).schema["v"].dataType
        ty = sides[1].select(y.alias("v")).schema["v"].dataType
        if tx != ty:
            integral = (ByteType, ShortType, IntegerType, LongType)
            if isinstance(tx, integral) and isinstance(ty, integral):
                x, y = x.cast("bigint"), y.cast("bigint")
            elif isinstance(tx, NumericType) and isinstance(ty, NumericType):
                x, y = x.cast("double"), y.cast("double")
            else:
                x, y = x.cast("string"), y.cast("string")
        left.append(x)
        right.append(y)
    return left, right
