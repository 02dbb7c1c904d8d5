"""An existing upsert view's topic without ``compact`` in its cleanup policy gets one warning per
process naming it and the command that compacts it; a compacted one, or one whose
configuration cannot be read, gets none and does not stop the start. On the real broker:
tests/e2e/test_upsert_topic_compacted.py."""

from __future__ import annotations

import uuid
from concurrent.futures import Future
from typing import Any

import pytest

from app.connectors import topics
from app.connectors.topics import TopicSpec

CONF = {"bootstrap.servers": "broker:9092"}


class _Entry:
    def __init__(self, value: str) -> None:
        self.value = value


class _Admin:
    """Answers describe_configs with each topic's cleanup policy (None: the request fails)."""

    def __init__(self, policies: dict[str, str | None]) -> None:
        self.policies = policies
        self.asked: list[str] = []

    def describe_configs(self, resources: list[Any], request_timeout: float) -> dict[Any, Any]:
        answers: dict[Any, Any] = {}
        for resource in resources:
            self.asked.append(resource.name)
            future: Future[dict[str, _Entry]] = Future()
            policy = self.policies[resource.name]
            if policy is None:
                future.set_exception(RuntimeError("TOPIC_AUTHORIZATION_FAILED"))
            else:
                future.set_result({"cleanup.policy": _Entry(policy)})
            answers[resource] = future
        return answers


class _Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.events.append(("warning", event, fields))

    def info(self, event: str, **fields: Any) -> None:
        self.events.append(("info", event, fields))


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> _Log:
    recorded = _Log()
    monkeypatch.setattr(topics, "log", recorded)
    return recorded


def _topic(base: str) -> str:
    return f"{base}.{uuid.uuid4().hex[:8]}"


class _Partition:
    replicas = (1,)


class _Metadata:
    partitions = {0: _Partition(), 1: _Partition()}


def _warn(admin: _Admin, views: dict[str, str]) -> None:
    """Check existing upsert views' topics (topic -> view), as a start does."""
    specs = [
        TopicSpec(topic, 2, None, {"cleanup.policy": "compact"}, frozenset({"cleanup.policy"}),
                  view)
        for topic, view in views.items()
    ]
    topics._warn_differences(admin, specs, {t: _Metadata() for t in views}, CONF, 5)


def test_a_topic_that_deletes_is_warned_of_once_with_the_fix(log: _Log) -> None:
    topic = _topic("totals")
    admin = _Admin({topic: "delete"})
    _warn(admin, {topic: "totals"})
    _warn(admin, {topic: "totals"})
    assert admin.asked == [topic]  # once warned, not asked again
    assert [(level, event) for level, event, _ in log.events] == [
        ("warning", "topic.not_compacted")
    ]
    fields = log.events[0][2]
    assert fields["topic"] == topic and fields["view"] == "totals"
    assert fields["cleanup_policy"] == "delete"
    assert fields["fix"] == (
        f"kafka-configs.sh --bootstrap-server broker:9092 --alter --entity-type topics"
        f" --entity-name {topic} --add-config cleanup.policy=compact"
    )


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete, compact"])
def test_a_compacted_topic_gets_no_warning(log: _Log, policy: str) -> None:
    topic = _topic("totals")
    _warn(_Admin({topic: policy}), {topic: "totals"})
    assert log.events == []


def test_a_topic_whose_configuration_cannot_be_read_is_logged_and_left(log: _Log) -> None:
    topic, other = _topic("totals"), _topic("counts")
    admin = _Admin({topic: None, other: "delete"})
    _warn(admin, {topic: "totals", other: "counts"})
    assert [(level, event, fields["topic"]) for level, event, fields in log.events] == [
        ("info", "topic.config_unknown", topic),
        ("warning", "topic.not_compacted", other),
    ]
