"""The source's Kafka consumers, kept per worker process (:class:`ConsumerPool`).

Creating a librdkafka consumer costs a metadata round trip and a connection per broker, so a
Python worker keeps one per Kafka settings across the tasks Spark runs in it, and the driver
keeps one for its offset queries. The reader Spark ships to the workers is pickled, so it
carries settings, never a consumer; :func:`consumer_pool` is the one way to a process's pool.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from app.connectors.per_process import PerProcess

__all__ = ["CONSUMERS", "SOURCE_CONSUMER", "ConsumerPool", "consumer_pool"]

#: What the source's consumers set over the user's Kafka settings.
SOURCE_CONSUMER: Mapping[str, Any] = {
    # librdkafka needs a group.id; offsets are never committed (Spark keeps them).
    "group.id": "tidemark-source",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "enable.partition.eof": False,
    "fetch.max.bytes": 52428800,
    "max.partition.fetch.bytes": 10485760,
    # A slice is only read when its offsets exist, so the broker never has to hold a fetch
    # for data; with the 500 ms default, the first fetch after the previous slice's unassign
    # waited ~0.45 s (measured).
    "fetch.wait.max.ms": 10,
    # Once its prefetch queue passes queued.min.messages (100,000: about a slice),
    # librdkafka postpones the partition's next fetch by this much, 1 s by default, and the
    # fetcher sat out that second while the reader waited: half the first-pass source tasks
    # of (a) took 1.2-1.5 s instead of 0.3-0.4 s (Spark event log).
    "fetch.queue.backoff.ms": 10,
    "log_level": 3,
}


class ConsumerPool:
    """One process's source consumers: at most one per distinct Kafka settings.

    Invariant: a pool belongs to the process that created it, and each of its consumers is
    used by one caller at a time, which leaves it unassigned when done (Spark runs one task
    at a time in a Python worker; the driver plans one step at a time per query). A consumer
    is never shared across a fork: librdkafka's threads do not survive one, so the pool of a
    forked child starts empty (:func:`consumer_pool`).

    Lifecycle: :meth:`get` creates a consumer on first use and keeps it; :meth:`forget`
    closes one that failed, so the next :meth:`get` connects afresh; :meth:`close` closes
    them all, at the process's exit.
    """

    def __init__(self) -> None:
        self._consumers: dict[str, Any] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(conf: Mapping[str, str]) -> str:
        return json.dumps(conf, sort_keys=True)

    def get(self, conf: Mapping[str, str]) -> Any:
        """This process's consumer of ``conf`` (Kafka settings), created on first use.
        Raises confluent-kafka's ``KafkaException`` when the settings are refused: the
        callers translate it with what they were reading."""
        from confluent_kafka import Consumer

        key = self._key(conf)
        with self._lock:
            consumer = self._consumers.get(key)
            if consumer is None:
                consumer = Consumer({**conf, **SOURCE_CONSUMER})
                self._consumers[key] = consumer
            return consumer

    def forget(self, conf: Mapping[str, str]) -> None:
        """Close the kept consumer of ``conf``, if any; the next :meth:`get` is new."""
        with self._lock:
            stale = self._consumers.pop(self._key(conf), None)
        if stale is not None:
            stale.close()

    def close(self) -> None:
        """Close every kept consumer; the pool stays usable and starts empty."""
        with self._lock:
            consumers, self._consumers = list(self._consumers.values()), {}
        for consumer in consumers:
            consumer.close()


#: The owner of each process's consumers.
CONSUMERS: PerProcess[ConsumerPool] = PerProcess(ConsumerPool, ConsumerPool.close)


def consumer_pool() -> ConsumerPool:
    """This process's :class:`ConsumerPool` (owned by :data:`CONSUMERS`)."""
    return CONSUMERS.get()
