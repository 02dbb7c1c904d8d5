"""The container image built and run for real, with podman, without a Docker engine.

``scripts/build-image.sh`` makes a Debian bookworm base from Debian packages (mmdebstrap) and
builds the Dockerfile on it with podman; no container registry is asked for anything. These
tests call the script, then run the image the way the Helm chart runs it: as uid 10001, with a
read-only root filesystem, writable only where the chart mounts volumes, on the host network
against the tests' Kafka broker. The chart's own pod spec, rendered with ``helm template``, is
turned into a ``podman run`` and must become ready (GET /readyz answers 200).

Slow (a first build downloads pyspark and a JRE; every run starts Spark), so not part of
``make test``: ``.venv/bin/pytest -m slow tests/deploy/test_image_build.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import CHART, KUBERNETES_VERSION, ROOT, K8sTools

pytestmark = pytest.mark.slow

SCRIPT = ROOT / "scripts" / "build-image.sh"
PROGRAM = ROOT / "pipelines" / "purchases.sql"
BASE_MS = 1_700_000_000_000
#: (amount, large?) of the purchases produced: the view keeps amount >= 100.
AMOUNTS = [("12.50", False), ("150.00", True), ("99.99", False), ("250.10", True), ("100.00", True)]
LARGE = sum(large for _, large in AMOUNTS)


@dataclass(frozen=True)
class BuiltImage:
    """The image the script built and the podman flags every run of it needs here."""

    name: str
    base: str
    run_flags: list[str]
    build_log: str


def _podman(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _build(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT)], cwd=ROOT, env={**os.environ, **(env or {})},
        capture_output=True, text=True, timeout=3600, check=False,
    )


@pytest.fixture(scope="module")
def built_image() -> BuiltImage:
    """Runs the build script once per module; skipped only when podman cannot be installed."""
    result = _build()
    if result.returncode != 0 and shutil.which("podman") is None:
        pytest.skip(f"podman could not be installed: {result.stderr.strip()[-800:]}")
    assert result.returncode == 0, result.stderr[-4000:]
    flags = subprocess.run(
        [str(SCRIPT), "run-flags"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    base = os.environ.get("TIDEMARK_BASE_IMAGE", "localhost/tidemark-base:bookworm")
    return BuiltImage(result.stdout.strip().splitlines()[-1], base, flags, result.stderr)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _program_text(topics: dict[str, str]) -> str:
    """The shipped purchases program with its topics renamed (tests share one broker)."""
    text = PROGRAM.read_text()
    for old, new in (("'purchases.dlq'", topics["dlq"]), ("'purchases.large'", topics["large"]),
                     ("'purchases'", topics["in"])):
        assert old in text, old
        text = text.replace(old, f"'{new}'")
    return text


def _produce_purchases(kafka: Any, topic: str, program: Path) -> None:
    """Five purchases (three large) and one record that is not Avro at all."""
    from confluent_kafka import Producer

    from app.connectors.avro_codec import AvroCodec
    from app.program.compile import compile_program

    codec = AvroCodec(compile_program(program).table("purchase").avro_schema)
    kafka.create_topic(topic)
    producer = Producer({**kafka.conf(), "log_level": 3})
    for i, (amount, _) in enumerate(AMOUNTS):
        producer.produce(topic, key=f"p{i}".encode(), value=codec.encode(
            {"date_time": BASE_MS + i * 1000, "credit_card": 4000 + i, "amount": Decimal(amount)}
        ))
    producer.produce(topic, key=b"bad", value=b"\x07 not avro")
    assert producer.flush(30) == 0


def _records(kafka: Any, topic: str) -> list[Any]:
    from app.connectors.topic_reader import read_topic

    return read_topic(kafka.conf(), topic)


def _header(record: Any, name: str) -> str:
    return next((v.decode() for k, v in record.headers() or [] if k == name), "")


def _host_dir(path: Path, uid: int = 10001, gid: int = 10001) -> Path:
    """A directory the container's user owns, as a volume with fsGroup is."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, gid)
    path.chmod(0o770)
    return path


def test_the_image_is_built_from_debian_packages_and_rebuilt_from_cache(
    built_image: BuiltImage,
) -> None:
    """The base holds Debian's python 3.11; the image keeps the Dockerfile's user, entrypoint,
    healthcheck and venv layout; a second build reuses the base and the layers."""
    assert _podman("image", "exists", built_image.base).returncode == 0
    inspect = _podman("image", "inspect", built_image.name)
    assert inspect.returncode == 0, inspect.stderr
    image = json.loads(inspect.stdout)[0]
    config = image["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["/usr/bin/tini", "--", "/opt/tidemark/entrypoint.sh"]
    assert config["Cmd"] == ["run"]
    # Kept only in the docker format (--format docker): the OCI image format has no healthcheck.
    assert "/healthz" in " ".join(image["Healthcheck"]["Test"])
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["SPARK_HOME"] == "/opt/tidemark/venv/lib/python3.11/site-packages/pyspark"

    probe = _podman(
        "run", "--rm", *built_image.run_flags, "--entrypoint", "sh", built_image.name, "-c",
        'python -c "import sys, pyspark, yaml; print(sys.version_info[:2])"'
        ' && test -f "$SPARK_HOME/bin/spark-submit" && java -version 2>&1 | head -n1'
        " && readlink -f /opt/tidemark/venv/bin/python",
    )
    assert probe.returncode == 0, probe.stderr
    assert "(3, 11)" in probe.stdout
    assert 'version "17.' in probe.stdout
    assert probe.stdout.strip().endswith("/usr/bin/python3.11")  # Debian's, not /usr/local

    again = _build()
    assert again.returncode == 0, again.stderr[-4000:]
    assert f"base {built_image.base} exists" in again.stderr
    assert "Using cache" in again.stderr


def test_the_container_runs_as_uid_10001_on_a_read_only_root(built_image: BuiltImage) -> None:
    result = _podman(
        "run", "--rm", *built_image.run_flags, "--read-only", "--read-only-tmpfs=false",
        "--entrypoint", "sh", built_image.name, "-c",
        "id -u; touch /opt/tidemark/x 2>&1 || true; touch /tmp/x 2>&1 || true",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "10001"
    assert all("Read-only file system" in line for line in lines[1:3]), lines


@pytest.mark.timeout(300)
def test_the_executor_entrypoint_starts_the_spark_executor_jvm(built_image: BuiltImage) -> None:
    """`executor` (how Spark on Kubernetes starts executor pods from this image) starts the
    KubernetesExecutorBackend from the venv's jars, which then dials the driver it was given
    (a closed port here): a Spark connection error, not a missing file or permission."""
    result = _podman(
        "run", "--rm", *built_image.run_flags, "--network", "host",
        "--read-only", "--read-only-tmpfs=false",
        "--security-opt", "no-new-privileges", "--cap-drop", "ALL",
        "--tmpfs", "/tmp:rw,exec,mode=1777", "--tmpfs", "/var/lib/tidemark:rw,mode=1777",
        "--env", "SPARK_DRIVER_URL=spark://CoarseGrainedScheduler@127.0.0.1:1",
        "--env", "SPARK_EXECUTOR_ID=1", "--env", "SPARK_EXECUTOR_POD_IP=127.0.0.1",
        "--env", "SPARK_APPLICATION_ID=app-test", "--env", "SPARK_EXECUTOR_MEMORY=512m",
        "--env", "SPARK_EXECUTOR_POD_NAME=tm-tidemark-exec-1",
        "--env", "SPARK_JAVA_OPT_0=-Dspark.driver.port=1", "--env", "SPARK_LOCAL_IP=127.0.0.1",
        built_image.name, "executor",
        timeout=280,
    )
    assert result.returncode != 0
    assert "KubernetesExecutorBackend: Started daemon" in result.stderr, result.stderr[-3000:]
    assert "Failed to connect to /127.0.0.1:1" in result.stderr
    for problem in ("Permission denied", "No such file", "Read-only file system"):
        assert problem not in result.stderr


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_run_once_of_the_purchases_program_writes_its_outputs(
    built_image: BuiltImage, kafka: Any, unique_topic: Any, tmp_path: Path
) -> None:
    """`tidemark run --once` in the container, the shipped purchases program mounted where the
    image expects it, the work volume a host directory: large purchases reach the output
    topic, the record that is not Avro the dead-letter topic, the checkpoint the volume."""
    topics = {name: unique_topic(name) for name in ("in", "dlq", "large")}
    program = tmp_path / "program.sql"
    program.write_text(_program_text(topics))
    program.chmod(0o644)
    _produce_purchases(kafka, topics["in"], program)
    work = _host_dir(tmp_path / "work")

    result = _podman(
        "run", "--rm", *built_image.run_flags, "--network", "host",
        "--read-only", "--read-only-tmpfs=false", "--user", "10001:10001",
        "--security-opt", "no-new-privileges", "--cap-drop", "ALL",
        "--tmpfs", "/tmp:rw,exec,mode=1777", "--volume", f"{work}:/var/lib/tidemark",
        "--volume", f"{program}:/etc/tidemark/program.sql:ro",
        "--env", f"TIDEMARK_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}",
        "--env", f"TIDEMARK_METRICS_PORT={_free_port()}",
        built_image.name, "run", "--once",
        timeout=840,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    steps = [json.loads(line) for line in result.stderr.splitlines()
             if line.startswith("{") and '"event": "step"' in line]
    assert sum(step["accepted"] for step in steps) == len(AMOUNTS), steps

    large = _records(kafka, topics["large"])
    assert len(large) == LARGE
    assert all(_header(record, "tidemark.waterline") for record in large)
    dead = _records(kafka, topics["dlq"])
    assert [_header(record, "tidemark.error.reason") for record in dead] == ["malformed"]
    assert dead[0].value() == b"\x07 not avro"
    assert (work / "checkpoint" / "purchase").is_dir()
    assert (work / "checkpoint" / "purchase").stat().st_uid == 10001


# ---- the chart's pod on podman -------------------------------------------------------------


def _memory(quantity: str) -> str:
    """A Kubernetes memory quantity as podman's --memory (binary units)."""
    for suffix, unit in (("Gi", "g"), ("Mi", "m"), ("Ki", "k")):
        if quantity.endswith(suffix):
            return quantity[: -len(suffix)] + unit
    return quantity


def pod_as_podman_run(
    docs: list[dict[str, Any]], volumes_dir: Path, name: str
) -> tuple[list[str], dict[str, Any]]:
    """`podman run` arguments (without the image's run flags) doing what the rendered
    StatefulSet's pod does on a node: the container's command, args, env, security contexts,
    volume mounts and memory limit. ConfigMap volumes become directories of their data,
    emptyDirs tmpfs, the checkpoint claim a host directory; secret-sourced env values are
    dummies. Returns the arguments and the container spec."""
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    pod_security = pod.get("securityContext", {})
    security = container.get("securityContext", {})
    uid, gid = pod_security["runAsUser"], pod_security["runAsGroup"]
    assert uid != 0 or not pod_security.get("runAsNonRoot")
    args = ["--name", name, "--network", "host", "--user", f"{uid}:{gid}"]
    if "fsGroup" in pod_security:
        args += ["--group-add", str(pod_security["fsGroup"])]
    assert pod_security.get("seccompProfile", {}).get("type", "RuntimeDefault") == "RuntimeDefault"
    if security.get("readOnlyRootFilesystem"):
        # podman would otherwise add writable tmpfs on /tmp, /run and /var/tmp.
        args += ["--read-only", "--read-only-tmpfs=false"]
    if security.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    args += [f"--cap-drop={cap}" for cap in security.get("capabilities", {}).get("drop", [])]
    args += [f"--cap-add={cap}" for cap in security.get("capabilities", {}).get("add", [])]
    limit = container.get("resources", {}).get("limits", {}).get("memory")
    if limit:
        args += ["--memory", _memory(limit)]
    for item in container.get("env", []):
        if "value" in item:
            value = str(item["value"])
        else:
            assert "secretKeyRef" in item["valueFrom"], item
            value = f"dummy-{item['name'].lower()}"
        args += ["--env", f"{item['name']}={value}"]

    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    claims = {c["metadata"]["name"] for c in statefulset["spec"].get("volumeClaimTemplates", [])}
    config_maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    for mount in container.get("volumeMounts", []):
        target, volume = mount["mountPath"], volumes.get(mount["name"], {})
        suffix = ":ro" if mount.get("readOnly") else ""
        if "configMap" in volume:
            source = volumes_dir / mount["name"]
            source.mkdir(parents=True)
            source.chmod(0o755)
            for key, text in config_maps[volume["configMap"]["name"]]["data"].items():
                (source / key).write_text(text)
                (source / key).chmod(0o644)
            args += ["--volume", f"{source}:{target}{suffix}"]
        elif "emptyDir" in volume:
            args += ["--tmpfs", f"{target}:rw,exec,mode=1777"]
        elif mount["name"] in claims or "persistentVolumeClaim" in volume:
            source = _host_dir(volumes_dir / mount["name"], uid, pod_security.get("fsGroup", gid))
            args += ["--volume", f"{source}:{target}{suffix}"]
        else:
            raise AssertionError(f"no podman equivalent for volume {mount['name']}: {volume}")
    if container.get("command"):
        args += ["--entrypoint", json.dumps(container["command"])]
    return args, container


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, str(error)


@pytest.fixture
def container_name() -> Iterator[str]:
    name = f"tidemark-chart-{uuid.uuid4().hex[:8]}"
    yield name
    _podman("rm", "--force", "--time", "5", name, timeout=120)


@pytest.mark.e2e
@pytest.mark.timeout(1200)
def test_the_charts_pod_runs_on_podman_and_becomes_ready(
    built_image: BuiltImage, kafka: Any, k8s_tools: K8sTools, unique_topic: Any,
    tmp_path: Path, container_name: str,
) -> None:
    """The StatefulSet `helm template` renders (program, config file and Spark conf from its
    ConfigMaps, its env, user, read-only root and volumes) runs the built image: /healthz and
    /readyz answer 200 within the startup probe's budget, the image's HEALTHCHECK passes, the
    program writes its outputs, and a stop within the grace period exits 0."""
    topics = {name: unique_topic(name) for name in ("in", "dlq", "large")}
    program = tmp_path / "program.sql"
    program.write_text(_program_text(topics))
    port = _free_port()
    repository = built_image.name.rpartition(":")[0]
    rendered = subprocess.run(
        [str(k8s_tools.helm), "template", "tm", str(CHART), "--namespace", "streaming",
         "--kube-version", KUBERNETES_VERSION,
         "--set", f"image.repository={repository}",
         "--set", f"kafka.bootstrapServers={kafka.bootstrap_servers}",
         "--set", f"metrics.port={port}",
         "--set", "config.max_records_per_step=1000",
         "--set-file", f"program.inline={program}"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert rendered.returncode == 0, rendered.stderr
    docs = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    args, container = pod_as_podman_run(docs, tmp_path / "volumes", container_name)
    # The chart's default tag is its appVersion: it must name the image this project builds.
    assert container["image"] == built_image.name
    _produce_purchases(kafka, topics["in"], program)

    started = _podman(
        "run", "--detach", *built_image.run_flags, *args,
        container["image"], *container.get("args", []),
    )
    assert started.returncode == 0, started.stderr

    def logs() -> str:
        return _podman("logs", container_name, timeout=60).stderr[-4000:]

    startup = container["startupProbe"]
    deadline = time.monotonic() + startup["periodSeconds"] * startup["failureThreshold"]
    ready = (0, "")
    while time.monotonic() < deadline:
        ready = _get(f"http://127.0.0.1:{port}{container['readinessProbe']['httpGet']['path']}")
        if ready[0] == 200:
            break
        state = _podman("inspect", "--format", "{{.State.Running}}", container_name).stdout
        assert state.strip() == "true", f"the container stopped: {logs()}"
        time.sleep(2)
    assert ready[0] == 200, f"/readyz: {ready}\n{logs()}"
    assert _get(f"http://127.0.0.1:{port}{startup['httpGet']['path']}")[0] == 200
    health = _podman("healthcheck", "run", container_name, timeout=60)
    assert health.returncode == 0, health.stdout + health.stderr

    deadline = time.monotonic() + 180
    while len(_records(kafka, topics["large"])) < LARGE and time.monotonic() < deadline:
        time.sleep(3)
    assert len(_records(kafka, topics["large"])) == LARGE, logs()
    metrics = _get(f"http://127.0.0.1:{port}/metrics")
    assert metrics[0] == 200 and "tidemark_" in metrics[1]

    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    grace = int(statefulset["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])
    stopped = _podman("stop", "--time", str(grace), container_name, timeout=grace + 60)
    assert stopped.returncode == 0, stopped.stderr
    code = _podman("inspect", "--format", "{{.State.ExitCode}}", container_name).stdout.strip()
    assert code == "0", f"exit code {code}\n{logs()}"
