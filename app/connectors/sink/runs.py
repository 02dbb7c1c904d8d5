"""Records handed to a producer in runs: a topic, the headers its records all share, their keys
and values, in the order of the sink rows they came from, and their Kafka timestamp.

Two records of one key (a changelog's retraction and insertion) land on one partition in the
order they are produced, so a run never reorders rows; a batch of one view's records is one
run sharing the view's S14 headers, with no Python object per row but its key and value.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.connectors.sink.record import REL, TOPIC

__all__ = ["STUCK_SECONDS", "Run", "flush", "output_runs", "produce_record", "produce_run"]

#: How long a flush waits before it asks why records are still waiting.
STUCK_SECONDS = 5.0

#: Records to produce in order: a topic, the headers they all carry, their keys and values,
#: and the Kafka timestamp they all carry in epoch ms (None: the time they are produced; a dead
#: letter's run is its one record, with its source record's timestamp, SPEC S6).
Run = tuple[str, list[tuple[str, bytes]], list[bytes | None], list[bytes | None], int | None]


def output_runs(
    batch: pa.RecordBatch,
    keys: list[bytes | None],
    values: list[bytes | None],
    view_headers: Mapping[str, list[tuple[str, bytes]]],
) -> list[Run]:
    """The runs of a batch of view records, in row order, each with its view's headers: one
    run when the batch is one view's (as the writers make them)."""
    rel_column, topic_column = batch.column(REL), batch.column(TOPIC)
    if len(pc.unique(rel_column)) == 1 and len(pc.unique(topic_column)) == 1:
        rel, topic = rel_column[0].as_py(), topic_column[0].as_py()
        return [(topic, list(view_headers.get(rel, ())), keys, values, None)]
    rels, topics = rel_column.to_pylist(), topic_column.to_pylist()
    runs: list[Run] = []
    start = 0
    for end in range(1, len(rels) + 1):
        if end == len(rels) or (rels[end], topics[end]) != (rels[start], topics[start]):
            headers = list(view_headers.get(rels[start], ()))
            runs.append((topics[start], headers, keys[start:end], values[start:end], None))
            start = end
    return runs


def produce_record(
    producer: Any,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]],
    on_delivery: Any = None,
    timestamp_ms: int | None = None,
) -> None:
    """One record, waiting while the producer's local queue is full; ``timestamp_ms`` None
    (or 0, as confluent-kafka reads it) stamps it with the time it is produced."""
    stamp = timestamp_ms or 0
    while True:
        try:
            if on_delivery is None:  # no callback argument at all: no per-record state
                producer.produce(topic, value=value, key=key, headers=headers, timestamp=stamp)
            else:
                producer.produce(
                    topic, value=value, key=key, headers=headers, on_delivery=on_delivery,
                    timestamp=stamp,
                )
            return
        except BufferError:
            producer.poll(0.1)  # the local queue is full: let deliveries drain


def produce_run(producer: Any, run: Run) -> None:
    """A run's records, without a delivery callback and without a Python call per record of
    our own: :func:`produce_record` only when the local queue is full."""
    topic, headers, keys, values, stamp = run
    produce = producer.produce
    if stamp is not None:
        for key, value in zip(keys, values, strict=True):
            produce_record(producer, topic, key, value, headers, timestamp_ms=stamp)
        return
    for key, value in zip(keys, values, strict=True):
        try:
            produce(topic, value, key, headers=headers)
        except BufferError:
            produce_record(producer, topic, key, value, headers)


def flush(producer: Any, stuck: Callable[[], None] | None = None) -> int:
    """``producer.flush``, raising a fatal error as the KafkaException it is: confluent-kafka
    raises one (a fenced producer) inside ``flush`` and then runs the delivery callback with it
    pending, which Python reports as a SystemError caused by it. A transaction's retry loop
    must see the KafkaException to judge it fatal. ``stuck`` is called every
    :data:`STUCK_SECONDS` while records wait (it may raise: a topic deleted meanwhile, whose
    records the client retries until they time out)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + 120
    try:
        while True:
            left = deadline - time.monotonic()
            wait = 120.0 if stuck is None else max(0.0, min(STUCK_SECONDS, left))
            remaining = int(producer.flush(wait))
            if not remaining or stuck is None or time.monotonic() >= deadline:
                return remaining
            stuck()
    except SystemError as exc:
        if isinstance(exc.__cause__, KafkaException):
            raise exc.__cause__ from None
        raise
