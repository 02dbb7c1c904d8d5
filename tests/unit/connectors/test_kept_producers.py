"""The worker's kept transactional producers (kafka_sink._KEPT): a kept producer is
handed out only while its claim is the id's latest on this machine, and the worker keeps a
bounded number, closing the least recently used. The broker side (fencing, replays) is in
tests/e2e/test_kept_producer.py."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Iterator

import pytest

from app.connectors import kafka_sink


class _Producer:
    """Stands in for a confluent-kafka producer: only ``close`` is called on a kept one."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def _own_kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(kafka_sink, "_KEPT", OrderedDict())
    yield


def _tid() -> str:
    return f"tidemark-{uuid.uuid4().hex[:16]}-0"


def test_a_kept_producer_is_handed_out_once_while_its_claim_holds_s15() -> None:
    tid, producer = _tid(), _Producer()
    token = kafka_sink._claim(tid)
    kafka_sink._keep(tid, producer, token)
    assert kafka_sink._kept(tid) == (producer, token)
    assert tid not in kafka_sink._KEPT  # taken: a second task of the id gets none
    assert kafka_sink._kept(tid) is None
    assert not producer.closed


def test_a_producer_another_worker_initialised_since_is_closed_not_used_s15() -> None:
    tid, producer = _tid(), _Producer()
    kafka_sink._keep(tid, producer, kafka_sink._claim(tid))
    kafka_sink._claim(tid)  # another worker's new producer of the id (it fenced this one)
    assert kafka_sink._kept(tid) is None
    assert producer.closed


def test_the_least_recently_used_past_the_limit_are_closed() -> None:
    tids = [_tid() for _ in range(kafka_sink._KEPT_LIMIT + 2)]
    producers = [_Producer() for _ in tids]
    for tid, producer in zip(tids, producers, strict=True):
        kafka_sink._keep(tid, producer, kafka_sink._claim(tid))
    assert [p.closed for p in producers[:2]] == [True, True]
    assert not any(p.closed for p in producers[2:])
    assert list(kafka_sink._KEPT) == tids[2:]
