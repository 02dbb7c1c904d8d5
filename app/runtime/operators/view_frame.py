"""A view's rows as Spark DataFrame operations over its input's rows (SPEC S8, S9).

Used twice with one meaning: inside each table's streaming query (app/runtime/operators/query.py)
and over a step's accepted rows for the views the step sink computes
(app/runtime/step/step_views.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from app.circuit.functions import to_spark_sql
from app.circuit.ir import (
    RETRACTION_COLUMN,
    Aggregate,
    Filter,
    Join,
    Operator,
    Over,
    Project,
    Table,
    View,
    Window,
)
from app.circuit.processing_time import BATCH_TIME_COLUMN
from app.program.avro_schema import CHANGELOG_FIELDS
from app.runtime.operators.view_gate import ORIGIN_COLUMNS

__all__ = [
    "batch_time",
    "hidden_watermark",
    "ms_sql",
    "table_columns",
    "view_frame",
    "with_batch_time",
]

_CARRIED = (*ORIGIN_COLUMNS, BATCH_TIME_COLUMN, RETRACTION_COLUMN)
#: Spark's column metadata key of a column with a watermark (``withWatermark``).
_WATERMARK_KEY = "spark.watermarkDelayMs"
_HIDDEN = "_watermarked_"
#: The fields a changelog adds to its rows (SPEC S13).
_CHANGELOG = {c.name for c in CHANGELOG_FIELDS}


def hidden_watermark(column: str) -> str:
    """The name a watermarked column rides along under through a view that does not select
    it (a derived time attribute computed from it, S10): the state operator's event-time
    timeout needs the watermarked column in its input (app/runtime/operators/aggregate.py)."""
    return column if column.startswith(_HIDDEN) else f"{_HIDDEN}{column}"


def ms_sql(column: str) -> str:
    """Spark SQL of a TIMESTAMP column as epoch milliseconds, the circuit's unit."""
    return f"unix_millis(`{column}`)"


def _window(df: DataFrame, op: Window) -> DataFrame:
    """SPEC S9 on the time column: TUMBLE start = floor((c - offset)/size)*size + offset;
    the windows of :func:`app.circuit.windows.window_bounds`, in its order."""
    # The input's own type: a view may decode a table column of the same name (L2).
    is_ts = dict(df.dtypes).get(op.time_column, "timestamp") == "timestamp"
    for name in ("window_start", "window_end"):
        if name in df.columns and _WATERMARK_KEY in df.schema[name].metadata:
            # A window over rows that have a watermarked window column (a cascade on Flink's
            # window_time read through a stage boundary) replaces it; the state operator's
            # event-time timeout still needs it, so it rides along hidden.
            df = df.withColumn(hidden_watermark(name), F.col(name))
    c = ms_sql(op.time_column) if is_ts else f"`{op.time_column}`"
    first = _last_start(c, op.offset, op.slide)
    if op.kind == "CUMULATE":
        # cumulate_bounds: the start of the TUMBLE of the max size, every end s + k*step
        # (k = 1 .. size/step) after c.
        df = df.withColumn("window_start", F.expr(_last_start(c, op.offset, op.size)))
        df = df.withColumn(
            "window_end",
            F.explode(
                F.expr(
                    f"filter(transform(sequence(1, {op.size // op.slide}), "
                    f"k -> window_start + k * {op.slide}), e -> e > {c})"
                )
            ),
        )
        return _window_types(df, op, is_ts)
    if op.kind == "TUMBLE":
        starts = F.expr(first)
    else:
        # Every s = k*slide + offset with s <= c < s + size: walk back from the last start.
        count = -(-op.size // op.slide)
        starts = F.explode(
            F.expr(
                f"filter(transform(sequence(0, {count - 1}), i -> {first} - i * {op.slide}), "
                f"s -> s + {op.size} > {c})"
            )
        )
    df = df.withColumn("window_start", starts)
    df = df.withColumn("window_end", F.col("window_start") + F.lit(op.size))
    return _window_types(df, op, is_ts)


def _last_start(c: str, offset: int, every: int) -> str:
    """Spark SQL of the last start ``k * every + offset`` at or before ``c`` (S9's floor)."""
    return f"(floor(({c} - {offset}) / {every}) * {every} + {offset})"


def _window_types(df: DataFrame, op: Window, is_ts: bool) -> DataFrame:
    """``window_start``/``window_end`` (epoch ms) as the time column's type."""
    if is_ts:
        # window_end is an event-time column with the time column's watermark (S10:
        # w(window_end) = w(c)), which frees a window join's state; window_start is not
        # (a row of a window that started before the watermark is not late).
        metadata = dict(df.schema[op.time_column].metadata)
        df = df.withColumn("window_start", F.expr("timestamp_millis(window_start)"))
        df = df.withColumn("window_end", F.expr("timestamp_millis(window_end)"))
        df = df.withMetadata("window_end", metadata)
    return df


#: The rows an Over writes from the rows entering it (app/runtime/operators/over_operator.py).
OverRows = Callable[[DataFrame], DataFrame]


def view_frame(
    view: View,
    inputs: Mapping[str, DataFrame],
    joined: DataFrame | None = None,
    over: OverRows | None = None,
) -> DataFrame:
    """The view's rows as a DataFrame over its input's rows (``inputs``: relation -> rows).
    A view with OVER aggregates takes ``over``, what its operator writes.

    A UNION ALL (S17) is the rows of every branch, each branch's pipeline over its own
    input; its Projects name the same columns, so the branches union by name, on the columns
    every branch has (a table's branch also carries its rows' arrival, a join's does not),
    and :data:`RETRACTION_COLUMN` when a branch has it (S18: the changes of an updating
    branch; an insert-only branch's rows are insertions). A JOIN view's rows are Spark's join
    of its inputs, or ``joined`` when given (an OUTER or temporal join's, by
    :mod:`app.runtime.operators.join_operator`)."""
    union = view.union
    if union is not None:
        frames = [_pipeline(inputs[b.source], b.operators) for b in union.branches]
        return reduce(DataFrame.unionByName, _united_columns(frames))
    first = view.operators[0] if view.operators else None
    if isinstance(first, Join):
        rows = _joined(first, inputs) if joined is None else joined
        return _pipeline(rows, view.operators[1:])
    return _pipeline(inputs[view.source], view.operators, over, hide_watermarks=True)


def _united_columns(frames: Sequence[DataFrame]) -> list[DataFrame]:
    """The branches of a UNION ALL on the columns they share, each with
    :data:`RETRACTION_COLUMN` if one has it: false on an insert-only branch's rows."""
    shared = [c for c in frames[0].columns if all(c in f.columns for f in frames[1:])]
    if not any(RETRACTION_COLUMN in f.columns for f in frames) or RETRACTION_COLUMN in shared:
        return [f.select(*shared) for f in frames]
    return [
        f.select(*shared, F.col(RETRACTION_COLUMN) if RETRACTION_COLUMN in f.columns
                 else F.lit(False).alias(RETRACTION_COLUMN))
        for f in frames
    ]


#: How far a join's time columns are shifted while Spark's join operator sees them.
_SHIFT = "INTERVAL 1 MILLISECOND"


def _joined(join: Join, inputs: Mapping[str, DataFrame]) -> DataFrame:
    """SPEC S16, an INNER interval or window join, by Spark's stream-stream join: each side's
    columns by qualified name (``<alias>.<column>``), matched on the keys and the time bound
    (a window join's: equal ``window_end``), then the residual. Spark drops an input row
    whose event time (its first column with watermark metadata) is ``<=`` its watermark, but
    S5 keeps a row *equal* to its table's waterline, which the query's watermark (the
    minimum of the tables', ADR 0013) can equal: so only the bound columns keep their
    watermark metadata (which state eviction needs), shifted 1 ms later while the operator
    sees them, which changes no match of the bound (both sides move), and shifted back after.

    A join without a time bound (``form == 'regular'``) matches on the keys alone and keeps
    every row: its columns lose their watermark metadata, so Spark drops no input row as
    late (S5 has let it through) and frees no state, as S16 keeps every row. One of an
    updating relation's changes runs on Tidemark's join operator instead (``Join.per_key``:
    a retracted row must leave its side, which Spark's join cannot do)."""
    bound = join.bound
    assert join.kind == "inner" and not join.per_key, "by_join_operator"
    assert join.form != "window" or bound is not None, join
    times = (None, None) if bound is None else (bound.left_column, bound.right_column)
    sides = []
    for side, time_column in zip((join.left, join.right), times, strict=True):
        df = inputs[side.source]
        columns = []
        for name in side.columns:
            if name == time_column:
                value, event = F.col(f"`{name}`"), name
                if "_tw" in df.columns:
                    # A native aggregate's final rows (Q7 as a join), bounded on its window's
                    # end: Spark's event time of such a row is its window, ``window_time`` of
                    # which is the end less 1 microsecond.
                    value = F.window_time("_tw") + F.expr("INTERVAL 1 MICROSECOND")
                    event = "_tw"
                metadata = dict(df.schema[event].metadata)
                shifted = value + F.expr(_SHIFT)
                columns.append(shifted.alias(side.qualified(name), metadata=metadata))
            else:
                # No watermark metadata: Spark neither drops rows by them nor frees state.
                columns.append(F.col(f"`{name}`").alias(side.qualified(name), metadata={}))
        sides.append(df.select(*columns))
    conditions = [f"({to_spark_sql(a)}) = ({to_spark_sql(b)})" for a, b in join.keys]
    if bound is not None:
        left_time = f"`{join.left.qualified(bound.left_column)}`"
        right_time = f"`{join.right.qualified(bound.right_column)}`"
        conditions.append(f"{right_time} >= {left_time} + {_interval(bound.lower)}")
        conditions.append(f"{right_time} <= {left_time} + {_interval(bound.upper)}")
    joined = sides[0].join(sides[1], F.expr(" AND ".join(conditions)), "inner")
    if bound is not None:
        for time in (left_time, right_time):
            joined = joined.withColumn(time.strip("`"), F.expr(f"{time} - {_SHIFT}"))
    if join.residual is not None:
        joined = joined.filter(F.expr(to_spark_sql(join.residual)))
    return joined


def _interval(ms: int) -> str:
    """A day-time interval literal of ``ms`` milliseconds (Spark finds the join's time range
    in literals like this one, to free its state)."""
    sign = "-" if ms < 0 else ""
    return f"INTERVAL '{sign}{abs(ms) // 1000}.{abs(ms) % 1000:03d}' SECOND"


def _pipeline(
    df: DataFrame,
    operators: Iterable[Operator],
    over: OverRows | None = None,
    hide_watermarks: bool = False,
) -> DataFrame:
    """The operators over ``df`` (an Over by ``over``); with ``hide_watermarks`` (a view of
    one input), a watermarked column a Project does not select rides along
    (:func:`hidden_watermark`)."""
    for op in operators:
        if isinstance(op, Filter):
            df = df.filter(F.expr(to_spark_sql(op.predicate)))
        elif isinstance(op, Project):
            names = {n for n, _ in op.outputs}
            # Arrival coordinates (ARG ties), the original record (view gate) and the step's
            # batch time (views the step sink computes) ride along.
            carried = [F.col(c) for c in _CARRIED if c in df.columns and c not in names]
            carried += [
                F.col(f"`{c}`").alias(hidden_watermark(c))
                for c in df.columns
                if hide_watermarks
                and c not in names
                and (c.startswith(_HIDDEN) or _WATERMARK_KEY in df.schema[c].metadata)
                and c not in ("window_start", "window_end")
            ]
            df = df.select(*[F.expr(to_spark_sql(e)).alias(n) for n, e in op.outputs], *carried)
        elif isinstance(op, Window):
            df = _window(df, op)
        elif isinstance(op, Aggregate):
            return df  # the rows entering the aggregate: see aggregate_branch
        elif isinstance(op, Over):
            if over is None:
                raise TypeError("an Over runs on the OVER operator: pass its rows")
            df = over(df)
    return df


def table_columns(table: Table) -> list[Column]:
    """A table's columns as its rows carry them in the streaming query: each ``AS PROCTIME()``
    column is the step's recorded batch time (Spark's ``current_timestamp()`` inside the
    query), the others are read from the source. A table of an updating view's changes
    carries each row's ``undo`` as :data:`RETRACTION_COLUMN` (S18), not as a column."""
    if table.retractions:
        return [
            *(F.col(c.name) for c in table.columns if c.name not in _CHANGELOG),
            F.col("undo").alias(RETRACTION_COLUMN),
        ]
    return [
        F.current_timestamp().alias(c.name) if c.processing_time else F.col(c.name)
        for c in table.columns
    ]


def with_batch_time(df: DataFrame) -> DataFrame:
    """``df`` with ``_ptime``, the step's batch time that NOW() reads (app/circuit/
    processing_time.py), unless it carries it already; only inside the streaming query, where
    ``current_timestamp()`` is the batch time."""
    if BATCH_TIME_COLUMN in df.columns:
        return df
    return df.withColumn(BATCH_TIME_COLUMN, F.current_timestamp())


def batch_time(formats: Iterable[str], processing_time: bool = False) -> Column:
    """``_ptime``, the step's recorded batch time, for encodings that write it (``changelog``,
    SPEC S13) and for views that read it (NOW(), ``processing_time``), else a constant 0 that
    nothing reads.

    Spark writes ``current_timestamp()`` into the generated code of each step as a literal, so
    a plan holding it compiles new classes every step, which the JVM runs interpreted until it
    compiles them again: the JIT compiler took 0.4-0.8 of the two cores in steady state
    (per-thread CPU, workload (a)), and a plan without it compiles nothing after
    its first step (Spark's CodegenMetrics)."""
    if "changelog" in formats or processing_time:
        return F.current_timestamp().alias("_ptime")
    return F.lit(0).cast("timestamp").alias("_ptime")
