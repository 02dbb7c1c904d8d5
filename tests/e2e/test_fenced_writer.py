"""A writing task fenced in the middle of its transaction fails with nothing committed, and
the task run again commits every record once (S15), on the real broker.

A second writer of the task's transactional id (a retried task, the successor of a zombie)
fences the first between its records and their flush. confluent-kafka raises that fatal error
inside ``flush`` and reports it as a SystemError; the sink must see the KafkaException behind
it, judge it fatal and fail the task, not retry as the fenced writer. Without transactions the
idempotent producer writes every record.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from sink_records import marker_place, output_records, write_task

from app.connectors.sink import StepMarker, transactions
from app.connectors.topic_reader import read_topic
from app.errors import KafkaError

pytestmark = pytest.mark.e2e


def _visible(kafka: Any, topic: str, isolation: str, timeout_seconds: float = 30) -> list[bytes]:
    return [m.value() for m in read_topic(kafka.conf(), topic, timeout_seconds, isolation)]


def _write(kafka: Any, marker: StepMarker | None, batches: Iterator[pa.RecordBatch]) -> int:
    return sum(
        row["n"] for row in write_task(kafka.conf(), marker, batches) if row["kind"] == "output"
    )


def test_a_writer_fenced_on_the_way_fails_and_its_successor_writes_once_s15(
    kafka: Any, unique_topic: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from confluent_kafka import Producer

    out = kafka.create_topic(unique_topic("out"))
    place = marker_place(kafka.conf(), unique_topic("markers"))
    marker = StepMarker(uuid.uuid4().hex[:16], 0, place)
    runs = 0
    produce_run = transactions.produce_run

    def fenced_after_the_first_five(producer: Any, run: Any) -> None:
        nonlocal runs
        produce_run(producer, run)  # the first batch's five records, then the next three
        runs += 1
        if runs == 1:
            producer.flush(30)  # the five reach the broker in the open transaction
            successor = Producer(
                {**kafka.conf(), "transactional.id": marker.transactional_id(0), "log_level": 0}
            )
            successor.init_transactions(30)  # fences the writer, aborts its transaction

    monkeypatch.setattr(transactions, "produce_run", fenced_after_the_first_five)
    with pytest.raises(KafkaError, match="fenced"):
        _write(kafka, marker, iter([output_records(out, 0, 5), output_records(out, 5, 3)]))
    monkeypatch.undo()
    assert _visible(kafka, out, "read_committed") == []
    # The task run again writes every record once.
    assert _write(kafka, marker, iter([output_records(out, 0, 5), output_records(out, 5, 3)])) == 8
    assert _visible(kafka, out, "read_committed") == [f"r{i}".encode() for i in range(8)]
    assert len(_visible(kafka, out, "read_uncommitted")) == 13  # the aborted five stay unread


def test_without_transactions_every_batch_is_written(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    out = kafka.create_topic(unique_topic("out"))
    batches = iter(
        [output_records(out, 0, 4), output_records(out, 4, 0), output_records(out, 4, 6)]
    )
    assert _write(kafka, None, batches) == 10
    assert _visible(kafka, out, "read_committed") == [f"r{i}".encode() for i in range(10)]
