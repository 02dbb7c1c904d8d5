"""The source's offsets: where a table's topic ends, and which offsets each step reads.

A step's offsets live in Spark's checkpoint (the offset log), so a restart continues where the
last committed step ended (S1, S15). The offset dict is ``{"partitions": {"<p>": next_offset},
"step": n, "wall_clock_ms": t}``: ``step`` counts the steps that read data, and
``wall_clock_ms`` fixes the clock the ``max_future`` guard uses, so a replayed step classifies
every record exactly as the first run did. Its shape is what checkpoints hold: it never
changes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from app.connectors.kafka_consumers import consumer_pool
from app.connectors.kafka_source import KafkaPartitionSlice
from app.errors import KafkaError, kafka_reason

__all__ = [
    "initial_offset",
    "latest_offset",
    "lost_offsets",
    "partition_ends",
    "past_log_start",
    "startup_offsets",
    "step_slices",
    "topic_end_offsets",
]

#: How long the offset queries ride out a broker restart or a leader change.
RETRY_SECONDS = 240.0


def topic_end_offsets(conf: Mapping[str, str], topic: str) -> dict[int, int]:
    """The current end (high watermark) of every partition of ``topic``."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    try:
        consumer = Consumer({**conf, "group.id": "tidemark-end-offsets", "log_level": 3})
        try:
            metadata = consumer.list_topics(topic, timeout=30)
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in sorted(metadata.topics[topic].partitions)
            }
        finally:
            consumer.close()
    except KafkaException as exc:
        raise KafkaError(
            f"cannot read the end offsets of topic {topic} from"
            f" {conf.get('bootstrap.servers')}: {kafka_reason(exc)}: check that the broker"
            " runs and answers, the topic exists and the Kafka settings are right"
        ) from exc


def partition_ends(
    conf: Mapping[str, str],
    topic: str,
    table: str,
    stop_at: Mapping[int, int] | None = None,
    retry_seconds: float = RETRY_SECONDS,
) -> dict[int, tuple[int, int]]:
    """Low and high offsets per partition of ``topic`` (the input of ``table``), each high
    one at most ``stop_at``'s when given; rides out a broker restart or a leader change
    (NOT_LEADER_FOR_PARTITION, transport errors) for up to ``retry_seconds``."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + retry_seconds
    while True:
        try:
            return _partition_ends_once(conf, topic, table, stop_at)
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise KafkaError(
                    f"cannot read the offsets of topic {topic} (table {table}) from"
                    f" {conf.get('bootstrap.servers')} for {retry_seconds:g} s:"
                    f" {kafka_reason(exc)}: check that the broker runs and answers"
                    " and the Kafka settings are right"
                ) from exc
            # A fresh client next time: a CI run saw the kept one fail every metadata
            # request for 240 s after a broker restart the broker itself recovered from in
            # 4.5 s ("Broker transport failure").
            consumer_pool().forget(conf)
            time.sleep(1.0)


def _partition_ends_once(
    conf: Mapping[str, str], topic: str, table: str, stop_at: Mapping[int, int] | None
) -> dict[int, tuple[int, int]]:
    from confluent_kafka import TopicPartition

    consumer = consumer_pool().get(conf)
    metadata = consumer.list_topics(topic, timeout=30)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise KafkaError(
            f"input topic {topic} of table {table} "
            f"does not exist: {found.error if found else 'unknown topic'}"
        )
    ends = {}
    for p in sorted(found.partitions):
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, p), timeout=30, cached=False
        )
        if stop_at is not None:
            high = min(high, stop_at.get(p, 0))
        ends[p] = (low, high)
    return ends


def startup_offsets(
    conf: Mapping[str, str],
    topic: str,
    table: str,
    ends: Mapping[int, tuple[int, int]],
    mode: str = "earliest-offset",
    timestamp_ms: int | None = None,
) -> dict[int, int]:
    """Where a new checkpoint starts reading each partition of ``topic`` (``ends``: its low
    and high offsets): the low offset (``earliest-offset``), the high one (``latest-offset``:
    only records produced later are read), or the first record whose Kafka timestamp is at
    least ``timestamp_ms`` (``timestamp``; the high offset where there is none), as the
    broker's ListOffsets answers (``offsets_for_times``)."""
    if mode == "earliest-offset":
        return {p: low for p, (low, _) in ends.items()}
    if mode == "latest-offset":
        return {p: high for p, (_, high) in ends.items()}
    if mode != "timestamp" or timestamp_ms is None:
        raise ValueError(f"table {table}: bad start position {mode} {timestamp_ms}")
    from confluent_kafka import KafkaException, TopicPartition

    try:
        found = consumer_pool().get(conf).offsets_for_times(
            [TopicPartition(topic, p, timestamp_ms) for p in sorted(ends)], timeout=30
        )
    except KafkaException as exc:
        raise KafkaError(
            f"cannot find the offsets of time {timestamp_ms} in topic {topic} (table {table}):"
            f" {kafka_reason(exc)}: check that the broker runs and answers"
        ) from exc
    starts = {}
    for tp in found:
        if tp.error is not None:
            raise KafkaError(
                f"cannot find the offset of time {timestamp_ms} in partition {tp.partition} of"
                f" topic {topic} (table {table}): {tp.error}"
            )
        low, high = ends[tp.partition]
        # -1: no record at or after the time (yet): start at the end.
        starts[tp.partition] = high if tp.offset < 0 else min(max(tp.offset, low), high)
    return starts


def initial_offset(
    ends: Mapping[int, tuple[int, int]], topic: str, starts: Mapping[int, int] | None = None
) -> dict[str, Any]:
    """The offset dict before the first step: every partition of ``topic`` at its
    ``starts`` offset (:func:`startup_offsets`), else at its low offset.

    The topic rides in every offset dict so that a query of several tables (a UNION ALL's)
    tells its sources' progress apart (``--once``, the input-lag probe)."""
    return {
        "topic": topic,
        "partitions": {
            str(p): starts.get(p, low) if starts is not None else low
            for p, (low, _) in ends.items()
        },
        "step": 0,
        "wall_clock_ms": 0,
    }


def lost_offsets(
    start: Mapping[str, Any], ends: Mapping[int, tuple[int, int]]
) -> dict[int, tuple[int, int]]:
    """The partitions whose next offset in ``start`` (an offset dict) is below the partition's
    low offset in ``ends``: partition -> (next offset, low offset). Those offsets were deleted
    (retention, deleteRecords) before a step read them. A partition ``start`` does not name
    (added to the topic since) has lost nothing: it is read from its low offset."""
    current = {int(p): int(o) for p, o in start["partitions"].items()}
    return {p: (current[p], low) for p, (low, _) in ends.items() if current.get(p, low) < low}


def data_loss_error(
    topic: str, table: str, lost: Mapping[int, tuple[int, int]], when: str
) -> KafkaError:
    """The error of offsets deleted before they were read (``fail_on_data_loss``)."""
    where = ", ".join(
        f"partition {p}: offsets {first} to {low - 1} ({low - first})"
        for p, (first, low) in sorted(lost.items())
    )
    return KafkaError(
        f"records of topic {topic}{f' (table {table})' if table else ''} were deleted {when}:"
        f" {where}; the topic's"
        " retention (or a deleteRecords) removed them. Raise the topic's retention.ms, or set"
        " TIDEMARK_FAIL_ON_DATA_LOSS=false to skip deleted offsets (logged and counted in"
        " tidemark_input_skipped_offsets_total), or start over with a new checkpoint"
    )


def latest_offset(
    start: dict[str, Any],
    ends: Mapping[int, tuple[int, int]],
    max_rows: int | None,
    topic: str,
    fail_on_data_loss: bool = True,
    table: str = "",
) -> dict[str, Any]:
    """The end of the step after ``start``: up to ``max_rows`` (None: every) available
    records, shared across partitions in proportion to what each has waiting; ``start``
    itself when none are. ``ends`` lists every partition of the topic as it is now, so
    partitions added to the topic are read from their low offset.

    Offsets of ``start`` below their partition's low offset (deleted before they were read)
    raise :func:`data_loss_error`, or with ``fail_on_data_loss`` off are skipped: the step
    then reads from the low offset. The offset dict names the offset a step reads a
    partition from (``"from"``, used by :func:`step_slices`) wherever that is not the
    partition's offset in ``start``: a skip, or a new partition whose first offsets are
    gone. Skipped offsets are then ``from`` minus the step's start offset."""
    current = {int(p): int(o) for p, o in start["partitions"].items()}
    lost = lost_offsets(start, ends)
    if lost and fail_on_data_loss:
        raise data_loss_error(topic, table, lost, "before this run read them")
    available = {p: max(0, high - max(current.get(p, low), low)) for p, (low, high) in ends.items()}
    total = sum(available.values())
    if total == 0:
        return start
    budget = min(total, max_rows) if max_rows is not None else total
    end: dict[str, int] = {}
    remaining = budget
    for p, (low, _) in sorted(ends.items()):
        begin = max(current.get(p, low), low)
        share = available[p] if budget == total else (available[p] * budget) // total
        share = min(share, remaining)
        end[str(p)] = begin + share
        remaining -= share
    if remaining > 0:
        for p in sorted(ends):
            begin_end = end[str(p)]
            extra = min(remaining, ends[p][1] - begin_end)
            end[str(p)] = begin_end + extra
            remaining -= extra
    offset: dict[str, Any] = {
        "topic": topic,
        "partitions": end,
        "step": int(start["step"]) + 1,
        "wall_clock_ms": int(time.time() * 1000),
    }
    moved = {
        str(p): low for p, (low, _) in ends.items() if p in lost or (p not in current and low > 0)
    }
    if moved:
        offset["from"] = moved
    return offset


def step_slices(
    start: Mapping[str, Any], end: Mapping[str, Any], waterlines: dict[str, int | None]
) -> list[KafkaPartitionSlice]:
    """The slices of the step from ``start`` to ``end`` (offset dicts), one per partition
    with records, each carrying the step's ``waterlines`` (w(t-1)); none when the step reads
    no data (``end`` is ``start``)."""
    step = int(end["step"])
    if step == int(start["step"]):
        return []
    begin = {int(p): int(o) for p, o in start["partitions"].items()}
    # Where a step reads a partition from when that is not ``start``'s offset: skipped
    # offsets, or a partition added to the topic since whose first offsets are gone.
    begin.update({int(p): int(o) for p, o in end.get("from", {}).items()})
    out = []
    for p_text, stop in end["partitions"].items():
        p = int(p_text)
        first = begin.get(p, 0)
        if int(stop) > first:
            wall_clock_ms = int(end["wall_clock_ms"])
            out.append(KafkaPartitionSlice(p, first, int(stop), step, wall_clock_ms, waterlines))
    return out


def past_log_start(
    slices: list[KafkaPartitionSlice], ends: Mapping[int, tuple[int, int]]
) -> list[KafkaPartitionSlice]:
    """``slices`` with each start moved up to its partition's low offset in ``ends`` (offsets
    deleted since the step was planned, skipped with ``fail_on_data_loss`` off when a step is
    replayed); a slice left empty is dropped."""
    out = []
    for part in slices:
        low = ends.get(part.partition, (0, 0))[0]
        if low <= part.start:
            out.append(part)
        elif low < part.end:
            out.append(
                KafkaPartitionSlice(
                    part.partition, low, part.end, part.step, part.wall_clock_ms, part.waterlines
                )
            )
    return out
