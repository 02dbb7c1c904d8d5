"""The Kafka source for Spark: Python Data Source API, confluent-kafka and fastavro.

One source reads one table's topic. Offsets live in Spark's checkpoint (the offset log), so a
restart continues where the last committed step ended (S1, S15). The offset dict is
``{"partitions": {"<p>": next_offset}, "step": n, "wall_clock_ms": t}``: ``step`` counts the
steps that read data, and ``wall_clock_ms`` fixes the clock the ``max_future`` guard uses, so
a replayed step classifies every record exactly as the first run did.

Waterlines (S3) are kept by Tidemark, not by Spark: after each step the driver (the step sink)
writes ``<state_dir>/waterlines/<step>.json``; when Spark plans step n, ``partitions()`` loads
the newest file below n, i.e. w(n-1), and ships it to the readers inside each input partition.
The readers run the :class:`LateGate` while decoding, so late rows are split from accepted ones
at no extra pass (S5), and they append one ``probe`` row per partition carrying the per-column
maxima of the step's well-formed rows and punctuation, from which the sink computes w(n).
The probe also flows through Spark's ``withWatermark`` so Spark's own state eviction follows the
same waterline.

Decoding is column-wise: a chunk of up to ``_BATCH_ROWS`` messages is decoded with
numpy (:mod:`app.connectors.avro_columns`), the plain ``ok`` rows pass the gate per column
(:meth:`LateGate.accepts`), and only the others (late, future, bad, punctuation) are classified
one by one, so verdicts and messages are the per-record gate's. ``loadtests/source_speed.py``
measures it; tests/unit/connectors/test_columnar_source.py holds it to the per-record path.

What a task hands Spark depends on the job (Spark local properties, set by the step sink):
everything; only the dead letters and the probe (:data:`SKIP_ACCEPTED`, ADR 0006); or one
summary row of what a :class:`SliceWriter` did with the slice in the task itself
(:data:`SLICE_OUTPUT`, ADR 0007).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from app.connectors.avro_columns import ColumnarDecoder, FieldColumn
from app.connectors.late_gate import GateVerdict, LateGate, SourceSpec
from app.connectors.sink_record import (
    HEADERS,
    KEY,
    LATE_COLUMN,
    LATE_VALUE,
    LATE_WATERLINE,
    MESSAGE,
    REASON,
    SINK_RECORD,
    SRC_OFFSET,
    SRC_PARTITION,
    STEP,
    VALUE,
    spark_sql_type,
)

__all__ = [
    "META_COLUMNS",
    "SKIP_ACCEPTED",
    "SLICE_OUTPUT",
    "SLICE_SUMMARY",
    "TABLE_GATE",
    "KafkaSource",
    "arrow_type",
    "decode_slice",
    "load_waterlines",
    "source_schema",
    "spark_type",
    "store_waterlines",
    "topic_end_offsets",
]

#: The source column of each sink record column a dead letter takes from its row, in the
#: source's column order; the view gate takes ``reason``, ``message`` and the late columns
#: from its own (app/runtime/view_gate.py). Each has its sink column's type.
TABLE_GATE: Mapping[str, str] = {
    REASON: "_kind",  # a dead letter's reason; also ok, probe, punctuation
    MESSAGE: "_message",
    LATE_COLUMN: "_late_column",
    LATE_VALUE: "_late_value",
    LATE_WATERLINE: "_late_waterline",
    KEY: "_key",
    VALUE: "_value",
    HEADERS: "_headers",
    SRC_PARTITION: "_partition",
    SRC_OFFSET: "_offset",
    STEP: "_step",
}

#: Columns the source adds after the table's own (all nullable): those of :data:`TABLE_GATE`,
#: then the probe's count of the slice's accepted rows.
_META_FIELDS: tuple[pa.Field, ...] = (
    *(pa.field(source, SINK_RECORD.field(sink).type) for sink, source in TABLE_GATE.items()),
    pa.field("_accepted", pa.int64()),
)
#: :data:`_META_FIELDS` as (name, Spark SQL type).
META_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (f.name, spark_sql_type(f.type)) for f in _META_FIELDS
)

#: The only columns after the table's own that a query writing its own records reads (ADR
#: 0008; the source option ``narrow``): each row's kind (a probe row carries the slice's
#: maxima to Spark's watermark) and its arrival (ARG_MAX ties). Its source tasks write the
#: dead letters themselves, so the rest never has to reach Spark, whose scan turns every
#: column of every row from Arrow into its own row format (a JVM profile of (b)
#: had that conversion in a fifth of its task threads' samples).
QUERY_META = ("_kind", "_partition", "_offset", "_step")

_BATCH_ROWS = 50_000


def spark_type(kind: str) -> str:
    simple = {
        "bool": "boolean",
        "int32": "int",
        "int64": "bigint",
        "float32": "float",
        "float64": "double",
        "string": "string",
        "date": "date",
        "timestamp": "timestamp",
        "binary": "binary",
    }
    return simple.get(kind, kind)  # decimal(p,s) is spelled the same


def arrow_type(kind: str) -> pa.DataType:
    if kind.startswith("decimal("):
        precision, scale = (int(x) for x in kind[8:-1].split(","))
        return pa.decimal128(precision, scale)
    return {
        "bool": pa.bool_(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "float32": pa.float32(),
        "float64": pa.float64(),
        "string": pa.string(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "binary": pa.binary(),
    }[kind]


def _meta_fields(narrow: bool) -> tuple[pa.Field, ...]:
    return tuple(f for f in _META_FIELDS if not narrow or f.name in QUERY_META)


def source_schema(spec: SourceSpec, narrow: bool = False) -> str:
    """The source's Spark schema: the table's columns, then :data:`META_COLUMNS`, or only
    :data:`QUERY_META` of them when ``narrow``."""
    cols = [f"`{c.name}` {spark_type(c.kind)}" for c in spec.columns]
    cols += [f"`{f.name}` {spark_sql_type(f.type)}" for f in _meta_fields(narrow)]
    return ", ".join(cols)


def _arrow_schema(spec: SourceSpec, narrow: bool = False) -> pa.Schema:
    fields = [pa.field(c.name, arrow_type(c.kind)) for c in spec.columns]
    return pa.schema([*fields, *_meta_fields(narrow)])


# --- waterline files --------------------------------------------------------------------------


def _waterline_dir(state_dir: str) -> Path:
    return Path(state_dir) / "waterlines"


def load_waterlines(state_dir: str, before_step: int) -> dict[str, int | None]:
    """w(before_step - 1): the newest stored waterlines of a step below ``before_step``."""
    directory = _waterline_dir(state_dir)
    if not directory.is_dir():
        return {}
    steps = sorted(
        (int(p.stem) for p in directory.glob("*.json") if p.stem.isdigit()), reverse=True
    )
    for step in steps:
        if step < before_step:
            data: dict[str, int | None] = json.loads((directory / f"{step}.json").read_text())
            return data
    return {}


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` so a reader sees the old file or the whole new one, never
    a part (write beside it, then rename over it), creating its directory if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        tmp.write_text(data)
    os.replace(tmp, path)


def forget_steps_before(directory: Path, step: int, suffix: str) -> None:
    """Remove the files ``<step>-...<suffix>`` of steps below ``step`` from ``directory``."""
    for old in directory.glob(f"*{suffix}"):
        head = old.name.split("-", 1)[0]
        if head.isdigit() and int(head) < step:
            old.unlink(missing_ok=True)


def store_waterlines(
    state_dir: str, step: int, waterlines: Mapping[str, int | None], keep: int = 50
) -> None:
    """Atomically write w(step) and drop files older than the newest ``keep``."""
    directory = _waterline_dir(state_dir)
    write_atomically(directory / f"{step}.json", json.dumps(dict(waterlines), sort_keys=True))
    steps = sorted(int(p.stem) for p in directory.glob("*.json") if p.stem.isdigit())
    for old in steps[:-keep]:
        (directory / f"{old}.json").unlink(missing_ok=True)


# --- Kafka clients, created lazily per worker process (the reader is pickled) -------------------

_CONSUMERS: dict[str, Any] = {}


def _consumer_key(conf: Mapping[str, str]) -> str:
    """The key under which this process keeps its consumer of ``conf``."""
    return json.dumps(conf, sort_keys=True)


def _forget_consumer(conf: Mapping[str, str]) -> None:
    """Close this process's kept consumer of ``conf``; the next :func:`_consumer` is new."""
    stale = _CONSUMERS.pop(_consumer_key(conf), None)
    if stale is not None:
        stale.close()


def _consumer(conf: Mapping[str, str]) -> Any:
    from confluent_kafka import Consumer

    key = _consumer_key(conf)
    consumer = _CONSUMERS.get(key)
    if consumer is None:
        consumer = Consumer(
            {
                **conf,
                # librdkafka needs a group.id; offsets are never committed (Spark keeps them).
                "group.id": "tidemark-source",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                "fetch.max.bytes": 52428800,
                "max.partition.fetch.bytes": 10485760,
                # A slice is only read when its offsets exist, so the broker never has to
                # hold a fetch for data; with the 500 ms default, the first fetch after the
                # previous slice's unassign waited ~0.45 s (measured).
                "fetch.wait.max.ms": 10,
                # Once its prefetch queue passes queued.min.messages (100,000: about a slice),
                # librdkafka postpones the partition's next fetch by this much, 1 s by
                # default, and the fetcher sat out that second while the reader waited: half
                # the first-pass source tasks of (a) took 1.2-1.5 s instead of 0.3-0.4 s
                # (Spark event log).
                "fetch.queue.backoff.ms": 10,
                "log_level": 3,
            }
        )
        _CONSUMERS[key] = consumer
    return consumer


def topic_end_offsets(conf: Mapping[str, str], topic: str) -> dict[int, int]:
    """The current end (high watermark) of every partition of ``topic``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": "tidemark-end-offsets", "log_level": 3})
    try:
        metadata = consumer.list_topics(topic, timeout=30)
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in sorted(metadata.topics[topic].partitions)
        }
    finally:
        consumer.close()


@dataclass
class KafkaPartitionSlice(InputPartition):
    """One Kafka partition's offsets [start, end) of one step, with the step's waterlines."""

    partition: int
    start: int
    end: int
    step: int
    wall_clock_ms: int
    waterlines: dict[str, int | None]

    def __init__(
        self,
        partition: int,
        start: int,
        end: int,
        step: int,
        wall_clock_ms: int,
        waterlines: dict[str, int | None],
    ) -> None:
        self.partition, self.start, self.end = partition, start, end
        self.step, self.wall_clock_ms, self.waterlines = step, wall_clock_ms, waterlines


class SliceCache:
    """Decoded slices of recent steps on the local disk, as Arrow IPC files.

    One step's plan reads the source once per branch (dead letters with the probe and the rows
    of the step sink's views, each view computed in the query, the aggregates): Spark re-runs
    the scan for each branch of the union, and a rereadable plan is run in both of the step
    sink's jobs (ADRs 0006, 0007). Without this, every read would consume the same Kafka offsets and
    decode the same Avro again. The first reader of a slice writes it here; the others read
    the file. A slice is a pure function of
    (offsets, step, waterlines, wall clock), all fixed by the offset log, so a cached slice is
    exactly what a fresh read would give, on replay too. Files of older steps are removed.
    """

    KEEP_STEPS = 3

    def __init__(self, state_dir: str, spec: SourceSpec | None = None) -> None:
        import hashlib
        import tempfile

        tag = hashlib.sha1(os.path.abspath(state_dir).encode()).hexdigest()[:16]  # noqa: S324
        self.directory = Path(tempfile.gettempdir()) / "tidemark-slices" / tag
        # What the rows hold depends on the table's spec too (its columns, ok_payload): a
        # program changed on the same checkpoint never reads the old program's files.
        self.spec = json.dumps(spec.to_json(), sort_keys=True) if spec is not None else ""

    def _path(self, part: KafkaPartitionSlice) -> Path:
        import hashlib

        # Everything the gate's verdicts depend on is in the name, so a stale file of a
        # deleted checkpoint or another run can never be taken for this slice.
        inputs = json.dumps([part.waterlines, part.wall_clock_ms, self.spec], sort_keys=True)
        digest = hashlib.sha1(inputs.encode()).hexdigest()[:12]  # noqa: S324
        return self.directory / (
            f"{part.step}-{part.partition}-{part.start}-{part.end}-{digest}.arrow"
        )

    def read(
        self, part: KafkaPartitionSlice, decode: Callable[[], Iterator[pa.RecordBatch]]
    ) -> Iterator[pa.RecordBatch]:
        path = self._path(part)
        try:
            cached = pa.ipc.open_file(pa.BufferReader(path.read_bytes()))
            batches = [cached.get_batch(i) for i in range(cached.num_record_batches)]
        except (FileNotFoundError, pa.ArrowInvalid, OSError):
            batches = None
        if batches is not None:
            yield from batches
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        writer = None
        try:
            for batch in decode():
                if writer is None:
                    writer = pa.ipc.new_file(str(tmp), batch.schema)
                writer.write_batch(batch)
                yield batch
            if writer is not None:
                writer.close()
                writer = None
                os.replace(tmp, path)
        finally:
            if writer is not None:
                writer.close()
            tmp.unlink(missing_ok=True)
        forget_steps_before(self.directory, part.step - self.KEEP_STEPS, ".arrow")

    def clear(self) -> None:
        """Remove this query's cached slices (the service calls it when its queries stop)."""
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)


def cached_slice(
    spec: SourceSpec, conf: Mapping[str, str], state_dir: str, part: KafkaPartitionSlice
) -> Iterator[pa.RecordBatch]:
    """One slice's batches: from the slice cache, else read from Kafka (and cached)."""
    return SliceCache(state_dir, spec).read(part, lambda: read_slice(spec, conf, part))


#: The file in ``state_dir`` holding the slices of the step Spark planned last (ADR 0008).
PLANNED_SLICES = "planned-slices.json"


def record_planned_slices(state_dir: str, slices: Sequence[KafkaPartitionSlice]) -> None:
    """Keep the slices ``partitions()`` just planned (none for a step without data), so the
    step sink can read them in a job of its own before the step's query runs."""
    write_atomically(Path(state_dir) / PLANNED_SLICES, json.dumps([vars(part) for part in slices]))


def planned_slices(state_dir: str) -> list[KafkaPartitionSlice]:
    """The slices of the step Spark planned last, in the order of the query's source tasks
    (so a task of a job over them has the number the source task has)."""
    path = Path(state_dir) / PLANNED_SLICES
    if not path.is_file():
        return []
    return [KafkaPartitionSlice(**fields) for fields in json.loads(path.read_text())]


def write_slices(
    parts: Iterable[KafkaPartitionSlice],
    spec: SourceSpec,
    conf: Mapping[str, str],
    state_dir: str,
    writer: SliceWriter,
) -> Iterator[str]:
    """A task of a job over planned slices (not the query's): each slice handed to
    ``writer``, and the JSON list of its summary rows handed back."""
    for part in parts:
        yield json.dumps(writer.write(cached_slice(spec, conf, state_dir, part), conf))


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.spec = SourceSpec.from_json(json.loads(options["spec"]))
        self.kafka_conf: dict[str, str] = json.loads(options["kafka"])
        self.state_dir = options["state_dir"]
        self.max_records = int(options.get("max_records_per_step", "200000"))
        # ``tidemark run --once``: never read past the end offsets seen at start.
        self.stop_at: dict[int, int] | None = (
            {int(p): int(o) for p, o in json.loads(options["stop_at"]).items()}
            if options.get("stop_at")
            else None
        )
        self._admin: Any = None
        #: Leave each planned step's slices in ``state_dir`` (:data:`PLANNED_SLICES`): the
        #: step sink of a plan that writes in its query reads them (ADR 0008).
        self.record_slices = options.get("record_slices") == "true"
        #: The columns handed to Spark when only the table's and :data:`QUERY_META` are
        #: (``source_schema``); None: every column.
        self.narrow_columns: list[str] | None = (
            _arrow_schema(self.spec, narrow=True).names if options.get("narrow") == "true" else None
        )

    def _partition_ends(self) -> dict[int, tuple[int, int]]:
        """Low and high offsets per partition, riding out a broker restart or a leader change
        (NOT_LEADER_FOR_PARTITION, transport errors) for up to ``retry_seconds``."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                return self._partition_ends_once()
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                # A fresh client next time: a CI run saw the kept one fail every metadata
                # request for 240 s after a broker restart the broker itself recovered from in
                # 4.5 s ("Broker transport failure").
                _forget_consumer(self.kafka_conf)
                time.sleep(1.0)

    retry_seconds = 240.0

    def _partition_ends_once(self) -> dict[int, tuple[int, int]]:
        consumer = _consumer(self.kafka_conf)
        from confluent_kafka import TopicPartition

        metadata = consumer.list_topics(self.spec.topic, timeout=30)
        topic = metadata.topics.get(self.spec.topic)
        if topic is None or topic.error is not None:
            from app.errors import KafkaError

            raise KafkaError(
                f"input topic {self.spec.topic} of table {self.spec.table} "
                f"does not exist: {topic.error if topic else 'unknown topic'}"
            )
        ends = {}
        for p in sorted(topic.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(self.spec.topic, p), timeout=30, cached=False
            )
            if self.stop_at is not None:
                high = min(high, self.stop_at.get(p, 0))
            ends[p] = (low, high)
        return ends

    def initialOffset(self) -> dict[str, Any]:
        ends = self._partition_ends()
        return {
            "partitions": {str(p): low for p, (low, _) in ends.items()},
            "step": 0,
            "wall_clock_ms": 0,
        }

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        ends = self._partition_ends()
        current = {int(p): int(o) for p, o in start["partitions"].items()}
        available = {
            p: max(0, high - max(current.get(p, low), low)) for p, (low, high) in ends.items()
        }
        total = sum(available.values())
        if total == 0:
            return start
        budget = min(total, limit.max_rows) if isinstance(limit, ReadMaxRows) else total
        end: dict[str, int] = {}
        remaining = budget
        # Share the budget across partitions in proportion to what each has waiting.
        for p, (low, _) in sorted(ends.items()):
            begin = max(current.get(p, low), low)
            share = available[p] if budget == total else (available[p] * budget) // total
            share = min(share, remaining)
            end[str(p)] = begin + share
            remaining -= share
        if remaining > 0:
            for p in sorted(ends):
                begin_end = end[str(p)]
                extra = min(remaining, ends[p][1] - begin_end)
                end[str(p)] = begin_end + extra
                remaining -= extra
        return {
            "partitions": end,
            "step": int(start["step"]) + 1,
            "wall_clock_ms": int(time.time() * 1000),
        }

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        step = int(end["step"])
        if step == int(start["step"]):
            if self.record_slices:
                record_planned_slices(self.state_dir, [])
            return []
        waterlines = load_waterlines(self.state_dir, step)
        begin = {int(p): int(o) for p, o in start["partitions"].items()}
        out = []
        for p_text, stop in end["partitions"].items():
            p = int(p_text)
            first = begin.get(p, 0)
            if int(stop) > first:
                out.append(
                    KafkaPartitionSlice(
                        p, first, int(stop), step, int(end["wall_clock_ms"]), waterlines
                    )
                )
        if self.record_slices:
            record_planned_slices(self.state_dir, out)
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaPartitionSlice)
        batches = cached_slice(self.spec, self.kafka_conf, self.state_dir, partition)
        output = _slice_output()
        if output is not None:
            return _written(output, batches, _arrow_schema(self.spec), self.kafka_conf)
        side: SliceTee | None = local_object(STEP_SIDE)
        if side is not None:
            batches = side.tee(batches, self.kafka_conf, partition.step, partition.partition)
        elif _skip_accepted():
            batches = _without_accepted(batches)
        if self.narrow_columns is not None:
            names = self.narrow_columns
            return (batch.select(names) for batch in batches)
        return batches

    def commit(self, end: dict[str, Any]) -> None:
        return None

    def stop(self) -> None:
        return None


#: The Spark local property under which a job's source tasks leave out the accepted rows.
SKIP_ACCEPTED = "tidemark.skip_accepted"


def _task_property(key: str) -> str | None:
    """A Spark local property of the job this task belongs to (None outside a task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.getLocalProperty(key) if context is not None else None


def _skip_accepted() -> bool:
    return _task_property(SKIP_ACCEPTED) == "true"


def _without_accepted(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The slice read in full (so the slice cache holds it for the step's next job), but
    only its dead letters and its probe handed to Spark: the step sink's first job writes
    those alone, and every row it did not ask for would cross from Python into the JVM."""
    import pyarrow.compute as pc

    for batch in batches:
        kept = batch.filter(pc.not_equal(batch.column("_kind"), "ok"))
        if kept.num_rows:
            yield kept


#: The Spark local property that carries a step's :class:`SliceWriter` to its source tasks.
SLICE_OUTPUT = "tidemark.slice_output"
#: The ``_kind`` of the one row a source task hands over under :data:`SLICE_OUTPUT`, the
#: only rows a slice-views plan keeps (app/runtime/plan.py).
SLICE_SUMMARY = "slice_summary"


class SliceWriter(Protocol):
    """What a step's job asks of each source task (app/runtime/slice_writers.py: ProbePass,
    SliceOutput): do its work over the slice's batches and say what it did, as SUMMARY rows.
    The Kafka settings are the source's own: credentials never ride in a local property,
    which Spark's event log would keep unredacted."""

    def write(
        self, batches: Iterable[pa.RecordBatch], kafka_conf: Mapping[str, str]
    ) -> list[dict[str, Any]]: ...

    def prepare(self, kafka_conf: Mapping[str, str]) -> None:
        """Start opening the Kafka transaction :meth:`write` will use, if it writes one
        (app/connectors/kafka_sink.open_early); called as early as the task knows it will."""


class SliceTee(Protocol):
    """What a step's source tasks do with their slice while handing it to Spark
    (app/runtime/query_writes.py: SourceSide)."""

    def tee(
        self, batches: Iterable[pa.RecordBatch], conf: Mapping[str, str], step: int, partition: int
    ) -> Iterator[pa.RecordBatch]: ...


def local_object(key: str) -> Any:
    """The object the step sink pickled into this task's job's local property ``key``."""
    import base64
    import pickle

    text = _task_property(key)
    if not text:
        return None
    return pickle.loads(base64.b64decode(text))  # noqa: S301 (the driver's own)


def _slice_output() -> SliceWriter | None:
    writer: SliceWriter | None = local_object(SLICE_OUTPUT)
    return writer


#: The Spark local property under which a step's source tasks also write their dead letters
#: and leave their probes for the query's own writing tasks (app/runtime/query_writes.py).
STEP_SIDE = "tidemark.step_side"


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


def _permanent_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError as Code

    return frozenset(
        {
            Code.OFFSET_OUT_OF_RANGE,
            Code.TOPIC_AUTHORIZATION_FAILED,
            Code.UNKNOWN_TOPIC_OR_PART,
            Code._UNKNOWN_PARTITION,
            Code._AUTHENTICATION,
        }
    )


_PERMANENT = _permanent_codes()


def _fetch(conf: Mapping[str, str], topic: str, part: KafkaPartitionSlice) -> Iterator[list[Any]]:
    """The messages of [start, end) of one partition, in offset order, in the lists the
    consumer returns them (a message at a time would cost Python calls per record)."""
    if part.end <= part.start:
        return
    from confluent_kafka import KafkaException, Message, TopicPartition

    consumer = _consumer(conf)
    consumer.assign([TopicPartition(topic, part.partition, part.start)])
    last = part.end - 1
    following = part.start  # the offset after the last message handed over
    idle_since: float | None = None
    try:
        while True:
            # Never ask for more than the slice still holds: consume() waits its whole timeout
            # for a count it cannot reach, which cost every slice ending at the topic's end a
            # full second (measured). Gaps (transaction markers) make the count an
            # upper bound, hence the short timeout and the position check below.
            wanted = max(1, min(10_000, part.end - following))
            messages = consumer.consume(num_messages=wanted, timeout=0.2)
            if not messages:
                position = consumer.position([TopicPartition(topic, part.partition)])[0].offset
                if position >= part.end:
                    return
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 120:
                    raise KafkaException(
                        f"{topic}[{part.partition}] stalled at {position} before {part.end}"
                    )
                continue
            idle_since = None
            if not any(map(Message.error, messages)) and messages[-1].offset() < last:
                following = messages[-1].offset() + 1
                yield messages  # the common case: all good, all before the slice's end
                continue
            batch, done = [], False
            for msg in messages:
                error = msg.error()
                if error is not None:
                    if error.fatal() or error.code() in _PERMANENT:
                        raise KafkaException(error)
                    continue  # transient (a broker restart, a leader change): the client retries
                if msg.offset() > last:
                    done = True
                    break
                batch.append(msg)
                following = msg.offset() + 1
                if msg.offset() == last:
                    done = True
                    break
            yield batch
            if done:
                return
    finally:
        consumer.unassign()


def read_slice(
    spec: SourceSpec, conf: Mapping[str, str], part: KafkaPartitionSlice
) -> Iterator[pa.RecordBatch]:
    """Decode and gate one slice; yields Arrow batches, then one probe row."""
    return decode_slice(spec, part, chain.from_iterable(_fetch(conf, spec.topic, part)))


def decode_slice(
    spec: SourceSpec, part: KafkaPartitionSlice, messages: Iterable[Any], columnar: bool = True
) -> Iterator[pa.RecordBatch]:
    """The rows of ``messages`` (confluent-kafka messages of one slice, in offset order):
    Arrow batches of up to ``_BATCH_ROWS`` rows (punctuation inserts none), then a batch
    with the probe row: the per-column maxima of the slice's ``ok`` and ``late`` rows and
    punctuation, and the number of ``ok`` rows (S3, S4). ``columnar=False`` takes the
    per-record path for every chunk: the reference the tests hold the columnar one to."""
    reader = _SliceReader(spec, part)
    if not columnar:
        reader.decoder = None
    stream = iter(messages)
    while chunk := list(islice(stream, _BATCH_ROWS)):
        batch = reader.read(chunk)
        if batch.num_rows:
            yield batch
    yield reader.probe()


#: ``_kind`` values, in the order of their codes in :meth:`_SliceReader._columnar`.
_KINDS = ("ok", "late", "malformed", "invalid", "future", "punctuation")


class _SliceReader:
    """Turns chunks of one slice's messages into Arrow batches, keeping the probe's figures.

    Two paths give the same rows (tests/unit/connectors/test_columnar_source.py compares
    them): the columnar one decodes a whole chunk with numpy
    (:class:`ColumnarDecoder`), lets :meth:`LateGate.accepts` pass the plain ``ok`` rows per
    column and asks :meth:`LateGate.classify` only about the others (late, bad, punctuation),
    so the verdicts and messages are the gate's own; the per-record one classifies every
    message. The per-record path serves schemas the decoder does not read (decimals, nested
    types) and the rare chunk with a value only fastavro's own reading accepts."""

    def __init__(self, spec: SourceSpec, part: KafkaPartitionSlice) -> None:
        self.spec, self.part = spec, part
        self.gate = LateGate(spec, part.waterlines, part.wall_clock_ms)
        self.schema = _arrow_schema(spec)
        self.names = [c.name for c in spec.columns]
        self.maxima: dict[str, int | None] = dict.fromkeys(c for c, _ in spec.lateness)
        self.accepted = 0
        decoder = ColumnarDecoder(spec.avro_schema)
        self.decoder = decoder if decoder.supported and _columnar_kinds(spec, decoder) else None

    def _note(self, col: str, value: int | None) -> None:
        current = self.maxima[col]
        if value is not None and (current is None or value > current):
            self.maxima[col] = value

    def read(self, chunk: list[Any]) -> pa.RecordBatch:
        if self.decoder is not None:
            batch = self._columnar(chunk)
            if batch is not None:
                return batch
        return self._per_record(chunk)

    def probe(self) -> pa.RecordBatch:
        probe = GateVerdict("probe", row=dict(self.maxima))
        return _to_batch(self.schema, self.names, [(probe, None)], self.part, self.accepted)

    def _per_record(self, chunk: list[Any]) -> pa.RecordBatch:
        items: list[tuple[GateVerdict, Any]] = []
        for msg in chunk:
            verdict = self.gate.classify(msg.value(), msg.headers())
            if verdict.kind in ("ok", "late"):
                assert verdict.row is not None
                self.accepted += verdict.kind == "ok"
                for col in self.maxima:
                    self._note(col, verdict.row[col])
            elif verdict.kind == "punctuation":
                assert verdict.bounds is not None
                for col, bound in verdict.bounds.items():
                    self._note(col, bound)
                continue
            items.append((verdict, msg))
        return _to_batch(self.schema, self.names, items, self.part, None, self.spec.ok_payload)

    def _columnar(self, chunk: list[Any]) -> pa.RecordBatch | None:
        """The chunk's batch, or None when a value needs the per-record path (a value the
        decoder refused but fastavro reads as a row)."""
        from confluent_kafka import Message

        assert self.decoder is not None
        values: list[bytes | None] = list(map(Message.value, chunk))
        decoded = self.decoder.decode(values, self.names)
        ok = self.gate.accepts(decoded)
        count = len(chunk)
        codes = np.zeros(count, np.int8)
        dead = np.zeros(count, np.bool_)  # rows without table values (bad input, punctuation)
        messages: list[str | None] = [None] * count
        late_columns: list[str | None] = [None] * count
        late_values: list[Any] = [None] * count
        late_marks: list[Any] = [None] * count
        bounds: list[Mapping[str, int]] = []
        for i in np.flatnonzero(~ok).tolist():
            verdict = self.gate.classify(values[i], chunk[i].headers())
            if verdict.row is not None and not decoded.clean[i]:
                return None
            codes[i] = _KINDS.index(verdict.kind)
            dead[i] = verdict.row is None
            messages[i] = verdict.message or None
            late_columns[i], late_values[i] = verdict.column, verdict.value
            late_marks[i] = verdict.waterline
            if verdict.bounds is not None:
                bounds.append(verdict.bounds)
        well_formed = codes <= 1  # ok or late (S3)
        for col in self.maxima:
            rows = decoded.fields[col].numbers()[well_formed]
            self._note(col, int(rows.max()) if len(rows) else None)
        for found in bounds:
            for col, bound in found.items():
                self._note(col, bound)
        self.accepted += int(np.count_nonzero(codes == 0))
        columns = [
            _table_column(self.schema.field(name).type, decoded.fields[name], dead)
            for name in self.names
        ]
        columns += [
            pa.array(_KINDS, pa.string()).take(pa.array(codes)),
            pa.array(messages, pa.string()),
            pa.array(late_columns, pa.string()),
            pa.array(late_values, pa.int64()),
            pa.array(late_marks, pa.int64()),
            *_payload_columns(
                chunk,
                values,
                None if self.spec.ok_payload else np.flatnonzero(codes != 0),
                self.schema.field("_headers").type,
            ),
            pa.array(np.full(count, self.part.partition, np.int32)),
            pa.array(list(map(Message.offset, chunk)), pa.int64()),
            pa.array(np.full(count, self.part.step, np.int64)),
            pa.nulls(count, pa.int64()),
        ]
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        punctuation = codes == _KINDS.index("punctuation")
        return batch.filter(pa.array(~punctuation)) if punctuation.any() else batch


#: The Avro type a column must have for the columnar path (what record_schema writes).
_AVRO_OF_KIND = {
    "bool": "boolean",
    "int32": "int",
    "int64": "long",
    "float32": "float",
    "float64": "double",
    "string": "string",
    "binary": "bytes",
    "date": "int",
    "timestamp": "long",
}


def _columnar_kinds(spec: SourceSpec, decoder: ColumnarDecoder) -> bool:
    """Every table column is a field whose Avro type the columnar arrays are built for."""
    avro = {name: next(b for b in branches if b != "null") for name, branches in decoder.fields}
    return all(avro.get(c.name) == _AVRO_OF_KIND.get(c.kind) for c in spec.columns)


def _table_column(kind: pa.DataType, field: FieldColumn, dead: npt.NDArray[np.bool_]) -> pa.Array:
    """One table column as Arrow, null where the field is null or the row has no values."""
    null = field.null | dead
    if field.array is not None:
        if not dead.any():
            return field.array
        import pyarrow.compute as pc  # lazily: the source's module loads in Spark's planner too

        return pc.if_else(pa.array(dead), pa.scalar(None, field.array.type), field.array)
    values = np.where(null, 0, field.numbers())  # masked slots stay in range for the casts
    if pa.types.is_timestamp(kind):
        return pa.array(values, pa.int64(), mask=null).cast(pa.timestamp("ms")).cast(kind)
    if pa.types.is_date32(kind):
        return pa.array(values.astype(np.int32), pa.int32(), mask=null).cast(pa.date32())
    if pa.types.is_int32(kind):
        return pa.array(values.astype(np.int32), kind, mask=null)
    if pa.types.is_float32(kind):
        with np.errstate(invalid="ignore"):
            return pa.array(values.astype(np.float32), kind, mask=null)
    return pa.array(values, kind, mask=null)


def _payload_columns(
    chunk: list[Any],
    values: list[bytes | None],
    keep: npt.NDArray[np.int64] | None,
    headers: pa.DataType,
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The ``_key``, ``_value`` and ``_headers`` columns: of every message, or (``keep``:
    row indices) of those rows only and NULL elsewhere, without a Python object per row."""
    from confluent_kafka import Message

    if keep is None:
        return (
            pa.array(list(map(Message.key, chunk)), pa.binary()),
            pa.array(values, pa.binary()),
            _headers_column(chunk, headers),
        )
    rows = keep.tolist()
    picked = [chunk[i] for i in rows]
    where = np.full(len(chunk), -1, np.int64)
    where[keep] = np.arange(len(rows))
    index = pa.array(where, mask=where < 0)
    return (
        pa.array(list(map(Message.key, picked)), pa.binary()).take(index),
        pa.array([values[i] for i in rows], pa.binary()).take(index),
        _headers_column(picked, headers).take(index),
    )


def _headers_column(chunk: list[Any], kind: pa.DataType) -> pa.Array:
    """Each message's headers as a list of (key, value) structs; an empty list when none."""
    from confluent_kafka import Message

    every: list[Any] = list(map(Message.headers, chunk))
    offsets = np.zeros(len(every) + 1, np.int32)
    keys: list[str] = []
    values: list[bytes | None] = []
    if any(every):
        for i, found in enumerate(every):
            for key, value in found or ():
                keys.append(key)
                values.append(value)
            offsets[i + 1] = len(keys)
    items = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())],
        fields=list(kind.value_type),
    )
    return pa.ListArray.from_arrays(pa.array(offsets), items, type=kind)


def _to_batch(
    schema: pa.Schema,
    names: list[str],
    items: list[tuple[GateVerdict, Any]],
    part: KafkaPartitionSlice,
    accepted: int | None,
    ok_payload: bool = True,
) -> pa.RecordBatch:
    """Arrow columns of the items; the probe (always last) carries ``accepted``."""
    columns: list[pa.Array] = []
    for name in names:
        field = schema.field(name)
        values = [v.row.get(name) if v.row is not None else None for v, _ in items]
        if pa.types.is_timestamp(field.type):
            columns.append(pa.array(values, pa.int64()).cast(pa.timestamp("ms")).cast(field.type))
        elif pa.types.is_date32(field.type):
            columns.append(pa.array(values, pa.int32()).cast(pa.date32()))
        else:
            columns.append(pa.array(values, field.type))
    kinds = [v.kind for v, _ in items]
    columns.append(pa.array(kinds, pa.string()))
    columns.append(pa.array([v.message or None for v, _ in items], pa.string()))
    columns.append(pa.array([v.column for v, _ in items], pa.string()))
    columns.append(pa.array([v.value for v, _ in items], pa.int64()))
    columns.append(pa.array([v.waterline for v, _ in items], pa.int64()))
    # The message of each row whose Kafka payload is kept (see SourceSpec.ok_payload).
    kept = [m if ok_payload or v.kind != "ok" else None for v, m in items]
    columns.append(pa.array([m.key() if m is not None else None for m in kept], pa.binary()))
    columns.append(pa.array([m.value() if m is not None else None for m in kept], pa.binary()))
    columns.append(
        pa.array(
            [
                [{"key": k, "value": v} for k, v in (m.headers() or [])] if m is not None else None
                for m in kept
            ],
            schema.field("_headers").type,
        )
    )
    columns.append(pa.array([part.partition] * len(items), pa.int32()))
    columns.append(pa.array([m.offset() if m is not None else None for _, m in items], pa.int64()))
    columns.append(pa.array([part.step] * len(items), pa.int64()))
    probe_column: list[int | None] = [None] * len(items)
    if items:
        probe_column[-1] = accepted
    columns.append(pa.array(probe_column, pa.int64()))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class KafkaSource(DataSource):
    """``spark.readStream.format("tidemark-kafka")`` with options ``spec`` (SourceSpec JSON),
    ``kafka`` (librdkafka settings JSON), ``state_dir`` and ``max_records_per_step``; ``narrow``
    ("true") for a query that reads no dead-letter columns (:data:`QUERY_META`)."""

    @classmethod
    def name(cls) -> str:
        return "tidemark-kafka"

    def schema(self) -> StructType | str:
        spec = SourceSpec.from_json(json.loads(self.options["spec"]))
        return source_schema(spec, narrow=self.options.get("narrow") == "true")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self.options)
