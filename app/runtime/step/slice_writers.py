"""What a step's jobs ask of each source task of a slice-views plan (ADR 0007).

A table whose step views the source's tasks compute (:func:`app.runtime.operators.arrow_views
.slice_computable`) runs both jobs of its step as one Spark plan: every source task hands
Spark a single summary row (:data:`app.runtime.step.step_orders.SLICE_SUMMARY`) and does the
work itself, told what by a writer in the step's order (its ``slice_output``,
:mod:`app.runtime.step.step_orders`):

1. :class:`ProbePass`: read the slice (from Kafka into the slice cache: fetch, decode, late
   gate) and bring back its probe, from which the driver computes the step's waterline (S3);
   nothing is written, so this job opens no Kafka transaction;
2. :class:`SliceOutput`: read the slice back from the slice cache, compute the views over its
   accepted rows, and produce its dead letters and the output views' records, with the S14
   header, in one Kafka transaction with a step marker (S15), task numbers from
   ``OUTPUT_TASKS``.

Both are pickled into the local property and carry everything the task needs but the Kafka
settings, which are the source's own (so no credentials ride in a local property).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.circuit.ir import View
from app.connectors.sink import StepMarker, open_early, produce_partition
from app.runtime.operators.arrow_views import view_rows
from app.runtime.step.encode import ViewEncoding, encode_view_rows
from app.runtime.step.sink_rows import arrow_dead_letters, arrow_probes

__all__ = ["ProbePass", "SliceOutput"]


@dataclass(frozen=True)
class ProbePass:
    """The first job: the slice read (into the slice cache) and its probe brought back."""

    table: str
    #: The table's waterline columns.
    maxima: tuple[str, ...]

    def prepare(self, kafka_conf: Mapping[str, str]) -> None:
        """Nothing to open: this pass writes nothing."""

    def write(
        self, batches: Iterable[pa.RecordBatch], kafka_conf: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """The probe as a SUMMARY row of kind ``probe``; nothing is written."""
        probes: list[dict[str, Any]] = []
        for batch in batches:
            probes.extend(arrow_probes(batch, self.table, self.maxima))
        return probes


@dataclass(frozen=True)
class SliceOutput:
    """The second job: the slice's dead letters and its views' records, produced in one
    transaction with the step's S14 headers, which the driver knows only after the first."""

    table: str
    dead_letter_topic: str
    columns: tuple[str, ...]
    views: tuple[View, ...]
    tables: Mapping[str, Mapping[str, Any]]
    view_headers: Mapping[str, list[tuple[str, bytes]]]
    marker: StepMarker | None
    #: The table's waterline columns when this pass brings back the slice's probe too: the
    #: first job of a plan that writes in its query writes its dead letters (ADR 0008).
    maxima: tuple[str, ...] = ()

    def prepare(self, kafka_conf: Mapping[str, str]) -> None:
        open_early(kafka_conf, self.marker)

    def write(
        self, batches: Iterable[pa.RecordBatch], kafka_conf: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """The summary rows: dead letters and outputs per view (or a replayed step's stored
        counts), the late rows' details for the S6 log, and the probe when asked."""
        encodings = {v.name: ViewEncoding.for_view(v) for v in self.views if v.output is not None}
        probes: list[dict[str, Any]] = []

        def records() -> Iterator[pa.RecordBatch]:
            for batch in batches:
                if self.maxima:
                    probes.extend(arrow_probes(batch, self.table, self.maxima))
                dead = arrow_dead_letters(batch, self.table, self.dead_letter_topic)
                if dead.num_rows:
                    yield dead
                accepted = batch.filter(pc.equal(batch.column("_kind"), "ok"))
                if not accepted.num_rows:
                    continue
                frames = view_rows(self.views, self.table, accepted.select(list(self.columns)))
                for name, enc in encodings.items():
                    if frames[name].num_rows:
                        yield from encode_view_rows(iter([frames[name]]), enc)

        summary: list[dict[str, Any]] = []
        for out in produce_partition(
            records(), kafka_conf, self.tables, self.view_headers, self.marker
        ):
            summary.extend(out.to_pylist())
        return summary + probes
