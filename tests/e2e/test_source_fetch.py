"""The source's Kafka read of one slice (``fetch``) against a real broker, no Spark.

``fetch`` asks the consumer for no more messages than the slice's offsets still hold (asking
for more made every slice ending at the topic's end wait a whole second. Offsets are
only an upper bound on messages: a transactional producer leaves a commit marker at an offset
no consumer sees. These tests hold the read to exactly the slice's messages, in order, when
slices start, end or lie next to such markers, and when the slice ends at the topic's end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.connectors.kafka_fetch import fetch
from app.connectors.kafka_offsets import topic_end_offsets
from app.connectors.kafka_source import KafkaPartitionSlice

pytestmark = pytest.mark.e2e


def _produce_transactions(broker: Any, topic: str, sizes: list[int]) -> list[bytes]:
    """One committed transaction per size, each followed by its commit marker."""
    from confluent_kafka import Producer

    producer = Producer(
        {**broker.conf(), "transactional.id": f"fetch-test-{topic}", "log_level": 3}
    )
    producer.init_transactions(30)
    values: list[bytes] = []
    for t, size in enumerate(sizes):
        producer.begin_transaction()
        for i in range(size):
            value = f"{t}-{i}".encode()
            producer.produce(topic, value=value, partition=0)
            values.append(value)
        producer.commit_transaction(30)
    return values


def _read(broker: Any, topic: str, start: int, end: int) -> list[tuple[int, bytes]]:
    part = KafkaPartitionSlice(0, start, end, 1, 0, {})
    return [(m.offset(), m.value()) for chunk in fetch(broker.conf(), topic, part) for m in chunk]


def test_slices_around_transaction_markers_hold_exactly_their_messages(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    topic = kafka.create_topic(unique_topic("txn"))
    values = _produce_transactions(kafka, topic, [3, 4, 2])
    end = topic_end_offsets(kafka.conf(), topic)[0]
    # 9 messages and 3 markers: offsets 0-2, marker 3, 4-7, marker 8, 9-10, marker 11.
    assert end == 12
    everything = _read(kafka, topic, 0, end)
    assert [v for _, v in everything] == values
    assert [o for o, _ in everything] == [0, 1, 2, 4, 5, 6, 7, 9, 10]
    # A slice ending on a marker, one starting on it, one cut inside a transaction.
    assert [o for o, _ in _read(kafka, topic, 0, 4)] == [0, 1, 2]
    assert [o for o, _ in _read(kafka, topic, 3, 6)] == [4, 5]
    assert [o for o, _ in _read(kafka, topic, 6, 12)] == [6, 7, 9, 10]
    assert _read(kafka, topic, 11, 12) == []  # only a marker


def test_a_slice_ending_at_the_topic_end_has_every_message(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    from confluent_kafka import Producer

    topic = kafka.create_topic(unique_topic("plain"))
    producer = Producer({**kafka.conf(), "log_level": 3})
    for i in range(25_003):  # more than one consume() call's 10,000, not a multiple of it
        producer.produce(topic, value=str(i).encode(), partition=0)
    assert producer.flush(30) == 0
    read = _read(kafka, topic, 0, 25_003)
    assert [o for o, _ in read] == list(range(25_003))
    assert [int(v) for _, v in read] == list(range(25_003))
    assert [o for o, _ in _read(kafka, topic, 9_999, 20_001)] == list(range(9_999, 20_001))
