"""A view's rows as Spark DataFrame operations over its input's rows (SPEC S8, S9).

Used twice with one meaning: inside each table's streaming query (app/runtime/plan.py) and
over a step's accepted rows for the views the step sink computes (app/runtime/step_views.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from app.circuit.functions import to_spark_sql
from app.circuit.ir import Aggregate, Filter, Operator, Project, View, Window
from app.runtime.view_gate import ORIGIN_COLUMNS

__all__ = ["batch_time", "ms_sql", "view_frame"]

_CARRIED = (*ORIGIN_COLUMNS, "_ptime")


def ms_sql(column: str) -> str:
    """Spark SQL of a TIMESTAMP column as epoch milliseconds, the circuit's unit."""
    return f"unix_millis(`{column}`)"


def _window(df: DataFrame, op: Window) -> DataFrame:
    """SPEC S9 on the time column: TUMBLE start = floor((c - offset)/size)*size + offset."""
    # The input's own type: a view may decode a table column of the same name (L2).
    is_ts = dict(df.dtypes).get(op.time_column, "timestamp") == "timestamp"
    c = ms_sql(op.time_column) if is_ts else f"`{op.time_column}`"
    first = f"(floor(({c} - {op.offset}) / {op.slide}) * {op.slide} + {op.offset})"
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
    if is_ts:
        df = df.withColumn("window_start", F.expr("timestamp_millis(window_start)"))
        df = df.withColumn("window_end", F.expr("timestamp_millis(window_end)"))
    return df


def view_frame(view: View, inputs: Mapping[str, DataFrame]) -> DataFrame:
    """The view's rows as a DataFrame over its input's rows (``inputs``: relation -> rows).

    A UNION ALL (S17) is the rows of every branch, each branch's pipeline over its own
    input; its Projects name the same columns, so the branches union by name."""
    union = view.union
    if union is not None:
        frames = [_pipeline(inputs[b.source], b.operators) for b in union.branches]
        return reduce(DataFrame.unionByName, frames)
    return _pipeline(inputs[view.source], view.operators)


def _pipeline(df: DataFrame, operators: Iterable[Operator]) -> DataFrame:
    for op in operators:
        if isinstance(op, Filter):
            df = df.filter(F.expr(to_spark_sql(op.predicate)))
        elif isinstance(op, Project):
            names = {n for n, _ in op.outputs}
            # Arrival coordinates (ARG ties), the original record (view gate) and the step's
            # batch time (views the step sink computes) ride along.
            carried = [c for c in _CARRIED if c in df.columns and c not in names]
            df = df.select(*[F.expr(to_spark_sql(e)).alias(n) for n, e in op.outputs], *carried)
        elif isinstance(op, Window):
            df = _window(df, op)
        elif isinstance(op, Aggregate):
            return df  # the rows entering the aggregate: see aggregate_branch
    return df


def batch_time(formats: Iterable[str]) -> Column:
    """``_ptime``, the step's recorded batch time, for encodings that write it (``changelog``,
    SPEC S13), else a constant 0 that nothing reads.

    Spark writes ``current_timestamp()`` into the generated code of each step as a literal, so
    a plan holding it compiles new classes every step, which the JVM runs interpreted until it
    compiles them again: the JIT compiler took 0.4-0.8 of the two cores in steady state
    (per-thread CPU, workload (a)), and a plan without it compiles nothing after
    its first step (Spark's CodegenMetrics)."""
    if "changelog" in formats:
        return F.current_timestamp().alias("_ptime")
    return F.lit(0).cast("timestamp").alias("_ptime")
