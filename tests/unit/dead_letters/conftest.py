"""Dead letters as the sink writes them, for the unit tests of ``tidemark dead-letters``: the
S6 headers come from the sink's own :func:`~app.connectors.sink.headers.dead_letter_headers`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.connectors.sink.headers import dead_letter_headers
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
from app.dead_letters.records import DeadLetter

SOURCE = "readings"
DLQ = "readings.dlq"


def make_letter(
    reason: str,
    partition: int = 0,
    offset: int = 0,
    table: str = "reading",
    timestamp_ms: int | None = 1_767_225_600_000,
    late: tuple[str, int, int | None] | None = None,
    unit: str = "ms",
    key: bytes | None = b"k",
    value: bytes | None = b"\x00\x01",
    own: tuple[tuple[str, bytes | None], ...] = (("origin", b"feed"),),
) -> DeadLetter:
    """A dead letter of ``reason`` at ``partition``/``offset`` of ``readings.dlq``; ``late``:
    (column, value, waterline) for a late one."""
    column, late_value, waterline = late if late is not None else (None, None, None)
    row = {
        REASON: reason, MESSAGE: f"a {reason} record", REL: table, SRC_PARTITION: 1,
        SRC_OFFSET: 40 + offset, LATE_COLUMN: column, LATE_VALUE: late_value,
        LATE_WATERLINE: waterline,
    }
    headers = dead_letter_headers(row, {"topic": SOURCE, "units": {column or "ts": unit}})
    return DeadLetter(DLQ, partition, offset, timestamp_ms, key, value, (*own, *headers))


@pytest.fixture
def letter() -> Callable[..., Any]:
    """:func:`make_letter`."""
    return make_letter
