"""The end of every step (``foreachBatch``): waterlines, Kafka writes, counts, logs.

It runs on the driver once per micro-batch (= step, SPEC S1), in two Spark jobs:

1. the first brings back the step's probe rows, from which the driver computes the table's
   new waterlines (S3, :mod:`app.circuit.waterline`), stored under the step number so
   the next step's late gate (and a replay of this one) sees exactly w(t-1) (S5);
2. the second writes the output changes, with the S14 ``tidemark.waterline`` header of each
   view, which is why it waits for every probe, and the dead letters (S6); the stateless
   views that need no gate of their own are computed here, over the step's accepted rows,
   and encoded in the same Python pass that produces them (:mod:`app.runtime.step.step_views`);
3. then the metrics, and the dead-letter log: late rows in powers of ten per table (S6).

A step takes one of two shapes (ADR 0011), as the physical plan says. In the ``step_sink``
shape the batch is cached for the two jobs above, or, when it is the table's gate rows alone,
read twice: in the first job the source hands over only the dead letters and probes, and
that job writes the dead letters (they do not need the new waterline); the source's slice
cache serves the second read. In the ``query_writes`` shape the query's
own tasks write: when the source's tasks can compute every output (ADR 0007), both jobs
collect the batch itself, whose source tasks do the work, told what by a writer in a Spark
local property (:mod:`app.runtime.step.slice_writers`): the first brings back the probes, the
second writes the dead letters and the views' records; when the query ends in a native
aggregate (ADR 0008), its last-stage tasks write once the probes are in.

Both jobs write through :func:`produce_partition` on the executors, one Kafka transaction per
task with a step marker keyed by Spark's ``batch_id``, which a replay of the batch after a
crash reuses, so the replay writes nothing twice (S15); the second job's tasks are numbered
from :data:`OUTPUT_TASKS` so no two tasks of a step share a marker. Before either job the
sink computes the step's fingerprint (its input ranges from Spark's offset log and the plan's
digest, :mod:`app.runtime.step.step_inputs`), which every marker of the step carries, and records
it in the step files (:func:`~app.runtime.step.step_files.begin_step`): a replay that would read
other input or run another plan refuses there, before any task writes (docs/reliability.md).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial, reduce
from typing import Any, Protocol, cast

import pyarrow as pa
import structlog
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from app.circuit.ir import Table
from app.connectors.kafka_source import KafkaPartitionSlice
from app.connectors.late_gate import BOUND_HEADER
from app.connectors.sink import (
    SUMMARY_SCHEMA,
    StepMarker,
    format_time_value,
    produce_partition,
    view_headers,
)
from app.connectors.sink.fingerprint import (
    SourceRanges,
    fingerprints_differ,
    replay_refused,
    step_fingerprint,
)
from app.connectors.sink.markers import FoundMarker, MarkerTopic, group_markers, read_markers
from app.connectors.sink.transactions import behind
from app.errors import KafkaError, StateError
from app.fault_points import fault_point
from app.observability.logging import LateRowLog, log_dead_letters
from app.runtime.operators.query import TablePlan
from app.runtime.planner.waterline_keys import TimeUnit, table_units, time_unit
from app.runtime.step.query_writes import (
    ProbeRendezvous,
    SourceSide,
    StepWrite,
    waterline_after,
)
from app.runtime.step.slice_writers import ProbePass, SliceOutput
from app.runtime.step.step_files import (
    begin_step,
    forget_steps_before,
    load_waterlines,
    planned_slices,
    store_waterlines,
)
from app.runtime.step.step_inputs import plan_digest, spark_checkpoint, step_input_ranges
from app.runtime.step.step_orders import SliceWriter, StepOrder, collect_with_order, write_slices
from app.runtime.step.step_views import produce_step_views
from app.runtime.step.view_waterlines import view_waterlines
from app.runtime.store import join, store_at

__all__ = ["StepReport", "StepSink", "sink_identity"]

log = structlog.get_logger("tidemark.step")

#: The first task number of a step's output job; the writing tasks of a step's first job
#: (a re-read batch's) or of a job over the step's slices, one per source slice, are
#: numbered from 0, below it.
OUTPUT_TASKS = 1 << 20


class StepMetrics(Protocol):
    """What the sink reports to (app.observability.metrics.TidemarkMetrics)."""

    def set_waterline(
        self, table: str, column: str, value: int | None, unit: TimeUnit, now_ms: int
    ) -> None: ...
    def add_input(self, table: str, topic: str, n: int) -> None: ...
    def add_dead_letters(self, table: str, reason: str, n: int) -> None: ...
    def add_output(self, view: str, topic: str, n: int) -> None: ...
    def set_output_waterline(self, view: str, value_ms: int | None) -> None: ...
    def observe_step(self, seconds: float) -> None: ...


@dataclass
class StepReport:
    """What one step did; the CLI's progress line and the demo's summary add these up."""

    table: str
    batch_id: int
    step: int | None
    accepted: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, int] = field(default_factory=dict)
    waterlines: dict[str, int | None] = field(default_factory=dict)
    seconds: float = 0.0
    #: Tasks of a replayed batch whose records a crashed run had committed (written once, S15).
    replayed_tasks: int = 0

    @property
    def records_in(self) -> int:
        return self.accepted + sum(self.dead_letters.values())


def sink_identity(state_dir: str) -> str:
    """The sink's id, created once per checkpoint and kept in it (S15).

    It names the Kafka transactions and step markers, so a restart from the checkpoint fences
    the crashed run's writers and finds its markers, while two services on two checkpoints
    (or two tests on one broker) never share a marker.
    """
    path = join(state_dir, "sink-id")
    store = store_at(path)
    found = store.read_text(path)
    if found is None:
        # Created once: of two runs racing on a fresh checkpoint (a lease taken over while
        # its holder still ran) both read the one id, and the later fences the earlier.
        store.create(path, uuid.uuid4().hex[:16])
        found = store.read_text(path)
    if found is None:
        raise StateError(f"the sink id {path} vanished as it was created: is another run"
                         " deleting the checkpoint?")
    return found.strip()


#: A table's step (None: the step read none of its records) and its waterlines after it.
TableStep = tuple[int | None, dict[str, int | None]]


class StepSink:
    """The step sink of one query: of its tables, the first's state directory holds the
    sink's id, its markers' and probes' files; each table's holds its own waterlines."""

    def __init__(
        self,
        plan: TablePlan,
        kafka_conf: Mapping[str, str],
        metrics: StepMetrics | None = None,
        on_step: Callable[[StepReport], None] | None = None,
        markers: MarkerTopic | None = None,
        position_group: str | None = None,
        renew_lease: Callable[[], None] | None = None,
    ) -> None:
        self.plan = plan
        #: Called as each step begins, before anything of it is written: renews the
        #: checkpoint's lease (ADR 0025), raising when it was lost.
        self._renew_lease = renew_lease
        self.state_dir = plan.state_dirs[0]
        self.sink_id = sink_identity(self.state_dir)
        #: Exactly once (S15) with ``markers``: the sink's partition of the markers' topic.
        self._place = markers.place(self.sink_id) if markers is not None else None
        #: The markers of the run's first step, by transactional id, until it is written
        #: (None after it): only that step can be a replay (ADR 0016).
        self._first_found: tuple[tuple[str, FoundMarker], ...] | None = None
        self._first_step = True
        #: When the step being written began (epoch ms), and the input it reads.
        self._started_ms = 0
        self._sources: list[SourceRanges] = []
        #: The consumer group the step's end offsets are committed to, and its client.
        self._position_group = position_group
        self._position: Any = None
        self.table: Table = plan.table
        self.kafka_conf = dict(kafka_conf)
        self.metrics = metrics
        self.on_step = on_step
        self.late_log = LateRowLog()
        self._state_dirs = dict(zip((t.name for t in plan.tables), plan.state_dirs, strict=True))
        self._units_of = {
            t.name: {x.column: time_unit(t.column(x.column).type) for x in t.lateness}
            for t in plan.tables
        }
        self._units = self._units_of[self.table.name]
        self._lateness = tuple((x.column, x.amount) for x in self.table.lateness)
        self._time_sources = {
            view.name: plan.view_time_source.get(view.name) for view in plan.output_views
        }
        #: The last step this sink wrote (in this process): a step's planned slices are read
        #: once, never again by a later step without data (ADR 0008).
        self._last_step = -1
        #: Where a one-job step's source tasks leave their probes (ADR 0008).
        self._probe_dir = join(self.state_dir, "step-probes")
        #: Each output view's S14 waterline after the last step, with its unit (metrics).
        self._headers_values: dict[str, tuple[int | None, TimeUnit]] = {}
        #: What each step's fingerprint hashes of the plan: the program's plan digest recorded
        #: with the checkpoint, else the query's (:func:`app.runtime.step.step_inputs.plan_digest`).
        self._plan_digest = plan_digest(plan)
        #: The fingerprint of the step being written (:meth:`_begin`), in its markers.
        self._fingerprint: str | None = None
        self._topic_dirs = {t.topic: d for t, d in zip(plan.tables, plan.state_dirs, strict=True)}
        #: Per table, the waterlines every later step's rows are at or above (ADR 0023): w(t-1)
        #: after a step with data of a query with state (Spark evicts by it in that step),
        #: else w(t); the stage boundaries' punctuations carry what follows from them.
        self._evicting: dict[str, dict[str, int | None]] = {}
        self._stateless = all(v.state == "none" for v in plan.query.views)
        #: The bounds last punctuated per internal topic, and the producer that writes them.
        self._punctuated: dict[str, list[tuple[str, bytes]]] = {}
        self._producer: Any = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        if self._renew_lease is not None:
            self._renew_lease()
        self._begin(batch_id)
        if self.plan.query.shape == "query_writes" or self.plan.rereadable:
            reports = self._write(batch, batch_id)
        else:
            batch.persist()
            try:
                reports = self._write(batch, batch_id)
            finally:
                batch.unpersist()
        self._first_step, self._first_found = False, None
        self._punctuate()
        self._commit_position()
        for report in reports:
            report.seconds = time.monotonic() - started
            self._report(report)
        fault_point("before_spark_commit", batch_id)

    def _begin(self, batch_id: int) -> None:
        """The step's fingerprint, recorded before any of its tasks writes; a replay whose
        fingerprint is not the one its first run recorded refuses here (S15)."""
        sources = step_input_ranges(spark_checkpoint(self.state_dir), batch_id, self._topic_dirs)
        fingerprint = step_fingerprint(self._plan_digest, sources)
        stored = begin_step(self.state_dir, batch_id, fingerprint)
        if stored is not None:
            where = (
                f"the step file of sink {self.sink_id} (transactional ids"
                f" tidemark-{self.sink_id}-*; {self.state_dir}/step-fingerprints)"
            )
            raise replay_refused(batch_id, fingerprints_differ(where, stored, fingerprint))
        self._fingerprint = fingerprint
        self._sources = list(sources)
        self._started_ms = int(time.time() * 1000)
        if self._first_step and self._place is not None:
            self._first_found = self._markers_of_first_step(batch_id)

    def _markers_of_first_step(self, batch_id: int) -> tuple[tuple[str, FoundMarker], ...]:
        """The sink's markers of ``batch_id``, read at the run's first step (ADR 0016); one of
        a later batch refuses the run (the checkpoint is behind what was committed)."""
        assert self._place is not None
        prefix = f"tidemark-{self.sink_id}-"
        found = read_markers(self.kafka_conf, self._place, prefix)
        if not found:
            found = group_markers(self.kafka_conf, prefix, self.table.dead_letter_topic)
        for tid, marker in sorted(found.items()):
            if marker.batch > batch_id:
                raise replay_refused(batch_id, behind(f"the step marker of {tid}", marker.batch))
        mine = tuple(sorted((t, m) for t, m in found.items() if m.batch == batch_id))
        log.info("markers.read", sink=self.sink_id, batch=batch_id, replayed_tasks=len(mine))
        return mine

    def _commit_position(self) -> None:
        """Commit the step's end offsets to the position group, after its writes: lag tools
        see how far the query has read (informative; no replay reads it, ADR 0016)."""
        if self._position_group is None or not self._sources:
            return
        from confluent_kafka import Consumer, TopicPartition

        if self._position is None:
            self._position = Consumer(
                {
                    **self.kafka_conf,
                    "group.id": self._position_group,
                    "enable.auto.commit": False,
                    "log_level": 3,
                }
            )
        offsets = [
            TopicPartition(source.topic, partition, end)
            for source in self._sources
            for partition, _start, end in source.ranges
        ]
        if offsets:
            self._position.commit(offsets=offsets, asynchronous=True)
            self._position.poll(0)  # serves earlier commits' results

    def close(self) -> None:
        """Close the sink's own Kafka clients (the position group's, the punctuations'), after
        its last step: its pending commit is sent, and nothing of it outlives the query."""
        if self._position is not None:
            self._position.close()
            self._position = None
        if self._producer is not None:
            self._producer.flush(30)
            self._producer = None

    def _punctuate(self) -> None:
        """After the step's records are committed, a punctuation (S4) on each stage boundary's
        internal topic with the boundary's waterlines from :attr:`_evicting`: every record
        written later is at or above them, so its reader's table may close what is below
        (ADR 0023). One partition: the punctuation follows every record of the step. A
        replay writes it again, which moves nothing twice."""
        if not self.plan.punctuations or not self._evicting:
            return
        from confluent_kafka import Producer

        steps = {t.name: (None, self._evicting.get(t.name, {})) for t in self.plan.tables}
        waterlines, _units = self._query_waterlines(steps)
        failed: list[str] = []
        for punctuation in self.plan.punctuations:
            headers = [
                (f"{BOUND_HEADER}.{column}", str(value).encode())
                for column, key in punctuation.columns
                if (value := waterlines.get(key)) is not None
            ]
            if not headers or self._punctuated.get(punctuation.topic) == headers:
                continue
            if self._producer is None:
                self._producer = Producer({**self.kafka_conf, "acks": "all", "log_level": 3})
            self._producer.produce(
                punctuation.topic,
                value=None,
                key=BOUND_HEADER.encode(),
                partition=0,
                headers=headers,
                on_delivery=lambda err, _m: failed.append(str(err)) if err else None,
            )
            self._punctuated[punctuation.topic] = headers
        if self._producer is not None and (self._producer.flush(30) or failed):
            self._punctuated.clear()
            raise KafkaError(f"punctuation of the stage boundaries not written: {failed[:3]}")

    def _produce(
        self, batch_id: int, first_task: int, view_headers: Mapping[str, list[tuple[str, bytes]]]
    ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
        return partial(
            produce_partition,
            conf=self.kafka_conf,
            tables={t.name: table_units(t) for t in self.plan.tables},
            view_headers=view_headers,
            marker=self._marker(batch_id, first_task),
        )

    def _first_job(self, batch: DataFrame, batch_id: int) -> list[Any]:
        """The first job of a ``step_sink`` step: its probes (as summary rows of kind
        ``probe``) and, of a re-read batch, the summary of writing its dead letters: the
        source hands over no accepted rows in this job and keeps each slice in its slice
        cache for the second. A cached batch keeps its dead letters for the second job: a
        Python task on every partition of the batch (the aggregate's too) cost (b) more than
        the dead-letter tasks it would save."""
        if not self.plan.rereadable:
            probes = batch.filter(F.col("kind") == "probe").select(
                F.col("kind"),
                F.col("rel"),
                F.col("step").alias("n"),
                F.col("value").cast("string").alias("detail"),
            )
            return probes.collect()
        job = (
            batch.filter(F.col("kind") != "row")  # a re-read batch has no other rows
            .drop("row")  # a no-op when absent
            .mapInArrow(self._produce(batch_id, 0, {}), SUMMARY_SCHEMA)
        )
        return collect_with_order(job, StepOrder(skip_accepted=True))

    def _marker(self, batch_id: int, first_task: int) -> StepMarker | None:
        if self._place is None:
            return None
        return StepMarker(
            self.sink_id,
            batch_id,
            self._place,
            first_task,
            self._fingerprint,
            self._first_found,
            self._started_ms,
        )

    def _probe_pass(self) -> ProbePass:
        return ProbePass(self.table.name, tuple(x.column for x in self.table.lateness))

    def _slice_output(
        self,
        batch_id: int,
        headers: Mapping[str, list[tuple[str, bytes]]],
        first_task: int = OUTPUT_TASKS,
        with_views: bool = True,
    ) -> SliceOutput:
        """The slices' dead letters and, ``with_views``, the step views' records; without
        them the pass brings the probes back too (the first job of ADR 0008)."""
        return SliceOutput(
            self.table.name,
            self.table.dead_letter_topic,
            tuple(c.name for c in self.table.columns),
            self.plan.step_views if with_views else (),
            {self.table.name: table_units(self.table)},
            headers,
            self._marker(batch_id, first_task),
            () if with_views else tuple(x.column for x in self.table.lateness),
        )

    @staticmethod
    def _run_slices(job: DataFrame, writer: ProbePass | SliceOutput) -> list[Any]:
        """One job of a slice-views plan (ADR 0007): each source task does what ``writer``
        says over its slice and hands Spark one summary row. Both jobs collect the step's own
        batch (the source's summary rows alone), so nothing is planned for them."""
        rows = collect_with_order(job, StepOrder(slice_output=writer))
        return [summary for row in rows for summary in json.loads(row["message"])]

    def _new_slices(self) -> list[KafkaPartitionSlice]:
        """The slices Spark planned for this step (ADR 0008): none for a step without data
        (Spark runs one to evict state), nor if they are still the last step's."""
        slices = planned_slices(self.state_dir)
        return slices if slices and slices[0].step > self._last_step else []

    def _slice_job(
        self, batch: DataFrame, slices: list[KafkaPartitionSlice], writer: SliceWriter
    ) -> list[Any]:
        """A job of the step sink's own over the step's planned slices, not over the query
        (ADR 0008): task ``i`` reads slice ``i`` (from the slice cache, else from Kafka into
        it) and does what ``writer`` says, so its task number is its source task's."""
        if not slices:
            return []
        assert self.plan.source is not None
        run = partial(
            write_slices,
            spec=self.plan.source,
            conf=self.kafka_conf,
            state_dir=self.state_dir,
            writer=writer,
        )
        context = batch.sparkSession.sparkContext
        rows = context.parallelize(slices, len(slices)).mapPartitions(run).collect()
        return [summary for text in rows for summary in json.loads(text)]

    def _waterlines(self, summary: list[Any]) -> dict[str, TableStep]:
        """Per table, its step (None without data) and its waterlines from its probe summary
        rows, stored under its step in its state directory (S3, S5). Each table of a query
        numbers its own steps (its source's)."""
        out: dict[str, TableStep] = {}
        for table in self.plan.tables:
            state_dir = self._state_dirs[table.name]
            probes = [row for row in summary if row["kind"] == "probe" and row["rel"] == table.name]
            steps = {int(r["n"]) for r in probes}
            if not steps:
                # A step without data (Spark runs one to evict state): the waterline stands.
                out[table.name] = (None, load_waterlines(state_dir, 1 << 62))
                self._evicting[table.name] = out[table.name][1]
                continue
            step = max(steps)
            previous = load_waterlines(state_dir, step)
            lateness = tuple((x.column, x.amount) for x in table.lateness)
            waterlines = waterline_after(previous, probes, lateness)
            store_waterlines(state_dir, step, waterlines)
            out[table.name] = (step, waterlines)
            self._evicting[table.name] = waterlines if self._stateless else previous
        return out

    def _query_waterlines(
        self, steps: Mapping[str, TableStep]
    ) -> tuple[dict[str, int | None], dict[str, TimeUnit]]:
        """The query's waterline map and each key's unit (see :class:`TablePlan`)."""
        waterlines: dict[str, int | None] = {}
        units: dict[str, TimeUnit] = {}
        if len(self.plan.tables) == 1:
            waterlines, units = dict(steps[self.table.name][1]), dict(self._units)
        else:
            for table in self.plan.tables:
                values = steps[table.name][1]
                for column, unit in self._units_of[table.name].items():
                    waterlines[f"{table.name}.{column}"] = values.get(column)
                    units[f"{table.name}.{column}"] = unit
        completed, completed_units = view_waterlines(
            waterlines, units, self.plan.merged, self.plan.derived
        )
        return completed, cast(dict[str, TimeUnit], completed_units)

    def _headers(self, steps: Mapping[str, TableStep]) -> dict[str, Any]:
        """S14 headers from the query's waterline map."""
        waterlines, units = self._query_waterlines(steps)
        return view_headers(waterlines, self._time_sources, units)

    def _output_waterlines(
        self, steps: Mapping[str, TableStep]
    ) -> dict[str, tuple[int | None, TimeUnit]]:
        """Each output view's S14 waterline after the step, with its unit."""
        waterlines, units = self._query_waterlines(steps)
        return {
            view: (waterlines.get(key), units[key])
            for view, key in self._time_sources.items()
            if key is not None
        }

    def _write(self, batch: DataFrame, batch_id: int) -> list[StepReport]:
        """Write the step; one report per table of the query (the first table's also counts
        the query's outputs and replayed tasks)."""
        if self.plan.writes_in_query:
            summary, steps = self._write_in_query(batch, batch_id)
        else:
            summary, steps = self._write_by_jobs(batch, batch_id)
        first = steps[self.table.name][0]
        if first is not None:
            self._last_step = first
        reports = {
            name: StepReport(name, batch_id, step, waterlines=waterlines)
            for name, (step, waterlines) in steps.items()
        }
        query = reports[self.table.name]
        self._headers_values = self._output_waterlines(steps)
        late_details: list[dict[str, Any]] = []
        for row in summary:
            report = reports.get(row["rel"], query)
            if row["kind"] == "dead_letter":
                report.dead_letters[row["reason"]] = report.dead_letters.get(
                    row["reason"], 0
                ) + int(row["n"])
            elif row["kind"] == "output":
                query.outputs[row["rel"]] = query.outputs.get(row["rel"], 0) + int(row["n"])
            elif row["kind"] == "replayed":
                query.replayed_tasks += int(row["n"])
            elif row["kind"] == "late_detail":
                late_details.extend(json.loads(row["detail"]))
            elif row["kind"] == "probe":
                report.accepted += int(json.loads(row["detail"])["_accepted"])
        for table in self.plan.tables:
            details = [d for d in late_details if d.get("table", self.table.name) == table.name]
            self._log_late(table, reports[table.name], details)
        return list(reports.values())

    def _write_by_jobs(
        self, batch: DataFrame, batch_id: int
    ) -> tuple[list[Any], dict[str, TableStep]]:
        if self.plan.slice_views:
            summary = self._run_slices(batch, self._probe_pass())
        else:
            summary = self._first_job(batch, batch_id)
        steps = self._waterlines(summary)
        fault_point("between_jobs", batch_id)
        headers = self._headers(steps)
        outputs: list[DataFrame] = []
        if self.plan.slice_views:
            summary += self._run_slices(batch, self._slice_output(batch_id, headers))
        else:
            produce = self._produce(batch_id, OUTPUT_TASKS, headers)
            outputs = produce_step_views(batch, self.plan.table, self.plan.step_views, produce)
            if not self.plan.rereadable:  # its dead letters and the records made in the query
                written = batch.filter(~F.col("kind").isin("probe", "row")).drop("row")
                outputs.insert(0, written.mapInArrow(produce, SUMMARY_SCHEMA))
        if outputs:
            summary += reduce(DataFrame.union, outputs).collect()
        return summary, steps

    def _write_in_query(
        self, batch: DataFrame, batch_id: int
    ) -> tuple[list[Any], dict[str, TableStep]]:
        """A step of a plan whose query writes its aggregates' records (ADR 0008): in local
        mode, when the query reads the source once, one job, whose writing tasks compute the
        headers from the probes the source tasks leave; otherwise a job of the sink's own
        over the planned slices first. Then, if the table has step views, a job over the
        slices writes them with the dead letters."""
        slices = self._new_slices()
        marker = self._marker(batch_id, OUTPUT_TASKS)
        context = batch.sparkSession.sparkContext
        local = (context.master or "").startswith("local")
        if slices and local and self.plan.query.scans_once:
            step = slices[0].step
            rendezvous = ProbeRendezvous(
                self._probe_dir,
                step,
                tuple(part.partition for part in slices),
                load_waterlines(self.state_dir, step),
                self._lateness,
                self._units,
                self._time_sources,
                self.plan.merged,
                self.plan.derived,
            )
            # The dead letters go with the step views' records when there are any, else with
            # the records of the query's first writing task.
            dead_letters = not self.plan.step_views
            side = SourceSide(
                self.table.name,
                tuple(x.column for x in self.table.lateness),
                self._probe_dir,
                self.table.dead_letter_topic if dead_letters else None,
            )
            write = StepWrite({}, marker, rendezvous, dead_letters=dead_letters)
            rows = collect_with_order(batch, StepOrder(source_side=side, step_write=write))
            # The same files and functions the writing tasks computed the headers from.
            summary = rendezvous.summaries()
            steps = self._waterlines(summary)
            for suffix in (".json", ".dead.arrow"):
                forget_steps_before(self._probe_dir, step - 3, suffix)
            summary += rows
            fault_point("between_jobs", batch_id)
        else:
            # The dead letters go with the step views' records when there are any.
            first: SliceWriter = (
                self._probe_pass()
                if self.plan.step_views
                else self._slice_output(batch_id, {}, first_task=0, with_views=False)
            )
            summary = self._slice_job(batch, slices, first)
            steps = self._waterlines(summary)
            fault_point("between_jobs", batch_id)
            write = StepWrite(self._headers(steps), marker)
            summary += collect_with_order(batch, StepOrder(step_write=write))
        if self.plan.step_views and slices:
            views = self._slice_output(batch_id, self._headers(steps), first_task=0)
            summary += self._slice_job(batch, slices, views)
        return summary, steps

    def _log_late(self, table: Table, report: StepReport, details: list[dict[str, Any]]) -> None:
        """S6: late rows in powers of ten per table, every dead-letter reason with counts."""
        details.sort(key=lambda d: (d["partition"], d["offset"]))
        readable = []
        units = self._units_of[table.name]
        for detail in details:
            unit = units.get(str(detail["column"]), "integer")
            readable.append(
                {
                    "column": detail["column"],
                    "partition": detail["partition"],
                    "offset": detail["offset"],
                    "topic": table.topic,
                    "value": format_time_value(detail["value"], unit),
                    "waterline": format_time_value(detail["waterline"], unit),
                }
            )
        late = report.dead_letters.get("late", 0)
        if late:
            self.late_log.log_step(table.name, dict(enumerate(readable)), count=late)
        log_dead_letters(log, table.name, report.dead_letters)

    def _report(self, report: StepReport) -> None:
        now_ms = int(time.time() * 1000)
        table = next(t for t in self.plan.tables if t.name == report.table)
        units = self._units_of[table.name]
        if self.metrics is not None:
            for col, value in report.waterlines.items():
                self.metrics.set_waterline(table.name, col, value, units[col], now_ms)
            self.metrics.add_input(table.name, table.topic, report.records_in)
            for reason, n in report.dead_letters.items():
                self.metrics.add_dead_letters(table.name, reason, n)
            for view in self.plan.output_views if table == self.table else ():
                assert view.output is not None
                self.metrics.add_output(
                    view.name, view.output.topic, report.outputs.get(view.name, 0)
                )
                header = self._headers_values.get(view.name)
                if header is not None and header[1] == "ms":
                    self.metrics.set_output_waterline(view.name, header[0])
            if table == self.table:
                self.metrics.observe_step(report.seconds)
        log.info(
            "step",
            table=table.name,
            batch=report.batch_id,
            step=report.step,
            accepted=report.accepted,
            dead_letters=report.dead_letters,
            outputs=report.outputs,
            replayed_tasks=report.replayed_tasks,
            seconds=round(report.seconds, 3),
            waterlines={c: format_time_value(v, units[c]) for c, v in report.waterlines.items()},
        )
        if self.on_step is not None:
            self.on_step(report)
