"""The sink's Kafka clients and their lifecycle: :class:`ProducerPool`, one per process.

Making a client is the slow part of a writing task (a transactional producer took 7.3 ms at
the median and up to 507 ms to create and initialise), so a process keeps them across tasks
and steps in its pool: idempotent producers per configuration, transactional producers per
transactional id between their tasks, and the transactions opened ahead of their records
(:func:`app.connectors.sink.transactions.open_early`). The pool says nothing of what a
transaction does; :mod:`app.connectors.sink.transactions` does that.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from app.connectors.per_process import PerProcess
from app.errors import SinkError, kafka_reason

__all__ = [
    "PRODUCERS",
    "PRODUCER_DEFAULTS",
    "PRODUCER_SETTINGS",
    "Opened",
    "ProducerPool",
    "producer_pool",
]

#: Producer settings the client configuration given to the pool may override.
PRODUCER_DEFAULTS: dict[str, Any] = {
    # A keyed record goes to partition toPositive(murmur2(key)) % partitions, as the Java
    # client, Kafka Streams and ksqlDB place it (librdkafka's default hashes with CRC32), so a
    # key of an upsert view's topic is on the partition of the same key in topics they write
    # (co-partitioning). Records without a key are spread at random, as by the default.
    "partitioner": "murmur2_random",
}

PRODUCER_SETTINGS: dict[str, Any] = {
    # Connect to the brokers as soon as their addresses are known. With librdkafka's default
    # (sparse connections), init_transactions often found no connection to the coordinator
    # yet and waited for its 500 ms coordinator query timer: 22 of 48 fresh transactional
    # producers took ~0.51 s to init against a local broker, none with this off (median
    # 8 ms); every writing task of every step starts one.
    "enable.sparse.connections": False,
    "acks": "all",
    # Delivery reports of failed records only: a step produces every output record through
    # here, and a Python callback per delivered record was a fifth of the producer's CPU
    # (50,000 transactional records: 0.19 s -> 0.15 s). A transaction with a failed
    # record cannot commit either way.
    "delivery.report.only.error": True,
    "linger.ms": 5,
    "batch.num.messages": 10000,
    "message.max.bytes": 10485760,
    "log_level": 3,
}

#: How long a transaction may stay open before the broker aborts it.
_TRANSACTION_TIMEOUT_MS = 120000


@dataclass
class Opened:
    """A task's transaction made ready to begin: its producer, fenced and initialised (or kept
    from an earlier task of this process, ``kept``), the token of its claim, and the marker
    of its id found committed, if any (a
    :class:`~app.connectors.sink.markers.FoundMarker`)."""

    producer: Any
    token: bytes
    done: Any
    kept: bool = False


class ProducerPool:
    """The Kafka clients of one process's sink, and their lifecycle.

    One pool per process (:func:`producer_pool`): Spark runs the tasks of a step in Python
    worker processes it reuses across tasks and steps, so the tasks of one worker share its
    producers, and the pool lives as long as the worker process. Its clients are never shared
    with another process: librdkafka's threads do not survive a fork, so a forked child makes
    a pool of its own. :meth:`close` flushes and closes every client it holds and leaves the
    pool empty and usable; the process's pool is closed at the interpreter's exit (Spark's
    workers end with ``os._exit``, which closes nothing: their clients end with them).

    What it holds:

    * an idempotent producer per client configuration (writes without transactions);
    * kept transactional producers, at most :attr:`KEPT_LIMIT`, least recently used first:
      each kept after its task's transaction ended cleanly, with no transaction open, so the
      id's next task here skips creating and initialising one (:meth:`keep`, :meth:`take`);
    * the machine's claims (:meth:`claim`): a slot per transactional id (by hash) in a file
      every worker of the machine shares, holding the token of the producer last initialised
      for the id. Spark hands a task number to whichever worker is idle, so an id moves
      between workers; a worker whose kept producer's token is no longer in the slot knows
      another has fenced it and opens anew without asking the broker (who would answer with
      a fatal "fenced" error, logged). A hint only: a slot two ids share, or a writer on
      another machine, shows as a moved id or is caught by the broker, never as a producer
      wrongly trusted;
    * transactions being opened ahead of their records, by transactional id, each with the
      batch it was opened for (:meth:`start_opening`).
    """

    #: Enough for every writing task of a few table queries; older producers are closed.
    KEPT_LIMIT = 16
    CLAIM_SLOTS = 4096
    CLAIM_BYTES = 16

    def __init__(self, claims_path: str | None = None) -> None:
        self._claims_path = claims_path or os.path.join(
            tempfile.gettempdir(), f"tidemark-writers-{os.getuid()}"
        )
        self._claims_fd: int | None = None
        self._idempotent: dict[str, Any] = {}
        self._kept: OrderedDict[str, tuple[Any, bytes]] = OrderedDict()
        self._opening: dict[str, tuple[int, Future[Opened]]] = {}
        self._opener: ThreadPoolExecutor | None = None

    # --- producers -------------------------------------------------------------------------

    def idempotent(self, conf: Mapping[str, str]) -> Any:
        """The process's idempotent producer of ``conf`` (``acks=all``): made once per
        configuration, kept for the pool's life."""
        from confluent_kafka import KafkaException, Producer

        key = json.dumps(conf, sort_keys=True)
        producer = self._idempotent.get(key)
        if producer is None:
            try:
                producer = Producer(
                    {**PRODUCER_DEFAULTS, **conf, **PRODUCER_SETTINGS, "enable.idempotence": True}
                )
            except KafkaException as exc:
                raise SinkError(
                    f"cannot create the sink's producer for {conf.get('bootstrap.servers')}:"
                    f" {kafka_reason(exc)}: check TIDEMARK_KAFKA_* (security protocol, SASL and"
                    " TLS files)"
                ) from exc
            self._idempotent[key] = producer
        return producer

    def transactional(self, conf: Mapping[str, str], tid: str) -> tuple[Any, bytes]:
        """A new producer of ``tid``, initialised and claimed, with its claim's token:
        ``init_transactions`` fences any earlier writer of the id and aborts its open
        transaction. The client's own errors are raised as they are: the transaction's retry
        loop judges them."""
        from confluent_kafka import Producer

        producer = Producer(
            {
                **PRODUCER_DEFAULTS,
                **conf,
                **PRODUCER_SETTINGS,
                "transactional.id": tid,
                "transaction.timeout.ms": _TRANSACTION_TIMEOUT_MS,
            }
        )
        producer.init_transactions(60)
        return producer, self.claim(tid)

    def claim(self, tid: str) -> bytes:
        """Mark a producer just initialised for ``tid`` as the id's writer on this machine."""
        token = os.urandom(self.CLAIM_BYTES)
        os.pwrite(self._claims(), token, self._claim_slot(tid))
        return token

    def keep(self, tid: str, producer: Any, token: bytes) -> None:
        """Keep ``producer`` (no transaction open) for the next task of ``tid`` here."""
        self._kept[tid] = (producer, token)
        self._kept.move_to_end(tid)
        while len(self._kept) > self.KEPT_LIMIT:
            self._kept.popitem(last=False)[1][0].close()

    def take(self, tid: str) -> tuple[Any, bytes] | None:
        """The producer kept for ``tid`` and its token, handed out once, if no producer was
        initialised for the id on this machine since (a stale one is closed)."""
        found = self._kept.pop(tid, None)
        if (
            found is not None
            and os.pread(self._claims(), self.CLAIM_BYTES, self._claim_slot(tid)) != found[1]
        ):
            found[0].close()
            return None
        return found

    def kept_ids(self) -> list[str]:
        """The transactional ids with a kept producer, least recently used first."""
        return list(self._kept)

    def peek(self, tid: str) -> Any:
        """The producer kept for ``tid`` (KeyError if none), left kept."""
        return self._kept[tid][0]

    # --- transactions opened ahead of their records ----------------------------------------

    def start_opening(self, tid: str, batch_id: int, open_: Callable[[], Opened]) -> None:
        """Run ``open_`` in the pool's opener thread as ``tid``'s opening for ``batch_id``."""
        if self._opener is None:
            self._opener = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tidemark-open")
        self._opening[tid] = (batch_id, self._opener.submit(open_))

    def opening_for(self, tid: str, batch_id: int) -> Future[Opened] | None:
        """The opening of ``tid`` started for this batch, if any (left in the pool)."""
        found = self._opening.get(tid)
        return found[1] if found is not None and found[0] == batch_id else None

    def take_opening(self, tid: str) -> Future[Opened] | None:
        """The opening of ``tid``, whichever batch it was for, taken out of the pool."""
        found = self._opening.pop(tid, None)
        return found[1] if found is not None else None

    def opening_ids(self) -> list[str]:
        """The transactional ids with an opening in the pool."""
        return list(self._opening)

    def forget_opening(self, tid: str) -> None:
        """Wait out an opening of ``tid`` that will not be used: it must end before any other
        producer of the id is initialised (so not outlive its task), or its late
        ``init_transactions`` would fence that producer. Its producer, with no transaction
        begun, is kept for the id's next task; only its marker belonged to its
        batch."""
        opening = self.take_opening(tid)
        if opening is not None:
            with contextlib.suppress(Exception):
                opened = opening.result()
                self.keep(tid, opened.producer, opened.token)

    # --- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Wait out the openings, then flush and close every client the pool holds, and the
        claims file; the pool is left empty and may be used again."""
        for tid in list(self._opening):
            self.forget_opening(tid)
        if self._opener is not None:
            self._opener.shutdown(wait=True)
            self._opener = None
        from confluent_kafka import KafkaException

        unsent = list(self._idempotent.values())
        clients = [*(p for p, _token in self._kept.values()), *unsent]
        self._kept.clear()
        self._idempotent.clear()
        if self._claims_fd is not None:
            os.close(self._claims_fd)
            self._claims_fd = None
        failed: KafkaException | None = None
        left = 0
        for client in clients:
            try:
                if client in unsent:
                    # Kept producers have no transaction open and so nothing to send.
                    left += int(client.flush(30))
                client.close()
            except KafkaException as exc:
                failed = failed or exc
        if failed is not None or left:
            reason = kafka_reason(failed) if failed is not None else f"{left} records unsent"
            raise SinkError(
                f"closing the sink's Kafka clients failed: {reason}: check that the brokers"
                " run and answer"
            ) from failed

    def _claims(self) -> int:
        if self._claims_fd is None:
            self._claims_fd = os.open(self._claims_path, os.O_RDWR | os.O_CREAT, 0o600)
        return self._claims_fd

    def _claim_slot(self, tid: str) -> int:
        return (zlib.crc32(tid.encode()) % self.CLAIM_SLOTS) * self.CLAIM_BYTES


#: The owner of each process's sink clients.
PRODUCERS: PerProcess[ProducerPool] = PerProcess(ProducerPool, ProducerPool.close)


def producer_pool() -> ProducerPool:
    """This process's pool (owned by :data:`PRODUCERS`)."""
    return PRODUCERS.get()
