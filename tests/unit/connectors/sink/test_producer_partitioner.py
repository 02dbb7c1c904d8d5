"""Every producer of the sink places keyed records as the Java client does (librdkafka's
``murmur2_random``), unless the client configuration given to the pool names a partitioner.
Where records land on a real broker: tests/e2e/test_java_partitioning.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

from app.connectors.sink.producers import ProducerPool

CONF = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "PLAINTEXT"}


class _Producer:
    """Records the configuration a producer was made with."""

    made: list[dict[str, Any]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        self.made.append(dict(conf))

    def init_transactions(self, _timeout: float) -> None:
        pass

    def flush(self, _timeout: float) -> int:
        return 0

    def close(self) -> None:
        pass


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    _Producer.made = []
    monkeypatch.setattr(confluent_kafka, "Producer", _Producer)
    yield _Producer.made


def test_idempotent_and_transactional_producers_hash_keys_with_murmur2(
    made: list[dict[str, Any]], tmp_path: Any
) -> None:
    pool = ProducerPool(str(tmp_path / "claims"))
    pool.idempotent(CONF)
    pool.transactional(CONF, "tidemark-test-0")
    pool.close()
    assert [conf["partitioner"] for conf in made] == ["murmur2_random", "murmur2_random"]
    assert all(conf["bootstrap.servers"] == CONF["bootstrap.servers"] for conf in made)


def test_a_partitioner_in_the_client_configuration_wins(
    made: list[dict[str, Any]], tmp_path: Any
) -> None:
    pool = ProducerPool(str(tmp_path / "claims"))
    pool.idempotent({**CONF, "partitioner": "consistent_random"})
    pool.transactional({**CONF, "partitioner": "consistent_random"}, "tidemark-test-0")
    pool.close()
    assert [conf["partitioner"] for conf in made] == ["consistent_random"] * 2
