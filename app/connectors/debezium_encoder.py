"""Encode an output view's changes as Debezium change events (``'encoding' = 'debezium-json'``,
SPEC S13; Flink's ``debezium-json`` sink format).

Each record is one event, as Flink writes them: an insertion is ``op`` ``"c"`` with the row
as ``after``, a retraction ``op`` ``"d"`` with the row as ``before`` (an update is the
retraction of the old row, then the insertion of the new one: Flink writes no ``"u"``
either). ``ts_ms`` is the step's ``ptime``, so a replayed step writes the same bytes (S15).
The row is the JSON object ``'encoding' = 'json'`` writes (app/connectors/json_encoder.py),
so a ``'format' = 'debezium-json'`` table of the same columns reads each event back: a
create as its row, a delete as its key's deletion (ADR 0028).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.connectors.json_encoder import JsonEncoder, json_decoder

__all__ = ["CHANGE_FIELDS", "DebeziumJsonDecoder", "DebeziumJsonEncoder"]

#: The changelog fields a view's value schema adds (S13), which the event's own fields carry.
CHANGE_FIELDS = ("undo", "ptime", "ver")


def _row_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {**schema, "fields": [f for f in schema.get("fields", [])
                                 if f["name"] not in CHANGE_FIELDS]}


class DebeziumJsonEncoder:
    """Writes a view's records (its value schema's fields, ``undo`` and ``ptime`` among
    them for a ``changelog`` view) as change events."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._row = JsonEncoder(_row_schema(schema))

    def encode(self, record: Mapping[str, Any], ptime_ms: int | None) -> bytes:
        row = self._row.document(record)
        undo = bool(record.get("undo"))
        return self._row.dump({"before": row if undo else None, "after": None if undo else row,
                               "op": "d" if undo else "c", "ts_ms": ptime_ms})


class DebeziumJsonDecoder:
    """Reads the events :class:`DebeziumJsonEncoder` writes back as the view's records:
    the row, ``undo`` (a ``"d"`` event) and ``ptime`` (``ts_ms``)."""

    def __init__(self, name: str, schema: Mapping[str, Any]) -> None:
        self._row = json_decoder(name, _row_schema(schema))

    def decode(self, data: bytes) -> dict[str, Any]:
        import json

        event = json.loads(data)
        undo = event.get("op") == "d"
        image = event["before"] if undo else event["after"]
        row = self._row.decode(json.dumps(image).encode())
        return {**row, "undo": undo, "ptime": event.get("ts_ms")}
