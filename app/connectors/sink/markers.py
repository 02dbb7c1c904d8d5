"""Step markers as records of a compacted topic (SPEC S15, ADR 0016).

A writing task's *step marker* says that the task committed its records of ``(sink, batch,
task)``: a record keyed by the task's transactional id, valued ``{"batch": N, "marker": M}``
(``M`` the fingerprint and counts of :func:`app.connectors.sink.summary.encode_marker`),
produced in the task's transaction after its records. Compaction keeps each id's last marker
for as long as the topic exists: no consumer group that expires, nothing on the dead-letter
topic. A sink's markers are on one partition of the topic, :func:`marker_partition`.

A topic has no lookup by key, so markers are read where a replay can happen, not by every
task:

* **At a run's first step** (Spark replays only the last batch of its checkpoint): the driver
  reads the sink's partition to its end once (:func:`read_markers`), after fencing the sink's
  ids that hold a transaction open there (a crashed run's: they would hold a read_committed
  read at the last stable offset until the transaction timeout), and hands the step's tasks
  what it found.
* **In a retried task attempt** (an earlier attempt may have committed): the task, once it has
  fenced that attempt with ``init_transactions``, reads the partition from the step's start
  (by timestamp, :data:`CLOCK_MARGIN_MS` earlier) for its own id.

Every other task of a run's later steps knows without reading that no marker of its batch
exists: only its own earlier attempts could have written one.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from app.errors import KafkaError, SinkError, kafka_reason

__all__ = [
    "CLOCK_MARGIN_MS",
    "MARKER_TOPIC",
    "FoundMarker",
    "MarkerPlace",
    "MarkerTopic",
    "ensure_marker_topic",
    "group_markers",
    "marker_partition",
    "marker_value",
    "read_markers",
]

log = structlog.get_logger("tidemark.markers")

#: The default name of the markers' topic (the ``marker_topic`` setting).
MARKER_TOPIC = "tidemark.step-markers"

#: How much earlier than the step's start a retried task reads markers from: the clocks of
#: the driver (the step's start) and of the broker or executor (the marker's timestamp) may
#: differ by this much.
CLOCK_MARGIN_MS = 300_000

#: The markers' topic as Tidemark creates it: compacted (each id's last marker, forever),
#: cleaned often (a run's first step reads the partition), records as large as a marker.
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": "3600000",
    "min.cleanable.dirty.ratio": "0.1",
    "max.message.bytes": "1048576",
}

#: How long a read waits for other writers' open transactions on the partition to end (more
#: than the sink's transaction timeout, after which the broker aborts them).
READ_WAIT_SECONDS = 150.0


@dataclass(frozen=True)
class MarkerPlace:
    """Where a sink's markers are: the topic and the sink's partition of it."""

    topic: str
    partition: int


@dataclass(frozen=True)
class FoundMarker:
    """A committed marker: the batch its task wrote and its metadata (fingerprint, counts)."""

    batch: int
    metadata: str


def marker_partition(sink_id: str, partitions: int) -> int:
    """The partition of the markers' topic holding ``sink_id``'s markers. The topic's
    partition count must never change (docs/reliability.md): it would move them."""
    return zlib.crc32(sink_id.encode()) % partitions


def marker_value(batch_id: int, metadata: str) -> bytes:
    """A marker record's value."""
    return json.dumps({"batch": batch_id, "marker": metadata}, separators=(",", ":")).encode()


def _parse(value: bytes | None) -> FoundMarker | None:
    """The marker a record's value holds; None for anything else (a tombstone)."""
    if not value:
        return None
    try:
        document = json.loads(value)
        return FoundMarker(int(document["batch"]), str(document["marker"]))
    except (ValueError, KeyError, TypeError):
        return None


def ensure_marker_topic(
    kafka_conf: Mapping[str, str], topic: str, replicas: int | None, timeout: float = 30
) -> int:
    """Create the markers' topic when missing (one partition, :data:`TOPIC_CONFIG`); its
    partition count. An existing topic is used as it is; one that is not compacted gets a
    warning: retention would delete markers a replay needs."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ConfigResource,
        NewTopic,
    )

    admin = AdminClient({**kafka_conf, "log_level": 3})
    try:
        found = admin.list_topics(topic, timeout=timeout).topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
            config = admin.describe_configs([resource])[resource].result(timeout)
            policy = config.get("cleanup.policy")
            if policy is not None and "compact" not in str(policy.value):
                log.warning(
                    "markers.not_compacted",
                    topic=topic,
                    cleanup_policy=policy.value,
                    fix="set cleanup.policy=compact on it: deleted markers make replays"
                    " write their steps again",
                )
            return len(found.partitions)
        new = NewTopic(topic, num_partitions=1, replication_factor=replicas or -1,
                       config=dict(TOPIC_CONFIG))
        try:
            admin.create_topics([new], request_timeout=timeout)[topic].result()
            log.info("topic.created", topic=topic, purpose="step markers")
        except Exception as exc:  # noqa: BLE001 - created meanwhile by another run is fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
        return 1
    except Exception as exc:  # noqa: BLE001 - the client's errors, translated
        raise KafkaError(
            f"cannot create or describe the step markers' topic {topic}: {kafka_reason(exc)}:"
            " create it (cleanup.policy=compact, one partition), or let Tidemark's user"
            " create and describe it; see docs/security.md"
        ) from exc


def read_markers(
    kafka_conf: Mapping[str, str],
    place: MarkerPlace,
    prefix: str,
    since_ms: int | None = None,
    fence: bool = True,
) -> dict[str, FoundMarker]:
    """The last committed marker of each transactional id starting with ``prefix`` in the
    sink's partition, read from its start (``since_ms`` None) or from the first record at or
    after that time, to the partition's end when called.

    ``fence``: first fence the ids of ``prefix`` that hold a transaction open on the
    partition below its end (``init_transactions`` aborts it): the read waits for every
    transaction below the end to finish, and a crashed run's would only end at its timeout.
    Other writers' transactions end by themselves; the read waits up to
    :data:`READ_WAIT_SECONDS` for them."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    def consumer(isolation: str) -> Any:
        return Consumer(
            {
                **kafka_conf,
                "group.id": "tidemark-markers",
                "isolation.level": isolation,
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "enable.sparse.connections": False,
                "log_level": 3,
            }
        )

    where = TopicPartition(place.topic, place.partition)
    committed = consumer("read_committed")
    try:
        low, end = committed.get_watermark_offsets(where, timeout=30, cached=False)
        start = OFFSET_BEGINNING
        if since_ms is not None and since_ms > 0:  # negative timestamps are special values
            at = TopicPartition(place.topic, place.partition, since_ms)
            start = committed.offsets_for_times([at], timeout=30)[0].offset
            if start < 0:  # no record at or after the time
                return {}
        # The end of the log (read_uncommitted) against the last stable offset (read_committed).
        uncommitted = consumer("read_uncommitted")
        try:
            _low, high = uncommitted.get_watermark_offsets(where, timeout=30, cached=False)
            if fence and end < high:
                _fence(kafka_conf, uncommitted, where, end, high, prefix)
        finally:
            uncommitted.close()
        if high <= max(low, start if start >= 0 else low):
            return {}
        committed.assign([TopicPartition(place.topic, place.partition, start)])
        found: dict[str, FoundMarker] = {}
        deadline = time.monotonic() + READ_WAIT_SECONDS
        position = start if start >= 0 else low
        while position < high:
            if time.monotonic() > deadline:
                raise SinkError(
                    f"the step markers of transactional ids {prefix}* on {place.topic}"
                    f" partition {place.partition} could not be read to offset {high} within"
                    f" {READ_WAIT_SECONDS:g} s (read up to {position}): a transaction of"
                    " another writer stays open there; check the brokers"
                    " (transaction.state.log.*) and other Tidemark runs"
                )
            message = committed.poll(1.0)
            if message is not None and message.error() is None:
                key = (message.key() or b"").decode(errors="replace")
                marker = _parse(message.value())
                if key.startswith(prefix) and marker is not None:
                    found[key] = marker
            now = committed.position([where])[0].offset
            position = now if now >= 0 else position
        return found
    except KafkaException as exc:
        raise SinkError(
            f"reading the step markers of transactional ids {prefix}* on {place.topic}"
            f" partition {place.partition} failed: {kafka_reason(exc)}: check that the"
            " brokers run and that Tidemark's user may read the topic"
        ) from exc
    finally:
        committed.close()


def _fence(
    kafka_conf: Mapping[str, str], reader: Any, where: Any, stable: int, high: int, prefix: str
) -> None:
    """Fence each id of ``prefix`` with a record between the last stable offset ``stable`` and
    the end ``high``: the ids whose transaction may be open there."""
    from confluent_kafka import Producer, TopicPartition

    reader.assign([TopicPartition(where.topic, where.partition, stable)])
    ids: set[str] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        message = reader.poll(1.0)
        if message is not None and message.error() is None:
            key = (message.key() or b"").decode(errors="replace")
            if key.startswith(prefix):
                ids.add(key)
        if reader.position([where])[0].offset >= high:
            break
    for tid in sorted(ids):
        producer = Producer({**kafka_conf, "transactional.id": tid, "log_level": 3})
        producer.init_transactions(60)  # aborts the id's open transaction
        producer.close()
        log.info("markers.fenced", transactional_id=tid, why="an earlier run's open transaction")


@dataclass(frozen=True)
class MarkerTopic:
    """The markers' topic of a run: its name and partition count (fixed, see
    :func:`marker_partition`)."""

    name: str
    partitions: int

    def place(self, sink_id: str) -> MarkerPlace:
        return MarkerPlace(self.name, marker_partition(sink_id, self.partitions))


def group_markers(
    kafka_conf: Mapping[str, str], prefix: str, topic: str
) -> dict[str, FoundMarker]:
    """Markers of the earlier store, where a sink's markers were the committed offsets
    (``batch + 1``, metadata) of consumer groups named by its transactional ids, on partition
    0 of its first table's dead-letter ``topic``: what a run's first step reads when the
    markers' topic has none of the sink, so that a checkpoint left by a crash of a version
    with that store replays its last step once."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**kafka_conf, "log_level": 3})
    try:
        listed = admin.list_consumer_groups(request_timeout=30).result()
        groups = sorted(g.group_id for g in listed.valid if g.group_id.startswith(prefix))
        found: dict[str, FoundMarker] = {}
        for group in groups:
            request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])]
            result = admin.list_consumer_group_offsets(request, request_timeout=30)[group]
            for part in result.result().topic_partitions:
                if part.offset is not None and part.offset > 0:
                    found[group] = FoundMarker(part.offset - 1, part.metadata or "")
        return found
    except Exception as exc:  # noqa: BLE001 - the client's errors, translated
        raise SinkError(
            f"reading the consumer groups {prefix}* (step markers of an earlier Tidemark"
            f" version) failed: {kafka_reason(exc)}: check that the brokers run and that"
            " Tidemark's user may describe groups tidemark-*"
        ) from exc
