"""A stateless view's rows encode column-wise to the bytes of the per-row path (SPEC S13).

``encode_view_rows`` takes the columnar encoder when the schemas allow; the per-row
``encode_record`` over the same batch stays the definition. Rows cover NULLs, TIMESTAMPs
before 1970 and with sub-millisecond parts (floored to ms), DATEs, text, and every format:
append (no key), upsert (key columns), changelog (undo, ptime, ver).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from app.circuit.ir import Column, SqlType
from app.program.avro_schema import changelog_columns, record_schema
from app.runtime.step.encode import ViewEncoding, _plain_columns, encode_record, encode_view_rows

UTC = dt.UTC

COLUMNS = (
    Column("k", SqlType("BIGINT", nullable=False)),
    Column("ts", SqlType("TIMESTAMP", nullable=False)),
    Column("day", SqlType("DATE")),
    Column("name", SqlType("VARCHAR")),
    Column("x", SqlType("DOUBLE")),
    Column("ok", SqlType("BOOLEAN")),
    Column("n", SqlType("INT")),
)


def _batch() -> pa.RecordBatch:
    stamps = [
        dt.datetime(2026, 11, 22, 3, 4, 5, 123456, tzinfo=UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999500, tzinfo=UTC),
        dt.datetime(1970, 1, 1, tzinfo=UTC),
        dt.datetime(2001, 2, 3, 4, 5, 6, 7000, tzinfo=UTC),
    ]
    return pa.RecordBatch.from_pydict(
        {
            "k": pa.array([1, -2, 300, 2**40], pa.int64()),
            "ts": pa.array(stamps, pa.timestamp("us", tz="UTC")),
            "day": pa.array([dt.date(2026, 11, 22), None, dt.date(1960, 1, 1), None], pa.date32()),
            "name": pa.array(["a", None, "zoë", ""], pa.string()),
            "x": pa.array([1.5, None, -0.0, 1e300], pa.float64()),
            "ok": pa.array([True, False, None, True], pa.bool_()),
            "n": pa.array([0, None, -(2**31), 2**31 - 1], pa.int32()),
            "_ptime": pa.array([stamps[0]] * 4, pa.timestamp("us", tz="UTC")),
        }
    )


def _encoding(fmt: str) -> ViewEncoding:
    extra = changelog_columns() if fmt == "changelog" else ()
    keys = ["k"] if fmt == "upsert" else []
    key_schema = record_schema("v_key", [COLUMNS[0]]) if keys else None
    return ViewEncoding(
        "v",
        "out",
        fmt,
        [c.name for c in COLUMNS],
        keys,
        record_schema("v", COLUMNS, extra),
        key_schema,
    )


@pytest.mark.parametrize("fmt", ["append", "upsert", "changelog"])
def test_columnar_encoding_equals_the_per_row_path(fmt: str) -> None:
    enc = _encoding(fmt)
    assert enc.columnar() is not None
    batch = _batch()
    [out] = list(encode_view_rows(iter([batch]), enc))
    cols = _plain_columns(batch)
    expected: list[tuple[Any, Any]] = []
    for i in range(batch.num_rows):
        row = {c: v[i] for c, v in cols.items()}
        expected.append(encode_record(enc, row, row["_ptime"]))
    got = list(zip(out.column("key").to_pylist(), out.column("value").to_pylist(), strict=True))
    assert got == expected
    assert set(out.column("rel").to_pylist()) == {"v"}
    assert set(out.column("kind").to_pylist()) == {"output"}


def test_a_decimal_column_keeps_the_per_row_path() -> None:
    columns = (Column("d", SqlType("DECIMAL", precision=10, scale=2)),)
    enc = ViewEncoding("v", "out", "append", ["d"], [], record_schema("v", columns), None)
    assert enc.columnar() is None
