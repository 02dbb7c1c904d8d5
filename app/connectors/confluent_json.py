"""JSON Schema records of a schema registry: ``'format' = 'json-registry'`` tables and outputs.

A value is what confluent-kafka's ``JSONSerializer`` (and Java's ``KafkaJsonSchemaSerializer``)
writes: the Confluent framing (magic byte ``0``, the writer schema's id) and a JSON document
valid against that JSON Schema. :class:`ConfluentJsonRecords` reads it with confluent-kafka's
own ``JSONDeserializer``, which reads the framing, fetches the writer schema by id from the
registry and validates the document against it; the document becomes the table's row by the
rules of ``'format' = 'json'`` tables (:class:`~app.connectors.json_records.JsonRecords`: the
same columns by name, the same types, numbers with a fraction read exactly).

Every bad record is a dead letter with a reason, as :class:`JsonRecordError` says it:
``malformed`` for a value that is not framed or not JSON, ``invalid`` for a schema id the
registry does not know, a schema that is not a JSON Schema (an Avro id, say), a document the
writer schema refuses, or a field its column cannot hold. A registry that cannot be reached is
no dead letter: :class:`~app.connectors.confluent_avro.SchemaRegistryUnavailable` fails the
task, and Spark retries it (as for ``avro-confluent``).

:class:`JsonRegistryWriter` writes an ``'encoding' = 'json-registry'`` output's keys or
values with confluent-kafka's ``JSONSerializer``: the JSON object of ``'encoding' = 'json'``
(:class:`~app.connectors.json_encoder.JsonEncoder`), validated against the JSON Schema
``tidemark run`` registered at start (:func:`~app.connectors.json_encoder.json_schema`) and
framed with its id. The serializer never registers: it writes with that id and subject.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from app.connectors.confluent_avro import (
    REGISTRY_CLIENTS,
    RegistryWriter,
    registry_unavailable,
    unassignable_id,
    unframe,
)
from app.connectors.json_encoder import JsonEncoder, json_schema
from app.connectors.json_records import JsonRecordError, JsonRecords, shown
from app.errors import SerializationError

__all__ = ["ConfluentJsonRecords", "JsonRegistryWriter"]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


#: Avro's type names that no JSON Schema ``type`` has.
_AVRO_ONLY = {"record", "enum", "fixed", "map", "int", "long", "float", "double", "bytes"}


def _avro_shaped(schema: Any) -> bool:
    """Whether a schema document is Avro's: a union, a primitive's name, or an object whose
    ``type`` is a type JSON Schema does not have (``record``, ``long``, ...) or that has
    ``fields``."""
    if isinstance(schema, list | str):
        return True
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    return "fields" in schema or (isinstance(kind, str) and kind in _AVRO_ONLY)


class ConfluentJsonRecords:
    """Decodes the registry-framed JSON values of one table's records (see the module doc)."""

    def __init__(
        self,
        table: str,
        topic: str,
        columns: Sequence[tuple[str, str]],
        registry: Mapping[str, str],
    ) -> None:
        """``columns``: the table's (name, kind) value columns; ``registry``: the schema
        registry client's settings."""
        self.table, self.topic = table, topic
        self._rows = JsonRecords(table, columns)
        self._registry = dict(registry)
        self._deserializer: Any = None
        #: Per schema id: None when it is a JSON Schema, else why its values are invalid.
        self._kinds: dict[int, str | None] = {}

    def decode(self, value: bytes) -> dict[str, Any]:
        """The row of one record value; raises :class:`JsonRecordError` when there is none,
        :class:`SchemaRegistryUnavailable` when the registry cannot say."""
        from confluent_kafka.serialization import (
            MessageField,
            SerializationContext,
            SerializationError,
        )

        try:
            schema_id, _ = unframe(value)
        except ValueError as exc:
            raise JsonRecordError(
                "malformed",
                f"not a registry-framed JSON record of table {self.table}: {exc} (a producer "
                "with a JSON Schema serializer writes magic byte 0 and a 4-byte schema id)",
            ) from None
        problem = self._kinds.get(schema_id, "")
        if problem == "":
            problem = self._kinds[schema_id] = self._kind(schema_id)
        if problem is not None:
            raise JsonRecordError("invalid", problem)
        context = SerializationContext(self.topic, MessageField.VALUE)
        try:
            document = self._json_deserializer()(value, context)
        except JsonRecordError:
            raise
        except SerializationError as exc:  # the document is not valid against its schema
            raise JsonRecordError(
                "invalid", f"schema id {schema_id}: the JSON Schema refuses the record: {exc}"
            ) from None
        except Exception as exc:  # the validator on documents no schema expects
            detail = _ADDRESS.sub("", str(exc))
            raise JsonRecordError(
                "invalid",
                f"schema id {schema_id}: the record cannot be validated: "
                f"{type(exc).__name__}: {detail}",
            ) from None
        if not isinstance(document, dict):
            raise JsonRecordError(
                "malformed",
                f"not a JSON record of table {self.table}: the value is {shown(document)}, not"
                " a JSON object",
            )
        return self._rows.row(document)

    def _json_deserializer(self) -> Any:
        if self._deserializer is None:
            from confluent_kafka.schema_registry.json_schema import JSONDeserializer

            client = REGISTRY_CLIENTS.get().get(self._registry)
            self._deserializer = JSONDeserializer(
                None, schema_registry_client=client, json_decode=self._rows.parse
            )
        return self._deserializer

    def _kind(self, schema_id: int) -> str | None:
        """None when ``schema_id`` is a JSON Schema the validator takes, else the invalid
        message naming the id (the deserializer then finds the schema in the client's
        cache)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        unassignable = unassignable_id(schema_id)
        if unassignable is not None:
            return unassignable
        client = REGISTRY_CLIENTS.get().get(self._registry)
        try:
            schema = client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return f"schema id {schema_id} is not in the schema registry: {exc.error_message}"
            raise registry_unavailable(self.table, self._registry, schema_id, exc) from exc
        except Exception as exc:  # httpx's transport errors, after the client's retries
            raise registry_unavailable(self.table, self._registry, schema_id, exc) from exc
        kind = schema.schema_type or "AVRO"
        if kind not in ("JSON", "AVRO"):
            return f"schema id {schema_id} is a {kind} schema, not a JSON Schema"
        if schema.references:
            return f"schema id {schema_id} has schema references, which are not read"
        try:
            parsed = json.loads(schema.schema_str)
        except ValueError:
            return f"schema id {schema_id} is no JSON document, so no JSON Schema"
        # Some registries (Apicurio's Confluent API) leave out the schema type, which the
        # client then reads as Avro: the schema's own shape tells.
        if kind == "AVRO" and _avro_shaped(parsed):
            return f"schema id {schema_id} is an Avro schema, not a JSON Schema"
        if not isinstance(parsed, dict | bool):
            return f"schema id {schema_id} is no JSON Schema (an object or a boolean)"
        return None


class JsonRegistryWriter(RegistryWriter):
    """Writes one output's keys or values as registry-framed JSON (see the module doc); its
    ``schema`` is the Avro record the JSON object holds."""

    _encoder: JsonEncoder | None = None

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """One record (circuit values) as registry-framed JSON; a SerializationError (a
        TidemarkError) when the serializer refuses it."""
        from confluent_kafka.serialization import (
            SerializationError as SerdeError,
        )

        if self._serializer is None:
            self._start()
        assert self._encoder is not None
        try:
            data = self._serializer(self._encoder.document(record), self._context())
        except SerdeError as exc:
            raise SerializationError(
                f"{self.field} of topic {self.topic}: the JSON Schema of subject"
                f" {self.subject} refuses the record: {exc}"
            ) from exc
        return bytes(data)

    def _start(self) -> None:
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        self._encoder = JsonEncoder(self._schema)
        self._serializer = JSONSerializer(
            json.dumps(json_schema(self._schema)),
            REGISTRY_CLIENTS.get().get(self._registry),
            conf=self._serializer_conf(),
            json_encode=self._encoder.dump,
        )

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_serializer": None, "_encoder": None}
