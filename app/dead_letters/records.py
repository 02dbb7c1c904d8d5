"""A dead letter as a reader of the dead-letter topic gets it, with its SPEC S6 headers parsed.

The sink (:func:`app.connectors.sink.headers.dead_letter_headers`) appends the S6 headers to
the record's own headers, so a record that was a dead letter twice (replayed into a table
whose gate refused it again) carries two sets: the last occurrence of a header is the newest
and the one read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "CONNECT_PREFIX",
    "LATE_COLUMN",
    "LATE_VALUE",
    "LATE_WATERLINE",
    "MESSAGE",
    "REASON",
    "REASONS",
    "REPLAYED_FROM",
    "SOURCE_OFFSET",
    "SOURCE_PARTITION",
    "SOURCE_TOPIC",
    "TABLE",
    "DeadLetter",
    "iso_ms",
    "time_sort_key",
]

#: The S6 headers (docs/semantics.md); tests/unit/dead_letters checks them against the sink's.
REASON = "tidemark.error.reason"
MESSAGE = "tidemark.error.message"
SOURCE_TOPIC = "tidemark.source.topic"
SOURCE_PARTITION = "tidemark.source.partition"
SOURCE_OFFSET = "tidemark.source.offset"
TABLE = "tidemark.table"
LATE_COLUMN = "tidemark.late.column"
LATE_VALUE = "tidemark.late.value"
LATE_WATERLINE = "tidemark.late.waterline"

#: The prefix of Kafka Connect's dead-letter headers, which a table's
#: ``'dead_letter.connect-headers'`` adds beside the S6 ones.
CONNECT_PREFIX = "__connect.errors."

#: The header a replayed record carries: ``<dead-letter topic>/<partition>/<offset>``.
REPLAYED_FROM = "tidemark.replayed-from"

#: Every reason a dead letter has (SPEC S6, S7).
REASONS = ("late", "malformed", "invalid", "future")

Headers = tuple[tuple[str, bytes | None], ...]


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds (as the S6 headers spell times)."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def time_sort_key(text: str) -> tuple[int, float]:
    """An S6 time value (ISO-8601 for a TIMESTAMP column, an integer otherwise, ``-infinity``
    before the first waterline) as a key that orders values of one column."""
    if text == "-infinity":
        return (0, 0.0)
    try:
        return (1, float(int(text)))
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return (2, 0.0)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (1, moment.timestamp() * 1000)


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    return raw.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class DeadLetter:
    """One record of a dead-letter topic: where it is, its key, value and every header."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: Headers

    @classmethod
    def from_message(cls, msg: Any) -> DeadLetter:
        """From a confluent-kafka message."""
        kind, stamp = msg.timestamp()
        return cls(
            topic=str(msg.topic()),
            partition=int(msg.partition()),
            offset=int(msg.offset()),
            timestamp_ms=int(stamp) if kind != 0 and stamp >= 0 else None,
            key=msg.key(),
            value=msg.value(),
            headers=tuple(msg.headers() or ()),
        )

    def header(self, name: str) -> str | None:
        """The last ``name`` header as text, or None."""
        found: bytes | None = None
        present = False
        for key, raw in self.headers:
            if key == name:
                found, present = raw, True
        return _text(found) if present else None

    @property
    def coordinates(self) -> str:
        """``<topic>/<partition>/<offset>``: the record's place, as the ledger and the
        ``tidemark.replayed-from`` header name it."""
        return f"{self.topic}/{self.partition}/{self.offset}"

    @property
    def is_dead_letter(self) -> bool:
        """Whether the record carries the S6 reason header (a Tidemark dead letter)."""
        return self.reason is not None

    @property
    def replayed_from(self) -> str | None:
        """Where a replay took the record from (``<dead-letter topic>/<partition>/<offset>``)
        when this dead letter is a replayed record that was refused again, else None."""
        return self.header(REPLAYED_FROM)

    @property
    def reason(self) -> str | None:
        return self.header(REASON)

    @property
    def table(self) -> str | None:
        return self.header(TABLE)

    @property
    def message(self) -> str | None:
        return self.header(MESSAGE)

    @property
    def source(self) -> tuple[str | None, int | None, int | None]:
        """The topic, partition and offset the record was read from by the table."""
        return (
            self.header(SOURCE_TOPIC),
            _int(self.header(SOURCE_PARTITION)),
            _int(self.header(SOURCE_OFFSET)),
        )

    @property
    def late(self) -> tuple[str, str, str] | None:
        """A late dead letter's column, value and waterline at rejection (as the headers
        spell them), or None."""
        column = self.header(LATE_COLUMN)
        if column is None:
            return None
        return (column, self.header(LATE_VALUE) or "", self.header(LATE_WATERLINE) or "")

    def own_headers(self) -> Headers:
        """The headers that are not S6 ones (nor Kafka Connect's ``__connect.errors.*`` the
        sink adds beside them on request): the original record's own (and any earlier
        replay's ``tidemark.replayed-from``)."""
        s6 = {
            REASON, MESSAGE, SOURCE_TOPIC, SOURCE_PARTITION, SOURCE_OFFSET, TABLE,
            LATE_COLUMN, LATE_VALUE, LATE_WATERLINE,
        }
        return tuple(
            (k, v) for k, v in self.headers if k not in s6 and not k.startswith(CONNECT_PREFIX)
        )


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None

