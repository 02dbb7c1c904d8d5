"""What escapes the sink is the project's SinkError, never the Kafka client's exception: it
names what failed (the topic, the transactional id) and the client's reason, and keeps the
client's exception as its cause.

These need no broker: an invalid client setting fails when the client is made, with the real
confluent-kafka library.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException

from app.connectors.sink import StepMarker, produce_partition, producers, transactions
from app.connectors.sink.markers import MarkerPlace
from app.connectors.sink.producers import ProducerPool
from app.connectors.sink.record import sink_batch
from app.errors import KafkaError, SinkError, TidemarkError

#: A client configuration librdkafka refuses: the setting's value is not a number.
BAD_CONF = {"bootstrap.servers": "localhost:1", "socket.timeout.ms": "soon"}


@pytest.fixture(autouse=True)
def _own_pool() -> Iterator[ProducerPool]:
    pool = ProducerPool()
    previous = producers.PRODUCERS.swap(pool)
    yield pool
    producers.PRODUCERS.swap(previous)
    pool.close()


def _records() -> pa.RecordBatch:
    return sink_batch(2, {"kind": ["output"] * 2, "rel": ["v"] * 2, "topic": ["out"] * 2})


def _write(marker: StepMarker | None) -> None:
    list(produce_partition(iter([_records()]), BAD_CONF, {}, {}, marker))


def test_an_invalid_setting_of_the_idempotent_producer_is_a_sink_error_naming_it() -> None:
    with pytest.raises(SinkError, match=r"socket\.timeout\.ms") as caught:
        _write(None)
    assert "check TIDEMARK_KAFKA_*" in str(caught.value)
    assert "localhost:1" in str(caught.value)
    assert isinstance(caught.value.__cause__, KafkaException)
    assert isinstance(caught.value, KafkaError)
    assert isinstance(caught.value, TidemarkError)


def test_the_pool_translates_an_invalid_setting_when_it_makes_the_producer(
    _own_pool: ProducerPool,
) -> None:
    with pytest.raises(SinkError, match=r"Invalid value .*socket\.timeout\.ms"):
        _own_pool.idempotent(BAD_CONF)


def test_a_transaction_that_gives_up_is_a_sink_error_naming_its_id_s15(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No time to retry: the first failure gives up (retrying is the broker tests' business).
    monkeypatch.setattr(transactions, "TRANSACTION_RETRY_SECONDS", 0.0)
    marker = StepMarker("s1", 7, MarkerPlace("t.markers", 0))
    with pytest.raises(SinkError) as caught:
        _write(marker)
    text = str(caught.value)
    assert "transaction tidemark-s1-0 of step batch 7" in text
    assert "t.markers partition 0" in text
    assert "socket.timeout.ms" in text
    assert "localhost:1" in text
    assert isinstance(caught.value.__cause__, KafkaException)


def test_an_early_opening_that_failed_is_waited_out_and_the_error_translated_s15(
    monkeypatch: pytest.MonkeyPatch, _own_pool: ProducerPool
) -> None:
    monkeypatch.setattr(transactions, "TRANSACTION_RETRY_SECONDS", 0.0)
    marker = StepMarker("s2", 3, MarkerPlace("t.markers", 0))
    transactions.open_early(BAD_CONF, marker)
    with pytest.raises(SinkError, match="transaction tidemark-s2-0 of step batch 3"):
        _write(marker)
    assert _own_pool.opening_ids() == []
