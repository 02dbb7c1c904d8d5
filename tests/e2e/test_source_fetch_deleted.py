"""The source's read of one slice (``fetch``) when records of the slice were deleted after the
step was planned (retention, deleteRecords): a KafkaError naming them, never a read that
silently begins at the partition's new start. Real broker, no Spark."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.connectors.kafka_fetch import fetch
from app.connectors.kafka_source import KafkaPartitionSlice
from app.errors import KafkaError

pytestmark = pytest.mark.e2e


def _read(broker: Any, topic: str, start: int, end: int) -> list[int]:
    part = KafkaPartitionSlice(0, start, end, 1, 0, {})
    return [m.offset() for chunk in fetch(broker.conf(), topic, part) for m in chunk]


def test_a_slice_whose_first_records_were_deleted_fails_naming_them(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    topic = kafka.create_topic(unique_topic("deleted"))
    producer = Producer({**kafka.conf(), "log_level": 3})
    for i in range(10):
        producer.produce(topic, value=str(i).encode(), partition=0)
    assert producer.flush(30) == 0
    admin = AdminClient({**kafka.conf(), "log_level": 3})
    for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        future.result()
    with pytest.raises(KafkaError) as failed:
        _read(kafka, topic, 2, 10)
    assert (
        f"records of topic {topic} were deleted while a step read them: partition 0:"
        " offsets 2 to 4 (3)"
    ) in str(failed.value)
    # Wholly deleted: the consumer would find nothing and call the slice read.
    with pytest.raises(KafkaError, match="offsets 1 to 3"):
        _read(kafka, topic, 1, 4)
    assert _read(kafka, topic, 5, 10) == [5, 6, 7, 8, 9]
