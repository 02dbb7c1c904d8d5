"""Avro schemas of tables and output views (SPEC L1, L6, S13).

Types map as SPEC L1 says: TIMESTAMP is ``timestamp-millis``, DATE ``date``, DECIMAL the
``decimal`` logical type on bytes; a nullable column is the union ``["null", T]`` with a null
default, so consumers written against an older schema can still read new records.

A table's declared 'schema' file is checked against its columns here too (SPEC L7): every
column must be a field of a compatible type and the same nullability, so a row the decoder
accepts is always a row of the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.circuit.ir import Column, SqlType

__all__ = [
    "CHANGELOG_FIELDS",
    "avro_type",
    "changelog_columns",
    "key_schema",
    "record_schema",
    "schema_mismatches",
]

NAMESPACE = "tidemark"

_PRIMITIVES: dict[str, str] = {
    "BOOLEAN": "boolean", "INT": "int", "BIGINT": "long", "REAL": "float", "DOUBLE": "double",
    "VARCHAR": "string", "VARBINARY": "bytes",
}

#: The columns SPEC S13 adds to a ``changelog`` value (the paper's undo, ptime, ver).
CHANGELOG_FIELDS: tuple[Column, ...] = (
    Column("undo", SqlType("BOOLEAN", nullable=False)),
    Column("ptime", SqlType("TIMESTAMP", nullable=False)),
    Column("ver", SqlType("BIGINT", nullable=False)),
)


def changelog_columns() -> tuple[Column, ...]:
    return CHANGELOG_FIELDS


def _plain(t: SqlType) -> Any:
    if t.name in _PRIMITIVES:
        return _PRIMITIVES[t.name]
    if t.name == "TIMESTAMP":
        return {"type": "long", "logicalType": "timestamp-millis"}
    if t.name == "DATE":
        return {"type": "int", "logicalType": "date"}
    return {"type": "bytes", "logicalType": "decimal", "precision": t.precision,
            "scale": t.scale}


def avro_type(t: SqlType) -> Any:
    """The Avro type of a column: plain when NOT NULL, ``["null", T]`` when nullable."""
    plain = _plain(t)
    return ["null", plain] if t.nullable else plain


def record_schema(name: str, columns: Sequence[Column],
                  extra_fields: Sequence[Column] = ()) -> dict[str, Any]:
    """An Avro record schema (namespace ``tidemark``) of the columns, then ``extra_fields``."""
    fields: list[dict[str, Any]] = []
    for col in (*columns, *extra_fields):
        field: dict[str, Any] = {"name": col.name, "type": avro_type(col.type)}
        if col.type.nullable:
            field["default"] = None
        fields.append(field)
    return {"type": "record", "name": name, "namespace": NAMESPACE, "fields": fields}


#: The name and namespace Flink gives the record of a key's (or any row's) columns
#: (``AvroSchemaConverter``): a declared key's record is named so in every view, so equal
#: key columns have one schema, and one registry id, wherever they are written.
KEY_RECORD = ("record", "org.apache.flink.avro.generated")


def key_schema(columns: Sequence[Column], bare: bool) -> dict[str, Any]:
    """The Avro schema of a declared key (``'key.format'``): one column's bare value,
    ``{"type": T}`` with T its NOT NULL type (a NULL is a null key), or the record of the
    columns, named :data:`KEY_RECORD` (nullable columns as unions, as Flink writes them)."""
    if bare:
        assert len(columns) == 1
        plain = _plain(columns[0].type)
        return dict(plain) if isinstance(plain, dict) else {"type": plain}
    schema = record_schema(KEY_RECORD[0], columns)
    schema["namespace"] = KEY_RECORD[1]
    return schema


def _describe(avro: Any) -> str:
    if isinstance(avro, dict):
        logical = avro.get("logicalType")
        if logical == "decimal":
            return f"decimal({avro.get('precision')}, {avro.get('scale', 0)})"
        return str(logical or avro.get("type"))
    if isinstance(avro, list):
        return "[" + ", ".join(_describe(a) for a in avro) + "]"
    return str(avro)


def _split_union(avro: Any) -> tuple[bool, Any]:
    """(nullable, the non-null branch); a union of several non-null types is not supported."""
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            return "null" in avro, None
        return "null" in avro, branches[0]
    return False, avro


def _compatible(t: SqlType, avro: Any) -> bool:
    expected = _plain(t)
    if isinstance(expected, str):
        if isinstance(avro, dict):
            return avro.get("type") == expected and "logicalType" not in avro
        return bool(avro == expected)
    if not isinstance(avro, dict):
        return False
    if t.name == "DECIMAL":
        return (avro.get("logicalType") == "decimal"
                and avro.get("type") in ("bytes", "fixed")
                and avro.get("precision") == t.precision
                and avro.get("scale", 0) == t.scale)
    return bool(avro.get("type") == expected["type"]
                and avro.get("logicalType") == expected["logicalType"])


def schema_mismatches(schema: Any, columns: Sequence[Column]) -> list[str]:
    """Why a declared Avro schema cannot decode a table's rows; empty when it can.

    Every column needs a field of the same name (case-insensitive) with a compatible type and
    the same nullability. Extra fields in the schema are allowed and ignored.
    """
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return ["the schema is not an Avro record"]
    fields = {str(f.get("name", "")).lower(): f for f in schema.get("fields", [])
              if isinstance(f, dict)}
    problems: list[str] = []
    for col in columns:
        field = fields.get(col.name)
        if field is None:
            problems.append(f"column {col.name} has no field in the schema")
            continue
        nullable, branch = _split_union(field.get("type"))
        if branch is None or not _compatible(col.type, branch):
            problems.append(f"column {col.name} is {col.type.with_nullable(True)} but the "
                            f"schema field is {_describe(field.get('type'))}")
        elif nullable != col.type.nullable:
            declared = "nullable" if col.type.nullable else "NOT NULL"
            found = "nullable" if nullable else "not nullable"
            problems.append(f"column {col.name} is {declared} but the schema field is {found}")
    return problems
