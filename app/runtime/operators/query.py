"""The circuit IR to Spark: one streaming DataFrame per table, ending in the sink rows.

Per table (one streaming query each, so every table keeps its own waterlines, SPEC S3):

```
Kafka ─▶ source (decode + LateGate) ─┬─▶ ok rows ─▶ views ─▶ encode ─────────────────┐
                                     └─▶ dead letters (late, malformed, invalid, future) ├─▶ sink
                                         and the probe (per-step maxima: the waterline), ┘
                                         and the ok rows the step sink's views read
```

Dead letters are one branch per table, so they are written once however many views read the
table (S6). Views run over the accepted rows only (S5, S8). A stateless view with no LATENESS
on its way from the table is computed by the step sink over the ok rows of the dead-letter
branch (:mod:`app.runtime.step.step_views`); the others, and the rows every aggregate reads, are
computed here. A view with its own LATENESS (L2, the decoding case) adds a second gate on its
rows (:mod:`app.runtime.operators.view_gate`): its late rows join the table's dead letters, its
probe the table's probe, and its waterline is kept in the table's waterline files under
``"<view>.<column>"``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial, reduce
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.circuit.derived_time import group_completion, input_attributes
from app.circuit.ir import (
    Aggregate,
    Circuit,
    Column,
    Diagnostic,
    Join,
    Lateness,
    SqlType,
    Table,
    TimeAttribute,
    View,
    Window,
)
from app.circuit.processing_time import (
    attribute_is_processing_time,
    operator_expressions,
    reads_now,
    view_reads_now,
)
from app.circuit.waterline import WaterlineStep
from app.connectors.late_gate import ACCEPTED, SourceColumn, SourceSpec
from app.connectors.sink import SUMMARY_SCHEMA
from app.connectors.sink.record import SINK_SCHEMA
from app.errors import ProgramError, TidemarkError
from app.program.stages import attribute_steps, punctuated_columns
from app.runtime.operators.aggregate import aggregate_branch, window_key_index
from app.runtime.operators.join_operator import JoinOperatorSpec, operator_joined
from app.runtime.operators.native_aggregate import (
    cascade_depth,
    is_native,
    joined_on_window_end,
    native_branch,
    native_rows,
    session_windowed,
    union_time_tables,
)
from app.runtime.operators.over_operator import OverOperatorSpec, over_rows
from app.runtime.operators.top_n import spark_problem as top_n_problem
from app.runtime.operators.top_n import top_n_rows
from app.runtime.operators.view_frame import (
    batch_time,
    ms_sql,
    table_columns,
    view_frame,
    with_batch_time,
)
from app.runtime.operators.view_gate import (
    ORIGIN_COLUMNS,
    ViewGateSpec,
    bounded_watermark,
    gated_view,
    waterline_key,
    with_watermark,
)
from app.runtime.planner.physical import PhysicalPlan, QueryPlan, by_join_operator, first_lateness
from app.runtime.step.encode import ViewEncoding, encode_view_rows
from app.runtime.step.query_writes import produce_step_output
from app.runtime.step.sink_rows import TABLE_GATE, gate_rows
from app.runtime.step.source_reader import KafkaSource, log_start_position
from app.runtime.step.step_orders import SLICE_SUMMARY
from app.runtime.step.step_views import carried_columns
from app.runtime.step.view_waterlines import DerivedInput, MergedInput

__all__ = [
    "TablePlan",
    "check_supported",
    "plan_query",
    "StagePunctuation",
    "refused_by_spark",
    "refusals",
    "source_spec",
    "time_unit",
    "waterline_inputs",
]


def _kind(t: SqlType) -> str:
    if t.name == "DECIMAL":
        return f"decimal({t.precision},{t.scale})"
    return {
        "BOOLEAN": "bool",
        "INT": "int32",
        "BIGINT": "int64",
        "REAL": "float32",
        "DOUBLE": "float64",
        "VARCHAR": "string",
        "DATE": "date",
        "TIMESTAMP": "timestamp",
        "VARBINARY": "binary",
    }[t.name]


TimeUnit = Literal["ms", "integer"]
#: A waterline the S14 waterline of a view follows: a key of the query's waterline map and
#: how far below it (``w - lag``, in the column's unit).
WaterlineInput = MergedInput


def time_unit(t: SqlType) -> TimeUnit:
    """'ms' for TIMESTAMP waterlines, 'integer' for INT/BIGINT ones."""
    return "ms" if t.name == "TIMESTAMP" else "integer"


def source_spec(table: Table, ok_payload: bool = True) -> SourceSpec:
    return SourceSpec(
        table=table.name,
        topic=table.topic,
        columns=tuple(
            SourceColumn(c.name, _kind(c.type), c.type.nullable, c.metadata)
            for c in table.columns
            if not c.processing_time  # the query adds it: the source knows no batch time
        ),
        avro_schema=table.avro_schema,
        lateness=tuple((x.column, x.amount) for x in table.lateness),
        max_future_ms=table.max_future_ms,
        dead_letter_topic=table.dead_letter_topic,
        ok_payload=ok_payload,
        format=table.format,
        registry=table.schema_registry,
        deletes=table.deletes_by_tombstone,
        bounded=table.stage_input is not None,
        key_format=table.key_format,
        key_fields=table.key_fields,
        key_schema=table.key_schema,
    )


@dataclass(frozen=True)
class StagePunctuation:
    """What a query writes to a stage boundary's internal topic after each step (ADR 0023):
    per column, the waterline key of the bound its reader's table moves to."""

    view: str
    topic: str
    columns: tuple[tuple[str, str], ...]  # (column, waterline key)


@dataclass(frozen=True)
class TablePlan:
    """One streaming query (the physical plan's, of one table or of several): its sink rows
    and what the step sink must know.

    ``tables`` are the query's tables as its step sink keeps time, in the query's order: each
    with its own LATENESS columns, then one per LATENESS column of its views, named
    ``"<view>.<column>"`` (SPEC L2), so the sink computes, stores and reports the views'
    waterlines with the table's (S3, S14). Each table keeps its waterlines in its own
    ``state_dirs`` entry. The query's waterline map (what ``view_time_source`` and ``merged``
    name) is its table's map for a query of one table, and every table's columns as
    ``"<table>.<column>"`` for a query of several; in both, each UNION ALL time attribute
    whose inputs differ is ``"<view>.<column>"``, the minimum of its ``merged`` inputs (S17)."""

    tables: tuple[Table, ...]
    state_dirs: tuple[str, ...]
    frame: DataFrame
    output_views: tuple[View, ...]
    view_time_source: Mapping[str, str | None]  # output view -> waterline key of S14
    #: The views the step sink computes over the step's accepted rows (app/runtime/step/step_views),
    #: or, in a ``query_writes`` query, the source's own tasks over the slice's Arrow columns
    #: (app/runtime/step/slice_writers.py, ADR 0007).
    step_views: tuple[View, ...] = ()
    #: The tables' sources, as the query reads them (a job over its slices must read the same).
    sources: tuple[SourceSpec, ...] = ()
    #: The physical plan's query, whose step shape the step sink follows (ADR 0011).
    query: QueryPlan = QueryPlan("", ())
    #: A UNION ALL or JOIN time attribute's key -> the keys (and lags) whose minimum is its
    #: waterline (S16, S17).
    merged: Mapping[str, tuple[WaterlineInput, ...]] = field(default_factory=dict)
    #: A derived time attribute's key (``"<view>.<column>"``) -> the key whose waterline its
    #: steps turn into its own (S10).
    derived: Mapping[str, DerivedInput] = field(default_factory=dict)
    #: Per stage boundary the query writes (ADR 0023): its internal topic and, per LATENESS
    #: column of the table that reads it, the key of its waterline.
    punctuations: tuple[StagePunctuation, ...] = ()

    @property
    def table(self) -> Table:
        """The query's first table: its state directory holds the sink's id and markers."""
        return self.tables[0]

    @property
    def source(self) -> SourceSpec | None:
        """The source of a query of one table (the shapes that read slices have one)."""
        return self.sources[0] if len(self.sources) == 1 else None

    @property
    def writes_in_query(self) -> bool:
        """The aggregate's last-stage tasks write the query's records (ADR 0008)."""
        return self.query.writing_stage == "aggregate"

    @property
    def rereadable(self) -> bool:
        """The query is its gate rows alone, read twice instead of cached (ADR 0011)."""
        return self.query.batch == "reread"

    @property
    def slice_views(self) -> bool:
        """The source's tasks write every record; the query's rows are one ``message`` per
        source task, the JSON summary of what it did (ADR 0007)."""
        return self.query.writing_stage == "source"


def plan_query(
    spark: SparkSession,
    circuit: Circuit,
    query: QueryPlan,
    kafka_conf: Mapping[str, str],
    state_dirs: Mapping[str, str],
    max_records_per_step: int,
    stop_at: Mapping[str, Mapping[int, int]] | None = None,
    fail_on_data_loss: bool = True,
) -> TablePlan:
    """The streaming DataFrame of ``query`` (the physical plan's query of one table or of
    several), built as the plan places its views; nothing is decided here again.
    ``state_dirs`` and ``stop_at`` are per table."""
    tables = [circuit.table(name) for name in query.tables]
    several = len(tables) > 1
    views = [circuit.view(v.view) for v in query.views]
    placement = {v.view: v.placement for v in query.views}
    # Arrival coordinates ride along for ARG_MAX/ARG_MIN ties (earliest row wins); the
    # original record too when a view gate may have to write it back as a dead letter (L2).
    gated_views = [v for v in views if v.lateness]
    step_views = tuple(circuit.view(name) for name in query.placed("step_sink", "source_task"))
    in_query = query.writing_stage == "aggregate"
    slice_views = query.writing_stage == "source"
    assert not several or (query.shape, query.batch) == ("step_sink", "cached"), query.name
    owners = {v.state_owner for v in query.views if v.state_owner is not None}
    owners.update(_watermarked_tables(circuit, query))
    carried = ORIGIN_COLUMNS if gated_views else ("_step", "_partition", "_offset")
    specs: list[SourceSpec] = []
    sources: dict[str, DataFrame] = {}
    frames: dict[str, DataFrame] = {}
    for table in tables:
        spec = source_spec(table, ok_payload=bool(gated_views))
        specs.append(spec)
        limit = (stop_at or {}).get(table.name)
        source = (
            spark.readStream.format(KafkaSource.name())
            .option("spec", json.dumps(spec.to_json()))
            .option("kafka", json.dumps(dict(kafka_conf)))
            .option("state_dir", state_dirs[table.name])
            .option("record_slices", "true" if in_query else "false")
            # Its source tasks or the sink's own job write the dead letters (ADR 0008).
            .option("narrow", "true" if in_query else "false")
            .option("max_records_per_step", str(max_records_per_step))
            .option("stop_at", json.dumps({str(p): o for p, o in limit.items()}) if limit else "")
            .option("fail_on_data_loss", "true" if fail_on_data_loss else "false")
            .option(
                "startup",
                json.dumps(
                    {"mode": table.startup_mode, "timestamp_ms": table.startup_timestamp_ms}
                ),
            )
            .load()
        )
        log_start_position(
            table.name,
            table.topic,
            state_dirs[table.name],
            table.startup_mode,
            table.startup_timestamp_ms,
        )
        sources[table.name] = source
        accepted = source.filter(F.col("_kind").isin(*ACCEPTED, "probe"))
        if table.name in owners:
            if not table.lateness:
                raise TidemarkError(
                    f"table {table.name} has stateful views but no LATENESS column"
                )
            first = table.lateness[0]
            if table.stage_input is not None:
                accepted = bounded_watermark(
                    accepted, first.column, table.column(first.column).type.name == "TIMESTAMP"
                )
            elif table.column(first.column).type.name == "TIMESTAMP":
                accepted = with_watermark(accepted, first.column, first.amount)
            else:
                accepted = with_watermark(
                    accepted.withColumn(
                        "_event_time", F.expr(f"timestamp_millis(`{first.column}`)")
                    ),
                    "_event_time",
                    first.amount,
                )
        frames[table.name] = accepted.filter(F.col("_kind") == "ok").select(
            *table_columns(table), *carried
        )
    table = tables[0]
    branches: list[DataFrame] = []
    time_source: dict[str, str | None] = {}
    merged: dict[str, tuple[WaterlineInput, ...]] = {}
    derived: dict[str, DerivedInput] = {}
    aggregates: list[tuple[View, DataFrame]] = []
    punctuations: list[StagePunctuation] = []
    event_time = table.lateness[0].column if table.lateness else None
    produce = (
        partial(
            produce_step_output,
            conf=dict(kafka_conf),
            tables={table.name: table_units(table)},
        )
        if in_query
        else None
    )
    computed_per_step = {v.name for v in step_views}
    read = {source for view in views for source in view.sources}
    for view in views:
        inputs = frames
        if view_reads_now(view):
            # NOW() reads the step's batch time from its rows (processing_time.py).
            inputs = {**frames, **{s: with_batch_time(frames[s]) for s in view.sources}}
        if view.top_n is not None:
            frames[view.name] = top_n_rows(circuit, view, inputs[view.source])
        elif placement[view.name] == "native" and view.name in read:
            # S18: its readers see its final rows (a cascade of native aggregations).
            frames[view.name] = native_rows(
                view, inputs[view.source], cascade_depth(circuit, view)
            )
        else:
            join = view.join
            joined = None
            if join is not None and by_join_operator(join):
                joined = _operator_rows(circuit, join, frames, sources)
            over = partial(_over_rows, circuit, view, sources) if view.over else None
            frames[view.name] = view_frame(view, inputs, joined, over)
        if view.lateness:
            assert not several, view.name  # refused by check_supported
            gate = gated_view(
                frames[view.name],
                view_gate_spec(view, state_dirs[table.name]),
                table.name,
                table.dead_letter_topic,
                watermark=view.name in owners,
            )
            frames[view.name] = gate.rows
            branches.append(gate.not_accepted)
            if view.name in owners:
                event_time = gate.event_time
        if view.output is None:
            continue
        if several or circuit.union_upstream(view.name) is not None:
            keys = waterline_inputs(circuit, view)
            if not several:  # the one table's own map: its column names
                keys = tuple((key.split(".", 1)[1], lag) for key, lag in keys)
            keys = tuple(dict.fromkeys(keys))
            if len(keys) > 1 or any(lag for _, lag in keys):
                key = f"{view.name}.{view.time_attributes[0].column}"
                merged[key] = keys
                time_source[view.name] = key
            else:
                time_source[view.name] = keys[0][0] if keys else None
        else:
            time_source[view.name] = _time_key(circuit, view, table)
        steps = _first_time_steps(circuit, view, table, several)
        base = time_source[view.name]
        if steps and base is not None:
            key = f"{view.name}.{view.time_attributes[0].column}"
            derived[key] = (base, steps)
            time_source[view.name] = key
        if view.output.stage_output:
            punctuations.append(
                _stage_punctuation(circuit, view, table, several, merged, derived)
            )
        if view.name in computed_per_step:
            continue
        if view.top_n is not None:
            # Insert-only rows, final once written: encoded as a stateless view's (ADR 0020).
            enc = ViewEncoding.for_view(view)
            timed = frames[view.name].withColumn("_ptime", batch_time([enc.format]))
            encoded = partial(encode_view_rows, enc=enc)
            branches.append(
                timed.mapInArrow(encoded, SINK_SCHEMA)
                if produce is None
                else timed.mapInArrow(_producing(produce, encoded), SUMMARY_SCHEMA)
            )
            continue
        if placement[view.name] == "native":
            branches.append(
                native_branch(
                    view, inputs[view.source], produce, cascade_depth(circuit, view)
                )
            )
            continue
        if not view.is_stateless:
            aggregates.append((view, frames[view.name]))
            continue
        enc = ViewEncoding.for_view(view)
        branches.append(
            frames[view.name]
            .withColumn("_ptime", batch_time([enc.format]))
            .mapInArrow(partial(encode_view_rows, enc=enc), SINK_SCHEMA)
        )
    if aggregates:
        assert event_time is not None
        completions = {v.name: group_completion(circuit, v) for v, _ in aggregates}
        branches.append(aggregate_branch(aggregates, event_time, completions))
    assert (slice_views or query.batch == "reread") == (not branches), (query.name, query.shape)
    assert query.scans_once == (in_query and len(branches) == 1), (query.name, query.shape)
    if in_query:
        # ADR 0008: the query's rows are what its writing tasks wrote; the dead letters and
        # probes come from its source tasks or from a job of the step sink's own.
        frame = reduce(DataFrame.unionByName, branches)
        branches = []
    elif slice_views:
        # ADR 0007: each source task hands Spark one summary row of what it did with its slice.
        frame = sources[table.name].filter(F.col("_kind") == SLICE_SUMMARY).select(
            F.col("_message").alias("message")
        )
    else:
        frame = reduce(
            DataFrame.unionByName,
            [
                _table_gate_rows(
                    sources[t.name], t, carried_columns(t, step_views) if step_views else ()
                )
                for t in tables
            ],
        )
    if "row" in frame.columns:
        no_row = F.lit(None).cast(frame.schema["row"].dataType)
        branches = [branch.withColumn("row", no_row) for branch in branches]
    for branch in branches:
        frame = frame.unionByName(branch)
    return TablePlan(
        tuple(sink_table(t, [v for v in gated_views if not several]) for t in tables),
        tuple(state_dirs[t.name] for t in tables),
        frame,
        tuple(v for v in views if v.output is not None),
        time_source,
        step_views,
        tuple(specs),
        query,
        merged,
        derived,
        tuple(punctuations),
    )


def _producing(
    produce: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    encoded: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The records ``encoded`` makes, written by ``produce`` in the same pass (ADR 0008)."""
    return lambda batches: produce(encoded(batches))


def _operator_rows(
    circuit: Circuit, join: Join, frames: Mapping[str, DataFrame], sources: Mapping[str, DataFrame]
) -> DataFrame:
    """The rows of a join by Tidemark's operator (ADR 0017): each side's rows and its
    table's probes, whose column of the LATENESS column the join reads on that side holds
    the step's maximum (ADR 0001)."""
    probes: dict[str, DataFrame] = {}
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
        probes[side.source] = (
            sources[table.name].filter(F.col("_kind") == "probe").select(
                F.expr(ms_sql(read.column)).alias("t")
            )
        )
        lateness.append(read.amount)
    inputs = dict(frames)
    versioned = circuit.root_table(join.right.source)
    if join.as_of is not None and versioned.deletes_by_tombstone:
        # The deletions of its keys (tombstones) end versions; no other view reads them.
        inputs[join.right.source] = (
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
    return operator_joined(join, inputs, probes, spec)


def _over_rows(
    circuit: Circuit, view: View, sources: Mapping[str, DataFrame], rows: DataFrame
) -> DataFrame:
    """The rows of a view's OVER aggregates by Tidemark's OVER operator (ADR 0019), over the
    rows entering its Over and the probes of the table whose LATENESS column its ORDER BY
    column forwards (ADR 0001: their column holds the step's maximum)."""
    over = view.over
    assert over is not None, view.name
    found = join_time_source(circuit, view.source, over.order_column)
    assert found is not None, (view.name, "refused by check_supported")
    table = circuit.table(found[0])
    read = next(x for x in table.lateness if x.column == found[1])
    kind = table.column(read.column).type
    time = ms_sql(read.column) if time_unit(kind) == "ms" else f"cast(`{read.column}` as bigint)"
    probes = sources[table.name].filter(F.col("_kind") == "probe").select(
        F.expr(time).alias("t")
    )
    relation = (
        table if view.source == table.name else circuit.view(view.source)
    )
    columns = [c.name for c in relation.columns]
    spec = OverOperatorSpec.of(over, read.amount)
    return over_rows(over, rows, columns, probes, spec, kind)


def _table_gate_rows(
    source: DataFrame, table: Table, carry: Sequence[SparkColumn]
) -> DataFrame:
    """The sink rows of the table's gate: its dead letters and probes (and, with ``carry``,
    its accepted rows for the step views, app/runtime/step/step_views.py)."""
    return gate_rows(
        source,
        "_kind",
        table.name,
        table.dead_letter_topic,
        reason=F.col(TABLE_GATE["reason"]),
        message=TABLE_GATE["message"],
        late=(
            TABLE_GATE["late_column"],
            TABLE_GATE["late_value"],
            TABLE_GATE["late_waterline"],
        ),
        maxima=[
            (
                x.column,
                ms_sql(x.column)
                if time_unit(table.column(x.column).type) == "ms"
                else f"cast(`{x.column}` as bigint)",
            )
            for x in table.lateness
        ],
        accepted="_accepted",
        carry=carry,
    )


def waterline_inputs(circuit: Circuit, view: View) -> tuple[WaterlineInput, ...]:
    """S14 of a view over several relations: the table waterlines whose minimum (each less
    its lag) is the waterline of the view's first time attribute: several through a UNION
    ALL (S17) or a JOIN (its own side's, and the other side's less the bound, S16); none
    without a time attribute."""
    if not view.time_attributes:
        return ()
    return _attribute_inputs(circuit, view.time_attributes[0])


def _attribute_inputs(circuit: Circuit, attribute: TimeAttribute) -> tuple[WaterlineInput, ...]:
    if attribute.merged:
        return tuple(
            key for branch in attribute.merged for key in _attribute_inputs(circuit, branch)
        )
    if attribute.join is not None:
        held = attribute.join
        other = _attribute_inputs(circuit, held.other)
        return (
            *_attribute_inputs(circuit, held.own),
            *((key, lag + held.lag) for key, lag in other),
        )
    owner, column = attribute.table, attribute.source_column
    if any(t.name == owner for t in circuit.tables):
        return ((f"{owner}.{column}", 0),)
    upstream = next(a for a in circuit.view(owner).time_attributes if a.column == column)
    if upstream == attribute:
        raise TidemarkError(f"view {owner}: time attribute {column} has no waterline source")
    return _attribute_inputs(circuit, upstream)


def view_gate_spec(view: View, state_dir: str) -> ViewGateSpec:
    types = {c.name: c.type for c in view.columns}
    return ViewGateSpec(
        view.name,
        state_dir,
        tuple((x.column, x.amount, time_unit(types[x.column])) for x in view.lateness),
    )


def sink_table(table: Table, gated_views: list[View]) -> Table:
    """The table with each view LATENESS column as a ``"<view>.<column>"`` LATENESS column:
    what the step sink computes, stores and reports waterlines for (see :class:`TablePlan`)."""
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


def _time_key(circuit: Circuit, view: View, table: Table) -> str | None:
    """S14: the waterline key of the view's first time attribute (a table LATENESS column, or
    ``"<view>.<column>"`` for a view's own LATENESS), as the reference evaluator picks it."""
    found = _time_attribute_key(circuit, view, table)
    return None if found is None else found[0]


def _time_attribute_key(
    circuit: Circuit, view: View, table: Table
) -> tuple[str, TimeAttribute] | None:
    """:func:`_time_key` and the time attribute it is the key of."""
    for attr in view.time_attributes:
        if attribute_is_processing_time(circuit, attr):
            continue  # S14: a processing-time attribute publishes no waterline
        if attr.table == table.name:
            return attr.source_column, attr
        owner = circuit.view(attr.table) if attr.table in {v.name for v in circuit.views} else None
        if owner is not None and any(x.column == attr.source_column for x in owner.lateness):
            return waterline_key(owner.name, attr.source_column), attr
    return None


def _stage_punctuation(
    circuit: Circuit,
    view: View,
    table: Table,
    several: bool,
    merged: dict[str, tuple[WaterlineInput, ...]],
    derived: dict[str, DerivedInput],
) -> StagePunctuation:
    """The bounds a stage boundary ``view``'s punctuation carries: per LATENESS column of the
    table that reads it, the waterline of ``view``'s time attribute of that column in the
    query's map (a key of its own in ``merged`` or ``derived`` where it needs one)."""
    assert view.output is not None
    reader = next(t for t in circuit.tables if t.topic == view.output.topic)
    views = {v.name: v for v in circuit.views}
    columns = []
    for attr, steps in punctuated_columns(views, view, reader):
        found = None if several else _time_attribute_key(circuit, replace(
            view, time_attributes=(attr,)), table)
        if found is not None:
            key = found[0]
        else:
            keys = _attribute_inputs(circuit, attr)
            if not several:  # the one table's own map: its column names
                keys = tuple((k.split(".", 1)[1], lag) for k, lag in keys)
            keys = tuple(dict.fromkeys(keys))
            key = f"{view.name}.{attr.column}"
            if len(keys) == 1 and not keys[0][1]:
                key = keys[0][0]
            else:
                merged[key] = keys
        if steps:
            stepped = f"{view.name}.{attr.column}"
            derived[stepped] = (key, steps)
            key = stepped
        columns.append((attr.column, key))
    return StagePunctuation(view.name, view.output.topic, tuple(columns))


def _first_time_steps(
    circuit: Circuit, view: View, table: Table, several: bool
) -> tuple[WaterlineStep, ...]:
    """The steps of the time attribute whose waterline is the view's S14 waterline (the one
    :func:`_time_key` or :func:`waterline_inputs` picks): a derived attribute's, a
    ``window_start``'s window (S10); empty when it is its source column's."""
    if several or circuit.union_upstream(view.name) is not None:
        attr = view.time_attributes[0] if view.time_attributes else None
    else:
        found = _time_attribute_key(circuit, view, table)
        attr = None if found is None else found[1]
    if attr is None:
        return ()
    return attribute_steps({v.name: v for v in circuit.views}, view, attr)


def check_supported(circuit: Circuit, physical: PhysicalPlan) -> None:
    """Fail before Spark starts on what this runtime cannot run yet (named, never mis-run)."""
    problems = [problem for _, problem in refusals(circuit, physical)]
    if problems:
        raise ProgramError(problems)


def refused_by_spark(circuit: Circuit, physical: PhysicalPlan) -> tuple[str, ...]:
    """What :func:`check_supported` would refuse, as text (for ``explain --physical``)."""
    return tuple(str(problem) for _, problem in refusals(circuit, physical))


def refusals(circuit: Circuit, physical: PhysicalPlan) -> list[tuple[str | None, Diagnostic]]:
    """What one query of the plan cannot run: per refused view its name (None: a table's
    problem, which no stage boundary changes) and why, with the fix."""
    problems: list[tuple[str | None, Diagnostic]] = []

    def reject(view: View, what: str, fix: str) -> None:
        problems.append((view.name,
            Diagnostic(
                "error",
                view.position,
                f"view {view.name}: {what} is not supported by the Spark runtime yet",
                fix,
            ))
        )

    for table in circuit.tables:
        if table.format not in ("avro", "avro-confluent", "json"):
            problems.append((None,
                Diagnostic(
                    "error",
                    table.position,
                    f"table {table.name}: format '{table.format}' is not read by the Spark runtime "
                    "yet (its records would be decoded as plain Avro)",
                    "produce schemaless Avro or JSON values and declare 'format' = 'avro' or "
                    "'json'",
                ))
            )
    overs = {v.name for v in circuit.views if v.over is not None}
    for view in circuit.views:
        nested = next((a for a in view.time_attributes if _derived_inside(a)), None)
        if nested is not None:
            # The step sink merges table waterlines less lags (S16, S17), not their steps.
            reject(
                view,
                f"the time attribute {nested.column}, a UNION ALL or JOIN of derived time "
                "attributes",
                "derive the time attribute after the UNION ALL or JOIN; the reference "
                "evaluator runs it (tidemark explain shows the plan)",
            )
        problem = _processing_time_problem(circuit, view)
        if problem is not None:
            reject(view, *problem)
            continue
        if view.top_n is not None:
            ranking = top_n_problem(circuit, view)
            if ranking is not None or len(physical.query_of(view.name).tables) > 1:
                reject(
                    view,
                    f"this window Top-N ({view.top_n.function}() OVER ... <= "
                    f"{view.top_n.limit})",
                    ranking or "rank the rows of one table's query",
                )
            continue
        if any(circuit.view(s).top_n is not None for s in view.sources
               if s not in {t.name for t in circuit.tables}):
            reject(
                view,
                "a view over a window Top-N view",
                "write the Top-N's own SELECT list and WHERE in its view; the reference "
                "evaluator runs it (tidemark explain shows the plan)",
            )
            continue
        read = next((s for s in view.sources if s in overs), None)
        if read is not None:
            reject(
                view,
                f"reading the OVER view {read}",
                f"compute these columns in {read}'s own SELECT; the reference evaluator runs "
                "the others",
            )
            continue
        if view.over is not None:
            problem = _over_problem(circuit, view)
            if problem is not None:
                reject(view, *problem)
            continue
        if view.union is not None:
            # A branch's pipeline runs over its source's rows in the query; an aggregate's
            # rows exist only past its state operator, so the union reads them through a
            # stage boundary (ADR 0023).
            tables = {t.name for t in circuit.tables}
            held = next((b.source for b in view.union.branches
                         if b.source not in tables
                         and not circuit.view(b.source).is_stateless), None)
            if held is not None:
                reject(
                    view,
                    f"a UNION ALL branch over the aggregate view {held} in its query",
                    "the planner reads it through a stage boundary (docs/language.md)",
                )
                continue
        join = circuit.join_upstream(view.name)
        if join == view.name:
            problem = _join_problem(circuit, view)
            if problem is not None:
                reject(view, *problem)
        elif join is not None and not view.is_stateless:
            reject(
                view,
                f"an aggregate over the JOIN view {join}",
                "the reference evaluator runs it (tidemark explain shows the plan)",
            )
        several = len(physical.query_of(view.name).tables) > 1
        if several and view.lateness:
            reject(
                view,
                "LATENESS on a view of a query of several tables (a UNION ALL's)",
                "declare LATENESS on the tables",
            )
        native = physical.placement(view.name).placement == "native"
        if session_windowed(view) and not native:
            reject(
                view,
                "this SESSION window aggregate",
                "Spark's session_window runs a SESSION over a table's first LATENESS column "
                "(a TIMESTAMP) with COUNT, SUM, MIN or MAX, its rows read by no other "
                "view's window; the reference evaluator runs the others",
            )
            continue
        merged = union_time_tables(circuit, view) if native else None
        alone = (
            native
            and merged is None
            and _watermarked_tables(circuit, physical.query_of(view.name))
            == (circuit.root_table(view.name).name,)
        )
        if several and not view.is_stateless and merged is None and not alone:
            # Spark's one watermark is the minimum of every watermarked table's: a native
            # aggregate of one table runs where no other table carries one (its readers
            # are Tidemark's join operators, ADR 0017).
            reject(
                view,
                "this aggregate in a query of several tables (over a UNION ALL, or beside one)",
                "a windowed EMIT AFTER WATERMARK view with COUNT, SUM, MIN or MAX over a UNION "
                "ALL of tables, windowed on each table's first LATENESS column, runs on Spark "
                "(docs/semantics.md)",
            )
        if merged is not None:
            watermarked = _watermarked_tables(circuit, physical.query_of(view.name))
            if set(watermarked) != set(merged):
                # Spark's one watermark is the minimum of every watermarked table's.
                reject(
                    view,
                    f"an aggregate over a UNION ALL of {', '.join(merged)} in a query whose "
                    f"watermark also follows {', '.join(sorted(set(watermarked) - set(merged)))}",
                    "aggregate a UNION ALL of every table the query's joins read, or give the "
                    "other tables' views a program of their own",
                )
        if circuit.union_upstream(view.name) is not None:
            continue
        table = circuit.root_table(view.name)
        if view.lateness and not view.is_stateless:
            reject(view, "LATENESS on an aggregate view's column", "declare it on its input")
        if (
            view.source != table.name
            and not circuit.view(view.source).is_stateless
            and not native
        ):
            reject(
                view,
                f"reading the aggregate view {view.source} this way",
                "a windowed EMIT AFTER WATERMARK view with COUNT, SUM, MIN or MAX over the "
                "window end of another such view (no HAVING, plain columns in its SELECT) "
                "runs on Spark (docs/semantics.md, cascades)",
            )
        if view.is_stateless or native:
            continue
        owner = physical.placement(view.name).state_owner
        assert owner is not None, view.name
        first = first_lateness(circuit, owner)
        inputs = input_attributes(circuit, view.source)
        for op in view.operators:
            if not isinstance(op, Window) or op.time_column == first or op.processing_time:
                continue
            attr = inputs.get(op.time_column)
            if attr is None or not attr.steps or not _follows(attr, owner, first):
                reject(
                    view,
                    f"a window on {op.time_column} (state is freed by the waterline "
                    f"of the first LATENESS column of {owner})",
                    f"window on the first LATENESS column of {owner}, or on a derived "
                    "time attribute of it (e.g. its + INTERVAL)",
                )
        completion = group_completion(circuit, view)
        # A derived key, or any time attribute key without a window: the state operator
        # completes its groups by the threshold on the watermark (ADR 0021).
        by_threshold = completion is not None and (
            bool(completion.attribute.steps)
            or completion.attribute.kind not in ("window_start", "window_end")
        )
        if by_threshold and completion is not None and not _follows(
            completion.attribute, owner, first
        ):
            reject(
                view,
                f"a GROUP BY on a time attribute of {completion.attribute.table}."
                f"{completion.attribute.source_column} (state is freed by the waterline of "
                f"the first LATENESS column of {owner})",
                f"group by the first LATENESS column of {owner}, or a derived time "
                "attribute of it (e.g. CEIL(c TO DAY))",
            )
        if view.state.kind == "window" and not by_threshold and window_key_index(view) is None:
            # The state operator reads a group's window end from the view's own window.
            reject(
                view,
                f"an aggregate by the window bounds of {view.source}'s rows (its window "
                "computed in another view)",
                "window in the aggregate's own query: FROM TABLE(TUMBLE(TABLE t, ...)), "
                "HOP or CUMULATE, GROUP BY window_start, window_end",
            )
    for query in physical.queries:
        # Spark's state follows a watermark, which a table without LATENESS does not have.
        stateful = {v.state_owner for v in query.views if v.state_owner is not None}
        stateful.update(_watermarked_tables(circuit, query))
        for name in query.tables:
            holder = next((v.view for v in query.views if v.state_owner == name),
                          query.views[0].view if query.views else None)
            if holder is None:
                continue
            named = any(refused == holder for refused, _ in problems)
            if name in stateful and not circuit.table(name).lateness and not named:
                reject(
                    circuit.view(holder),
                    f"state over table {name}, which has no LATENESS column",
                    f"declare LATENESS on the event-time column of {name} (NOT NULL "
                    "TIMESTAMP ... LATENESS INTERVAL ...); the reference evaluator runs it",
                )
        # A native aggregate over a UNION ALL follows the query's watermark (checked above).
        owners = sorted(
            {
                v.state_owner
                for v in query.views
                if v.state_owner is not None
                and not (v.placement == "native" and _over_union(circuit, v.view))
            }
        )
        if len(owners) > 1:
            # Spark keeps one watermark per query.
            reject(
                circuit.view(query.views[0].view),
                f"aggregate views of {', '.join(query.tables)} freed by different waterlines "
                f"({', '.join(owners)})",
                "aggregate over one time source per table",
            )
    return problems


def _derived_inside(attribute: TimeAttribute) -> bool:
    """Whether a UNION ALL or JOIN time attribute has a derived input (at any depth)."""
    inputs = list(attribute.merged)
    if attribute.join is not None:
        inputs += [attribute.join.own, attribute.join.other]
    return any(bool(a.steps) or _derived_inside(a) for a in inputs)


def _follows(attribute: TimeAttribute, owner: str, first: str | None) -> bool:
    """Whether ``attribute``'s waterline is (a function of) ``owner``'s first LATENESS
    column's, the one Spark's watermark follows: not a UNION ALL's or a JOIN's."""
    return (
        (attribute.table, attribute.source_column) == (owner, first)
        and not attribute.merged
        and attribute.join is None
    )


def _processing_time_problem(circuit: Circuit, view: View) -> tuple[str, str] | None:
    """What keeps a view that uses processing time off Spark, as (what, fix), or None."""
    aggregate = next((op for op in view.operators if isinstance(op, Aggregate)), None)
    if aggregate is not None:
        after = view.operators[view.operators.index(aggregate) + 1 :]
        if any(reads_now(e) for op in after for e in operator_expressions(op)):
            return (
                "NOW() in HAVING or the SELECT list of an aggregate (its value would be the "
                "step in which Spark next calls the group)",
                "select NOW() in a view that reads this view, or use a PROCTIME() column",
            )
    several = view.join is not None or view.union is not None
    attributes = [a for a in view.time_attributes if attribute_is_processing_time(circuit, a)]
    if several and (attributes or view_reads_now(view)):
        what = "a JOIN" if view.join is not None else "a UNION ALL"
        return (
            f"processing time (a PROCTIME() column or NOW()) in {what}",
            "forward event-time columns through the join or union and use processing time "
            "in a view that reads it; the reference evaluator runs it",
        )
    windowed = any(isinstance(op, Window) and op.processing_time for op in view.operators)
    if windowed and not view.is_stateless:
        try:
            table = circuit.root_table(view.name)
        except ValueError:
            return None  # over a UNION ALL: refused with the union
        if not table.lateness:
            return (
                f"a processing-time window of table {table.name}, which has no LATENESS "
                "column (its query runs Spark's watermark on one)",
                f"add LATENESS to an event-time column of {table.name}",
            )
    return None


def _over_union(circuit: Circuit, view: str) -> bool:
    return union_time_tables(circuit, circuit.view(view)) is not None


def _watermarked_tables(circuit: Circuit, query: QueryPlan) -> tuple[str, ...]:
    """The query's tables that carry Spark's watermark (whose minimum is the query's): each
    table that owns an aggregate's state, the tables of a join's time bound (the watermark
    frees the join's state, S16), and the tables of a native aggregate over a UNION ALL."""
    found = [v.state_owner for v in query.views if v.state_owner in query.tables]
    for entry in query.views:
        view = circuit.view(entry.view)
        join = view.join
        if join is not None and join.bound is not None and not by_join_operator(join):
            # Tidemark's join operator reads each table's waterline from its probes.
            for side, column in (
                (join.left, join.bound.left_column),
                (join.right, join.bound.right_column),
            ):
                time = join_time_source(circuit, side.source, column, join.form == "window")
                if time is not None:
                    found.append(time[0])
        if entry.placement == "native":
            found.extend(union_time_tables(circuit, view) or ())
    return tuple(t for t in query.tables if t in found)


def _join_problem(circuit: Circuit, view: View) -> tuple[str, str] | None:
    """What keeps a JOIN view off Spark, as (what, fix), or None: Spark's stream-stream join
    runs an INNER interval join of two tables (or views over them) bounded on each table's
    first LATENESS column, a TIMESTAMP (whose watermark frees the join's state), an INNER
    window join of windows on those columns (bounded on ``window_end``), and an INNER join
    without a time bound (whose state is never freed); Tidemark's own operator runs such an
    interval or window join as LEFT, RIGHT or FULL OUTER, bounded on (or windowed on) any
    LATENESS column of each table, and a temporal join AS OF any LATENESS column of the
    probe table (:mod:`app.runtime.operators.join_operator`)."""
    join = next(op for op in view.operators if isinstance(op, Join))
    fix = (
        "an INNER interval or window join on each table's first LATENESS column, an OUTER "
        "one on any of them, an INNER join without a time bound, or a temporal join AS OF a "
        "LATENESS column of the probe table runs on Spark; "
        "the reference evaluator runs the others (tidemark explain shows the plan)"
    )
    if join.as_of is not None:
        aggregate = next(
            (v for v in circuit.views if v.name == join.left.source and not v.is_stateless),
            None,
        )
        if aggregate is not None and not (
            is_native(circuit, aggregate) and joined_on_window_end(view, aggregate)
        ):
            return (
                f"a temporal join AS OF {join.left.qualified(join.as_of.probe_column)}",
                fix,
            )
        # The final rows of a native aggregate, AS OF their window's end (seed 004's daily
        # sums): their window is on the table's first LATENESS column.
        found = join_time_source(
            circuit, join.left.source, join.as_of.probe_column, aggregate is not None
        )
        probe = _on_first_lateness(circuit, found, any_lateness=aggregate is None)
        versions = circuit.root_table(join.right.source)
        if probe is None:
            return (
                "a temporal join AS OF "
                f"{join.left.qualified(join.as_of.probe_column)}",
                fix,
            )
        if versions.column(join.as_of.version_column).type.name != "TIMESTAMP":
            return f"a temporal join of versions by {join.as_of.version_column}", fix
        if probe.name == versions.name:
            return f"a temporal join of table {probe.name} with itself", fix
        return None
    if join.kind != "inner" and join.form not in ("interval", "window"):
        return f"a {join.kind.upper()} OUTER {join.form} join", fix
    if join.form == "regular":
        # Spark keeps every row of both sides, as S16 does (an L7 warning).
        try:
            roots = [circuit.root_table(side.source).name for side in (join.left, join.right)]
        except ValueError:
            return "a join over a UNION ALL", fix
        if roots[0] == roots[1]:
            return f"a join of table {roots[0]} with itself", fix
        return None
    if join.bound is None:
        return f"a {join.form} join", fix
    tables: list[str] = []
    aggregated = False
    for side, column in (
        (join.left, join.bound.left_column),
        (join.right, join.bound.right_column),
    ):
        source = next((v for v in circuit.views if v.name == side.source), None)
        if source is not None and not source.is_stateless:
            # The final rows of a native aggregate, bounded on its window's end (Q7 as a
            # join): their window carries Spark's event time (view_frame._joined). One side.
            if aggregated or join.kind != "inner" or not (
                is_native(circuit, source) and joined_on_window_end(view, source)
            ):
                return f"a join bound on {side.qualified(column)}", fix
            aggregated = True
            continue
        table = _on_first_lateness(
            circuit,
            join_time_source(circuit, side.source, column, join.form == "window"),
            any_lateness=by_join_operator(join),
        )
        if table is None:
            return f"a join bound on {side.qualified(column)}", fix
        tables.append(table.name)
    if len(tables) == 2 and tables[0] == tables[1]:
        return f"a join of table {tables[0]} with itself", fix
    return None


def _over_problem(circuit: Circuit, view: View) -> tuple[str, str] | None:
    """What keeps an OVER view off Spark, as (what, fix), or None: Tidemark's OVER operator
    runs one over a table, or over stateless views of one table, ordered by a LATENESS
    column of the table forwarded verbatim (ADR 0019)."""
    over = view.over
    assert over is not None, view.name
    fix = (
        "OVER aggregates over a table, or over views that filter or rename its columns, "
        "ordered by a LATENESS column of the table, run on Spark; the reference evaluator "
        "runs the others"
    )
    relation = view.source
    while relation not in {t.name for t in circuit.tables}:
        source = circuit.view(relation)
        if not source.is_stateless or source.join is not None or source.over is not None:
            return f"OVER aggregates over the view {relation}", fix
        if len(source.sources) > 1 or any(isinstance(op, Window) for op in source.operators):
            return f"OVER aggregates over the view {relation}", fix
        relation = source.source
    if join_time_source(circuit, view.source, over.order_column) is None:
        return f"OVER aggregates ordered by {over.order_column}", fix
    return None


def _on_first_lateness(
    circuit: Circuit, found: tuple[str, str] | None, any_lateness: bool = False
) -> Table | None:
    """The table of ``found`` (table, column) if the column is the table's first LATENESS
    column (with ``any_lateness``, any of its LATENESS columns) and a TIMESTAMP: the
    waterline a join on Spark follows (Spark's watermark follows the first; the join
    operator reads any column's from the probes); else None."""
    if found is None:
        return None
    table = circuit.table(found[0])
    columns = [x.column for x in table.lateness]
    if found[1] not in (columns if any_lateness else columns[:1]):
        return None
    return table if table.column(found[1]).type.name == "TIMESTAMP" else None


def join_time_source(
    circuit: Circuit, relation: str, column: str, window_end: bool = False
) -> tuple[str, str] | None:
    """The (table, column) a relation's column forwards verbatim, or None; with
    ``window_end``, the (table, column) whose windows the relation's ``window_end`` column
    (forwarded verbatim) ends."""
    while not any(t.name == relation for t in circuit.tables):
        view = circuit.view(relation)
        attr = next((a for a in view.time_attributes if a.column == column), None)
        if attr is None or attr.merged or attr.join is not None:
            return None
        if window_end and attr.kind == "window_end":
            return join_time_source(circuit, attr.table, attr.source_column)
        if attr.kind != "forwarded":
            return None
        relation, column = attr.table, attr.source_column
    return None if window_end else (relation, column)


def table_units(table: Table) -> dict[str, Any]:
    return {
        "topic": table.topic,
        "units": {x.column: time_unit(table.column(x.column).type) for x in table.lateness},
    }
