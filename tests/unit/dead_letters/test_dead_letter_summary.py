"""``dead-letters summary``: counts, time ranges and offsets from the S6 headers."""

from __future__ import annotations

import json
from typing import Any

from app.connectors.sink.headers import format_time_value
from app.dead_letters.summary import Summary

T0 = 1_767_225_600_000


def _letters(letter: Any) -> list[Any]:
    return [
        letter("late", 0, 3, late=("ts", T0 - 50_000, T0), timestamp_ms=T0 + 5),
        letter("late", 1, 8, late=("ts", T0 - 90_000, T0 + 60_000), timestamp_ms=T0 + 1),
        letter("late", 0, 9, late=("ts", T0 - 10_000, T0), timestamp_ms=T0 + 9),
        letter("late", 0, 4, table="order", late=("seq", 12, 20), unit="integer",
               timestamp_ms=T0 + 2),
        letter("malformed", 1, 2, timestamp_ms=T0 + 3),
        letter("invalid", 0, 5, timestamp_ms=T0 + 7),
    ]


def test_counts_ranges_and_offsets(letter: Any) -> None:
    letters = _letters(letter)
    replayed = {letters[0].coordinates: ["fix", "fix"], letters[1].coordinates: ["fix", "other"]}
    data = Summary.of("readings.dlq", letters, replayed).to_json()
    assert data["dead_letters"] == 6
    assert data["by_reason"] == {"invalid": 1, "late": 4, "malformed": 1}
    assert data["by_table"] == {"order": 1, "reading": 5}
    ms = {v: format_time_value(v, "ms") for v in (T0 - 90_000, T0 - 10_000, T0, T0 + 60_000)}
    assert data["event_time"] == {
        "order.seq": {"min": "12", "max": "12"},
        "reading.ts": {"min": ms[T0 - 90_000], "max": ms[T0 - 10_000]},
    }
    assert data["waterline_at_rejection"]["reading.ts"] == {"min": ms[T0], "max": ms[T0 + 60_000]}
    assert data["kafka_time"] == {"min": format_time_value(T0 + 1, "ms"),
                                  "max": format_time_value(T0 + 9, "ms")}
    assert data["partitions"] == {
        "0": {"first_offset": 3, "last_offset": 9, "count": 4},
        "1": {"first_offset": 2, "last_offset": 8, "count": 2},
    }
    assert data["replayed"] == {"fix": 2, "other": 1}, "a record counts once per target"
    json.dumps(data)


def test_the_text_says_the_same(letter: Any) -> None:
    text = Summary.of("readings.dlq", _letters(letter)).to_text()
    assert text.startswith("dead-letter topic readings.dlq: 6 dead letter(s)\n")
    assert "  by reason: invalid 1, late 4, malformed 1\n" in text
    assert "  by table:  order 1, reading 5\n" in text
    assert (f"  event time of late reading.ts: {format_time_value(T0 - 90_000, 'ms')} .."
            f" {format_time_value(T0 - 10_000, 'ms')}\n") in text
    assert "  partition 0: offsets 3 .. 9 (4 dead letter(s))\n" in text
    assert "  Kafka time (of the source records): " in text
    assert "  replayed (ledger): none\n" in text


def test_an_empty_selection_is_a_summary_of_nothing() -> None:
    summary = Summary.of("readings.dlq", [])
    assert summary.to_text() == "dead-letter topic readings.dlq: 0 dead letter(s)\n"
    assert summary.to_json()["kafka_time"] is None
