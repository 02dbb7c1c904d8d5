"""Windowed AFTER WATERMARK views on Spark's own (JVM) streaming aggregation.

The shared ``applyInPandasWithState`` operator (:mod:`app.runtime.operators.aggregate`) runs every
EMIT form, but pays a Python call and a pickled state record per group per step: 9-14x slower than
``groupBy(window).agg`` (docs/differential.md). The commonest view, a window aggregated and
written once complete (EMIT AFTER WATERMARK), needs none of that machinery: Spark's append-mode
aggregation keeps the accumulators in the state store itself and writes each window's row
exactly once, when the watermark passes its end. So such views run natively when every
aggregate has an exact native form (:func:`~app.runtime.operators.native_aggregate_support.
is_native`, what the planner reads); anything else stays on the shared operator.

Why the results are equal to the reference evaluator's:

- Completeness (S11): Spark evicts a window once ``window.end <= watermark``, and the
  watermark is the table's waterline (the source's probe rows feed ``withWatermark``), so a
  window is written when ``w(t) >= window_end``, in the step after the one that completed it,
  exactly as on the shared operator. Spark's late-row filter of an aggregation compares the
  *window end* with the watermark, and an accepted row (``c >= w(t-1)``, S5) always lies in a
  window ending after the waterline, so Spark drops nothing the late gate kept.
- Exact accumulators: COUNT, SUM/AVG of integers (of an INT one BIGINT sum, of a BIGINT
  three BIGINT sums of slices of each value joined as DECIMAL(38,0) once per group, so
  nothing overflows or rounds below 2^32 and 2^42 rows of a group), MIN/MAX of non-floating
  types, ARG_MAX/ARG_MIN with the earliest row winning ties (the arrival coordinates order the
  candidates). Floating-point sums and extremes, DISTINCT and DECIMAL
  sums stay on the shared operator, whose arithmetic is the oracle's.
- The finished row goes through the shared operator's own code: accumulator results
  (:class:`app.runtime.operators.aggregate._Acc`), HAVING and the SELECT list (``_finish``, the
  oracle's scalar functions), the record shapes (``_emit_rows``) and the encoding (S13).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from app.circuit.functions import spark_type, to_spark_sql
from app.circuit.ir import AggCall, Aggregate, ColumnRef, Filter, View, Window
from app.connectors.sink import SUMMARY_SCHEMA
from app.connectors.sink.record import SINK_SCHEMA
from app.runtime.operators.aggregate import (
    _Acc,
    _emit_rows,
    _finish,
    _Group,
    _Plan,
    _to_python,
    _type_of,
    plan_of,
)
from app.runtime.operators.native_aggregate_support import (
    renamed_outputs,
    session_windowed,
)
from app.runtime.operators.view_frame import batch_time
from app.runtime.step.encode import encode_record, encode_view_rows, output_batch

__all__ = ["columnar_outputs", "finish_columns", "finish_rows", "native_branch", "native_rows"]

_INTEGERS = ("INT", "BIGINT")


#: SUM/AVG total a BIGINT value as the sums of its low and middle ``_SLICE_BITS`` bits (each in
#: [0, 2^21)) and of the signed rest (in [-2^21, 2^21)).
_SLICE_BITS = 21
_SLICE_MASK = (1 << _SLICE_BITS) - 1


def _circuit_sql(sql: str, kind: str) -> str:
    """A Spark value in the circuit's representation: TIMESTAMP as epoch ms, DATE as days."""
    if kind == "TIMESTAMP":
        return f"unix_millis({sql})"
    if kind == "DATE":
        return f"unix_date({sql})"
    return sql


def _counted(call: AggCall, args: list[str]) -> Column:
    """COUNT of the call's argument: ``count(1)`` when it is a NOT NULL column of the table,
    which Spark computes once for every such call of the view (``COUNT(*)`` and ``SUM(n)`` of
    a NOT NULL ``n`` share one count in the state). Only a column: an expression typed NOT
    NULL can still be NULL (``m + m`` past INT, integer overflow is NULL)."""
    if not args or (isinstance(call.args[0], ColumnRef) and not _type_of(call.args[0]).nullable):
        return F.count(F.lit(1))
    return F.count(F.expr(args[0]))


def _int_sum(call: AggCall) -> bool:
    """SUM/AVG of an INT: one BIGINT ``try_sum`` (:func:`_spark_aggregate`) rather than the
    slices, which :func:`_result_columns` must read back the same way."""
    return call.fn.upper() in ("SUM", "AVG") and _type_of(call.args[0]).name == "INT"


def _spark_aggregate(index: int, call: AggCall) -> list[Column]:
    """The native aggregates of one call, named ``_a<index>_<part>``."""
    fn = call.fn.upper()
    name = f"_a{index}"
    args = [to_spark_sql(a) for a in call.args]
    if fn == "COUNT":
        return [_counted(call, args).alias(f"{name}_n")]
    if _int_sum(call):
        # One BIGINT sum: an INT is below 2^31 in size, so no running sum leaves BIGINT below
        # 2^32 rows of a group. Past that, a running sum that leaves it makes the result
        # NULL (``try_sum``), not a wrapped total nor, as ``sum`` under ANSI mode, a failed
        # query. As fast as ``sum``; the slices below cost up to 10% more in a batch
        # aggregation of (b)'s shape (loadtests.sum_speed).
        return [
            _counted(call, args).alias(f"{name}_n"),
            F.expr(f"try_sum(cast({args[0]} as bigint))").alias(f"{name}_s"),
        ]
    if fn in ("SUM", "AVG"):
        # The exact total of a BIGINT as three BIGINT sums of 21- and 22-bit slices of each
        # value: Spark sums BIGINT with primitive arithmetic, where a DECIMAL(38,0) sum (exact
        # too) took a Decimal object per row and was half as slow again as the plain job's
        # `sum` (loadtests.sum_speed: 8M rows, 3.4-3.8 s against 2.2-2.5 s; the
        # slices 2.3-2.7 s). A slice's sum stays within BIGINT below 2^42 rows of a group;
        # :func:`_result_columns` joins the slices once per group.
        value = f"cast({args[0]} as bigint)"
        return [
            _counted(call, args).alias(f"{name}_n"),
            F.sum(F.expr(f"{value} & {_SLICE_MASK}")).alias(f"{name}_lo"),
            F.sum(F.expr(f"({value} >> {_SLICE_BITS}) & {_SLICE_MASK}")).alias(f"{name}_mid"),
            F.sum(F.expr(f"{value} >> {2 * _SLICE_BITS}")).alias(f"{name}_hi"),
        ]
    if fn in ("MIN", "MAX"):
        agg = F.min if fn == "MIN" else F.max
        return [agg(F.expr(args[0])).alias(f"{name}_v")]
    # ARG_MAX/ARG_MIN(value, by): the best ``by``; on ties the earliest arrival, which is the
    # largest negated (ARG_MAX) or smallest (ARG_MIN) (step, partition, offset).
    value, by = args
    sign = "-" if fn == "ARG_MAX" else ""
    seq = ", ".join(f"'{c}', {sign}`{c}`" for c in ("_step", "_partition", "_offset"))
    candidate = F.expr(
        f"if(({by}) is null, null, named_struct('by', {by}, {seq}, 'value', {value}))"
    )
    agg = F.max if fn == "ARG_MAX" else F.min
    return [agg(candidate).alias(f"{name}_v")]


def _result_columns(index: int, call: AggCall) -> list[Column]:
    """The aggregate's native results in the circuit's representation, for the finisher."""
    fn = call.fn.upper()
    name = f"_a{index}"
    if fn == "COUNT":
        return [F.col(f"{name}_n")]
    if _int_sum(call):
        return [F.col(f"{name}_n"), F.col(f"{name}_s").alias(f"{name}_v")]
    if fn in ("SUM", "AVG"):
        slices = [
            f"cast(`{name}_{part}` as decimal(38,0)) * {1 << (shift * _SLICE_BITS)}"
            for shift, part in enumerate(("lo", "mid", "hi"))
        ]
        return [F.col(f"{name}_n"), F.expr(" + ".join(slices)).alias(f"{name}_v")]
    if fn in ("MIN", "MAX"):
        kind = _type_of(call.args[0]).name
        return [F.expr(_circuit_sql(f"`{name}_v`", kind)).alias(f"{name}_v")]
    value_kind = _type_of(call.args[0]).name
    by_kind = _type_of(call.args[1]).name
    return [
        F.expr(_circuit_sql(f"`{name}_v`.by", by_kind)).alias(f"{name}_by"),
        F.expr(_circuit_sql(f"`{name}_v`.value", value_kind)).alias(f"{name}_v"),
    ]


def _fill(
    acc: _Acc, index: int, columns: dict[str, list[Any]], row: int, kinds: tuple[str, ...]
) -> None:
    """Load one group's native results into the shared operator's accumulator."""
    name = f"_a{index}"
    if acc.fn == "COUNT":
        acc.count = int(columns[f"{name}_n"][row])
    elif acc.fn in ("SUM", "AVG"):
        acc.count = int(columns[f"{name}_n"][row])
        total = columns[f"{name}_v"][row]
        acc.total = None if total is None else int(total)
    elif acc.fn in ("MIN", "MAX"):
        acc.best = _to_python(columns[f"{name}_v"][row], kinds[0])
    else:
        by = columns[f"{name}_by"][row]
        if by is not None:
            value = _to_python(columns[f"{name}_v"][row], kinds[0])
            acc.best = (_to_python(by, kinds[1]), (0, 0, 0), value)


def _finish_groups(batches: Iterator[pa.RecordBatch], plan: _Plan) -> Iterator[pa.RecordBatch]:
    """Each completed group's row: results, HAVING, SELECT and encoding as on the shared
    operator (so both paths write the same bytes), with ``ptime`` = the step's batch time.

    Column-wise when finishing is only renaming (:func:`columnar_outputs`): a step of
    workload (b) completes ~67,000 groups, and the per-row finisher below spent most of the
    Python workers' CPU on them."""
    outputs = columnar_outputs(plan)
    for batch in batches:
        finished = finish_columns(batch, plan, outputs) if outputs is not None else None
        if finished is not None:
            yield from encode_view_rows(iter([finished]), plan.encoding)
        else:
            yield finish_rows(batch, plan)


def finish_rows(batch: pa.RecordBatch, plan: _Plan) -> pa.RecordBatch:
    """The groups of one batch finished one by one, through the shared operator's code."""
    enc = plan.encoding
    columns = batch.to_pydict()
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    for row in range(batch.num_rows):
        key = tuple(
            _to_python(columns[f"_k{j}"][row], kind) for j, kind in enumerate(plan.key_kinds)
        )
        group = _Group([_Acc(call) for _, call in plan.aggregate.aggregates])
        for index, acc in enumerate(group.accumulators):
            _fill(acc, index, columns, row, plan.arg_kinds[index])
        ptime = int(columns["_ptime"][row])
        for record in _emit_rows(plan, group, _finish(plan, key, group), final=True):
            k, v = encode_record(enc, record, ptime)
            keys.append(k)
            values.append(v)
    return output_batch(enc, keys, values)


#: Value kinds whose native result is the row value itself (``_to_python`` changes nothing the
#: columnar encoder would see).
_PLAIN_KINDS = ("INT", "BIGINT", "VARCHAR", "TIMESTAMP", "DATE", "BOOLEAN")


def columnar_outputs(plan: _Plan) -> dict[str, str] | None:
    """Output column -> the key or aggregate it is, when finishing needs no scalar function:
    no HAVING, a SELECT list of plain column references, COUNT, integer SUM (BIGINT), MIN/MAX
    of plain kinds, and an output encoding the columnar encoder writes. None otherwise."""
    current = renamed_outputs(plan.view, plan.aggregate)
    if current is None:
        return None
    if any(kind not in _PLAIN_KINDS for kind in plan.key_kinds):
        return None
    for (_, call), kinds in zip(plan.aggregate.aggregates, plan.arg_kinds, strict=True):
        fn = call.fn.upper()
        plain = (
            fn == "COUNT"
            or (fn == "SUM" and kinds[0] in _INTEGERS and call.type.name == "BIGINT")
            or (fn in ("MIN", "MAX") and kinds[0] in _PLAIN_KINDS)
        )
        if not plain:
            return None
    if plan.encoding.columnar() is None:
        return None
    outputs: dict[str, str] = {}
    for name in plan.output_columns():
        if name not in current:
            return None
        outputs[name] = current[name]
    return outputs


def finish_columns(
    batch: pa.RecordBatch, plan: _Plan, outputs: Mapping[str, str]
) -> pa.RecordBatch | None:
    """The batch's output rows as columns (plus ``_ptime``), as :func:`finish_rows` would
    compute them; None when a SUM lies outside BIGINT, which the per-row path decides."""
    row: dict[str, pa.Array] = {
        name: batch.column(f"_k{j}") for j, (name, _) in enumerate(plan.aggregate.keys)
    }
    for i, (name, call) in enumerate(plan.aggregate.aggregates):
        fn = call.fn.upper()
        if fn == "COUNT":
            row[name] = batch.column(f"_a{i}_n")
        elif fn == "SUM":
            try:
                total = pc.cast(batch.column(f"_a{i}_v"), pa.int64())
            except pa.ArrowInvalid:
                return None
            empty = pc.equal(batch.column(f"_a{i}_n"), 0)
            row[name] = pc.if_else(empty, pa.scalar(None, pa.int64()), total)
        else:
            row[name] = batch.column(f"_a{i}_v")
    names = list(outputs)
    return pa.RecordBatch.from_arrays(
        [*(row[outputs[c]] for c in names), batch.column("_ptime")], names=[*names, "_ptime"]
    )


def _windowed(df: DataFrame, op: Window, depth: int) -> DataFrame:
    """S9 as Spark's own ``window``, so the watermark metadata reaches the grouping key (which
    append-mode eviction needs); ``window_start``/``window_end`` for WHERE and the keys.

    In a cascade (``depth`` > 0) the window is on the window end of the native view read,
    whose rows carry that view's window as ``_tw``. Spark passes event time from one
    aggregation to the next only through ``window_time(_tw)``, the end less 1 microsecond
    (less ``depth`` microseconds, as each level's bounds are shifted): so the window starts
    ``depth`` microseconds early, which puts every row in the window S9 puts its end in, and
    :func:`_bound` adds them back. Spark evicts a window once its (shifted) end is ``<=`` the
    watermark, a whole number of milliseconds: exactly when ``w >= window_end`` (S11).

    A SESSION window is Spark's ``session_window`` per the other grouping keys, of the gap
    plus 1 ms less 1 microsecond: with times in whole milliseconds, rows at most ``gap``
    apart share a session (:func:`app.circuit.windows.sessions`), and Spark evicts (writes)
    a session once the watermark, a whole number of milliseconds, reaches its end ``last +
    gap + 1 ms - 1 us``: exactly when ``w > last + gap``, when no row can join it (S11).
    Its ``window_end`` is ``last + gap``, the end less those 999 microseconds."""
    if op.kind == "SESSION":
        assert not depth, "a session window reads a table's rows"
        gap = f"{op.size * 1000 + 999} microseconds"
        return (
            df.withColumn("_w", F.session_window(F.col(op.time_column), gap))
            .withColumn("window_start", F.expr("`_w`.start"))
            .withColumn("window_end", F.expr(_SESSION_END))
        )
    offset = op.offset % op.slide
    if depth:
        time = F.window_time("_tw")
        start = f"{(offset * 1000 - depth) % (op.slide * 1000)} microseconds"
    else:
        time, start = F.col(op.time_column), f"{offset} milliseconds"
    window = F.window(time, f"{op.size} milliseconds", f"{op.slide} milliseconds", start)
    return (
        df.withColumn("_w", window)
        .withColumn("window_start", F.expr(_bound("start", depth)))
        .withColumn("window_end", F.expr(_bound("end", depth)))
    )


#: Spark SQL of a session's ``window_end``, ``last + gap`` (:func:`_windowed`).
_SESSION_END = "`_w`.end - INTERVAL 999 MICROSECOND"


def _bound(field: str, depth: int) -> str:
    """Spark SQL of the grouped window's ``start``/``end`` (see :func:`_windowed`)."""
    return f"`_w`.{field} + INTERVAL {depth} MICROSECOND" if depth else f"`_w`.{field}"


def _groups(view: View, rows: DataFrame, depth: int) -> tuple[DataFrame, list[str]]:
    """The view's groups as Spark aggregates them (``_w``, the grouping columns and the
    native aggregates ``_a<i>_<part>``), and Spark SQL of each GROUP BY key's value."""
    aggregate = next(op for op in view.operators if isinstance(op, Aggregate))
    df = rows
    for op in view.operators[: view.operators.index(aggregate)]:
        if isinstance(op, Window):
            df = _windowed(df, op, depth)
        elif isinstance(op, Filter):
            df = df.filter(F.expr(to_spark_sql(op.predicate)))
    # Window keys come from the grouped window; other keys are grouped as computed columns.
    grouping: list[Column] = [F.col("_w")]
    keys: list[str] = []
    session = session_windowed(view)
    for j, (_, expr) in enumerate(aggregate.keys):
        if isinstance(expr, ColumnRef) and expr.name in ("window_start", "window_end"):
            if session:
                keys.append("`_w`.start" if expr.name == "window_start" else _SESSION_END)
            else:
                keys.append(_bound("start" if expr.name == "window_start" else "end", depth))
            continue
        df = df.withColumn(f"_g{j}", F.expr(to_spark_sql(expr)))
        grouping.append(F.col(f"_g{j}"))
        keys.append(f"`_g{j}`")
    if len(grouping) == 1 and session:
        # Spark refuses a session window with no other grouping key (a constant one is
        # folded away): every row's group is 0, computed from its window.
        df = df.withColumn("_g_one", F.coalesce(F.col("_w").start.cast("long") * 0, F.lit(0)))
        grouping.append(F.col("_g_one"))
    aggregates = [
        c for i, (_, call) in enumerate(aggregate.aggregates) for c in _spark_aggregate(i, call)
    ]
    if not aggregates:
        # A GROUP BY without aggregates (SELECT DISTINCT): Spark aggregates something.
        aggregates = [F.count(F.lit(1)).alias("_rows")]
    return df.groupBy(*grouping).agg(*aggregates), keys


def native_rows(view: View, rows: DataFrame, depth: int) -> DataFrame:
    """S18: the final rows of a native view as the views reading it see them (a cascade):
    its columns in the table rows' representation, written once each, when the watermark
    passes the window's end; and ``_tw``, the view's window, whose event-time metadata lets
    a reader's native aggregation window on the view's window end (:func:`_windowed`)."""
    aggregate = next(op for op in view.operators if isinstance(op, Aggregate))
    grouped, keys = _groups(view, rows, depth)
    values: dict[str, Column] = {
        name: F.expr(keys[j]) for j, (name, _) in enumerate(aggregate.keys)
    }
    for i, (name, call) in enumerate(aggregate.aggregates):
        values[name] = _row_value(i, call)
    current = renamed_outputs(view, aggregate)
    assert current is not None, view.name  # is_native: cascade_time_column
    return grouped.select(
        *(values[source].alias(name) for name, source in current.items()),
        F.col("_w").alias("_tw"),
    )


def _row_value(index: int, call: AggCall) -> Column:
    """One aggregate's value as a row carries it (a cascade's COUNT, SUM, MIN or MAX,
    :func:`~app.runtime.operators.native_aggregate_support.cascade_time_column`): a SUM
    outside its type, or of no value, is NULL as in the reference evaluator
    (``sum_result``)."""
    fn = call.fn.upper()
    name = f"_a{index}"
    if fn == "COUNT":
        return F.col(f"{name}_n")
    if fn in ("MIN", "MAX"):
        return F.col(f"{name}_v")
    total = _result_columns(index, call)[1]
    target = spark_type(call.type)
    return F.when(F.col(f"{name}_n") == 0, F.lit(None).cast(target)).otherwise(
        total.try_cast(target)
    )


def native_branch(
    view: View,
    rows: DataFrame,
    produce: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] | None = None,
    depth: int = 0,
) -> DataFrame:
    """The Kafka records (SINK_SCHEMA) of one native view over its input's rows (a table's
    accepted rows, or at ``depth`` > 0 a native view's, :func:`native_rows`); or, with
    ``produce``, what ``produce`` makes of them in the same Python pass (SUMMARY_SCHEMA rows:
    the records written in the query, ADR 0008)."""
    plan = plan_of(view)
    grouped, keys = _groups(view, rows, depth)
    finished = [
        F.expr(_circuit_sql(keys[j], kind)).alias(f"_k{j}") for j, kind in enumerate(plan.key_kinds)
    ]
    results = [
        c
        for i, (_, call) in enumerate(plan.aggregate.aggregates)
        for c in _result_columns(i, call)
    ]
    completed = grouped.withColumn("_ptime", batch_time([plan.encoding.format])).select(
        *finished, *results, F.expr("unix_millis(_ptime)").alias("_ptime")
    )
    if produce is None:
        return completed.mapInArrow(lambda batches: _finish_groups(batches, plan), SINK_SCHEMA)
    return completed.mapInArrow(
        lambda batches: produce(_finish_groups(batches, plan)), SUMMARY_SCHEMA
    )
