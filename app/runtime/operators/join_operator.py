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

- OUTER interval join (:func:`_interval_step`; a window join is one on ``window_end``
  with a bound of 0, whose floor is one more than the waterline, S10): matches each row with
  the other side's rows (each pair also passing the conditions that read both sides, which
  the reference evaluator's own functions evaluate here over the pair's values, so both
  agree by construction)
  it holds of the same key within the bound, and writes each pair at once (insert-only, as
  the INNER join); holds the row (a NULL key matches nothing, and is held like any other
  until it is done), unless its time is NULL (within no bound: written padded at once on an
  outer side); writes each held row the other side's floor now passes (a left row at ``x``
  once ``w_right > x + upper``, a right row at ``y`` once ``w_left > y - lower``) padded
  with NULLs if it is on an outer side and never matched, and frees it.
- Temporal join (:func:`_temporal_step`): stores each versioned row as the version of its
  key at its time (a later row of the key at the same time replaces it; a deletion, the
  tombstone of a table keyed by its Kafka key, is a version without a row); holds each probe
  row (a NULL time is valid for no version: LEFT writes it padded at once); writes every
  held probe row below the versions' waterline with the version of its key with the
  greatest time at or below its own (LEFT: padded without one; INNER: dropped), and frees
  it; then frees per key every version older than the latest one at or below the lesser of
  both waterlines (no lookup can find it again), and a key whose one version left is a
  deletion. The residual is checked after the operator, over the joined columns
  (:func:`operator_joined`).

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
from dataclasses import dataclass, replace
from functools import partial, reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
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
    Call,
    Circuit,
    Expr,
    Join,
    JoinSide,
    SqlType,
    column_names,
    column_refs,
    conjuncts,
)
from app.circuit.scalar import evaluate_expr, is_true
from app.connectors.late_gate import ACCEPTED
from app.runtime.operators.join_support import join_time_source
from app.runtime.operators.slot_operator import (
    SLOTS,
    advance_waterlines,
    decode_values,
    is_set,
    keyed_slot,
    probe_wire,
    run_slots,
    value_sql,
    wire_row,
)
from app.runtime.operators.view_frame import ms_sql, table_columns

__all__ = ["SLOTS", "JoinOperatorSpec", "join_operator_rows", "operator_joined", "step_slot"]

_OUT = StructType([StructField("lrow", StringType()), StructField("rrow", StringType())])

#: A slot's output: each side's columns as JSON, None for NULLs.
Pair = tuple[str | None, str | None]


@dataclass(frozen=True)
class JoinOperatorSpec:
    """What a slot's call needs: the join's kind and form, an interval join's bound
    ``x + lower <= y <= x + upper`` (ms; 0 for a temporal join), and each side's table
    LATENESS (ms), by which its probes give w(t)."""

    kind: str  # inner | left | right | full
    form: str  # interval | window | temporal
    lower: int
    upper: int
    left_lateness: int
    right_lateness: int
    #: The probe side is a native aggregate's final rows, which Spark writes a step after
    #: the step whose waterline completes their window (its watermark lags one batch).
    probe_lags: bool = False
    #: Of an OUTER interval or window join, the conditions that read both sides (None:
    #: none), checked on each pair, and the SQL type of each column they read, by which a
    #: row's values are decoded (:func:`app.runtime.operators.slot_operator.decode_values`).
    pair: Expr | None = None
    pair_types: tuple[tuple[str, str], ...] = ()


def step_slot(
    spec: JoinOperatorSpec, doc: dict[str, Any] | None, rows: list[dict[str, Any]]
) -> tuple[list[Pair], dict[str, Any]]:
    """One step of one slot: its output pairs and its new state, from its state before the
    step and the step's wire rows: ``side`` (L, R, or P for a probe), ``k`` (the keys as
    JSON, None if any is NULL), ``t`` (the bound or AS OF column in ms; a probe's: its
    table's step maximum), ``tbl`` (a probe's table: L or R), ``pt`` and ``of`` (arrival:
    Kafka partition and offset), ``row`` (the side's columns as JSON) and ``vals`` (the
    columns the pair conditions read, :func:`~app.runtime.operators.slot_operator.decode_values`;
    None without any)."""
    doc = doc or {"w": {"L": None, "R": None}, "held": {"L": [], "R": []}, "versions": {}}
    started = doc["w"]["L"]
    advance_waterlines(doc["w"], rows, {"L": spec.left_lateness, "R": spec.right_lateness})
    arrivals = [
        (r["side"], r["k"], int(r["t"]) if is_set(r["t"]) else None, r["row"], r.get("vals"))
        for r in sorted(
            (r for r in rows if r["side"] != "P"),
            key=lambda r: (r["side"], int(r["pt"]), int(r["of"])),
        )
    ]
    if spec.form != "temporal":
        return _interval_step(spec, doc, arrivals), doc
    # The least time a future probe row can have: at or above w(L), or, of a lagging
    # aggregate, above the w(L) this step started with.
    probe_floor = started if spec.probe_lags else doc["w"]["L"]
    return _temporal_step(spec, doc, arrivals, probe_floor), doc


#: One arrival of a step: side, key, time, row and the pair conditions' values.
Arrival = tuple[str, Any, Any, str, Any]


def _interval_step(
    spec: JoinOperatorSpec, doc: dict[str, Any], arrivals: list[Arrival]
) -> list[Pair]:
    """An OUTER interval join's step (module docstring); updates ``doc``."""
    # side -> [key, time, row, matched] (and, with pair conditions, the row's values)
    held: dict[str, list[list[Any]]] = doc["held"]
    # Each side's held rows by key (the same lists: marking one matched marks it in both).
    by_key: dict[str, dict[str, list[list[Any]]]] = {"L": {}, "R": {}}
    for side in ("L", "R"):
        for mine in held[side]:
            if mine[0] is not None:
                by_key[side].setdefault(mine[0], []).append(mine)
    out: list[Pair] = []
    for side, key, time, row, vals in arrivals:
        other = "R" if side == "L" else "L"
        mine = [key, time, row, False]
        if spec.pair is not None:
            mine.append(vals)
        if time is None:
            # A NULL time is within no bound: nothing can ever match it.
            if _outer(spec, side):
                out.append(_padded(side, row))
            continue
        for candidate in by_key[other].get(key, []) if key is not None else []:
            x, y = (time, candidate[1]) if side == "L" else (candidate[1], time)
            if x + spec.lower <= y <= x + spec.upper and _pair_passes(spec, mine, candidate):
                out.append((row, candidate[2]) if side == "L" else (candidate[2], row))
                mine[3] = candidate[3] = True
        held[side].append(mine)
        if key is not None:
            by_key[side].setdefault(key, []).append(mine)
    for side in ("L", "R"):
        floor = doc["w"]["R" if side == "L" else "L"]
        if floor is None:
            continue
        if spec.form == "window":
            floor += 1  # a future row's window_end is above the waterline (S10)
        kept = []
        for mine in held[side]:
            edge = mine[1] + spec.upper if side == "L" else mine[1] - spec.lower
            if floor > edge:
                if _outer(spec, side) and not mine[3]:
                    out.append(_padded(side, mine[2]))
            else:
                kept.append(mine)
        held[side] = kept
    return out


def _temporal_step(
    spec: JoinOperatorSpec,
    doc: dict[str, Any],
    arrivals: list[Arrival],
    probe_floor: int | None,
) -> list[Pair]:
    """A temporal join's step (module docstring; the reference evaluator's
    ``_TemporalRuntime``); updates ``doc``. ``held["L"]``: [key, time, row] in arrival
    order; ``versions``: key -> [[time, row], ...], a deletion's row None."""
    held: list[list[Any]] = doc["held"]["L"]
    versions: dict[str, list[list[Any]]] = doc["versions"]
    out: list[Pair] = []
    for side, key, time, row, _ in arrivals:
        if side == "R":
            if key is not None and time is not None:
                # A version with a NULL key or time can never be found.
                kept = [v for v in versions.get(key, []) if v[0] != time]
                versions[key] = [*kept, [time, row]]
        elif time is None:
            # A NULL time is valid for no version.
            if spec.kind == "left":
                out.append((row, None))
        else:
            held.append([key, time, row])
    floor = doc["w"]["R"]
    if floor is not None:
        kept = []
        for key, time, row in held:
            if time >= floor:
                kept.append([key, time, row])
                continue
            found = [v for v in versions.get(key, []) if v[0] <= time] if key is not None else []
            version = max(found, key=lambda v: v[0])[1] if found else None
            if version is not None:
                out.append((row, version))
            elif spec.kind == "left":
                out.append((row, None))
        doc["held"]["L"] = kept
        if probe_floor is not None:
            least = min(floor, probe_floor)
            for key, times in list(versions.items()):
                below = [v[0] for v in times if v[0] <= least]
                if below:
                    latest = max(below)
                    left = [v for v in times if v[0] >= latest]
                    if len(left) == 1 and left[0][1] is None:
                        del versions[key]
                    else:
                        versions[key] = left
    return out


def _pair_passes(spec: JoinOperatorSpec, mine: list[Any], candidate: list[Any]) -> bool:
    """Whether two held entries pass the join's conditions of both sides (SQL truth)."""
    if spec.pair is None:
        return True
    types = dict(spec.pair_types)
    values = {**decode_values(mine[4], types), **decode_values(candidate[4], types)}
    return is_true(evaluate_expr(spec.pair, values))


def _outer(spec: JoinOperatorSpec, side: str) -> bool:
    return spec.kind == "full" or (spec.kind == "left") == (side == "L")


def _padded(side: str, row: str) -> Pair:
    return (row, None) if side == "L" else (None, row)


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
    probes: list[DataFrame] = []
    lateness: list[int] = []
    # A temporal join's probe side may be a native aggregate's final rows (ADR 0017).
    lags = any(v.name == join.left.source and not v.is_stateless for v in circuit.views)
    if join.as_of is not None:
        times = [
            join_time_source(circuit, join.left.source, join.as_of.probe_column, lags),
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
    inputs = [frames[join.left.source], frames[join.right.source]]
    versioned = circuit.root_table(join.right.source)
    if join.as_of is not None and versioned.deletes_keys:
        # The deletions of its keys (tombstones, delete events) end versions; no other view
        # reads them, nor the probe side of a table joined with itself.
        inputs[1] = (
            sources[versioned.name]
            .filter(F.col("_kind").isin(*ACCEPTED))
            .select(
                *table_columns(versioned),
                "_partition",
                "_offset",
                (F.col("_kind") == "delete").alias("_deleted"),
            )
        )
    bound = (0, 0) if join.bound is None else (join.bound.lower, join.bound.upper)
    spec = JoinOperatorSpec(
        join.kind, join.form, *bound, lateness[0], lateness[1], probe_lags=lags
    )
    return operator_joined(join, (inputs[0], inputs[1]), (probes[0], probes[1]), spec)


def operator_joined(
    join: Join,
    inputs: tuple[DataFrame, DataFrame],
    probes: tuple[DataFrame, DataFrame],
    spec: JoinOperatorSpec,
) -> DataFrame:
    """The joined rows of ``join`` (each side's columns by qualified name), over each side's
    rows in ``inputs`` and each side's table probes in ``probes`` (left, then right; one
    column ``t``, the step's maximum of the side's time column in ms); a temporal join's
    residual applied (a LEFT row whose version fails it is padded, S16). A versioned table's rows
    may carry ``_deleted``: true for the deletion of their key (its row is not sent)."""
    if join.as_of is not None:
        times = (join.as_of.probe_column, join.as_of.version_column)
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
        ("L", "R"), sides, keys, times, usable, probes, strict=True
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
        time = F.expr(f"unix_millis(`{spec_side.qualified(time_column)}`)")
        wire.append(side.select(*wire_row(keyed_slot(k), name, k, time, row, vals)))
        wire.append(probe_wire(probe, name))
    joined = run_slots(wire, partial(step_slot, spec), _OUT)
    types = [
        StructType([side.schema[c] for c in _columns(s)])
        for side, s in zip(sides, (join.left, join.right), strict=True)
    ]
    parsed = joined.select(
        F.from_json("lrow", types[0]).alias("_l"), F.from_json("rrow", types[1]).alias("_r")
    )
    rows = parsed.select(
        *[F.col("_l").getField(c).alias(c) for c in _columns(join.left)],
        *[F.col("_r").getField(c).alias(c) for c in _columns(join.right)],
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
        *[F.col(c) for c in ("_deleted",) if c in df.columns],
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
