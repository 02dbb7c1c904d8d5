"""Run a compiled circuit on Spark: one streaming query per table, until stopped.

``once=True`` processes everything available and stops (the end offsets seen at
start are the target; Python sources cannot use Spark's availableNow trigger), then a
later call continues from the checkpoint: backfills and tests use it to control steps.
SIGTERM (Kubernetes stopping the pod) lets the step in flight finish, then stops cleanly.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import structlog
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from app.circuit.ir import Circuit
from app.config import Settings
from app.connectors.kafka_consumers import consumer_pool
from app.connectors.kafka_offsets import topic_end_offsets
from app.connectors.sink.markers import MarkerTopic, ensure_marker_topic
from app.connectors.topics import TopicDefaults, ensure_topics
from app.errors import ConfigError, KafkaError, ProgramError, SparkError, kafka_reason
from app.runtime.checkpoint_lease import CheckpointLease
from app.runtime.checkpoint_lock import CheckpointLock
from app.runtime.operators.aggregate_support import polls_every_step
from app.runtime.operators.query import plan_query
from app.runtime.planner.checkpoint_plan import CheckpointVerdict, guard_checkpoint
from app.runtime.planner.compose import PREFIX_FILE, Composed, compose
from app.runtime.planner.physical import PhysicalPlan, QueryPlan
from app.runtime.planner.plan_fingerprint import plan_fingerprint
from app.runtime.session import spark_session
from app.runtime.step.slice_cache import SliceCache
from app.runtime.step.step_sink import StepMetrics, StepReport, StepSink
from app.runtime.store import is_url, join, store_at

__all__ = [
    "POLLED_INTERVAL_MS",
    "Service",
    "check_cluster",
    "ensure_topics",
    "prepare_checkpoint",
    "query_failure",
    "step_interval_ms",
]

log = structlog.get_logger("tidemark.service")


def prepare_checkpoint(checkpoint: str | Path) -> None:
    """The checkpoint (a directory, or an ``s3a://bucket/prefix``, ADR 0025) exists and this
    process can write in it (Spark's offsets, the source's state and for a directory by
    default Spark's log all go there), else a ConfigError that names it, before Spark or
    Kafka is touched."""
    where = str(checkpoint)
    store_at(where).check_writable(where)


def stage_prefix(checkpoint: str | Path, program: str) -> str:
    """The prefix of the internal topics of a checkpoint's stage boundaries:
    ``tidemark.<program>.<id>``, the id made once per checkpoint and kept in it, so two runs
    of one program on two checkpoints never share an internal topic."""
    path = join(str(checkpoint), PREFIX_FILE)
    store = store_at(path)
    found = store.read_text(path)
    if found is not None:
        return found.strip()
    prefix = f"tidemark.{re.sub(r'[^A-Za-z0-9_-]', '_', program)}.{uuid.uuid4().hex[:8]}"
    store.write(path, prefix)
    return prefix


#: A Tidemark error raised in a Python worker or in a step's sink, as its traceback ends.
_TIDEMARK_LINE = re.compile(r"^app\.errors\.(\w+): (.+)$", re.MULTILINE)


def _first_line(text: str, limit: int = 400) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def query_failure(name: str, exc: BaseException, spark_log: Path | None) -> SparkError:
    """The error of a streaming query that stopped, in one line: the Tidemark error that
    stopped it when one did (a worker's or the sink's traceback ends with it), else the first
    line of Spark's message; the whole of it is in Spark's log."""
    text = getattr(exc, "_desc", None) or ""
    if not text:
        try:
            text = str(exc)
        except Exception:  # noqa: BLE001 - str() of a Spark error asks a JVM that may be gone
            text = type(exc).__name__
    found = _TIDEMARK_LINE.findall(text)
    reason = found[-1][1].strip() if found else _first_line(text)
    where = f"Spark's log {spark_log}" if spark_log is not None else "Spark's log (the console)"
    error = SparkError(
        f"streaming query {name} stopped: {reason}. The whole error is in {where}; fix the"
        " cause and run again: the query continues from its checkpoint"
    )
    error.__cause__ = exc
    return error



#: ``--once``: how long a query past its target must stay idle, at one batch id, to be done.
IDLE_SECONDS = 1.0

#: How often a table with an AFTER DELAY view steps when the trigger interval is 0.
POLLED_INTERVAL_MS = 1000


def step_interval_ms(trigger_interval_ms: int, *, polled: bool, once: bool) -> int:
    """The Spark trigger interval of one table's query.

    0 (the default) runs steps back to back: a step starts as soon as the previous one ends
    and input is waiting, as a plain Spark query does. A table with an AFTER DELAY view
    (``polled``) steps even without input, to write held changes whose delay is over
    (processing-time timeouts); back to back that would spin, so it keeps a positive
    interval: the configured one, else :data:`POLLED_INTERVAL_MS`. ``--once`` runs the other
    tables back to back whatever the interval (and stops by the offsets it reached, see
    ``Service._caught_up``)."""
    if polled:
        return trigger_interval_ms or POLLED_INTERVAL_MS
    return 0 if once else trigger_interval_ms


def check_cluster(circuit: Circuit, bootstrap_servers: str) -> None:
    """Every ``'properties.bootstrap.servers'`` of a Flink table names the service's own
    cluster (at least one of its bootstrap servers): a program's topics are all read and
    written by one cluster, whose transactions make the output exactly-once (S15).

    Raises:
        ConfigError: a table or output that names another cluster, before anything starts.
    """
    own = {s.strip().lower() for s in bootstrap_servers.split(",") if s.strip()}
    named = [(f"table {t.name}", t.bootstrap_servers) for t in circuit.tables] + [
        (f"table {v.name}", v.output.bootstrap_servers) for v in circuit.views
        if v.output is not None]
    for what, servers in named:
        if servers is None:
            continue
        theirs = {s.strip().lower() for s in servers.split(",") if s.strip()}
        if not theirs & own:
            raise ConfigError(
                f"{what} names the Kafka cluster '{servers}' ('properties.bootstrap.servers'),"
                f" but the service's is '{bootstrap_servers}' (bootstrap_servers): a program"
                " reads and writes one cluster, whose transactions make its output exactly-once"
                " (S15). Name one of the service's bootstrap servers in the option, or remove"
                " the option"
            )


@dataclass
class Service:
    """A circuit run by the settings of one :class:`~app.config.Settings` object: its Kafka
    client settings (``kafka_config()``), checkpoint, Spark master, trigger interval, step
    size, shuffle partitions, topic wait, exactly-once and where Spark's logs go."""

    circuit: Circuit
    settings: Settings
    metrics: StepMetrics | None = None
    on_step: Callable[[StepReport], None] | None = None
    queries: list[StreamingQuery] = field(default_factory=list)
    spark: SparkSession | None = None
    #: The step sinks of the running queries, closed when they stop.
    _sinks: list[StepSink] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)
    #: ``--once``: per query, the end offsets of each of its topics seen at start.
    _targets: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)
    #: Queries that run a step every trigger (AFTER DELAY), and for each the batch id of the
    #: first progress seen with the target offsets committed (``--once``).
    _polled: set[str] = field(default_factory=set)
    _reached: dict[str, int] = field(default_factory=dict)
    #: ``--once``: the queries found caught up. Nothing they read is written after their
    #: target (a query reading boundaries starts after their writers stopped), so a query
    #: caught up once stays so.
    _settled: set[str] = field(default_factory=set)
    #: ``--once``: per query, the batch id it was first seen idle at, past its target, and when.
    _idle_since: dict[str, tuple[int, float]] = field(default_factory=dict)
    _composed: Composed | None = None
    #: ``--once``: the queries not started yet, each after the queries whose views it reads
    #: through stage boundaries have read their end offsets (ADR 0023).
    _pending: list[QueryPlan] = field(default_factory=list)
    _once: bool = False
    _markers: MarkerTopic | None = None
    #: Held from start() until the queries stopped: one driver per checkpoint.
    _lock: CheckpointLock | CheckpointLease | None = None
    #: What start() found in the checkpoint: the plan it was made with, against the
    #: circuit's (ADR 0015).
    plan_verdict: CheckpointVerdict | None = None

    @property
    def kafka_conf(self) -> dict[str, str]:
        """The librdkafka settings of every client the service creates."""
        return self.settings.kafka_config()

    @property
    def checkpoint(self) -> str:
        """The checkpoint: a directory, or an ``s3a://bucket/prefix`` (ADR 0025)."""
        return self.settings.checkpoint

    @property
    def composed(self) -> Composed:
        """The circuit as Spark runs it, with its stage boundaries (app/runtime/planner/compose.py),
        computed once; its internal topics are named after the checkpoint's stage prefix."""
        if self._composed is None:
            prepare_checkpoint(self.checkpoint)
            program = self.settings.program.stem if self.settings.program else "program"
            self._composed = compose(self.circuit, stage_prefix(self.checkpoint, program))
        return self._composed

    @property
    def running(self) -> Circuit:
        """The circuit the queries run: the program's, with its stage boundaries."""
        return self.composed.circuit

    @property
    def physical(self) -> PhysicalPlan:
        """The running circuit's physical plan (app/runtime/planner/physical.py)."""
        return self.composed.physical

    def open_session(self) -> SparkSession:
        """The service's Spark session, started with the JVM options its circuit needs (a
        JVM that holds no rows compiles less, :func:`app.runtime.session.spark_session`)."""
        if self.spark is None:
            started = time.monotonic()
            spark_log = self.settings.spark_log_path
            try:
                self.spark = spark_session(
                    self.settings.spark_master,
                    self.settings.shuffle_partitions,
                    rows_in_jvm=self.physical.rows_in_jvm,
                    spark_log=spark_log,
                    object_store=self.settings.s3 if is_url(self.checkpoint) else None,
                )
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001 - pyspark, py4j and OSError: the JVM's start
                where = f"; Spark's log: {spark_log}" if spark_log is not None else ""
                raise SparkError(
                    f"Spark could not start (master {self.settings.spark_master}):"
                    f" {_first_line(str(exc))}. Java 17 must be on PATH or in JAVA_HOME, and"
                    " --spark-master (TIDEMARK_SPARK_MASTER) must be local[N] or a cluster"
                    f" that answers{where}"
                ) from exc
            log.info(
                "spark.started",
                master=self.settings.spark_master,
                seconds=round(time.monotonic() - started, 1),
            )
        return self.spark

    def start(self, once: bool = False, listener: Any = None) -> None:
        if self.composed.refused:
            raise ProgramError(list(self.composed.refused))
        check_cluster(self.circuit, self.settings.bootstrap_servers)
        prepare_checkpoint(self.checkpoint)
        # Before anything in the checkpoint is read or created (the sink id above all).
        self._lock = self._lock or (
            CheckpointLease(self.checkpoint, self.settings.s3)
            if is_url(self.checkpoint)
            else CheckpointLock(Path(self.checkpoint))
        )
        program = self.settings.program
        self._lock.acquire(
            self.settings.checkpoint_lock_wait_seconds, str(program) if program else None
        )
        try:
            # Under the lock, before Spark or the step files read the checkpoint: a plan the
            # checkpoint's state cannot follow is refused here, with nothing written (ADR 0015).
            self.plan_verdict = guard_checkpoint(
                self.checkpoint, plan_fingerprint(self.running, self.physical)
            )
            self._start(once, listener)
        except BaseException:
            self._release_lock()
            raise

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def _start(self, once: bool, listener: Any) -> None:
        kafka_conf = self.kafka_conf
        ensure_topics(
            self.running,
            kafka_conf,
            wait_for_topics_seconds=self.settings.wait_for_topics_seconds,
            defaults=TopicDefaults.of(self.settings),
        )
        self._markers = None
        if self.settings.exactly_once:
            topic = self.settings.marker_topic
            partitions = ensure_marker_topic(kafka_conf, topic, self.settings.topic_replicas)
            self._markers = MarkerTopic(topic, partitions)
        spark = self.open_session()
        if listener is not None:
            spark.streams.addListener(listener)
        self._targets = {}
        self._polled = set()
        self._reached = {}
        self._settled = set()
        self._idle_since = {}
        self._once = once
        queries = list(self.physical.queries)
        # --once: a query reading stage boundaries starts once the queries writing them have
        # read their end offsets, so that its own end offsets hold their rows (ADR 0023).
        self._pending = [q for q in queries if once and self._reads_boundaries(q)]
        self._launch([q for q in queries if q not in self._pending])

    def _reads_boundaries(self, query: QueryPlan) -> bool:
        return any(self.running.table(t).stage_input is not None for t in query.tables)

    def _launch(self, queries: list[QueryPlan]) -> None:
        """Start the streaming query of each of ``queries``."""
        spark = self.open_session()
        once = self._once
        kafka_conf = self.kafka_conf
        markers = self._markers
        program = self.settings.program.stem if self.settings.program else "program"
        for query_plan in queries:
            tables = [self.running.table(name) for name in query_plan.tables]
            # The query's Spark checkpoint is its first table's; each table keeps its own
            # step files (waterlines, slices) in its own directory.
            base = join(self.checkpoint, tables[0].name)
            state_dirs = {t.name: join(self.checkpoint, t.name, "tidemark") for t in tables}
            stop_at: dict[str, dict[int, int]] | None = None
            if once:
                stop_at = {t.name: self._end_offsets(t.name, t.topic) for t in tables}
            plan = plan_query(
                spark,
                self.running,
                query_plan,
                kafka_conf,
                state_dirs,
                self.settings.max_records_per_step,
                stop_at,
                fail_on_data_loss=self.settings.fail_on_data_loss,
            )
            sink = StepSink(
                plan,
                kafka_conf,
                self.metrics,
                self.on_step,
                markers,
                position_group=f"tidemark.{program}.{query_plan.name}",
                renew_lease=(
                    self._lock.renew if isinstance(self._lock, CheckpointLease) else None
                ),
            )
            polled = polls_every_step(list(plan.output_views))
            interval = step_interval_ms(
                self.settings.trigger_interval_ms, polled=polled, once=once
            )
            try:
                query = (
                    plan.frame.writeStream.foreachBatch(sink)
                    .queryName(query_plan.name)
                    .option("checkpointLocation", join(base, "spark"))
                    .outputMode("append")
                    .trigger(processingTime=f"{interval} milliseconds")
                    .start()
                )
            except Exception as exc:  # noqa: BLE001 - pyspark's errors and py4j's, at the start
                raise SparkError(
                    f"the streaming query of table {tables[0].name} did not start:"
                    f" {_first_line(str(exc))}. Check the checkpoint directory {base}: a"
                    " checkpoint written by another program or Spark version cannot be"
                    " continued, give a new --checkpoint (TIDEMARK_CHECKPOINT)"
                ) from exc
            self.queries.append(query)
            self._sinks.append(sink)
            if stop_at is not None:
                self._targets[query.id] = {
                    t.topic: stop_at[t.name] for t in tables
                }
            if polled:
                self._polled.add(query.id)
            log.info(
                "query.started",
                query=query_plan.name,
                tables=[t.name for t in tables],
                topics=[t.topic for t in tables],
                checkpoint=str(base),
            )

    def _end_offsets(self, table: str, topic: str) -> dict[int, int]:
        """``--once``: the end offsets of a table's topic seen at start, its target."""
        from confluent_kafka import KafkaException

        kafka_conf = self.kafka_conf
        try:
            return topic_end_offsets(kafka_conf, topic)
        except KafkaException as exc:
            raise KafkaError(
                f"cannot read the end offsets of topic {topic} (table {table}):"
                f" {kafka_reason(exc)}: check that the broker at"
                f" {kafka_conf.get('bootstrap.servers')} runs and answers"
            ) from exc

    def query_topics(self) -> dict[str, str]:
        """Query name -> its first table's input topic, for the input-lag probe (the offsets
        of a query's sources name their topics, so a query of several tables needs none)."""
        return {q.name: self.running.table(q.tables[0]).topic for q in self.physical.queries}

    def state_views(self) -> dict[str, list[str | None]]:
        """Query name -> the view of each stateful operator, in plan order."""
        return {q.name: list(q.state_operators) for q in self.physical.queries}

    def request_stop(self, *_: Any) -> None:
        """Signal handler: finish the step in flight, then stop (SIGTERM, SIGINT)."""
        self._stopping.set()

    def install_signal_handlers(self) -> None:
        def handler(signum: int, _frame: FrameType | None) -> None:
            log.info("service.stopping", signal=signal.Signals(signum).name)
            self.request_stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def wait(self, timeout_seconds: float | None = None) -> None:
        """Block until every query ends (``once``), a stop is requested, or the timeout."""
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        while not self._stopping.is_set():
            # Every query is looked at in each pass, so their idle clocks run together.
            if all([not q.isActive or self._caught_up(q) for q in self.queries]):
                if not self._pending:
                    break
                # --once: the queries written so far are done; those reading their
                # boundaries start now, with the boundaries' end offsets as their target.
                self._halt()
                ready = [q for q in self._pending if not self._upstream_pending(q)]
                self._pending = [q for q in self._pending if q not in ready]
                self._launch(ready)
                continue
            if any(q.exception() is not None for q in self.queries):
                self.stop()  # raises the failure of the first query that stopped with one
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.stop()

    def _caught_up(self, query: StreamingQuery) -> bool:
        """``--once``: the query committed the end offsets seen at start and is idle (Spark
        has also run the no-data step that evicts state once the waterline moved).

        A query with an AFTER DELAY view is never idle (a step every trigger): it is done once
        a step has completed after the one that committed the end offsets, which ran with the
        waterline those offsets moved (windows complete, S11). A change still held by its delay
        then is written by a later run (docs/semantics.md)."""
        if query.id in self._settled:
            return True
        target = self._targets.get(query.id)
        if target is None:
            return False
        if query.id in self._polled:
            caught_up = self._polled_caught_up(query, target)
        else:
            caught_up = self._idle_past(query, target)
        if caught_up:
            self._settled.add(query.id)
        return caught_up

    def _idle_past(self, query: StreamingQuery, target: Mapping[str, Mapping[int, int]]) -> bool:
        status = query.status
        if status.get("isTriggerActive") or status.get("isDataAvailable"):
            self._idle_since.pop(query.id, None)
            return False
        progress = query.lastProgress
        if not _has_records(target):
            return progress is not None
        if (
            progress is None
            or not _past_target(progress, target)
            or status.get("message") != "Waiting for data to arrive"
        ):
            self._idle_since.pop(query.id, None)
            return False
        # Wait out the no-data step Spark runs right after a watermark move (it evicts state and
        # writes AFTER WATERMARK rows): done only when Spark has looked for work and found none
        # for IDLE_SECONDS, with no new batch in between. An idle query reports a progress
        # every 10 s with the same batch id: that is no step.
        batch, now = int(progress["batchId"]), time.monotonic()
        seen = self._idle_since.get(query.id)
        if seen is None or seen[0] != batch:
            self._idle_since[query.id] = (batch, now)
            return False
        return now - seen[1] >= IDLE_SECONDS

    def _polled_caught_up(
        self, query: StreamingQuery, target: Mapping[str, Mapping[int, int]]
    ) -> bool:
        progress = query.lastProgress
        if progress is None:
            return False
        batch = int(progress["batchId"])
        reached = self._reached.get(query.id)
        if reached is not None:
            return batch > reached
        if _has_records(target) and not _past_target(progress, target):
            return False
        self._reached[query.id] = batch
        return False

    def _upstream_pending(self, query: QueryPlan) -> bool:
        """Whether a pending query writes a boundary ``query`` reads."""
        read = {self.running.table(t).topic for t in query.tables}
        return any(
            view.output is not None and view.output.topic in read
            for other in self._pending
            if other is not query
            for view in (self.running.view(v.view) for v in other.views)
        )

    def _halt(self, drain_seconds: float = 120) -> None:
        """Let each running query finish the step in flight, then stop it; the first failure
        is raised once all are stopped."""
        deadline = time.monotonic() + drain_seconds
        for q in self.queries:
            # A query with an AFTER DELAY view may run its steps back to back (a step every
            # trigger, longer than the interval on a busy machine): there, the step in flight
            # is done when a newer progress appears, not when no trigger is active.
            polled = q.id in self._polled
            running = q.lastProgress["batchId"] if polled and q.lastProgress else None
            while q.isActive and q.status.get("isTriggerActive") and time.monotonic() < deadline:
                if polled and q.lastProgress and q.lastProgress["batchId"] != running:
                    break
                time.sleep(0.05 if polled else 0.1)
            if q.isActive:
                q.stop()
        errors = [
            query_failure(str(q.name), failure, self.settings.spark_log_path)
            for q in self.queries
            if (failure := q.exception()) is not None
        ]
        self.queries.clear()
        for sink in self._sinks:
            sink.close()
        self._sinks.clear()
        if errors:
            raise errors[0]

    def stop(self, drain_seconds: float = 120) -> None:
        """Let each query finish the step in flight, then stop it."""
        self._pending = []
        try:
            self._halt(drain_seconds)
        finally:
            self._finish()

    def _finish(self) -> None:
        for table in self.running.tables if self._composed is not None else self.circuit.tables:
            # The decoded slices only serve the branches of a running step (local disk).
            SliceCache(join(self.checkpoint, table.name, "tidemark")).clear()
        # The offset queries' consumers of this (driver) process end with its queries.
        consumer_pool().close()
        self._release_lock()

    def shutdown(self) -> None:
        if self.spark is not None:
            self.spark.stop()
            self.spark = None


def _has_records(target: Mapping[str, Mapping[int, int]]) -> bool:
    return any(any(offsets.values()) for offsets in target.values())


def _past_target(progress: Mapping[str, Any], target: Mapping[str, Mapping[int, int]]) -> bool:
    """Whether a step's end offsets (its progress, one source per topic) are at or past
    ``target`` (topic -> partition -> offset) for every partition of every topic."""
    reached: dict[str, dict[int, int]] = {}
    for source in progress["sources"]:
        end = source.get("endOffset")
        if not end:
            continue
        done = json.loads(end) if isinstance(end, str) else end
        # Offsets of a checkpoint from before sources named their topic: one source, one topic.
        topic = done.get("topic") or next(iter(target))
        reached[topic] = {int(p): int(o) for p, o in done.get("partitions", {}).items()}
    return all(
        reached.get(topic, {}).get(p, 0) >= o
        for topic, offsets in target.items()
        for p, o in offsets.items()
    )
