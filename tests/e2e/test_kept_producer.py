"""A writing task's transactional producer kept from step to step in its worker
(ProducerPool.keep) writes exactly what a new one per step writes (S15), on the real
broker.

Keeping the producer skips creating and initialising one per task per step, and so the
fencing ``init_transactions`` did. What must still hold: consecutive batches of the id in one
worker reuse it; when the id's task ran in another worker since (which fenced the kept
producer), a replayed batch is still recognised from its marker, and the next batch is
written once by a new producer, with nothing of the fenced one visible.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from sink_records import as_replay, marker_place, output_records, write_task

from app.connectors.sink import StepMarker, open_early, producer_pool, producers
from app.connectors.sink.producers import ProducerPool
from app.connectors.topic_reader import read_topic

pytestmark = pytest.mark.e2e


def _write(kafka: Any, marker: StepMarker, batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    open_early(kafka.conf(), marker)
    return write_task(kafka.conf(), marker, batches)


def _in_another_worker(kafka: Any, marker: StepMarker, batch: pa.RecordBatch) -> None:
    """The task written by another worker process on this machine: one without this worker's
    kept producers, sharing the machine's claims."""
    other = ProducerPool()
    here = producers.PRODUCERS.swap(other)
    try:
        assert _write(kafka, marker, [batch])[0]["n"] == batch.num_rows
    finally:
        producers.PRODUCERS.swap(here)
        other.close()


def test_kept_producer_writes_once_after_its_id_moved_to_another_writer_s15(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    from confluent_kafka import Producer

    out = kafka.create_topic(unique_topic("out"))
    place = marker_place(kafka.conf(), unique_topic("markers"))
    sink = uuid.uuid4().hex[:16]
    tid = StepMarker(sink, 0, place).transactional_id(0)

    # Two steps in this worker: the second reuses the first's producer.
    assert _write(kafka, StepMarker(sink, 0, place), [output_records(out, 0, 3)])[0]["n"] == 3
    kept = producer_pool().peek(tid)
    assert _write(kafka, StepMarker(sink, 1, place), [output_records(out, 3, 2)])[0]["n"] == 2
    assert producer_pool().peek(tid) is kept

    # Step 2 runs in another worker of this machine, whose new producer fences the kept one.
    _in_another_worker(kafka, StepMarker(sink, 2, place), output_records(out, 5, 1))
    # Step 2 replayed here: its claim tells the kept producer is stale, so a new one opens,
    # and the step is recognised from its marker: nothing written.
    replayed = as_replay(kafka.conf(), StepMarker(sink, 2, place))
    replay = _write(kafka, replayed, [output_records(out, 5, 1)])
    assert {r["kind"] for r in replay} == {"output", "replayed"}
    kept = producer_pool().peek(tid)

    # A writer of the id on another machine (no claim here) fences the kept producer: the
    # broker refuses its records, and a new producer writes.
    elsewhere = Producer({**kafka.conf(), "transactional.id": tid, "log_level": 0})
    elsewhere.init_transactions(30)
    elsewhere.close()
    assert _write(kafka, StepMarker(sink, 3, place), [output_records(out, 6, 2)])[0]["n"] == 2
    assert producer_pool().peek(tid) is not kept

    # A step with nothing to write keeps its opener's producer for the next.
    kept = producer_pool().peek(tid)
    assert _write(kafka, StepMarker(sink, 4, place), []) == []
    assert producer_pool().opening_ids() == []
    assert producer_pool().peek(tid) is kept
    assert _write(kafka, StepMarker(sink, 5, place), [output_records(out, 8, 1)])[0]["n"] == 1

    assert [m.value() for m in read_topic(kafka.conf(), out)] == [
        f"r{i}".encode() for i in range(9)
    ]
    # Nothing more read uncommitted either: the broker took no record of the fenced producer.
    assert len(read_topic(kafka.conf(), out, 30, "read_uncommitted")) == 9
