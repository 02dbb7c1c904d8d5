"""Send punctuation records (SPEC S4): a null value with a ``tidemark.bound`` header.

A quiet producer's table would otherwise never advance its waterline, so its windows would
never close. A punctuation goes to every partition by default, since each step's waterline
is the maximum over all partitions read in that step. Its key is the header's name: a
compacted topic (a table keyed by its Kafka key) refuses a record without a key, and
compaction then keeps only the latest punctuation of each header, never touching a row's key.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.errors import KafkaError, kafka_reason

__all__ = ["send_punctuation"]


def send_punctuation(
    conf: Mapping[str, str], topic: str, header: str, bound: str, partition: int | None = None
) -> list[int]:
    from confluent_kafka import KafkaException, Producer

    servers = conf.get("bootstrap.servers")
    try:
        producer = Producer({**conf, "acks": "all", "log_level": 3})
        metadata = producer.list_topics(topic, timeout=15)
    except KafkaException as exc:
        raise KafkaError(
            f"cannot reach the Kafka cluster at {servers}: {kafka_reason(exc)}: check"
            " --bootstrap-servers (TIDEMARK_BOOTSTRAP_SERVERS), that the broker runs, and"
            " TIDEMARK_KAFKA_* for a secured cluster"
        ) from exc
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        raise KafkaError(f"topic {topic} does not exist")
    if partition is not None and partition not in info.partitions:
        raise KafkaError(
            f"topic {topic} has no partition {partition}: give --partition between 0 and"
            f" {len(info.partitions) - 1}, or none for every partition"
        )
    partitions = sorted(info.partitions) if partition is None else [partition]
    errors: list[str] = []
    for p in partitions:
        try:
            producer.produce(
                topic,
                value=None,
                key=header.encode(),
                partition=p,
                headers=[(header, bound.encode())],
                on_delivery=lambda err, _m: errors.append(str(err)) if err else None,
            )
        except (KafkaException, BufferError) as exc:
            raise KafkaError(f"punctuation to {topic} partition {p} failed: {exc}") from exc
    if producer.flush(30) or errors:
        raise KafkaError(f"punctuation to {topic} not acknowledged: {errors[:3]}")
    return partitions
