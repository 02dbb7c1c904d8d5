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
branch (:mod:`app.runtime.step_views`); the others, and the rows every aggregate reads, are
computed here. A view with its own LATENESS (L2, the decoding case) adds a second gate on its
rows (:mod:`app.runtime.view_gate`): its late rows join the table's dead letters, its probe
the table's probe, and its waterline is kept in the table's waterline files under
``"<view>.<column>"``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial, reduce
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.circuit.ir import (
    Circuit,
    Column,
    Diagnostic,
    Lateness,
    SqlType,
    Table,
    View,
    Window,
)
from app.connectors.late_gate import SourceColumn, SourceSpec
from app.connectors.sink.record import SINK_SCHEMA
from app.errors import ProgramError, TidemarkError
from app.runtime.aggregate import aggregate_branch
from app.runtime.encode import ViewEncoding, encode_view_rows
from app.runtime.native_aggregate import native_branch
from app.runtime.physical import PhysicalPlan, QueryPlan, first_lateness
from app.runtime.query_writes import produce_step_output
from app.runtime.sink_rows import TABLE_GATE, gate_rows
from app.runtime.source_reader import KafkaSource
from app.runtime.step_orders import SLICE_SUMMARY
from app.runtime.step_views import carried_columns
from app.runtime.view_frame import batch_time, ms_sql, view_frame
from app.runtime.view_gate import (
    ORIGIN_COLUMNS,
    ViewGateSpec,
    gated_view,
    kind_is,
    waterline_key,
)

__all__ = [
    "TablePlan",
    "check_supported",
    "plan_table",
    "refused_by_spark",
    "source_spec",
    "time_unit",
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


def time_unit(t: SqlType) -> TimeUnit:
    """'ms' for TIMESTAMP waterlines, 'integer' for INT/BIGINT ones."""
    return "ms" if t.name == "TIMESTAMP" else "integer"


def source_spec(table: Table, ok_payload: bool = True) -> SourceSpec:
    return SourceSpec(
        table=table.name,
        topic=table.topic,
        columns=tuple(SourceColumn(c.name, _kind(c.type), c.type.nullable) for c in table.columns),
        avro_schema=table.avro_schema,
        lateness=tuple((x.column, x.amount) for x in table.lateness),
        max_future_ms=table.max_future_ms,
        dead_letter_topic=table.dead_letter_topic,
        ok_payload=ok_payload,
        format=table.format,
        registry=table.schema_registry,
    )


@dataclass(frozen=True)
class TablePlan:
    """One table's streaming query: its sink rows and what the step sink must know.

    ``table`` is the table as its step sink keeps time: its own LATENESS columns, then one
    per LATENESS column of its views, named ``"<view>.<column>"`` (SPEC L2), so the sink
    computes, stores and reports the views' waterlines with the table's (S3, S14)."""

    table: Table
    frame: DataFrame
    output_views: tuple[View, ...]
    view_time_source: Mapping[str, str | None]  # output view -> waterline key of S14
    #: The views the step sink computes over the step's accepted rows (app/runtime/step_views),
    #: or, in a ``query_writes`` query, the source's own tasks over the slice's Arrow columns
    #: (app/runtime/slice_writers.py, ADR 0007).
    step_views: tuple[View, ...] = ()
    #: The table's source, as the query reads it (a job over its slices must read the same).
    source: SourceSpec | None = None
    #: The physical plan's query, whose step shape the step sink follows (ADR 0011).
    query: QueryPlan = QueryPlan("", ())

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


def plan_table(
    spark: SparkSession,
    circuit: Circuit,
    query: QueryPlan,
    table: Table,
    kafka_conf: Mapping[str, str],
    state_dir: str,
    max_records_per_step: int,
    stop_at: Mapping[int, int] | None = None,
) -> TablePlan:
    """The streaming DataFrame of ``query`` (the physical plan's query of ``table``), built
    as the plan places its views; nothing is decided here again."""
    views = [circuit.view(v.view) for v in query.views]
    placement = {v.view: v.placement for v in query.views}
    # Arrival coordinates ride along for ARG_MAX/ARG_MIN ties (earliest row wins); the
    # original record too when a view gate may have to write it back as a dead letter (L2).
    gated_views = [v for v in views if v.lateness]
    spec = source_spec(table, ok_payload=bool(gated_views))
    step_views = tuple(circuit.view(name) for name in query.placed("step_sink", "source_task"))
    in_query = query.writing_stage == "aggregate"
    source = (
        spark.readStream.format(KafkaSource.name())
        .option("spec", json.dumps(spec.to_json()))
        .option("kafka", json.dumps(dict(kafka_conf)))
        .option("state_dir", state_dir)
        .option("record_slices", "true" if in_query else "false")
        # Its source tasks or the sink's own job write the dead letters (ADR 0008).
        .option("narrow", "true" if in_query else "false")
        .option("max_records_per_step", str(max_records_per_step))
        .option("stop_at", json.dumps({str(p): o for p, o in stop_at.items()}) if stop_at else "")
        .load()
    )
    columns = [c.name for c in table.columns]
    owners = {v.state_owner for v in query.views if v.state_owner is not None}
    accepted = source.filter(F.col("_kind").isin("ok", "probe"))
    watermarked: str | None = None
    if table.name in owners:
        if not table.lateness:
            raise TidemarkError(f"table {table.name} has stateful views but no LATENESS column")
        first = table.lateness[0]
        col_type = table.column(first.column).type
        if col_type.name == "TIMESTAMP":
            watermarked = first.column
            accepted = accepted.withWatermark(first.column, f"{first.amount} milliseconds")
        else:
            watermarked = "_event_time"
            accepted = accepted.withColumn(
                "_event_time", F.expr(f"timestamp_millis(`{first.column}`)")
            ).withWatermark("_event_time", f"{first.amount} milliseconds")
    carried = ORIGIN_COLUMNS if gated_views else ("_step", "_partition", "_offset")
    rows = accepted.filter(kind_is("_kind", "ok", watermarked)).select(*columns, *carried)
    frames: dict[str, DataFrame] = {table.name: rows}
    branches: list[DataFrame] = []
    time_source: dict[str, str | None] = {}
    aggregates: list[tuple[View, DataFrame]] = []
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
    for view in views:
        frames[view.name] = view_frame(view, frames)
        if view.lateness:
            gate = gated_view(
                frames[view.name],
                view_gate_spec(view, state_dir),
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
        time_source[view.name] = _time_key(circuit, view, table)
        if view.name in computed_per_step:
            continue
        if placement[view.name] == "native":
            branches.append(native_branch(view, frames[view.source], produce))
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
        branches.append(aggregate_branch(aggregates, event_time))
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
        frame = source.filter(F.col("_kind") == SLICE_SUMMARY).select(
            F.col("_message").alias("message")
        )
    else:
        frame = gate_rows(
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
            carry=carried_columns(table, step_views) if step_views else (),
        )
    if "row" in frame.columns:
        no_row = F.lit(None).cast(frame.schema["row"].dataType)
        branches = [branch.withColumn("row", no_row) for branch in branches]
    for branch in branches:
        frame = frame.unionByName(branch)
    return TablePlan(
        sink_table(table, gated_views),
        frame,
        tuple(v for v in views if v.output is not None),
        time_source,
        step_views,
        spec,
        query,
    )


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
    for attr in view.time_attributes:
        if attr.table == table.name:
            return attr.source_column
        owner = circuit.view(attr.table) if attr.table in {v.name for v in circuit.views} else None
        if owner is not None and any(x.column == attr.source_column for x in owner.lateness):
            return waterline_key(owner.name, attr.source_column)
    return None


def check_supported(circuit: Circuit, physical: PhysicalPlan) -> None:
    """Fail before Spark starts on what this runtime cannot run yet (named, never mis-run)."""
    problems = _unsupported(circuit, physical)
    if problems:
        raise ProgramError(problems)


def refused_by_spark(circuit: Circuit, physical: PhysicalPlan) -> tuple[str, ...]:
    """What :func:`check_supported` would refuse, as text (for ``explain --physical``)."""
    return tuple(str(problem) for problem in _unsupported(circuit, physical))


def _unsupported(circuit: Circuit, physical: PhysicalPlan) -> list[Diagnostic]:
    problems: list[Diagnostic] = []

    def reject(view: View, what: str, fix: str) -> None:
        problems.append(
            Diagnostic(
                "error",
                view.position,
                f"view {view.name}: {what} is not supported by the Spark runtime yet",
                fix,
            )
        )

    for table in circuit.tables:
        if table.format not in ("avro", "avro-confluent", "json"):
            problems.append(
                Diagnostic(
                    "error",
                    table.position,
                    f"table {table.name}: format '{table.format}' is not read by the Spark runtime "
                    "yet (its records would be decoded as plain Avro)",
                    "produce schemaless Avro or JSON values and declare 'format' = 'avro' or "
                    "'json'",
                )
            )
    for view in circuit.views:
        join = circuit.join_upstream(view.name)
        if join is not None:
            reject(
                view,
                "JOIN" if join == view.name else f"reading the JOIN view {join}",
                "joins run in the reference evaluator only (tidemark explain shows the plan)",
            )
            continue
        union = circuit.union_upstream(view.name)
        if union is not None:
            reject(
                view,
                "UNION ALL" if union == view.name else f"reading the UNION ALL view {union}",
                "write one view per branch (each reads one table) until Spark runs UNION ALL",
            )
            continue
        table = circuit.root_table(view.name)
        if view.lateness and not view.is_stateless:
            reject(view, "LATENESS on an aggregate view's column", "declare it on its input")
        if view.source != table.name and not circuit.view(view.source).is_stateless:
            reject(view, "reading an aggregate view", "aggregate the table directly")
        if view.is_stateless:
            continue
        owner = physical.placement(view.name).state_owner
        assert owner is not None, view.name
        first = first_lateness(circuit, owner)
        for op in view.operators:
            if isinstance(op, Window) and op.time_column != first:
                reject(
                    view,
                    f"a window on {op.time_column} (state is freed by the waterline "
                    f"of the first LATENESS column of {owner})",
                    f"window on the first LATENESS column of {owner}",
                )
    for query in physical.queries:
        owners = sorted({v.state_owner for v in query.views if v.state_owner is not None})
        if len(owners) > 1:
            # Spark keeps one watermark per query.
            reject(
                circuit.view(query.views[0].view),
                f"aggregate views of {', '.join(query.tables)} freed by different waterlines "
                f"({', '.join(owners)})",
                "aggregate over one time source per table",
            )
    return problems


def table_units(table: Table) -> dict[str, Any]:
    return {
        "topic": table.topic,
        "units": {x.column: time_unit(table.column(x.column).type) for x in table.lateness},
    }
