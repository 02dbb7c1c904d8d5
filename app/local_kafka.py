"""A real Apache Kafka broker on this machine, for the demo and the tests.

No Docker engine runs here and neither Debian nor PyPI ships a broker, so the broker's jars are
fetched from Maven by ``scripts/fetch-kafka.sh`` into ``.cache/kafka/libs`` and started in KRaft
combined mode (one process is controller and broker) on free loopback ports. Never a mock: the
demo and every end-to-end test talk to this process over the Kafka protocol.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from app.errors import KafkaError

__all__ = ["LocalKafka", "kafka_libs_dir"]

log = structlog.get_logger(__name__)

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
"""


def kafka_libs_dir() -> Path:
    """Where ``scripts/fetch-kafka.sh`` put the broker jars (``TIDEMARK_KAFKA_LIBS`` overrides)."""
    override = os.environ.get("TIDEMARK_KAFKA_LIBS")
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent / ".cache" / "kafka" / "libs"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalKafka:
    """One KRaft broker in a temporary directory; ``start()``/``stop()`` or a ``with`` block.

    ``extra_properties`` are appended to server.properties (the security tests configure
    SASL_SSL listeners this way). Logs stay in ``log_dir`` so a failed test can show them.
    """

    workdir: Path | None = None
    extra_properties: dict[str, str] = field(default_factory=dict)
    listener_name: str = "PLAINTEXT"
    startup_timeout_seconds: float = 90.0
    bootstrap_servers: str = ""
    _process: subprocess.Popen[bytes] | None = None
    _owns_workdir: bool = False

    @property
    def log_dir(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "logs"

    def start(self) -> LocalKafka:
        libs = kafka_libs_dir()
        if not any(libs.glob("kafka_2.13-*.jar")):
            raise KafkaError(
                f"the Kafka broker jars are not in {libs}: run scripts/fetch-kafka.sh "
                "(make demo and make test do it for you)"
            )
        java = shutil.which("java")
        if java is None:
            raise KafkaError("java is not on PATH: Java 17 is needed to run the local broker")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="tidemark-kafka-"))
            self._owns_workdir = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        port, controller_port = _free_port(), _free_port()
        self.bootstrap_servers = f"127.0.0.1:{port}"
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "listeners": f"{self.listener_name}://127.0.0.1:{port},"
            f"CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"{self.listener_name}://127.0.0.1:{port}",
            "inter.broker.listener.name": self.listener_name,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
            "SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "log.flush.interval.messages": "100000",
            "message.max.bytes": "10485760",
        }
        props.update(self.extra_properties)
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log_file=self.log_dir / "server.log"))
        classpath = f"{libs}/*"
        jvm = [
            java,
            "-Xms256m",
            "-Xmx768m",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            classpath,
        ]
        cluster_id = uuid.uuid4().hex[:22]
        started = time.monotonic()
        fmt = subprocess.run(
            [
                *jvm,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(config),
                "--ignore-formatted",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if fmt.returncode != 0:
            raise KafkaError(f"formatting the local broker's storage failed: {fmt.stderr[-2000:]}")
        stdout = open(self.log_dir / "stdout.log", "wb")  # noqa: SIM115 - closed by the process
        self._process = subprocess.Popen(
            [*jvm, "kafka.Kafka", str(config)],
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready()
        log.info(
            "local_kafka.started",
            bootstrap_servers=self.bootstrap_servers,
            seconds=round(time.monotonic() - started, 1),
            workdir=str(self.workdir),
        )
        return self

    def _wait_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.startup_timeout_seconds
        admin = AdminClient(
            {"bootstrap.servers": self.bootstrap_servers, "log_level": 0, **self.client_config()}
        )
        last_error = ""
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise KafkaError(f"the local broker exited at start-up:\n{self.tail_log()}")
            try:
                metadata = admin.list_topics(timeout=2)
                if metadata.brokers:
                    return
            except Exception as exc:  # noqa: BLE001 - retried until the deadline
                last_error = str(exc)
            time.sleep(0.5)
        self.stop()
        raise KafkaError(f"the local broker did not become ready: {last_error}\n{self.tail_log()}")

    def client_config(self) -> dict[str, str]:
        """Client settings beyond bootstrap.servers (none for the plaintext broker)."""
        return {}

    def tail_log(self, lines: int = 40) -> str:
        path = self.log_dir / "server.log"
        if not path.exists():
            path = self.log_dir / "stdout.log"
        if not path.exists():
            return "(no broker log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the broker: SIGTERM (controlled shutdown), then SIGKILL after 20 s."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        self._process = None

    def cleanup(self) -> None:
        self.stop()
        if self._owns_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalKafka:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
