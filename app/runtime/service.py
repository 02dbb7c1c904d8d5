"""Run a compiled circuit on Spark: one streaming query per table, until stopped.

``once=True`` processes everything available and stops (Spark's availableNow trigger), then a
later call continues from the checkpoint: backfills and tests use it to control steps.
SIGTERM (Kubernetes stopping the pod) lets the step in flight finish, then stops cleanly.
"""

from __future__ import annotations

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
from pyspark.sql.streaming import StreamingQuery

from app.circuit.ir import Circuit
from app.errors import KafkaError
from app.runtime.plan import check_supported, plan_table
from app.runtime.session import spark_session
from app.runtime.step_sink import StepMetrics, StepReport, StepSink

__all__ = ["Service", "ensure_topics"]

log = structlog.get_logger("tidemark.service")


def ensure_topics(circuit: Circuit, kafka_conf: Mapping[str, str], timeout: float = 30) -> None:
    """Input topics must exist (a clear error otherwise); output and dead-letter topics are
    created when missing, with as many partitions as their table's input topic."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({**kafka_conf, "log_level": 3})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except Exception as exc:
        raise KafkaError(
            f"cannot reach the Kafka cluster at {kafka_conf.get('bootstrap.servers')}: {exc}"
        ) from exc
    existing = metadata.topics
    missing_inputs = [t for t in circuit.tables if t.topic not in existing]
    if missing_inputs:
        raise KafkaError(
            "input topic(s) missing: "
            + ", ".join(f"{t.topic} (table {t.name})" for t in missing_inputs)
            + ": create them, or fix 'topic' in the program"
        )
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


@dataclass
class Service:
    circuit: Circuit
    kafka_conf: Mapping[str, str]
    checkpoint: Path
    spark_master: str = "local[2]"
    trigger_interval_ms: int = 1000
    max_records_per_step: int = 200_000
    shuffle_partitions: int = 4
    metrics: StepMetrics | None = None
    on_step: Callable[[StepReport], None] | None = None
    queries: list[StreamingQuery] = field(default_factory=list)
    spark: SparkSession | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)

    def start(self, once: bool = False) -> None:
        check_supported(self.circuit)
        ensure_topics(self.circuit, self.kafka_conf)
        started = time.monotonic()
        self.spark = spark_session(self.spark_master, self.shuffle_partitions)
        log.info(
            "spark.started", master=self.spark_master, seconds=round(time.monotonic() - started, 1)
        )
        for table in self.circuit.tables:
            base = self.checkpoint / table.name
            state_dir = str(base / "tidemark")
            plan = plan_table(
                self.spark,
                self.circuit,
                table,
                self.kafka_conf,
                state_dir,
                self.max_records_per_step,
            )
            sink = StepSink(plan, self.kafka_conf, state_dir, self.metrics, self.on_step)
            writer = (
                plan.frame.writeStream.foreachBatch(sink)
                .queryName(f"tidemark-{table.name}")
                .option("checkpointLocation", str(base / "spark"))
                .outputMode("append")
            )
            writer = (
                writer.trigger(availableNow=True)
                if once
                else writer.trigger(processingTime=f"{self.trigger_interval_ms} milliseconds")
            )
            self.queries.append(writer.start())
            log.info("query.started", table=table.name, topic=table.topic, checkpoint=str(base))

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
            if all(not q.isActive for q in self.queries):
                break
            for q in self.queries:
                if q.exception() is not None:
                    self.stop()
                    raise q.exception()  # type: ignore[misc]
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.stop()

    def stop(self, drain_seconds: float = 120) -> None:
        """Let each query finish the step in flight, then stop it."""
        deadline = time.monotonic() + drain_seconds
        for q in self.queries:
            while q.isActive and q.status.get("isTriggerActive") and time.monotonic() < deadline:
                time.sleep(0.1)
            if q.isActive:
                q.stop()
        errors = [q.exception() for q in self.queries if q.exception() is not None]
        self.queries.clear()
        if errors:
            raise errors[0]  # type: ignore[misc]

    def shutdown(self) -> None:
        if self.spark is not None:
            self.spark.stop()
            self.spark = None
