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
from typing import Any

import structlog

from app.errors import KafkaError

__all__ = [
    "LocalKafka",
    "TlsFiles",
    "kafka_libs_dir",
    "make_tls_files",
    "sasl_ssl_kafka",
    "stop_process",
]

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


def _redact(text: str) -> str:
    """Storage-tool output may echo ``--add-scram`` passwords: never show them."""
    import re

    return re.sub(r"password=[^,\]\s]*", "password=**********", text)


def stop_process(process: subprocess.Popen[Any], grace_seconds: float = 20) -> None:
    """SIGTERM a child server, then SIGKILL if it has not exited after ``grace_seconds``:
    brokers and test servers get a clean shutdown when they can, and never outlive us."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


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
    #: Client settings beyond bootstrap.servers (security protocol, SASL, TLS files).
    client_settings: dict[str, str] = field(default_factory=dict)
    #: Extra ``kafka-storage format`` arguments, e.g. ``--add-scram`` for SCRAM users.
    format_arguments: list[str] = field(default_factory=list)
    port: int = 0
    controller_port: int = 0
    cluster_id: str = ""
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
        try:
            if self.workdir is None:
                self.workdir = Path(tempfile.mkdtemp(prefix="tidemark-kafka-"))
                self._owns_workdir = True
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.log_dir.mkdir(exist_ok=True)
        except OSError as exc:
            raise KafkaError(
                f"cannot make the local broker's directory {self.workdir or tempfile.gettempdir()}"
                f" ({exc.strerror or type(exc).__name__}): the broker needs a writable"
                " directory (TMPDIR for a temporary one)"
            ) from exc
        try:
            self._launch(java, libs)
        except OSError as exc:
            raise KafkaError(
                f"cannot start the local broker in {self.workdir}"
                f" ({exc.strerror or type(exc).__name__}): it needs a writable directory and"
                " a runnable java"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise KafkaError(
                f"formatting the local broker's storage took over {exc.timeout:g} s: the"
                " machine may be overloaded, try again"
            ) from exc
        return self

    def _launch(self, java: str, libs: Path) -> None:
        """Write the broker's configuration, format its storage, start it and wait for it."""
        assert self.workdir is not None
        # A restart keeps the ports, so clients reconnect to the same bootstrap servers.
        self.port = self.port or _free_port()
        self.controller_port = self.controller_port or _free_port()
        port, controller_port = self.port, self.controller_port
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
        # A restart (same workdir) must format with the id the data was formatted with.
        self.cluster_id = self.cluster_id or uuid.uuid4().hex[:22]
        cluster_id = self.cluster_id
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
                *self.format_arguments,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if fmt.returncode != 0:
            raise KafkaError(
                f"formatting the local broker's storage failed: {_redact(fmt.stderr[-2000:])}"
            )
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

    def _wait_ready(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.startup_timeout_seconds
        try:
            admin = AdminClient(
                {"bootstrap.servers": self.bootstrap_servers, "log_level": 0,
                 **self.client_config()}
            )
        except KafkaException as exc:
            self.stop()
            raise KafkaError(f"cannot create a client of the local broker: {exc}") from exc
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
        return dict(self.client_settings)

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop the broker and start it again on the same data and ports (a broker fault)."""
        self.stop()
        time.sleep(down_seconds)
        self.start()

    def tail_log(self, lines: int = 40) -> str:
        path = self.log_dir / "server.log"
        if not path.exists():
            path = self.log_dir / "stdout.log"
        if not path.exists():
            return "(no broker log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the broker: SIGTERM (controlled shutdown), then SIGKILL after 20 s."""
        if self._process is not None:
            stop_process(self._process)
        self._process = None

    def cleanup(self) -> None:
        self.stop()
        if self._owns_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalKafka:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a throwaway certificate authority, the broker and one client (mTLS)."""

    ca: Path
    broker_keystore: Path  # private key + certificate, the broker's PEM keystore
    client_certificate: Path
    client_key: Path

    @property
    def server_certificate(self) -> Path:
        """The broker's certificate (for 127.0.0.1 and localhost), for any test server."""
        return self.ca.parent / "broker.pem"

    @property
    def server_key(self) -> Path:
        """The broker's private key, PKCS#8 PEM."""
        return self.ca.parent / "broker.p8"


def make_tls_files(directory: Path) -> TlsFiles:
    """A CA, a broker certificate for 127.0.0.1/localhost and a client certificate, made with
    the system's ``openssl`` for the security tests (never for production use)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise KafkaError("openssl is not on PATH: it makes the test certificates")
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        result = subprocess.run(
            [openssl, *args], cwd=directory, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise KafkaError(f"openssl {args[0]} failed: {result.stderr[-1000:]}")

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=tidemark-test-ca",
    )
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("broker", "client"):
        run(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN={name}",
        )
        extra = ["-extfile", "san.ext"] if name == "broker" else []
        run(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.pem",
            "-days",
            "2",
            *extra,
        )
    # Kafka's PEM keystore wants a PKCS#8 key followed by the certificate.
    run("pkcs8", "-topk8", "-nocrypt", "-in", "broker.key", "-out", "broker.p8")
    keystore = directory / "broker-keystore.pem"
    keystore.write_text(
        (directory / "broker.p8").read_text() + (directory / "broker.pem").read_text()
    )
    return TlsFiles(
        directory / "ca.pem", keystore, directory / "client.pem", directory / "client.key"
    )


def sasl_ssl_kafka(
    workdir: Path,
    tls: TlsFiles,
    users: dict[str, str],
    require_client_certificate: bool = False,
) -> LocalKafka:
    """A broker whose only listener for clients is SASL_SSL, with PLAIN and SCRAM-SHA-512.

    ``users`` (name -> password) are PLAIN users (in the listener's JAAS settings) and SCRAM
    users (created by ``kafka-storage format --add-scram``). With
    ``require_client_certificate`` the listener also demands a client certificate (mTLS).
    The broker talks to itself over the same listener as the user ``admin``.
    """
    admin_password = uuid.uuid4().hex
    everyone = {"admin": admin_password, **users}
    plain_users = " ".join(f'user_{n}="{p}"' for n, p in everyone.items())
    props = {
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="admin" password="{admin_password}" {plain_users};'
        ),
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.broker_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca),
        "listener.name.sasl_ssl.ssl.client.auth": (
            "required" if require_client_certificate else "none"
        ),
        "ssl.endpoint.identification.algorithm": "",
    }
    client = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "admin",
        "sasl.password": admin_password,
        "ssl.ca.location": str(tls.ca),
    }
    if require_client_certificate:
        client["ssl.certificate.location"] = str(tls.client_certificate)
        client["ssl.key.location"] = str(tls.client_key)
    scram = [
        arg
        for name, password in everyone.items()
        for arg in ("--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]")
    ]
    return LocalKafka(
        workdir=workdir,
        extra_properties=props,
        listener_name="SASL_SSL",
        client_settings=client,
        format_arguments=scram,
    )
