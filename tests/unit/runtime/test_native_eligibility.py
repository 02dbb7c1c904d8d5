"""Which views run on Spark's native aggregation (app/runtime/operators/native_aggregate.py) and
which stay on the shared Python operator: only where the native arithmetic is exactly the
oracle's."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.program.compile import compile_program
from app.runtime.operators.native_aggregate_support import is_native
from app.runtime.planner.physical import physical_plan

TABLE = """
CREATE TABLE t (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    k   BIGINT NOT NULL,
    x   DOUBLE,
    d   DECIMAL(10, 2),
    s   VARCHAR
) WITH ('topic' = 'in');
"""

WINDOWED = """
CREATE VIEW v WITH ('topic' = 'out'{fmt}) AS
SELECT window_start, window_end, k, {aggs}
FROM TABLE({fn}(TABLE t, DESCRIPTOR(ts), {size}))
{where}GROUP BY window_start, window_end, k
{emit};
"""


def _view(
    aggs: str = "COUNT(*) AS n",
    emit: str = "EMIT AFTER WATERMARK",
    fmt: str = "",
    where: str = "",
    fn: str = "TUMBLE",
    size: str = "INTERVAL '1' MINUTE",
) -> bool:
    text = TABLE + WINDOWED.format(aggs=aggs, emit=emit, fmt=fmt, where=where, fn=fn, size=size)
    circuit = compile_program("p.sql", text)
    return is_native(circuit, circuit.view("v"))


@pytest.mark.parametrize(
    "aggs",
    [
        "COUNT(*) AS n",
        "COUNT(x) AS n",
        "SUM(k) AS total, AVG(k) AS mean",
        "MIN(s) AS lo, MAX(d) AS hi, MAX(ts) AS last",
        "ARG_MAX(s, k) AS best, ARG_MIN(x, ts) AS worst",
    ],
)
def test_exact_aggregates_after_watermark_run_natively(aggs: str) -> None:
    assert _view(aggs)


@pytest.mark.parametrize(
    "aggs",
    [
        "SUM(x) AS total",  # floating sums: the oracle's exact sum, not Spark's running one
        "AVG(d) AS mean",  # DECIMAL sums keep the shared operator's arithmetic
        "MAX(x) AS hi",  # NaN and -0.0 order differently
        "ARG_MAX(s, x) AS best",
        "COUNT(DISTINCT s) AS kinds",
    ],
)
def test_inexact_aggregates_stay_on_the_shared_operator(aggs: str) -> None:
    assert not _view(aggs)


@pytest.mark.parametrize(
    "emit",
    ["", "EMIT STREAM", "EMIT AFTER DELAY INTERVAL '1' SECOND"],
)
def test_only_after_watermark_runs_natively_s12(emit: str) -> None:
    assert not _view(emit=emit)
    # STREAM AFTER WATERMARK also writes one final row per window (paper listing 13).
    assert _view(emit="EMIT STREAM AFTER WATERMARK", fmt=", 'format' = 'changelog'")


def test_every_format_hop_and_where_run_natively_s9_s13() -> None:
    assert _view(fmt=", 'format' = 'append'")
    assert _view(fmt=", 'format' = 'changelog'")
    assert _view(where="WHERE k > 3 AND window_start > TIMESTAMP '2026-01-01 00:00:00'\n")
    assert _view(fn="HOP", size="INTERVAL '20' SECOND, INTERVAL '1' MINUTE")


def test_state_operators_list_native_views_then_the_shared_operator() -> None:
    text = (
        TABLE
        + WINDOWED.format(
            aggs="SUM(x) AS total",
            emit="EMIT STREAM",
            fmt="",
            where="",
            fn="TUMBLE",
            size="INTERVAL '1' MINUTE",
        )
        + WINDOWED.format(
            aggs="COUNT(*) AS n",
            emit="EMIT AFTER WATERMARK",
            fmt="",
            where="",
            fn="TUMBLE",
            size="INTERVAL '1' MINUTE",
        )
        .replace("VIEW v ", "VIEW w ")
        .replace("'out'", "'out2'")
    )
    circuit = compile_program("p.sql", text)
    assert list(physical_plan(circuit).query_of("t").state_operators) == ["w", "v"]


def _pipeline_plan(name: str) -> tuple[str | None, ...]:
    path = Path(__file__).resolve().parents[3] / "pipelines" / f"{name}.sql"
    circuit = compile_program(str(path), path.read_text())
    (query,) = physical_plan(circuit).queries
    return query.state_operators


def test_state_operators_list_a_branch_top_down_as_spark_does() -> None:
    # Spark lists a plan's stateful operators from the top: a cascade's last level first, and
    # each output view's branch computes the levels it reads again.
    assert _pipeline_plan("click_rollups") == (
        "per_hour", "per_minute", "per_day", "per_hour", "per_minute",
    )
    # NEXMark Q7 as a join: the join, then the per-window maximum on its right side.
    assert _pipeline_plan("nexmark_q7") == ("max_bid", "max_bid_join", "max_price")
