"""Native aggregation's completed groups finish column-wise to the bytes of the per-row path.

``finish_rows`` (the shared operator's accumulators, HAVING, SELECT and ``encode_record``)
stays the definition; ``finish_columns`` + ``encode_view_rows`` must write the same records
for every view whose finishing is only renaming (``columnar_outputs``), in every format, with
NULL results, empty SUMs and extreme integers. A SUM past BIGINT goes back to the per-row path.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.program.compile import compile_program
from app.runtime.operators.aggregate import _Plan, plan_of
from app.runtime.operators.native_aggregate import columnar_outputs, finish_columns, finish_rows
from app.runtime.operators.native_aggregate_support import is_native
from app.runtime.step.encode import encode_view_rows

TABLE = """
CREATE TABLE t (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    k   BIGINT,
    n   INT NOT NULL,
    s   VARCHAR,
    x   DOUBLE,
    day DATE,
    b   BOOLEAN
) WITH ('topic' = 'in');
"""

VIEW = """
CREATE VIEW v WITH ('topic' = 'out'{fmt}) AS
SELECT {select}
FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY {group}
{having}EMIT AFTER WATERMARK;
"""

B_SELECT = "window_start, window_end, s, COUNT(*) AS c, SUM(n) AS total, MAX(n) AS m"
#: (b)'s shape with a BIGINT sum, whose total Spark hands over as DECIMAL(38,0).
B_BIGINT = "window_start, window_end, s, COUNT(*) AS c, SUM(k) AS total, MAX(n) AS m"
RENAMED = (
    "s AS who, window_end AS we, MIN(s) AS lo, COUNT(x) AS cx, SUM(k) AS sk, "
    "MAX(ts) AS last, MIN(day) AS first_day, MIN(k) AS lowest, MAX(b) AS any_b"
)


def _plan(select: str, group: str, fmt: str = "", having: str = "") -> _Plan:
    text = TABLE + VIEW.format(select=select, group=group, fmt=fmt, having=having)
    circuit = compile_program("p.sql", text)
    view = circuit.view("v")
    assert is_native(circuit, view)
    return plan_of(view)


#: The Arrow type of each native column, as Spark hands it over (circuit units: ms, days).
_ARROW = {
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "VARCHAR": pa.string(),
    "TIMESTAMP": pa.int64(),
    "DATE": pa.int32(),
    "BOOLEAN": pa.bool_(),
}
_LIMITS = {"INT": 2**31 - 1, "BIGINT": 2**63 - 1, "TIMESTAMP": 2**52, "DATE": 2**20}


def _values(kind: str, nullable: bool) -> st.SearchStrategy[Any]:
    if kind == "VARCHAR":
        base: st.SearchStrategy[Any] = st.text(max_size=6)
    elif kind == "BOOLEAN":
        base = st.booleans()
    else:
        top = _LIMITS[kind]
        base = st.integers(-top - (kind != "TIMESTAMP"), top)
    return st.one_of(st.none(), base) if nullable else base


def _columns(plan: _Plan) -> list[tuple[str, pa.DataType, st.SearchStrategy[Any]]]:
    """The native branch's columns for ``plan``: ``_k<j>``, ``_a<i>_n``/``_a<i>_v``."""
    out = []
    for j, kind in enumerate(plan.key_kinds):
        out.append((f"_k{j}", _ARROW[kind], _values(kind, nullable=kind == "VARCHAR")))
    for i, (_, call) in enumerate(plan.aggregate.aggregates):
        fn = call.fn.upper()
        if fn in ("COUNT", "SUM"):
            out.append((f"_a{i}_n", pa.int64(), st.integers(0, 2**40)))
        if fn == "SUM" and plan.arg_kinds[i][0] == "INT":
            # One BIGINT sum (try_sum: NULL past BIGINT on the way).
            sums = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))
            out.append((f"_a{i}_v", pa.int64(), sums))
        elif fn == "SUM":
            sums = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1).map(Decimal))
            out.append((f"_a{i}_v", pa.decimal128(38, 0), sums))
        elif fn in ("MIN", "MAX"):
            kind = plan.arg_kinds[i][0]
            out.append((f"_a{i}_v", _ARROW[kind], _values(kind, nullable=True)))
    out.append(("_ptime", pa.int64(), st.integers(0, 2**45)))
    return out


@st.composite
def _batches(draw: st.DrawFn, plan: _Plan) -> pa.RecordBatch:
    rows = draw(st.integers(0, 12))
    columns = _columns(plan)
    data = {name: [draw(values) for _ in range(rows)] for name, _, values in columns}
    # An empty SUM (no non-null input) has a NULL total, as Spark gives it.
    for name in list(data):
        if name.endswith("_v") and f"{name[:-2]}_n" in data:  # SUM: a count and a total
            counts = data[f"{name[:-2]}_n"]
            data[name] = [None if c == 0 else v for c, v in zip(counts, data[name], strict=True)]
    return pa.RecordBatch.from_arrays(
        [pa.array(data[name], kind) for name, kind, _ in columns], names=[n for n, _, _ in columns]
    )


def _both(plan: _Plan, batch: pa.RecordBatch) -> tuple[dict[str, Any], dict[str, Any]]:
    outputs = columnar_outputs(plan)
    assert outputs is not None
    finished = finish_columns(batch, plan, outputs)
    assert finished is not None
    (columnar,) = list(encode_view_rows(iter([finished]), plan.encoding))
    return columnar.to_pydict(), finish_rows(batch, plan).to_pydict()


PLANS = {
    "b-append": _plan(B_SELECT, "window_start, window_end, s"),
    "b-upsert": _plan(B_SELECT, "window_start, window_end, s", fmt=", 'format' = 'upsert'"),
    "b-changelog": _plan(B_SELECT, "window_start, window_end, s", fmt=", 'format' = 'changelog'"),
    "b-bigint": _plan(B_BIGINT, "window_start, window_end, s"),
    "renamed": _plan(RENAMED, "window_end, s"),
}


@pytest.mark.parametrize("name", sorted(PLANS))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_columnar_finish_writes_the_per_row_bytes(name: str, data: st.DataObject) -> None:
    plan = PLANS[name]
    batch = data.draw(_batches(plan))
    columnar, per_row = _both(plan, batch)
    assert columnar == per_row


def test_a_sum_past_bigint_is_left_to_the_per_row_path() -> None:
    plan = PLANS["b-bigint"]
    outputs = columnar_outputs(plan)
    assert outputs is not None
    batch = pa.RecordBatch.from_pydict(
        {
            "_k0": pa.array([0], pa.int64()),
            "_k1": pa.array([60_000], pa.int64()),
            "_k2": pa.array(["u"], pa.string()),
            "_a0_n": pa.array([3], pa.int64()),
            "_a1_n": pa.array([3], pa.int64()),
            "_a1_v": pa.array([Decimal(2**63)], pa.decimal128(38, 0)),
            "_a2_v": pa.array([7], pa.int32()),
            "_ptime": pa.array([0], pa.int64()),
        }
    )
    assert finish_columns(batch, plan, outputs) is None


@pytest.mark.parametrize(
    ("select", "having"),
    [
        ("window_end, s, COUNT(*) + 1 AS c", ""),  # an expression over a result
        ("window_end, s, COUNT(*) AS c", "HAVING COUNT(*) > 1\n"),
        ("window_end, s, AVG(n) AS mean", ""),  # AVG divides: left to the oracle's code
    ],
)
def test_views_with_more_than_renaming_finish_row_by_row(select: str, having: str) -> None:
    assert columnar_outputs(_plan(select, "window_end, s", having=having)) is None
