"""An upsert view's output topic that Tidemark creates is compacted, on the real broker; other
topics it creates keep the broker's default policy; an existing upsert view's topic is left as
it is, with one warning naming it and the command that compacts it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from app.connectors import topics
from app.connectors.topics import ensure_topics
from app.program.compile import compile_text

pytestmark = pytest.mark.e2e


def _program(source: str, totals: str, large: str) -> Any:
    text = (
        "CREATE TABLE t (\n  ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,\n"
        f"  k BIGINT,\n  n BIGINT\n) WITH ('topic' = '{source}');\n"
        f"CREATE VIEW totals WITH ('topic' = '{totals}', 'format' = 'upsert') AS\n"
        "SELECT k, SUM(n) AS total FROM t GROUP BY k;\n"
        f"CREATE VIEW large WITH ('topic' = '{large}', 'format' = 'append') AS\n"
        "SELECT ts, k, n FROM t WHERE n > 1;\n"
    )
    return compile_text("p.sql", text)


def _cleanup_policy(kafka: Any, topic: str) -> str:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({**kafka.conf(), "log_level": 3})
    described = admin.describe_configs([ConfigResource("topic", topic)])
    return str(next(iter(described.values())).result(30)["cleanup.policy"].value)


def _listed(kafka: Any, *topics: str, timeout_seconds: float = 30) -> None:
    """Wait until the broker's metadata lists ``topics`` (just created: not at once)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**kafka.conf(), "log_level": 3})
    deadline = time.monotonic() + timeout_seconds
    while not set(topics) <= set(admin.list_topics(timeout=10).topics):
        assert time.monotonic() < deadline, f"{topics} not listed"
        time.sleep(0.2)


class _Log:
    def __init__(self) -> None:
        self.warnings: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.warnings.append((event, fields))

    def info(self, event: str, **fields: Any) -> None:
        pass


def test_a_created_upsert_topic_is_compacted(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    source = kafka.create_topic(unique_topic("in"), 2)
    totals, large = unique_topic("totals"), unique_topic("large")
    circuit = _program(source, totals, large)
    _listed(kafka, source)
    ensure_topics(circuit, kafka.conf())
    assert _cleanup_policy(kafka, totals) == "compact"
    assert _cleanup_policy(kafka, large) == "delete"
    assert _cleanup_policy(kafka, f"{source}.dlq") == "delete"


def test_an_existing_upsert_topic_is_left_alone_with_one_warning(
    kafka: Any,
    unique_topic: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = kafka.create_topic(unique_topic("in"), 2)
    totals = kafka.create_topic(unique_topic("totals"), 2)
    circuit = _program(source, totals, unique_topic("large"))
    _listed(kafka, source, totals)
    log = _Log()
    monkeypatch.setattr(topics, "log", log)
    ensure_topics(circuit, kafka.conf())
    ensure_topics(circuit, kafka.conf())  # a second start in the process warns no more
    assert _cleanup_policy(kafka, totals) == "delete"
    assert [event for event, _ in log.warnings] == ["topic.not_compacted"]
    fields = log.warnings[0][1]
    assert fields["topic"] == totals and fields["view"] == "totals"
    assert fields["fix"] == (
        f"kafka-configs.sh --bootstrap-server {kafka.bootstrap_servers} --alter"
        f" --entity-type topics --entity-name {totals} --add-config cleanup.policy=compact"
    )


def test_an_existing_compacted_upsert_topic_gets_no_warning(
    kafka: Any,
    unique_topic: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    source = kafka.create_topic(unique_topic("in"), 2)
    totals = unique_topic("totals")
    admin = AdminClient({**kafka.conf(), "log_level": 3})
    topic = NewTopic(totals, 2, 1, config={"cleanup.policy": "compact,delete"})
    admin.create_topics([topic])[totals].result(30)
    _listed(kafka, source, totals)
    log = _Log()
    monkeypatch.setattr(topics, "log", log)
    ensure_topics(_program(source, totals, unique_topic("large")), kafka.conf())
    assert log.warnings == []
