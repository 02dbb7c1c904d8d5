"""Decode the values of a ``'format' = 'avro-confluent'`` table: Avro framed for a schema registry.

A value is the Confluent wire format: magic byte ``0``, the writer schema's id as a 4-byte
big-endian integer, then the Avro binary encoding of the record with that schema. The writer
schema is fetched by id from a Confluent-compatible schema registry and resolved to the table's
own schema (its ``avro_schema``, the reader) with Avro's schema resolution (fastavro's): fields
are matched by name, a field the writer lacks takes the reader's default, a field the reader
lacks is skipped, and numbers are promoted (int to long, float to double), so a producer that
evolves its schema compatibly (a field added with a default) needs no change to the program.

:class:`ConfluentAvroRecords` turns one value into the row the ``'avro'`` format's codec gives
for the same table (TIMESTAMP and DATE as plain integers, app/connectors/avro_codec.py), or
raises :class:`ConfluentRecordError`: reason ``malformed`` for a value that is not
Confluent-framed or whose Avro body does not decode, ``invalid`` for a schema id the registry
does not know or a writer schema that does not resolve to the table's (the message names the
id). Every column is read nullable, so a NULL the writer sent for a NOT NULL column reaches
the gate, which makes it ``invalid`` naming the column.

Registry lookups happen in the source's tasks. Each process keeps one registry client per
settings (:data:`REGISTRY_CLIENTS`, the holder pattern of app/connectors/per_process.py); the
client caches schemas by id, and a decoder keeps each id's parsed and checked schemas, so a
slice asks the registry at most once per new id. A registry that cannot be reached (or refuses
the credentials) is no dead letter: the task fails with :class:`SchemaRegistryUnavailable`
and Spark retries it, since the same bytes would decode once the registry answers.
"""

from __future__ import annotations

import io
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

import fastavro
from fastavro.read import SchemaResolutionError

from app.connectors.avro_codec import INTEGER_LOGICAL, raw_schema
from app.connectors.per_process import PerProcess
from app.errors import ConfigError, TidemarkError

__all__ = [
    "MAGIC_BYTE",
    "REGISTRY_CLIENTS",
    "RegistryWriter",
    "ConfluentAvroRecords",
    "ConfluentRecordError",
    "RegistryClients",
    "SchemaRegistryUnavailable",
    "avro_payload",
    "foreign_value",
    "frame",
    "framed_payload",
    "framed_schema_id",
    "header_framing",
    "raw_payload",
    "unassignable_id",
    "register_output_schemas",
    "unframe",
]

#: The first byte of every Confluent-framed value.
MAGIC_BYTE = 0
_HEADER = 5  # the magic byte and the 4-byte schema id
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
#: A local timestamp counts from 1970-01-01T00:00 in no zone, as a TIMESTAMP column does
#: (a timestamp without time zone, Flink's TIMESTAMP(3)): the same numbers in the same unit.
_SAME_UNIT = {"local-timestamp-millis": "timestamp-millis",
              "local-timestamp-micros": "timestamp-micros"}


class ConfluentRecordError(ValueError):
    """A value that is no row of the table: ``reason`` is ``malformed`` or ``invalid``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


class SchemaRegistryUnavailable(TidemarkError):
    """The schema registry could not answer a lookup (unreachable, an error status, refused
    credentials): a fault of the service's surroundings, not of the record."""


def frame(schema_id: int, payload: bytes) -> bytes:
    """``payload`` (Avro binary) in the Confluent wire format of schema ``schema_id``."""
    return bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big") + payload


def unframe(value: bytes) -> tuple[int, bytes]:
    """The schema id and the Avro body of a Confluent-framed value; raises
    :class:`ValueError` saying why the value is not one."""
    if len(value) < _HEADER:
        raise ValueError(f"{len(value)} bytes, fewer than the 5 of the magic byte and schema id")
    if value[0] != MAGIC_BYTE:
        raise ValueError(f"the first byte is 0x{value[0]:02x}, not the magic byte 0x00")
    return int.from_bytes(value[1:_HEADER], "big"), value[_HEADER:]


#: fastavro's parsed ``"bytes"``: the Avro encoding a raw payload is taken into and out of.
_BYTES = fastavro.parse_schema("bytes")


def raw_payload(schema: Any) -> bool:
    """Whether a framed value of ``schema`` (Avro schema JSON, a writer's or Tidemark's own)
    has its bytes themselves after the prefix, not their Avro encoding.

    Invariant: a value whose schema is the primitive ``"bytes"`` (also spelled
    ``{"type": "bytes"}``; a logical type such as a decimal is not this) is framed as the
    magic byte, the 4-byte schema id, then the value's raw bytes, with no Avro length before
    them, and an empty value is the prefix alone. That is Confluent's wire format, not
    Avro's: Java's ``KafkaAvroSerializer`` writes a ``byte[]`` of a BYTES schema as is, and
    ``KafkaAvroDeserializer`` reads every byte after the prefix of a BYTES writer schema as the
    value; confluent-kafka's ``AvroSerializer`` and ``AvroDeserializer`` special-case a
    ``"bytes"`` schema the same way. Every other schema's payload is Avro binary. The rule
    is applied only through :func:`framed_payload` (writing) and :func:`avro_payload`
    (reading), for keys and values alike; Tidemark frames and reads a bare value only as a
    key (its values are records), app/connectors/record_key.py."""
    if isinstance(schema, Mapping):
        return bool(schema.get("type") == "bytes" and "logicalType" not in schema)
    return bool(schema == "bytes")


def framed_payload(schema: Any, avro: bytes) -> bytes:
    """What follows the prefix of a framed value of ``schema`` whose Avro binary encoding is
    ``avro``: ``avro`` itself, but a bare bytes value's raw bytes (:func:`raw_payload`)."""
    if not raw_payload(schema):
        return avro
    value = fastavro.schemaless_reader(io.BytesIO(avro), _BYTES, None)
    assert isinstance(value, bytes)
    return value


def avro_payload(schema: Any, payload: bytes) -> bytes:
    """The Avro binary encoding of what follows the prefix of a framed value whose writer
    schema is ``schema``: ``payload`` itself, but for a bare bytes value (raw,
    :func:`raw_payload`) the Avro encoding of all of it, so Avro's reader resolves it as any
    other value."""
    if not raw_payload(schema):
        return payload
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, _BYTES, payload)
    return buffer.getvalue()


#: The headers confluent-kafka's ``header_schema_id_serializer`` writes a key's or value's
#: schema GUID in, instead of the prefix.
SCHEMA_ID_HEADERS = {"key": "__key_schema_id", "value": "__value_schema_id"}


def header_framing(headers: Sequence[tuple[str, bytes | None]] | None, part: str) -> str | None:
    """Why a record whose ``part`` (``key`` or ``value``) names its schema in a header cannot
    be read (None when it does not): such a header holds a schema GUID, which only a registry
    with GUID lookup resolves, and its bytes have no prefix, so read by the prefix they would
    decode as some other schema's record or not at all (docs/language.md, registry formats)."""
    name = SCHEMA_ID_HEADERS[part]
    if not headers or all(key != name for key, _ in headers):
        return None
    return (f"the {part}'s schema is named by its {name} header (a schema GUID, as "
            "confluent-kafka's header_schema_id_serializer writes), which Tidemark does not "
            f"read: produce with the schema id in the {part}'s prefix (the serializers' "
            "default, prefix_schema_id_serializer)")


def framed_schema_id(value: bytes) -> int | None:
    """The schema id when ``value`` starts like a Confluent-framed record (magic byte 0 and a
    positive id that fits a signed 32-bit integer, as registries assign them), else None: a
    cheap hint, since a schemaless Avro value may start with a zero byte too."""
    if len(value) <= _HEADER or value[0] != MAGIC_BYTE:
        return None
    schema_id = int.from_bytes(value[1:_HEADER], "big")
    return schema_id if 0 < schema_id < 2**31 else None


def registry_unavailable(table: str, registry: Mapping[str, str], schema_id: int,
                         exc: BaseException) -> SchemaRegistryUnavailable:
    """Table ``table``'s registry did not return ``schema_id`` (it failed with ``exc``)."""
    return SchemaRegistryUnavailable(
        f"table {table}: the schema registry {registry.get('url')} did not "
        f"return schema id {schema_id}: {type(exc).__name__}: {exc}"
    )


def unassignable_id(schema_id: int) -> str | None:
    """Why no registry holds ``schema_id``, or None when one may: registries assign signed
    32-bit ids, and some (Apicurio's Confluent API) answer a larger one with an error status
    instead of 404, which would fail the task on every retry rather than make its record a
    dead letter."""
    if schema_id >= 2**31:
        return f"schema id {schema_id} is beyond the signed 32-bit ids registries assign"
    return None


class RegistryClients:
    """One process's schema registry clients: at most one per distinct client settings
    (confluent-kafka's ``SchemaRegistryClient``, which caches schemas by id)."""

    def __init__(self) -> None:
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, conf: Mapping[str, str]) -> Any:
        """This process's client of ``conf`` (``url``, optionally ``basic.auth.user.info``,
        a bearer token, TLS files); a ConfigError when the client cannot be made (a CA file
        that is missing or no certificate, say)."""
        from confluent_kafka.schema_registry import SchemaRegistryClient

        key = json.dumps(dict(conf), sort_keys=True)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                try:
                    client = SchemaRegistryClient(dict(conf))
                except (OSError, ValueError, TypeError) as exc:
                    detail = f"{type(exc).__name__}: {exc}"
                    if isinstance(exc, OSError):  # names no file: the CA file is read first
                        detail += f" ({conf.get('ssl.ca.location')})"
                    raise ConfigError(
                        f"the schema registry client of {conf.get('url')} cannot be made:"
                        f" {detail}: fix the schema_registry settings"
                    ) from exc
                self._clients[key] = client
            return client

    def close(self) -> None:
        """Close every kept client; the holder stays usable and starts empty."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()


#: The owner of each process's registry clients.
REGISTRY_CLIENTS: PerProcess[RegistryClients] = PerProcess(RegistryClients, RegistryClients.close)



class RegistryWriter:
    """What a writer of one output's keys or values through a confluent-kafka serializer
    holds: the record schema (the output's Avro record of its columns), the registry, and the
    schema id and subject registered at start, which the serializer writes with and never
    registers again. Subclasses build the serializer on first use (``_start``)."""

    def __init__(
        self,
        schema: Mapping[str, Any],
        registry: Mapping[str, str],
        topic: str,
        field: Literal["key", "value"],
        schema_id: int,
        subject: str,
    ) -> None:
        self.topic, self.field, self.schema_id, self.subject = topic, field, schema_id, subject
        self._schema, self._registry = dict(schema), dict(registry)
        self._serializer: Any = None

    def _context(self) -> Any:
        """The serializer's context: this output's topic, key or value."""
        from confluent_kafka.serialization import MessageField, SerializationContext

        field = MessageField.KEY if self.field == "key" else MessageField.VALUE
        return SerializationContext(self.topic, field)

    def _serializer_conf(self) -> dict[str, Any]:
        """A serializer's settings that write with the registered schema id and subject."""
        subject = self.subject
        return {
            "auto.register.schemas": False,
            "use.schema.id": self.schema_id,
            "subject.name.strategy": lambda ctx, name: subject,
        }

@dataclass(frozen=True)
class _Resolution:
    """How the values of one writer schema are read: the parsed writer schema and the parsed
    reader schema (None when both are the same); ``table_record``: the writer's fields are
    the table's own, field for field, so its bodies are schemaless Avro of the table's schema."""

    writer: Any
    reader: Any
    table_record: bool = False
    #: The reader schema as JSON (its types are those of the decoded values).
    reader_schema: Any = None


def _foreign_message(schema_id: int, path: str, value: Any) -> str:
    """The invalid message of a value :func:`foreign_value` found."""
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    where = f"field {path}" if path else "the value"
    return (f"schema id {schema_id}: {where} is read as {type(value).__name__} {shown}, not the "
            "table's type (the writer's schema gives it another type or logical type)")


def _branches(kind: Any) -> list[Any]:
    return kind if isinstance(kind, list) else [kind]


def _logical(kind: Any) -> str | None:
    """The integer logical type of a field type's non-null branch (None if it has none)."""
    for branch in _branches(kind):
        if isinstance(branch, dict) and branch.get("logicalType") in INTEGER_LOGICAL:
            return str(branch["logicalType"])
    return None


def _nullable(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The reader schema with every field nullable, so a writer's null reaches the gate's NOT
    NULL check (``invalid``, naming the column) instead of failing the resolution. A field
    with a non-null default keeps its type first, since a union's default is of its first."""
    fields = []
    for f in schema.get("fields", ()):
        kind = f["type"]
        if "null" not in _branches(kind):
            branches = _branches(kind)
            kind = [*branches, "null"] if f.get("default") is not None else ["null", *branches]
        fields.append({**f, "type": kind})
    return {**schema, "fields": fields}


#: The Python types fastavro reads each Avro type of a table's schema as (its integer logical
#: types removed, ``raw_schema``).
_READ_AS: dict[str, tuple[type, ...]] = {
    "null": (type(None),), "boolean": (bool,), "int": (int,), "long": (int,),
    "float": (float, int), "double": (float, int), "string": (str,), "bytes": (bytes,),
}


def _named_records(schema: Any, namespace: str | None, out: dict[str, Any]) -> dict[str, Any]:
    """The named records of ``schema`` by their names and full names."""
    for branch in _branches(schema):
        if isinstance(branch, dict) and branch.get("type") in ("record", "error"):
            name = str(branch["name"])
            space = branch.get("namespace", namespace)
            out[name] = out[name if "." in name or not space else f"{space}.{name}"] = branch
            for f in branch.get("fields", ()):
                _named_records(f["type"], space, out)
    return out


def foreign_value(value: Any, reader: Any) -> tuple[str, Any] | None:
    """The first value in a decoded ``value`` (its field's path, "" for the value itself, and
    the value) that is not of the Python type the ``reader`` schema's type reads as, or None.

    fastavro applies the writer's logical types, not the reader's: a writer's ``bytes`` or
    ``string`` read as a DECIMAL column gives bytes or text, a writer's decimal read as
    VARBINARY a Decimal, ``uuid`` a UUID. Such a value
    fits no Arrow column of its table, so a decoder must make it a dead letter, never a row
    (S7)."""
    return _foreign(value, reader, _named_records(reader, None, {}), "")


def _foreign(value: Any, kind: Any, named: Mapping[str, Any], path: str) -> tuple[str, Any] | None:
    if value is None:
        return None  # NULL: the gate's NOT NULL check names it
    if isinstance(kind, list):
        branches = [k for k in kind if k != "null"]
        found = [_foreign(value, k, named, path) for k in branches]
        return None if not found or None in found else found[0]
    if isinstance(kind, str) and kind in named:
        kind = named[kind]
    if isinstance(kind, dict):
        if kind.get("type") in ("record", "error"):
            if not isinstance(value, dict):
                return path, value
            for f in kind.get("fields", ()):
                name = f"{path}.{f['name']}" if path else str(f["name"])
                problem = _foreign(value.get(f["name"]), f["type"], named, name)
                if problem is not None:
                    return problem
            return None
        if kind.get("logicalType") == "decimal":
            return None if isinstance(value, Decimal) else (path, value)
        return _foreign(value, kind.get("type"), named, path)
    types = _READ_AS.get(kind) if isinstance(kind, str) else None
    if types is None:
        return None  # no type of a table's column (an enum, array, map, fixed)
    # A bool is an int to isinstance, but no INT, BIGINT or DOUBLE value; an int no BOOLEAN.
    if isinstance(value, bool) is not (bool in types) or not isinstance(value, types):
        return path, value
    return None


class ConfluentAvroRecords:
    """Decodes the Confluent-framed Avro values of one table's records (see the module doc)."""

    def __init__(
        self,
        table: str,
        reader_schema: Mapping[str, Any],
        registry: Mapping[str, str],
        named_like: Callable[[Mapping[str, Any], dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        """``reader_schema``: the table's Avro schema; ``registry``: the schema registry
        client's settings (``url``, optionally ``basic.auth.user.info``); ``named_like``:
        the reader schema given the names of a writer's nested records (a Debezium
        envelope's value record), since Avro resolves named types by name."""
        self.table = table
        self._named_like = named_like
        self._table_fields = raw_schema(dict(reader_schema)).get("fields")
        self._reader = _nullable(dict(reader_schema))
        self._registry = dict(registry)
        #: Per schema id: how its values are read, or why they cannot be (an invalid message).
        self._known: dict[int, _Resolution | str] = {}

    def decode(self, value: bytes) -> dict[str, Any]:
        """The row of one record value; raises :class:`ConfluentRecordError` when there is
        none, :class:`SchemaRegistryUnavailable` when the registry cannot say."""
        try:
            schema_id, body = unframe(value)
        except ValueError as exc:
            raise ConfluentRecordError(
                "malformed",
                f"not a Confluent-framed Avro record of table {self.table}: {exc} (a producer "
                "with a schema registry serializer writes magic byte 0 and a 4-byte schema id)",
            ) from None
        known = self._known.get(schema_id)
        if known is None:
            known = self._known[schema_id] = self._resolution(schema_id)
        if isinstance(known, str):
            raise ConfluentRecordError("invalid", known)
        buffer = io.BytesIO(body)
        try:
            record = fastavro.schemaless_reader(buffer, known.writer, known.reader)
        except SchemaResolutionError as exc:
            raise ConfluentRecordError(
                "invalid",
                f"schema id {schema_id}: the writer's schema does not resolve to table "
                f"{self.table}'s: {_ADDRESS.sub('', str(exc))}",
            ) from None
        except Exception as exc:  # fastavro raises many types on garbage input
            detail = _ADDRESS.sub("", str(exc))
            raise ConfluentRecordError(
                "malformed",
                f"cannot decode the Avro body of schema id {schema_id}: "
                f"{type(exc).__name__}: {detail}",
            ) from None
        if buffer.tell() != len(body):
            raise ConfluentRecordError(
                "malformed",
                f"{len(body) - buffer.tell()} bytes left after decoding the record of schema "
                f"id {schema_id}",
            )
        if not isinstance(record, dict):
            raise ConfluentRecordError("malformed", f"schema id {schema_id} is not a record")
        if known.reader is not None:
            # Read through another writer schema, whose logical types fastavro applied: each
            # value must be of its column's type, or it is no row Spark can hold (S7).
            foreign = foreign_value(record, known.reader_schema)
            if foreign is not None:
                raise ConfluentRecordError("invalid", _foreign_message(schema_id, *foreign))
        return record

    def table_bodies(self, values: list[bytes | None]) -> list[bytes | None] | None:
        """The Avro bodies of a chunk's values (None stays None: punctuation) when every
        value is framed with one schema id whose writer schema is the table's own record, so
        the bodies are schemaless Avro of the table's schema and the columnar decoder may read
        them; None when any value is otherwise (its chunk takes :meth:`decode` per value)."""
        schema_id: int | None = None
        for value in values:
            if value is None:
                continue
            if len(value) < _HEADER or value[0] != MAGIC_BYTE:
                return None
            found = int.from_bytes(value[1:_HEADER], "big")
            if schema_id is None:
                schema_id = found
            elif found != schema_id:
                return None
        if schema_id is None:
            return None
        known = self._known.get(schema_id)
        if known is None:
            known = self._known[schema_id] = self._resolution(schema_id)
        if isinstance(known, str) or not known.table_record:
            return None
        return [None if v is None else v[_HEADER:] for v in values]

    def _resolution(self, schema_id: int) -> _Resolution | str:
        """How values of ``schema_id`` are read, or the invalid message naming the id."""
        unassignable = unassignable_id(schema_id)
        if unassignable is not None:
            return unassignable
        writer = self._fetch(schema_id)
        if isinstance(writer, str):
            return writer
        if not isinstance(writer, dict) or writer.get("type") != "record":
            return f"schema id {schema_id} is not an Avro record schema"
        problem = self._unresolvable(writer)
        if problem is not None:
            return f"schema id {schema_id}: {problem}"
        # The table binds fields by name: the record's own name is the writer's.
        reader = {**self._reader, "name": writer["name"]}
        if "namespace" in writer:
            reader["namespace"] = writer["namespace"]
        else:
            reader.pop("namespace", None)
        if self._named_like is not None:
            reader = self._named_like(writer, reader)
        try:
            parsed_writer = fastavro.parse_schema(raw_schema(writer))
            parsed_reader = fastavro.parse_schema(raw_schema(reader))
        except Exception as exc:  # fastavro's SchemaParseException and friends
            return f"schema id {schema_id} is not a valid Avro schema: {exc}"
        same = raw_schema(writer) == raw_schema(reader)
        table_record = raw_schema(writer).get("fields") == self._table_fields
        return _Resolution(parsed_writer, None if same else parsed_reader, table_record,
                           raw_schema(reader))

    def _fetch(self, schema_id: int) -> Any:
        """The writer schema of ``schema_id`` as JSON, or the invalid message naming the id."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        client = REGISTRY_CLIENTS.get().get(self._registry)
        try:
            schema = client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return (
                    f"schema id {schema_id} is not in the schema registry: {exc.error_message}"
                )
            raise registry_unavailable(self.table, self._registry, schema_id, exc) from exc
        except Exception as exc:  # httpx's transport errors, after the client's retries
            raise registry_unavailable(self.table, self._registry, schema_id, exc) from exc
        kind = schema.schema_type or "AVRO"
        if kind != "AVRO":
            return f"schema id {schema_id} is a {kind} schema, not Avro"
        if schema.references:
            return f"schema id {schema_id} has schema references, which are not read"
        try:
            found = json.loads(schema.schema_str)
        except ValueError:  # a bare primitive name (long) is Avro too, but no record
            return f"schema id {schema_id} is not an Avro record schema"
        if isinstance(found, str):
            # A primitive schema as a JSON string ("long", as Java's serializer registers a
            # String): no record either. A str returned here is the invalid message, never
            # the schema itself, or a dead letter would say only "long".
            return f"schema id {schema_id} is not an Avro record schema"
        return found

    def _unresolvable(self, writer: Mapping[str, Any]) -> str | None:
        """Why the writer's record cannot resolve to the table's (None when it may): a table
        field the writer lacks and the table gives no default, or a time field of another
        unit (the codec reads TIMESTAMP and DATE as plain integers, so a unit mismatch would
        not fail, only mislead)."""
        written = {f["name"]: f for f in writer.get("fields", ())}
        for f in self._reader["fields"]:
            names = [f["name"], *f.get("aliases", ())]
            found = next((written[n] for n in names if n in written), None)
            if found is None:
                if "default" not in f:
                    return (
                        f"the writer's schema has no field {f['name']} and table "
                        f"{self.table}'s schema gives it no default"
                    )
                continue
            mine, theirs = _logical(f["type"]), _logical(found["type"])
            if (mine is not None and theirs is not None
                    and _SAME_UNIT.get(mine, mine) != _SAME_UNIT.get(theirs, theirs)):
                return (
                    f"field {f['name']} is {theirs} in the writer's schema, {mine} in table "
                    f"{self.table}'s"
                )
        return None


def register_output_schemas(
    registry: Mapping[str, str],
    topic: str,
    key_schema: Mapping[str, Any] | None,
    value_schema: Mapping[str, Any] | None,
) -> tuple[int | None, int | None]:
    """Register an output topic's key schema (if any) under ``<topic>-key`` and its value
    schema (if any) under ``<topic>-value`` (the topic-name strategy) and return their
    schema ids. A bare-value key schema (``{"type": "string"}``) is registered as its type
    (``"string"``), as Java's ``KafkaAvroSerializer`` registers a String key.
    Registering a schema the subject already has returns its id. Raises
    :class:`SchemaRegistryUnavailable` naming the subject when the registry refuses or cannot
    be reached (a schema incompatible with the subject's earlier ones, say)."""
    from confluent_kafka.schema_registry import Schema

    client = REGISTRY_CLIENTS.get().get(registry)

    def register(subject: str, schema: Mapping[str, Any]) -> int:
        kind = schema.get("type")
        text = json.dumps(kind if isinstance(kind, str) and len(schema) == 1 and kind != "record"
                          else schema)
        try:
            return int(client.register_schema(subject, Schema(text, "AVRO")))
        except Exception as exc:  # the registry's error status, or httpx's transport errors
            raise SchemaRegistryUnavailable(
                f"the schema registry {registry.get('url')} did not register subject "
                f"{subject}: {type(exc).__name__}: {exc}"
            ) from exc

    key_id = register(f"{topic}-key", key_schema) if key_schema is not None else None
    return key_id, (register(f"{topic}-value", value_schema) if value_schema is not None
                    else None)
