"""The source's Kafka read of one slice: its records, fetched with confluent-kafka and
decoded into Arrow (:func:`app.connectors.kafka_source.decode_slice`).

Transient errors (a broker restart, a leader change) are the client's to retry; an error that
no retry can fix (:data:`_PERMANENT`, or one librdkafka calls fatal) ends the read as a
:class:`~app.errors.KafkaError` naming the topic, the partition and the offsets.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from itertools import chain
from typing import Any

import pyarrow as pa

from app.connectors.kafka_consumers import consumer_pool
from app.connectors.kafka_offsets import data_loss_error
from app.connectors.kafka_source import KafkaPartitionSlice, decode_slice
from app.connectors.late_gate import SourceSpec
from app.errors import KafkaError, kafka_reason

__all__ = ["fetch", "read_slice"]


def _permanent_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError as Code

    return frozenset(
        {
            Code.OFFSET_OUT_OF_RANGE,
            Code.TOPIC_AUTHORIZATION_FAILED,
            Code.UNKNOWN_TOPIC_OR_PART,
            Code._UNKNOWN_PARTITION,
            Code._AUTHENTICATION,
        }
    )


_PERMANENT = _permanent_codes()

#: How long a slice's read may see no message and no progress before it gives up.
STALL_SECONDS = 120


def read_slice(
    spec: SourceSpec, conf: Mapping[str, str], part: KafkaPartitionSlice
) -> Iterator[pa.RecordBatch]:
    """Fetch, decode and gate one slice; yields Arrow batches, then one probe row."""
    return decode_slice(spec, part, chain.from_iterable(fetch(conf, spec.topic, part)))


def fetch(conf: Mapping[str, str], topic: str, part: KafkaPartitionSlice) -> Iterator[list[Any]]:
    """The messages of [start, end) of one partition, in offset order, in the lists the
    consumer returns them (a message at a time would cost Python calls per record)."""
    if part.end <= part.start:
        return
    from confluent_kafka import KafkaException

    try:
        yield from _fetch(conf, topic, part)
    except KafkaException as exc:
        raise KafkaError(
            f"cannot read offsets {part.start} to {part.end} of {topic}[{part.partition}] from"
            f" {conf.get('bootstrap.servers')}: {kafka_reason(exc)}: check that the broker"
            " runs, the topic and its records still exist (retention) and the Kafka settings"
            " may read it"
        ) from exc


def _fetch(conf: Mapping[str, str], topic: str, part: KafkaPartitionSlice) -> Iterator[list[Any]]:
    from confluent_kafka import KafkaException, Message, TopicPartition

    consumer = consumer_pool().get(conf)
    consumer.assign([TopicPartition(topic, part.partition, part.start)])
    last = part.end - 1
    following = part.start  # the offset after the last message handed over
    idle_since: float | None = None
    started = False  # whether the read is known to have begun where the slice does
    try:
        while True:
            # Never ask for more than the slice still holds: consume() waits its whole timeout
            # for a count it cannot reach, which cost every slice ending at the topic's end a
            # full second (measured). Gaps (transaction markers) make the count an
            # upper bound, hence the short timeout and the position check below.
            wanted = max(1, min(10_000, part.end - following))
            messages = consumer.consume(num_messages=wanted, timeout=0.2)
            if not messages:
                position = consumer.position([TopicPartition(topic, part.partition)])[0].offset
                if not started and position > part.start:
                    started = _check_log_start(consumer, topic, part)
                if position >= part.end:
                    return
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > STALL_SECONDS:
                    raise KafkaException(
                        f"{topic}[{part.partition}] stalled at {position} before {part.end}"
                    )
                continue
            idle_since = None
            if not started and messages[0].error() is None:
                started = messages[0].offset() == part.start or _check_log_start(
                    consumer, topic, part
                )
            if not any(map(Message.error, messages)) and messages[-1].offset() < last:
                following = messages[-1].offset() + 1
                yield messages  # the common case: all good, all before the slice's end
                continue
            batch, done = [], False
            for msg in messages:
                error = msg.error()
                if error is not None:
                    if error.fatal() or error.code() in _PERMANENT:
                        raise KafkaException(error)
                    continue  # transient (a broker restart, a leader change): the client retries
                if msg.offset() > last:
                    done = True
                    break
                batch.append(msg)
                following = msg.offset() + 1
                if msg.offset() == last:
                    done = True
                    break
            yield batch
            if done:
                return
    finally:
        consumer.unassign()


def _check_log_start(consumer: Any, topic: str, part: KafkaPartitionSlice) -> bool:
    """The read of a slice went on past its start offset: gaps (transaction markers,
    compaction) are normal there, offsets below the partition's low offset are not. They were
    deleted (retention, deleteRecords) after the step was planned, and the consumer went on
    from the low offset: a KafkaError (``fail_on_data_loss``: a replay of the step skips them
    when it is off, the planner moving the slice's start)."""
    from confluent_kafka import TopicPartition

    low, _ = consumer.get_watermark_offsets(
        TopicPartition(topic, part.partition), timeout=30, cached=False
    )
    if low > part.start:
        gone = {part.partition: (part.start, min(low, part.end))}
        raise data_loss_error(topic, "", gone, "while a step read them")
    return True
