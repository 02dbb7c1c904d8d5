"""Window Top-N views on Spark (ADR 0020): two shapes, by what the ranked rows are.

- **Over an EMIT AFTER WATERMARK aggregate's final rows** (a native view's,
  :func:`app.runtime.operators.native_aggregate.native_rows`): Spark's append-mode aggregation
  evicts every group of a window in the one step whose watermark passes its end, so a window's rows
  all arrive in one step (S18), complete. The ranking is a per-step operation: the step's
  rows are repartitioned by the PARTITION BY values and each task ranks its partitions with
  the reference evaluator's rule (:func:`app.circuit.ranking.rank_keyed`). No state.
- **Over a window function's rows** (a table's, windowed on its watermarked first LATENESS
  column): the rows must be held until the window completes. Spark's append-mode
  aggregation holds, per window and PARTITION BY values, ``max_by``/``min_by(row, order,
  N)``: the best N rows, a bounded buffer, evicted (written) once the watermark passes the
  window's end, exactly as a native aggregate's group (ADR 0004). Its order is a struct of
  the ORDER BY keys then the row's columns, so rows tied on the keys are ordered by their
  columns in the keys' direction, the reference's rule; NULL is the smallest field value in
  Spark's struct order, as in the rule. Only ROW_NUMBER, with every ORDER BY key in one
  direction, has this form (:func:`~app.runtime.operators.top_n_support.bounded_best`). RANK
  (whose ties are unbounded in number) and keys in both directions hold every row of the
  window instead (``collect_list``, freed with the window), ranked as the first shape ranks
  once the window is complete.
- **Over an aggregate's final rows read through a stage boundary** (a table with
  ``stage_input``, ADR 0023, whose first LATENESS column is the rows' ``window_end``, ranked
  as they are: :func:`~app.runtime.operators.top_n_support.ranks_stage_rows`; a table's rows
  passed through to a later query are windowed and held as a table's own): the
  rows of one window may arrive over several steps (the upstream step's records are read
  across steps), so they are held as well: the same append-mode aggregation, keyed by
  ``window_end`` (Spark's event time, which follows the punctuations) and the other
  PARTITION BY values, collects a partition's rows and evicts them together once the
  watermark passes ``window_end``. Evicted, they are what the first shape ranks: a window's
  complete rows in one step, ranked by the same rule (ROW_NUMBER and RANK, keys in any
  directions).

All end in the view's own Filter and Project (:func:`app.runtime.operators.view_frame._pipeline`)
and are encoded as a stateless view's rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from app.circuit.functions import to_spark_sql
from app.circuit.ir import (
    Circuit,
    Column,
    ColumnRef,
    Filter,
    Operator,
    SqlType,
    Table,
    TopN,
    View,
    Window,
)
from app.circuit.ranking import rank_keyed
from app.runtime.operators.native_aggregate import _windowed
from app.runtime.operators.top_n_support import (
    bounded_best,
    ranks_stage_rows,
    spark_shape,
    split_top_n,
)
from app.runtime.operators.view_frame import _pipeline

__all__ = ["top_n_rows"]


def top_n_rows(circuit: Circuit, view: View, rows: DataFrame) -> DataFrame:
    """The Top-N view's rows (its columns), each written once when its window is complete,
    from its input's rows: the table's accepted rows, or a native view's final rows."""
    pre, top_n, post = split_top_n(view)
    if spark_shape(circuit, view) != "held":
        source = circuit.view(view.source)
        ranked = _per_step(top_n, _pipeline(rows.drop("_tw"), pre), source.columns)
    elif ranks_stage_rows(circuit, view):
        ranked = _held_rows(circuit.table(view.source), top_n, rows, pre)
    else:
        ranked = _held(circuit, view, top_n, rows, pre)
    return _pipeline(ranked, post)


def _held_rows(table: Table, top_n: TopN, rows: DataFrame, pre: list[Operator]) -> DataFrame:
    """Per window end and PARTITION BY values, a stage boundary's rows in Spark's state until
    the watermark (the punctuated waterline of ``window_end``) passes the window's end; then,
    all in one step, ranked as the per-step shape ranks (ADR 0020)."""
    columns = [c.name for c in table.columns]
    df = _pipeline(rows.select(*columns), pre)
    grouping = [F.col(top_n.window_end)]  # Spark's event time: evicted once it is passed
    for j, expr in enumerate(top_n.partition):
        if isinstance(expr, ColumnRef) and expr.name == top_n.window_end:
            continue
        grouping.append(F.expr(to_spark_sql(expr)).alias(f"_g{j}"))
    held = df.groupBy(*grouping).agg(F.collect_list(F.struct(*columns)).alias("_rows"))
    complete = held.select(F.explode("_rows").alias("_row")).select(
        *[F.col(f"_row.{c}").alias(c) for c in columns]
    )
    return _per_step(top_n, complete, table.columns)


def _held(circuit: Circuit, view: View, top_n: TopN, rows: DataFrame,
          pre: list[Operator]) -> DataFrame:
    """Per window and PARTITION BY values, the best ``limit`` rows in Spark's state store."""
    table = circuit.table(view.source)
    columns = [c.name for c in table.columns]
    df = rows
    for op in pre:
        if isinstance(op, Window):
            df = _windowed(df, op, 0)
        elif isinstance(op, Filter):
            df = df.filter(F.expr(to_spark_sql(op.predicate)))
    grouping = [F.col("_w")]
    for j, expr in enumerate(top_n.partition):
        if isinstance(expr, ColumnRef) and expr.name in ("window_start", "window_end"):
            continue  # the window's own
        df = df.withColumn(f"_g{j}", F.expr(to_spark_sql(expr)))
        grouping.append(F.col(f"_g{j}"))
    row = F.struct(*[F.col(c) for c in columns])
    if not bounded_best(top_n):
        # RANK's ties, or keys in both directions: every row of the window is held, and
        # ranked by the reference's rule once the window is complete.
        held = df.groupBy(*grouping).agg(F.collect_list(row).alias("_rows"))
        complete = held.select(
            F.col("_w.start").alias("window_start"),
            F.col("_w.end").alias("window_end"),
            F.explode("_rows").alias("_row"),
        ).select(*[F.col(f"_row.{c}").alias(c) for c in columns], "window_start", "window_end")
        bounds = SqlType("TIMESTAMP", False)
        windowed = [*table.columns, Column("window_start", bounds), Column("window_end", bounds)]
        return _per_step(top_n, complete, windowed)
    order = F.struct(
        *[F.expr(to_spark_sql(key.expr)).alias(f"_o{i}") for i, key in enumerate(top_n.order)],
        *[F.col(c).alias(f"_t{i}") for i, c in enumerate(columns)],
    )
    best = (F.max_by if top_n.order[0].descending else F.min_by)(row, order, top_n.limit)
    grouped = df.groupBy(*grouping).agg(best.alias("_best"))
    exploded = grouped.select(
        F.col("_w.start").alias("window_start"),
        F.col("_w.end").alias("window_end"),
        F.posexplode("_best").alias("_pos", "_row"),
    )
    return exploded.select(
        *[F.col(f"_row.{c}").alias(c) for c in columns],
        "window_start",
        "window_end",
        (F.col("_pos") + 1).cast("bigint").alias(top_n.rank_column),
    )


def _per_step(top_n: TopN, rows: DataFrame, relation: Sequence[Column]) -> DataFrame:
    """A step's rows of complete windows (``relation``'s columns), ranked per PARTITION BY
    values in the step."""
    columns = [c.name for c in relation]
    df = rows.select(
        *columns,
        *[F.expr(to_spark_sql(e)).alias(f"_p{j}") for j, e in enumerate(top_n.partition)],
        *[F.expr(to_spark_sql(k.expr)).alias(f"_o{i}") for i, k in enumerate(top_n.order)],
    )
    schema = StructType([*[df.schema[c] for c in columns],
                         StructField(top_n.rank_column, LongType(), False)])
    partitions = len(top_n.partition)
    keys = len(top_n.order)
    descending = [k.descending for k in top_n.order]

    def rank(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        read = list(batches)
        rows_ = [r for batch in read for r in batch.to_pylist()]
        if not rows_:
            return
        given = read[0].schema
        arrow_schema = pa.schema([*(given.field(c) for c in columns),
                                  pa.field(top_n.rank_column, pa.int64(), nullable=False)])
        groups: dict[tuple[object, ...], list[dict[str, object]]] = {}
        for r in rows_:
            groups.setdefault(tuple(r[f"_p{j}"] for j in range(partitions)), []).append(r)
        out: dict[str, list[object]] = {c: [] for c in [*columns, top_n.rank_column]}
        for members in groups.values():
            keyed = [(tuple(r[f"_o{i}"] for i in range(keys)), tuple(r[c] for c in columns), r)
                     for r in members]
            for number, r in rank_keyed(top_n.function, descending, top_n.limit, keyed):
                for c in columns:
                    out[c].append(r[c])
                out[top_n.rank_column].append(number)
        yield pa.RecordBatch.from_pydict(out, schema=arrow_schema)

    return df.repartition(*[F.col(f"_p{j}") for j in range(partitions)]).mapInArrow(
        rank, schema
    )
