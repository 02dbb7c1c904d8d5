"""Aggregates that write their records in the step's query itself (ADR 0008).

A table whose every output view runs on Spark's native aggregation (:func:`app.runtime
.native_aggregate.is_native`), with no view of its own LATENESS and no stateless view for the
step sink, runs its step as two jobs that each touch the data once:

1. the step sink's own job over the step's planned slices (not the query's): each task reads
   its slice (from Kafka into the slice cache), writes its dead letters in a transaction with
   a step marker, and brings back the probe; the driver computes the step's waterline (S3);
2. the query itself, collected with the step's :class:`StepWrite` in the Spark local property
   :data:`STEP_OUTPUT`: the source tasks read the slices back from the cache, Spark
   aggregates, and each task of the aggregate's last stage finishes and encodes its completed
   groups and produces them, with the S14 header of the waterline the first job gave, in one
   transaction with a step marker (S15), handing Spark only the summary rows.

Before this, such a query's batch was persisted: its first job ran the whole query (state
included) to get the probes, encoded the outputs into the cache, and a second job read them
back into Python to produce them. The state operators still run once per step, in the query.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from app.connectors.kafka_sink import StepMarker, produce_partition
from app.connectors.kafka_source import task_property
from app.errors import TidemarkError

__all__ = ["STEP_OUTPUT", "StepWrite", "produce_step_output"]

#: The Spark local property carrying a step's :class:`StepWrite` to the query's writing tasks.
STEP_OUTPUT = "tidemark.step_output"


@dataclass(frozen=True)
class StepWrite:
    """What only the driver knows when a step's query starts: its marker and headers."""

    view_headers: Mapping[str, list[tuple[str, bytes]]]
    marker: StepMarker | None

    def encoded(self) -> str:
        return base64.b64encode(pickle.dumps(self)).decode()


def produce_step_output(
    batches: Iterator[pa.RecordBatch], conf: Mapping[str, str], tables: Mapping[str, Any]
) -> Iterator[pa.RecordBatch]:
    """Produce a task's finished records (SINK_SCHEMA) as the step's :class:`StepWrite`
    says; yield the SUMMARY rows. The Kafka settings are the plan's, so no credentials ride in
    the local property (Spark's event log keeps those unredacted)."""
    text = task_property(STEP_OUTPUT)
    if not text:
        raise TidemarkError(
            f"this query writes its records itself and needs the Spark local property "
            f"{STEP_OUTPUT}, which the step sink sets: run it through the step sink"
        )
    step: StepWrite = pickle.loads(base64.b64decode(text))  # noqa: S301 (the driver's own)
    yield from produce_partition(batches, conf, tables, step.view_headers, step.marker)
