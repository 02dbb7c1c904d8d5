"""The Kafka sink: writes one step's output changes and dead letters, exactly once (SPEC S15).

Every row reaching the sink is a sink record (:mod:`app.connectors.sink_record`, the one
definition of its shape; :data:`SINK_SCHEMA` is its Spark schema): a ``topic`` per row (so one
query writes every output view and the dead-letter topic), the key and value bytes, headers,
and for dead letters the source coordinates and the late-gate details from which the SPEC S6
headers are built here. :func:`produce_partition` runs on the executors inside ``mapInArrow``.

Exactly once (S15): each Spark task of a step writes its records in one Kafka transaction whose
``transactional.id`` names the sink (one per checkpoint and table query) and the task's
partition index, so a zombie writer of the same task -- a crashed run's, or a retried
attempt's -- is fenced and its open transaction aborted by ``init_transactions``. In the same
transaction the task commits a *step marker*: a consumer-group offset (group = the
transactional.id) equal to ``batch_id + 1`` on partition 0 of the table's dead-letter topic,
carrying the task's counts as offset metadata. A replayed step (Spark re-runs the last batch
after a crash between the Kafka commit and its own commit log) finds its marker and writes
nothing, returning the counts it stored, so read_committed consumers see every record once.
This relies on the step's task partitions being the same on replay: the union's partitions
are the source slices (fixed by the offsets in Spark's offset log) and the aggregate's shuffle
partitions (fixed by the checkpoint; adaptive execution is off), and each partition's rows are
a function of the replayed input and state; see docs/reliability.md. A task's producer is kept
in its worker for the id's next task there (``_KEPT``), which then skips ``init_transactions``;
``_open`` says how fencing stays exact when the id has moved to another writer since.

Without ``exactly_once`` (a broker without transactions) the producer is idempotent with
``acks=all`` and a replay is byte-identical, so consumers can de-duplicate.
It yields one summary row per (kind, relation, topic, reason) so the driver can count without
touching the records again, plus the first late rows' details for the S6 log.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import tempfile
import time
import zlib
from collections import Counter, OrderedDict
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.connectors.sink_record import (
    HEADERS,
    KEY,
    KIND,
    LATE_COLUMN,
    LATE_VALUE,
    LATE_WATERLINE,
    MESSAGE,
    REASON,
    REL,
    SINK_SCHEMA,
    SRC_OFFSET,
    SRC_PARTITION,
    STEP,
    TOPIC,
    VALUE,
)
from app.errors import KafkaError

__all__ = [
    "LATE_DETAIL_CAP",
    "SINK_SCHEMA",
    "SUMMARY_SCHEMA",
    "StepMarker",
    "format_time_value",
    "open_early",
    "probe_summary",
    "produce_partition",
    "task_partition",
]

SUMMARY_SCHEMA = "kind string, rel string, topic string, reason string, n bigint, detail string"

#: How many late rows per task carry their full details back to the driver (S6 log).
LATE_DETAIL_CAP = 1000

_PRODUCERS: dict[str, Any] = {}


def format_time_value(value: int | None, unit: str) -> str:
    """A waterline or time value as a header: ISO-8601 UTC for TIMESTAMP (unit 'ms')."""
    if value is None:
        return "-infinity"
    if unit == "ms":
        moment = datetime.fromtimestamp(value / 1000, tz=UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value % 1000:03d}Z"
    return str(value)


_SUMMARY_ARROW = pa.schema(
    [
        ("kind", pa.string()),
        ("rel", pa.string()),
        ("topic", pa.string()),
        ("reason", pa.string()),
        ("n", pa.int64()),
        ("detail", pa.string()),
    ]
)

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
    #: Added to the task's partition index: a step may write in both of its jobs (the dead
    #: letters of a rereadable plan in the first, the outputs in the second), and no two
    #: tasks of a step may share a transactional id, and so a marker.
    first_task: int = 0

    def transactional_id(self, task: int) -> str:
        return f"tidemark-{self.sink_id}-{self.first_task + task}"


def _producer(conf: Mapping[str, str]) -> Any:
    from confluent_kafka import Producer

    key = json.dumps(conf, sort_keys=True)
    producer = _PRODUCERS.get(key)
    if producer is None:
        producer = Producer({**conf, **_PRODUCER_SETTINGS, "enable.idempotence": True})
        _PRODUCERS[key] = producer
    return producer


_PRODUCER_SETTINGS: dict[str, Any] = {
    # Connect to the brokers as soon as their addresses are known. With librdkafka's default
    # (sparse connections), init_transactions often found no connection to the coordinator
    # yet and waited for its 500 ms coordinator query timer: 22 of 48 fresh transactional
    # producers took ~0.51 s to init against a local broker, none with this off (median
    # 8 ms); every writing task of every step starts one.
    "enable.sparse.connections": False,
    "acks": "all",
    # Delivery reports of failed records only: a step produces every output record through
    # here, and a Python callback per delivered record was a fifth of the producer's CPU
    # (50,000 transactional records: 0.19 s -> 0.15 s). A transaction with a failed
    # record cannot commit either way.
    "delivery.report.only.error": True,
    "linger.ms": 5,
    "batch.num.messages": 10000,
    "message.max.bytes": 10485760,
    "log_level": 3,
}


def task_partition() -> int:
    """The partition of the Spark task running this (0 outside a task): what numbers a
    task's transactional id and marker."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def produce_partition(
    batches: Iterator[pa.RecordBatch],
    conf: Mapping[str, str],
    tables: Mapping[str, Mapping[str, Any]],
    view_headers: Mapping[str, list[tuple[str, bytes]]],
    marker: StepMarker | None = None,
) -> Iterator[pa.RecordBatch]:
    """Write sink records (:data:`SINK_SCHEMA`) to Kafka; yield :data:`SUMMARY_SCHEMA` rows.

    ``tables``: table -> {"topic": source topic, "units": {column: 'ms'|'integer'}}.
    ``view_headers``: view -> extra headers for its records (S14 ``tidemark.waterline``).
    ``marker``: write in one transaction with a step marker (exactly once, S15); None: an
    idempotent producer (at least once, byte-identical replays).
    Probe rows are not written: each comes back as a summary row of kind ``probe`` (``n``:
    the step, ``detail``: the maxima), so the first job of a rereadable plan's step writes the
    dead letters and brings the probes in one pass, on a replay too (ADR 0006).
    """
    try:
        yield from _produce_partition(batches, conf, tables, view_headers, marker)
    finally:
        if marker is not None:
            _forget_opened(marker.transactional_id(task_partition()))


def _produce_partition(
    batches: Iterator[pa.RecordBatch],
    conf: Mapping[str, str],
    tables: Mapping[str, Mapping[str, Any]],
    view_headers: Mapping[str, list[tuple[str, bytes]]],
    marker: StepMarker | None,
) -> Iterator[pa.RecordBatch]:
    runs: list[_Run] = []
    counts: Counter[tuple[str, str, str, str]] = Counter()
    late_details: list[dict[str, Any]] = []
    probes: list[dict[str, Any]] = []
    for batch in batches:
        kind_column = batch.column(KIND)
        if pc.any(pc.equal(kind_column, "probe")).as_py():
            kinds = kind_column.to_pylist()
            probes.extend(_probe_summaries(batch, kinds))
            batch = batch.filter(pc.not_equal(kind_column, "probe"))
            if not batch.num_rows:
                continue
        _count(counts, batch)
        keys = batch.column(KEY).to_pylist()
        values = batch.column(VALUE).to_pylist()
        dead_letters = pc.any(pc.equal(batch.column(KIND), "dead_letter")).as_py()
        headers_column = batch.column(HEADERS)
        if not dead_letters and headers_column.null_count == len(batch):
            # Output records only (a view's batch): one run per view and topic, sharing the
            # view's S14 headers, and no Python object per row but its key and value (the
            # per-row lists, tuples and counting were ~0.5-1 us a record).
            runs.extend(_output_runs(batch, keys, values, view_headers))
            continue
        rels = batch.column(REL).to_pylist()
        topics = batch.column(TOPIC).to_pylist()
        kinds = batch.column(KIND).to_pylist()
        own = headers_column.to_pylist() if headers_column.null_count < len(batch) else None
        dead = [i for i, kind in enumerate(kinds) if kind == "dead_letter"]
        dead_rows = dict(zip(dead, batch.take(dead).to_pylist(), strict=True)) if dead else {}
        for i, rel in enumerate(rels):
            found = own[i] if own is not None else None
            headers = [(h["key"], h["value"]) for h in found] if found else []
            row = dead_rows.get(i)
            if row is not None:
                headers.extend(_dead_letter_headers(row, tables[rel]))
                if row[REASON] == "late" and len(late_details) < LATE_DETAIL_CAP:
                    late_details.append(
                        {
                            "table": rel,
                            "partition": row[SRC_PARTITION],
                            "offset": row[SRC_OFFSET],
                            "column": row[LATE_COLUMN],
                            "value": row[LATE_VALUE],
                            "waterline": row[LATE_WATERLINE],
                        }
                    )
            else:
                headers.extend(view_headers.get(rel, ()))
            runs.append((topics[i], headers, [keys[i]], [values[i]]))
    summary = [
        {"kind": k, "rel": r, "topic": t, "reason": reason, "n": n, "detail": None}
        for (k, r, t, reason), n in counts.items()
    ]
    if runs:
        if marker is None:
            _write_idempotent(conf, runs)
        else:
            stored = _write_transaction(conf, runs, marker, task_partition(), summary)
            if stored is not None:
                # A replayed step: its records are already committed; report what was written.
                replayed = {"kind": "replayed", "rel": None, "topic": None, "reason": None}
                stored.append({**replayed, "n": 1, "detail": None})
                yield pa.RecordBatch.from_pylist([*stored, *probes], schema=_SUMMARY_ARROW)
                return
    if late_details:
        summary.append(
            {
                "kind": "late_detail",
                "rel": None,
                "topic": None,
                "reason": None,
                "n": len(late_details),
                "detail": json.dumps(late_details),
            }
        )
    yield pa.RecordBatch.from_pylist([*summary, *probes], schema=_SUMMARY_ARROW)


def _probe_summaries(batch: pa.RecordBatch, kinds: list[str]) -> list[dict[str, Any]]:
    at = [i for i, kind in enumerate(kinds) if kind == "probe"]
    rows = batch.take(at).select([REL, VALUE, STEP]).to_pylist()
    return [probe_summary(row[REL], row[STEP], bytes(row[VALUE]).decode()) for row in rows]


def probe_summary(rel: str, step: int, detail: str) -> dict[str, Any]:
    """A probe as the SUMMARY row the step sink reads: ``n`` the step, ``detail`` the JSON of
    the step maxima and the accepted-row count."""
    return {"kind": "probe", "rel": rel, "topic": None, "reason": None, "n": step, "detail": detail}


#: Records to produce in order: a topic, the headers they all carry, their keys and values.
_Run = tuple[str, list[tuple[str, bytes]], list[bytes | None], list[bytes | None]]

_COUNTED = [KIND, REL, TOPIC, REASON]


def _count(counts: Counter[tuple[str, str, str, str]], batch: pa.RecordBatch) -> None:
    """Add the batch's rows to ``counts`` by (kind, rel, topic, reason), grouped by Arrow
    rather than a tuple per row; a missing reason counts as ``""``."""
    table = pa.Table.from_batches([batch.select(_COUNTED)])
    grouped = table.group_by(_COUNTED, use_threads=False).aggregate([([], "count_all")])
    columns = [grouped.column(name).to_pylist() for name in (*_COUNTED, "count_all")]
    for kind, rel, topic, reason, n in zip(*columns, strict=True):
        counts[(kind, rel, topic, reason or "")] += n


def _output_runs(
    batch: pa.RecordBatch,
    keys: list[bytes | None],
    values: list[bytes | None],
    view_headers: Mapping[str, list[tuple[str, bytes]]],
) -> list[_Run]:
    """The runs of a batch of view records, in row order, each with its view's headers: one
    run when the batch is one view's (as the writers make them)."""
    rel_column, topic_column = batch.column(REL), batch.column(TOPIC)
    if len(pc.unique(rel_column)) == 1 and len(pc.unique(topic_column)) == 1:
        rel, topic = rel_column[0].as_py(), topic_column[0].as_py()
        return [(topic, list(view_headers.get(rel, ())), keys, values)]
    rels, topics = rel_column.to_pylist(), topic_column.to_pylist()
    runs: list[_Run] = []
    start = 0
    for end in range(1, len(rels) + 1):
        if end == len(rels) or (rels[end], topics[end]) != (rels[start], topics[start]):
            headers = list(view_headers.get(rels[start], ()))
            runs.append((topics[start], headers, keys[start:end], values[start:end]))
            start = end
    return runs


def _write_idempotent(conf: Mapping[str, str], runs: list[_Run]) -> None:
    producer = _producer(conf)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for topic, headers, keys, values in runs:
        for key, value in zip(keys, values, strict=True):
            _produce(producer, topic, key, value, headers, on_delivery)
    remaining = _flush(producer)
    if remaining or errors:
        raise KafkaError(f"Kafka did not acknowledge {remaining} records; errors: {errors[:5]}")


#: Brokers cap offset-commit metadata at 4096 bytes by default (offset.metadata.max.bytes).
_METADATA_LIMIT = 4000


def _encode_summary(summary: list[dict[str, Any]]) -> str:
    """The task's counts as step-marker metadata, small enough for the broker's limit.

    Rows become ``[kind, rel, topic, reason, n]`` lists, zlib-compressed when long (topic names
    repeat), so a task writing to a hundred topics still fits. Past the limit only the counts
    per kind are kept: a replay then reports coarser counts, never different records."""
    rows = [[r["kind"], r["rel"], r["topic"], r["reason"], r["n"]] for r in summary]
    text = json.dumps(rows, separators=(",", ":"))
    if len(text) > 1000:
        text = "z:" + base64.b64encode(zlib.compress(text.encode(), 9)).decode()
    if len(text) <= _METADATA_LIMIT:
        return text
    totals: dict[str, int] = {}
    for row in summary:
        totals[row["kind"]] = totals.get(row["kind"], 0) + int(row["n"])
    return json.dumps([[kind, None, None, None, n] for kind, n in totals.items()])


def _decode_summary(text: str) -> list[dict[str, Any]]:
    if text.startswith("z:"):
        text = zlib.decompress(base64.b64decode(text[2:])).decode()
    rows = json.loads(text or "[]")
    return [
        {"kind": k, "rel": r, "topic": t, "reason": reason, "n": n, "detail": None}
        for k, r, t, reason, n in rows
    ]


@dataclass
class _Opened:
    """A task's transaction made ready to begin: its producer, fenced and initialised (or kept
    from an earlier step of this worker, ``kept``), the consumer of its marker group, and the
    marker it found committed."""

    producer: Any
    token: bytes  # its claim (see _CLAIM_SLOTS)
    group: Any
    done: Any  # TopicPartition: the committed marker offset (None offset: never committed)
    kept: bool = False


#: Per worker process: each transactional id's producer, kept after its task's transaction
#: ended cleanly so the id's next task here skips creating and initialising one, with the
#: token of its claim. Creating and ``init_transactions`` took 7.3 ms at the median and up to
#: 507 ms (p99 78 ms) per writing task per step, and writing tasks waited for it.
#: Least recently used first.
_KEPT: OrderedDict[str, tuple[Any, bytes]] = OrderedDict()
#: Enough for every writing task of a few table queries; older producers are closed.
_KEPT_LIMIT = 16

#: Per machine: a slot per transactional id (by hash) holding the token of the producer that
#: was last initialised for it here. Spark hands a task number to whichever Python worker is
#: idle, so a task's id moves between the workers; a worker whose kept producer's token is no
#: longer in the slot knows another has fenced it, and opens anew without asking the broker
#: (who would answer with a fatal "fenced" error, logged). A hint only: a slot two ids share,
#: or a writer on another machine, shows as a moved id or is caught by the broker
#: (:func:`_write_transaction`), never as a producer wrongly trusted.
_CLAIM_SLOTS = 4096
_CLAIM_BYTES = 16
_claims_fd: int | None = None


def _claim_slot(tid: str) -> int:
    return (zlib.crc32(tid.encode()) % _CLAIM_SLOTS) * _CLAIM_BYTES


def _claims() -> int:
    global _claims_fd
    if _claims_fd is None:
        path = os.path.join(tempfile.gettempdir(), f"tidemark-writers-{os.getuid()}")
        _claims_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    return _claims_fd


def _claim(tid: str) -> bytes:
    """Mark a producer just initialised for ``tid`` as the id's writer on this machine."""
    token = os.urandom(_CLAIM_BYTES)
    os.pwrite(_claims(), token, _claim_slot(tid))
    return token


def _keep(tid: str, producer: Any, token: bytes) -> None:
    """Keep ``producer`` (no transaction open) for the next task of ``tid`` in this worker."""
    _KEPT[tid] = (producer, token)
    _KEPT.move_to_end(tid)
    while len(_KEPT) > _KEPT_LIMIT:
        _KEPT.popitem(last=False)[1][0].close()


def _kept(tid: str) -> tuple[Any, bytes] | None:
    """The producer this worker kept for ``tid``, if no producer was initialised for the id
    on this machine since (a stale one is closed)."""
    found = _KEPT.pop(tid, None)
    if found is not None and os.pread(_claims(), _CLAIM_BYTES, _claim_slot(tid)) != found[1]:
        found[0].close()
        return None
    return found


def _open(conf: Mapping[str, str], tid: str, anchor_topic: str) -> _Opened:
    """A producer of ``tid``: the one kept from this worker's last task of the id, else a new
    one, initialised: ``init_transactions`` fences any earlier writer of the task and aborts its
    open transaction, so the committed marker read next is final.

    A kept producer is not initialised again. Whether another writer of the id came since (the
    task run in another worker, a retried attempt) its claim tells for this machine, and the
    broker for certain: the transaction's first request, the marker's offset commit, fails for
    a fenced producer before any record (:func:`_write_transaction`). The marker read here can
    be stale only if such a writer came, and then that request fails and the task opens anew."""
    from confluent_kafka import Producer, TopicPartition

    group = _marker_reader(conf, tid)
    kept = _kept(tid)
    if kept is not None:
        producer, token = kept
    else:
        producer = Producer(
            {
                **conf,
                **_PRODUCER_SETTINGS,
                "transactional.id": tid,
                "transaction.timeout.ms": 120000,
            }
        )
        producer.init_transactions(60)
        token = _claim(tid)
    done = group.committed([TopicPartition(anchor_topic, 0)], timeout=60)[0]
    return _Opened(producer, token, group, done, kept is not None)


#: Per worker process: transactions opened ahead of their records (:func:`open_early`), by
#: transactional id, each with the batch it was opened for.
_OPENING: dict[str, tuple[int, Future[_Opened]]] = {}
_OPENER: ThreadPoolExecutor | None = None


def open_early(conf: Mapping[str, str], marker: StepMarker | None) -> None:
    """Start opening this task's transaction now, in a thread, so that creating the
    producer, fencing (``init_transactions``) and reading the marker overlap the task's work
    before its records instead of following it: against a local broker that took a
    transaction's critical part from 42-52 ms to 26-33 ms (median), with rare
    ~0.5 s inits hidden too. The task's :func:`produce_partition` takes it over, or waits it
    out if the task has nothing to write. Opened for one batch only: an opener left by an
    earlier step is never used (its marker reading is stale)."""
    global _OPENER
    if marker is None:
        return
    tid = marker.transactional_id(task_partition())
    if _opening_for(tid, marker.batch_id) is not None:
        return
    _forget_opened(tid)
    if _OPENER is None:
        _OPENER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tidemark-open")
    _OPENING[tid] = (marker.batch_id, _OPENER.submit(_open, dict(conf), tid, marker.anchor_topic))


def _opening_for(tid: str, batch_id: int) -> Future[_Opened] | None:
    """The opener of ``tid`` started for this batch, if any."""
    found = _OPENING.get(tid)
    return found[1] if found is not None and found[0] == batch_id else None


def _forget_opened(tid: str) -> None:
    """Wait out an opener that will not be used: it must end before any other producer of
    the id is initialised (so not outlive its task), or its late ``init_transactions`` would
    fence that producer. Its producer, with no transaction begun, is kept for the id's next
    task; only its marker reading belonged to this batch."""
    found = _OPENING.pop(tid, None)
    if found is not None:
        with contextlib.suppress(Exception):
            opened = found[1].result()
            _keep(tid, opened.producer, opened.token)


def _opened(conf: Mapping[str, str], tid: str, marker: StepMarker) -> _Opened:
    """The transaction :func:`open_early` opened for this very batch, else a new one."""
    opening = _opening_for(tid, marker.batch_id)
    if opening is not None:
        del _OPENING[tid]
        return opening.result()
    _forget_opened(tid)
    return _open(conf, tid, marker.anchor_topic)


def _write_transaction(
    conf: Mapping[str, str],
    runs: list[_Run],
    marker: StepMarker,
    task: int,
    summary: list[dict[str, Any]],
) -> list[dict[str, Any]] | None:
    """Write the runs' records and the step marker in one transaction; None when written now, the
    stored summary when the marker says this (sink, batch, task) was committed before."""
    from confluent_kafka import KafkaException, TopicPartition

    tid = marker.transactional_id(task)
    deadline = time.monotonic() + TRANSACTION_RETRY_SECONDS
    offset = TopicPartition(
        marker.anchor_topic, 0, marker.batch_id + 1, metadata=_encode_summary(summary)
    )
    while True:
        opened: _Opened | None = None
        checked = False
        try:
            opened = _opened(conf, tid, marker)
            producer, group = opened.producer, opened.group
            if opened.done.offset is not None and opened.done.offset > marker.batch_id:
                _keep(tid, producer, opened.token)
                return _decode_summary(opened.done.metadata or "")
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
                _produce_run(producer, run)
            remaining = _flush(producer)
            if remaining:
                raise KafkaError(f"Kafka did not acknowledge {remaining} records")
            producer.commit_transaction(120)
            _keep(tid, producer, opened.token)
            return None
        except (KafkaException, KafkaError) as exc:
            error = exc.args[0] if exc.args and hasattr(exc.args[0], "fatal") else None
            fatal = error is not None and error.fatal() and not error.retriable()
            if fatal and opened is not None and opened.kept and not checked:
                continue  # the id moved to another writer since this worker's last task of it
            if not fatal and opened is not None:
                with contextlib.suppress(KafkaException):
                    opened.producer.abort_transaction(30)
            if fatal or time.monotonic() > deadline:
                raise KafkaError(
                    f"transaction {tid} of step batch {marker.batch_id} failed: {exc}"
                ) from exc
            reader = _MARKER_READERS.pop(_marker_key(conf, tid), None)  # a fresh one next time
            if reader is not None:
                reader.close()
            time.sleep(1.0)  # the broker is restarting or the coordinator moved: try again


def _flush(producer: Any) -> int:
    """``producer.flush``, raising a fatal error as the KafkaException it is: confluent-kafka
    raises one (a fenced producer) inside ``flush`` and then runs the delivery callback with it
    pending, which Python reports as a SystemError caused by it. The retry loop must see the
    KafkaException to judge it fatal."""
    from confluent_kafka import KafkaException

    try:
        return int(producer.flush(120))
    except SystemError as exc:
        if isinstance(exc.__cause__, KafkaException):
            raise exc.__cause__ from None
        raise


#: Per worker process: the consumer that reads and commits one transactional id's step marker.
_MARKER_READERS: dict[str, Any] = {}


def _marker_key(conf: Mapping[str, str], tid: str) -> str:
    return json.dumps([dict(conf), tid], sort_keys=True)


def _marker_reader(conf: Mapping[str, str], tid: str) -> Any:
    """The consumer of group ``tid``, kept for the worker process's life.

    It never joins the group; it only fetches the committed marker (each call asks the group
    coordinator, with ``require_stable`` under read_committed, so a kept one reads what a new
    one would) and names the group in ``send_offsets_to_transaction``. A new consumer spent
    ~60 ms of every transactional task connecting (measured)."""
    from confluent_kafka import Consumer

    key = _marker_key(conf, tid)
    reader = _MARKER_READERS.get(key)
    if reader is None:
        reader = Consumer(
            {
                **conf,
                "group.id": tid,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                # As for the producers: a first committed() then takes 5-8 ms, not ~60 ms.
                "enable.sparse.connections": False,
                "log_level": 3,
            }
        )
        _MARKER_READERS[key] = reader
    return reader


def _produce(
    producer: Any,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]],
    on_delivery: Any = None,
) -> None:
    while True:
        try:
            if on_delivery is None:  # no callback argument at all: no per-record state
                producer.produce(topic, value=value, key=key, headers=headers)
            else:
                producer.produce(
                    topic, value=value, key=key, headers=headers, on_delivery=on_delivery
                )
            return
        except BufferError:
            producer.poll(0.1)  # the local queue is full: let deliveries drain


def _produce_run(producer: Any, run: _Run) -> None:
    """A run's records, without a delivery callback and without a Python call per record of
    our own: ``_produce`` only when the local queue is full."""
    topic, headers, keys, values = run
    produce = producer.produce
    for key, value in zip(keys, values, strict=True):
        try:
            produce(topic, value, key, headers=headers)
        except BufferError:
            _produce(producer, topic, key, value, headers)


def _dead_letter_headers(
    row: Mapping[str, Any], table: Mapping[str, Any]
) -> list[tuple[str, bytes]]:
    """SPEC S6 headers; original key, value and headers are kept unchanged for replay."""
    out = [
        ("tidemark.error.reason", row[REASON].encode()),
        ("tidemark.error.message", (row[MESSAGE] or "").encode()),
        ("tidemark.source.topic", str(table["topic"]).encode()),
        ("tidemark.source.partition", str(row[SRC_PARTITION]).encode()),
        ("tidemark.source.offset", str(row[SRC_OFFSET]).encode()),
        ("tidemark.table", str(row[REL]).encode()),
    ]
    if row[REASON] == "late":
        unit = table["units"].get(row[LATE_COLUMN], "integer")
        out += [
            ("tidemark.late.column", str(row[LATE_COLUMN]).encode()),
            ("tidemark.late.value", format_time_value(row[LATE_VALUE], unit).encode()),
            ("tidemark.late.waterline", format_time_value(row[LATE_WATERLINE], unit).encode()),
        ]
    return out
