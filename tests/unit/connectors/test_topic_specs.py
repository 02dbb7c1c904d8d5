"""The topics Tidemark creates and the settings it gives them: a view's options first, then the
``topic_*`` settings, then the input topic's partitions and the broker's defaults
(docs/configuration.md). On the real broker: tests/e2e/test_view_keys_and_topics.py."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

from app.config import Settings
from app.connectors.topics import TopicDefaults, topic_specs
from app.program.compile import compile_text

DAY = 86_400_000


def _circuit(totals_options: str = "", large_options: str = "") -> Any:
    return compile_text(
        "p.sql",
        "CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR, k BIGINT, n BIGINT)\n"
        "  WITH ('topic' = 'in');\n"
        f"CREATE VIEW totals WITH ('topic' = 'totals'{totals_options}) AS\n"
        "  SELECT k, SUM(n) AS total FROM t GROUP BY k;\n"
        f"CREATE VIEW large WITH ('topic' = 'large'{large_options}) AS\n"
        "  SELECT ts, k, n FROM t WHERE n > 1;\n",
    )


def _by_name(circuit: Any, defaults: TopicDefaults) -> dict[str, Any]:
    return {s.name: s for s in topic_specs(circuit, {"in": 3}, defaults)}


def test_without_declarations_topics_follow_the_input_and_the_broker() -> None:
    specs = _by_name(_circuit(), TopicDefaults())
    assert list(specs) == ["in.dlq", "totals", "large"]
    for spec in specs.values():
        assert (spec.partitions, spec.replicas) == (3, None)
        assert "retention.ms" not in spec.config
        assert spec.config["max.message.bytes"] == "10485760"
    assert specs["totals"].config["cleanup.policy"] == "compact"
    assert specs["totals"].declared == {"cleanup.policy"}
    assert "cleanup.policy" not in specs["large"].config
    assert specs["large"].declared == frozenset()
    assert (specs["in.dlq"].view, specs["totals"].view) == (None, "totals")


def test_settings_apply_to_every_created_topic() -> None:
    specs = _by_name(_circuit(), TopicDefaults(partitions=6, replicas=3, retention_ms=DAY))
    for spec in specs.values():
        assert (spec.partitions, spec.replicas, spec.config["retention.ms"]) == (6, 3, str(DAY))
        assert {"partitions", "replicas", "retention.ms"} <= spec.declared


def test_a_views_options_override_the_settings_for_its_topic() -> None:
    circuit = _circuit(
        ", 'partitions' = '12', 'replicas' = '2', 'retention' = '-1'",
        ", 'retention' = INTERVAL '2' DAY",
    )
    specs = _by_name(circuit, TopicDefaults(partitions=6, retention_ms=DAY))
    totals, large, dlq = specs["totals"], specs["large"], specs["in.dlq"]
    assert (totals.partitions, totals.replicas, totals.config["retention.ms"]) == (12, 2, "-1")
    assert (large.partitions, large.replicas, large.config["retention.ms"]) == (6, None,
                                                                                str(2 * DAY))
    assert (dlq.partitions, dlq.config["retention.ms"]) == (6, str(DAY))


def test_the_defaults_come_from_the_settings() -> None:
    settings = Settings(topic_partitions=4, topic_replicas=2, topic_retention_ms=-1)
    assert TopicDefaults.of(settings) == TopicDefaults(4, 2, -1)
    assert TopicDefaults.of(Settings()) == TopicDefaults()


class _Partition:
    replicas = (1,)


class _Metadata:
    partitions = {0: _Partition(), 1: _Partition()}


class _Log:
    def __init__(self) -> None:
        self.warnings: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.warnings.append((event, fields))

    def info(self, event: str, **fields: Any) -> None:
        pass


def test_an_existing_topic_that_differs_is_warned_of_once_and_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.connectors import topics

    log = _Log()
    monkeypatch.setattr(topics, "log", log)
    [spec] = [s for s in topic_specs(_circuit(", 'partitions' = '6'"), {"in": 2},
                                     TopicDefaults()) if s.name == "totals"]
    renamed = dataclasses.replace(spec, name=f"totals.{uuid.uuid4().hex[:8]}",
                                  declared=frozenset({"partitions", "replicas"}), replicas=1)
    for _ in range(2):
        topics._warn_differences(None, [renamed], {renamed.name: _Metadata()}, {}, 5)
    assert log.warnings == [("topic.differs", {
        "topic": renamed.name, "view": "totals", "setting": "partitions", "declared": "6",
        "actual": "2", "fix": "the existing topic is used as it is: change partitions with "
        "Kafka's tools, or remove the declaration"})]


def test_a_retention_of_zero_is_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="0 would delete every record at once"):
        Settings(topic_retention_ms=0)
    with pytest.raises(ValidationError):
        Settings(topic_partitions=0)
