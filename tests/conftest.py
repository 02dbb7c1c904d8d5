"""Fixtures shared by every test package: the one Kafka broker fixture and Spark.

The broker is, in order: the cluster in ``KAFKA_BOOTSTRAP_SERVERS`` when set; else a
testcontainers Kafka when a Docker engine answers; else the local KRaft broker started from
the jars that ``scripts/fetch-kafka.sh`` fetched. Never a mock. One broker serves the whole
session; tests isolate themselves with unique topic names (``unique_topic``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

# No test reaches the machine's instance metadata service: a store without keys is signed by
# none (app/runtime/store/s3_credentials.py tries IMDS last), in this process, its Spark JVM
# (the AWS SDK reads the same variable) and every subprocess. The IMDS tests point
# AWS_EC2_METADATA_SERVICE_ENDPOINT at a server of their own and lift this.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


@dataclass
class Broker:
    """What a test needs of a broker, whichever kind it is."""

    bootstrap_servers: str
    kind: str
    extra: dict[str, str] = field(default_factory=dict)
    local: Any = None

    def client_config(self) -> dict[str, str]:
        return dict(self.extra)

    def conf(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap_servers, **self.extra}

    def settings(self, checkpoint: Path, **values: Any) -> Any:
        """Tidemark's settings for this broker: its address and client settings (each a
        librdkafka name whose KafkaSecurity field is the same with ``_`` for ``.``), the
        checkpoint, Spark's logs on the console unless ``values`` say otherwise, and
        ``values``."""
        from app.config import KafkaSecurity, Settings

        security = KafkaSecurity(
            **{"security_protocol": "PLAINTEXT"}
            | {key.replace(".", "_"): value for key, value in self.extra.items()}
        )
        given: dict[str, Any] = {"spark_log": "console", **values}
        return Settings(
            bootstrap_servers=self.bootstrap_servers,
            checkpoint=checkpoint,
            kafka=security,
            **given,
        )

    def create_topic(
        self, name: str, partitions: int = 1, config: dict[str, str] | None = None
    ) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({**self.conf(), "log_level": 3})
        topic = NewTopic(name, partitions, 1, config=config or {})
        admin.create_topics([topic])[name].result(30)
        return name


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no Docker here"
        return False


@pytest.fixture(scope="session")
def kafka() -> Iterator[Broker]:
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield Broker(external, "external")
        return
    if _docker_answers():
        from testcontainers.kafka import KafkaContainer  # type: ignore[import-untyped]

        with KafkaContainer() as container:
            yield Broker(container.get_bootstrap_server(), "testcontainers")
            _stop_spark()
        return
    subprocess.run(["bash", str(ROOT / "scripts" / "fetch-kafka.sh")], check=True)
    from app.local_kafka import LocalKafka

    broker = LocalKafka().start()
    try:
        yield Broker(broker.bootstrap_servers, "local", local=broker)
    finally:
        _stop_spark()
        broker.cleanup()


def _stop_spark() -> None:
    """Stop the test process's Spark session before the broker it read: its Python workers
    keep their Kafka clients (one per process, app/connectors/per_process.py) until Spark
    stops, and would retry a stopped broker, logging each attempt, until the process ends."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is not None:
        context.stop()


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_topic("purchases")`` -> a topic name no other test uses."""
    tag = uuid.uuid4().hex[:8]

    def make(base: str) -> str:
        return f"{request.node.name[:40]}.{base}.{tag}".replace("[", "-").replace("]", "")

    return make


@pytest.fixture
def spark() -> Iterator[Any]:
    """The running local Spark session, or a new one (starting one costs several seconds).

    Asked for per test: a test module with its own session (test_prometheus_listener.py)
    stops it when it is done, and a session kept for the whole run would then be a stopped one
    (its context gone) for every test after it. Spark stops with the test process."""
    from app.runtime.session import spark_session

    yield spark_session("local[2]", shuffle_partitions=2)


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[str]:
    """A Confluent-compatible schema registry's base URL: ``SCHEMA_REGISTRY_URL`` when set,
    else the local registry (local_schema_registry.py here) built by
    ``scripts/fetch-schema-registry.sh``. One that cannot start fails the test, with why."""
    external = os.environ.get("SCHEMA_REGISTRY_URL")
    if external:
        yield external
        return
    subprocess.run(["bash", str(ROOT / "scripts" / "fetch-schema-registry.sh")], check=True)
    from local_schema_registry import LocalSchemaRegistry

    registry = LocalSchemaRegistry()
    try:
        registry.start()
    except RuntimeError as exc:
        registry.cleanup()
        pytest.fail(f"the local schema registry did not start: {exc}", pytrace=False)
    try:
        yield registry.url
    finally:
        registry.cleanup()


@dataclass
class ObjectStoreServer:
    """A running S3-compatible server and a fresh bucket of it for one test."""

    endpoint: str
    environment: dict[str, str]
    bucket: str

    def settings(self) -> Any:
        """The ``s3`` settings group of a run against this server."""
        from app.config import ObjectStore

        return ObjectStore(
            endpoint=self.endpoint,
            path_style=True,
            access_key_id=self.environment["TIDEMARK_S3_ACCESS_KEY_ID"],
            secret_access_key=self.environment["TIDEMARK_S3_SECRET_ACCESS_KEY"],
        )

    def url(self, *parts: str) -> str:
        return "/".join([f"s3a://{self.bucket}", *parts])


@pytest.fixture(scope="session")
def s3proxy_server() -> Iterator[Any]:
    """S3Proxy (tests/local_s3proxy.py) over a temporary directory, fetched by
    ``scripts/fetch-s3proxy.sh``; one that cannot start fails the test, with why."""
    subprocess.run(["bash", str(ROOT / "scripts" / "fetch-s3proxy.sh")], check=True)
    from local_s3proxy import LocalS3Proxy

    server = LocalS3Proxy()
    try:
        server.start()
    except RuntimeError as exc:
        server.cleanup()
        pytest.fail(f"S3Proxy did not start: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def object_store(s3proxy_server: Any, monkeypatch: pytest.MonkeyPatch) -> ObjectStoreServer:
    """A bucket of its own on the tests' S3Proxy, with ``TIDEMARK_S3_*`` set to reach it."""
    from app.runtime.store.s3 import s3_store

    environment = s3proxy_server.environment()
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    served = ObjectStoreServer(s3proxy_server.endpoint, environment, bucket)
    s3_store(served.settings()).create_bucket(bucket)
    return served
