"""The topics of a circuit at start: input topics must exist; output and dead-letter topics are
created when missing, with the settings the program and the service's settings declare.

A topic Tidemark creates gets:

- partitions: the view's ``'partitions'``, else the ``topic_partitions`` setting, else as many
  as its table's input topic (a UNION ALL's or JOIN's first input);
- replication factor: the view's ``'replicas'``, else ``topic_replicas``, else the broker's
  default;
- ``retention.ms``: the view's ``'retention'``, else ``topic_retention_ms``, else the broker's
  default;
- ``cleanup.policy=compact`` for an ``upsert`` view's topic (the latest value of each key);
- ``max.message.bytes`` of 10 MiB, as the sink's producers write.

A topic that exists is never altered: where it differs from what was declared explicitly
(compaction of an upsert view's topic; a view option or setting for the rest), a warning names
it once per process.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from app.circuit.ir import Circuit, Table
from app.errors import KafkaError, kafka_reason

if TYPE_CHECKING:
    from app.config import Settings

__all__ = ["TopicDefaults", "TopicSpec", "ensure_topics", "topic_specs"]

log = structlog.get_logger("tidemark.topics")

#: The largest record the sink's producers write (a step's output may hold big rows).
MAX_MESSAGE_BYTES = "10485760"


@dataclass(frozen=True)
class TopicDefaults:
    """The settings' defaults for every topic Tidemark creates (None: see the module)."""

    partitions: int | None = None
    replicas: int | None = None
    retention_ms: int | None = None

    @classmethod
    def of(cls, settings: Settings) -> TopicDefaults:
        return cls(settings.topic_partitions, settings.topic_replicas,
                   settings.topic_retention_ms)


@dataclass(frozen=True)
class TopicSpec:
    """A topic Tidemark writes, as it would create it. ``declared`` names the settings the
    program or the service's settings gave explicitly (what an existing topic is checked
    against): ``partitions``, ``replicas``, ``retention.ms``, ``cleanup.policy``."""

    name: str
    partitions: int
    replicas: int | None
    config: Mapping[str, str]
    declared: frozenset[str]
    #: The view that writes it (None: a table's dead-letter topic).
    view: str | None = None


def topic_specs(
    circuit: Circuit, input_partitions: Mapping[str, int], defaults: TopicDefaults
) -> list[TopicSpec]:
    """The output and dead-letter topics of ``circuit`` (``input_partitions``: input topic
    -> its partition count), in program order, each once."""
    specs: dict[str, TopicSpec] = {}

    def add(name: str, table: Table, view: str | None, partitions: int | None,
            replicas: int | None, retention_ms: int | None, compact: bool) -> None:
        if name in specs:
            return
        declared = {
            setting
            for setting, value in (
                ("partitions", partitions if partitions is not None else defaults.partitions),
                ("replicas", replicas if replicas is not None else defaults.replicas),
                ("retention.ms",
                 retention_ms if retention_ms is not None else defaults.retention_ms),
            )
            if value is not None
        }
        retention = retention_ms if retention_ms is not None else defaults.retention_ms
        config = {"max.message.bytes": MAX_MESSAGE_BYTES}
        if compact:
            config["cleanup.policy"] = "compact"
            declared.add("cleanup.policy")
        if retention is not None:
            config["retention.ms"] = str(retention)
        specs[name] = TopicSpec(
            name,
            partitions or defaults.partitions or input_partitions[table.topic],
            replicas or defaults.replicas,
            config,
            frozenset(declared),
            view,
        )

    for table in circuit.tables:
        add(table.dead_letter_topic, table, None, None, None, None, False)
    for view in circuit.views:
        out = view.output
        if out is not None:
            add(out.topic, _first_table(circuit, view.name), view.name, out.partitions,
                out.replicas, out.retention_ms, out.format == "upsert")
    return list(specs.values())


def ensure_topics(
    circuit: Circuit,
    kafka_conf: Mapping[str, str],
    timeout: float = 30,
    wait_for_topics_seconds: float = 0,
    defaults: TopicDefaults | None = None,
) -> None:
    """Input topics must exist (a clear error otherwise, after waiting up to
    ``wait_for_topics_seconds`` for them to appear); output and dead-letter topics are
    created when missing, as :func:`topic_specs` declares them. An existing one is left as it
    is, with a warning where it differs from what was declared (:func:`_warn_differences`)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    try:
        admin = AdminClient({**kafka_conf, "log_level": 3})
    except KafkaException as exc:
        raise KafkaError(
            f"cannot create a Kafka client: {kafka_reason(exc)}: check TIDEMARK_KAFKA_*"
            " (security protocol, SASL and TLS files)"
        ) from exc
    deadline = time.monotonic() + wait_for_topics_seconds
    while True:
        try:
            metadata = admin.list_topics(timeout=timeout)
        except Exception as exc:
            raise KafkaError(
                f"cannot reach the Kafka cluster at {kafka_conf.get('bootstrap.servers')}:"
                f" {kafka_reason(exc)}: check --bootstrap-servers (TIDEMARK_BOOTSTRAP_SERVERS),"
                " that the broker runs, and TIDEMARK_KAFKA_* for a secured cluster"
            ) from exc
        existing = metadata.topics
        # A stage boundary's table reads an internal topic, created below as the output of
        # the view it is named after (ADR 0023).
        missing_inputs = [
            t for t in circuit.tables if t.topic not in existing and t.stage_input is None
        ]
        if not missing_inputs:
            break
        if time.monotonic() >= deadline:
            waited = f" (waited {wait_for_topics_seconds:g} s)" if wait_for_topics_seconds else ""
            raise KafkaError(
                "input topic(s) missing: "
                + ", ".join(f"{t.topic} (table {t.name})" for t in missing_inputs)
                + f"{waited}: create them, fix 'topic' in the program, or set "
                "TIDEMARK_WAIT_FOR_TOPICS_SECONDS to wait for them"
            )
        log.info("topics.waiting", missing=[t.topic for t in missing_inputs])
        time.sleep(min(2.0, max(0.1, deadline - time.monotonic())))
    inputs = {
        t.topic: len(existing[t.topic].partitions) if t.topic in existing else 1
        for t in circuit.tables
    }
    specs = topic_specs(circuit, inputs, defaults or TopicDefaults())
    _warn_differences(admin, [s for s in specs if s.name in existing], existing, kafka_conf,
                      timeout)
    new = [
        NewTopic(
            spec.name,
            num_partitions=spec.partitions,
            replication_factor=spec.replicas or -1,
            config=dict(spec.config),
        )
        for spec in specs
        if spec.name not in existing
    ]
    if new:
        for name, future in admin.create_topics(new, request_timeout=timeout).items():
            try:
                future.result()
                log.info("topic.created", topic=name)
            except Exception as exc:  # noqa: BLE001 - an existing topic is fine
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise KafkaError(
                        f"cannot create topic {name}: {kafka_reason(exc)}: create it, or let"
                        " Tidemark's user create topics on the cluster"
                    ) from exc


def _first_table(circuit: Circuit, relation: str) -> Table:
    """The table ``relation`` reads first: itself, or its first input's, recursively."""
    while not any(t.name == relation for t in circuit.tables):
        relation = circuit.view(relation).sources[0]
    return circuit.table(relation)


#: (topic, setting) pairs already warned of by this process.
_WARNED: set[tuple[str, str]] = set()


def _warn_differences(
    admin: Any,
    specs: list[TopicSpec],
    existing: Mapping[str, Any],
    kafka_conf: Mapping[str, str],
    timeout: float,
) -> None:
    """Warn, once per topic, setting and process, of each existing topic that differs from a
    declared setting. An upsert view's topic without ``compact`` in its ``cleanup.policy`` is
    ``topic.not_compacted``: retention then deletes the latest value of a key like any other
    record, and a consumer reading the topic from the start misses it. Other differences are
    ``topic.differs``. A topic whose configuration cannot be read is logged and left alone."""
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

    servers = kafka_conf.get("bootstrap.servers")
    for spec in specs:
        pending = {s for s in spec.declared if (spec.name, s) not in _WARNED}
        if not pending:
            continue
        partitions = existing[spec.name].partitions
        actual: dict[str, str | None] = {
            "partitions": str(len(partitions)),
            "replicas": str(len(partitions[min(partitions)].replicas)) if partitions else None,
        }
        wanted = {
            "partitions": str(spec.partitions),
            "replicas": str(spec.replicas),
            **{k: v for k, v in spec.config.items() if k in pending},
        }
        if pending & {"retention.ms", "cleanup.policy"}:
            try:
                described = admin.describe_configs(
                    [ConfigResource("topic", spec.name)], request_timeout=timeout
                )
                config = next(iter(described.values())).result()
            except Exception as exc:  # noqa: BLE001 - no DescribeConfigs right is no reason to stop
                log.info("topic.config_unknown", topic=spec.name, reason=kafka_reason(exc))
                pending -= {"retention.ms", "cleanup.policy"}
            else:
                for key in ("retention.ms", "cleanup.policy"):
                    entry = config.get(key)
                    actual[key] = entry.value if entry is not None else None
        for setting in sorted(pending):
            value = actual.get(setting)
            if setting == "cleanup.policy":
                if value is not None and "compact" in [p.strip() for p in value.split(",")]:
                    continue
                _WARNED.add((spec.name, setting))
                log.warning(
                    "topic.not_compacted",
                    topic=spec.name,
                    view=spec.view,
                    cleanup_policy=value,
                    fix=(
                        f"kafka-configs.sh --bootstrap-server {servers} --alter --entity-type"
                        f" topics --entity-name {spec.name} --add-config cleanup.policy=compact"
                    ),
                )
                continue
            if value == wanted[setting]:
                continue
            _WARNED.add((spec.name, setting))
            log.warning(
                "topic.differs",
                topic=spec.name,
                view=spec.view,
                setting=setting,
                declared=wanted[setting],
                actual=value,
                fix=f"the existing topic is used as it is: change {setting} with Kafka's tools,"
                " or remove the declaration",
            )
