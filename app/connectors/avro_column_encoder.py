"""Encode many rows of one flat record schema as schemaless Avro values at once.

The mirror of :mod:`app.connectors.avro_columns`: a stateless view writes every row it keeps,
and encoding them one by one (a dict per row, fastavro's ``schemaless_writer`` per record)
cost several microseconds a row in Python, the largest part of the view's encoding task. For
a record of primitive fields (``null``, ``boolean``, ``int``, ``long``, ``float``, ``double``,
``bytes``, ``string`` and nullable unions of one of them; TIMESTAMP and DATE are ``long`` and
``int`` once :func:`~app.connectors.avro_codec.raw_schema` strips their logical types), each
field of every row is a run of bytes whose length numpy can compute for all rows together:
a union branch byte, a zig-zag varint, a fixed-size number, or a length and the raw bytes.
The runs are scattered into one buffer, row after row, which becomes an Arrow binary array
of the values without a Python object per row.

The bytes are fastavro's own (tests/unit/connectors/test_avro_column_encoder.py compares them
on generated rows); schemas with other types (decimals, nested records, arrays, maps, enums,
fixed) are not ``supported`` and keep the per-record path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from app.connectors.avro_codec import raw_schema
from app.connectors.avro_columns import field_branches

__all__ = ["ColumnarEncoder", "ColumnValues"]

Ints = npt.NDArray[np.int64]
Bytes = npt.NDArray[np.uint8]


@dataclass
class ColumnValues:
    """One field's values for all rows: ``numbers`` (int64, float32/64 or bool) or ``array``
    (an Arrow string or binary array), and ``null`` where the value is NULL."""

    null: npt.NDArray[np.bool_]
    numbers: npt.NDArray[Any] | None = None
    array: pa.Array | None = None


@dataclass
class _Run:
    """One piece of every row: ``lengths[i]`` bytes of ``data`` starting at ``starts[i]``."""

    lengths: Ints
    starts: Ints
    data: Bytes


def _starts(lengths: Ints) -> Ints:
    """Where each of consecutive pieces of ``lengths`` bytes begins (0, l0, l0+l1, ...)."""
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts


def _varints(values: Ints, present: npt.NDArray[np.bool_]) -> _Run:
    """Zig-zag varints of ``values`` (Avro int and long) where ``present``, none elsewhere."""
    signed = values.astype(np.int64)
    z = ((signed << np.int64(1)) ^ (signed >> np.int64(63))).view(np.uint64)
    lengths = np.ones(len(z), np.int64)
    for k in range(1, 10):
        lengths += z >= np.uint64(1 << (7 * k))
    lengths = np.where(present, lengths, 0)
    run = _Run(lengths, _starts(lengths), np.empty(int(lengths.sum()), np.uint8))
    for k in range(10):
        rows = lengths > k
        if not rows.any():
            break
        part = (z[rows] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = lengths[rows] > k + 1
        high = np.where(more, np.uint64(0x80), np.uint64(0))
        run.data[run.starts[rows] + k] = (part | high).astype(np.uint8)
    return run


def _fixed(raw: Bytes, size: int, present: npt.NDArray[np.bool_]) -> _Run:
    """``size`` bytes per present row, taken from ``raw`` (row i at ``i * size``)."""
    lengths = np.where(present, size, 0).astype(np.int64)
    return _Run(lengths, np.arange(len(present), dtype=np.int64) * size, raw)


def _binary(array: pa.Array, present: npt.NDArray[np.bool_]) -> list[_Run]:
    """Length varint and raw bytes of each present value of a string/binary array."""
    array = array.cast(pa.binary())  # strings are UTF-8 already: the same buffers
    offsets_buffer, data_buffer = array.buffers()[1], array.buffers()[2]
    window = slice(array.offset, array.offset + len(array) + 1)
    offsets: Ints = np.frombuffer(offsets_buffer, np.int32)[window].astype(np.int64)
    lengths = np.where(present, np.diff(offsets), 0)
    data = (
        np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    )
    return [_varints(lengths, present), _Run(lengths, offsets[:-1], data)]


class ColumnarEncoder:
    """Encodes rows of ``schema`` (an Avro record schema of primitive fields) column-wise."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        raw = raw_schema(dict(schema))
        self.fields: list[tuple[str, list[str] | None]] = [
            (f["name"], field_branches(f["type"])) for f in raw.get("fields", [])
        ]
        self.supported = raw.get("type") == "record" and all(b for _, b in self.fields)

    def encode(self, columns: Mapping[str, ColumnValues], count: int) -> pa.Array:
        """The values of ``count`` rows as an Arrow binary array, row i from row i of each
        field's column (a NULL in a non-nullable field raises ValueError, as fastavro does)."""
        if not self.supported:
            raise ValueError("the schema has fields the columnar encoder does not write")
        runs: list[_Run] = []
        for name, branches in self.fields:
            assert branches is not None
            column = columns[name]
            solid = next(b for b in branches if b != "null")
            present = ~column.null
            if len(branches) > 1:
                index = np.where(column.null, branches.index("null"), branches.index(solid))
                runs.append(_varints(index.astype(np.int64), np.ones(count, np.bool_)))
            elif column.null.any():
                raise ValueError(f"field {name} is not nullable but has NULL values")
            runs.extend(_field_runs(solid, column, present))
        return _join(runs, count)


def _field_runs(kind: str, column: ColumnValues, present: npt.NDArray[np.bool_]) -> list[_Run]:
    if kind in ("string", "bytes"):
        assert column.array is not None
        return _binary(column.array, present)
    assert column.numbers is not None
    numbers = np.where(present, column.numbers, 0)
    if kind in ("int", "long"):
        return [_varints(numbers.astype(np.int64), present)]
    if kind == "boolean":
        return [_fixed(numbers.astype(np.uint8), 1, present)]
    size, dtype = (4, "<f4") if kind == "float" else (8, "<f8")
    return [_fixed(np.ascontiguousarray(numbers.astype(dtype)).view(np.uint8), size, present)]


def _join(runs: list[_Run], count: int) -> pa.Array:
    """Row i's value is run 1's bytes of row i, then run 2's, and so on."""
    total = np.zeros(count, np.int64)
    for run in runs:
        total += run.lengths
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(total, out=offsets[1:])
    out = np.empty(int(offsets[-1]), np.uint8)
    position = offsets[:-1].copy()
    for run in runs:
        size = int(run.lengths.sum())
        if size:
            before = _starts(run.lengths)
            step = np.arange(size, dtype=np.int64)
            source = np.repeat(run.starts - before, run.lengths) + step
            target = np.repeat(position - before, run.lengths) + step
            out[target] = run.data[source]
        position += run.lengths
    if offsets[-1] >= 2**31:
        raise ValueError("the encoded values of one batch exceed 2 GiB")
    return pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(out)]
    )
