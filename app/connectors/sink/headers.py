"""The headers the sink adds to the records it writes: SPEC S6's on a dead letter, SPEC S14's
``tidemark.waterline`` on an output view's record.

A time value is spelled the same way in both (:func:`format_time_value`): ISO-8601 UTC with
milliseconds for a TIMESTAMP column, the integer for an integer time column, ``-infinity``
before the first waterline. A dead letter keeps its original key, value and headers; the S6
headers follow them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from app.connectors.sink.record import (
    LATE_COLUMN,
    LATE_VALUE,
    LATE_WATERLINE,
    MESSAGE,
    REASON,
    REL,
    SRC_OFFSET,
    SRC_PARTITION,
)

__all__ = [
    "CONNECT_PREFIX",
    "WATERLINE_HEADER",
    "connect_headers",
    "dead_letter_headers",
    "format_time_value",
    "view_headers",
]

#: S14: the header carrying the waterline of an output record's view.
WATERLINE_HEADER = "tidemark.waterline"

#: The prefix of Kafka Connect's dead-letter headers (its
#: ``errors.deadletterqueue.context.headers.enable``).
CONNECT_PREFIX = "__connect.errors."

#: The Connect stage a reason stands for: a value (or key) the converter could not read, or
#: a record the pipeline refused after reading it (Connect's transformations' stage).
_CONNECT_STAGE = {
    "malformed": "VALUE_CONVERTER",
    "invalid": "VALUE_CONVERTER",
    "late": "TRANSFORMATION",
    "future": "TRANSFORMATION",
}

Headers = list[tuple[str, bytes]]


def format_time_value(value: int | None, unit: str) -> str:
    """A waterline or time value as a header: ISO-8601 UTC for TIMESTAMP (unit 'ms')."""
    if value is None:
        return "-infinity"
    if unit == "ms":
        moment = datetime.fromtimestamp(value / 1000, tz=UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value % 1000:03d}Z"
    return str(value)


def view_headers(
    waterlines: Mapping[str, int | None],
    time_source: Mapping[str, str | None],
    units: Mapping[str, str],
) -> dict[str, Headers]:
    """S14: each output view's ``tidemark.waterline`` header, from the waterline of its time
    source (views without one get none)."""
    return {
        view: [(WATERLINE_HEADER, format_time_value(waterlines.get(col), units[col]).encode())]
        for view, col in time_source.items()
        if col is not None
    }


def dead_letter_headers(row: Mapping[str, Any], table: Mapping[str, Any]) -> Headers:
    """SPEC S6 headers of a dead-letter sink row; ``table`` is {"topic": its source topic,
    "units": {column: 'ms'|'integer'}}."""
    out = [
        ("tidemark.error.reason", row[REASON].encode()),
        ("tidemark.error.message", (row[MESSAGE] or "").encode()),
        ("tidemark.source.topic", str(table["topic"]).encode()),
        ("tidemark.source.partition", str(row[SRC_PARTITION]).encode()),
        ("tidemark.source.offset", str(row[SRC_OFFSET]).encode()),
        ("tidemark.table", str(row[REL]).encode()),
    ]
    if row[REASON] == "late":
        unit = table["units"].get(row[LATE_COLUMN], "integer")
        out += [
            ("tidemark.late.column", str(row[LATE_COLUMN]).encode()),
            ("tidemark.late.value", format_time_value(row[LATE_VALUE], unit).encode()),
            ("tidemark.late.waterline", format_time_value(row[LATE_WATERLINE], unit).encode()),
        ]
    if table.get("connect_headers"):
        out += connect_headers(row, str(table["topic"]))
    return out


def connect_headers(row: Mapping[str, Any], source_topic: str) -> Headers:
    """Kafka Connect's dead-letter headers for a dead-letter sink row, after Tidemark's: the
    same source coordinates and message under Connect's names, the table as the connector,
    task 0, the stage the reason stands for (a ``key:`` message is the key converter's) and
    ``tidemark.<reason>`` as the exception class. No stack trace: there is none."""
    message = row[MESSAGE] or ""
    stage = _CONNECT_STAGE.get(row[REASON], "TRANSFORMATION")
    if stage == "VALUE_CONVERTER" and message.startswith("key:"):
        stage = "KEY_CONVERTER"
    fields = (
        ("topic", source_topic),
        ("partition", str(row[SRC_PARTITION])),
        ("offset", str(row[SRC_OFFSET])),
        ("connector.name", str(row[REL])),
        ("task.id", "0"),
        ("stage", stage),
        ("class.name", "tidemark.LateGate"),
        ("exception.class.name", f"tidemark.{row[REASON]}"),
        ("exception.message", message),
    )
    return [(CONNECT_PREFIX + name, value.encode()) for name, value in fields]
