"""Aggregates that write their records in the step's query itself (ADR 0008).

A table whose every output view runs on Spark's native aggregation (:func:`app.runtime
.operators.native_aggregate_support.is_native`), besides stateless views its source tasks can
compute (ADR 0007), with no view of its own LATENESS, writes its aggregates' records in the query:
each task of the aggregate's last stage finishes and encodes its completed groups and produces
them, with the S14 header, in one transaction with a step marker (S15), and hands Spark only
the summary rows. What the task needs that only this step knows (its marker, the headers)
rides in the step's order (:mod:`app.runtime.step.step_orders`) as a :class:`StepWrite`.

The header is the step's new waterline, which needs every source task's probe (S3). How the
writing tasks learn it depends on where the tasks run:

* local mode (one machine, the chart's deployment): the step is one job. Each source task
  reads its slice and leaves its probe, and its dead letters as records, in files of the step
  (:class:`SourceSide`, the order's ``source_side``); the aggregate's tasks
  start only when every source task is done (the shuffle between them), so they read those
  files and compute the waterline themselves (:class:`ProbeRendezvous`), exactly as the
  driver does after the job (:func:`waterline_after`), and the first of them produces the
  dead letters in its transaction (when the table has step views, their job writes them);
* a cluster: the step sink first runs a job of its own over the step's planned slices (the
  source's slice cache keeps what it read for the query): dead letters and probes; the driver
  computes the waterline and the query's tasks get the headers themselves.

Before this, such a query's batch was persisted: its first job ran the whole query (state
included) to get the probes, encoded the outputs into the cache, and a second job read them
back into Python to produce them. The state operators still run once per step, in the query.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.circuit.waterline import advance, next_waterline
from app.connectors.late_gate import ACCEPTED
from app.connectors.sink import (
    StepMarker,
    open_early,
    produce_partition,
    task_partition,
    view_headers,
)
from app.connectors.sink.record import SINK_RECORD
from app.errors import TidemarkError
from app.runtime.step.sink_rows import arrow_dead_letters, arrow_probes
from app.runtime.step.step_files import write_atomically
from app.runtime.step.step_orders import STEP_OUTPUT, StepOrder
from app.runtime.step.view_waterlines import DerivedInput, MergedInput, view_waterlines
from app.runtime.store import join, store_at

__all__ = [
    "DEAD_LETTER_TASK",
    "ProbeRendezvous",
    "SourceSide",
    "StepWrite",
    "produce_step_output",
    "waterline_after",
]

Headers = Mapping[str, list[tuple[str, bytes]]]


def waterline_after(
    previous: Mapping[str, int | None],
    summary: Iterable[Mapping[str, Any]],
    lateness: Iterable[tuple[str, int]],
) -> dict[str, int | None]:
    """S3 (:func:`app.circuit.waterline.next_waterline`) per waterline column, from the
    step's summary rows, of which the probes count (``detail``: the JSON maxima); a column no
    probe saw keeps ``w(t-1)``."""
    maxima: dict[str, int | None] = {}
    for row in summary:
        if row["kind"] != "probe":
            continue
        for col, value in json.loads(row["detail"]).items():
            if col != "_accepted" and value is not None:
                maxima[col] = advance(maxima.get(col), int(value))
    return {
        column: next_waterline(previous.get(column), maxima.get(column), amount)
        for column, amount in lateness
    }


def _probe_path(directory: str, step: int, partition: int) -> str:
    return join(directory, f"{step}-{partition}.json")


def read_step_summaries(directory: str, step: int, partitions: Iterable[int]) -> list[Any]:
    """What the step's source tasks left (:class:`SourceSide`): their summary rows."""
    rows: list[Any] = []
    for partition in partitions:
        path = _probe_path(directory, step, partition)
        text = store_at(path).read_text(path)
        if text is None:
            raise TidemarkError(
                f"the source task of partition {partition} of step {step} left no probe at "
                f"{path}: the query's tasks must share the driver's disk (local mode)"
            )
        rows.extend(json.loads(text))
    return rows


def _dead_letter_path(directory: str, step: int, partition: int) -> str:
    return join(directory, f"{step}-{partition}.dead.arrow")


#: The writing task that produces the source tasks' dead letters of a one-job step: every
#: aggregate stage has a task 0, and a replay gives the same task the same records (S15).
DEAD_LETTER_TASK = 0


@dataclass(frozen=True)
class SourceSide:
    """What a source task of a one-job step does besides handing its rows to Spark: it
    leaves its probe (a summary row) in ``directory`` for the aggregate's tasks and the
    driver, and, when ``dead_letter_topic`` is set, its slice's dead letters, as records to
    produce, for writing task :data:`DEAD_LETTER_TASK`, which produces them in its own
    transaction. A source task with a transaction of its own held the end of the step's first
    stage for its commit (an in-run A/B at (b)'s half load: stage 0 mean 149 ms with, 135 ms
    without); without ``dead_letter_topic`` the step views' job writes them."""

    table: str
    maxima: tuple[str, ...]
    directory: str
    dead_letter_topic: str | None = None

    def tee(
        self, batches: Iterable[pa.RecordBatch], conf: Mapping[str, str], step: int, partition: int
    ) -> Iterator[pa.RecordBatch]:
        probes: list[dict[str, Any]] = []
        dead: list[pa.RecordBatch] = []
        for batch in batches:
            others = batch.filter(pc.invert(pc.is_in(batch.column("_kind"), pa.array(ACCEPTED))))
            if others.num_rows:
                probes.extend(arrow_probes(others, self.table, self.maxima))
                if self.dead_letter_topic is not None:
                    letters = arrow_dead_letters(others, self.table, self.dead_letter_topic)
                    if letters.num_rows:
                        dead.append(letters)
            yield batch
        if self.dead_letter_topic is not None:
            # Written (empty too) before the probe: a probe found means its dead letters are
            # there, and an earlier attempt's file never stands in for this one's.
            data = b""
            if dead:
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, SINK_RECORD) as stream:
                    for letters in dead:
                        stream.write_batch(letters)
                data = sink.getvalue().to_pybytes()
            # Not fsync'ed: every attempt of the step writes them again before its writers
            # read them (the step's own rendezvous, no state across a crash).
            write_atomically(
                _dead_letter_path(self.directory, step, partition), data, durable=False
            )
        write_atomically(
            _probe_path(self.directory, step, partition), json.dumps(probes), durable=False
        )


@dataclass(frozen=True)
class ProbeRendezvous:
    """How a writing task of a one-job step computes its headers: from the probes the step's
    source tasks left in ``directory``, exactly as the driver computes the waterline."""

    directory: str
    step: int
    partitions: tuple[int, ...]
    previous: Mapping[str, int | None]
    lateness: tuple[tuple[str, int], ...]
    units: Mapping[str, str]
    time_source: Mapping[str, str | None]
    merged: Mapping[str, tuple[MergedInput, ...]] = field(default_factory=dict)
    derived: Mapping[str, DerivedInput] = field(default_factory=dict)

    def summaries(self) -> list[Any]:
        return read_step_summaries(self.directory, self.step, self.partitions)

    def headers(self) -> dict[str, list[tuple[str, bytes]]]:
        """S14 headers, from the waterline map the driver computes too
        (:func:`app.runtime.step.view_waterlines.view_waterlines`)."""
        tables = waterline_after(self.previous, self.summaries(), self.lateness)
        waterlines, units = view_waterlines(tables, self.units, self.merged, self.derived)
        return view_headers(waterlines, self.time_source, units)

    def dead_letters(self) -> Iterator[pa.RecordBatch]:
        """The dead letters the step's source tasks left (:class:`SourceSide`), as records
        for :func:`produce_partition`."""
        for partition in self.partitions:
            path = _dead_letter_path(self.directory, self.step, partition)
            data = store_at(path).read_bytes(path)
            if data:
                with pa.ipc.open_stream(data) as stream:
                    yield from stream


@dataclass(frozen=True)
class StepWrite:
    """What only the driver knows when a step's query starts: its marker, and its headers or
    where the writing tasks find what they are computed from."""

    view_headers: Headers
    marker: StepMarker | None
    rendezvous: ProbeRendezvous | None = None
    #: Task :data:`DEAD_LETTER_TASK` also produces the dead letters the step's source tasks
    #: left beside their probes (a one-job step without step views).
    dead_letters: bool = False


def produce_step_output(
    batches: Iterator[pa.RecordBatch], conf: Mapping[str, str], tables: Mapping[str, Any]
) -> Iterator[pa.RecordBatch]:
    """Produce a task's finished records (sink records) as the step's :class:`StepWrite`
    says; yield the SUMMARY rows. The Kafka settings are the plan's, so no credentials ride in
    the local property (Spark's event log keeps those unredacted)."""
    step = StepOrder.of_task().step_write
    if step is None:
        raise TidemarkError(
            f"this query writes its records itself and needs the Spark local property "
            f"{STEP_OUTPUT}, which the step sink sets: run it through the step sink"
        )
    # The transaction opens while Spark shuffles and aggregates the step, before the first
    # completed group arrives (a step without any writes the opener off).
    open_early(conf, step.marker)
    headers = step.view_headers
    if step.rendezvous is not None:
        # Every source task of the step is done before the first row gets here (a shuffle
        # lies between), and so has left its probe and its dead letters.
        headers = step.rendezvous.headers()
        if step.dead_letters and task_partition() == DEAD_LETTER_TASK:
            batches = itertools.chain(batches, step.rendezvous.dead_letters())
    yield from produce_partition(batches, conf, tables, headers, step.marker)
