"""Exactly once (SPEC S15): a writing task's records and its step marker in one Kafka
transaction.

Each Spark task of a step writes its records in one Kafka transaction whose
``transactional.id`` names the sink (one per checkpoint and table query) and the task's
partition index, so a zombie writer of the same task -- a crashed run's, or a retried
attempt's -- is fenced and its open transaction aborted by ``init_transactions``. In the same
transaction the task commits a *step marker*: a consumer-group offset (group = the
transactional.id) equal to ``batch_id + 1`` on partition 0 of the table's dead-letter topic,
carrying the step's fingerprint and the task's counts as offset metadata
(:func:`app.connectors.sink.summary.encode_marker`). A replayed step (Spark re-runs the last
batch after a crash between the Kafka commit and its own commit log) finds its marker and
writes nothing, returning the counts it stored, so read_committed consumers see every record
once. This relies on the step's task partitions being the same on replay: the union's
partitions are the source slices (fixed by the offsets in Spark's offset log) and the
aggregate's shuffle partitions (fixed by the checkpoint; adaptive execution is off), and each
partition's rows are a function of the replayed input and state; see docs/reliability.md.
The fingerprint checks it: a marker whose fingerprint (the step's input ranges and plan,
:mod:`app.connectors.sink.fingerprint`) is not the replay's refuses the replay with a
:class:`~app.errors.SinkError`, before anything is written; a marker written before
fingerprints is trusted as before.

A task's producer is kept in its process's pool (:mod:`app.connectors.sink.producers`) for the
id's next task there, which then skips ``init_transactions``; :func:`open_transaction` says
how fencing stays exact when the id has moved to another writer since.

Errors: inside :func:`write_transaction` the client's own exceptions are judged as they are
(retried when the broker may recover, given up when fatal); what gives up is a
:class:`~app.errors.SinkError` naming the transactional id and what to check.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from app.connectors.sink.fingerprint import fingerprints_differ, replay_refused
from app.connectors.sink.producers import Opened, ProducerPool, producer_pool
from app.connectors.sink.runs import Run, flush, produce_run
from app.connectors.sink.summary import decode_marker, encode_marker
from app.errors import KafkaError, SinkError, kafka_reason

__all__ = [
    "TRANSACTION_RETRY_SECONDS",
    "StepMarker",
    "open_early",
    "open_transaction",
    "task_partition",
    "write_transaction",
]

#: How long a task keeps retrying a transaction the broker could not take (a broker restart).
TRANSACTION_RETRY_SECONDS = 240.0


@dataclass(frozen=True)
class StepMarker:
    """Where a task's step marker lives: see the module docstring (S15).

    ``sink_id`` is unique per checkpoint and table query (the step sink keeps it in the
    checkpoint), ``anchor_topic`` an existing topic the marker offset is committed on.
    """

    sink_id: str
    batch_id: int
    anchor_topic: str
    #: Added to the task's partition index: a step may write in both of its jobs, and no two
    #: tasks of a step may share a transactional id, and so a marker.
    first_task: int = 0
    #: The step's fingerprint (:func:`~app.connectors.sink.fingerprint.step_fingerprint`),
    #: kept in the marker and compared on replay; None: none kept, none compared.
    fingerprint: str | None = None

    def transactional_id(self, task: int) -> str:
        return f"tidemark-{self.sink_id}-{self.first_task + task}"


def task_partition() -> int:
    """The partition of the Spark task running this (0 outside a task): what numbers a
    task's transactional id and marker."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def open_transaction(
    pool: ProducerPool, conf: Mapping[str, str], tid: str, anchor_topic: str
) -> Opened:
    """A producer of ``tid``: the one ``pool`` kept from its last task of the id, else a new
    one, initialised: ``init_transactions`` fences any earlier writer of the task and aborts its
    open transaction, so the committed marker read next is final.

    A kept producer is not initialised again. Whether another writer of the id came since (the
    task run in another worker, a retried attempt) its claim tells for this machine, and the
    broker for certain: the transaction's first request, the marker's offset commit, fails for
    a fenced producer before any record (:func:`write_transaction`). The marker read here can
    be stale only if such a writer came, and then that request fails and the task opens anew."""
    from confluent_kafka import TopicPartition

    group = pool.marker_reader(conf, tid)
    kept = pool.take(tid)
    if kept is not None:
        producer, token = kept
    else:
        producer, token = pool.transactional(conf, tid)
    done = group.committed([TopicPartition(anchor_topic, 0)], timeout=60)[0]
    return Opened(producer, token, group, done, kept is not None)


def open_early(conf: Mapping[str, str], marker: StepMarker | None) -> None:
    """Start opening this task's transaction now, in a thread, so that creating the
    producer, fencing (``init_transactions``) and reading the marker overlap the task's work
    before its records instead of following it: against a local broker that took a
    transaction's critical part from 42-52 ms to 26-33 ms (median), with rare
    ~0.5 s inits hidden too. The task's :func:`~app.connectors.sink.produce.produce_partition`
    takes it over, or waits it out if the task has nothing to write. Opened for one batch
    only: an opening left by an earlier step is never used (its marker reading is stale)."""
    if marker is None:
        return
    pool = producer_pool()
    tid = marker.transactional_id(task_partition())
    if pool.opening_for(tid, marker.batch_id) is not None:
        return
    pool.forget_opening(tid)
    opener = partial(open_transaction, pool, dict(conf), tid, marker.anchor_topic)
    pool.start_opening(tid, marker.batch_id, opener)


def _opened(pool: ProducerPool, conf: Mapping[str, str], tid: str, marker: StepMarker) -> Opened:
    """The transaction :func:`open_early` opened for this very batch, else a new one."""
    opening = pool.opening_for(tid, marker.batch_id)
    if opening is not None:
        pool.take_opening(tid)
        return opening.result()
    pool.forget_opening(tid)
    return open_transaction(pool, conf, tid, marker.anchor_topic)


def write_transaction(
    conf: Mapping[str, str],
    runs: list[Run],
    marker: StepMarker,
    task: int,
    summary: list[dict[str, Any]],
) -> list[dict[str, Any]] | None:
    """Write the runs' records and the step marker in one transaction; None when written now, the
    stored summary when the marker says this (sink, batch, task) was committed before by a run
    with the same fingerprint (or by one that kept none), else a :class:`SinkError`."""
    from confluent_kafka import KafkaException, TopicPartition

    pool = producer_pool()
    tid = marker.transactional_id(task)
    deadline = time.monotonic() + TRANSACTION_RETRY_SECONDS
    offset = TopicPartition(
        marker.anchor_topic,
        0,
        marker.batch_id + 1,
        metadata=encode_marker(summary, marker.fingerprint),
    )
    gone: list[str] = []  # topics of the step found missing while a flush waited
    while True:
        opened: Opened | None = None
        checked = False
        try:
            opened = _opened(pool, conf, tid, marker)
            producer, group = opened.producer, opened.group
            if opened.done.offset is not None and opened.done.offset > marker.batch_id:
                pool.keep(tid, producer, opened.token)
                break  # committed before: judged below, outside the retries
            producer.begin_transaction()
            # The marker first: its request carries the producer's epoch, so a kept producer
            # that another writer of the id has fenced since fails here, before any record.
            producer.send_offsets_to_transaction([offset], group.consumer_group_metadata(), 60)
            checked = True
            # No delivery callback: a record Kafka did not take puts the transaction in the
            # abortable state and its commit fails (librdkafka's transactional contract), which
            # the retry below handles. A callback per record cost ~0.3 of the ~2.4 µs of CPU a
            # record took to produce.
            for run in runs:
                produce_run(producer, run)
            remaining = flush(
                producer, partial(_check_topics, producer, runs, marker.anchor_topic, tid, gone)
            )
            if remaining:
                raise SinkError(f"Kafka did not acknowledge {remaining} records")
            producer.commit_transaction(120)
            pool.keep(tid, producer, opened.token)
            return None
        except (KafkaException, KafkaError) as exc:
            if gone and opened is not None:  # raised by _check_topics: no retry can help
                with contextlib.suppress(KafkaException):
                    opened.producer.purge()
                    opened.producer.abort_transaction(30)
                raise
            error = exc.args[0] if exc.args and hasattr(exc.args[0], "fatal") else None
            fatal = error is not None and error.fatal() and not error.retriable()
            if fatal and opened is not None and opened.kept and not checked:
                continue  # the id moved to another writer since this worker's last task of it
            if not fatal and opened is not None:
                with contextlib.suppress(KafkaException):
                    opened.producer.abort_transaction(30)
                # A topic deleted under the running service: no retry brings it back.
                missing = missing_topics(opened.producer, runs, marker.anchor_topic)
                if missing:
                    raise _missing(tid, missing, exc) from exc
            if fatal or time.monotonic() > deadline:
                raise _failure(conf, tid, marker, exc, fatal) from exc
            pool.drop_marker_reader(conf, tid)  # a fresh one next time
            time.sleep(1.0)  # the broker is restarting or the coordinator moved: try again
    return replayed_counts(opened.done.offset, opened.done.metadata or "", marker, tid)


def replayed_counts(
    committed: int, metadata: str, marker: StepMarker, tid: str
) -> list[dict[str, Any]]:
    """The counts a replayed task reports, from the marker its id has committed (offset
    ``committed``, its ``metadata``), if the marker proves the replay would write what was
    written: the marker is this batch's and its fingerprint is the replay's (or it kept none,
    as markers written before fingerprints). Else a :class:`SinkError` that refuses the
    replay: a marker of a later batch means the checkpoint is behind what the sink committed
    (a restored copy, or Spark's logs lost entries), whose fingerprints no marker keeps."""
    stored, counts = decode_marker(metadata)
    where = f"the step marker of transaction {tid}"
    if committed > marker.batch_id + 1:
        raise replay_refused(
            marker.batch_id,
            f"{where} is at batch {committed - 1}, past this one: the checkpoint is behind what"
            " the sink committed (restored from a copy, or Spark's offset and commit logs lost"
            " entries)",
        )
    if stored is not None and marker.fingerprint is not None and stored != marker.fingerprint:
        raise replay_refused(
            marker.batch_id, fingerprints_differ(where, stored, marker.fingerprint)
        )
    return counts


def missing_topics(client: Any, runs: list[Run], anchor_topic: str | None) -> list[str]:
    """The topics of ``runs`` (and the step marker's) the cluster does not have, by a
    metadata request of ``client``; none when the cluster does not answer (a broker restart,
    which the retry rides out)."""
    from confluent_kafka import KafkaException

    wanted = {run[0] for run in runs} | ({anchor_topic} if anchor_topic else set())
    try:
        existing = client.list_topics(timeout=10).topics
    except KafkaException:
        return []
    return sorted(t for t in wanted if t not in existing)


def _missing(tid: str, missing: list[str], exc: BaseException | None) -> SinkError:
    """The error of a step whose topics are gone from the cluster (no retry can help)."""
    why = f" ({kafka_reason(exc)})" if exc is not None else ""
    return SinkError(
        f"topic(s) {', '.join(missing)} do not exist (deleted while the service ran?):"
        f" transaction {tid} cannot write to them{why}. Create them again (or run again:"
        " Tidemark creates missing output and dead-letter topics at start-up); the run"
        " continues from its checkpoint"
    )


def _check_topics(
    producer: Any, runs: list[Run], anchor_topic: str, tid: str, gone: list[str]
) -> None:
    """Called while a flush waits: the records of a deleted topic would wait until they time
    out (two minutes), so a missing topic (noted in ``gone``) ends the transaction at once."""
    missing = missing_topics(producer, runs, anchor_topic)
    if missing:
        gone.extend(missing)
        raise _missing(tid, missing, None)


def _failure(
    conf: Mapping[str, str], tid: str, marker: StepMarker, exc: BaseException, fatal: bool
) -> SinkError:
    """The error a transaction that gave up raises: which transaction, why, what to check."""
    what = (
        f"transaction {tid} of step batch {marker.batch_id} (step marker on topic"
        f" {marker.anchor_topic})"
    )
    if fatal:
        return SinkError(
            f"{what} failed: {kafka_reason(exc)}: either another writer of the same task took"
            " its transactional id over (a retried task attempt, or a second run on the same"
            " checkpoint) or the broker refused the id; check that one run at a time uses the"
            " checkpoint and that Tidemark's user may use transactional ids tidemark-*"
        )
    return SinkError(
        f"{what} still failing after {TRANSACTION_RETRY_SECONDS:g} s: {kafka_reason(exc)}:"
        f" check that the brokers at {conf.get('bootstrap.servers')} run and accept"
        " transactions (transaction.state.log.replication.factor, min.insync.replicas) and"
        " TIDEMARK_KAFKA_* for a secured cluster"
    )
