"""NOW() in HAVING and the SELECT list of an aggregate on the state operator (ADR 0022): the
batch time of the step of the group's last change, kept in the group's state, so that a row
written later (an EMIT AFTER WATERMARK window's final row, on a timeout) has the value the
reference evaluator gives it, and a group polled every step without rows writes nothing new.
Each call is made as Spark makes it, with the step's batch time and watermark."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pandas as pd

from app.connectors.avro_codec import AvroCodec
from app.connectors.sink.record import VALUE
from app.program.compile import compile_program
from app.runtime.operators.aggregate import _process, _process_polled, plan_of

PROGRAM = """
CREATE TABLE t (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND,
    k  BIGINT NOT NULL,
    pt AS PROCTIME()
) WITH ('topic' = 'in');
CREATE VIEW by_pt WITH ('topic' = 'o1') AS
SELECT window_end, COUNT(*) AS n, NOW() AS at_
FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(pt), INTERVAL '10' SECOND))
GROUP BY window_end HAVING MAX(ts) <= NOW();
CREATE VIEW by_ts WITH ('topic' = 'o2', 'format' = 'append') AS
SELECT window_end, COUNT(*) AS n, NOW() AS at_
FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY window_end HAVING MAX(ts) <= NOW() EMIT AFTER WATERMARK;
"""
CIRCUIT = compile_program("p.sql", PROGRAM)
PLANS = [plan_of(CIRCUIT.view(v)) for v in ("by_pt", "by_ts")]


class _Group:
    """One group between Spark's calls: its stored record and timeout, and the calls'
    ``GroupState`` (the methods the operator uses)."""

    def __init__(self) -> None:
        self.stored: tuple[Any, ...] | None = None
        self.batch_ms = 0
        self.watermark_ms = 0
        self.timed_out = False

    # GroupState, as the operator reads it in one call.
    @property
    def hasTimedOut(self) -> bool:  # noqa: N802 - pyspark's name
        return self.timed_out

    @property
    def exists(self) -> bool:
        return self.stored is not None

    @property
    def get(self) -> tuple[Any, ...]:
        assert self.stored is not None
        return self.stored

    def update(self, value: tuple[Any, ...]) -> None:
        self.stored = value

    def remove(self) -> None:
        self.stored = None

    def setTimeoutTimestamp(self, ms: int) -> None:  # noqa: N802 - pyspark's name
        pass

    def setTimeoutDuration(self, ms: int) -> None:  # noqa: N802 - pyspark's name
        pass

    def getCurrentProcessingTimeMs(self) -> int:  # noqa: N802 - pyspark's name
        return self.batch_ms

    def getCurrentWatermarkMs(self) -> int:  # noqa: N802 - pyspark's name
        return self.watermark_ms


def _frames(view: int, times: list[int]) -> Iterator[pd.DataFrame]:
    """The step's rows of a group as the query projects them: each aggregate's arguments."""
    calls = PLANS[view].aggregate.aggregates
    args = [json.dumps({str(i): {"0": ts} for i, (_, c) in enumerate(calls) if c.args})
            for ts in times]
    yield pd.DataFrame({"_args": args, "_step": [1] * len(times), "_partition": [0] * len(times),
                        "_offset": list(range(len(times)))})


def _call(process: Any, view: int, group: _Group, batch_ms: int, times: list[int],
          watermark_ms: int = 0) -> list[tuple[int, int, int]]:
    """One call of the group in a step: with the step's rows, or none (its timeout fired)."""
    group.batch_ms, group.watermark_ms, group.timed_out = batch_ms, watermark_ms, not times
    key = (view, json.dumps({"0": 10_000}))
    frames = _frames(view, times) if times else iter(())
    out = pd.concat(list(process(PLANS, key, frames, group)))
    output = CIRCUIT.view(("by_pt", "by_ts")[view]).output
    assert output is not None
    codec = AvroCodec(output.value_schema)
    values = [codec.decode(v) for v in out[VALUE].tolist() if v is not None]
    return [(v["window_end"], v["n"], v["at_"]) for v in values]


def test_s12_now_after_a_polled_aggregate_is_the_last_changes_batch_time() -> None:
    """Default EMIT on the polled operator: a step with the group's rows recomputes it (NOW()
    that step's batch time, HAVING with it); a step that only polls it writes nothing."""
    group = _Group()
    # 4 s: MAX(ts) 4.5 s is after NOW(): HAVING fails, nothing is written.
    assert _call(_process_polled, 0, group, 4_000, [4_500]) == []
    assert _call(_process_polled, 0, group, 5_000, []) == []  # polled: not recomputed
    assert _call(_process_polled, 0, group, 6_000, [3_000]) == [(10_000, 2, 6_000)]
    assert _call(_process_polled, 0, group, 7_000, []) == []  # polled: unchanged
    assert _call(_process_polled, 0, group, 10_500, []) == []  # complete: freed
    assert group.stored is None


def test_s12_after_watermark_final_row_keeps_now_of_its_last_change() -> None:
    """EMIT AFTER WATERMARK on an event-time window: the final row, written by the timeout
    in a later step, has NOW() = the batch time of the step of the window's last rows."""
    group = _Group()
    assert _call(_process, 1, group, 4_000, [2_000]) == []
    assert _call(_process, 1, group, 6_000, [5_000, 3_000]) == []
    assert _call(_process, 1, group, 13_000, [], watermark_ms=11_000) == [(10_000, 3, 6_000)]
    assert group.stored is None
    # The same on the polled operator, which reads the watermark each step.
    polled = _Group()
    assert _call(_process_polled, 1, polled, 4_000, [2_000]) == []
    assert _call(_process_polled, 1, polled, 6_000, [5_000], watermark_ms=1_000) == []
    assert _call(_process_polled, 1, polled, 7_000, [], watermark_ms=4_000) == []
    assert _call(_process_polled, 1, polled, 13_000, [], watermark_ms=11_000) == [
        (10_000, 2, 6_000)]
