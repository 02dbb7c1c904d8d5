"""The columnar Avro encoder writes exactly fastavro's bytes.

Generated rows of a schema with every primitive field type, NOT NULL and nullable (the shapes
record_schema writes, TIMESTAMP and DATE with their logical types), are encoded column-wise and
row by row with :class:`AvroCodec`, the definition; the bytes must be equal, and fastavro must
read each value back to the row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.connectors.avro_codec import AvroCodec
from app.connectors.avro_column_encoder import ColumnarEncoder, ColumnValues

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
FLOAT32 = st.floats(width=32, allow_nan=False)
FLOAT64 = st.floats(allow_nan=False)
TEXT = st.text(max_size=40)
BYTES = st.binary(max_size=40)

#: (field type, Arrow type, values)
KINDS: dict[str, tuple[Any, pa.DataType, st.SearchStrategy[Any]]] = {
    "b": ("boolean", pa.bool_(), st.booleans()),
    "i": ("int", pa.int32(), INT32),
    "l": ("long", pa.int64(), INT64),
    "f": ("float", pa.float32(), FLOAT32),
    "d": ("double", pa.float64(), FLOAT64),
    "s": ("string", pa.string(), TEXT),
    "y": ("bytes", pa.binary(), BYTES),
    "t": ({"type": "long", "logicalType": "timestamp-millis"}, pa.int64(), INT64),
    "a": ({"type": "int", "logicalType": "date"}, pa.int32(), INT32),
}


def _schema() -> dict[str, Any]:
    fields: list[dict[str, Any]] = []
    for name, (kind, _, _) in KINDS.items():
        fields.append({"name": name, "type": kind})
        fields.append({"name": f"{name}_n", "type": ["null", kind], "default": None})
    fields.append({"name": "back_n", "type": ["long", "null"]})
    return {"type": "record", "name": "r", "namespace": "t", "fields": fields}


def _row() -> st.SearchStrategy[dict[str, Any]]:
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for name, (_, _, values) in KINDS.items():
        parts[name] = values
        parts[f"{name}_n"] = st.none() | values
    parts["back_n"] = st.none() | INT64
    return st.fixed_dictionaries(parts)


def _columns(rows: list[dict[str, Any]]) -> dict[str, ColumnValues]:
    types = {name: arrow for name, (_, arrow, _) in KINDS.items()}
    types |= {f"{name}_n": arrow for name, arrow in types.items()}
    types["back_n"] = pa.int64()
    out: dict[str, ColumnValues] = {}
    for name, kind in types.items():
        array = pa.array([r[name] for r in rows], kind)
        null = np.asarray(array.is_null().to_numpy(zero_copy_only=False), np.bool_)
        if pa.types.is_string(kind) or pa.types.is_binary(kind):
            out[name] = ColumnValues(null, array=array)
        else:
            filled = array.fill_null(False if pa.types.is_boolean(kind) else 0)
            out[name] = ColumnValues(null, numbers=filled.to_numpy(zero_copy_only=False))
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(_row(), max_size=30))
def test_columnar_values_are_fastavros_bytes(rows: list[dict[str, Any]]) -> None:
    schema = _schema()
    encoder = ColumnarEncoder(schema)
    assert encoder.supported
    codec = AvroCodec(schema)
    encoded = encoder.encode(_columns(rows), len(rows)).to_pylist()
    assert encoded == [codec.encode(r) for r in rows]
    for value, row in zip(encoded, rows, strict=True):
        back = codec.decode(value)
        assert {k: v for k, v in back.items() if not isinstance(v, float)} == {
            k: v for k, v in row.items() if not isinstance(v, float)
        }


def test_a_sliced_string_array_is_read_from_its_own_offset() -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "s", "type": "string"}]}
    array = pa.array(["skipped", "one", "", "three"]).slice(1)
    values = ColumnarEncoder(schema).encode(
        {"s": ColumnValues(np.zeros(3, np.bool_), array=array)}, 3
    )
    codec = AvroCodec(schema)
    assert values.to_pylist() == [codec.encode({"s": s}) for s in ["one", "", "three"]]


def test_null_in_a_not_null_field_is_refused() -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "n", "type": "long"}]}
    with pytest.raises(ValueError, match="not nullable"):
        ColumnarEncoder(schema).encode(
            {"n": ColumnValues(np.array([False, True]), numbers=np.array([1, 0]))}, 2
        )


@pytest.mark.parametrize(
    "kind",
    [
        {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        {"type": "array", "items": "long"},
        ["null", "long", "string"],
    ],
)
def test_other_types_are_not_supported(kind: Any) -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "x", "type": kind}]}
    assert not ColumnarEncoder(schema).supported
