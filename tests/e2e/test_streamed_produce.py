"""A writing task produces each batch's records as it comes, in its one transaction (issue 7,
S15), on the real broker.

The records of a batch reach Kafka before the task asks Spark for the next batch, inside the
task's open transaction: a read_uncommitted consumer sees them, a read_committed one sees
nothing until the commit. A transaction fenced on the way (here by a second writer of the same
transactional id, as a zombie's successor would) fails the task with none of its records
committed, and the task run again commits every record once. Without transactions the
idempotent producer writes them all.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from app.connectors.kafka_sink import StepMarker, produce_partition
from app.connectors.topic_reader import read_topic
from app.errors import KafkaError

pytestmark = pytest.mark.e2e

_OUTPUT = pa.schema(
    [
        ("kind", pa.string()),
        ("rel", pa.string()),
        ("topic", pa.string()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ("reason", pa.string()),
    ]
)


def _records(topic: str, first: int, n: int) -> pa.RecordBatch:
    rows = [
        {"kind": "output", "rel": "v", "topic": topic, "value": f"r{i}".encode()}
        for i in range(first, first + n)
    ]
    return pa.RecordBatch.from_pylist(rows, schema=_OUTPUT)


def _visible(kafka: Any, topic: str, isolation: str, timeout_seconds: float = 30) -> list[bytes]:
    return [m.value() for m in read_topic(kafka.conf(), topic, timeout_seconds, isolation)]


def _write(kafka: Any, marker: StepMarker | None, batches: Iterator[pa.RecordBatch]) -> int:
    out = produce_partition(
        batches,
        conf=kafka.conf(),
        tables={},
        view_headers={"v": [("tidemark.waterline", b"w")]},
        marker=marker,
    )
    return sum(row["n"] for batch in out for row in batch.to_pylist() if row["kind"] == "output")


def _wait_visible(kafka: Any, topic: str, count: int) -> list[bytes]:
    """What a read_uncommitted consumer sees once ``count`` records are there (or after 30 s)."""
    deadline = time.monotonic() + 30
    seen = _visible(kafka, topic, "read_uncommitted")
    while len(seen) < count and time.monotonic() < deadline:
        time.sleep(0.2)
        seen = _visible(kafka, topic, "read_uncommitted")
    return seen


def test_each_batch_is_produced_before_the_next_is_asked_for_s15(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    out = kafka.create_topic(unique_topic("out"))
    anchor = kafka.create_topic(unique_topic("dlq"))
    marker = StepMarker(uuid.uuid4().hex[:16], 0, anchor)
    seen_between: list[list[bytes]] = []

    def batches() -> Iterator[pa.RecordBatch]:
        yield _records(out, 0, 5)
        seen_between.append(_wait_visible(kafka, out, 5))
        # An open transaction holds a read_committed reader: a few seconds show it empty.
        seen_between.append(_visible(kafka, out, "read_committed", timeout_seconds=3))
        yield _records(out, 5, 3)

    assert _write(kafka, marker, batches()) == 8
    uncommitted, committed = seen_between
    assert uncommitted == [f"r{i}".encode() for i in range(5)]
    assert committed == []
    assert _visible(kafka, out, "read_committed") == [f"r{i}".encode() for i in range(8)]


def test_a_writer_fenced_on_the_way_fails_and_its_successor_writes_once_s15(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    from confluent_kafka import Producer

    out = kafka.create_topic(unique_topic("out"))
    anchor = kafka.create_topic(unique_topic("dlq"))
    marker = StepMarker(uuid.uuid4().hex[:16], 0, anchor)

    def fenced() -> Iterator[pa.RecordBatch]:
        yield _records(out, 0, 5)
        assert len(_wait_visible(kafka, out, 5)) == 5  # produced in the open transaction
        # A second writer of the task's transactional id (a retried task, the successor of a
        # zombie) fences this one and aborts its transaction, the five records with it.
        successor = Producer(
            {**kafka.conf(), "transactional.id": marker.transactional_id(0), "log_level": 0}
        )
        successor.init_transactions(30)
        yield _records(out, 5, 3)

    with pytest.raises(KafkaError, match="fenced"):
        _write(kafka, marker, fenced())
    assert _visible(kafka, out, "read_committed") == []
    # The task run again writes every record once.
    assert _write(kafka, marker, iter([_records(out, 0, 5), _records(out, 5, 3)])) == 8
    assert _visible(kafka, out, "read_committed") == [f"r{i}".encode() for i in range(8)]
    assert len(_visible(kafka, out, "read_uncommitted")) == 13  # the aborted five stay unread


def test_without_transactions_every_batch_is_written(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    out = kafka.create_topic(unique_topic("out"))
    batches = iter([_records(out, 0, 4), _records(out, 4, 0), _records(out, 4, 6)])
    assert _write(kafka, None, batches) == 10
    assert _visible(kafka, out, "read_committed") == [f"r{i}".encode() for i in range(10)]
