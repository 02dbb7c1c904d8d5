"""Exactly once (SPEC S15): a writing task's records and its step marker in one Kafka
transaction.

Each Spark task of a step writes its records in one Kafka transaction whose
``transactional.id`` names the sink (one per checkpoint and table query) and the task's
partition index, so a zombie writer of the same task -- a crashed run's, or a retried
attempt's -- is fenced and its open transaction aborted by ``init_transactions``. In the same
transaction, after its records, the task produces its *step marker*: a record of the
markers' compacted topic keyed by the transactional id, holding the batch, the step's
fingerprint and the task's counts (:mod:`app.connectors.sink.markers`, ADR 0016). A replayed
step (Spark re-runs the last batch after a crash between the Kafka commit and its own commit
log) finds its marker and writes nothing, returning the counts it stored, so read_committed
consumers see every record once. Where markers are read: the driver reads them for a run's
first step (the only one Spark can replay) and hands each task its own; a retried task
attempt reads its own after fencing the earlier attempt; no other task can have one.

A replay skips a task only if it would write what was written: the union's partitions are the
source slices (fixed by the offsets in Spark's offset log) and the aggregate's shuffle
partitions (fixed by the checkpoint; adaptive execution is off), and each partition's rows are
a function of the replayed input and state; see docs/reliability.md. The fingerprint checks
it: a marker whose fingerprint (the step's input ranges and plan,
:mod:`app.connectors.sink.fingerprint`) is not the replay's refuses the replay with a
:class:`~app.errors.SinkError`, before anything is written.

A task's producer is kept in its process's pool (:mod:`app.connectors.sink.producers`) for the
id's next task there, which then skips ``init_transactions``; a kept producer that another
writer of the id has fenced since fails its transaction, which then commits nothing, and the
task opens a fresh producer and reads its marker as a retried attempt does.

Errors: inside :func:`write_transaction` the client's own exceptions are judged as they are
(retried when the broker may recover, given up when fatal); what gives up is a
:class:`~app.errors.SinkError` naming the transactional id and what to check.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from app.connectors.sink.fingerprint import fingerprints_differ, replay_refused
from app.connectors.sink.markers import (
    CLOCK_MARGIN_MS,
    FoundMarker,
    MarkerPlace,
    marker_value,
    read_markers,
)
from app.connectors.sink.producers import Opened, ProducerPool, producer_pool
from app.connectors.sink.runs import Run, flush, produce_run
from app.connectors.sink.summary import decode_marker, encode_marker
from app.errors import KafkaError, SinkError, kafka_reason
from app.fault_points import fault_point

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
    """What a task needs of its step marker: see the module docstring (S15).

    ``sink_id`` is unique per checkpoint and table query (the step sink keeps it in the
    checkpoint); ``place`` is the sink's partition of the markers' topic.
    """

    sink_id: str
    batch_id: int
    place: MarkerPlace
    #: Added to the task's partition index: a step may write in both of its jobs, and no two
    #: tasks of a step may share a transactional id, and so a marker.
    first_task: int = 0
    #: The step's fingerprint (:func:`~app.connectors.sink.fingerprint.step_fingerprint`),
    #: kept in the marker and compared on replay; None: none kept, none compared.
    fingerprint: str | None = None
    #: The run's first step: the markers of this batch the driver read at its start, by
    #: transactional id (a task not among them has none). None: a later step of the run, whose
    #: tasks have no marker unless an earlier attempt of theirs wrote it.
    found: tuple[tuple[str, FoundMarker], ...] | None = None
    #: When the driver began the step (epoch ms): a retried attempt reads markers from then.
    started_ms: int = 0

    def transactional_id(self, task: int) -> str:
        return f"tidemark-{self.sink_id}-{self.first_task + task}"

    def prefix(self) -> str:
        """The start of every transactional id of the sink."""
        return f"tidemark-{self.sink_id}-"


def task_partition() -> int:
    """The partition of the Spark task running this (0 outside a task): what numbers a
    task's transactional id and marker."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def retried_attempt() -> bool:
    """Whether the Spark task running this is a retry: an earlier attempt may have committed
    its transaction. (A writing task consumes all its input before it writes, so a stage
    resubmitted for a failed shuffle fetch re-runs only tasks that had not written.)"""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context is not None and context.attemptNumber() > 0


def open_transaction(
    pool: ProducerPool,
    conf: Mapping[str, str],
    tid: str,
    marker: StepMarker,
    read: bool,
) -> Opened:
    """A producer of ``tid`` and the marker of this batch it finds committed, if any.

    The producer is the one ``pool`` kept from its last task of the id, else a new one,
    initialised: ``init_transactions`` fences any earlier writer of the task and aborts its
    open transaction. ``read`` (a retried attempt, a kept producer found fenced, or a
    transaction tried again after an error, whose commit may have reached the broker): always
    a new producer, then this id's markers read from the step's start, which after the fence
    are final. Else the marker is the driver's (the run's first step) or none."""
    kept = None if read else pool.take(tid)
    if kept is not None:
        producer, token = kept
    else:
        stale = pool.take(tid) if read else None
        if stale is not None:
            stale[0].close()
        producer, token = pool.transactional(conf, tid)
    done: FoundMarker | None = None
    if read:
        since = marker.started_ms - CLOCK_MARGIN_MS
        done = read_markers(conf, marker.place, tid, since_ms=since, fence=False).get(tid)
    elif marker.found is not None:
        done = dict(marker.found).get(tid)
    return Opened(producer, token, done, kept is not None)


def open_early(conf: Mapping[str, str], marker: StepMarker | None) -> None:
    """Start opening this task's transaction now, in a thread, so that creating the
    producer and fencing (``init_transactions``) overlap the task's work before its records
    instead of following it: against a local broker that took a transaction's critical part
    from 42-52 ms to 26-33 ms (median), with rare ~0.5 s inits hidden too. The task's
    :func:`~app.connectors.sink.produce.produce_partition` takes it over, or waits it out if
    the task has nothing to write. Opened for one batch only: an opening left by an earlier
    step is never used (its marker belongs to that step)."""
    if marker is None:
        return
    pool = producer_pool()
    tid = marker.transactional_id(task_partition())
    if pool.opening_for(tid, marker.batch_id) is not None:
        return
    pool.forget_opening(tid)
    opener = partial(open_transaction, pool, dict(conf), tid, marker, retried_attempt())
    pool.start_opening(tid, marker.batch_id, opener)


def _opened(
    pool: ProducerPool, conf: Mapping[str, str], tid: str, marker: StepMarker, read: bool
) -> Opened:
    """The transaction :func:`open_early` opened for this very batch (with the same
    ``read``: it is taken on a task's first try only), else a new one."""
    opening = pool.opening_for(tid, marker.batch_id)
    if opening is not None:
        pool.take_opening(tid)
        return opening.result()
    pool.forget_opening(tid)
    return open_transaction(pool, conf, tid, marker, read)


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
    from confluent_kafka import KafkaException

    pool = producer_pool()
    tid = marker.transactional_id(task)
    deadline = time.monotonic() + TRANSACTION_RETRY_SECONDS
    value = marker_value(marker.batch_id, encode_marker(summary, marker.fingerprint))
    place = marker.place
    read = retried_attempt()
    gone: list[str] = []  # topics of the step found missing while a flush waited
    while True:
        opened: Opened | None = None
        try:
            opened = _opened(pool, conf, tid, marker, read)
            producer = opened.producer
            if opened.done is not None and opened.done.batch >= marker.batch_id:
                pool.keep(tid, producer, opened.token)
                break  # committed before: judged below, outside the retries
            producer.begin_transaction()
            # No delivery callback: a record Kafka did not take puts the transaction in the
            # abortable state and its commit fails (librdkafka's transactional contract), which
            # the retry below handles. A callback per record cost ~0.3 of the ~2.4 µs of CPU a
            # record took to produce.
            for run in runs:
                produce_run(producer, run)
            # The marker last: the sink's partition of the markers' topic is in this
            # transaction for as short a time as can be (a read there waits for it).
            producer.produce(place.topic, value, tid.encode(), partition=place.partition)
            fault_point("after_marker", marker.batch_id)
            remaining = flush(
                producer, partial(_check_topics, producer, runs, place.topic, tid, gone)
            )
            if remaining:
                raise SinkError(f"Kafka did not acknowledge {remaining} records")
            fault_point("after_flush", marker.batch_id)
            producer.commit_transaction(120)
            fault_point("after_commit", marker.batch_id)
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
            if fatal and opened is not None and opened.kept:
                # The id moved to another writer since this worker's last task of it: nothing
                # of this transaction commits; the other writer may have written the step.
                with contextlib.suppress(KafkaException), warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # its close tries to abort, and is refused
                    opened.producer.close()
                read = True
                continue
            if not fatal and opened is not None:
                with contextlib.suppress(KafkaException):
                    opened.producer.abort_transaction(30)
                # A topic deleted under the running service: no retry brings it back.
                missing = missing_topics(opened.producer, runs, place.topic)
                if missing:
                    raise _missing(tid, missing, exc) from exc
            if fatal or time.monotonic() > deadline:
                raise _failure(conf, tid, marker, exc, fatal) from exc
            # The commit may have reached the broker before the error (a broker restart): the
            # next try fences this producer with a new one and reads its marker first.
            read = True
            time.sleep(1.0)  # the broker is restarting or the coordinator moved: try again
    assert opened.done is not None
    return replayed_counts(opened.done, marker, tid)


def replayed_counts(
    done: FoundMarker, marker: StepMarker, tid: str
) -> list[dict[str, Any]]:
    """The counts a replayed task reports, from the marker its id has committed (``done``),
    if the marker proves the replay would write what was written: the marker is this
    batch's and its fingerprint is the replay's (or it kept none). Else a
    :class:`SinkError` that refuses the replay: a marker of a later batch means the
    checkpoint is behind what the sink committed (a restored copy, or Spark's logs lost
    entries), whose fingerprints no marker keeps."""
    stored, counts = decode_marker(done.metadata)
    where = f"the step marker of transaction {tid}"
    if done.batch > marker.batch_id:
        raise replay_refused(marker.batch_id, behind(where, done.batch))
    if stored is not None and marker.fingerprint is not None and stored != marker.fingerprint:
        raise replay_refused(
            marker.batch_id, fingerprints_differ(where, stored, marker.fingerprint)
        )
    return counts


def behind(where: str, batch: int) -> str:
    """Why a replay refuses when ``where`` (a marker) is of a later ``batch``."""
    return (
        f"{where} is at batch {batch}, past this one: the checkpoint is behind what the sink"
        " committed (restored from a copy, or Spark's offset and commit logs lost entries)"
    )


def missing_topics(client: Any, runs: list[Run], marker_topic: str | None) -> list[str]:
    """The topics of ``runs`` (and the step markers') the cluster does not have, by a
    metadata request of ``client``; none when the cluster does not answer (a broker restart,
    which the retry rides out)."""
    from confluent_kafka import KafkaException

    wanted = {run[0] for run in runs} | ({marker_topic} if marker_topic else set())
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
    producer: Any, runs: list[Run], marker_topic: str, tid: str, gone: list[str]
) -> None:
    """Called while a flush waits: the records of a deleted topic would wait until they time
    out (two minutes), so a missing topic (noted in ``gone``) ends the transaction at once."""
    missing = missing_topics(producer, runs, marker_topic)
    if missing:
        gone.extend(missing)
        raise _missing(tid, missing, None)


def _failure(
    conf: Mapping[str, str], tid: str, marker: StepMarker, exc: BaseException, fatal: bool
) -> SinkError:
    """The error a transaction that gave up raises: which transaction, why, what to check."""
    what = (
        f"transaction {tid} of step batch {marker.batch_id} (step marker on topic"
        f" {marker.place.topic} partition {marker.place.partition})"
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
