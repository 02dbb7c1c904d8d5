"""Kafka keys as columns: a table's ``'key.format'`` read, an output's written.

A key is one of four formats (the names of Flink's Kafka connector):

- ``raw``: one column's plain bytes, as Kafka's Java serializers write them: VARCHAR as
  UTF-8 (``StringSerializer``), VARBINARY as itself, INT and BIGINT as 4 and 8 bytes
  big-endian two's complement (``IntegerSerializer``, ``LongSerializer``), REAL and DOUBLE as
  IEEE 754 big-endian (``FloatSerializer``, ``DoubleSerializer``), BOOLEAN as one byte 0 or 1.
- ``avro``: schemaless Avro of the key's schema; ``avro-confluent``: the same framed with the
  schema id the registry gave (magic byte 0, 4-byte id). A key schema is a record of the key
  columns, or for one column a bare value (``{"type": T}``, a primitive schema, as
  ``KafkaAvroSerializer`` writes a String key). Read, a one-column key takes either: a record
  with one field of a NOT NULL column has the bytes of its bare value, and a registry
  writer's schema says which it is. A framed bare ``"bytes"`` key is its raw bytes after the
  prefix, with no Avro length, as Confluent's serializers write it
  (:func:`app.connectors.confluent_avro.raw_payload`).
- ``json``: a JSON object of the key columns, read and written as a JSON value is
  (:mod:`app.connectors.json_records`, :mod:`app.connectors.json_encoder`).

A null key is NULL in every key column (a NOT NULL one makes the record ``invalid``, as a
null ``METADATA FROM 'key'`` does). A key that does not decode is a :class:`KeyRecordError`:
``malformed`` (bytes that are no key of the format) or ``invalid`` (a value of another type
or outside its column's), whose message starts with ``key:``; the gate makes it a dead letter
with that reason (S7). Encoding is a pure function of the row, so equal key columns give
byte-identical keys in every view of one key format (S15).
"""

from __future__ import annotations

import io
import json
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import fastavro

from app.connectors.avro_codec import AvroCodec, raw_schema
from app.connectors.confluent_avro import (
    REGISTRY_CLIENTS,
    ConfluentAvroRecords,
    ConfluentRecordError,
    SchemaRegistryUnavailable,
    avro_payload,
    foreign_value,
    frame,
    framed_payload,
    header_framing,
    unassignable_id,
    unframe,
)
from app.connectors.json_encoder import JsonEncoder
from app.connectors.json_records import JsonRecordError, JsonRecords
from app.errors import SerializationError

__all__ = [
    "KEY_FORMATS",
    "RAW_KINDS",
    "KeyDecoder",
    "KeyEncoder",
    "KeyReader",
    "KeyRecordError",
    "bare_type",
    "raw_decode",
    "raw_encode",
    "raw_type",
    "wire_schema",
]

KEY_FORMATS = ("raw", "avro", "avro-confluent", "json")
#: The Avro types a ``raw`` key can be, and their fixed byte layouts (None: any length).
_RAW_LAYOUT: Mapping[str, str | None] = {
    "string": None,
    "bytes": None,
    "int": ">i",
    "long": ">q",
    "float": ">f",
    "double": ">d",
    "boolean": ">?",
}
#: The source column kinds a ``raw`` key can be read into, by their Avro type.
RAW_KINDS: Mapping[str, str] = {
    "string": "string",
    "binary": "bytes",
    "int32": "int",
    "int64": "long",
    "float32": "float",
    "float64": "double",
    "bool": "boolean",
}
_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class KeyRecordError(ValueError):
    """A Kafka key that is no key of its table: ``reason`` is ``malformed`` or ``invalid``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


def _solid(kind: Any) -> Any:
    """A field type without its ``null`` branch."""
    if isinstance(kind, list):
        rest = [k for k in kind if k != "null"]
        return rest[0] if len(rest) == 1 else rest
    return kind


def bare_type(schema: Mapping[str, Any]) -> Any | None:
    """The type of a bare-value key schema (``{"type": T}`` with T not a record), else None."""
    kind = schema.get("type")
    if kind == "record":
        return None
    return schema if isinstance(kind, str) and "logicalType" in schema else kind


def wire_schema(schema: Mapping[str, Any]) -> Any:
    """The key schema as a registry stores it: a bare value's own type (``"string"``, as
    Java's ``KafkaAvroSerializer`` registers a String key), else the record."""
    bare = bare_type(schema)
    return dict(schema) if bare is None else bare


def raw_type(schema: Mapping[str, Any]) -> str:
    """The Avro type of the one column a raw key or value holds (of its bare schema, or of
    a record of one field); raises ValueError for another schema."""
    kind = bare_type(schema)
    if kind is None:
        fields = schema.get("fields", ())
        if len(fields) != 1:
            raise ValueError("a raw key or value is one column")
        kind = _solid(fields[0]["type"])
    if not isinstance(kind, str) or kind not in _RAW_LAYOUT:
        raise ValueError(f"a raw key cannot be of Avro type {kind!r}")
    return kind


def raw_decode(kind: str, data: bytes, what: str = "key") -> Any:
    """One raw key, or one raw value of a ``'format' = 'raw'`` table (``what``; see the
    module doc); raises KeyRecordError naming what is wrong (a key's message starts with
    ``key:``)."""
    prefix = "key: " if what == "key" else ""
    if kind == "bytes":
        return data
    if kind == "string":
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise KeyRecordError(
                "invalid", f"{prefix}not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
    layout = _RAW_LAYOUT[kind]
    assert layout is not None
    size = struct.calcsize(layout)
    if len(data) != size:
        raise KeyRecordError(
            "malformed",
            f"{prefix}{len(data)} bytes, but a raw {kind} {what} is {size} "
            f"({'big-endian' if size > 1 else 'one byte'}, as Kafka's Java serializers write it)",
        )
    if kind == "boolean" and data[0] > 1:
        raise KeyRecordError("malformed",
                             f"{prefix}byte 0x{data[0]:02x} is no raw boolean (0 or 1)")
    return struct.unpack(layout, data)[0]


def raw_encode(kind: str, value: Any) -> bytes:
    """One raw key, or one raw value of an output (see the module doc): what Kafka's Java
    serializer of ``kind`` writes for the (not NULL) ``value``."""
    if kind == "bytes":
        return bytes(value)
    if kind == "string":
        return str(value).encode("utf-8")
    layout = _RAW_LAYOUT[kind]
    assert layout is not None
    return struct.pack(layout, value)


def _read_bare(parsed: Any, data: bytes, reader: Any = None) -> Any:
    """One bare Avro value, all of ``data``; raises KeyRecordError."""
    buffer = io.BytesIO(data)
    try:
        value = fastavro.schemaless_reader(buffer, parsed, reader)
    except Exception as exc:  # fastavro raises many types on garbage input
        detail = _ADDRESS.sub("", str(exc))
        raise KeyRecordError(
            "malformed", f"key: cannot decode Avro: {type(exc).__name__}: {detail}"
        ) from None
    if buffer.tell() != len(data):
        raise KeyRecordError(
            "malformed", f"key: {len(data) - buffer.tell()} bytes left after decoding it"
        )
    return value


class KeyDecoder:
    """Decodes the Kafka keys of one table into its key columns (see the module doc)."""

    def __init__(
        self,
        table: str,
        key_format: str,
        columns: Sequence[tuple[str, str]],
        schema: Mapping[str, Any],
        registry: Mapping[str, str] | None = None,
    ) -> None:
        """``columns``: the key's (column name, source kind) pairs in its field order;
        ``schema``: the key's record schema (or a bare value's), whose field names are the
        columns' without the table's ``'key.fields-prefix'``; ``registry``: of
        ``avro-confluent``."""
        if key_format not in KEY_FORMATS:
            raise ValueError(f"table {table}: no key format {key_format!r}")
        self.table, self.format = table, key_format
        self.names = [name for name, _ in columns]
        self._schema = dict(schema)
        self._bare = bare_type(schema)
        #: The key's field names, each the name of the column at its place in ``names``.
        self._fields = ([f["name"] for f in schema["fields"]] if self._bare is None
                        else list(self.names))
        if len(self._fields) != len(self.names):
            raise ValueError(f"table {table}: {len(self.names)} key columns, but the key "
                             f"schema has {len(self._fields)} fields")
        self._renamed = self._fields != self.names
        self._raw = raw_type(schema) if key_format == "raw" else None
        self._json = JsonRecords(f"{table}'s key", [
            (field, kind) for field, (_, kind) in zip(self._fields, columns, strict=True)
        ]) if key_format == "json" else None
        self._avro: AvroCodec | None = None
        self._bare_parsed: Any = None
        if key_format == "avro":
            if self._bare is None:
                self._avro = AvroCodec(self._schema)
            else:
                self._bare_parsed = fastavro.parse_schema(raw_schema(self._bare))
        self._registry = dict(registry) if registry is not None else None
        if key_format == "avro-confluent" and self._registry is None:
            raise ValueError(f"table {table}: avro-confluent keys need a registry")
        self._records: ConfluentAvroRecords | None = None
        #: avro-confluent: per schema id, the parsed writer of a bare key (None: a record).
        self._writers: dict[int, Any] = {}

    def decode(self, key: bytes | None,
               headers: Sequence[tuple[str, bytes | None]] | None = None) -> dict[str, Any]:
        """The key columns of one record's key (all None for a null key); ``headers``, the
        record's, say whether an ``avro-confluent`` key names its schema in a header.

        Raises:
            KeyRecordError: a key that is no key of the table.
            SchemaRegistryUnavailable: the registry cannot say (the step fails, not the
                record: it would decode once the registry answers).
        """
        if key is None:
            return dict.fromkeys(self.names)
        if self.format == "avro-confluent" and (framing := header_framing(headers, "key")):
            raise KeyRecordError("malformed", framing)
        fields = self._fields_of(key)
        if not self._renamed:
            return fields
        return {name: fields.get(field) for name, field in zip(self.names, self._fields,
                                                               strict=True)}

    def _fields_of(self, key: bytes) -> dict[str, Any]:
        """The key's fields by their names in the key (raises as :meth:`decode`)."""
        if self._raw is not None:
            return {self._fields[0]: raw_decode(self._raw, key)}
        if self._json is not None:
            try:
                return self._json.decode(key)
            except JsonRecordError as exc:
                raise KeyRecordError(exc.reason, f"key: {exc.message}") from None
        if self.format == "avro":
            if self._avro is None:
                return {self._fields[0]: _read_bare(self._bare_parsed, key)}
            try:
                return self._avro.decode(key)
            except SerializationError as exc:
                raise KeyRecordError("malformed", f"key: {exc}") from None
        return self._confluent(key)

    def _confluent(self, key: bytes) -> dict[str, Any]:
        try:
            schema_id, body = unframe(key)
        except ValueError as exc:
            raise KeyRecordError(
                "malformed",
                f"key: not a Confluent-framed Avro key: {exc} (a producer with a schema "
                "registry serializer writes magic byte 0 and a 4-byte schema id)",
            ) from None
        if schema_id not in self._writers:
            self._writers[schema_id] = self._bare_writer(schema_id)
        writer = self._writers[schema_id]
        if writer is None:
            if self._records is None:
                record = self._schema if self._bare is None else _one_field(
                    self._fields[0], self._bare)
                assert self._registry is not None
                self._records = ConfluentAvroRecords(f"{self.table}'s key", record,
                                                     self._registry)
            try:
                return self._records.decode(key)
            except ConfluentRecordError as exc:
                raise KeyRecordError(exc.reason, f"key: {exc.message}") from None
        if isinstance(writer, str):
            raise KeyRecordError("invalid", f"key: {writer}")
        parsed, reader, mine, written = writer
        value = _read_bare(parsed, avro_payload(written, body), reader)
        if reader is not None and (foreign := foreign_value(value, mine)) is not None:
            # fastavro applied the writer's logical type (a decimal, a uuid, a local
            # timestamp) or none where the column's has one: no value of the key column's
            # type, so no row Spark can hold; a dead letter, never a row (S7).
            raise KeyRecordError(
                "invalid", f"key: schema id {schema_id}: the bare value is read as "
                f"{type(foreign[1]).__name__}, not table {self.table}'s key type (the "
                "writer's schema gives it another type or logical type)")
        return {self._fields[0]: value}

    def _bare_writer(self, schema_id: int) -> Any:
        """For a writer schema that is a bare value: (parsed writer, parsed reader or None
        when it is the writer, the reader as JSON, the writer as JSON), or why it cannot be
        read (a str); None for a record (read by ConfluentAvroRecords)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        assert self._registry is not None
        if unassignable_id(schema_id) is not None:
            # Never asked: some registries answer an id beyond 32 bits with an error status,
            # which would fail the step on every retry; ConfluentAvroRecords makes the key
            # invalid, naming the id, as it does a value's (S7).
            return None
        client = REGISTRY_CLIENTS.get().get(self._registry)
        try:
            found = client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return None  # ConfluentAvroRecords names the unknown id
            raise self._unavailable(schema_id, exc) from exc
        except Exception as exc:  # httpx's transport errors, after the client's retries
            raise self._unavailable(schema_id, exc) from exc
        if (found.schema_type or "AVRO") != "AVRO":
            return None
        try:
            writer = json.loads(found.schema_str)
        except ValueError:
            writer = found.schema_str.strip()
        if isinstance(writer, dict) and writer.get("type") in ("record", "error"):
            return None
        if isinstance(writer, dict) and writer.get("type") not in _PRIMITIVES:
            return None  # an enum, array, map or fixed: ConfluentAvroRecords refuses it
        if len(self.names) != 1:
            return (f"schema id {schema_id} is a bare {wire_schema({'type': writer})}, but "
                    f"table {self.table}'s key has the fields {', '.join(self.names)}")
        mine = self._bare if self._bare is not None else _solid(self._schema["fields"][0]["type"])
        try:
            parsed = fastavro.parse_schema(raw_schema(writer))
            reader = fastavro.parse_schema(raw_schema(mine))
        except Exception as exc:  # fastavro's SchemaParseException and friends
            return f"schema id {schema_id} is not a valid Avro schema: {exc}"
        return (parsed, None if raw_schema(writer) == raw_schema(mine) else reader,
                raw_schema(mine), writer)

    def _unavailable(self, schema_id: int, exc: BaseException) -> SchemaRegistryUnavailable:
        url = self._registry.get("url") if self._registry else None
        return SchemaRegistryUnavailable(
            f"table {self.table}: the schema registry {url} did not return schema id "
            f"{schema_id} of a key: {type(exc).__name__}: {exc}"
        )


def _one_field(name: str, kind: Any) -> dict[str, Any]:
    return {"type": "record", "name": "record", "fields": [{"name": name, "type": kind}]}


class KeyEncoder:
    """Writes the Kafka keys of one output view (see the module doc)."""

    def __init__(
        self,
        key_format: str,
        schema: Mapping[str, Any],
        columns: Sequence[str],
        schema_id: int | None = None,
        fields: Sequence[str] = (),
    ) -> None:
        """``schema``: the key's record schema, or a bare value's; ``columns``: the key
        columns in its order; ``schema_id``: the registered id of an ``avro-confluent`` key;
        ``fields``: the record's field name of each column, where it is not the column's
        (Flink's ``'key.fields-prefix'``; empty: the columns' names)."""
        if key_format not in KEY_FORMATS:
            raise ValueError(f"no key format {key_format!r}")
        if key_format == "avro-confluent" and schema_id is None:
            raise ValueError("an avro-confluent key needs its registered schema id")
        if fields and len(fields) != len(columns):
            raise ValueError(f"{len(columns)} key columns, but {len(fields)} field names")
        self.format, self.columns, self.schema_id = key_format, list(columns), schema_id
        #: (field, column) pairs of a record key.
        self._named = list(zip(fields or columns, columns, strict=True))
        self._schema = dict(schema)
        self._bare = bare_type(schema)
        self._raw = raw_type(schema) if key_format == "raw" else None
        self._parsed: Any = None
        self._codec: AvroCodec | JsonEncoder | None = None

    def encode(self, row: Mapping[str, Any]) -> bytes | None:
        """The key of one row (circuit values); a bare key of a NULL is a null key."""
        if self._raw is not None or self._bare is not None:
            value = row[self.columns[0]]
            if value is None:
                return None
            if self._raw is not None:
                return raw_encode(self._raw, value)
            if self._parsed is None:
                self._parsed = fastavro.parse_schema(raw_schema(self._bare))
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, self._parsed, value)
            data = buffer.getvalue()
        else:
            if self._codec is None:
                self._codec = (JsonEncoder(self._schema) if self.format == "json"
                               else AvroCodec(self._schema))
            data = self._codec.encode({f: row[c] for f, c in self._named})
        if self.schema_id is None:
            return data
        return frame(self.schema_id, framed_payload(self._bare, data))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_parsed": None, "_codec": None}


class KeyReader:
    """Reads back the keys a :class:`KeyEncoder` writes, as a consumer does (tools and
    tests): the key columns by name (``fields``: the record's field of each, as the encoder
    took them); an ``avro-confluent`` key's schema id is not checked."""

    def __init__(self, key_format: str, schema: Mapping[str, Any], columns: Sequence[str],
                 fields: Sequence[str] = ()) -> None:
        self.format, self.columns = key_format, list(columns)
        self._named = list(zip(fields, columns, strict=True)) if fields else None
        self._bare = bare_type(schema)
        self._raw = raw_type(schema) if key_format == "raw" else None
        self._parsed = (fastavro.parse_schema(raw_schema(self._bare))
                        if self._bare is not None else None)
        self._record: Any = None
        if self._bare is None:
            if key_format == "json":
                from app.connectors.json_encoder import json_decoder

                self._record = json_decoder("key", schema)
            else:
                self._record = AvroCodec(schema)

    def read(self, data: bytes) -> dict[str, Any]:
        """The key columns of one key; raises KeyRecordError when it is not one."""
        if self.format == "avro-confluent":
            try:
                data = avro_payload(self._bare, unframe(data)[1])
            except ValueError as exc:
                raise KeyRecordError("malformed", f"key: {exc}") from None
        if self._raw is not None:
            return {self.columns[0]: raw_decode(self._raw, data)}
        if self._parsed is not None:
            return {self.columns[0]: _read_bare(self._parsed, data)}
        record = dict(self._record.decode(data))
        if self._named is None:
            return record
        return {column: record.get(field) for field, column in self._named}
