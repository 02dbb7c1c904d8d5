"""The source's Kafka client errors reach the user as :class:`KafkaError`, with the client's
own error as the cause, naming what was being read and what to check; and the consumer pool
keeps one consumer per settings per process until it is told to forget or close them.

No broker is needed: librdkafka refuses an unknown setting when the consumer is created, with
the same ``KafkaException`` any client error raises. Real confluent-kafka throughout.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException

from app.connectors.kafka_consumers import ConsumerPool, consumer_pool
from app.connectors.kafka_fetch import fetch
from app.connectors.kafka_offsets import partition_ends, topic_end_offsets
from app.connectors.kafka_source import KafkaPartitionSlice
from app.errors import KafkaError, TidemarkError

#: Settings librdkafka refuses when a consumer is created.
REFUSED = {"bootstrap.servers": "127.0.0.1:1", "no.such.setting": "x"}
#: Settings a consumer is created with; nothing listens there, and nothing is asked of it.
UNREACHED = {"bootstrap.servers": "127.0.0.1:1"}


def test_a_fetch_with_refused_settings_names_the_slice_and_what_to_check() -> None:
    part = KafkaPartitionSlice(2, 10, 20, 1, 0, {})
    with pytest.raises(KafkaError) as raised:
        list(fetch(REFUSED, "clicks", part))
    text = str(raised.value)
    assert "clicks[2]" in text and "10" in text and "20" in text
    assert "no.such.setting" in text, "the client's own reason"
    assert "check" in text
    assert isinstance(raised.value.__cause__, KafkaException)
    assert isinstance(raised.value, TidemarkError)


def test_an_empty_slice_is_never_fetched() -> None:
    assert list(fetch(REFUSED, "clicks", KafkaPartitionSlice(0, 5, 5, 1, 0, {}))) == []


def test_offsets_past_their_retries_name_the_topic_and_the_table() -> None:
    with pytest.raises(KafkaError) as raised:
        partition_ends(REFUSED, "clicks-in", "clicks", retry_seconds=0)
    text = str(raised.value)
    assert "clicks-in" in text and "table clicks" in text
    assert "no.such.setting" in text and "check" in text
    assert isinstance(raised.value.__cause__, KafkaException)


def test_end_offsets_with_refused_settings_name_the_topic() -> None:
    with pytest.raises(KafkaError) as raised:
        topic_end_offsets(REFUSED, "clicks-in")
    assert "clicks-in" in str(raised.value) and "check" in str(raised.value)
    assert isinstance(raised.value.__cause__, KafkaException)


def test_the_pool_keeps_one_consumer_per_settings_until_forgotten_or_closed() -> None:
    pool = ConsumerPool()
    try:
        first = pool.get(UNREACHED)
        assert pool.get(dict(UNREACHED)) is first, "equal settings share the consumer"
        other = pool.get({**UNREACHED, "client.id": "other"})
        assert other is not first
        pool.forget(UNREACHED)
        again = pool.get(UNREACHED)
        assert again is not first
        with pytest.raises(RuntimeError):
            first.assignment()  # closed by forget
        pool.close()
        for closed in (again, other):
            with pytest.raises(RuntimeError):
                closed.assignment()
        assert pool.get(UNREACHED) is not again, "a closed pool starts empty"
    finally:
        pool.close()


def test_the_pool_refuses_settings_with_the_clients_own_error() -> None:
    pool = ConsumerPool()
    with pytest.raises(KafkaException):
        pool.get(REFUSED)
    pool.close()


def test_one_pool_per_process() -> None:
    pool = consumer_pool()
    assert consumer_pool() is pool
