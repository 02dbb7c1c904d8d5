"""The process's producer pool (ProducerPool): a kept transactional producer is handed out
only while its claim is the id's latest on this machine, the pool keeps a bounded number,
closing the least recently used, and closing the pool closes every client it holds. The broker
side (fencing, replays) is in tests/e2e/test_kept_producer.py."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from app.connectors.sink import producers
from app.connectors.sink.producers import ProducerPool, producer_pool


class _Producer:
    """Stands in for a confluent-kafka producer: only ``close`` is called on a kept one."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def pool() -> Iterator[ProducerPool]:
    own = ProducerPool()
    yield own
    own.close()


def _tid() -> str:
    return f"tidemark-{uuid.uuid4().hex[:16]}-0"


def test_a_kept_producer_is_handed_out_once_while_its_claim_holds_s15(
    pool: ProducerPool,
) -> None:
    tid, producer = _tid(), _Producer()
    token = pool.claim(tid)
    pool.keep(tid, producer, token)
    assert pool.take(tid) == (producer, token)
    assert tid not in pool.kept_ids()  # taken: a second task of the id gets none
    assert pool.take(tid) is None
    assert not producer.closed


def test_a_producer_another_worker_initialised_since_is_closed_not_used_s15(
    pool: ProducerPool,
) -> None:
    tid, producer = _tid(), _Producer()
    pool.keep(tid, producer, pool.claim(tid))
    ProducerPool().claim(tid)  # another worker's new producer of the id (it fenced this one)
    assert pool.take(tid) is None
    assert producer.closed


def test_the_least_recently_used_past_the_limit_are_closed(pool: ProducerPool) -> None:
    tids = [_tid() for _ in range(ProducerPool.KEPT_LIMIT + 2)]
    kept = [_Producer() for _ in tids]
    for tid, producer in zip(tids, kept, strict=True):
        pool.keep(tid, producer, pool.claim(tid))
    assert [p.closed for p in kept[:2]] == [True, True]
    assert not any(p.closed for p in kept[2:])
    assert pool.kept_ids() == tids[2:]


def test_closing_the_pool_closes_what_it_kept_and_leaves_it_usable(pool: ProducerPool) -> None:
    tids = [_tid(), _tid()]
    kept = [_Producer(), _Producer()]
    for tid, producer in zip(tids, kept, strict=True):
        pool.keep(tid, producer, pool.claim(tid))
    pool.close()
    assert [p.closed for p in kept] == [True, True]
    assert pool.kept_ids() == []
    assert pool.opening_ids() == []
    # Used again after close: its claims file is opened anew.
    again, token = _Producer(), pool.claim(tids[0])
    pool.keep(tids[0], again, token)
    assert pool.take(tids[0]) == (again, token)


def test_one_pool_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    previous = producers.PRODUCERS.swap(None)
    first = producer_pool()
    assert producer_pool() is first
    first.close()
    # A forked child's pool is its own: the parent's clients do not survive the fork.
    monkeypatch.setattr(producers.PRODUCERS, "_pid", os.getpid() + 1)
    assert producer_pool() is not first
    producer_pool().close()
    producers.PRODUCERS.swap(previous)
