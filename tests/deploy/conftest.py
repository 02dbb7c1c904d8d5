"""Fixtures of the deployment tests: the Kubernetes tools and a standalone Spark cluster.

The tools are built by ``scripts/install-k8s-tools.sh`` (``go install``); when that build fails
the tests that need them fail with the script's error, so CI (``make test``) never passes
without having checked the chart. A machine without Go may set ``TIDEMARK_K8S_TOOLS_OPTIONAL=1``
to skip them instead, with the same reason; CI does not set it. The standalone
cluster is a master and two workers started by ``scripts/spark-standalone.sh`` in a temporary
directory, so a developer's own cluster under ``var/`` is left alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from deploy_support import (
    ROOT,
    K8sTools,
    start_standalone_cluster,
    stop_standalone_cluster,
    tools_env,
)

#: Set to 1 to skip, not fail, the chart's checks where helm and kubeconform cannot be built.
TOOLS_OPTIONAL = "TIDEMARK_K8S_TOOLS_OPTIONAL"


@pytest.fixture(scope="session")
def k8s_tools() -> K8sTools:
    script = ROOT / "scripts" / "install-k8s-tools.sh"
    result = subprocess.run(
        [str(script)], cwd=ROOT, env=tools_env(), capture_output=True, text=True, timeout=1800
    )
    if result.returncode != 0:
        reason = f"helm/kubeconform could not be built: {result.stderr.strip()[-800:]}"
        if os.environ.get(TOOLS_OPTIONAL) == "1":
            pytest.skip(reason)
        pytest.fail(f"{reason} (set {TOOLS_OPTIONAL}=1 to skip the chart's checks)")
    bin_dir = ROOT / ".cache" / "go" / "bin"
    schemas = ROOT / ".cache" / "kubernetes-json-schema"
    return K8sTools(
        helm=bin_dir / "helm",
        kubeconform=bin_dir / "kubeconform",
        schema_location=str(schemas)
        + "/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}"
        + "/{{ .ResourceKind }}{{ .KindSuffix }}.json",
    )


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The master URL (``spark://127.0.0.1:PORT``) of a running master with two workers."""
    state_dir = tmp_path_factory.mktemp("spark-standalone")
    url = start_standalone_cluster(state_dir)
    try:
        yield url
    finally:
        stop_standalone_cluster(state_dir)


@pytest.fixture(scope="session")
def project_python() -> str:
    """The interpreter Spark's Python workers must use (PYSPARK_PYTHON, ARCHITECTURE.md)."""
    venv_python = ROOT / ".venv" / "bin" / "python"
    return str(venv_python) if venv_python.exists() else sys.executable
