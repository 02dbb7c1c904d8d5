"""``tidemark dead-letters summary``: what a dead-letter topic holds.

Counts by reason and by table, the range of the late dead letters' event times and of the
waterlines that refused them (per ``table.column``, from the S6 ``tidemark.late.*``
headers: the other reasons carry no event time), the range of the Kafka timestamps (the
source records', which dead letters keep, SPEC S6), the offsets per partition, and how
many of them the replay ledger records as replayed, per target topic.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.dead_letters.records import DeadLetter, iso_ms, time_sort_key

__all__ = ["PartitionSpan", "Summary", "TimeSpan"]


@dataclass
class TimeSpan:
    """The smallest and largest of some S6 time values of one column (as spelled)."""

    low: str
    high: str

    def add(self, text: str) -> None:
        if time_sort_key(text) < time_sort_key(self.low):
            self.low = text
        if time_sort_key(text) > time_sort_key(self.high):
            self.high = text


@dataclass
class PartitionSpan:
    """The first and last offsets of the dead letters summarised in one partition."""

    first: int
    last: int
    count: int = 1


@dataclass
class Summary:
    """The summary of the dead letters of one selection."""

    topic: str
    records: int = 0
    by_reason: Counter[str] = field(default_factory=Counter)
    by_table: Counter[str] = field(default_factory=Counter)
    event_times: dict[str, TimeSpan] = field(default_factory=dict)
    waterlines: dict[str, TimeSpan] = field(default_factory=dict)
    kafka_first_ms: int | None = None
    kafka_last_ms: int | None = None
    partitions: dict[int, PartitionSpan] = field(default_factory=dict)
    replayed: Counter[str] = field(default_factory=Counter)
    not_dead_letters: int = 0

    @classmethod
    def of(
        cls,
        topic: str,
        letters: Iterable[DeadLetter],
        replayed_to: Mapping[str, Iterable[str]] | None = None,
    ) -> Summary:
        """The summary of ``letters``; ``replayed_to``: for a record's coordinates, the
        topics the ledger says it was replayed to."""
        summary = cls(topic)
        for letter in letters:
            summary.add(letter, (replayed_to or {}).get(letter.coordinates, ()))
        return summary

    def add(self, letter: DeadLetter, replayed_to: Iterable[str] = ()) -> None:
        self.records += 1
        self.by_reason[letter.reason or "?"] += 1
        self.by_table[letter.table or "?"] += 1
        late = letter.late
        if late is not None:
            column, value, waterline = late
            name = f"{letter.table}.{column}"
            for spans, text in ((self.event_times, value), (self.waterlines, waterline)):
                if name in spans:
                    spans[name].add(text)
                else:
                    spans[name] = TimeSpan(text, text)
        stamp = letter.timestamp_ms
        if stamp is not None:
            self.kafka_first_ms = stamp if self.kafka_first_ms is None else min(
                self.kafka_first_ms, stamp
            )
            self.kafka_last_ms = stamp if self.kafka_last_ms is None else max(
                self.kafka_last_ms, stamp
            )
        span = self.partitions.get(letter.partition)
        if span is None:
            self.partitions[letter.partition] = PartitionSpan(letter.offset, letter.offset)
        else:
            span.first = min(span.first, letter.offset)
            span.last = max(span.last, letter.offset)
            span.count += 1
        for target in set(replayed_to):
            self.replayed[target] += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "dead_letters": self.records,
            "by_reason": dict(sorted(self.by_reason.items())),
            "by_table": dict(sorted(self.by_table.items())),
            "event_time": {
                name: {"min": s.low, "max": s.high} for name, s in sorted(self.event_times.items())
            },
            "waterline_at_rejection": {
                name: {"min": s.low, "max": s.high} for name, s in sorted(self.waterlines.items())
            },
            "kafka_time": None
            if self.kafka_first_ms is None or self.kafka_last_ms is None
            else {"min": iso_ms(self.kafka_first_ms), "max": iso_ms(self.kafka_last_ms)},
            "partitions": {
                str(p): {"first_offset": s.first, "last_offset": s.last, "count": s.count}
                for p, s in sorted(self.partitions.items())
            },
            "replayed": dict(sorted(self.replayed.items())),
            "not_dead_letters": self.not_dead_letters,
        }

    def to_text(self) -> str:
        lines = [f"dead-letter topic {self.topic}: {self.records} dead letter(s)"]
        if self.not_dead_letters:
            lines.append(
                f"  skipped {self.not_dead_letters} record(s) without the S6 headers"
                " (not written by Tidemark)"
            )
        if not self.records:
            return "\n".join(lines) + "\n"

        def counts(counter: Counter[str]) -> str:
            return ", ".join(f"{k} {n}" for k, n in sorted(counter.items()))

        lines.append(f"  by reason: {counts(self.by_reason)}")
        lines.append(f"  by table:  {counts(self.by_table)}")
        for title, spans in (("event time of late", self.event_times),
                             ("waterline at rejection", self.waterlines)):
            for name, s in sorted(spans.items()):
                lines.append(f"  {title} {name}: {s.low} .. {s.high}")
        if self.kafka_first_ms is not None and self.kafka_last_ms is not None:
            lines.append(
                f"  Kafka time (of the source records): {iso_ms(self.kafka_first_ms)} .."
                f" {iso_ms(self.kafka_last_ms)}"
            )
        for p, part in sorted(self.partitions.items()):
            lines.append(
                f"  partition {p}: offsets {part.first} .. {part.last}"
                f" ({part.count} dead letter(s))"
            )
        if self.replayed:
            lines.append(f"  replayed (ledger): {counts(self.replayed)}")
        else:
            lines.append("  replayed (ledger): none")
        return "\n".join(lines) + "\n"

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"
