"""A Spark standalone cluster on this machine runs the work in other JVMs and gives the same
windows as local mode (docs/deployment.md).

The cluster (a master and two workers started from the pyspark wheel by
scripts/spark-standalone.sh) runs a streaming TUMBLE aggregation with a watermark, with state
in a checkpoint written by the executors, and its output must equal local mode's. The program-
level comparison through ``tidemark run --spark-master`` is tests/e2e/test_standalone_cluster.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from deploy_support import ROOT, tools_env

JOB = Path(__file__).with_name("standalone_job.py")


def _write_steps(input_dir: Path) -> None:
    """Three steps of purchases, one JSON file each; the last moves the watermark past most
    windows, so append mode emits them (S12 AFTER WATERMARK)."""
    base = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    steps = [
        [(0, 1, 10.0), (5, 2, 20.0), (61, 1, 5.0)],
        [(70, 2, 7.5), (119, 1, 1.0), (130, 1, 3.0)],
        [(200, 2, 4.0), (10, 1, 100.0), (240, 1, 2.0)],
    ]
    input_dir.mkdir()
    for i, step in enumerate(steps):
        lines = [
            json.dumps({
                "ts": (base + timedelta(seconds=s)).isoformat(), "card": card, "amount": amount,
            })
            for s, card, amount in step
        ]
        path = input_dir / f"step-{i}.json"
        path.write_text("\n".join(lines) + "\n")
        # The file source takes files in modification-time order: make it the step order.
        mtime = 1_700_000_000 + 10 * i
        os.utime(path, (mtime, mtime))


def _run(master: str, tmp: Path, python: str) -> dict[str, Any]:
    env = tools_env() | {"PYSPARK_PYTHON": python, "SPARK_LOCAL_DIRS": str(tmp / "scratch")}
    result = subprocess.run(
        [python, str(JOB), master, str(tmp / "input"), str(tmp / f"checkpoint-{master[:5]}")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    parsed: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


@pytest.mark.timeout(900)
def test_s9_standalone_cluster_matches_local_mode_in_executor_jvms(
    spark_standalone: str, project_python: str, tmp_path: Path
) -> None:
    _write_steps(tmp_path / "input")
    local = _run("local[2]", tmp_path, project_python)
    cluster = _run(spark_standalone, tmp_path, project_python)

    assert local["windows"], "the job must finish windows, else the comparison proves nothing"
    assert cluster["windows"] == local["windows"]
    assert ["12:00:00", 2, 1, 20.0] in cluster["windows"]
    assert ["12:01:00", 2, 1, 7.5] in cluster["windows"]

    # Local mode: the Python workers descend from the driver's JVM, the only block manager.
    assert local["worker_jvms"] == [local["driver_jvm"]]
    assert local["block_managers"] == 1
    # Standalone: the work ran in two executor JVMs, neither of them the driver's.
    assert cluster["block_managers"] == 3  # the driver and two executors
    assert len(cluster["worker_jvms"]) == 2
    assert cluster["driver_jvm"] not in cluster["worker_jvms"]
