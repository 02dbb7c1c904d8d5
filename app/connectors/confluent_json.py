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
(:class:`~app.connectors.json_encoder.JsonEncoder`), framed with the schema id chosen at start
(the JSON Schema ``tidemark run`` registered, :func:`~app.connectors.json_encoder.json_schema`,
or with ``use.latest.version`` the subject's latest version). The serializer never
registers: it writes with that id and subject (``use.schema.id``), and validates each
document against the schema of that id, which it fetches from the registry.
:func:`json_fit_problems` decides at start whether a subject's latest JSON Schema validates
every object a view writes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

from app.connectors.confluent_avro import (
    REGISTRY_CLIENTS,
    RegistryWriter,
    registry_unavailable,
    unassignable_id,
    unframe,
)
from app.connectors.json_encoder import JsonEncoder, _solid, json_schema
from app.connectors.json_records import JsonRecordError, JsonRecords, shown
from app.connectors.schema_fit import describe
from app.errors import SerializationError

__all__ = [
    "ConfluentJsonRecords",
    "JsonRegistryWriter",
    "json_fit_problems",
    "registered_json_schema",
]

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
        try:
            registered_json_schema(schema)
        except ValueError as exc:
            return f"schema id {schema_id} {exc}"
        if schema.references:
            return f"schema id {schema_id} has schema references, which are not read"
        return None


def registered_json_schema(schema: Any) -> Any:
    """The JSON Schema document of a registered schema (confluent-kafka's ``Schema``): an
    object or a boolean.

    Raises:
        ValueError: it is no JSON Schema; the message says why, as a predicate of the schema
            (``is an Avro schema, not a JSON Schema``).
    """
    kind = schema.schema_type or "AVRO"
    if kind not in ("JSON", "AVRO"):
        raise ValueError(f"is a {kind} schema, not a JSON Schema")
    try:
        parsed = json.loads(schema.schema_str)
    except ValueError:
        raise ValueError("is no JSON document, so no JSON Schema") from None
    # Some registries (Apicurio's Confluent API) leave out the schema type, which the
    # client then reads as Avro: the schema's own shape tells.
    if kind == "AVRO" and _avro_shaped(parsed):
        raise ValueError("is an Avro schema, not a JSON Schema")
    if not isinstance(parsed, dict | bool):
        raise ValueError("is no JSON Schema (an object or a boolean)")
    return parsed


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


#: Keywords that limit the values of one JSON type, by the types they limit.
_LIMITS: dict[str, tuple[str, ...]] = {
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "integer": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "string": ("minLength", "maxLength", "pattern", "format"),
}
#: Object keywords whose rules over a record are not followed: a schema with one is refused.
_OBJECT_RULES = ("allOf", "anyOf", "oneOf", "not", "if", "enum", "const", "propertyNames",
                 "dependencies", "dependentRequired", "dependentSchemas",
                 "unevaluatedProperties")
#: What a top ``$ref`` is followed without: keywords of the object that drafts after 07 apply
#: beside it.
_OBJECT_KEYWORDS = ("properties", "required", "patternProperties", "additionalProperties",
                    "minProperties", "maxProperties", *_OBJECT_RULES)
#: How many ``$ref`` one schema is followed through.
_REF_DEPTH = 16


def json_fit_problems(registered: Mapping[str, Any] | bool, ours: Mapping[str, Any]) -> list[str]:
    """Why a registered JSON Schema (the parsed document) cannot validate every object
    :class:`~app.connectors.json_encoder.JsonEncoder` writes for ``ours`` (the output's Avro
    record schema); empty when every object is valid. What is written for a column is read
    off :func:`~app.connectors.json_encoder.json_schema` (a DECIMAL a string of its digits, a
    TIMESTAMP a ``date-time`` string, a REAL or DOUBLE a number or the string of NaN or an
    infinity, ``null`` for a nullable column):

    - every column needs a property whose schema takes every value written for it: its
      ``type`` admits each JSON type written (``number`` admits integers), and no ``enum``,
      ``const`` or limit of those types (``maximum``, ``maxLength``, a ``pattern`` or
      ``format`` other than the one written, ...) leaves a value out; ``anyOf``, ``oneOf``,
      ``allOf``, ``not`` and ``$ref`` into the same document are followed, other references
      and ``if`` refused;
    - every ``required`` property is a column (each object has every column, null ones
      too), so ``additionalProperties`` never applies;
    - the object's own rules beyond its properties (``propertyNames``, ``dependencies``,
      composition at its top, ...) are refused, ``minProperties``/``maxProperties`` checked.

    A schema with a problem may still take some rows; it is refused because it does not take
    them all, as an Avro schema is (:func:`~app.connectors.schema_fit.fit_problems`)."""
    invalid = _invalid(registered)
    if invalid is not None:
        return [invalid]
    written = json_schema(ours)
    try:
        top = _object_schema(registered)
    except ValueError as exc:
        return [f"it {exc}"]
    problems = [f"it {rule}" for rule in _object_rule_problems(top, len(written["properties"]))]
    properties = top.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    for field in ours.get("fields", ()):
        name = str(field["name"])
        if name not in properties:
            problems.append(f"it has no property {name} for column {name}")
            continue
        form = written["properties"][name]
        schemas = [properties[name], *_pattern_schemas(top, name)]
        refusal = _property_refusal(schemas, form, registered)
        if refusal is not None:
            why = ""
            if _solid(field["type"]) in ("float", "double") and "takes no string" in refusal:
                # NaN and the infinities have no JSON number (docs/language.md).
                why = ('; a NaN or an infinity is written as the string "NaN", "Infinity" '
                       'or "-Infinity": add "string" to its type')
            problems.append(
                f"column {name} ({describe(_solid(field['type']))}) is written as"
                f" {' or '.join(_written_types(form))}, and property {name} {refusal}{why}"
            )
    required = top.get("required")
    for name in required if isinstance(required, list) else ():
        if name not in written["properties"]:
            problems.append(f"property {name} is required and the view has no column {name}")
    return problems


def _invalid(registered: Mapping[str, Any] | bool) -> str | None:
    """Why a document is no valid JSON Schema of its draft (which the serializer's
    validator would raise on every record), or None."""
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(registered).check_schema(registered)
    except SchemaError as exc:
        return f"it is no valid JSON Schema: {exc.message}"
    return None


def _property_refusal(schemas: list[Any], form: Mapping[str, Any], root: Any) -> str | None:
    """Why the schemas a property's value must meet may refuse a value written in ``form``
    (a column's :func:`json_schema` property), or None."""
    for schema in schemas:
        for kind in _written_types(form):
            found = _refusal(schema, kind, form, root)
            if found is not None:
                return found
    return None


def _written_types(form: Mapping[str, Any]) -> list[str]:
    """The JSON types :func:`json_schema` says a column's values are written as."""
    kind = form["type"]
    return [kind] if isinstance(kind, str) else list(kind)


def _object_schema(registered: Mapping[str, Any] | bool) -> Mapping[str, Any]:
    """The object schema of a registered document (a top ``$ref`` followed).

    Raises:
        ValueError: it takes no object: why, as a predicate (``takes no object``).
    """
    if isinstance(registered, bool):
        if not registered:
            raise ValueError("takes no value")
        return {}
    if "$ref" not in registered:
        top: Any = registered
    else:
        beside = [k for k in _OBJECT_KEYWORDS if k in registered]
        if beside:
            raise ValueError(
                f"has $ref beside {', '.join(beside)} at its top, which is not followed"
            )
        top = _resolve(registered, str(registered["$ref"]))
    if not isinstance(top, dict):
        raise ValueError(f"refers by $ref to {json.dumps(top)}, which is no object schema")
    for schema in (registered, top):
        if not _takes_type(schema, "object"):
            raise ValueError(f"takes no object (its type is {json.dumps(schema['type'])})")
    return top


def _object_rule_problems(top: Mapping[str, Any], columns: int) -> list[str]:
    """Rules of the object as a whole that refuse objects of ``columns`` properties, or that
    are not followed."""
    problems = [f"has {rule} at its top, which is not followed"
                for rule in _OBJECT_RULES if rule in top]
    least, most = top.get("minProperties", 0), top.get("maxProperties", columns)
    if least > columns or most < columns:
        problems.append(
            f"takes objects of {least} to {most} properties, and the view writes {columns}"
        )
    return problems


def _pattern_schemas(top: Mapping[str, Any], name: str) -> list[Any]:
    """The ``patternProperties`` schemas that apply to property ``name`` besides its own."""
    patterns = top.get("patternProperties")
    if not isinstance(patterns, dict):
        return []
    found = []
    for pattern, schema in patterns.items():
        try:
            matches = re.search(pattern, name) is not None
        except re.error:
            matches = True  # a pattern Python cannot read may apply: its schema is checked
        if matches:
            found.append(schema)
    return found


def _takes_type(schema: Mapping[str, Any], kind: str) -> bool:
    """Whether the ``type`` of a schema admits JSON values of type ``kind`` (no ``type``
    admits all; ``number`` admits integers)."""
    declared = schema.get("type")
    if declared is None:
        return True
    types = {declared} if isinstance(declared, str) else set(declared)
    return kind in types or (kind == "integer" and "number" in types)


def _refusal(
    schema: Any, kind: str, form: Mapping[str, Any], root: Any, depth: int = 0
) -> str | None:
    """Why ``schema`` may refuse a value of JSON type ``kind`` written in ``form`` (the
    column's :func:`json_schema` property: its ``pattern`` and ``format`` are those every
    written string meets), as a predicate of the property; None when it takes every one.
    ``root``: the document ``$ref`` points into."""
    if schema is True:
        return None
    if not isinstance(schema, dict):
        return "takes no value" if schema is False else "is no JSON Schema"
    if "$ref" in schema:
        if depth >= _REF_DEPTH:
            return f"refers through more than {_REF_DEPTH} $ref"
        try:
            target = _resolve(root, str(schema["$ref"]))
        except ValueError as exc:
            return str(exc)
        found = _refusal(target, kind, form, root, depth + 1)
        if found is not None:
            return found
    if not _takes_type(schema, kind):
        return f"takes no {kind} (its type is {json.dumps(schema['type'])})"
    for keyword in ("enum", "const"):
        if keyword in schema and not _lists_null(schema, keyword, kind):
            return f"takes only the values of its {keyword}"
    for keyword in _LIMITS.get(kind, ()):
        if keyword in schema and schema[keyword] != form.get(keyword):
            return f"limits its {kind}s ({keyword} {json.dumps(schema[keyword])})"
    return _composed_refusal(schema, kind, form, root, depth)


def _composed_refusal(
    schema: Mapping[str, Any], kind: str, form: Mapping[str, Any], root: Any, depth: int
) -> str | None:
    """:func:`_refusal` of a schema's ``allOf``, ``anyOf``, ``oneOf``, ``not`` and ``if``."""
    for branch in schema.get("allOf", ()):
        found = _refusal(branch, kind, form, root, depth)
        if found is not None:
            return found
    if "anyOf" in schema and all(
        _refusal(b, kind, form, root, depth) is not None for b in schema["anyOf"]
    ):
        return f"has no branch of its anyOf that takes every {kind} written"
    if "oneOf" in schema:
        branches = schema["oneOf"]
        takes = [b for b in branches if _refusal(b, kind, form, root, depth) is None]
        # oneOf refuses a value two branches take: the others must take no value of kind.
        others = [b for b in branches if not any(b is t for t in takes)]
        if len(takes) != 1 or not all(_takes_none(b, kind, root, depth) for b in others):
            return f"has no branch of its oneOf that alone takes every {kind} written"
    if "not" in schema and not _takes_none(schema["not"], kind, root, depth):
        return f"may refuse a {kind} by its not"
    if "if" in schema:
        return "has if, which is not followed"
    return None


def _takes_none(schema: Any, kind: str, root: Any, depth: int) -> bool:
    """Whether ``schema`` surely takes no value of JSON type ``kind``: by its ``type``, or
    the ``type`` of what its ``$ref`` names."""
    if isinstance(schema, bool):
        return not schema
    if not isinstance(schema, dict):
        return False
    if "type" in schema and not _takes_type(schema, kind):
        return True
    if "$ref" not in schema or depth >= _REF_DEPTH:
        return False
    try:
        target = _resolve(root, str(schema["$ref"]))
    except ValueError:
        return False
    return _takes_none(target, kind, root, depth + 1)


def _lists_null(schema: Mapping[str, Any], keyword: str, kind: str) -> bool:
    """Whether an ``enum`` or ``const`` takes every value of ``kind``: only ``null``, the one
    value of its type, can be listed whole."""
    listed = schema[keyword] if keyword == "enum" else [schema[keyword]]
    return kind == "null" and isinstance(listed, list) and None in listed


def _resolve(root: Any, ref: str) -> Any:
    """The schema a ``$ref`` into the same document (``#``, ``#/definitions/Money``) names.

    Raises:
        ValueError: another reference, or one the document does not hold, as a predicate.
    """
    if ref != "#" and not ref.startswith("#/"):
        raise ValueError(f"refers to {ref}, which is not followed (only #/... within the"
                         " schema)")
    node = root
    for part in ref[2:].split("/") if ref != "#" else ():
        key = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            raise ValueError(f"refers to {ref}, which the schema does not hold")
    return node
