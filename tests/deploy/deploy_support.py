"""Paths and helpers shared by the deployment tests (a uniquely named module, so test files can
import it without clashing with other directories' conftest modules)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "tidemark"
KUBERNETES_VERSION = "1.33.0"


@dataclass(frozen=True)
class K8sTools:
    """Paths of the built tools and the offline schema directory kubeconform reads."""

    helm: Path
    kubeconform: Path
    schema_location: str


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
