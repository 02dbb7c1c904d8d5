"""A registered schema that ``fit_problems`` accepts carries every row of the view
(``use.latest.version``, docs/adr/0026): generated views and registered schemas (fields
reordered, numbers widened, nullable unions, extra fields with defaults, some changes that do
not fit), generated rows. Whenever the check finds no problem, both encoders write every row
in the registered schema, byte for byte alike, and a reader of that schema reads the row
back; a schema the encoders cannot write a row in always had a problem named."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.circuit.ir import Column, SqlType
from app.connectors.avro_codec import raw_schema
from app.connectors.schema_fit import fit_problems
from app.connectors.sink.record import VALUE
from app.program.avro_schema import record_schema
from app.runtime.step.encode import ViewEncoding, encode_record, encode_view_rows

_KINDS = ("BOOLEAN", "INT", "BIGINT", "REAL", "DOUBLE", "VARCHAR", "TIMESTAMP", "DATE",
          "DECIMAL")
_WIDER = {"int": ["long", "float", "double"], "long": ["float", "double"], "float": ["double"]}
_ARROW = {
    "BOOLEAN": pa.bool_(), "INT": pa.int32(), "BIGINT": pa.int64(), "REAL": pa.float32(),
    "DOUBLE": pa.float64(), "VARCHAR": pa.string(), "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "DATE": pa.date32(), "DECIMAL": pa.decimal128(10, 2),
}


def _type(kind: str, nullable: bool) -> SqlType:
    if kind == "DECIMAL":
        return SqlType("DECIMAL", nullable=nullable, precision=10, scale=2)
    return SqlType(kind, nullable=nullable)


def _value(kind: str) -> st.SearchStrategy[Any]:
    return {
        "BOOLEAN": st.booleans(),
        "INT": st.integers(-(2**31), 2**31 - 1),
        "BIGINT": st.integers(-(2**63), 2**63 - 1),
        "REAL": st.floats(width=32, allow_nan=False),
        "DOUBLE": st.floats(allow_nan=False),
        "VARCHAR": st.text(max_size=8),
        "TIMESTAMP": st.integers(0, 4_000_000_000_000),
        "DATE": st.integers(0, 50_000),
        "DECIMAL": st.decimals(-(10**8) + 1, 10**8 - 1, places=2, allow_nan=False,
                               allow_infinity=False),
    }[kind]


@st.composite
def _case(draw: st.DrawFn) -> tuple[list[Column], dict[str, Any], list[dict[str, Any]]]:
    kinds = draw(st.lists(st.sampled_from(_KINDS), min_size=1, max_size=5))
    columns = [Column(f"c{i}", _type(k, draw(st.booleans()))) for i, k in enumerate(kinds)]
    ours = record_schema("v", columns)
    fields = []
    for field in ours["fields"]:
        kind = field["type"]
        nullable = isinstance(kind, list)
        plain = kind[1] if nullable else kind
        change = draw(st.sampled_from(["same", "widen", "union", "narrow", "drop-null"]))
        if change == "widen" and isinstance(plain, str) and plain in _WIDER:
            plain = draw(st.sampled_from(_WIDER[plain]))
        elif change == "narrow" and plain in ("long", "double"):
            plain = "int" if plain == "long" else "float"
        if change == "union" or (nullable and change != "drop-null"):
            new: dict[str, Any] = {"name": field["name"], "type": ["null", plain],
                                   "default": None}
        else:
            new = {"name": field["name"], "type": plain}
        fields.append(new)
    if draw(st.booleans()):
        fields.append({"name": "extra", "type": "string", "default": "x"})
    if draw(st.booleans()):
        fields.append({"name": "required", "type": "long"})
    registered = {"type": "record", "name": "R", "namespace": "com.example",
                  "fields": draw(st.permutations(fields))}
    rows = draw(st.lists(
        st.fixed_dictionaries({
            c.name: (st.none() | _value(c.type.name)) if c.type.nullable else _value(c.type.name)
            for c in columns
        }),
        min_size=1, max_size=4,
    ))
    return columns, registered, rows


def _batch(columns: list[Column], rows: list[dict[str, Any]]) -> pa.RecordBatch:
    arrays = []
    for c in columns:
        values = [r[c.name] for r in rows]
        if c.type.name == "TIMESTAMP":
            values = [None if v is None else v * 1000 for v in values]
            arrays.append(pa.array(values, pa.int64()).cast(_ARROW["TIMESTAMP"]))
        elif c.type.name == "DATE":
            arrays.append(pa.array(values, pa.int32()).cast(pa.date32()))
        else:
            arrays.append(pa.array(values, _ARROW[c.type.name]))
    return pa.RecordBatch.from_arrays(arrays, names=[c.name for c in columns])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_case())
def test_a_schema_without_problems_carries_every_row_both_encoders_alike(
    case: tuple[list[Column], dict[str, Any], list[dict[str, Any]]],
) -> None:
    columns, registered, rows = case
    problems = fit_problems(registered, record_schema("v", columns))
    enc = ViewEncoding("v", "out", "append", [c.name for c in columns], [], registered, None,
                       (None, 7))
    try:
        one_by_one = [encode_record(enc, row, None)[1] for row in rows]
    except Exception:  # noqa: BLE001 - any failure to write a row must have been named
        assert problems, f"no problem named, yet a row was not written in {registered}"
        return
    if problems:
        return  # a refused schema may still take these rows: the check is about every row
    columnar = encode_view_rows(iter([_batch(columns, rows)]), enc)
    assert next(columnar).column(VALUE).to_pylist() == one_by_one
    parsed = fastavro.parse_schema(raw_schema(registered))
    for row, value in zip(rows, one_by_one, strict=True):
        assert value is not None and value[:5] == b"\x00" + (7).to_bytes(4, "big")
        back = fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed, None)
        for name, written in row.items():
            read = back[name]
            if isinstance(written, Decimal) or written is None:
                assert read == written
            else:
                assert read == written or abs(read - written) <= abs(written) * 1e-6
