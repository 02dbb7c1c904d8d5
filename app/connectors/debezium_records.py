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
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.connectors.json_records import JsonRecordError, JsonRecords, shown

__all__ = ["ENVELOPE", "ChangeEvent", "DebeziumJsonRecords"]

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


class DebeziumJsonRecords:
    """Decodes the change events of one table (see the module doc)."""

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
        self.table = table
        self._json = JsonRecords(table, columns)
        self._envelope = tuple(envelope)
        self._deletion = frozenset(deletion_columns)

    def decode(self, value: bytes) -> ChangeEvent:
        """The change event of one record value; raises :class:`JsonRecordError` when it
        is none (``malformed``) or one Tidemark does not apply (``invalid``)."""
        found = self._json.parse(value)
        if isinstance(found, dict) and "op" not in found and "payload" in found:
            found = found["payload"]  # the JsonConverter's {"schema": ..., "payload": ...}
        if not isinstance(found, dict):
            raise self._malformed(f"the event is {shown(found)}, not a JSON object")
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
        row = self._json.row(fields or {}, None if kind == "ok" else self._deletion, image)
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
