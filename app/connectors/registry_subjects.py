"""The subject an output's key or value schema lives under, as Confluent's serializers name it.

A serializer's ``key.subject.name.strategy`` and ``value.subject.name.strategy`` choose it:

- ``TopicNameStrategy`` (the default): ``<topic>-key`` and ``<topic>-value``;
- ``RecordNameStrategy``: the record's full name (``namespace.name``), so one subject holds
  one record type whatever topic it is written to;
- ``TopicRecordNameStrategy``: ``<topic>-<namespace.name>``.

The Java clients take the strategy's class name (``io.confluent.kafka.serializers.subject.
RecordNameStrategy``), the Python client a function; both spellings are read here, as is the
bare class name. A record strategy needs a named schema: a bare key (``{"type": "string"}``)
has none, so it is refused, as the Java serializer refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["STRATEGIES", "strategy_name", "subject_name"]

#: The strategies, by their class names.
STRATEGIES = ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
_JAVA_PACKAGE = "io.confluent.kafka.serializers.subject."


def strategy_name(text: str) -> str:
    """The bare class name of a strategy spelled as Confluent's clients take it; ValueError
    naming the choices for any other."""
    name = text.strip()
    if name.startswith(_JAVA_PACKAGE):
        name = name[len(_JAVA_PACKAGE):]
    if name not in STRATEGIES:
        raise ValueError(
            f"no subject name strategy {text!r}: use one of {', '.join(STRATEGIES)}"
            f" (or its class name, {_JAVA_PACKAGE}TopicNameStrategy)"
        )
    return name


def _full_name(schema: Mapping[str, Any]) -> str | None:
    """A named schema's full name (``namespace.name``), None for a primitive."""
    name = schema.get("name")
    if schema.get("type") not in ("record", "enum", "fixed") or not isinstance(name, str):
        return None
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def subject_name(
    strategy: str, topic: str, field: Literal["key", "value"], schema: Mapping[str, Any]
) -> str:
    """The subject of ``topic``'s key or value schema under ``strategy`` (a bare class name,
    :func:`strategy_name`); ValueError when a record strategy meets an unnamed schema."""
    if strategy == "TopicNameStrategy":
        return f"{topic}-{field}"
    full = _full_name(schema)
    if full is None:
        raise ValueError(
            f"{strategy} names the subject after the record, and the {field} of topic {topic}"
            f" is a bare {schema.get('type')}, which has no name: use TopicNameStrategy for"
            f" the {field}"
        )
    return full if strategy == "RecordNameStrategy" else f"{topic}-{full}"
