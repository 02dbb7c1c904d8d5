"""What a step asks of the tasks of one of its Spark jobs: a :class:`StepOrder`.

The step sink (on the driver) runs a job with an order (:func:`collect_with_order`); Spark
hands it to every task of the job as local properties, one per part of the order, each the
part pickled; a task reads the order back with :meth:`StepOrder.of_task`. A job without one
(a ``step_sink`` step's, a query run outside the step sink) has the empty order: its source
tasks hand Spark their slices' rows. The parts:

* ``slice_output`` (:data:`SLICE_OUTPUT`, ADR 0007): a :class:`SliceWriter` each source task
  runs over its slice itself (:mod:`app.runtime.step.slice_writers`); it hands Spark one row of
  kind :data:`SLICE_SUMMARY` that says what it did;
* ``source_side`` (:data:`STEP_SIDE`, ADR 0008): a :class:`SliceTee` each source task runs
  beside handing Spark its slice (:class:`app.runtime.step.query_writes.SourceSide`);
* ``step_write`` (:data:`STEP_OUTPUT`, ADR 0008): the :class:`~app.runtime.step.query_writes
  .StepWrite` the query's writing tasks produce their records with;
* ``skip_accepted`` (:data:`SKIP_ACCEPTED`, ADR 0011): the source tasks read their slices
  in full (into the slice cache, for the step's next job) but hand Spark only the dead
  letters and the probe: the first job of a ``step_sink`` step whose batch is re-read.

What a source task does with an order is :meth:`StepOrder.source_task`'s, the one dispatch;
a job of the step sink's own over the step's planned slices runs a writer with
:func:`write_slices`.

Invariant: an order carries no Kafka settings. Its tasks use the source's or the plan's own:
Spark's event log keeps local properties unredacted, so credentials never ride in one.
"""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from app.connectors.kafka_source import KafkaPartitionSlice
from app.connectors.late_gate import ACCEPTED, SourceSpec
from app.runtime.step.slice_cache import cached_slice

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from app.runtime.step.query_writes import StepWrite

__all__ = [
    "SLICE_OUTPUT",
    "SLICE_SUMMARY",
    "STEP_OUTPUT",
    "STEP_SIDE",
    "SKIP_ACCEPTED",
    "SliceTee",
    "SliceWriter",
    "StepOrder",
    "collect_with_order",
    "write_slices",
]

#: The Spark local property carrying a step's :class:`SliceWriter` to its source tasks.
SLICE_OUTPUT = "tidemark.slice_output"
#: The Spark local property under which a step's source tasks also write their dead letters
#: and leave their probes for the query's own writing tasks (app/runtime/step/query_writes.py).
STEP_SIDE = "tidemark.step_side"
#: The Spark local property carrying a step's StepWrite to the query's writing tasks.
STEP_OUTPUT = "tidemark.step_output"
#: The Spark local property under which a job's source tasks leave out the accepted rows.
SKIP_ACCEPTED = "tidemark.skip_accepted"

#: The ``_kind`` of the one row a source task hands over under :data:`SLICE_OUTPUT`, the
#: only rows a slice-views plan keeps (app/runtime/operators/query.py).
SLICE_SUMMARY = "slice_summary"


class SliceWriter(Protocol):
    """What a step's job asks of each source task (app/runtime/step/slice_writers.py: ProbePass,
    SliceOutput): do its work over the slice's batches and say what it did, as SUMMARY rows.
    The Kafka settings are the source's own."""

    def write(
        self, batches: Iterable[pa.RecordBatch], kafka_conf: Mapping[str, str]
    ) -> list[dict[str, Any]]: ...

    def prepare(self, kafka_conf: Mapping[str, str]) -> None:
        """Start opening the Kafka transaction :meth:`write` will use, if it writes one
        (app.connectors.sink.transactions.open_early); called as early as the task knows it
        will."""


class SliceTee(Protocol):
    """What a step's source tasks do with their slice while handing it to Spark
    (app/runtime/step/query_writes.py: SourceSide)."""

    def tee(
        self, batches: Iterable[pa.RecordBatch], conf: Mapping[str, str], step: int, partition: int
    ) -> Iterator[pa.RecordBatch]: ...


@dataclass(frozen=True)
class StepOrder:
    """What one job of a step asks of its tasks; every part is optional."""

    slice_output: SliceWriter | None = None
    source_side: SliceTee | None = None
    step_write: StepWrite | None = None
    skip_accepted: bool | None = None

    def properties(self) -> dict[str, str]:
        """The order as Spark local properties: each part given, pickled, under its key."""
        return {
            _KEYS[f.name]: base64.b64encode(pickle.dumps(part)).decode()
            for f in fields(self)
            if (part := getattr(self, f.name)) is not None
        }

    @classmethod
    def of_task(cls) -> StepOrder:
        """The order of the job the running task belongs to (empty outside a task)."""
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            return cls()
        parts: dict[str, Any] = {}
        for name, key in _KEYS.items():
            text = context.getLocalProperty(key)
            if text:
                parts[name] = pickle.loads(base64.b64decode(text))  # noqa: S301 (the driver's own)
        return cls(**parts)

    def source_task(
        self,
        batches: Iterator[pa.RecordBatch],
        schema: pa.Schema,
        kafka_conf: Mapping[str, str],
        part: KafkaPartitionSlice,
        columns: Sequence[str] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """What a source task hands Spark of its slice's ``batches`` (of ``schema``) under
        this order: the summary of the slice writer's work, or the slice (teed to the source
        side, if any), of only ``columns`` when given."""
        if self.slice_output is not None:
            return _written(self.slice_output, batches, schema, kafka_conf)
        if self.source_side is not None:
            batches = self.source_side.tee(batches, kafka_conf, part.step, part.partition)
        elif self.skip_accepted:
            batches = _without_accepted(batches)
        if columns is not None:
            names = list(columns)
            return (batch.select(names) for batch in batches)
        return batches


#: The local property of each part of a :class:`StepOrder`.
_KEYS: Mapping[str, str] = {
    "slice_output": SLICE_OUTPUT,
    "source_side": STEP_SIDE,
    "step_write": STEP_OUTPUT,
    "skip_accepted": SKIP_ACCEPTED,
}


def _without_accepted(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The slice read in full (so the slice cache holds it for the step's next job), but
    only its dead letters and its probe handed to Spark: the step sink's first job writes
    those alone, and every row it did not ask for would cross from Python into the JVM."""
    import pyarrow.compute as pc

    for batch in batches:
        kept = batch.filter(pc.invert(pc.is_in(batch.column("_kind"), pa.array(ACCEPTED))))
        if kept.num_rows:
            yield kept


def collect_with_order(job: DataFrame, order: StepOrder) -> list[Any]:
    """``job``'s rows, collected with ``order`` in its Spark local properties: its tasks read
    them to know what this job asks of them. The properties are cleared after the job."""
    properties = order.properties()
    context = job.sparkSession.sparkContext
    for key, value in properties.items():
        context.setLocalProperty(key, value)
    try:
        return job.collect()
    finally:
        for key in properties:
            context.setLocalProperty(key, None)  # type: ignore[arg-type]


def _written(
    writer: SliceWriter,
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    kafka_conf: Mapping[str, str],
) -> Iterator[pa.RecordBatch]:
    """The slice handed to ``writer`` in this task, and to Spark only the summary of what it
    wrote: one row of kind :data:`SLICE_SUMMARY` whose ``_message`` is the JSON list of the
    summary rows (ADR 0007)."""
    writer.prepare(kafka_conf)
    summary = writer.write(batches, kafka_conf)
    row = {"_kind": SLICE_SUMMARY, "_message": json.dumps(summary)}
    yield pa.RecordBatch.from_pylist([row], schema=schema)


def write_slices(
    parts: Iterable[KafkaPartitionSlice],
    spec: SourceSpec,
    conf: Mapping[str, str],
    state_dir: str,
    writer: SliceWriter,
) -> Iterator[str]:
    """A task of a job over planned slices (not the query's): each slice (from the slice
    cache, else from Kafka into it) handed to ``writer``, and the JSON list of its summary
    rows handed back."""
    for part in parts:
        yield json.dumps(writer.write(cached_slice(spec, conf, state_dir, part), conf))
