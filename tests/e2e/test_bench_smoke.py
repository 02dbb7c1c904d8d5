"""The throughput harness (``python -m loadtests.bench``) end to end on a small input.

It proves the harness, not a speed (docs/performance.md holds the figures, taken on a quiet
machine): the command produces the workload to the test broker, measures the limit, runs
Tidemark in its own process over the topic until every event is processed, and writes the JSON
result and the plot. Workload (b) so the state figures are exercised too. The peer side needs
the jars of scripts/fetch-spark-peer.sh and is left to the benchmark runs. In the slow suite
(a few minutes): ``.venv/bin/pytest -m slow tests/e2e/test_bench_smoke.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_bench_writes_a_result_and_a_plot_for_tidemark(kafka: Any, tmp_path: Path) -> None:
    out = tmp_path / "results"
    plot = tmp_path / "perf-b.png"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtests.bench",
            "--workload",
            "b",
            "--events",
            "6000",
            "--sides",
            "tidemark",
            "--out",
            str(out),
            "--plot",
            str(plot),
        ],
        cwd=ROOT,
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [path] = out.glob("b-*.json")
    result = json.loads(path.read_text())
    [throughput] = result["throughput"]
    assert throughput["events"] == 6000 and throughput["partitions"] == 2
    assert all(v > 0 for v in throughput["limit"].values()), throughput["limit"]
    [side] = throughput["runs"]
    assert side["side"] == "tidemark" and side["master"] == "local[2]"
    assert side["events_per_s"] > 0 and side["cpu_s_per_m"] > 0, side
    # 6,000 events at 2 ms each span 12 s of event time: one open 1-minute window per key.
    assert side["state"]["rows"] > 0 and side["state_bytes_per_row"] > 0, side
    # One step reads all 6,000 events (the first step of a checkpoint has no start offset),
    # so there is no warm rate to report; later steps read nothing.
    steps = side["step_log"]
    assert steps[0]["events"] is None and all(s["events"] == 0 for s in steps[1:]), steps
    assert side["steady_events_per_s"] is None
    assert plot.is_file() and plot.stat().st_size > 0
