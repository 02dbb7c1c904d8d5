"""The schema an ``avro-confluent`` output writes with, chosen at start as Confluent's serializers
choose it (docs/adr/0026-outputs-write-the-subjects-registered-schema.md); ``json-registry``
and ``protobuf-confluent`` outputs find theirs the same way (a JSON Schema subject's latest
version fitted by :func:`app.connectors.confluent_json.json_fit_problems`, a Protobuf one's
by :func:`app.connectors.confluent_protobuf.protobuf_fit_problems`, ADR 0029).

Per output key and value, with the serializer settings Confluent's clients name
(:class:`SerializerSettings`):

- ``auto.register.schemas = true`` (the default): the view's own schema is registered under
  the subject (a schema the subject already has keeps its id) and written with;
- else ``use.latest.version = true``: the subject's latest version is written with, when it
  can carry every row of the view (:func:`app.connectors.schema_fit.fit_problems`); the
  records then carry its id and its field order, a field no column fills takes its default;
- else the view's own schema must already be registered under the subject (a lookup, as the
  serializers do), and its id is written with.

The subject comes from the key's or value's subject name strategy
(:mod:`app.connectors.registry_subjects`). Anything that stops an output from writing is
raised before a record is written: :class:`~app.errors.SubjectSchemaError` names the output,
the subject, the schema id and version and what does not fit;
:class:`~app.connectors.confluent_avro.SchemaRegistryUnavailable` a registry that did not
answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.connectors.confluent_avro import REGISTRY_CLIENTS, SchemaRegistryUnavailable
from app.connectors.registry_subjects import subject_name
from app.connectors.schema_fit import fit_problems, writer_schema
from app.errors import SubjectSchemaError

__all__ = ["OutputSchema", "SerializerSettings", "output_schema", "schema_text"]


@dataclass(frozen=True)
class SerializerSettings:
    """How an output's schemas are found in the registry, named as Confluent's serializers
    name their settings (``auto.register.schemas``, ``use.latest.version``,
    ``key.subject.name.strategy``, ``value.subject.name.strategy``; strategies by class
    name)."""

    auto_register_schemas: bool = True
    use_latest_version: bool = False
    key_subject_name_strategy: str = "TopicNameStrategy"
    value_subject_name_strategy: str = "TopicNameStrategy"
    #: A subject named outright (``'key.subject'``, ``'value.subject'``; Flink's
    #: ``'[key.|value.]avro-confluent.subject'``), in place of its strategy's.
    key_subject: str | None = None
    value_subject: str | None = None


@dataclass(frozen=True)
class OutputSchema:
    """What one output key or value is written with: the registered ``schema_id`` of
    ``subject`` and the ``schema`` its records are encoded in (the view's own, or the
    registered one); ``version`` when the subject's version was read."""

    subject: str
    schema_id: int
    schema: dict[str, Any]
    version: int | None = None


def schema_text(schema: Mapping[str, Any]) -> str:
    """A schema as it is registered: a bare primitive (``{"type": "string"}``) as its type
    (``"string"``), as Java's ``KafkaAvroSerializer`` registers a String key."""
    kind = schema.get("type")
    bare = isinstance(kind, str) and len(schema) == 1 and kind != "record"
    return json.dumps(kind if bare else dict(schema))


def output_schema(
    registry: Mapping[str, str],
    what: str,
    topic: str,
    field: Literal["key", "value"],
    ours: Mapping[str, Any],
    serializer: SerializerSettings,
    json_document: Mapping[str, Any] | None = None,
    protobuf: bool = False,
) -> OutputSchema:
    """The schema ``what`` (``view v``) writes ``topic``'s ``field`` with (see the module
    doc); ``ours``: the view's own (Avro) schema of it, which names the subject;
    ``json_document``: for a ``json-registry`` output, the JSON Schema registered instead;
    with ``use.latest.version`` the subject's latest JSON Schema is written with when it
    validates every object written for ``ours``
    (:func:`~app.connectors.confluent_json.json_fit_problems`);
    ``protobuf``: a ``protobuf-confluent`` output, which registers the Protobuf file of
    ``ours`` (:func:`~app.connectors.confluent_protobuf.proto_file`) and with
    ``use.latest.version`` writes with the subject's latest Protobuf schema when it can
    carry every row (:func:`~app.connectors.confluent_protobuf.protobuf_fit_problems`)."""
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    strategy = (
        serializer.key_subject_name_strategy if field == "key"
        else serializer.value_subject_name_strategy
    )
    named = serializer.key_subject if field == "key" else serializer.value_subject
    try:
        subject = named or subject_name(strategy, topic, field, ours)
    except ValueError as exc:
        raise SubjectSchemaError(f"{what}: {exc}") from None
    client = REGISTRY_CLIENTS.get().get(registry)
    url = registry.get("url")
    if protobuf:
        from app.connectors.confluent_protobuf import proto_text

        registered = Schema(proto_text(ours), "PROTOBUF")
    elif json_document is not None:
        registered = Schema(json.dumps(dict(json_document)), "JSON")
    else:
        registered = Schema(schema_text(ours), "AVRO")
    try:
        if serializer.auto_register_schemas:
            schema_id = client.register_schema(subject, registered)
            return OutputSchema(subject, int(schema_id), dict(ours))
        if serializer.use_latest_version and protobuf:
            return _latest_protobuf(client, what, subject, ours)
        if serializer.use_latest_version and json_document is not None:
            return _latest_json(client, what, subject, ours)
        if serializer.use_latest_version:
            return _latest(client, what, subject, ours)
        found = client.lookup_schema(subject, registered)
        return OutputSchema(subject, int(found.schema_id), dict(ours), found.version)
    except SchemaRegistryError as exc:
        if exc.http_status_code == 404 and not serializer.auto_register_schemas:
            raise SubjectSchemaError(_not_registered(what, subject, serializer, exc)) from exc
        raise SchemaRegistryUnavailable(
            f"{what}: the schema registry {url} did not "
            f"{'register' if serializer.auto_register_schemas else 'look up'} subject"
            f" {subject}: {exc}"
        ) from exc
    except SubjectSchemaError:
        raise
    except Exception as exc:  # httpx's transport errors (TLS, refused) after the retries
        raise SchemaRegistryUnavailable(
            f"{what}: the schema registry {url} did not answer for subject {subject}:"
            f" {type(exc).__name__}: {exc}"
        ) from exc


def _latest(client: Any, what: str, subject: str, ours: Mapping[str, Any]) -> OutputSchema:
    """The subject's latest version, when it carries every row of ``ours``."""
    latest = client.get_latest_version(subject)
    schema = latest.schema
    where = f"subject {subject} (schema id {latest.schema_id}, version {latest.version})"
    kind = schema.schema_type or "AVRO"
    if kind != "AVRO":
        raise SubjectSchemaError(
            f"{what}: the latest schema of {where} is a {kind} schema, not Avro: register an"
            " Avro version, or use auto.register.schemas"
        )
    _refuse_references(what, where, schema, "written")
    try:
        registered = json.loads(schema.schema_str)
    except ValueError:  # a bare primitive name is stored unquoted by some registries
        registered = schema.schema_str.strip()
    problems = fit_problems(registered, ours)
    _refuse_misfit(what, where, problems,
                   "a field for every column, a default for every other field")
    return OutputSchema(subject, int(latest.schema_id), writer_schema(registered), latest.version)


def _latest_protobuf(
    client: Any, what: str, subject: str, ours: Mapping[str, Any]
) -> OutputSchema:
    """The subject's latest version, when it is a Protobuf schema that carries every row of
    ``ours``; its records are then written in its message (the tasks fetch it by id)."""
    from app.connectors.confluent_protobuf import protobuf_fit_problems

    latest = client.get_latest_version(subject, fmt="serialized")
    schema = latest.schema
    where = f"subject {subject} (schema id {latest.schema_id}, version {latest.version})"
    _refuse_references(what, where, schema, "written")
    problems = protobuf_fit_problems(schema.schema_str or "", ours)
    _refuse_misfit(what, where, problems,
                   "a field of a fitting type for every column")
    return OutputSchema(subject, int(latest.schema_id), dict(ours), latest.version)


def _latest_json(client: Any, what: str, subject: str, ours: Mapping[str, Any]) -> OutputSchema:
    """The subject's latest version, when it is a JSON Schema that validates every object
    written for ``ours``; the objects stay those of ``ours`` (the view's columns), framed
    with its id."""
    from app.connectors.confluent_json import json_fit_problems, registered_json_schema

    latest = client.get_latest_version(subject)
    schema = latest.schema
    where = f"subject {subject} (schema id {latest.schema_id}, version {latest.version})"
    try:
        document = registered_json_schema(schema)
    except ValueError as exc:
        raise SubjectSchemaError(
            f"{what}: the latest schema of {where} {exc}: register a JSON Schema version, or"
            " use auto.register.schemas"
        ) from None
    _refuse_references(what, where, schema, "followed")
    problems = json_fit_problems(document, ours)
    _refuse_misfit(what, where, problems,
                   "for every column a property that takes what is written for it, no other"
                   " required property")
    return OutputSchema(subject, int(latest.schema_id), dict(ours), latest.version)


def _refuse_references(what: str, where: str, schema: Any, how: str) -> None:
    """A latest version with schema references is not written with: they are not ``how``."""
    if schema.references:
        raise SubjectSchemaError(
            f"{what}: the latest schema of {where} has schema references, which are not"
            f" {how}: register it without them, or use auto.register.schemas"
        )


def _refuse_misfit(what: str, where: str, problems: list[str], fix: str) -> None:
    """A latest version that cannot carry every row of the view, with its ``problems``;
    ``fix`` says what a version that can has."""
    if problems:
        raise SubjectSchemaError(
            f"{what}: the latest schema of {where} cannot carry the view's rows: "
            + "; ".join(problems)
            + f": register a version that can ({fix}), or change the view's columns"
        )


def _not_registered(
    what: str, subject: str, serializer: SerializerSettings, exc: BaseException
) -> str:
    if serializer.use_latest_version:
        return (
            f"{what}: subject {subject} has no registered version to write with"
            f" (use.latest.version): register one, or set auto.register.schemas = true"
            f" ({exc})"
        )
    return (
        f"{what}: the view's schema is not registered under subject {subject} and"
        " auto.register.schemas is false: register it, set use.latest.version = true to write"
        f" with the subject's latest version, or set auto.register.schemas = true ({exc})"
    )
