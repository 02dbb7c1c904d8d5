"""Steps of rows and punctuations for programs of several tables, through the real broker.

Each step's records go to their tables' topics (rows round-robin over two partitions, a
punctuation to both), then one ``--once`` run of the service; the same rows and
punctuations make the reference evaluator's :class:`StepInput`, so a test compares both.
A table with a ``METADATA FROM 'key'`` column is produced as a keyed topic is: each row
with its key (the producer's partitioner places it, so a key's records keep their order)
and, with a ``METADATA FROM 'timestamp'`` column, its timestamp; ``("delete", row)`` is
its tombstone. ``("record", key, value)`` is a record's bytes as given (a Debezium change
event, a tombstone, garbage), produced with its key (``("record", key, value, ms)``: and its
timestamp); the oracle reads it as the table's
source decodes it (ok rows, deletions; dead letters and skipped tombstones are no input).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.circuit.ir import Circuit
from app.circuit.reference import Deletion, Punctuation, StepInput, StepResult
from app.connectors.avro_codec import AvroCodec
from app.connectors.late_gate import LateGate
from app.connectors.output_reader import OutputReader
from app.connectors.record_metadata import RecordMeta
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

ROOT = Path(__file__).resolve().parents[2]

#: A step: per table, its rows (dicts), punctuations (``("bound", epoch ms)``) and
#: tombstones (``("delete", row)``, the row's key and timestamp columns) and records
#: (``("record", key, value[, timestamp ms])``, bytes).
Step = Mapping[str, Sequence[Any]]


def run_steps(
    kafka: Any,
    tmp_path: Path,
    circuit: Circuit,
    topics: Mapping[str, str],
    steps: Sequence[Step],
    after_step: Callable[[], None] | None = None,
) -> tuple[list[StepReport], list[StepInput]]:
    """Produce and run each step (then call ``after_step``); the service's step reports and
    the oracle's inputs."""
    from confluent_kafka import Producer

    codecs = {t.name: AvroCodec(t.avro_schema) for t in circuit.tables}
    failed: list[str] = []
    producer = Producer(
        {
            **kafka.conf(),
            "log_level": 3,
            "on_delivery": lambda err, _m: failed.append(str(err)) if err else None,
        }
    )
    reports: list[StepReport] = []
    service = Service(
        circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2), on_step=reports.append
    )
    metadata = {
        t.name: {c.metadata: c.name for c in t.columns if c.metadata is not None}
        for t in circuit.tables
    }
    inputs: list[StepInput] = []
    for step in steps:
        rows: dict[str, list[Any]] = {}
        marks: dict[str, list[Punctuation]] = {}
        for table, entries in step.items():
            rows[table], marks[table] = [], []
            for i, entry in enumerate(entries):
                if isinstance(entry, tuple) and entry[0] == "bound":
                    for partition in (0, 1):
                        producer.produce(
                            topics[table],
                            value=None,
                            key=b"tidemark.bound",  # a compacted topic refuses a null key
                            partition=partition,
                            headers=[("tidemark.bound", str(entry[1]).encode())],
                        )
                    marks[table].append(Punctuation(entry[1]))
                    continue
                if isinstance(entry, tuple) and entry[0] == "record":
                    key_bytes, value_bytes = entry[1], entry[2]
                    timed = {"timestamp": entry[3]} if len(entry) > 3 else {}
                    producer.produce(topics[table], key=key_bytes, value=value_bytes, **timed)
                    decoded = _decoded(circuit, table, key_bytes, value_bytes,
                                       timed.get("timestamp"))
                    if decoded is not None:
                        rows[table].append(decoded)
                    continue
                deleted = isinstance(entry, tuple) and entry[0] == "delete"
                row = dict(entry[1] if deleted else entry)
                value = None if deleted else codecs[table].encode(row)
                key, stamp = metadata[table].get("key"), metadata[table].get("timestamp")
                if key is None:
                    producer.produce(topics[table], value=value, partition=i % 2)
                else:
                    placed = {"key": None if row[key] is None else str(row[key]).encode()}
                    if stamp is not None:
                        placed["timestamp"] = row[stamp]
                    producer.produce(topics[table], value=value, **placed)
                rows[table].append(Deletion(row) if deleted else row)
        assert producer.flush(30) == 0 and not failed, failed
        inputs.append(StepInput(rows=rows, punctuations=marks))
        service.start(once=True)
        service.wait(timeout_seconds=300)
        if after_step is not None:
            after_step()
    return reports, inputs


def _decoded(circuit: Circuit, table: str, key: bytes | None, value: bytes | None,
             timestamp_ms: int | None = None) -> Any:
    """The oracle's input of one record as the table's source decodes it (no waterline: the
    oracle gates it): a row, a :class:`Deletion`, or None for a record with neither."""
    gate = LateGate(source_spec(circuit.table(table)), {}, 0)
    verdict = gate.classify(value, None, RecordMeta(key, timestamp_ms, 0, 0))
    if verdict.kind == "delete":
        assert verdict.row is not None
        return Deletion(verdict.row)
    return verdict.row if verdict.kind == "ok" else None


def frozen(value: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(value.items()))


def written(kafka: Any, circuit: Circuit, view: str, topic: str) -> Counter[tuple[Any, ...]]:
    """An append view's records as (value, ``tidemark.waterline`` header), counted; the
    header None for a view without an event-time attribute, which writes none (S14)."""
    output = circuit.view(view).output
    assert output is not None
    codec = AvroCodec(output.value_schema)
    found: Counter[tuple[Any, ...]] = Counter()
    for m in read_topic(kafka.conf(), topic):
        mark = dict(m.headers() or []).get("tidemark.waterline")
        found[frozen(codec.decode(m.value())), None if mark is None else mark.decode()] += 1
    return found


def new_values_per_step(
    kafka: Any, circuit: Circuit, view: str, topic: str
) -> tuple[list[Counter[Any]], Callable[[], None]]:
    """A list that gains, after each step, the values of append view ``view`` the step
    wrote (headers left out), and the ``after_step`` callback of :func:`run_steps` that
    fills it."""
    seen: list[Counter[Any]] = []

    def after_step() -> None:
        now = Counter(value for value, _ in written(kafka, circuit, view, topic).elements())
        seen.append(now - sum(seen, Counter()))

    return seen, after_step


def watch_views(
    kafka: Any, circuit: Circuit, views: Sequence[str], topics: Mapping[str, str]
) -> tuple[dict[str, list[Counter[Any]]], Callable[[], None]]:
    """:func:`new_values_per_step` for each of ``views``: per view the list of each step's
    new values, and the one ``after_step`` callback that fills them all."""
    seen: dict[str, list[Counter[Any]]] = {}
    callbacks = []
    for view in views:
        seen[view], callback = new_values_per_step(kafka, circuit, view, topics[view])
        callbacks.append(callback)

    def after_step() -> None:
        for callback in callbacks:
            callback()

    return seen, after_step


def values_written(kafka: Any, circuit: Circuit, view: str, topic: str) -> Counter[Any]:
    """An append view's values as written (headers left out), counted."""
    return Counter(value for value, _ in written(kafka, circuit, view, topic).elements())


def oracle_values(results: Sequence[StepResult], view: str) -> Counter[Any]:
    """The reference evaluator's values of an append view, counted: what
    :func:`values_written` reads of Spark's, whatever the step (SPEC S19: a view read
    through a stage boundary may be written steps later, with equal rows)."""
    return Counter(frozen(r.value or {}) for result in results for r in result.outputs[view])


def internal_dead_letters(kafka: Any, checkpoint: Path, relation: str) -> list[Any]:
    """The records of a stage boundary's dead-letter topic (ADR 0023): none, ever."""
    prefix = (checkpoint / "stage-prefix").read_text(encoding="utf-8").strip()
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in relation)
    return read_topic(kafka.conf(), f"{prefix}.{safe}.dlq")


def _record(value: Any) -> Any:
    """A decoded key or value as a hashable value; a changelog's ``ptime`` (the step's batch
    time, which the reference evaluator does not know) left out."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, _record(v)) for k, v in value.items() if k != "ptime"))
    return value


def keyed_written(kafka: Any, circuit: Circuit, view: str, topic: str) -> Counter[Any]:
    """Every record of ``view`` in any format as (key, value, ``tidemark.waterline``
    header), counted."""
    output = circuit.view(view).output
    assert output is not None
    reader = OutputReader(view, output)
    return Counter(
        (
            _record(reader.key(m.key())),
            _record(reader.value(m.value())),
            dict(m.headers())["tidemark.waterline"].decode(),
        )
        for m in read_topic(kafka.conf(), topic)
    )


def keyed_oracle(results: Sequence[StepResult], view: str) -> Counter[Any]:
    """The reference evaluator's records of ``view``, as :func:`keyed_written` reads Spark's."""
    return Counter(
        (_record(r.key), _record(r.value), format_time_value(r.waterline, "ms"))
        for result in results
        for r in result.outputs[view]
    )


def oracle_written(results: Sequence[StepResult], view: str) -> Counter[tuple[Any, ...]]:
    """The reference evaluator's records of ``view``, as :func:`written` reads Spark's."""
    return Counter(
        (frozen(r.value or {}), format_time_value(r.waterline, "ms"))
        for result in results
        for r in result.outputs[view]
    )


def clock_ms(clock: str, day: int = 26) -> int:
    """``"h:mm[:ss]"`` on 2026-11-``day`` (UTC) as epoch milliseconds."""
    hour, minute, *second = (int(x) for x in clock.split(":"))
    moment = datetime(2026, 11, day, hour, minute, second[0] if second else 0, tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def shipped_copy(tmp_path: Path, program: str, replaced: Mapping[str, str]) -> Path:
    """A copy of ``pipelines/<program>`` in ``tmp_path`` with each quoted topic name
    (``replaced``: shipped name -> test topic) replaced."""
    text = (ROOT / "pipelines" / program).read_text(encoding="utf-8")
    for shipped, test in replaced.items():
        assert f"'{shipped}'" in text, shipped
        text = text.replace(f"'{shipped}'", f"'{test}'")
    path = tmp_path / program
    path.write_text(text, encoding="utf-8")
    return path


def shipped_program(
    kafka: Any,
    unique_topic: Any,
    tmp_path: Path,
    program: str,
    shipped: Mapping[str, str],
    inputs: Sequence[str],
) -> tuple[Circuit, dict[str, str]]:
    """``pipelines/<program>`` as shipped, each topic it names (``shipped``: topic -> short
    name) replaced by a test topic; the ``inputs`` (short names) created with two partitions.
    The compiled program and the test topics by short name."""
    topics = {name: unique_topic(name) for name in shipped.values()}
    for name in inputs:
        kafka.create_topic(topics[name], partitions=2)
    replaced = {topic: topics[name] for topic, name in shipped.items()}
    return compile_program(shipped_copy(tmp_path, program, replaced)), topics
