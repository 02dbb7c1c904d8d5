"""Offsets the topic no longer holds, and partitions added to it, in the step planning of the
Kafka source (app/connectors/kafka_offsets.py)."""

from __future__ import annotations

import pytest

from app.connectors.kafka_offsets import (
    latest_offset,
    lost_offsets,
    past_log_start,
    step_slices,
)
from app.connectors.kafka_source import KafkaPartitionSlice
from app.errors import KafkaError


def _start(partitions: dict[int, int], step: int = 3) -> dict[str, object]:
    return {
        "topic": "t",
        "partitions": {str(p): o for p, o in partitions.items()},
        "step": step,
        "wall_clock_ms": 0,
    }


def test_offsets_below_the_log_start_fail_the_step_naming_them_by_default() -> None:
    start = _start({0: 5, 1: 4})
    ends = {0: (8, 12), 1: (0, 6)}
    assert lost_offsets(start, ends) == {0: (5, 8)}
    with pytest.raises(KafkaError) as failed:
        latest_offset(start, ends, None, "t", table="reading")
    text = str(failed.value)
    assert "records of topic t (table reading) were deleted before this run read them" in text
    assert "partition 0: offsets 5 to 7 (3)" in text
    assert "TIDEMARK_FAIL_ON_DATA_LOSS=false" in text


def test_skipped_offsets_start_the_slice_at_the_log_start() -> None:
    start = _start({0: 5, 1: 4})
    end = latest_offset(start, {0: (8, 12), 1: (0, 6)}, None, "t", fail_on_data_loss=False)
    assert end["partitions"] == {"0": 12, "1": 6}
    assert end["from"] == {"0": 8}
    slices = step_slices(start, end, {})
    assert [(s.partition, s.start, s.end) for s in slices] == [(0, 8, 12), (1, 4, 6)]
    # A partition whose every record is gone moves to its low offset too, with nothing read.
    end = latest_offset(start, {0: (12, 12), 1: (0, 6)}, None, "t", fail_on_data_loss=False)
    assert end["partitions"]["0"] == 12 and end["from"] == {"0": 12}
    assert [(s.partition, s.start) for s in step_slices(start, end, {})] == [(1, 4)]


def test_partitions_added_to_the_topic_are_read_from_their_low_offset() -> None:
    start = _start({0: 2})
    end = latest_offset(start, {0: (0, 2), 1: (0, 3), 2: (5, 7)}, None, "t")
    assert end["partitions"] == {"0": 2, "1": 3, "2": 7}
    assert end["from"] == {"2": 5}  # the new partition's first offsets were gone: not a loss
    slices = step_slices(start, end, {})
    assert [(s.partition, s.start, s.end) for s in slices] == [(1, 0, 3), (2, 5, 7)]


def test_a_replayed_slice_starts_past_offsets_deleted_since_it_was_planned() -> None:
    slices = [
        KafkaPartitionSlice(0, 5, 10, 4, 0, {}),
        KafkaPartitionSlice(1, 5, 10, 4, 0, {}),
        KafkaPartitionSlice(2, 5, 10, 4, 0, {}),
    ]
    moved = past_log_start(slices, {0: (0, 10), 1: (7, 12), 2: (10, 12)})
    assert [(s.partition, s.start, s.end) for s in moved] == [(0, 5, 10), (1, 7, 10)]
