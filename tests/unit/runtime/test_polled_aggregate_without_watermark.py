"""The state operator's processing-time path without a Spark watermark (S11, ADR 0022): a
table without LATENESS has none, and ``GroupState.getCurrentWatermarkMs`` raises there. A
window on a processing-time attribute completes by the step's batch time, and a group
without a time key never completes, so neither reads the watermark; driven here with
pyspark's own GroupState, as Spark calls the operator step by step."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import Row
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import BinaryType, StructField, StructType

from app.connectors.avro_codec import AvroCodec
from app.connectors.sink.record import VALUE
from app.program.compile import compile_program
from app.runtime.operators.aggregate import _process_polled, plan_of

PROGRAM = """
CREATE TABLE u (k BIGINT NOT NULL, pt AS PROCTIME()) WITH ('topic' = 'in');
CREATE VIEW final_ WITH ('topic' = 'out1') AS SELECT window_start, window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE u, DESCRIPTOR(pt), INTERVAL '10' SECOND))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;
CREATE VIEW upsert_ WITH ('topic' = 'out2') AS SELECT window_start, window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE u, DESCRIPTOR(pt), INTERVAL '10' SECOND))
GROUP BY window_start, window_end;
CREATE VIEW per_k WITH ('topic' = 'out3') AS SELECT k, COUNT(*) AS n FROM u GROUP BY k;
"""
VIEWS = ("final_", "upsert_", "per_k")


class _State:
    """One group's state across steps, as Spark's state store keeps it between calls."""

    def __init__(self) -> None:
        self.value: tuple[Any, ...] | None = None
        self.timeout = -1

    def call(self, batch_ms: int, timed_out: bool = False) -> GroupState:
        return GroupState(
            Row(*self.value) if self.value is not None else Row(),
            batch_ms, GroupState.NO_TIMESTAMP, GroupStateTimeout.ProcessingTimeTimeout,
            timed_out, False,  # no watermark: a table without LATENESS
            self.value is not None, False, False, self.timeout, b"",
            StructType([StructField("acc", BinaryType())]),
        )

    def keep(self, state: GroupState) -> None:
        self.value = state.getOption
        self.timeout = state._timeout_timestamp  # noqa: SLF001 - what Spark reads back


def _rows(n: int) -> Iterator[pd.DataFrame]:
    yield pd.DataFrame({"_args": ["{}"] * n, "_step": [1] * n, "_partition": [0] * n,
                        "_offset": list(range(n))})


def _step(view: int, key: str, store: _State, batch_ms: int, n: int) -> list[dict[str, Any]]:
    """One call of the group: ``n`` rows of the step, or none when its timeout fired."""
    circuit = compile_program("p.sql", PROGRAM)
    plans = [plan_of(circuit.view(v)) for v in VIEWS]
    state = store.call(batch_ms, timed_out=n == 0)
    frames = _rows(n) if n else iter(())
    out = pd.concat(list(_process_polled(plans, (view, key), frames, state)))
    store.keep(state)
    output = circuit.view(VIEWS[view]).output
    assert output is not None
    codec = AvroCodec(output.value_schema)
    return [codec.decode(v) for v in out[VALUE].tolist() if v is not None]


@pytest.mark.parametrize(("view", "written_in_step_1"), [(0, 0), (1, 1)])
def test_s11_a_proctime_window_completes_by_batch_time_without_a_watermark(
        view: int, written_in_step_1: int) -> None:
    window = json.dumps({"0": 0, "1": 10_000})
    store = _State()
    first = _step(view, window, store, 4_000, 3)
    assert len(first) == written_in_step_1
    assert store.value is not None
    assert store.timeout == 9_999  # called again in the first step at or after the end
    # Spark times the group out in a step without input whose batch time reaches the end.
    final = _step(view, window, store, 10_500, 0)
    assert [(v["window_end"], v["n"]) for v in final] == ([(10_000, 3)] if view == 0 else [])
    assert store.value is None  # complete: freed


def test_s11_a_group_without_a_time_key_in_a_polled_operator_reads_no_watermark() -> None:
    store = _State()
    key = json.dumps({"0": 7})
    assert [(v["k"], v["n"]) for v in _step(2, key, store, 4_000, 2)] == [(7, 2)]
    assert [(v["k"], v["n"]) for v in _step(2, key, store, 5_000, 1)] == [(7, 3)]
    assert store.value is not None  # never complete: kept
