"""The benchmark's plot (loadtests.bench.plot): steady and whole-run rates side by side."""

from __future__ import annotations

from pathlib import Path

from loadtests.bench import plot


def _run(side: str, steady: float | None, whole: float) -> dict[str, object]:
    return {
        "side": side,
        "master": "local[2]",
        "partitions": 2,
        "steady_events_per_s": steady,
        "events_per_s": whole,
    }


def test_a_run_without_a_steady_rate_still_plots(tmp_path: Path) -> None:
    # A short run counts too few warm steps for a steady rate (steady_rate returns None);
    # its whole-run bar must still be drawn rather than the plot failing.
    result = {
        "workload": "b",
        "throughput": [
            {
                "limit": {"consume_and_decode_per_s": 300_000.0},
                "runs": [_run("tidemark", 150_000.0, 100_000.0), _run("peer", None, 90_000.0)],
            }
        ],
    }
    path = tmp_path / "perf.png"
    plot(result, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
