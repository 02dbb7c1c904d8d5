"""Step markers in the compacted markers' topic (S15, ADR 0016), on the real broker.

What a run's first step and a retried task rely on: each id's last committed marker is found
and other sinks' are not; a transaction a crashed writer left open on the partition, with
its marker in it, neither blocks the driver's read until its timeout nor counts (the read
fences the id and the transaction is aborted); markers committed after that open transaction
are found; a read from a time finds only what was written since; a task that tries its
transaction again after a commit whose answer was lost finds its marker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sink_records import marker_place, output_records, write_task

from app.connectors.sink.markers import FoundMarker, marker_value, read_markers
from app.connectors.topic_reader import read_topic

pytestmark = pytest.mark.e2e


def _commit(kafka: Any, place: Any, tid: str, batch: int, open_: bool = False) -> Any:
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "transactional.id": tid, "log_level": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(place.topic, marker_value(batch, f"m{batch}"), tid.encode(),
                     partition=place.partition)
    if open_:
        producer.flush(30)  # in the log, in a transaction left open (the writer "crashes")
        return producer
    producer.commit_transaction(30)
    return None


def test_the_last_committed_marker_of_each_id_of_the_sink_is_read_s15(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    place = marker_place(kafka.conf(), unique_topic("markers"))
    sink, other = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
    for batch in range(3):
        _commit(kafka, place, f"tidemark-{sink}-0", batch)
    _commit(kafka, place, f"tidemark-{sink}-1048576", 1)
    _commit(kafka, place, f"tidemark-{other}-0", 9)
    found = read_markers(kafka.conf(), place, f"tidemark-{sink}-")
    assert found == {
        f"tidemark-{sink}-0": FoundMarker(2, "m2"),
        f"tidemark-{sink}-1048576": FoundMarker(1, "m1"),
    }
    assert read_markers(kafka.conf(), place, f"tidemark-{uuid.uuid4().hex[:16]}-") == {}


def test_a_crashed_writers_open_transaction_is_fenced_not_waited_for_s15(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    place = marker_place(kafka.conf(), unique_topic("markers"))
    sink = uuid.uuid4().hex[:16]
    _commit(kafka, place, f"tidemark-{sink}-0", 4)
    zombie = _commit(kafka, place, f"tidemark-{sink}-1", 5, open_=True)
    _commit(kafka, place, f"tidemark-{sink}-2", 5)  # committed after the open transaction
    started = time.monotonic()
    found = read_markers(kafka.conf(), place, f"tidemark-{sink}-")
    assert time.monotonic() - started < 30, "the read waited for the transaction's timeout"
    assert found == {
        f"tidemark-{sink}-0": FoundMarker(4, "m4"),
        f"tidemark-{sink}-2": FoundMarker(5, "m5"),
    }
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)  # fenced: its marker never counts


def test_a_read_from_a_time_finds_only_markers_written_since_s15(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    place = marker_place(kafka.conf(), unique_topic("markers"))
    sink = uuid.uuid4().hex[:16]
    tid = f"tidemark-{sink}-0"
    _commit(kafka, place, tid, 1)
    time.sleep(1.0)
    since = int(time.time() * 1000)
    assert read_markers(kafka.conf(), place, tid, since_ms=since, fence=False) == {}
    _commit(kafka, place, tid, 2)
    found = read_markers(kafka.conf(), place, tid, since_ms=since, fence=False)
    assert found == {tid: FoundMarker(2, "m2")}


def test_a_commit_that_reached_the_broker_before_its_error_is_not_written_again_s15(
    kafka: Any, unique_topic: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker restart can lose the answer of a commit that took effect: the task tries
    again, and must find its marker instead of writing the step a second time."""
    from confluent_kafka import KafkaError, KafkaException

    from app.connectors.sink import StepMarker, transactions

    out = kafka.create_topic(unique_topic("out"))
    place = marker_place(kafka.conf(), unique_topic("markers"))
    marker = StepMarker(uuid.uuid4().hex[:16], 0, place)
    failed: list[str] = []

    def answer_lost(name: str, batch: int | None = None) -> None:
        if name == "after_commit" and not failed:
            failed.append(name)
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "answer lost"))

    monkeypatch.setattr(transactions, "fault_point", answer_lost)
    summary = write_task(kafka.conf(), marker, [output_records(out, 0, 4)])
    assert failed == ["after_commit"]
    assert {row["kind"] for row in summary} == {"output", "replayed"}
    assert [m.value() for m in read_topic(kafka.conf(), out)] == [
        f"r{i}".encode() for i in range(4)
    ]
