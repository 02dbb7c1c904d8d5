"""The steady-state throughput of a benchmark side, from its steps (loadtests.bench)."""

from __future__ import annotations

from loadtests.bench import steady_rate
from loadtests.side import _result, _steps


def _progress(batch: int, stamp: str, ms: int, start: object, end: object) -> dict[str, object]:
    return {
        "runId": "r",
        "batchId": batch,
        "timestamp": stamp,
        "durationMs": {"triggerExecution": ms},
        "sources": [{"startOffset": start, "endOffset": end}],
    }


def test_events_come_from_either_sides_offsets_and_repeated_events_count_once() -> None:
    peer = [
        _progress(0, "2026-11-22T00:00:00.000Z", 4000, None, '{"t":{"0":100,"1":100}}'),
        _progress(
            1,
            "2026-11-22T00:00:04.000Z",
            1000,
            '{"t":{"0":100,"1":100}}',
            '{"t":{"0":150,"1":120}}',
        ),
    ]
    ours = _progress(
        7,
        "2026-11-22T00:00:09.500Z",
        500,
        {"partitions": {"0": 10, "1": 10}, "step": 1},
        {"partitions": {"0": 30, "1": 40}, "step": 2},
    )
    steps = _steps([*peer, peer[1], ours])  # the peer's listener and recentProgress overlap
    assert [s["events"] for s in steps] == [None, 70, 50]
    assert [s["start_ms"] % 100_000 for s in steps] == [0, 4000, 9500]
    assert _result(1.0, [*peer, peer[1], ours])["steps"] == 3


def test_the_warm_up_steps_are_left_out_and_the_gaps_between_steps_count() -> None:
    log = [
        {"start_ms": 0, "ms": 9000, "events": 200_000},  # cold: start-up, JIT
        {"start_ms": 9500, "ms": 0, "events": 0},  # no input: not a reading step
        {"start_ms": 10_000, "ms": 1500, "events": 200_000},
        {"start_ms": 12_000, "ms": 500, "events": 0},  # state eviction between: counts
        {"start_ms": 13_000, "ms": 1000, "events": 100_000},
    ]
    # Skipping the cold step: 300,000 events from 10.0 s to 14.0 s.
    assert steady_rate(log, skip=1) == 75_000.0
    assert steady_rate(log[:3], skip=1) is None  # one counted step says nothing about a rate
    assert steady_rate([{**log[0], "events": None}, *log[1:]], skip=1) == 75_000.0
    # By default the first half of the reading steps (at least one) is warm-up.
    assert steady_rate(log) == steady_rate(log, skip=1)
    six = [{"start_ms": 1000 * i, "ms": 1000, "events": 1000 * (i + 1)} for i in range(6)]
    assert steady_rate(six) == (4000 + 5000 + 6000) / 3
