"""Read a whole topic as a consumer of Tidemark's output would (read_committed).

Used by the demo's summary and by the end-to-end tests to check what really reached Kafka.
"""

from __future__ import annotations

import time
from typing import Any

from app.errors import KafkaError, kafka_reason

__all__ = ["read_topic"]


def read_topic(
    conf: dict[str, str],
    topic: str,
    timeout_seconds: float = 30,
    isolation: str = "read_committed",
) -> list[Any]:
    """Every record of ``topic`` from the beginning to its current end (read_committed; a
    test reads an open transaction's records with ``read_uncommitted``). Under read_committed
    an open transaction holds the reader until ``timeout_seconds``."""
    from confluent_kafka import KafkaError as Code
    from confluent_kafka import KafkaException

    # A topic created a moment ago may have no leader yet.
    leaderless = {Code.NOT_LEADER_FOR_PARTITION, Code.LEADER_NOT_AVAILABLE}
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            return _read(conf, topic, timeout_seconds, isolation)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.code() if isinstance(error, Code) else None
            if code in leaderless and time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            raise KafkaError(
                f"cannot read topic {topic} from {conf.get('bootstrap.servers')}:"
                f" {kafka_reason(exc)}: check that the broker runs and answers, and the topic"
                " exists"
            ) from exc


def _read(conf: dict[str, str], topic: str, timeout_seconds: float, isolation: str) -> list[Any]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **conf,
            "group.id": "tidemark-topic-reader",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "log_level": 3,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: list[Any] = []
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout_seconds
        while len(done) < len(partitions) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is not None:
                    continue
                records.append(msg)
                partition, offset = msg.partition(), msg.offset()
                if partition is not None and offset is not None and offset >= ends[partition] - 1:
                    done.add(partition)
            for p in partitions:
                position = consumer.position([TopicPartition(topic, p)])[0].offset
                if position >= ends[p]:
                    done.add(p)
        return records
    finally:
        consumer.close()
