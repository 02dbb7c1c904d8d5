"""A table in its query: the Tidemark Kafka source Spark reads it with, its watermark, and
the sink rows of its gate.

The source (:mod:`app.runtime.step.source_reader`, ``tidemark-kafka``) decodes each slice
behind the table's LateGate and hands the query one row per accepted record, dead letter
and probe (``_kind``). A table whose waterline frees state in its query (it owns an
aggregate's state, or bounds a join or a native aggregate over a UNION ALL) carries Spark's
watermark on its first LATENESS column, fed by its probe rows (ADR 0001): Spark's watermark
is then the table's waterline. Dead letters and probes leave the query as the gate's sink
rows (:func:`table_gate_rows`), once per table however many views read it (S6).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from app.circuit.computed_columns import expr_to_json
from app.circuit.ir import DELETION_COLUMN, SqlType, Table
from app.connectors.late_gate import ACCEPTED, SourceColumn, SourceSpec
from app.errors import TidemarkError
from app.runtime.operators.view_frame import ms_sql, table_columns
from app.runtime.operators.view_gate import bounded_watermark, with_watermark
from app.runtime.planner.waterline_keys import time_unit
from app.runtime.step.sink_rows import TABLE_GATE, gate_rows
from app.runtime.step.source_reader import KafkaSource, log_start_position

__all__ = ["SourceRead", "source_spec", "table_gate_rows", "table_rows", "table_source"]


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


def source_spec(table: Table, ok_payload: bool = True) -> SourceSpec:
    """What the source of ``table`` decodes and gates (``ok_payload``: accepted rows keep
    their original record, for a view gate that may write them back as dead letters)."""
    return SourceSpec(
        table=table.name,
        topic=table.topic,
        columns=tuple(
            SourceColumn(c.name, _kind(c.type), c.type.nullable, c.metadata,
                         None if c.computed is None else expr_to_json(c.computed.expr),
                         None if c.computed is None else c.computed.written)
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
        changes=table.stage_input is not None and table.retractions,
        key_format=table.key_format,
        key_fields=table.key_fields,
        key_schema=table.key_schema,
        primary_key=table.primary_key,
    )


@dataclass(frozen=True)
class SourceRead:
    """How a query's sources read their topics: the Kafka settings and the step's limits
    (``stop_at`` per table: the offsets a ``--once`` run stops at)."""

    kafka_conf: Mapping[str, str]
    max_records_per_step: int
    stop_at: Mapping[str, Mapping[int, int]]
    fail_on_data_loss: bool


def table_source(
    spark: SparkSession,
    table: Table,
    spec: SourceSpec,
    state_dir: str,
    read: SourceRead,
    in_query: bool,
) -> DataFrame:
    """The streaming rows of ``table``'s source (``in_query``: the aggregate's tasks write
    the query's records, and its source tasks or the sink's own job the dead letters,
    ADR 0008)."""
    limit = read.stop_at.get(table.name)
    source = (
        spark.readStream.format(KafkaSource.name())
        .option("spec", json.dumps(spec.to_json()))
        .option("kafka", json.dumps(dict(read.kafka_conf)))
        .option("state_dir", state_dir)
        .option("record_slices", "true" if in_query else "false")
        # Its source tasks or the sink's own job write the dead letters (ADR 0008).
        .option("narrow", "true" if in_query else "false")
        .option("max_records_per_step", str(read.max_records_per_step))
        .option("stop_at", json.dumps({str(p): o for p, o in limit.items()}) if limit else "")
        .option("fail_on_data_loss", "true" if read.fail_on_data_loss else "false")
        .option(
            "startup",
            json.dumps({"mode": table.startup_mode, "timestamp_ms": table.startup_timestamp_ms}),
        )
        .load()
    )
    log_start_position(
        table.name, table.topic, state_dir, table.startup_mode, table.startup_timestamp_ms
    )
    return source


def table_rows(
    source: DataFrame,
    table: Table,
    watermarked: bool,
    carried: Sequence[str],
    deletions: bool = False,
) -> DataFrame:
    """The table's accepted rows as its views read them (its columns and ``carried``), with
    Spark's watermark on its first LATENESS column when ``watermarked``: the probe rows pass
    ``withWatermark`` before they are filtered out, so the watermark is the waterline.
    ``deletions``: its deletions too, each with :data:`DELETION_COLUMN` true, as the view of
    a changelog table's latest row per key reads them (ADR 0030)."""
    accepted = source.filter(F.col("_kind").isin(*ACCEPTED, "probe"))
    if watermarked:
        accepted = _with_table_watermark(accepted, table)
    if deletions:
        return accepted.filter(F.col("_kind").isin(*ACCEPTED)).select(
            *table_columns(table), *carried,
            (F.col("_kind") == "delete").alias(DELETION_COLUMN),
        )
    return accepted.filter(F.col("_kind") == "ok").select(*table_columns(table), *carried)


def _with_table_watermark(accepted: DataFrame, table: Table) -> DataFrame:
    if not table.lateness:
        raise TidemarkError(f"table {table.name} has stateful views but no LATENESS column")
    first = table.lateness[0]
    timestamp = table.column(first.column).type.name == "TIMESTAMP"
    if table.stage_input is not None:
        return bounded_watermark(accepted, first.column, timestamp)
    if timestamp:
        return with_watermark(accepted, first.column, first.amount)
    return with_watermark(
        accepted.withColumn("_event_time", F.expr(f"timestamp_millis(`{first.column}`)")),
        "_event_time",
        first.amount,
    )


def table_gate_rows(
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
