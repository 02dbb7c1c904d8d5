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

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial, reduce

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.circuit.derived_time import group_completion
from app.circuit.ir import Circuit, Table, View
from app.circuit.processing_time import view_reads_now
from app.connectors.late_gate import SourceSpec
from app.connectors.sink import SUMMARY_SCHEMA
from app.connectors.sink.record import SINK_SCHEMA
from app.runtime.operators.aggregate import aggregate_branch
from app.runtime.operators.join_operator import join_operator_rows
from app.runtime.operators.join_support import by_join_operator
from app.runtime.operators.native_aggregate import native_branch, native_rows
from app.runtime.operators.native_aggregate_support import cascade_depth
from app.runtime.operators.over_operator import view_over_rows
from app.runtime.operators.source import (
    SourceRead,
    source_spec,
    table_gate_rows,
    table_rows,
    table_source,
)
from app.runtime.operators.top_n import top_n_rows
from app.runtime.operators.view_frame import batch_time, view_frame, with_batch_time
from app.runtime.operators.view_gate import ORIGIN_COLUMNS, gated_view, sink_table, view_gate_spec
from app.runtime.planner.physical import QueryPlan, watermarked_tables
from app.runtime.planner.waterline_keys import (
    StagePunctuation,
    WaterlineInput,
    query_waterlines,
    table_units,
)
from app.runtime.step.encode import ViewEncoding, encode_view_rows
from app.runtime.step.query_writes import produce_step_output
from app.runtime.step.step_orders import SLICE_SUMMARY
from app.runtime.step.step_views import carried_columns
from app.runtime.step.view_waterlines import DerivedInput

__all__ = ["TablePlan", "plan_query"]

Records = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


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
    #: The views the step sink computes over the step's accepted rows
    #: (app/runtime/step/step_views.py), or, in a ``query_writes`` query, the source's own
    #: tasks over the slice's Arrow columns (app/runtime/step/slice_writers.py, ADR 0007).
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


@dataclass
class _Parts:
    """A query's parts as its views are built, in the circuit's order: each relation's rows,
    the sink rows so far, the aggregates the state operator computes, and the column that
    carries Spark's watermark into it."""

    frames: dict[str, DataFrame]
    branches: list[DataFrame] = field(default_factory=list)
    aggregates: list[tuple[View, DataFrame]] = field(default_factory=list)
    event_time: str | None = None


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
    assert not several or (query.shape, query.batch) == ("step_sink", "cached"), query.name
    views = [circuit.view(v.view) for v in query.views]
    gated_views = [v for v in views if v.lateness]
    step_views = tuple(circuit.view(name) for name in query.placed("step_sink", "source_task"))
    in_query = query.writing_stage == "aggregate"
    # The views whose waterline frees state, and the tables that carry Spark's watermark.
    owners = {v.state_owner for v in query.views
              if v.state_owner is not None and v.state_owner not in query.tables}
    owners.update(watermarked_tables(circuit, query))
    # Arrival coordinates ride along for ARG_MAX/ARG_MIN ties (earliest row wins); the
    # original record too when a view gate may have to write it back as a dead letter (L2).
    carried = ORIGIN_COLUMNS if gated_views else ("_step", "_partition", "_offset")
    read = SourceRead(kafka_conf, max_records_per_step, stop_at or {}, fail_on_data_loss)
    specs = [source_spec(table, ok_payload=bool(gated_views)) for table in tables]
    sources: dict[str, DataFrame] = {}
    parts = _Parts({})
    for table, spec in zip(tables, specs, strict=True):
        source = table_source(spark, table, spec, state_dirs[table.name], read, in_query)
        sources[table.name] = source
        parts.frames[table.name] = table_rows(source, table, table.name in owners, carried)
        if any(circuit.view(v.view).reads_deletions for v in query.views):
            # The latest row per key of a changelog table reads its deletions (ADR 0030).
            parts.frames[deletions_of(table.name)] = table_rows(
                source, table, table.name in owners, carried, deletions=True
            )
    table = tables[0]
    parts.event_time = table.lateness[0].column if table.lateness else None
    produce = (
        partial(produce_step_output, conf=dict(kafka_conf), tables={table.name: table_units(table)})
        if in_query
        else None
    )
    _build_views(circuit, query, sources, parts, state_dirs[table.name], owners, produce)
    if parts.aggregates:
        completions = {v.name: group_completion(circuit, v) for v, _ in parts.aggregates}
        parts.branches.append(aggregate_branch(parts.aggregates, parts.event_time, completions))
    waterlines = query_waterlines(circuit, query)
    return TablePlan(
        tuple(sink_table(t, [v for v in gated_views if not several]) for t in tables),
        tuple(state_dirs[t.name] for t in tables),
        _query_frame(query, tables, sources, step_views, parts.branches),
        tuple(v for v in views if v.output is not None),
        waterlines.time_source,
        step_views,
        tuple(specs),
        query,
        waterlines.merged,
        waterlines.derived,
        waterlines.punctuations,
    )


def _build_views(
    circuit: Circuit,
    query: QueryPlan,
    sources: Mapping[str, DataFrame],
    parts: _Parts,
    state_dir: str,
    owners: set[str],
    produce: Records | None,
) -> None:
    """Each view's rows into ``parts.frames`` and, for an output view the query computes,
    its sink rows into ``parts.branches`` (or ``parts.aggregates``), in the circuit's order:
    a view comes after the views it reads."""
    table = circuit.table(query.tables[0])
    placement = {v.view: v.placement for v in query.views}
    per_step = set(query.placed("step_sink", "source_task"))
    read = {source for entry in query.views for source in circuit.view(entry.view).sources}
    for entry in query.views:
        view = circuit.view(entry.view)
        inputs = _inputs(view, parts.frames)
        native = placement[view.name] == "native"
        parts.frames[view.name] = _view_rows(
            circuit, view, native and view.name in read, inputs, parts.frames, sources
        )
        if view.lateness:
            assert len(query.tables) == 1, view.name  # refused by check_supported
            gate = gated_view(
                parts.frames[view.name],
                view_gate_spec(view, state_dir),
                table.name,
                table.dead_letter_topic,
                watermark=view.name in owners,
            )
            parts.frames[view.name] = gate.rows
            parts.branches.append(gate.not_accepted)
            if view.name in owners:
                parts.event_time = gate.event_time
        if view.output is None or view.name in per_step:
            continue
        if view.top_n is None and not native and not view.is_stateless:
            parts.aggregates.append((view, parts.frames[view.name]))
        else:
            parts.branches.append(
                _output_rows(circuit, view, native, parts.frames[view.name], inputs, produce)
            )


def deletions_of(table: str) -> str:
    """The name of ``table``'s rows and deletions among a query's frames (a '.' and a '#':
    no relation's name, app/program/subqueries.py)."""
    return f"{table}.#deletions"


def _inputs(view: View, frames: Mapping[str, DataFrame]) -> Mapping[str, DataFrame]:
    """The relations' rows as ``view`` reads them: NOW() reads the step's batch time from
    its rows (processing_time.py); a changelog table's latest row per key reads its table's
    deletions too (ADR 0030)."""
    if view.reads_deletions:
        return {**frames, view.source: frames[deletions_of(view.source)]}
    if not view_reads_now(view):
        return frames
    return {**frames, **{s: with_batch_time(frames[s]) for s in view.sources}}


def _view_rows(
    circuit: Circuit,
    view: View,
    native_read: bool,
    inputs: Mapping[str, DataFrame],
    frames: Mapping[str, DataFrame],
    sources: Mapping[str, DataFrame],
) -> DataFrame:
    """The rows of ``view`` as its readers see them: a Top-N's ranked rows, a native
    aggregate's final rows when another view reads them (``native_read``: a cascade, S18),
    else the view's Spark DataFrame operations, a join or OVER by Tidemark's operators
    included."""
    if view.top_n is not None:
        return top_n_rows(circuit, view, inputs[view.source])
    if native_read:
        return native_rows(view, inputs[view.source], cascade_depth(circuit, view))
    join = view.join
    joined = None
    if join is not None and by_join_operator(join):
        joined = join_operator_rows(circuit, join, frames, sources)
    over = partial(view_over_rows, circuit, view, sources) if view.over else None
    return view_frame(view, inputs, joined, over)


def _output_rows(
    circuit: Circuit,
    view: View,
    native: bool,
    rows: DataFrame,
    inputs: Mapping[str, DataFrame],
    produce: Records | None,
) -> DataFrame:
    """The sink rows of an output view the query computes without the state operator: a
    Top-N's, a native aggregate's, or a stateless view's, encoded (and, with ``produce``,
    written by the query's own tasks, ADR 0008)."""
    if view.top_n is not None:
        # Insert-only rows, final once written: encoded as a stateless view's (ADR 0020).
        enc = ViewEncoding.for_view(view)
        timed = rows.withColumn("_ptime", batch_time([enc.format]))
        encoded = partial(encode_view_rows, enc=enc)
        if produce is None:
            return timed.mapInArrow(encoded, SINK_SCHEMA)
        return timed.mapInArrow(_producing(produce, encoded), SUMMARY_SCHEMA)
    if native:
        return native_branch(view, inputs[view.source], produce, cascade_depth(circuit, view))
    enc = ViewEncoding.for_view(view)
    return rows.withColumn("_ptime", batch_time([enc.format])).mapInArrow(
        partial(encode_view_rows, enc=enc), SINK_SCHEMA
    )


def _query_frame(
    query: QueryPlan,
    tables: Sequence[Table],
    sources: Mapping[str, DataFrame],
    step_views: Sequence[View],
    branches: list[DataFrame],
) -> DataFrame:
    """The query's sink rows: its gate rows (dead letters, probes and the step views' rows)
    and ``branches``; or what its own writing tasks hand Spark (ADR 0007, 0008)."""
    in_query = query.writing_stage == "aggregate"
    slice_views = query.writing_stage == "source"
    assert (slice_views or query.batch == "reread") == (not branches), (query.name, query.shape)
    assert query.scans_once == (in_query and len(branches) == 1), (query.name, query.shape)
    if in_query:
        # ADR 0008: the query's rows are what its writing tasks wrote; the dead letters and
        # probes come from its source tasks or from a job of the step sink's own.
        frame = reduce(DataFrame.unionByName, branches)
        branches = []
    elif slice_views:
        # ADR 0007: each source task hands Spark one summary row of what it did with its slice.
        frame = sources[tables[0].name].filter(F.col("_kind") == SLICE_SUMMARY).select(
            F.col("_message").alias("message")
        )
    else:
        frame = reduce(
            DataFrame.unionByName,
            [
                table_gate_rows(
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
    return frame


def _producing(produce: Records, encoded: Records) -> Records:
    """The records ``encoded`` makes, written by ``produce`` in the same pass (ADR 0008)."""
    return lambda batches: produce(encoded(batches))
