"""The latency probe of the benchmark (loadtests/latency.py) end to end: a continuous
Tidemark service in its own process over a real broker, the generator at a fixed rate, the
read_committed consumer, and the attribution of each output to its input (workload a).

It proves the harness, not a speed: under any load every on-time input that passes the
filter must come out (S8), be attributed to exactly its input record, and have a positive
latency; the figures themselves are for a quiet machine (docs/performance.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


# In the slow suite (CI's budget): `pytest -m slow -k latency_probe`.
@pytest.mark.slow
def test_latency_probe_attributes_every_filtered_output_of_a_running_service(
    kafka: Any, tmp_path: Path
) -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # loadtests is not an installed package
    from loadtests.latency import measure

    r = measure(
        kafka.bootstrap_servers,
        "a",
        "tidemark",
        "local[2]",
        2,
        rate=100,
        work=tmp_path,
        warmup_s=10,
        measure_s=20,
        tail_s=60,
    )
    # ~2000 events in the measured period, about half pass `n > 500`, 1% made late.
    assert r["count"] > 500, r
    assert r["missing"] == 0 and r["unmatched"] == 0 and r["early"] == 0, r
    assert r["lower_bound"] is False
    assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"], r
    assert r["dues"] == r["count"]  # stateless: one due event per output record
    assert abs(r["rate_achieved"] - 100) < 10, r
