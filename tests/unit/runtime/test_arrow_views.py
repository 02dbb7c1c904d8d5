"""Step views over Arrow in the source's task (ADR 0007) give the reference evaluator's rows.

The Arrow evaluator takes only views it computes exactly as Spark does; the rows it keeps are
held here to :func:`app.circuit.functions.evaluate` (the oracle's scalar semantics: SQL NULL,
three-valued logic) over generated rows and generated WHERE clauses, and everything it must
leave to Spark is named."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.circuit.functions import evaluate as reference_evaluate
from app.circuit.ir import Filter
from app.program.compile import compile_program
from app.runtime.operators.arrow_views import arrow_evaluable, slice_computable, view_rows

TABLE = """
CREATE TABLE t (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    i  INT,
    b  BIGINT,
    s  VARCHAR,
    e  TIMESTAMP,
    d  DATE,
    f  BOOLEAN,
    x  DOUBLE,
    m  DECIMAL(10, 2)
) WITH ('topic' = 't');
"""

COLUMNS = ["ts", "i", "b", "s", "e", "d", "f", "x", "m"]

_INTS = st.one_of(st.none(), st.integers(-3, 3))
_ROW = st.fixed_dictionaries(
    {
        "ts": st.integers(0, 5_000),
        "i": _INTS,
        "b": st.one_of(st.none(), st.integers(-(2**40), 2**40), st.integers(-3, 3)),
        "s": st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "é", "B"])),
        "e": st.one_of(st.none(), st.integers(-2_000, 2_000)),
        "d": st.one_of(st.none(), st.integers(-3, 3)),
        "f": st.one_of(st.none(), st.booleans()),
    }
)

_LITERALS = {
    "i": st.integers(-4, 4).map(str),
    "b": st.integers(-4, 4).map(str),
    "s": st.sampled_from(["''", "'a'", "'b'", "'ab'", "'é'"]),
    "e": st.integers(-2, 2).map(lambda n: f"TIMESTAMP '1970-01-01 00:00:0{n + 5}'"),
    "ts": st.integers(0, 5).map(lambda n: f"TIMESTAMP '1970-01-01 00:00:0{n}'"),
    "d": st.integers(1, 3).map(lambda n: f"DATE '1970-01-0{n}'"),
    "f": st.sampled_from(["TRUE", "FALSE"]),
}
_SAME_FAMILY = {"i": ["b"], "b": ["i"], "e": ["ts"], "ts": ["e"], "s": [], "d": [], "f": []}
_OPS = ["=", "<>", "<", "<=", ">", ">="]


@st.composite
def _atom(draw: Any) -> str:
    column = draw(st.sampled_from(sorted(_LITERALS)))
    shape = draw(st.sampled_from(["literal", "column", "null", "flipped"]))
    op = draw(st.sampled_from(_OPS))
    if shape == "null":
        return f"{column} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if shape == "column" and _SAME_FAMILY[column]:
        return f"{column} {op} {draw(st.sampled_from(_SAME_FAMILY[column]))}"
    literal = draw(_LITERALS[column])
    return f"{literal} {op} {column}" if shape == "flipped" else f"{column} {op} {literal}"


_PREDICATE = st.recursive(
    _atom() | st.just("f"),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda p: f"({p[0]} AND {p[1]})"),
        st.tuples(inner, inner).map(lambda p: f"({p[0]} OR {p[1]})"),
        inner.map(lambda p: f"NOT ({p})"),
    ),
    max_leaves=5,
)


def _batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """Rows (circuit units) as the source hands a slice's accepted rows over."""
    utc = pa.timestamp("us", tz="UTC")
    ms = pa.timestamp("ms")
    return pa.RecordBatch.from_pydict(
        {
            "ts": pa.array([r["ts"] for r in rows], pa.int64()).cast(ms).cast(utc),
            "i": pa.array([r["i"] for r in rows], pa.int32()),
            "b": pa.array([r["b"] for r in rows], pa.int64()),
            "s": pa.array([r["s"] for r in rows], pa.string()),
            "e": pa.array([r["e"] for r in rows], pa.int64()).cast(ms).cast(utc),
            "d": pa.array([r["d"] for r in rows], pa.int32()).cast(pa.date32()),
            "f": pa.array([r["f"] for r in rows], pa.bool_()),
            "x": pa.array([0.5] * len(rows), pa.float64()),
            "m": pa.array([None] * len(rows), pa.decimal128(10, 2)),
        }
    )


def _circuit_rows(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """Rows as the reference holds them: TIMESTAMP as epoch ms, DATE as days."""
    columns = {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.timestamp("us")).cast(pa.int64())
            column = pa.array([None if v is None else v // 1000 for v in column.to_pylist()])
        elif pa.types.is_date32(column.type):
            column = column.cast(pa.int32())
        columns[name] = column.to_pylist()
    rows = zip(*columns.values(), strict=True)
    return [dict(zip(columns, values, strict=True)) for values in rows]


@settings(max_examples=300, deadline=None)
@given(st.lists(_ROW, max_size=30), _PREDICATE)
def test_filter_keeps_exactly_the_rows_the_reference_keeps(
    rows: list[dict[str, Any]], predicate: str
) -> None:
    circuit = compile_program(
        "p.sql",
        TABLE + "CREATE VIEW v WITH ('topic' = 'v', 'format' = 'append') AS "
        f"SELECT ts, s AS name, i, e FROM t WHERE {predicate};",
    )
    view = circuit.view("v")
    assert arrow_evaluable(view), predicate
    condition = next(op.predicate for op in view.operators if isinstance(op, Filter))
    source = [{**r, "x": 0.5, "m": None} for r in rows]
    expected = [
        {"ts": r["ts"], "name": r["s"], "i": r["i"], "e": r["e"]}
        for r in source
        if reference_evaluate(condition, r) is True
    ]
    got = view_rows([view], "t", _batch(rows))["v"]
    assert got.schema.names == ["ts", "name", "i", "e"]
    assert _circuit_rows(got) == expected


def test_views_read_earlier_views() -> None:
    circuit = compile_program(
        "p.sql",
        TABLE
        + "CREATE LOCAL VIEW pos AS SELECT ts, i, s FROM t WHERE i > 0;\n"
        + "CREATE VIEW named WITH ('topic' = 'n', 'format' = 'append') AS "
        + "SELECT ts, s FROM pos WHERE s IS NOT NULL;",
    )
    rows = [
        {"ts": 1, "i": 1, "b": None, "s": "a", "e": None, "d": None, "f": None},
        {"ts": 2, "i": 0, "b": None, "s": "b", "e": None, "d": None, "f": None},
        {"ts": 3, "i": 2, "b": None, "s": None, "e": None, "d": None, "f": None},
    ]
    frames = view_rows(circuit.views, "t", _batch(rows))
    assert [r["i"] for r in frames["pos"].to_pylist()] == [1, 2]
    assert _circuit_rows(frames["named"]) == [{"ts": 1, "s": "a"}]


@pytest.mark.parametrize(
    "select",
    [
        "SELECT ts FROM t WHERE x > 0.5",  # NaN orders above everything in Spark
        "SELECT ts FROM t WHERE m > 1",  # decimals
        "SELECT ts FROM t WHERE i + 1 > 2",  # arithmetic
        "SELECT ts, i + 1 AS j FROM t",  # a computed column
        "SELECT ts FROM t WHERE s LIKE 'a%'",  # other functions
        "SELECT ts FROM t WHERE CAST(i AS BIGINT) > 2",
        "SELECT ts FROM t WHERE CASE WHEN f THEN TRUE ELSE FALSE END",
    ],
)
def test_what_arrow_does_not_compute_exactly_stays_with_spark(select: str) -> None:
    circuit = compile_program(
        "p.sql", TABLE + f"CREATE VIEW v WITH ('topic' = 'v', 'format' = 'append') AS {select};"
    )
    assert not arrow_evaluable(circuit.view("v"))


def test_changelog_views_stay_with_spark() -> None:
    """ptime is Spark's recorded batch time, which the source task does not know."""
    for fmt, expected in (("append", True), ("changelog", False)):
        circuit = compile_program(
            "p.sql",
            TABLE + f"CREATE VIEW v WITH ('topic' = 'v', 'format' = '{fmt}') AS "
            "SELECT ts, i FROM t WHERE i > 0;",
        )
        assert slice_computable(circuit.views) is expected, fmt
