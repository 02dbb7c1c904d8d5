"""Authenticated, encrypted Kafka connections from configuration only.

A local broker whose only client listener is SASL_SSL (PLAIN and SCRAM-SHA-512) and which also
demands a client certificate (mTLS), with certificates made by openssl in the test. A program
runs against it with ``tidemark run`` configured by ``TIDEMARK_KAFKA_*`` environment variables
and a mounted password file; no credential may appear in its logs (Tidemark's and Spark's:
``spark.log`` and ``spark.out`` in the checkpoint), its checkpoint, its metrics, ``explain``
or its error messages.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import load_settings
from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.local_kafka import LocalKafka, TlsFiles, make_tls_files, sasl_ssl_kafka
from app.program.compile import compile_program

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "s3cret-Pa55-" + os.urandom(6).hex()
T0 = 1_700_000_000_000

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    sensor  BIGINT NOT NULL
) WITH ('topic' = 'secure.in', 'dead_letter' = 'secure.dlq');

CREATE VIEW everything WITH ('topic' = 'secure.out', 'format' = 'append') AS
SELECT ts, sensor FROM reading;
"""


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalKafka, TlsFiles]]:
    subprocess.run(["bash", str(ROOT / "scripts" / "fetch-kafka.sh")], check=True)
    work = tmp_path_factory.mktemp("secure")
    tls = make_tls_files(work / "tls")
    broker = sasl_ssl_kafka(
        work / "kafka", tls, {"alice": PASSWORD}, require_client_certificate=True
    ).start()
    try:
        yield broker, tls
    finally:
        broker.cleanup()


def _env(broker: LocalKafka, tls: TlsFiles, mechanism: str, secret_file: Path) -> dict[str, str]:
    return {
        "TIDEMARK_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "TIDEMARK_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "TIDEMARK_KAFKA_SASL_MECHANISM": mechanism,
        "TIDEMARK_KAFKA_SASL_USERNAME": "alice",
        "TIDEMARK_KAFKA_SASL_PASSWORD_FILE": str(secret_file),
        "TIDEMARK_KAFKA_SSL_CA_LOCATION": str(tls.ca),
        "TIDEMARK_KAFKA_SSL_CERTIFICATE_LOCATION": str(tls.client_certificate),
        "TIDEMARK_KAFKA_SSL_KEY_LOCATION": str(tls.client_key),
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _metrics_once_counted(port: int, records: int) -> str:
    """The running service's /metrics once it has counted ``records`` input records."""
    deadline = time.monotonic() + 60
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        counted = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("tidemark_input_records_total{")
        )
        if counted >= records or time.monotonic() > deadline:
            assert counted == records, text
            return text
        time.sleep(1.0)


def _settings_conf(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return load_settings().kafka_config()


def test_plain_and_scram_over_sasl_ssl_with_a_client_certificate_from_env_and_file(
    secure: tuple[LocalKafka, TlsFiles], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, tls = secure
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    for mechanism in ("PLAIN", "SCRAM-SHA-512"):
        conf = _settings_conf(_env(broker, tls, mechanism, secret), monkeypatch)
        assert conf["sasl.password"] == PASSWORD, "read from the mounted file"
        assert AdminClient({**conf, "log_level": 0}).list_topics(timeout=20).brokers
    # The broker really demands the client certificate (mTLS) and the password.
    no_cert = {
        k: v
        for k, v in conf.items()
        if not k.startswith("ssl.certificate") and not k.startswith("ssl.key")
    }
    wrong = {**conf, "sasl.password": "not-the-password"}
    for bad in (no_cert, wrong):
        with pytest.raises(KafkaException):
            AdminClient({**bad, "log_level": 0}).list_topics(timeout=8)


def test_a_program_runs_over_sasl_ssl_only_and_no_credential_is_shown(
    secure: tuple[LocalKafka, TlsFiles], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, tls = secure
    secret = tmp_path / "password"
    secret.write_text(PASSWORD)
    env = _env(broker, tls, "SCRAM-SHA-512", secret)
    conf = _settings_conf(env, monkeypatch)
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf)
    admin.create_topics([NewTopic("secure.in", 1, 1)])["secure.in"].result(30)
    program = tmp_path / "secure.sql"
    program.write_text(PROGRAM)
    circuit = compile_program(program)
    codec = AvroCodec(circuit.table("reading").avro_schema)
    producer = Producer({**conf, "log_level": 3})
    for i in range(20):
        producer.produce("secure.in", value=codec.encode({"ts": T0 + i, "sensor": i}))
    producer.produce("secure.in", value=b"\x01 bad")
    assert producer.flush(30) == 0

    # A running service: its own /metrics is read, then its output topic is deleted, so its
    # query fails and Spark prints the failing query's error and plan.
    port = _free_port()
    run_env = {
        **os.environ,
        **env,
        "TIDEMARK_LOG_LEVEL": "debug",
        "TIDEMARK_LOG_FORMAT": "json",
        "TIDEMARK_METRICS_PORT": str(port),
    }
    service = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "run",
            str(program),
            "--checkpoint",
            str(tmp_path / "cp"),
        ],
        cwd=ROOT,
        env=run_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out = circuit.view("everything").output
        assert out is not None
        deadline = time.monotonic() + 300
        while len(read_topic(conf, out.topic)) < 20 and time.monotonic() < deadline:
            assert service.poll() is None, service.communicate()[1][-3000:]
            time.sleep(1.0)
        assert len(read_topic(conf, out.topic)) == 20
        assert len(read_topic(conf, "secure.dlq")) == 1
        metrics_text = _metrics_once_counted(port, 21)
        admin.delete_topics([out.topic])[out.topic].result(30)
        for i in range(20, 25):  # a step that writes finds the topic gone
            producer.produce("secure.in", value=codec.encode({"ts": T0 + i, "sensor": i}))
        assert producer.flush(30) == 0
        stdout, stderr = service.communicate(timeout=200)
    finally:
        if service.poll() is None:
            service.kill()
            service.communicate()
    assert service.returncode == 2, stderr[-3000:]
    assert f"topic(s) {out.topic} do not exist" in stderr, stderr[-3000:]

    explain = subprocess.run(
        [sys.executable, "-m", "app.cli", "explain", str(program), "--format", "json"],
        cwd=ROOT,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    wrong = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "run",
            str(program),
            "--checkpoint",
            str(tmp_path / "cp2"),
            "--once",
        ],
        cwd=ROOT,
        env={**run_env, "TIDEMARK_KAFKA_SASL_PASSWORD": PASSWORD + "-wrong"},
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert wrong.returncode == 2 and "tidemark: error:" in wrong.stderr
    # Spark's own logs (TIDEMARK_SPARK_LOG=file, the default): the driver JVM's log4j2 file
    # with its rolled files, and its stdout and stderr beside them. The failing query's error
    # and plan are in spark.log of the first run.
    spark_logs = {
        path: path.read_text(errors="replace")
        for checkpoint in (tmp_path / "cp", tmp_path / "cp2")
        for path in sorted(checkpoint.glob("spark.*"))
    }
    first = spark_logs[tmp_path / "cp" / "spark.log"]
    assert "terminated with error" in first and out.topic in first, first[-3000:]
    assert tmp_path / "cp" / "spark.out" in spark_logs
    for name, text in {
        "run stderr": stderr,
        "run stdout": stdout,
        "explain": explain.stdout + explain.stderr,
        "error": wrong.stderr + wrong.stdout,
        "metrics": metrics_text,
        **{str(path.relative_to(tmp_path)): text for path, text in spark_logs.items()},
    }.items():
        assert PASSWORD not in text, f"the password appears in {name}"
    # Nor in anything else either run left in its checkpoint (offsets, step files, state).
    for checkpoint in (tmp_path / "cp", tmp_path / "cp2"):
        for path in checkpoint.rglob("*"):
            if path.is_file():
                assert PASSWORD.encode() not in path.read_bytes(), f"the password is in {path}"
    assert "Traceback" not in wrong.stderr
