"""Kafka keys as columns (``'key.format'``, ``'key.fields'``): the language side.

A table's ``'key.fields'`` are columns whose values are the fields of its Kafka key, decoded
by its ``'key.format'`` (``raw``, ``avro``, ``avro-confluent`` or ``json``): in the circuit
they are ``METADATA FROM 'key'`` columns of a table with a key format, so, like every
metadata column, they are no field of the value's schema, a tombstone carries them and a
NULL in a NOT NULL one is an ``invalid`` dead letter. Flink's ``'value.fields-include' =
'ALL'`` (its default) reads them from the value and only checks the key. An output view's
``'key.format'`` writes its key columns in that format (docs/language.md, Kafka keys);
the connectors (app/connectors/record_key.py) read and write the bytes. Flink's
``'key.fields-prefix'`` is one rule for a table that is read and one an INSERT INTO writes:
the key columns carry the prefix, the key's fields do not, and the value leaves them out
(``'EXCEPT_KEY'``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.circuit.ir import Column, Position
from app.program.avro_schema import key_schema, record_schema
from app.program.ddl import OptionDecl
from app.program.lexer import CompileFailure

__all__ = ["KEY_FORMATS", "RAW_TYPES", "TableKey", "ViewKey", "option_names",
           "prefix_without_fields", "raw_fix", "table_key", "view_key"]

KEY_FORMATS = ("raw", "avro", "avro-confluent", "json")
#: The column types a ``raw`` key can hold: those Kafka's Java serializers write.
RAW_TYPES = ("VARCHAR", "VARBINARY", "INT", "BIGINT", "REAL", "DOUBLE", "BOOLEAN")


def raw_fix(what: str) -> str:
    """The fix of a ``what`` (a key, a value) whose column a raw one cannot hold."""
    return (f"a raw {what} is one VARCHAR, VARBINARY, INT, BIGINT, REAL, DOUBLE or BOOLEAN "
            "column (Kafka's String, ByteArray, Integer, Long, Float, Double serializers)")


def _text(option: OptionDecl) -> str:
    if not isinstance(option.value, str) or not option.value.strip():
        raise CompileFailure(option.value_position, f"option '{option.key}' takes a quoted "
                             "string")
    return option.value


def _key_format(option: OptionDecl) -> str:
    fmt = _text(option).strip().lower()
    if fmt not in KEY_FORMATS:
        raise CompileFailure(option.value_position, f"bad key format '{fmt}'",
                             f"use one of {', '.join(repr(f) for f in KEY_FORMATS)}")
    return fmt


def option_names(option: OptionDecl, separators: str, fix: str) -> list[tuple[str, Position]]:
    """The names a list option holds (``'key' = 'a, b'``, ``'key.fields' = 'a;b'``), split at
    any of ``separators``, each as written (stripped) with its own place in the quoted value.

    Raises:
        CompileFailure: an empty name, at its place, with ``fix``.
    """
    text = _text(option)
    start = option.value_position
    for separator in separators[1:]:
        text = text.replace(separator, separators[0])
    found: list[tuple[str, Position]] = []
    offset = 0
    for part in text.split(separators[0]):
        raw = part.strip()
        # The name's own place in the quoted value (past the opening quote).
        where = Position(start.file, start.line,
                         start.column + 1 + offset + (part.index(raw) if raw else 0))
        offset += len(part) + 1
        if not raw:
            raise CompileFailure(where, f"'{option.key}' '{_text(option)}' has an empty "
                                 "column name", fix)
        found.append((raw, where))
    return found


def _names(option: OptionDecl) -> list[tuple[str, Position]]:
    """The column names of ``'key.fields'`` (Flink's ``;``-separated list; ``,`` too)."""
    found = []
    for raw, where in option_names(option, ";,", "write 'key.fields' = 'col' or 'col1;col2'"):
        quoted = len(raw) > 1 and raw[0] == raw[-1] in ('"', "`")
        found.append((raw[1:-1] if quoted else raw.lower(), where))
    return found


def _raw_check(key: Sequence[Column], where: Position, what: str) -> None:
    if len(key) != 1:
        raise CompileFailure(where, f"{what} has {len(key)} key columns, but a raw key is one "
                             "column's bytes", "key it by one column, or use 'json', 'avro' "
                             "or 'avro-confluent' for a key of several")
    if key[0].type.name not in RAW_TYPES:
        raise CompileFailure(where, f"key column {key[0].name} of {what} is "
                             f"{key[0].type.name}, which a raw key cannot hold",
                             raw_fix("key"))


class TableKey:
    """What a table's key options declare: its columns (key fields marked ``METADATA FROM
    'key'`` unless read from the value), the key format, fields and schema."""

    def __init__(self, columns: Sequence[Column], key_format: str | None,
                 fields: tuple[str, ...], schema: dict[str, Any] | None) -> None:
        self.columns = tuple(columns)
        self.format, self.fields, self.schema = key_format, fields, schema


def table_key(table: str, options: Mapping[str, OptionDecl], columns: Sequence[Column],
              key_in_value: bool = False) -> TableKey:
    """The key a table's ``'key.format'`` and ``'key.fields'`` declare (none without them).
    ``key_in_value``: Flink's ``'value.fields-include' = 'ALL'``, where the key fields are
    also the value's and read from it.

    Raises:
        CompileFailure: one option without the other, an unknown or repeated column, a
            metadata or processing-time column, a ``METADATA FROM 'key'`` column beside
            them, a raw key of several columns or of a type it cannot hold.
    """
    fmt_option, fields_option = options.get("key.format"), options.get("key.fields")
    prefix_option = options.get("key.fields-prefix")
    if prefix_option is not None and fields_option is None:
        raise prefix_without_fields(table, prefix_option)
    if fmt_option is None and fields_option is None:
        return TableKey(columns, None, (), None)
    if fields_option is None:
        assert fmt_option is not None
        raise CompileFailure(fmt_option.position, f"'key.format' of table {table} needs "
                             "'key.fields', the columns its key holds",
                             "add 'key.fields' = 'col' (several: 'col1;col2')")
    if fmt_option is None:
        raise CompileFailure(fields_option.position, f"'key.fields' of table {table} needs "
                             "'key.format', how its key is encoded",
                             "add 'key.format' = 'raw' (or 'json', 'avro', 'avro-confluent')")
    fmt = _key_format(fmt_option)
    by_name = {c.name: c for c in columns}
    for declared in columns:
        if declared.metadata == "key":
            raise CompileFailure(fields_option.position, f"column {table}.{declared.name} is "
                                 f"METADATA FROM 'key', but table {table} decodes its key by "
                                 f"'key.format' = '{fmt}' into 'key.fields'",
                                 f"name {declared.name} in 'key.fields' (without METADATA), "
                                 "or remove the key options")
    names: list[str] = []
    for name, where in _names(fields_option):
        column = by_name.get(name)
        if column is None:
            raise CompileFailure(where, f"unknown column {name} in 'key.fields' of table "
                                 f"{table}", "columns: " + ", ".join(by_name))
        if column.metadata is not None or column.processing_time or column.computed:
            raise CompileFailure(where, f"column {table}.{name} is not read from the record's "
                                 "key or value", "remove its METADATA (or PROCTIME), or "
                                 "leave it out of 'key.fields'")
        if name in names:
            raise CompileFailure(where, f"column {name} is twice in 'key.fields' of table "
                                 f"{table}", "name each key column once")
        names.append(name)
    key = [by_name[n] for n in names]
    if fmt == "raw":
        _raw_check(key, fmt_option.value_position, f"table {table}")
    marked = columns if key_in_value else [
        replace(c, metadata="key") if c.name in names else c for c in columns]
    if prefix_option is not None:
        key = _unprefixed(table, prefix_option, key, key_in_value)
    return TableKey(marked, fmt, tuple(names), record_schema(f"{table}_key", key))


def prefix_without_fields(table: str, option: OptionDecl) -> CompileFailure:
    """The error of a ``'key.fields-prefix'`` of a table that names no key columns."""
    return CompileFailure(option.position, f"'key.fields-prefix' of table {table} needs "
                          "'key.fields', the columns its key holds",
                          "add 'key.fields' = 'col' (several: 'col1;col2'), or remove it")


def _unprefixed(table: str, option: OptionDecl, key: Sequence[Column],
                key_in_value: bool, written: bool = False) -> list[Column]:
    """The key's fields under ``'key.fields-prefix'`` (Flink's rule, the same for a table
    that is read and one an INSERT INTO writes, ``written``): each key column's name starts
    with the prefix, and its field in the key is the name without it.

    Raises:
        CompileFailure: key fields also in the value (``'value.fields-include' = 'ALL'``),
            or a key column without the prefix.
    """
    prefix = _text(option).lower()
    if key_in_value:
        raise CompileFailure(option.position, f"'key.fields-prefix' of table {table} renames "
                             "the key's fields, but 'value.fields-include' = 'ALL' "
                             f"{'writes them to' if written else 'reads them from'} the value "
                             "too", "add 'value.fields-include' = 'EXCEPT_KEY' (Flink requires "
                             "it with a prefix)")
    fields = []
    for column in key:
        if not column.name.startswith(prefix) or column.name == prefix:
            raise CompileFailure(option.value_position, f"key column {table}.{column.name} "
                                 f"does not start with the 'key.fields-prefix' '{prefix}'",
                                 f"name it {prefix}<field> (the key's field with the prefix)")
        fields.append(replace(column, name=column.name[len(prefix):]))
    return fields


class ViewKey:
    """An output view's declared key: its ``'key.format'``, its schema, and the names of its
    fields (one per key column, in its order)."""

    def __init__(self, key_format: str, schema: dict[str, Any], fields: tuple[str, ...]) -> None:
        self.format, self.schema, self.fields = key_format, schema, fields


def view_key(view: str, option: OptionDecl, columns: Sequence[Column],
             key_columns: Sequence[str], bare_avro: bool, prefix: OptionDecl | None = None,
             key_in_value: bool = True) -> ViewKey:
    """An output view's declared ``'key.format'`` and its key's schema: one column's bare
    value for ``raw``, and for ``avro`` and ``avro-confluent`` when ``bare_avro`` (Tidemark's
    dialect, as ksqlDB writes a one-column key); else the record of the key columns, each
    field named as its column, or without ``prefix``: the ``'key.fields-prefix'`` of a table
    INSERT INTO writes, whose ``'value.fields-include' = 'EXCEPT_KEY'`` (not
    ``key_in_value``) leaves the key columns out of the value (Flink's rule, as of a table
    that is read: :func:`_unprefixed`).

    Raises:
        CompileFailure: a view without key columns, a bad format, a raw key it cannot be, a
            prefix with the key in the value or a key column without it.
    """
    fmt = _key_format(option)
    if not key_columns:
        raise CompileFailure(option.position, f"view {view} has a 'key.format' but no key "
                             "columns", "add 'key' = '<column>' (a GROUP BY view is keyed by "
                             "its GROUP BY columns)")
    by_name = {c.name: c for c in columns}
    key = [by_name[k] for k in key_columns]
    if fmt == "raw":
        _raw_check(key, option.value_position, f"view {view}")
    if prefix is not None:
        key = _unprefixed(view, prefix, key, key_in_value, written=True)
    bare = len(key) == 1 and (fmt == "raw" or (bare_avro and fmt in ("avro", "avro-confluent")))
    return ViewKey(fmt, key_schema(key, bare), tuple(c.name for c in key))
