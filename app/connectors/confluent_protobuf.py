"""Protobuf records of a schema registry: ``'protobuf-confluent'`` tables and outputs.

A value is what confluent-kafka's ``ProtobufSerializer`` (and Java's
``KafkaProtobufSerializer``) writes: the Confluent framing (magic byte ``0``, the writer
schema's id), the message-index array that names the message of the schema's file, then the
protobuf bytes of the message. No generated Python class is needed to read one:
:class:`ConfluentProtobufRecords` fetches the writer schema by id from the registry in its
serialized form (a ``FileDescriptorProto``, base64, as the registry returns it for
``?format=serialized`` and as confluent-kafka registers it), builds the message class from it
with ``google.protobuf``'s descriptor pool and message factory, reads the framing and index
array with confluent-kafka's own ``SchemaId`` reader, and maps the message's fields to the
table's columns by name (docs/adr/0029-protobuf-records-through-the-registry.md):

- BOOLEAN ``bool``; INT ``int32``, ``sint32``, ``sfixed32``, ``uint32``; BIGINT those and
  ``int64``, ``sint64``, ``sfixed64``, ``uint64``; REAL ``float``; DOUBLE ``float``,
  ``double``; VARCHAR ``string``; VARBINARY ``bytes``; each also as its
  ``google.protobuf`` wrapper (``Int64Value``, ...), which may be absent (NULL);
- TIMESTAMP ``google.protobuf.Timestamp`` (digits below the millisecond are truncated);
  DATE ``google.type.Date``; DECIMAL(p,s) ``confluent.type.Decimal`` (Confluent's decimal
  message: the unscaled value's big-endian two's-complement bytes and its scale).

A field with presence (a message, a wrapper, a proto3 ``optional`` scalar, a ``oneof`` member)
that is not set is NULL; a scalar without presence is its value, zero when not written, as
every protobuf reader sees it. A column the message has no field for is NULL, so a NOT NULL
one makes the record ``invalid`` at the gate, naming the column.

Every bad record is a dead letter with a reason (:class:`ConfluentRecordError`):
``malformed`` for a value that is not framed, whose index array does not read or whose
protobuf bytes do not parse; ``invalid`` for a schema id the registry does not know, a schema
that is not a serialized Protobuf file (an Avro or JSON Schema id, or ``.proto`` source text,
which is not parsed here), a message index the file does not have, a field whose type its
column cannot hold (a repeated field, a map, another message), or a value out of its column's
range. A registry that cannot be reached is no dead letter:
:class:`~app.connectors.confluent_avro.SchemaRegistryUnavailable` fails the task, and Spark
retries it (as for ``avro-confluent``).

:class:`ProtobufRegistryWriter` writes an ``'encoding' = 'protobuf-confluent'`` output's keys
or values with confluent-kafka's ``ProtobufSerializer``: the message class is built from the
schema ``tidemark run`` chose at start (the view's own file, :func:`proto_file`, registered;
or the subject's latest version, checked by :func:`protobuf_fit_problems`), fetched by its id,
and the serializer writes with that id and subject only (``use.schema.id``), never
registering.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import io
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2, wrappers_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from google.type import date_pb2

from app.connectors.confluent_avro import (
    REGISTRY_CLIENTS,
    ConfluentRecordError,
    RegistryWriter,
    registry_unavailable,
    unassignable_id,
    unframe,
)
from app.connectors.json_encoder import source_kind
from app.errors import SerializationError

__all__ = [
    "ConfluentProtobufRecords",
    "ProtobufRegistryWriter",
    "column_kinds",
    "file_of",
    "proto_file",
    "protobuf_fit_problems",
    "proto_text",
]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_TIMESTAMP = "google.protobuf.Timestamp"
_DATE = "google.type.Date"
_DECIMAL = "confluent.type.Decimal"
_EPOCH_DAY = dt.date(1970, 1, 1)
_INT64 = (-(2**63), 2**63 - 1)

F = FieldDescriptor
_INT32_TYPES = {F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32, F.TYPE_UINT32, F.TYPE_FIXED32}
_INT64_TYPES = {F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64, F.TYPE_UINT64, F.TYPE_FIXED64}
#: The scalar field types each column kind reads (and the wrapper messages of them).
_READS: dict[str, set[int]] = {
    "bool": {F.TYPE_BOOL},
    "int32": _INT32_TYPES,
    "int64": _INT32_TYPES | _INT64_TYPES,
    "float32": {F.TYPE_FLOAT},
    "float64": {F.TYPE_FLOAT, F.TYPE_DOUBLE},
    "string": {F.TYPE_STRING},
    "binary": {F.TYPE_BYTES},
}
_WRAPPERS: dict[str, set[str]] = {
    "bool": {"google.protobuf.BoolValue"},
    "int32": {"google.protobuf.Int32Value", "google.protobuf.UInt32Value"},
    "int64": {"google.protobuf.Int32Value", "google.protobuf.UInt32Value",
              "google.protobuf.Int64Value", "google.protobuf.UInt64Value"},
    "float32": {"google.protobuf.FloatValue"},
    "float64": {"google.protobuf.FloatValue", "google.protobuf.DoubleValue"},
    "string": {"google.protobuf.StringValue"},
    "binary": {"google.protobuf.BytesValue"},
}
#: The field types a column of each kind is written into (a column fits a registered field
#: whose type holds every value of the column's kind).
_WRITES: dict[str, set[int]] = {
    "bool": {F.TYPE_BOOL},
    "int32": {F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32, F.TYPE_INT64, F.TYPE_SINT64,
              F.TYPE_SFIXED64, F.TYPE_FLOAT, F.TYPE_DOUBLE},
    "int64": {F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64},
    "float32": {F.TYPE_FLOAT, F.TYPE_DOUBLE},
    "float64": {F.TYPE_DOUBLE},
    "string": {F.TYPE_STRING},
    "binary": {F.TYPE_BYTES},
}
_TYPE_NAMES = {
    value: name.removeprefix("TYPE_").lower()
    for name, value in vars(F).items() if name.startswith("TYPE_") and isinstance(value, int)
}


def _decimal_file() -> bytes:
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2

    return bytes(decimal_pb2.DESCRIPTOR.serialized_pb)


def _pool() -> descriptor_pool.DescriptorPool:
    """A descriptor pool with the well-known files a registered schema may import without a
    reference (Confluent's serializers register those without one)."""
    pool = descriptor_pool.DescriptorPool()
    for module in (timestamp_pb2, wrappers_pb2, date_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(_decimal_file())
    return pool


def file_of(schema_str: str, name: str) -> FileDescriptor | str:
    """The file of a registered Protobuf schema in its serialized form (a base64
    ``FileDescriptorProto``), loaded as ``name`` into a pool of its own, or why it is not
    one."""
    text = schema_str.strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict | list) or text.startswith('"'):
        return "an Avro or JSON Schema, not Protobuf"
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
        proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, UnicodeEncodeError, Exception):
        proto = None
    if proto is None or not proto.message_type:
        if "message" in text and ("syntax" in text or "{" in text):
            return (
                ".proto source text, which Tidemark does not parse: the registry must serve"
                " the schema serialized (a base64 FileDescriptorProto, the registry's"
                " ?format=serialized form)"
            )
        return "not a serialized Protobuf file (a base64 FileDescriptorProto with a message)"
    proto.name = name
    pool = _pool()
    try:
        return pool.Add(proto)
    except Exception as exc:  # TypeError / KeyError on an unresolved import or a bad type
        return f"a Protobuf file that does not load: {_ADDRESS.sub('', str(exc))}"


def _message_at(file: FileDescriptor, indexes: Sequence[int]) -> Descriptor | None:
    """The message an index array names in ``file`` (the first top-level message is
    ``[0]``), None when the file has none there."""
    messages = list(file.message_types_by_name.values())
    found: Descriptor | None = None
    for index in indexes:
        if index < 0 or index >= len(messages):
            return None
        found = messages[index]
        messages = list(found.nested_types)
    return found


def _kind_name(kind: str) -> str:
    from app.connectors.json_records import sql_type_name

    return sql_type_name(kind)


def _field_type(field: FieldDescriptor) -> str:
    if field.message_type is not None:
        return str(field.message_type.full_name)
    return str(_TYPE_NAMES.get(field.type, field.type))


def _read_problem(kind: str, field: FieldDescriptor) -> str | None:
    """Why a column of ``kind`` cannot read ``field`` (None when it can)."""
    if field.is_repeated:
        shape = "a map" if field.message_type is not None and (
            field.message_type.GetOptions().map_entry) else "a repeated field"
        return f"field {field.name} is {shape}, which column {field.name} cannot hold"
    message = field.message_type.full_name if field.message_type is not None else None
    if kind == "timestamp":
        ok = message == _TIMESTAMP
    elif kind == "date":
        ok = message == _DATE
    elif kind.startswith("decimal("):
        ok = message == _DECIMAL
    elif message is not None:
        ok = message in _WRAPPERS.get(kind, set())
    else:
        ok = field.type in _READS.get(kind, set())
    if ok:
        return None
    return (
        f"field {field.name} is {_field_type(field)}, which column {field.name} of type"
        f" {_kind_name(kind)} cannot hold"
    )


def _timestamp_ms(message: Any) -> int:
    return int(message.seconds) * 1000 + int(message.nanos) // 1_000_000


def _date_days(message: Any) -> int:
    return (dt.date(message.year, message.month, message.day) - _EPOCH_DAY).days


def _decimal(message: Any, scale: int) -> Decimal:
    unscaled = int.from_bytes(message.value, "big", signed=True)
    number = Decimal(unscaled).scaleb(-int(message.scale))
    with localcontext() as ctx:
        ctx.prec = 80
        try:
            scaled = number.quantize(Decimal(1).scaleb(-scale))
        except InvalidOperation:
            return number
    return scaled if scaled == number else number


def _converter(kind: str, field: FieldDescriptor) -> Callable[[Any], Any]:
    """How a set field's value becomes the column's row value."""
    if kind == "timestamp":
        return _timestamp_ms
    if kind == "date":
        return _date_days
    if kind.startswith("decimal("):
        scale = int(kind[8:-1].split(",")[1])
        return lambda message: _decimal(message, scale)
    if kind == "string":  # proto2 strings are not checked as UTF-8 when parsed
        if field.message_type is not None:
            return lambda message: _text(message.value)
        return _text
    if field.message_type is not None:  # a wrapper
        return lambda message: message.value
    return lambda value: value


def _text(value: str) -> str:
    value.encode("utf-8")  # UnicodeEncodeError on a lone surrogate
    return value


@dataclass(frozen=True)
class _Reader:
    """How the messages of one (schema id, message index) become rows."""

    message_class: Callable[[], Message]
    #: (column, field name or None, has presence, converter, kind)
    columns: tuple[tuple[str, str | None, bool, Callable[[Any], Any], str], ...]


class ConfluentProtobufRecords:
    """Decodes the registry-framed Protobuf values of one table's records (see the module
    doc)."""

    def __init__(
        self, table: str, columns: Sequence[tuple[str, str]], registry: Mapping[str, str]
    ) -> None:
        """``columns``: the table's (name, kind) value columns; ``registry``: the schema
        registry client's settings."""
        self.table = table
        self._columns = list(columns)
        self._registry = dict(registry)
        #: Per schema id: its file, or why its values are invalid.
        self._files: dict[int, FileDescriptor | str] = {}
        #: Per (schema id, message index array): how its messages are read, or why not.
        self._readers: dict[tuple[int, tuple[int, ...]], _Reader | str] = {}

    def decode(self, value: bytes) -> dict[str, Any]:
        """The row of one record value; raises :class:`ConfluentRecordError` when there is
        none, :class:`SchemaRegistryUnavailable` when the registry cannot say."""
        from confluent_kafka.schema_registry.serde import SchemaId

        try:
            schema_id, _ = unframe(value)
        except ValueError as exc:
            raise ConfluentRecordError(
                "malformed",
                f"not a registry-framed Protobuf record of table {self.table}: {exc} (a "
                "producer with a Protobuf schema registry serializer writes magic byte 0, a"
                " 4-byte schema id and the message indexes)",
            ) from None
        file = self._files.get(schema_id)
        if file is None:
            file = self._files[schema_id] = self._file(schema_id)
        if isinstance(file, str):
            raise ConfluentRecordError("invalid", file)
        framing = SchemaId("PROTOBUF")
        try:
            payload = framing.from_bytes(io.BytesIO(value))
            indexes = tuple(framing.message_indexes or (0,))
        except Exception as exc:  # EOFError, SerializationError on a bad index array
            raise ConfluentRecordError(
                "malformed",
                f"schema id {schema_id}: the message-index array after the schema id does not"
                f" read: {type(exc).__name__}: {exc}",
            ) from None
        reader = self._readers.get((schema_id, indexes))
        if reader is None:
            reader = self._readers[(schema_id, indexes)] = self._reader(schema_id, file, indexes)
        if isinstance(reader, str):
            raise ConfluentRecordError("invalid", reader)
        message = reader.message_class()
        try:
            message.ParseFromString(payload.read())
        except Exception as exc:  # DecodeError, and what upb raises on garbage
            raise ConfluentRecordError(
                "malformed",
                f"cannot decode the Protobuf body of schema id {schema_id}: "
                f"{type(exc).__name__}: {_ADDRESS.sub('', str(exc))}",
            ) from None
        return self._row(schema_id, reader, message)

    def _row(self, schema_id: int, reader: _Reader, message: Any) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for column, field, presence, convert, kind in reader.columns:
            if field is None or (presence and not message.HasField(field)):
                row[column] = None
                continue
            try:
                found = convert(getattr(message, field))
            except (ValueError, ArithmeticError, UnicodeError) as exc:
                raise ConfluentRecordError(
                    "invalid", f"schema id {schema_id}: column {column}: field {field} is no"
                    f" {_kind_name(kind)}: {exc}",
                ) from None
            if kind == "int64" and not _INT64[0] <= found <= _INT64[1]:
                raise ConfluentRecordError(
                    "invalid", f"column {column} = {found} is outside the 64-bit range of"
                    " BIGINT",
                )
            row[column] = found
        return row

    def _reader(
        self, schema_id: int, file: FileDescriptor, indexes: tuple[int, ...]
    ) -> _Reader | str:
        descriptor = _message_at(file, indexes)
        if descriptor is None:
            return (
                f"schema id {schema_id} has no message at index {list(indexes)} (its file has"
                f" {len(file.message_types_by_name)} top-level message(s))"
            )
        fields = {f.name: f for f in descriptor.fields}
        columns = []
        for name, kind in self._columns:
            field = fields.get(name)
            if field is None:
                columns.append((name, None, False, lambda v: v, kind))
                continue
            problem = _read_problem(kind, field)
            if problem is not None:
                return f"schema id {schema_id}: message {descriptor.full_name}: {problem}"
            columns.append(
                (name, field.name, bool(field.has_presence), _converter(kind, field), kind)
            )
        return _Reader(GetMessageClass(descriptor), tuple(columns))

    def _file(self, schema_id: int) -> FileDescriptor | str:
        """The file of ``schema_id``, or the invalid message naming the id."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        unassignable = unassignable_id(schema_id)
        if unassignable is not None:
            return unassignable
        client = REGISTRY_CLIENTS.get().get(self._registry)
        try:
            schema = client.get_schema(schema_id, fmt="serialized")
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return f"schema id {schema_id} is not in the schema registry: {exc.error_message}"
            raise registry_unavailable(self.table, self._registry, schema_id, exc) from exc
        except Exception as exc:  # httpx's transport errors, after the client's retries
            raise registry_unavailable(self.table, self._registry, schema_id, exc) from exc
        kind = schema.schema_type or "AVRO"
        if kind not in ("PROTOBUF", "AVRO"):
            return f"schema id {schema_id} is a {kind} schema, not Protobuf"
        if schema.references:
            return f"schema id {schema_id} has schema references, which are not read"
        found = file_of(schema.schema_str or "", f"tidemark/schema_{schema_id}.proto")
        if isinstance(found, str):
            return f"schema id {schema_id} is {found}"
        return found


# ---- outputs ----------------------------------------------------------------------------


def _nullable(kind: Any) -> bool:
    return isinstance(kind, list) and "null" in kind


def column_kinds(schema: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (name, column kind) of an output record's fields, as a table of them reads."""
    return [(str(f["name"]), source_kind(f["type"])) for f in schema.get("fields", ())]


_SCALAR_FIELD = {
    "bool": F.TYPE_BOOL, "int32": F.TYPE_INT32, "int64": F.TYPE_INT64,
    "float32": F.TYPE_FLOAT, "float64": F.TYPE_DOUBLE, "string": F.TYPE_STRING,
    "binary": F.TYPE_BYTES,
}
_MESSAGE_FIELD = {
    "timestamp": (_TIMESTAMP, "google/protobuf/timestamp.proto"),
    "date": (_DATE, "google/type/date.proto"),
}


def _message_of(kind: str) -> tuple[str, str] | None:
    if kind.startswith("decimal("):
        return _DECIMAL, "confluent/type/decimal.proto"
    return _MESSAGE_FIELD.get(kind)


def proto_file(schema: Mapping[str, Any]) -> descriptor_pb2.FileDescriptorProto:
    """The proto3 file an output registers for its key or value record ``schema`` (the
    output's Avro record): package the record's namespace, one message named after the
    record, a field per column in order, numbered from 1 (see the module doc for the types);
    a nullable scalar column is a proto3 ``optional`` field, so NULL and zero differ."""
    name = str(schema["name"])
    namespace = schema.get("namespace")
    package = str(namespace) if namespace else ""
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"{package.replace('.', '/') + '/' if package else ''}{name}.proto",
        package=package, syntax="proto3",
    )
    message = proto.message_type.add(name=name)
    for number, field in enumerate(schema.get("fields", ()), start=1):
        kind = source_kind(field["type"])
        added = message.field.add(
            name=str(field["name"]), number=number,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        )
        referenced = _message_of(kind)
        if referenced is not None:
            added.type = F.TYPE_MESSAGE
            added.type_name = "." + referenced[0]
            if referenced[1] not in proto.dependency:
                proto.dependency.append(referenced[1])
        else:
            added.type = _SCALAR_FIELD[kind]
            if _nullable(field["type"]):
                added.proto3_optional = True
                added.oneof_index = len(message.oneof_decl)
                message.oneof_decl.add(name=f"_{field['name']}")
    # proto3 optional fields' synthetic oneofs come after every real one; there are none.
    return proto


def proto_text(schema: Mapping[str, Any]) -> str:
    """The registered form of :func:`proto_file`: the serialized file, base64 (what
    confluent-kafka's ProtobufSerializer registers)."""
    data = proto_file(schema).SerializeToString()
    return base64.standard_b64encode(data).decode("ascii")


def _output_message(file: FileDescriptor, record_name: str) -> Descriptor | None:
    """The message an output writes in a registered file: the one named after the output's
    record, else the file's first."""
    messages = file.message_types_by_name
    if record_name in messages:
        return messages[record_name]
    first = next(iter(messages.values()), None)
    return first


def protobuf_fit_problems(schema_str: str, ours: Mapping[str, Any]) -> list[str]:
    """Why a registered Protobuf schema cannot carry the values of ``ours`` (the output's
    Avro record schema); empty when every value fits: every column needs a field of its name
    whose type holds every value of the column (a nullable column a field with presence);
    fields no column fills are written as their defaults, as protobuf writes any unset
    field."""
    file = file_of(schema_str, "tidemark/latest.proto")
    if isinstance(file, str):
        return [f"it is {file}"]
    message = _output_message(file, str(ours.get("name")))
    if message is None:
        return ["its file has no message"]
    fields = {f.name: f for f in message.fields}
    problems = []
    for column in ours.get("fields", ()):
        name, kind = str(column["name"]), source_kind(column["type"])
        field = fields.get(name)
        if field is None:
            problems.append(f"message {message.full_name} has no field {name} for column {name}")
            continue
        problem = _write_problem(kind, field)
        if problem is None and _nullable(column["type"]) and not field.has_presence:
            problem = (
                f"column {name} may be NULL but field {name} ({_field_type(field)}) has no"
                " presence (declare it optional, or a wrapper)"
            )
        if problem is not None:
            problems.append(problem)
    return problems


def _write_problem(kind: str, field: FieldDescriptor) -> str | None:
    if field.is_repeated:
        return f"field {field.name} is repeated, which column {field.name} does not fill"
    message = field.message_type.full_name if field.message_type is not None else None
    referenced = _message_of(kind)
    if referenced is not None:
        ok = message == referenced[0]
    elif message is not None:
        ok = message in _WRAPPERS.get(kind, set()) and _write_problem_wrapped(kind, message)
    else:
        ok = field.type in _WRITES.get(kind, set())
    if ok:
        return None
    return (
        f"column {field.name} is {_kind_name(kind)}, which field {field.name} of type"
        f" {_field_type(field)} cannot hold"
    )


def _write_problem_wrapped(kind: str, wrapper: str) -> bool:
    """Whether a column of ``kind`` fits the wrapper message ``wrapper`` whole."""
    unsigned = wrapper in ("google.protobuf.UInt32Value", "google.protobuf.UInt64Value")
    narrow = kind == "int64" and wrapper == "google.protobuf.Int32Value"
    narrow_float = kind == "float64" and wrapper == "google.protobuf.FloatValue"
    return not (unsigned or narrow or narrow_float)


def _setter(kind: str, field: FieldDescriptor) -> Callable[[Any, Any], None]:
    """How a column's (non-null) circuit value is set into ``field`` of a message."""
    name = field.name
    message = field.message_type.full_name if field.message_type is not None else None
    if kind == "timestamp":
        return lambda m, v: getattr(m, name).FromMilliseconds(int(v))
    if kind == "date":
        def date(m: Any, v: Any) -> None:
            day = _EPOCH_DAY + dt.timedelta(days=int(v))
            target = getattr(m, name)
            target.year, target.month, target.day = day.year, day.month, day.day
        return date
    if kind.startswith("decimal("):
        def decimal(m: Any, v: Any) -> None:
            number = v if isinstance(v, Decimal) else Decimal(v)
            sign, digits, exponent = number.as_tuple()
            assert isinstance(exponent, int)
            unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
            target = getattr(m, name)
            target.value = unscaled.to_bytes(
                max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)
            target.precision = len(digits)
            target.scale = -exponent
        return decimal
    if message is not None:  # a wrapper
        return lambda m, v: setattr(getattr(m, name), "value", v)
    if field.type in (F.TYPE_FLOAT, F.TYPE_DOUBLE):
        return lambda m, v: setattr(m, name, float(v))
    return lambda m, v: setattr(m, name, v)


class ProtobufRegistryWriter(RegistryWriter):
    """Writes one output's keys or values as registry-framed Protobuf (see the module doc);
    ``schema_id`` and ``subject`` name the registered Protobuf schema written with."""

    _class: Any = None
    _setters: tuple[tuple[str, Callable[[Any, Any], None]], ...] = ()

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """One record (circuit values) as registry-framed Protobuf; a SerializationError (a
        TidemarkError) when the serializer refuses it."""
        if self._serializer is None:
            self._start()
        message = self._class()
        try:
            for name, set_value in self._setters:
                value = record.get(name)
                if value is not None:
                    set_value(message, value)
            data = self._serializer(message, self._context())
        except Exception as exc:  # a value the field refuses, the serializer's errors
            raise SerializationError(
                f"{self.field} of topic {self.topic}: the Protobuf schema of subject"
                f" {self.subject} (id {self.schema_id}) refuses the record: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return bytes(data)

    def _start(self) -> None:
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        client = REGISTRY_CLIENTS.get().get(self._registry)
        registered = client.get_schema(self.schema_id, fmt="serialized")
        file = file_of(registered.schema_str or "", f"tidemark/output_{self.schema_id}.proto")
        if isinstance(file, str):
            raise SerializationError(
                f"{self.field} of topic {self.topic}: schema id {self.schema_id} is {file}")
        descriptor = _output_message(file, str(self._schema.get("name")))
        if descriptor is None:
            raise SerializationError(
                f"{self.field} of topic {self.topic}: schema id {self.schema_id} has no message")
        fields = {f.name: f for f in descriptor.fields}
        self._setters = tuple(
            (str(c["name"]), _setter(source_kind(c["type"]), fields[str(c["name"])]))
            for c in self._schema.get("fields", ())
        )
        self._class = GetMessageClass(descriptor)
        self._serializer = ProtobufSerializer(self._class, client, conf=self._serializer_conf())

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_serializer": None, "_class": None, "_setters": ()}
