"""The throughput harness (``python -m loadtests.bench``) end to end on a small input.

It proves the harness, not a speed (docs/performance.md holds the figures, taken on a quiet
machine): the command produces the workload to the test broker, measures the limit, runs
Tidemark in its own process over the topic until every event is processed, and writes the JSON
result and the plot. Workload (b) so the state figures are exercised too; workload (d) for a
workload of two input topics, whose join it checks row for row. The peer side needs
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


def _bench(
    kafka: Any,
    workload: str,
    events: int,
    out: Path,
    plot: Path,
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``loadtests.bench`` on Tidemark's side alone; its result."""
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtests.bench",
            "--workload",
            workload,
            "--events",
            str(events),
            "--sides",
            "tidemark",
            "--out",
            str(out),
            "--plot",
            str(plot),
            *extra,
        ],
        cwd=ROOT,
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [path] = out.glob(f"{workload}-*.json")
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def test_bench_writes_a_result_and_a_plot_for_tidemark(kafka: Any, tmp_path: Path) -> None:
    out = tmp_path / "results"
    plot = tmp_path / "perf-b.png"
    result = _bench(kafka, "b", 6000, out, plot)
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


def test_bench_runs_the_join_of_two_topics_and_writes_every_match(
    kafka: Any, tmp_path: Path
) -> None:
    """Workload (d): 3,000 events split between the auctions' and the bids' topics, read in
    one step (nothing is late before a table's first waterline, S5), so the output is the
    join of all of them: each bid with the auction of its id at most ten minutes before."""
    if str(ROOT) not in sys.path:  # the harness is not installed: import it as -m does
        sys.path.insert(0, str(ROOT))
    from loadtests.bench import pair_shape_of
    from loadtests.generator import AUCTION, pair_timeline

    result = _bench(kafka, "d", 3000, tmp_path / "results", tmp_path / "perf-d.png")
    [throughput] = result["throughput"]
    assert sorted(throughput["topics"]) == ["auctions", "bids"]
    assert throughput["limit"]["consume_per_s"] > 0
    [side] = throughput["runs"]
    assert side["step_log"][0]["events"] is None
    assert all(s["events"] == 0 for s in side["step_log"][1:]), side["step_log"]
    opened: dict[int, list[int]] = {}
    bids = []
    for _i, kind, row, _late in pair_timeline(pair_shape_of("d"), 3000):
        if kind == AUCTION:
            opened.setdefault(row["id"], []).append(row["date_time"])
        else:
            bids.append(row)
    matches = sum(
        1 for b in bids for t in opened.get(b["auction"], []) if t <= b["date_time"] <= t + 600_000
    )
    assert 2_500 < matches <= len(bids)
    assert side["output_records"] == matches
    # Spark's join holds each side's rows until the watermark passes the bound.
    assert side["state"]["rows"] > 0


def test_bench_runs_avro_confluent_beside_avro_on_the_same_events(
    kafka: Any, schema_registry: str, tmp_path: Path
) -> None:
    """``--encodings avro avro-confluent``: a second topic of the same events in the Confluent
    wire format; Tidemark reads it and writes the same rows, framed with the schema id it
    registered for the output topic."""
    from app.connectors.confluent_avro import unframe
    from app.connectors.topic_reader import read_topic

    result = _bench(
        kafka, "a", 3000, tmp_path / "results", tmp_path / "perf-a.png",
        ("--encodings", "avro", "avro-confluent"), {"SCHEMA_REGISTRY_URL": schema_registry},
    )
    plain, framed = result["throughput"]
    assert (plain["encoding"], framed["encoding"]) == ("avro", "avro-confluent")
    [plain_run], [framed_run] = plain["runs"], framed["runs"]
    assert framed_run["encoding"] == "avro-confluent"
    assert framed_run["output_records"] == plain_run["output_records"] > 0
    out = f"{framed['topic']}.tidemark.2.out"
    ids = {unframe(m.value())[0] for m in read_topic(kafka.conf(), out)}
    assert len(ids) == 1, ids
