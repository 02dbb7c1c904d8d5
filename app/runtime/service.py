"""Run a compiled circuit on Spark: one streaming query per table, until stopped.

``once=True`` processes everything available and stops (the end offsets seen at
start are the target; Python sources cannot use Spark's availableNow trigger), then a
later call continues from the checkpoint: backfills and tests use it to control steps.
SIGTERM (Kubernetes stopping the pod) lets the step in flight finish, then stops cleanly.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import structlog
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from app.circuit.ir import Circuit
from app.connectors.kafka_source import SliceCache, topic_end_offsets
from app.errors import KafkaError
from app.runtime.aggregate import polls_every_step
from app.runtime.physical import PhysicalPlan, physical_plan
from app.runtime.plan import check_supported, plan_table
from app.runtime.session import spark_session
from app.runtime.step_sink import StepMetrics, StepReport, StepSink

__all__ = ["POLLED_INTERVAL_MS", "Service", "ensure_topics", "step_interval_ms"]

log = structlog.get_logger("tidemark.service")


def ensure_topics(
    circuit: Circuit,
    kafka_conf: Mapping[str, str],
    timeout: float = 30,
    wait_for_topics_seconds: float = 0,
) -> None:
    """Input topics must exist (a clear error otherwise, after waiting up to
    ``wait_for_topics_seconds`` for them to appear); output and dead-letter topics are
    created when missing, with as many partitions as their table's input topic."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({**kafka_conf, "log_level": 3})
    deadline = time.monotonic() + wait_for_topics_seconds
    while True:
        try:
            metadata = admin.list_topics(timeout=timeout)
        except Exception as exc:
            raise KafkaError(
                f"cannot reach the Kafka cluster at {kafka_conf.get('bootstrap.servers')}: {exc}"
            ) from exc
        existing = metadata.topics
        missing_inputs = [t for t in circuit.tables if t.topic not in existing]
        if not missing_inputs:
            break
        if time.monotonic() >= deadline:
            waited = f" (waited {wait_for_topics_seconds:g} s)" if wait_for_topics_seconds else ""
            raise KafkaError(
                "input topic(s) missing: "
                + ", ".join(f"{t.topic} (table {t.name})" for t in missing_inputs)
                + f"{waited}: create them, fix 'topic' in the program, or set "
                "TIDEMARK_WAIT_FOR_TOPICS_SECONDS to wait for them"
            )
        log.info("topics.waiting", missing=[t.topic for t in missing_inputs])
        time.sleep(min(2.0, max(0.1, deadline - time.monotonic())))
    wanted: dict[str, int] = {}
    for table in circuit.tables:
        partitions = len(existing[table.topic].partitions)
        wanted.setdefault(table.dead_letter_topic, partitions)
        for view in circuit.views:
            if view.output is not None and circuit.root_table(view.name).name == table.name:
                wanted.setdefault(view.output.topic, partitions)
    new = [
        NewTopic(
            name, num_partitions=n, replication_factor=-1, config={"max.message.bytes": "10485760"}
        )
        for name, n in wanted.items()
        if name not in existing
    ]
    if new:
        for name, future in admin.create_topics(new, request_timeout=timeout).items():
            try:
                future.result()
                log.info("topic.created", topic=name)
            except Exception as exc:  # noqa: BLE001 - an existing topic is fine
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise KafkaError(f"cannot create topic {name}: {exc}") from exc


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


@dataclass
class Service:
    circuit: Circuit
    kafka_conf: Mapping[str, str]
    checkpoint: Path
    spark_master: str = "local[2]"
    trigger_interval_ms: int = 0
    max_records_per_step: int = 200_000
    shuffle_partitions: int = 4
    metrics: StepMetrics | None = None
    on_step: Callable[[StepReport], None] | None = None
    wait_for_topics_seconds: float = 0
    exactly_once: bool = True
    #: Where Spark's own logs go (``app.runtime.session.spark_session``); None: the console.
    spark_log: Path | None = None
    queries: list[StreamingQuery] = field(default_factory=list)
    spark: SparkSession | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    _targets: dict[str, dict[int, int]] = field(default_factory=dict)
    #: Queries that run a step every trigger (AFTER DELAY), and for each the batch id of the
    #: first progress seen with the target offsets committed (``--once``).
    _polled: set[str] = field(default_factory=set)
    _reached: dict[str, int] = field(default_factory=dict)
    _physical: PhysicalPlan | None = None

    @property
    def physical(self) -> PhysicalPlan:
        """The circuit's physical plan (app/runtime/physical.py), computed once."""
        if self._physical is None:
            self._physical = physical_plan(self.circuit)
        return self._physical

    def open_session(self) -> SparkSession:
        """The service's Spark session, started with the JVM options its circuit needs (a
        JVM that holds no rows compiles less, :func:`app.runtime.session.spark_session`)."""
        if self.spark is None:
            started = time.monotonic()
            self.spark = spark_session(
                self.spark_master,
                self.shuffle_partitions,
                rows_in_jvm=self.physical.rows_in_jvm,
                spark_log=self.spark_log,
            )
            log.info(
                "spark.started",
                master=self.spark_master,
                seconds=round(time.monotonic() - started, 1),
            )
        return self.spark

    def start(self, once: bool = False, listener: Any = None) -> None:
        check_supported(self.circuit)
        ensure_topics(
            self.circuit, self.kafka_conf, wait_for_topics_seconds=self.wait_for_topics_seconds
        )
        spark = self.open_session()
        if listener is not None:
            spark.streams.addListener(listener)
        self._targets = {}
        self._polled = set()
        self._reached = {}
        for table in self.circuit.tables:
            base = self.checkpoint / table.name
            state_dir = str(base / "tidemark")
            stop_at = topic_end_offsets(self.kafka_conf, table.topic) if once else None
            plan = plan_table(
                spark,
                self.circuit,
                self.physical.query_of(table.name),
                table,
                self.kafka_conf,
                state_dir,
                self.max_records_per_step,
                stop_at,
            )
            sink = StepSink(
                plan, self.kafka_conf, state_dir, self.metrics, self.on_step, self.exactly_once
            )
            polled = polls_every_step(
                [
                    v
                    for v in self.circuit.views
                    if v.output is not None and self.circuit.root_table(v.name).name == table.name
                ]
            )
            interval = step_interval_ms(self.trigger_interval_ms, polled=polled, once=once)
            query = (
                plan.frame.writeStream.foreachBatch(sink)
                .queryName(self.physical.query_of(table.name).name)
                .option("checkpointLocation", str(base / "spark"))
                .outputMode("append")
                .trigger(processingTime=f"{interval} milliseconds")
                .start()
            )
            self.queries.append(query)
            if stop_at is not None:
                self._targets[query.id] = stop_at
            if polled:
                self._polled.add(query.id)
            log.info("query.started", table=table.name, topic=table.topic, checkpoint=str(base))

    def query_topics(self) -> dict[str, str]:
        """Query name -> input topic, for the input-lag probe."""
        return {f"tidemark-{t.name}": t.topic for t in self.circuit.tables}

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
            if all(not q.isActive or self._caught_up(q) for q in self.queries):
                break
            for q in self.queries:
                if q.exception() is not None:
                    self.stop()
                    raise q.exception()  # type: ignore[misc]
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
        target = self._targets.get(query.id)
        if target is None:
            return False
        if query.id in self._polled:
            return self._polled_caught_up(query, target)
        status = query.status
        if status.get("isTriggerActive") or status.get("isDataAvailable"):
            return False
        progress = query.lastProgress
        if not target or not any(target.values()):
            return progress is not None
        if progress is None or not _past_target(progress, target):
            return False
        # Wait out the no-data step Spark runs right after a watermark move (it evicts state and
        # writes AFTER WATERMARK rows): done only when Spark has looked for work and found none,
        # twice, with no new progress in between.
        for _ in range(2):
            time.sleep(0.5)
            status = query.status
            if (
                status.get("isTriggerActive")
                or query.lastProgress != progress
                or status.get("message") != "Waiting for data to arrive"
            ):
                return False
        return True

    def _polled_caught_up(self, query: StreamingQuery, target: Mapping[int, int]) -> bool:
        progress = query.lastProgress
        if progress is None:
            return False
        batch = int(progress["batchId"])
        reached = self._reached.get(query.id)
        if reached is not None:
            return batch > reached
        if target and any(target.values()) and not _past_target(progress, target):
            return False
        self._reached[query.id] = batch
        return False

    def stop(self, drain_seconds: float = 120) -> None:
        """Let each query finish the step in flight, then stop it."""
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
        errors = [q.exception() for q in self.queries if q.exception() is not None]
        self.queries.clear()
        for table in self.circuit.tables:
            # The decoded slices only serve the branches of a running step (local disk).
            SliceCache(str(self.checkpoint / table.name / "tidemark")).clear()
        if errors:
            raise errors[0]  # type: ignore[misc]

    def shutdown(self) -> None:
        if self.spark is not None:
            self.spark.stop()
            self.spark = None


def _past_target(progress: Mapping[str, Any], target: Mapping[int, int]) -> bool:
    """Whether a step's end offsets (its progress) are at or past ``target`` per partition."""
    end = progress["sources"][0].get("endOffset")
    if not end:
        return False
    done = json.loads(end) if isinstance(end, str) else end
    reached = {int(p): int(o) for p, o in done.get("partitions", {}).items()}
    return all(reached.get(p, 0) >= o for p, o in target.items())
