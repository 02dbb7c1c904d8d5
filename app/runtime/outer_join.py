"""OUTER interval joins on Spark (SPEC S16), by an operator of Tidemark's own (ADR 0017).

Spark's stream-stream outer join writes a row without a match when the query's one watermark
(the minimum of its tables', ADR 0013) passes the row's bound, which is later than S16 while
the row's own table is the slower one, and never at all while that table stays quiet. S16
writes it in the step the *other* side's waterline proves that no match can come. So both
sides' rows go to one ``transformWithStateInPandas`` (no time mode: Spark drops and times
out nothing), grouped by a slot, a hash of the join keys into :data:`SLOTS`. Each table's
probe rows (the step's maxima, punctuation included, ADR 0001) are copied to every slot, so
every slot is called in every step that reads either table, and computes both tables'
waterlines w(t) itself, by the step sink's rule (S3, :func:`app.circuit.waterline.
next_waterline`). A slot's call then, over the step's rows in arrival order:

- matches each row with the other side's rows it holds of the same key within the bound, and
  writes each pair at once (insert-only, as the INNER join);
- holds the row (a NULL key matches nothing, and is held like any other until it is done),
  unless its time is NULL (within no bound: written padded at once on an outer side);
- writes each held row the other side's floor now passes (a left row at ``x`` once
  ``w_right > x + upper``, a right row at ``y`` once ``w_left > y - lower``) padded with
  NULLs if it is on an outer side and never matched, and frees it.

Rows reach the operator already gated: a late row is a dead letter of its own table and never
arrives. A row's columns travel as JSON of the side's columns (Spark's ``to_json`` and
``from_json`` give back the same values); the state of a slot is one JSON document (both
waterlines and the held rows), checkpointed with the step's offsets, so a replayed step
starts from the state the first run started from and writes the same rows (S15).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
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
from app.circuit.ir import Join, JoinSide
from app.circuit.waterline import next_waterline

__all__ = ["SLOTS", "OuterJoinSpec", "outer_joined"]

#: How many groups the join's state is spread over (part of the checkpoint's state layout:
#: a slot's rows are found by this number).
SLOTS = 16

_OUT = StructType([StructField("lrow", StringType()), StructField("rrow", StringType())])
_STATE = StructType([StructField("doc", StringType())])


@dataclass(frozen=True)
class OuterJoinSpec:
    """What a slot's call needs: the bound ``x + lower <= y <= x + upper`` (ms), which sides
    are outer, and each side's table LATENESS (ms), by which its probes give w(t)."""

    kind: str  # left | right | full
    lower: int
    upper: int
    left_lateness: int
    right_lateness: int


class _Slot(StatefulProcessor):
    """One slot's rows of both sides, and both waterlines (module docstring)."""

    def __init__(self, spec: OuterJoinSpec) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("slot", _STATE)

    def handleInputRows(  # noqa: N802 - Spark's name
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True)
        stored = self.state.get() if self.state.exists() else None
        doc = json.loads(stored[0]) if stored is not None else None
        out, doc = step_slot(self.spec, doc, frame.to_dict("records"))
        self.state.update((json.dumps(doc, separators=(",", ":")),))
        if out:
            yield pd.DataFrame(out, columns=["lrow", "rrow"])

    def close(self) -> None:
        return None


def step_slot(
    spec: OuterJoinSpec, doc: dict[str, Any] | None, rows: list[dict[str, Any]]
) -> tuple[list[tuple[str | None, str | None]], dict[str, Any]]:
    """One step of one slot: its output pairs (a side's JSON, None for NULLs) and its new
    state, from its state before the step and the step's wire rows: ``side`` (L, R, or P for
    a probe), ``k`` (the keys as JSON, None if any is NULL), ``t`` (the bound column in ms;
    a probe's: its table's step maximum), ``tbl`` (a probe's table: L or R), ``pt`` and
    ``of`` (arrival: Kafka partition and offset) and ``row`` (the side's columns as JSON)."""
    doc = doc or {"w": {"L": None, "R": None}, "held": {"L": [], "R": []}}
    lateness = {"L": spec.left_lateness, "R": spec.right_lateness}
    for side in ("L", "R"):
        tops = [int(r["t"]) for r in rows if r["side"] == "P" and r["tbl"] == side and _set(r["t"])]
        if tops:
            doc["w"][side] = next_waterline(doc["w"][side], max(tops), lateness[side])
    held: dict[str, list[list[Any]]] = doc["held"]  # side -> [key, time, row, matched]
    out: list[tuple[str | None, str | None]] = []
    arrivals = sorted(
        (r for r in rows if r["side"] != "P"),
        key=lambda r: (r["side"], int(r["pt"]), int(r["of"])),
    )
    for r in arrivals:
        side, other = r["side"], "R" if r["side"] == "L" else "L"
        mine = [r["k"], int(r["t"]) if _set(r["t"]) else None, r["row"], False]
        if mine[1] is None:
            # A NULL time is within no bound: nothing can ever match it.
            if _outer(spec, side):
                out.append(_padded(side, mine[2]))
            continue
        for candidate in held[other]:
            if mine[0] is None or candidate[0] != mine[0]:
                continue
            x, y = (mine[1], candidate[1]) if side == "L" else (candidate[1], mine[1])
            if x + spec.lower <= y <= x + spec.upper:
                out.append((mine[2], candidate[2]) if side == "L" else (candidate[2], mine[2]))
                mine[3] = candidate[3] = True
        held[side].append(mine)
    for side in ("L", "R"):
        floor = doc["w"]["R" if side == "L" else "L"]
        if floor is None:
            continue
        kept = []
        for row in held[side]:
            edge = row[1] + spec.upper if side == "L" else row[1] - spec.lower
            if floor > edge:
                if _outer(spec, side) and not row[3]:
                    out.append(_padded(side, row[2]))
            else:
                kept.append(row)
        held[side] = kept
    return out, doc


def _set(value: Any) -> bool:
    return value is not None and not pd.isna(value)


def _outer(spec: OuterJoinSpec, side: str) -> bool:
    return spec.kind == "full" or (spec.kind == "left") == (side == "L")


def _padded(side: str, row: str) -> tuple[str | None, str | None]:
    return (row, None) if side == "L" else (None, row)


def outer_joined(
    join: Join,
    inputs: Mapping[str, DataFrame],
    probes: Mapping[str, DataFrame],
    spec: OuterJoinSpec,
) -> DataFrame:
    """The joined rows of ``join`` (each side's columns by qualified name), over each side's
    rows in ``inputs`` and each side's table probes in ``probes`` (by side source: one column
    ``t``, the step's maximum of the bound column in ms)."""
    bound = join.bound
    assert bound is not None and join.kind != "inner", join
    sides = [_side(s, inputs[s.source]) for s in (join.left, join.right)]
    keys = _keys(join, sides)
    wire = []
    for name, side, key in zip(("L", "R"), sides, keys, strict=True):
        spec_side = join.left if name == "L" else join.right
        time_column = bound.left_column if name == "L" else bound.right_column
        k = F.when(
            # A struct, not an array: an array would coerce its values to one type.
            reduce(operator.and_, [c.isNotNull() for c in key]),
            F.to_json(F.struct(*[c.alias(f"k{i}") for i, c in enumerate(key)])),
        ).otherwise(F.lit(None).cast("string"))
        wire.append(
            side.select(
                F.pmod(F.xxhash64(k), F.lit(SLOTS)).cast("int").alias("slot"),
                F.lit(name).alias("side"),
                k.alias("k"),
                F.expr(f"unix_millis(`{spec_side.qualified(time_column)}`)").alias("t"),
                F.lit(None).cast("string").alias("tbl"),
                F.col("_partition").cast("long").alias("pt"),
                F.col("_offset").cast("long").alias("of"),
                F.to_json(F.struct(*[F.col(f"`{c}`") for c in _columns(spec_side)])).alias(
                    "row"
                ),
            )
        )
        wire.append(
            probes[spec_side.source].select(
                F.explode(F.sequence(F.lit(0), F.lit(SLOTS - 1))).alias("slot"),
                F.lit("P").alias("side"),
                F.lit(None).cast("string").alias("k"),
                F.col("t").cast("long").alias("t"),
                F.lit(name).alias("tbl"),
                F.lit(0).cast("long").alias("pt"),
                F.lit(0).cast("long").alias("of"),
                F.lit(None).cast("string").alias("row"),
            )
        )
    joined = reduce(DataFrame.unionByName, wire).groupBy("slot").transformWithStateInPandas(
        _Slot(spec), _OUT, "Append", "None"
    )
    types = [
        StructType([side.schema[c] for c in _columns(s)])
        for side, s in zip(sides, (join.left, join.right), strict=True)
    ]
    parsed = joined.select(
        F.from_json("lrow", types[0]).alias("_l"), F.from_json("rrow", types[1]).alias("_r")
    )
    return parsed.select(
        *[F.col("_l").getField(c).alias(c) for c in _columns(join.left)],
        *[F.col("_r").getField(c).alias(c) for c in _columns(join.right)],
    )


def _columns(side: JoinSide) -> list[str]:
    return [side.qualified(name) for name in side.columns]


def _side(side: JoinSide, df: DataFrame) -> DataFrame:
    """The side's rows by qualified name (no watermark metadata: Spark drops nothing by
    them), with their arrival coordinates."""
    return df.select(
        *[F.col(f"`{name}`").alias(side.qualified(name), metadata={}) for name in side.columns],
        F.col("_partition"),
        F.col("_offset"),
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
