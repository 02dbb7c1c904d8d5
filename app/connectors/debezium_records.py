"""Decode the values of a ``'format' = 'debezium-json'`` table: Debezium change events.

A Debezium connector writes one change event per changed row of a database table, as JSON
(Kafka Connect's ``JsonConverter``): ``{"before": {...}, "after": {...}, "op": "u",
"source": {"ts_ms": ..., "db": ..., "table": ...}, "ts_ms": ...}``, wrapped as
``{"schema": {...}, "payload": <event>}`` when the converter has schemas enabled (both
forms are read, whatever the table says). :class:`DebeziumJsonRecords` turns one event into
what the table's keyed-table mechanism reads (ADR 0018, 0028):

- ``op`` ``c`` (create), ``r`` (a snapshot read) or ``u`` (update): the row of ``after``, an
  ``ok`` row (one more version of its key);
- ``op`` ``d`` (delete): the deletion of its key, a ``delete`` row holding the key and time
  columns, read from ``before`` (the PRIMARY KEY columns the Kafka key does not give; the
  value columns of the table's LATENESS), every other value column NULL.

Fields are read by the JSON value conventions (:mod:`app.connectors.json_records`), so a
field of the wrong form is ``invalid`` naming the column and the image it is in. The
envelope's metadata (``METADATA FROM 'value.source.timestamp'``, ...,
:data:`~app.circuit.metadata.CHANGELOG_METADATA_TYPES`) is read from the same event.

A value that is no UTF-8 JSON text, or no change event (not an object, no ``op``, a payload
that is not an object) raises :class:`~app.connectors.json_records.JsonRecordError` with
reason ``malformed``; an event Tidemark does not apply (``op`` ``t``, a truncate, or ``m``,
a message; a create or update without ``after``), or a field its column cannot hold, with
reason ``invalid``. A null value (the tombstone Debezium writes after a delete) is the
gate's (app/connectors/late_gate.py). Decoding is a pure function of the bytes (S15).

``'format' = 'debezium-avro-confluent'`` events (Kafka Connect's ``AvroConverter``) are the
same envelope in Avro, framed for a schema registry: :class:`DebeziumAvroRecords` reads it
with the ``avro-confluent`` decoder (app/connectors/confluent_avro.py), the writer's envelope
resolved to :func:`envelope_schema` (the table's value record inside), then applies the same
``op`` and image rules; a value the Avro decoder refuses keeps its reason and message.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.connectors.json_records import JsonRecordError, JsonRecords, shown

__all__ = ["ENVELOPE", "ChangeEvent", "DebeziumAvroRecords", "DebeziumJsonRecords",
           "envelope_schema"]

#: The verdict each ``op`` gives its row: one more version of its key, or its deletion.
_OPS = {"c": "ok", "r": "ok", "u": "ok", "d": "delete"}
_OP_NAMES = {"t": "a truncate", "m": "a message"}

#: Where in the event each envelope metadata key is (a path of object fields).
ENVELOPE: Mapping[str, tuple[str, ...]] = {
    "value.source.timestamp": ("source", "ts_ms"),
    "value.ingestion-timestamp": ("ts_ms",),
    "value.source.database": ("source", "db"),
    "value.source.schema": ("source", "schema"),
    "value.source.table": ("source", "table"),
}


@dataclass(frozen=True)
class ChangeEvent:
    """One decoded change event: ``kind`` ``ok`` (a row: create, snapshot read, update) or
    ``delete`` (the deletion of its key); ``row`` has every value and envelope column."""

    kind: str
    row: dict[str, Any]


def _text(value: Any) -> bool:
    """Whether ``value`` is a string an Arrow column holds (no lone surrogate of a JSON
    ``\\ud800`` escape)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _ChangeEvents:
    """What both Debezium formats share: an event's ``op`` and image to a row or deletion,
    and its envelope metadata."""

    def __init__(
        self,
        table: str,
        envelope: Sequence[tuple[str, str, str]],
        deletion_columns: Collection[str],
    ) -> None:
        self.table = table
        self._envelope = tuple(envelope)
        self._deletion = frozenset(deletion_columns)

    def _event(
        self,
        found: Mapping[str, Any],
        row_of: Callable[[Mapping[str, Any], Collection[str] | None, str], dict[str, Any]],
    ) -> ChangeEvent:
        """The change event of a decoded envelope; ``row_of(fields, only, image)`` is the row
        of an image's fields (``only``: these columns, the others NULL)."""
        if "op" not in found:
            raise self._malformed("it has no 'op' field")
        op = found["op"]
        kind = _OPS.get(op) if isinstance(op, str) else None
        if kind is None:
            what = _OP_NAMES.get(op, "an operation") if isinstance(op, str) else "an operation"
            raise JsonRecordError(
                "invalid",
                f"op {shown(op)} is {what} that table {self.table} does not apply: a change "
                "event is 'c' (create), 'r' (snapshot read), 'u' (update) or 'd' (delete)",
            )
        image = "after" if kind == "ok" else "before"
        fields = found.get(image)
        if fields is not None and not isinstance(fields, dict):
            raise JsonRecordError(
                "invalid", f"{image} of an '{op}' event is {shown(fields)}, not a JSON object"
            )
        if fields is None and kind == "ok":
            raise JsonRecordError("invalid", f"a '{op}' event without {image}: it has no row")
        row = row_of(fields or {}, None if kind == "ok" else self._deletion, image)
        row.update(self._metadata(found))
        return ChangeEvent(kind, row)

    def missing(self, name: str) -> str | None:
        """What an event lacks when envelope column ``name`` is NULL (for the message);
        None when ``name`` is no envelope column."""
        key = next((k for n, _, k in self._envelope if n == name), None)
        return None if key is None else f"no {'.'.join(ENVELOPE[key])} ({key})"

    def _metadata(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """The envelope metadata columns of one event; NULL where the event has no field."""
        row: dict[str, Any] = {}
        for name, kind, key in self._envelope:
            value: Any = event
            for step in ENVELOPE[key]:
                value = value.get(step) if isinstance(value, dict) else None
            if value is not None:
                good = type(value) is int if kind == "timestamp" else _text(value)
                if not good:
                    expected = ("epoch milliseconds" if kind == "timestamp"
                                else "a string of valid Unicode")
                    raise JsonRecordError(
                        "invalid",
                        f"column {name}: {'.'.join(ENVELOPE[key])} ({key}) is "
                        f"{shown(value)}, not {expected}",
                    )
            row[name] = value
        return row

    def _malformed(self, detail: str) -> JsonRecordError:
        return JsonRecordError(
            "malformed", f"not a Debezium change event of table {self.table}: {detail}"
        )


class DebeziumJsonRecords(_ChangeEvents):
    """Decodes the JSON change events of one table (see the module doc)."""

    def __init__(
        self,
        table: str,
        columns: Sequence[tuple[str, str]],
        envelope: Sequence[tuple[str, str, str]],
        deletion_columns: Collection[str],
    ) -> None:
        """``columns``: the value columns (name, kind), kinds as in ``SourceColumn``;
        ``envelope``: the envelope metadata columns (name, kind, key); ``deletion_columns``:
        the value columns a delete event gives from ``before`` (its key and time)."""
        super().__init__(table, envelope, deletion_columns)
        self._json = JsonRecords(table, columns)

    def decode(self, value: bytes) -> ChangeEvent:
        """The change event of one record value; raises :class:`JsonRecordError` when it
        is none (``malformed``) or one Tidemark does not apply (``invalid``)."""
        found = self._json.parse(value)
        if isinstance(found, dict) and "op" not in found and "payload" in found:
            found = found["payload"]  # the JsonConverter's {"schema": ..., "payload": ...}
        if not isinstance(found, dict):
            raise self._malformed(f"the event is {shown(found)}, not a JSON object")
        return self._event(found, self._json.row)


def envelope_schema(value_schema: Mapping[str, Any]) -> dict[str, Any]:
    """The reader schema of a ``debezium-avro-confluent`` table's events: Debezium's
    envelope (``before``, ``after``, ``op``, ``ts_ms``, ``source``) around the table's value
    record, every value field nullable (a writer's null reaches the gate's NOT NULL check)
    and every envelope field but ``op`` optional."""
    value = {
        **dict(value_schema),
        "fields": [
            {**f, "type": f["type"] if isinstance(f["type"], list) and "null" in f["type"]
             else ["null", *(f["type"] if isinstance(f["type"], list) else [f["type"]])],
             "default": None}
            for f in value_schema.get("fields", ())
        ],
    }
    optional = [{"name": n, "type": ["null", "string"], "default": None}
                for n in ("db", "schema", "table")]
    source = {"type": "record", "name": "Source", "fields": [
        {"name": "ts_ms", "type": ["null", "long"], "default": None}, *optional]}
    return {
        "type": "record",
        "name": "Envelope",
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", _full_name(value, None)], "default": None},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {"name": "source", "type": ["null", source], "default": None},
        ],
    }


def _full_name(record: Mapping[str, Any], enclosing: str | None) -> str:
    name = str(record["name"])
    namespace = record.get("namespace", enclosing)
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _record_of(schema: Mapping[str, Any], field: str) -> Mapping[str, Any] | None:
    """The record a field's type (or a branch of its union) defines, if any."""
    for f in schema.get("fields", ()):
        if f.get("name") == field:
            kind = f.get("type")
            for branch in kind if isinstance(kind, list) else [kind]:
                if isinstance(branch, dict) and branch.get("type") == "record":
                    return branch
    return None


def _named_like(writer: Mapping[str, Any], reader: dict[str, Any]) -> dict[str, Any]:
    """The envelope reader with its value and source records named as the writer's (Avro
    resolves a union's record branch by its name)."""
    namespace = writer.get("namespace")
    value = _record_of(writer, "before") or _record_of(writer, "after")
    source = _record_of(writer, "source")
    fields = []
    for f in reader["fields"]:
        name = f["name"]
        if name == "before" and value is not None:
            mine = _record_of(reader, "before")
            assert mine is not None
            renamed = {**mine, "name": _full_name(value, namespace)}
            renamed.pop("namespace", None)
            f = {**f, "type": ["null", renamed]}
        elif name == "after" and value is not None:
            f = {**f, "type": ["null", _full_name(value, namespace)]}
        elif name == "source" and source is not None:
            mine = _record_of(reader, "source")
            assert mine is not None
            f = {**f, "type": ["null", {**mine, "name": _full_name(source, namespace)}]}
        fields.append(f)
    return {**reader, "fields": fields}


class DebeziumAvroRecords(_ChangeEvents):
    """Decodes the registry-framed Avro change events of one table: the envelope is read by
    the ``avro-confluent`` decoder (framing, writer schema by id, resolution to
    :func:`envelope_schema`), then as a JSON event is (see the module doc)."""

    def __init__(
        self,
        table: str,
        columns: Sequence[tuple[str, str]],
        envelope: Sequence[tuple[str, str, str]],
        deletion_columns: Collection[str],
        value_schema: Mapping[str, Any],
        registry: Mapping[str, str],
    ) -> None:
        """As :class:`DebeziumJsonRecords`, with the table's value record ``value_schema``
        and the schema registry client's settings."""
        from app.connectors.confluent_avro import ConfluentAvroRecords

        super().__init__(table, envelope, deletion_columns)
        self._columns = [name for name, _ in columns]
        self._avro = ConfluentAvroRecords(table, envelope_schema(value_schema), registry,
                                          _named_like)

    def decode(self, value: bytes) -> ChangeEvent:
        """The change event of one record value; raises :class:`JsonRecordError` when it
        is none (``malformed``) or one Tidemark does not apply (``invalid``),
        :class:`~app.connectors.confluent_avro.SchemaRegistryUnavailable` when the registry
        cannot say."""
        from app.connectors.confluent_avro import ConfluentRecordError

        try:
            found = self._avro.decode(value)
        except ConfluentRecordError as exc:
            raise JsonRecordError(exc.reason, exc.message) from None
        return self._event(found, self._row)

    def _row(self, fields: Mapping[str, Any], only: Collection[str] | None,
             image: str) -> dict[str, Any]:
        return {name: fields.get(name) if only is None or name in only else None
                for name in self._columns}
