"""Reading a selection of a dead-letter topic, as a read_committed consumer does.

A dead letter of an aborted sink transaction is never seen (SPEC S15). Each partition is read
from the selection's first offset (or the first written at ``since``) to the end it had when
the read started, partition by partition, so records come in partition, then offset order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.dead_letters.records import REASON, DeadLetter
from app.dead_letters.selection import Selection
from app.errors import KafkaError, TidemarkError, kafka_reason

__all__ = [
    "CONSUMER_SETTINGS",
    "NotADeadLetterTopic",
    "SelectionReader",
    "open_consumer",
    "read_partition",
    "topic_partitions",
]

#: What the readers set over the user's Kafka settings. Offsets are never committed.
CONSUMER_SETTINGS: Mapping[str, Any] = {
    "group.id": "tidemark-dead-letters",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "isolation.level": "read_committed",
    "auto.offset.reset": "earliest",
    "max.partition.fetch.bytes": 10485760,
    "fetch.wait.max.ms": 100,
    "log_level": 3,
}


class NotADeadLetterTopic(TidemarkError):
    """The topic holds records, none of them with the S6 ``tidemark.error.reason`` header."""


def open_consumer(conf: Mapping[str, str]) -> Any:
    """A consumer of the cluster in ``conf``; a KafkaError that names the settings when the
    client cannot be made."""
    from confluent_kafka import Consumer, KafkaException

    try:
        return Consumer({**conf, **CONSUMER_SETTINGS})
    except KafkaException as exc:
        raise KafkaError(
            f"cannot create a Kafka client: {kafka_reason(exc)}: check TIDEMARK_KAFKA_*"
            " (security protocol, SASL and TLS files)"
        ) from exc


def topic_partitions(client: Any, conf: Mapping[str, str], topic: str) -> list[int]:
    """The partitions of ``topic``, or a KafkaError saying how to find the right topic."""
    servers = conf.get("bootstrap.servers")
    try:
        metadata = client.list_topics(timeout=15)
    except Exception as exc:  # noqa: BLE001 - KafkaException, or a timeout as one
        raise KafkaError(
            f"cannot reach the Kafka cluster at {servers}: {kafka_reason(exc)}: check"
            " --bootstrap-servers (TIDEMARK_BOOTSTRAP_SERVERS), that the broker runs, and"
            " TIDEMARK_KAFKA_* for a secured cluster"
        ) from exc
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        raise KafkaError(
            f"topic {topic} does not exist on {servers}: a table's dead-letter topic is its"
            " 'dead_letter' option, else '<its topic>.dlq' (`tidemark explain PROGRAM` lists"
            " each table's); check --topic and --bootstrap-servers"
        )
    return sorted(info.partitions)


def read_partition(
    consumer: Any, topic: str, partition: int, start: int, end: int, stall_seconds: float
) -> Iterator[Any]:
    """The messages of ``partition`` at offsets [start, end), read_committed. An open
    transaction below ``end`` that stays open ``stall_seconds`` is a KafkaError."""
    from confluent_kafka import KafkaException, TopicPartition

    if start >= end:
        return
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + stall_seconds
        while True:
            position = consumer.position([TopicPartition(topic, partition)])[0].offset
            if position >= end:
                return
            messages = consumer.consume(500, timeout=0.5)
            for msg in messages:
                if msg.error() is not None:
                    raise KafkaError(
                        f"cannot read {topic} partition {partition}: {msg.error().str()}:"
                        " check that Tidemark's user may read it (TIDEMARK_KAFKA_*)"
                    )
                if msg.offset() >= end:
                    return
                yield msg
            if messages:
                deadline = time.monotonic() + stall_seconds
            elif time.monotonic() > deadline:
                raise KafkaError(
                    f"reading {topic} partition {partition} stopped at offset"
                    f" {max(position, start)} before its end {end} for {stall_seconds:g} s:"
                    " an open transaction holds read_committed readers there (a Tidemark"
                    " step or replay in flight, or one that crashed, which the broker aborts"
                    " after its transaction timeout): try again"
                )
    except KafkaException as exc:
        raise KafkaError(
            f"cannot read {topic} partition {partition}: {kafka_reason(exc)}"
        ) from exc
    finally:
        consumer.unassign()


@dataclass
class SelectionReader:
    """Reads the dead letters ``selection`` takes from ``topic``. After iterating:
    ``scanned`` records in the offset and time range, ``foreign`` of them without the S6
    reason header (skipped), ``replays``: the places (partition, offset) of the replayed
    records refused again that the selection left out, ``more`` whether records beyond
    ``limit`` matched."""

    conf: Mapping[str, str]
    topic: str
    selection: Selection
    stall_seconds: float = 30.0
    scanned: int = 0
    foreign: int = 0
    replays: list[tuple[int, int]] = field(default_factory=list)
    more: bool = False

    def __iter__(self) -> Iterator[DeadLetter]:
        from confluent_kafka import KafkaException, TopicPartition

        consumer = open_consumer(self.conf)
        try:
            partitions = topic_partitions(consumer, self.conf, self.topic)
            taken = 0
            limit = self.selection.limit
            for partition in partitions:
                if not self.selection.reads_partition(partition):
                    continue
                try:
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(self.topic, partition), timeout=15
                    )
                    start, end = self.selection.offset_range(low, high)
                    if self.selection.since_ms is not None and start < end:
                        found = consumer.offsets_for_times(
                            [TopicPartition(self.topic, partition, self.selection.since_ms)],
                            timeout=15,
                        )[0].offset
                        start = end if found < 0 else max(start, found)
                except KafkaException as exc:
                    raise KafkaError(
                        f"cannot read the offsets of {self.topic} partition {partition}:"
                        f" {kafka_reason(exc)}"
                    ) from exc
                for msg in read_partition(
                    consumer, self.topic, partition, start, end, self.stall_seconds
                ):
                    letter = DeadLetter.from_message(msg)
                    if not self.selection.in_range(letter):
                        continue
                    self.scanned += 1
                    if not letter.is_dead_letter:
                        self.foreign += 1
                        continue
                    if not self.selection.matches(letter):
                        continue
                    if self.selection.leaves_out_replay(letter):
                        self.replays.append((letter.partition, letter.offset))
                        continue
                    if limit is not None and taken >= limit:
                        self.more = True
                        return
                    taken += 1
                    yield letter
        finally:
            consumer.close()
        self.check()

    def check(self) -> None:
        """Fail when the range held records and none was a dead letter."""
        if self.scanned and self.foreign == self.scanned:
            raise NotADeadLetterTopic(
                f"{self.topic} is not a dead-letter topic: none of its {self.scanned}"
                f" record(s) read has the {REASON} header Tidemark writes on a dead letter;"
                " give the table's dead-letter topic (its 'dead_letter' option, else"
                " '<its topic>.dlq')"
            )
