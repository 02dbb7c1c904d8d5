"""The table's source as Spark sees it: a Python Data Source (``tidemark-kafka``) and its
stream reader.

When Spark plans step t, the reader takes the step's offsets from the connector
(:mod:`app.connectors.kafka_offsets`), loads w(t-1) from the step files
(:mod:`app.runtime.step.step_files`) and plans one input partition per Kafka partition with data
(a :class:`KafkaPartitionSlice`, which carries w(t-1) and the step's wall clock to the task).
Each task reads its slice through the slice cache (:mod:`app.runtime.step.slice_cache`: else
fetched and decoded by the connector, late gate included) and hands Spark what its job's
order asks (:mod:`app.runtime.step.step_orders`). The name and the options are what checkpoints
and the runtime's queries hold: they never change.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import structlog
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from app.connectors.kafka_offsets import (
    RETRY_SECONDS,
    initial_offset,
    latest_offset,
    partition_ends,
    past_log_start,
    startup_offsets,
    step_slices,
)
from app.connectors.kafka_source import KafkaPartitionSlice, arrow_schema, source_schema
from app.connectors.late_gate import SourceSpec
from app.runtime.step.slice_cache import cached_slice
from app.runtime.step.step_files import load_waterlines, record_planned_slices, write_atomically
from app.runtime.step.step_orders import StepOrder
from app.runtime.store import join, store_at

__all__ = ["INITIAL_OFFSET", "KafkaSource", "KafkaStreamReader", "log_start_position"]

log = structlog.get_logger("tidemark.source")

#: The file in a table's state directory that keeps the offsets its checkpoint started at.
INITIAL_OFFSET = "initial-offset.json"


def log_start_position(
    table: str, topic: str, state_dir: str, mode: str, timestamp_ms: int | None
) -> None:
    """Say where the source of ``table`` starts: a new checkpoint at its start position
    (``'scan.startup.mode'``), one that has started continues from its own offsets."""
    store = store_at(state_dir)
    started = store.exists(join(state_dir, INITIAL_OFFSET)) or bool(
        store.names(join(state_dir, "waterlines"))
    )
    if started:
        log.info("source.continues", table=table, topic=topic, ignored_startup_mode=mode)
    else:
        log.info("source.starts", table=table, topic=topic, startup_mode=mode,
                 startup_timestamp_ms=timestamp_ms)


class KafkaSource(DataSource):
    """``spark.readStream.format("tidemark-kafka")`` with options ``spec`` (SourceSpec JSON),
    ``kafka`` (librdkafka settings JSON), ``state_dir`` and ``max_records_per_step``; ``narrow``
    ("true") for a query that reads no dead-letter columns (``QUERY_META``); ``record_slices``
    ("true") to leave each step's planned slices in ``state_dir``; ``stop_at`` (JSON end
    offsets per partition) for ``tidemark run --once``; ``startup`` (JSON ``{"mode",
    "timestamp_ms"}``, a table's ``'scan.startup.mode'``) for where a new checkpoint starts;
    ``fail_on_data_loss`` ("false" to skip offsets deleted before a step read them,
    :func:`~app.connectors.kafka_offsets.latest_offset`)."""

    @classmethod
    def name(cls) -> str:
        return "tidemark-kafka"

    def schema(self) -> StructType | str:
        spec = SourceSpec.from_json(json.loads(self.options["spec"]))
        return source_schema(spec, narrow=self.options.get("narrow") == "true")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self.options)


class KafkaStreamReader(DataSourceStreamReader):
    #: How long the offset queries ride out a broker restart or a leader change.
    retry_seconds = RETRY_SECONDS

    def __init__(self, options: Mapping[str, str]) -> None:
        self.spec = SourceSpec.from_json(json.loads(options["spec"]))
        self.kafka_conf: dict[str, str] = json.loads(options["kafka"])
        self.state_dir = options["state_dir"]
        self.max_records = int(options.get("max_records_per_step", "200000"))
        # ``tidemark run --once``: never read past the end offsets seen at start.
        self.stop_at: dict[int, int] | None = (
            {int(p): int(o) for p, o in json.loads(options["stop_at"]).items()}
            if options.get("stop_at")
            else None
        )
        #: Offsets deleted before a step read them fail it, else are skipped (docs/reliability.md).
        self.fail_on_data_loss = options.get("fail_on_data_loss", "true") == "true"
        #: Where a new checkpoint starts (SPEC L1's ``'scan.startup.mode'``).
        self.startup: dict[str, Any] = json.loads(options.get("startup") or "{}")
        #: Leave each planned step's slices in ``state_dir`` (``PLANNED_SLICES``): the step
        #: sink of a plan that writes in its query reads them (ADR 0008).
        self.record_slices = options.get("record_slices") == "true"
        #: The columns handed to Spark when only the table's and ``QUERY_META`` are
        #: (``source_schema``); None: every column.
        self.narrow_columns: list[str] | None = (
            arrow_schema(self.spec, narrow=True).names if options.get("narrow") == "true" else None
        )

    def _partition_ends(self) -> dict[int, tuple[int, int]]:
        return partition_ends(
            self.kafka_conf, self.spec.topic, self.spec.table, self.stop_at, self.retry_seconds
        )

    def initialOffset(self) -> dict[str, Any]:
        """Where a checkpoint without a committed step starts, the same every time Spark asks:
        it asks again when it replays step 0, and a ``latest-offset`` start must not move to
        the topic's end of then. The first answer is kept in ``state_dir`` (INITIAL_OFFSET)."""
        kept = join(self.state_dir, INITIAL_OFFSET)
        text = store_at(kept).read_text(kept)
        if text is not None:
            found: dict[str, Any] = json.loads(text)
            if found.get("topic") == self.spec.topic:
                return found
        ends = self._partition_ends()
        starts = startup_offsets(
            self.kafka_conf,
            self.spec.topic,
            self.spec.table,
            ends,
            self.startup.get("mode", "earliest-offset"),
            self.startup.get("timestamp_ms"),
        )
        offset = initial_offset(ends, self.spec.topic, starts)
        write_atomically(kept, json.dumps(offset))
        return offset

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return latest_offset(
            start,
            self._partition_ends(),
            max_rows,
            self.spec.topic,
            self.fail_on_data_loss,
            self.spec.table,
        )

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        step = int(end["step"])
        # w(t-1) is loaded only for a step that reads data (a step without slices has none).
        waterlines = load_waterlines(self.state_dir, step) if step != int(start["step"]) else {}
        slices = step_slices(start, end, waterlines)
        if slices and not self.fail_on_data_loss:
            # A replayed step's offsets may have been deleted since it was planned.
            slices = past_log_start(slices, self._partition_ends())
        if self.record_slices:
            record_planned_slices(self.state_dir, slices)
        return slices

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaPartitionSlice)
        batches = cached_slice(self.spec, self.kafka_conf, self.state_dir, partition)
        return StepOrder.of_task().source_task(
            batches, arrow_schema(self.spec), self.kafka_conf, partition, self.narrow_columns
        )

    def commit(self, end: dict[str, Any]) -> None:
        return None

    def stop(self) -> None:
        return None
