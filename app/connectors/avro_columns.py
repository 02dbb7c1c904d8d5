"""Decode many schemaless Avro values of one flat record schema at once, into columns.

Per-record decoding (fastavro builds a dict per value, the gate looks at it, Arrow is built from
lists of those dicts) costs several microseconds a row in Python. For the common table, a record
of primitive fields (``null``, ``boolean``, ``int``, ``long``, ``float``, ``double``, ``bytes``,
``string`` and unions of them; TIMESTAMP and DATE are ``long``/``int`` once
:func:`~app.connectors.avro_codec.raw_schema` strips their logical types), the wire format is
simple enough to walk with numpy over all the values of a chunk at the same time: each field
advances one cursor per value. The result is numpy columns and Arrow arrays, no Python object
per row.

The decoder answers one question exactly: which values fastavro's ``schemaless_reader`` would
decode, consuming every byte, and to what. A value it is not sure about (garbage, bytes left
over or missing, a varint longer than 10 bytes, a negative length, a union index out of range,
UTF-8 that Python would reject) is marked not ``clean``; the caller sends those to the
per-record :class:`~app.connectors.late_gate.LateGate`, whose verdict and message stay the
definition. So this module may refuse anything odd; it must never accept a value fastavro
would decode differently. Schemas with other types (decimals, nested records, arrays, maps,
enums, fixed) are not ``supported`` and keep the per-record path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from app.connectors.avro_codec import raw_schema

__all__ = ["ColumnarDecoder", "DecodedColumns", "FieldColumn", "field_branches"]

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
#: Zero bytes after the joined values, so reading a varint of up to 10 bytes past the last
#: value's end never indexes outside the buffer (a read past a value's end marks it unclean).
_PADDING = 16

Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]


def field_branches(kind: Any) -> list[str] | None:
    """The branch names of a field type: ``[T]`` for a plain primitive, ``["null", T]`` or
    ``[T, "null"]`` for a nullable one; None for anything else (not supported)."""
    options = kind if isinstance(kind, list) else [kind]
    names: list[str] = []
    for option in options:
        if isinstance(option, dict):
            if set(option) - {"type"} or option.get("type") not in _PRIMITIVES:
                return None  # a logical type left after raw_schema (decimal) or a named type
            option = option["type"]
        if not isinstance(option, str) or option not in _PRIMITIVES:
            return None
        names.append(option)
    solid = [n for n in names if n != "null"]
    if len(solid) != 1 or len(names) - len(solid) > 1 or (len(names) > 1) != isinstance(kind, list):
        return None
    return names


@dataclass
class FieldColumn:
    """One field of all values: ``kind`` is its non-null Avro type; ``null`` marks rows whose
    union branch was ``null`` (or that are not clean). Numbers are in ``values`` (int64 for
    int/long, float64 or float32, bool); bytes and strings are an Arrow array in ``array``."""

    kind: str
    null: Bools
    values: npt.NDArray[Any] | None = None
    array: pa.Array | None = None

    def numbers(self) -> npt.NDArray[Any]:
        """The numeric values (int, long, float, double, boolean fields)."""
        if self.values is None:
            raise ValueError(f"a {self.kind} field has no numeric values")
        return self.values


@dataclass
class DecodedColumns:
    """``clean[i]``: value i decodes exactly as fastavro would, every byte used; ``fields``:
    the columns asked for, by field name (their rows are only meaningful where clean)."""

    clean: Bools
    fields: dict[str, FieldColumn]


class _Cursor:
    """The joined bytes of all values and one read position per value."""

    def __init__(self, values: Sequence[bytes | None]) -> None:
        count = len(values)
        # A null value (punctuation) is not a record: it counts as empty and not alive.
        self.alive: Bools = np.ones(count, np.bool_)
        present: Sequence[bytes | None] = values
        if None in values:
            gone = [i for i, v in enumerate(values) if v is None]
            self.alive[gone] = False
            present = [v if v is not None else b"" for v in values]
        lengths = np.fromiter(map(len, present), np.int64, count)  # type: ignore[arg-type]
        self.ends: Ints = np.cumsum(lengths)
        self.pos: Ints = self.ends - lengths
        self.raw = b"".join(present) + bytes(_PADDING)  # type: ignore[arg-type]
        self.data: npt.NDArray[np.uint8] = np.frombuffer(self.raw, np.uint8)
        self.limit = len(self.raw) - _PADDING
        self.ascii = not (self.data[: self.limit] >= 0x80).any()

    def check(self) -> None:
        """Values whose reads went past their own end are not clean; their positions are
        clamped so later reads stay inside the buffer."""
        self.alive &= self.pos <= self.ends
        np.minimum(self.pos, self.limit, out=self.pos)

    def varint(self, rows: Ints) -> Ints:
        """Zig-zag varints (Avro int and long) at the positions of ``rows``, like fastavro's
        ``read_long`` for values of up to 10 bytes; longer ones are marked not clean."""
        pos = self.pos[rows]
        n = np.zeros(len(rows), np.uint64)
        going = np.ones(len(rows), np.bool_)
        used = np.zeros(len(rows), np.int64)
        for k in range(10):
            if not going.any():
                break
            byte = self.data[pos + k]
            part = (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            n |= np.where(going, part, np.uint64(0))
            used += going
            going &= (byte & 0x80) != 0
        if going.any():
            self.alive[rows[going]] = False
        self.pos[rows] = pos + used
        one = np.uint64(1)
        return ((n >> one) ^ (np.uint64(0) - (n & one))).view(np.int64)

    def fixed(self, rows: Ints, size: int) -> npt.NDArray[np.uint8]:
        """``size`` raw bytes per row (float, double, boolean), one row per line."""
        pos = self.pos[rows]
        self.pos[rows] = pos + size
        rows_bytes: npt.NDArray[np.uint8] = self.data[pos[:, None] + np.arange(size)]
        return rows_bytes

    def blob(self, rows: Ints, utf8: bool) -> tuple[Ints, Ints]:
        """Length-prefixed bytes: (start, length) per row; negative lengths and, for strings,
        bytes Python's strict UTF-8 decoder rejects mark the row not clean."""
        size = self.varint(rows)
        # Negative (fastavro would read to the end) or longer than what is left of all values.
        bad = (size < 0) | (size > self.limit - self.pos[rows])
        if bad.any():
            self.alive[rows[bad]] = False
            size = np.where(bad, 0, size)
        start = self.pos[rows]
        self.pos[rows] = start + size
        if utf8 and not self.ascii:
            self._check_utf8(rows, start, size)
        return start, size

    def _check_utf8(self, rows: Ints, start: Ints, size: Ints) -> None:
        """Python-decode only the strings with a byte >= 0x80 (found over the strings' own
        bytes, gathered; rows already not clean may have nonsense positions and are skipped)."""
        live = np.flatnonzero(self.alive[rows] & (start + size <= self.limit))
        start, size = start[live], size[live]
        offsets = np.zeros(len(live) + 1, np.int64)
        np.cumsum(size, out=offsets[1:])
        gather = np.repeat(start - offsets[:-1], size) + np.arange(offsets[-1], dtype=np.int64)
        high = self.data[gather] >= 0x80
        if not high.any():
            return
        seen = np.concatenate(([0], np.cumsum(high, dtype=np.int64)))
        for i in np.flatnonzero(seen[offsets[1:]] > seen[offsets[:-1]]).tolist():
            try:
                self.raw[int(start[i]) : int(start[i] + size[i])].decode()
            except UnicodeDecodeError:
                self.alive[rows[live[i]]] = False


class ColumnarDecoder:
    """Decodes a chunk of values of one record schema into columns (see the module doc)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        raw = raw_schema(dict(schema))
        self.fields: list[tuple[str, list[str]]] = []
        self.supported = raw.get("type") == "record"
        for field in raw.get("fields", ()) if self.supported else ():
            branches = field_branches(field.get("type"))
            if branches is None:
                self.supported = False
                break
            self.fields.append((field["name"], branches))

    def decode(self, values: Sequence[bytes | None], wanted: Sequence[str]) -> DecodedColumns:
        """Columns ``wanted`` (field names) of every value; ``None`` values are not clean."""
        if not self.supported:
            raise ValueError("the schema has types the columnar decoder does not read")
        cursor = _Cursor(values)
        count = len(values)
        out: dict[str, FieldColumn] = {}
        every = np.arange(count, dtype=np.int64)
        for name, branches in self.fields:
            keep = name in wanted
            non_null = next(b for b in branches if b != "null")
            null = np.zeros(count, np.bool_)
            rows = every
            if len(branches) > 1:
                index = cursor.varint(every)
                cursor.check()
                # fastavro would take a negative index from the end (Python list indexing):
                # leave such values to it.
                cursor.alive &= (index >= 0) & (index < len(branches))
                null = index == branches.index("null")
                rows = every[~null]
            column = self._read(cursor, rows, non_null, count, keep)
            cursor.check()
            if keep:
                column.null = null
                out[name] = column
        cursor.alive &= cursor.pos == cursor.ends
        clean = cursor.alive
        for column in out.values():
            column.null = column.null | ~clean
        for name in wanted:
            if name not in out:
                raise ValueError(f"field {name} is not in the record schema")
        self._finish_blobs(out, cursor)
        return DecodedColumns(clean, out)

    def _read(self, cursor: _Cursor, rows: Ints, kind: str, count: int, keep: bool) -> FieldColumn:
        column = FieldColumn(kind, np.zeros(count, np.bool_))
        if kind in ("int", "long"):
            values = np.zeros(count, np.int64)
            values[rows] = cursor.varint(rows)
            column.values = values
        elif kind in ("float", "double"):
            width = 4 if kind == "float" else 8
            raw = cursor.fixed(rows, width)
            # float64 for both, as fastavro hands a float to Python (a C float made double).
            wide = np.zeros(count, np.float64)
            with np.errstate(invalid="ignore"):  # a signalling NaN is quieted, as in C
                wide[rows] = np.ascontiguousarray(raw).view("<f4" if kind == "float" else "<f8")[
                    :, 0
                ]
            column.values = wide
        elif kind == "boolean":
            flags = np.zeros(count, np.bool_)
            flags[rows] = cursor.fixed(rows, 1)[:, 0] != 0
            column.values = flags
        elif kind in ("bytes", "string"):
            start = np.zeros(count, np.int64)
            size = np.zeros(count, np.int64)
            start[rows], size[rows] = cursor.blob(rows, kind == "string")
            if keep:
                column.values = np.stack([start, size])
        return column

    @staticmethod
    def _finish_blobs(out: dict[str, FieldColumn], cursor: _Cursor) -> None:
        """Arrow binary/string arrays of the blob columns, null where null or not clean."""
        for column in out.values():
            if column.kind not in ("bytes", "string") or column.values is None:
                continue
            start, size = column.values
            valid = ~column.null
            size = np.where(valid, size, 0)
            offsets = np.zeros(len(size) + 1, np.int64)
            np.cumsum(size, out=offsets[1:])
            total = int(offsets[-1])
            gather = np.repeat(start - offsets[:-1], size) + np.arange(total, dtype=np.int64)
            data = cursor.data[gather]
            kind = pa.large_string() if column.kind == "string" else pa.large_binary()
            array = pa.Array.from_buffers(
                kind,
                len(size),
                [_validity(valid), pa.py_buffer(offsets), pa.py_buffer(data)],
            )
            column.array = array.cast(pa.string() if column.kind == "string" else pa.binary())
            column.values = None


def _validity(valid: Bools) -> pa.Buffer | None:
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))
