"""A task's transaction opened before its records (sink.transactions.open_early) writes
exactly what one opened after them writes (S15), on the real broker.

Opening early moves producer creation and fencing off the task's critical path; it must change
nothing else: the records and the marker are committed once, a step whose marker is committed
is still recognised as a replay, an opener left by another step is never used (it belongs to
that step), and an opener the task did not need does not
outlive the task (a late ``init_transactions`` would fence the next step's writer).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from sink_records import as_replay, marker_place, output_records, write_task

from app.connectors.sink import StepMarker, open_early, producer_pool
from app.connectors.topic_reader import read_topic

pytestmark = pytest.mark.e2e


def _write(kafka: Any, marker: StepMarker, batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return write_task(kafka.conf(), marker, batches)


def test_early_opened_transaction_writes_once_and_recognises_replays_s15(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    out = kafka.create_topic(unique_topic("out"))
    place = marker_place(kafka.conf(), unique_topic("markers"))
    sink = uuid.uuid4().hex[:16]

    # Step batch 0, opened before its records: written, the opener taken over.
    first = StepMarker(sink, 0, place)
    open_early(kafka.conf(), first)
    assert _write(kafka, first, [output_records(out, 0, 5)])[0]["n"] == 5
    assert producer_pool().opening_ids() == []

    # The same batch again (a replay after a crash), opened early too: nothing is written,
    # the stored counts come back.
    replayed = as_replay(kafka.conf(), first)
    open_early(kafka.conf(), replayed)
    replay = _write(kafka, replayed, [output_records(out, 0, 5)])
    assert {r["kind"] for r in replay} == {"output", "replayed"}

    # An opener left for another batch is not used (a new one is opened once the stale one
    # is done, or the stale init could fence the new writer: a race, so tried several times),
    # and the batch is written.
    for batch in range(2, 12, 2):
        open_early(kafka.conf(), StepMarker(sink, batch - 1, place))
        assert (
            _write(kafka, StepMarker(sink, batch, place), [output_records(out, 0, 1)])[0]["n"] == 1
        )

    # A task with nothing to write waits out its opener: none is left behind.
    open_early(kafka.conf(), StepMarker(sink, 13, place))
    assert _write(kafka, StepMarker(sink, 13, place), []) == []
    assert producer_pool().opening_ids() == []

    committed = [m.value() for m in read_topic(kafka.conf(), out)]
    assert committed == [f"r{i}".encode() for i in (*range(5), *[0] * 5)]
