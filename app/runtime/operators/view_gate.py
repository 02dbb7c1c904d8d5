"""The view gate: LATENESS on a view column (SPEC L2, the decoding case) on Spark.

When the event time arrives as text, LATENESS goes on the decoded column of a (local) view.
That view's rows then get their own late gate, exactly S3/S5 over the view's rows of a step
(docs/semantics.md, "LATENESS on a view column"):

- the view's waterline moves by S3 over the step's view rows, late rows included, NULLs (a
  failed CAST) ignored; a view row is late by S5 (both :mod:`app.circuit.waterline`'s); it
  becomes a dead letter of the **root table** with the original Kafka key, value and headers
  (the table frame carries ``_key``/``_value``/``_headers``/``_timestamp``/``_partition``/
  ``_offset`` as far as this gate), and ``tidemark.late.column = "<view>.<column>"``.

The view's waterline lives next to the table's, in the table's waterline files, under the
key ``"<view>.<column>"`` (:func:`waterline_key`), so one file per step still holds everything
the step started with and a replayed step judges alike (S15). The gate runs inside
``mapInArrow`` on the executors and reads w(t-1) from those files for the rows' ``_step``
(the checkpoint directory must therefore be visible to the executors, as it is in local mode
and with the chart's checkpoint volume). Each partition appends one ``probe`` row whose view
columns hold the partition's maxima; the step sink turns them into w(t) like the table's
probes, and the probe also flows through Spark's ``withWatermark`` so aggregate state over the
view is freed by the view's waterline (S11).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from app.circuit.ir import Column, Lateness, Table, View
from app.circuit.waterline import advance, is_late
from app.runtime.planner.waterline_keys import time_unit, waterline_key
from app.runtime.step.sink_rows import gate_rows
from app.runtime.step.step_files import load_waterlines

__all__ = [
    "ORIGIN_COLUMNS",
    "ViewGateSpec",
    "bounded_watermark",
    "gate_view_rows",
    "gated_view",
    "sink_table",
    "view_gate_spec",
    "with_watermark",
]

#: What a table row carries to the view gate so a late view row can be written back unchanged.
ORIGIN_COLUMNS = ("_key", "_value", "_headers", "_timestamp", "_partition", "_offset", "_step")

#: Columns the gate adds: the verdict and the S6 details of a late row.
_GATE_FIELDS = (
    ("_vkind", StringType()),  # ok | late | probe
    ("_vmessage", StringType()),
    ("_vlate_column", StringType()),
    ("_vlate_value", LongType()),
    ("_vlate_waterline", LongType()),
    ("_vaccepted", LongType()),  # probe only: minus the partition's late view rows
)

Unit = Literal["ms", "integer"]


@dataclass(frozen=True)
class ViewGateSpec:
    """One view with LATENESS: its columns ``(column, lateness, unit)`` in declaration order."""

    view: str
    state_dir: str
    columns: tuple[tuple[str, int, Unit], ...]


def view_gate_spec(view: View, state_dir: str) -> ViewGateSpec:
    """The gate of ``view``'s own LATENESS columns, whose waterlines live in ``state_dir``."""
    types = {c.name: c.type for c in view.columns}
    return ViewGateSpec(
        view.name,
        state_dir,
        tuple((x.column, x.amount, time_unit(types[x.column])) for x in view.lateness),
    )


def sink_table(table: Table, gated_views: Sequence[View]) -> Table:
    """The table with each view LATENESS column as a ``"<view>.<column>"`` LATENESS column:
    what the step sink computes, stores and reports waterlines for (see
    :class:`~app.runtime.operators.query.TablePlan`)."""
    if not gated_views:
        return table
    columns = list(table.columns)
    lateness = list(table.lateness)
    for view in gated_views:
        types = {c.name: c.type for c in view.columns}
        for x in view.lateness:
            key = waterline_key(view.name, x.column)
            columns.append(Column(key, types[x.column]))
            lateness.append(Lateness(key, x.amount))
    return replace(table, columns=tuple(columns), lateness=tuple(lateness))


def _values_ms(column: pa.Array, unit: Unit) -> list[int | None]:
    """The column as the waterline's unit: epoch ms for TIMESTAMP, the integer otherwise."""
    if unit == "ms":
        micros = pc.cast(column, pa.timestamp("us", tz="UTC")).cast(pa.int64())
        return [None if v is None else int(v) // 1000 for v in micros.to_pylist()]
    return [None if v is None else int(v) for v in column.to_pylist()]


def gate_view_rows(
    batches: Iterator[pa.RecordBatch], spec: ViewGateSpec
) -> Iterator[pa.RecordBatch]:
    """Classify one partition's view rows against w(t-1); then one probe row per step."""
    marks: dict[int, dict[str, int | None]] = {}
    maxima: dict[int, dict[str, int | None]] = {}
    late_rows: dict[int, int] = {}
    schema: pa.Schema | None = None
    for batch in batches:
        schema = _out_schema(batch.schema)
        if batch.num_rows == 0:
            continue
        steps = batch.column("_step").to_pylist()
        values = {c: _values_ms(batch.column(c), unit) for c, _, unit in spec.columns}
        kinds: list[str] = []
        messages: list[str | None] = []
        late_cols: list[str | None] = []
        late_values: list[int | None] = []
        late_marks: list[int | None] = []
        for i, step in enumerate(steps):
            if step not in marks:
                marks[step] = load_waterlines(spec.state_dir, int(step))
                maxima[step] = {c: None for c, _, _ in spec.columns}
                late_rows[step] = 0
            verdict: tuple[str, int | None, int | None] | None = None
            for col, _, _ in spec.columns:
                value, mark = values[col][i], marks[step].get(waterline_key(spec.view, col))
                if verdict is None and is_late(value, mark):
                    verdict = (col, value, mark)
                maxima[step][col] = advance(maxima[step][col], value)
            if verdict is None:
                kinds.append("ok")
                messages.append(None)
                late_cols.append(None)
                late_values.append(None)
                late_marks.append(None)
                continue
            col, value, mark = verdict
            late_rows[step] += 1
            kinds.append("late")
            messages.append(
                f"column {spec.view}.{col} = {value} is below the waterline {mark} "
                f"of view {spec.view}"
            )
            late_cols.append(waterline_key(spec.view, col))
            late_values.append(value)
            late_marks.append(mark)
        extra = [
            pa.array(kinds, pa.string()),
            pa.array(messages, pa.string()),
            pa.array(late_cols, pa.string()),
            pa.array(late_values, pa.int64()),
            pa.array(late_marks, pa.int64()),
            pa.nulls(batch.num_rows, pa.int64()),
        ]
        yield pa.RecordBatch.from_arrays([*batch.columns, *extra], schema=schema)
    if schema is None:
        return
    for step, tops in maxima.items():
        if all(v is None for v in tops.values()) and not late_rows[step]:
            continue
        yield _probe(schema, spec, step, tops, late_rows[step])


def _out_schema(schema: pa.Schema) -> pa.Schema:
    fields = [pa.field(f.name, f.type) for f in schema]
    fields += [
        pa.field(name, pa.string() if isinstance(t, StringType) else pa.int64())
        for name, t in _GATE_FIELDS
    ]
    return pa.schema(fields)


def _probe(
    schema: pa.Schema, spec: ViewGateSpec, step: int, tops: dict[str, int | None], late: int
) -> pa.RecordBatch:
    """A row whose view columns are the step's maxima (the step sink and withWatermark read
    them); ``_vaccepted`` takes the late view rows back out of the table's accepted count."""
    units = {c: unit for c, _, unit in spec.columns}
    arrays: list[pa.Array] = []
    for field in schema:
        if field.name in tops:
            top = tops[field.name]
            if units[field.name] == "ms":
                micros = None if top is None else top * 1000
                arrays.append(pa.array([micros], pa.int64()).cast(field.type))
            else:
                arrays.append(pa.array([top], field.type))
        elif field.name == "_step":
            arrays.append(pa.array([step], field.type))
        elif field.name == "_vkind":
            arrays.append(pa.array(["probe"], pa.string()))
        elif field.name == "_vaccepted":
            arrays.append(pa.array([-late], pa.int64()))
        else:
            arrays.append(pa.nulls(1, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def with_watermark(frame: DataFrame, column: str, delay_ms: int) -> DataFrame:
    """``frame.withWatermark(column, delay)`` with every later filter kept *above* the node.

    Spark's query watermark is the minimum over all its ``EventTimeWatermark`` nodes (one per
    branch that reads a table), each the maximum event time it saw less the delay. The probe
    rows carry the step's maxima, punctuation bounds included (S4), so each node must see
    them for Spark's watermark to be the waterline (ADR 0001); on a step with only
    punctuation they are all that can move it. Spark's optimizer pushes a filter's conjuncts
    that do not name the event-time column below the node (a view's WHERE, the
    ``_kind = 'ok'`` that drops the probes, a join's inferred ``isnotnull(key)``), which the
    probes fail. A filter whose condition is not deterministic is neither pushed nor merged
    with the filters above it, so the always-true ``spark_partition_id() >= 0`` holds them
    all above the node."""
    node = frame.withWatermark(column, f"{delay_ms} milliseconds")
    return node.filter(F.spark_partition_id() >= 0)


#: The column metadata that makes an attribute Spark's event time (EventTimeWatermark).
_EVENT_TIME = {"spark.watermarkDelayMs": 0}


def bounded_watermark(frame: DataFrame, column: str, timestamp: bool) -> DataFrame:
    """Spark's watermark for a stage boundary's table (ADR 0023): the maximum of its probe
    rows' ``column`` alone, the punctuated bounds, never its rows' values, which may lie
    above them. The node watermarks a copy that is NULL but in the probes (Spark counts a
    NULL as no later than any time); ``column`` (as ``_event_time`` when it is an integer)
    then carries the event-time metadata, so windows and state on it follow that watermark
    as on a table's column (:func:`with_watermark`)."""
    value = F.col(column) if timestamp else F.expr(f"timestamp_millis(`{column}`)")
    bound = F.when(F.col("_kind") == "probe", value)
    node = with_watermark(frame.withColumn("_bound", bound), "_bound", 0).drop("_bound")
    if timestamp:
        return node.withMetadata(column, _EVENT_TIME)
    return node.withColumn("_event_time", value).withMetadata("_event_time", _EVENT_TIME)


@dataclass(frozen=True)
class GatedView:
    """The two branches of a gated view: accepted rows, and dead letters with the probe (SINK
    rows)."""

    rows: DataFrame
    not_accepted: DataFrame
    event_time: str | None  # the watermarked column, when a watermark was asked for


def gated_view(
    frame: DataFrame,
    spec: ViewGateSpec,
    table: str,
    dead_letter_topic: str,
    watermark: bool,
) -> GatedView:
    """Gate ``frame`` (the view's rows with :data:`ORIGIN_COLUMNS`) and split the verdicts.

    With ``watermark``, Spark's watermark follows the view's first LATENESS column (the probe
    rows carry its maxima through ``withWatermark`` before they are filtered out)."""
    out = StructType(
        [StructField(f.name, f.dataType, True) for f in frame.schema.fields]
        + [StructField(name, t, True) for name, t in _GATE_FIELDS]
    )
    gated = frame.mapInArrow(lambda it: gate_view_rows(it, spec), out)
    event_time: str | None = None
    if watermark:
        column, amount, unit = spec.columns[0]
        if unit == "ms":
            event_time = column
        else:
            event_time = "_event_time"
            gated = gated.withColumn(event_time, F.expr(f"timestamp_millis(`{column}`)"))
        gated = with_watermark(gated, event_time, amount)
    gate_columns = [name for name, _ in _GATE_FIELDS]
    rows = gated.filter(F.col("_vkind") == "ok").drop(
        *gate_columns, *(c for c in ORIGIN_COLUMNS if c not in ("_step", "_partition", "_offset"))
    )
    not_accepted = gate_rows(
        gated,
        "_vkind",
        table,
        dead_letter_topic,
        reason=F.lit("late"),
        message="_vmessage",
        late=("_vlate_column", "_vlate_value", "_vlate_waterline"),
        maxima=[
            (
                waterline_key(spec.view, c),
                f"unix_millis(`{c}`)" if unit == "ms" else f"cast(`{c}` as bigint)",
            )
            for c, _, unit in spec.columns
        ],
        accepted="_vaccepted",
    )
    return GatedView(rows, not_accepted, event_time)
