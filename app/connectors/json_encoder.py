"""Encode an output view's keys and values as JSON (``'encoding' = 'json'``, SPEC S13).

The mirror of :mod:`app.connectors.json_records`: a value is one JSON object (UTF-8, no
spaces) of the record's fields by name, in the schema's field order, written so that a
``'format' = 'json'`` table of the same columns reads back the same row. The view's Avro
record schema (the one an ``avro`` output writes) says each field's type:

- NULL is ``null``; BOOLEAN ``true``/``false``; INT and BIGINT JSON integers.
- REAL and DOUBLE JSON numbers (the shortest text that reads back the same float); NaN and
  the infinities, which JSON has no number for, the strings ``"NaN"``, ``"Infinity"`` and
  ``"-Infinity"``.
- DECIMAL(p,s) a string of the exact value with s fraction digits (``"150.00"``), never a
  float.
- TIMESTAMP an ISO-8601 UTC string with milliseconds, ``"2026-11-26T10:00:00.000Z"`` (the form
  of the ``tidemark.waterline`` header); DATE ``"YYYY-MM-DD"``.
- VARCHAR a string (non-ASCII characters as themselves, UTF-8); VARBINARY base64.

A ``changelog`` value has its ``undo``, ``ptime`` and ``ver`` fields like any other; a key is
the JSON object of the key columns. Encoding is a pure function of the record (S15).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal, localcontext
from typing import Any

from app.connectors.json_records import JsonRecords

__all__ = ["JsonEncoder", "json_decoder", "json_schema", "json_timestamp", "source_kind"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DAY = dt.date(1970, 1, 1)
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def json_timestamp(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds: ``2026-11-26T10:00:00.000Z``."""
    stamp = _EPOCH + dt.timedelta(milliseconds=ms)
    return f"{stamp:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def _date(days: int) -> str:
    return (_EPOCH_DAY + dt.timedelta(days=days)).isoformat()


def _number(x: float) -> float | str:
    if math.isnan(x):
        return "NaN"
    return _NON_FINITE.get(x, x)


def _decimal(scale: int) -> Callable[[Any], str]:
    unit = Decimal(1).scaleb(-scale)

    def write(value: Any) -> str:
        number = value if isinstance(value, Decimal) else Decimal(value)
        if number.as_tuple().exponent != -scale:
            with localcontext() as ctx:
                ctx.prec = 80
                number = number.quantize(unit)
        return f"{number:f}"

    return write


def _binary(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _plain(value: Any) -> Any:
    return value


def _solid(kind: Any) -> Any:
    """The non-null branch of a field type."""
    if isinstance(kind, list):
        return next(k for k in kind if k != "null")
    return kind


def _writer(kind: Any) -> Callable[[Any], Any]:
    """How a field's (non-null) circuit value becomes a JSON value."""
    kind = _solid(kind)
    if isinstance(kind, dict):
        logical = kind.get("logicalType")
        if logical == "timestamp-millis":
            return json_timestamp
        if logical == "date":
            return _date
        if logical == "decimal":
            return _decimal(int(kind.get("scale", 0)))
        kind = kind.get("type")
    if kind in ("float", "double"):
        return _number
    if kind == "bytes":
        return _binary
    if kind in ("boolean", "int", "long", "string"):
        return _plain
    raise ValueError(f"a JSON output has no form for the Avro type {kind!r}")


def source_kind(kind: Any) -> str:
    """A field's Avro type as a source column kind (``int64``, ``timestamp``, ...), the kinds
    :class:`JsonRecords` and the Protobuf records read by.

    Raises:
        ValueError: a type no column kind holds.
    """
    kind = _solid(kind)
    if isinstance(kind, dict):
        logical = kind.get("logicalType")
        if logical == "timestamp-millis":
            return "timestamp"
        if logical == "date":
            return "date"
        if logical == "decimal":
            return f"decimal({kind['precision']},{kind.get('scale', 0)})"
        kind = kind.get("type")
    kinds = {"boolean": "bool", "int": "int32", "long": "int64", "float": "float32",
             "double": "float64", "string": "string", "bytes": "binary"}
    if kind not in kinds:
        raise ValueError(f"no column kind holds the Avro type {kind!r}")
    return kinds[str(kind)]


class JsonEncoder:
    """Writes records of one Avro record schema as JSON objects (see the module doc)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        fields: Sequence[Mapping[str, Any]] = schema.get("fields", [])
        self._writers = [(f["name"], _writer(f["type"])) for f in fields]
        self._dump = json.JSONEncoder(
            ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """One record (circuit values: TIMESTAMP epoch ms, DATE days, DECIMAL exact) as UTF-8
        JSON text; a field missing from ``record`` is null."""
        return self.dump(self.document(record))

    def document(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """One record as the JSON object :meth:`encode` writes, before it is text."""
        obj = {}
        for name, write in self._writers:
            value = record.get(name)
            obj[name] = None if value is None else write(value)
        return obj

    def dump(self, document: Any) -> bytes:
        """A document as :meth:`encode` writes it: UTF-8 JSON text without spaces."""
        return self._dump(document).encode("utf-8")


def _field_schema(kind: Any) -> dict[str, Any]:
    """The JSON Schema of what :func:`_writer` writes for a (non-null) field type."""
    kind = _solid(kind)
    if isinstance(kind, dict):
        logical = kind.get("logicalType")
        if logical == "timestamp-millis":
            return {"type": "string", "format": "date-time"}
        if logical == "date":
            return {"type": "string", "format": "date"}
        if logical == "decimal":
            return {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?$"}
        kind = kind.get("type")
    forms: dict[str, dict[str, Any]] = {
        "boolean": {"type": "boolean"},
        "int": {"type": "integer"},
        "long": {"type": "integer"},
        "float": {"type": ["number", "string"]},  # NaN and the infinities are strings
        "double": {"type": ["number", "string"]},
        "string": {"type": "string"},
        "bytes": {"type": "string", "contentEncoding": "base64"},
    }
    return forms[kind]


def json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON Schema (draft-07) of the objects :class:`JsonEncoder` writes for an Avro record
    schema, as a ``'json-registry'`` output registers it: each field's form, ``null`` allowed
    for a nullable one, every NOT NULL field required; titled with the record's full name,
    which RecordNameStrategy subjects are named after."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for f in schema.get("fields", []):
        kind = f["type"]
        nullable = isinstance(kind, list) and "null" in kind
        field = _field_schema(kind)
        if nullable:
            types = field["type"] if isinstance(field["type"], list) else [field["type"]]
            field = {**field, "type": [*types, "null"]}
        else:
            required.append(f["name"])
        properties[f["name"]] = field
    name = str(schema.get("name", ""))
    namespace = schema.get("namespace")
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": f"{namespace}.{name}" if namespace and "." not in name else name,
        "type": "object",
        "properties": properties,
        "required": required,
    }


def json_decoder(name: str, schema: Mapping[str, Any]) -> JsonRecords:
    """The reader of what :class:`JsonEncoder` writes for ``schema``: the records back as
    circuit values (a consumer's view, for tools and tests)."""
    return JsonRecords(name, [(f["name"], source_kind(f["type"])) for f in schema["fields"]])
