"""Paths and helpers shared by the deployment tests (a uniquely named module, so test files can
import it without clashing with other directories' conftest modules)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "tidemark"
KUBERNETES_VERSION = "1.33.0"


@dataclass(frozen=True)
class K8sTools:
    """Paths of the built tools and the offline schema directory kubeconform reads."""

    helm: Path
    kubeconform: Path
    schema_location: str


def helm_run(
    tools: K8sTools, *args: str, values: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``helm ARGS`` for the Kubernetes version the chart is validated against."""
    cmd = [str(tools.helm), *args, "--kube-version", KUBERNETES_VERSION]
    if values is not None:
        cmd += ["-f", str(values)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


def render(
    tools: K8sTools, values: Path | None, *sets: str, release: str = "tm",
    namespace: str = "streaming",
) -> str:
    """``helm template`` of the chart with a values file and ``--set`` assignments."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    for assignment in sets:
        args += ["--set", assignment]
    result = helm_run(tools, *args, values=values)
    assert result.returncode == 0, result.stderr
    return result.stdout


def manifests(rendered: str) -> list[dict[str, Any]]:
    """The objects of a rendered chart."""
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def one(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    """The single object of ``kind`` whose name ends with ``suffix``."""
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    names = [d["metadata"]["name"] for d in found]
    assert len(found) == 1, f"expected one {kind}*{suffix}, got {names}"
    return found[0]


def tools_env() -> dict[str, str]:
    """The environment with the project's venv first on PATH (tidemark, python, hadolint)."""
    env = dict(os.environ)
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def start_standalone_cluster(state_dir: Path) -> str:
    """Start master + two workers with the project's script; returns the master URL."""
    env = tools_env()
    env["SPARK_STANDALONE_DIR"] = str(state_dir)
    result = subprocess.run(
        [str(ROOT / "scripts" / "spark-standalone.sh"), "start"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )
    if result.returncode != 0:
        raise RuntimeError(f"spark-standalone.sh start failed: {result.stderr}")
    return result.stdout.strip().splitlines()[-1]


def stop_standalone_cluster(state_dir: Path) -> None:
    env = tools_env()
    env["SPARK_STANDALONE_DIR"] = str(state_dir)
    subprocess.run(
        [str(ROOT / "scripts" / "spark-standalone.sh"), "stop"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
