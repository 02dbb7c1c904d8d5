"""Which dead letters a command takes: :class:`Selection`.

Offsets bound every partition (both ends included); ``since``/``until`` bound the Kafka
timestamp of the dead letter, which is its source record's (SPEC S6; ``since`` included,
``until`` excluded); reason, table and partition filters take any of the values given. Without
``include_replayed`` a dead letter that is a replayed record refused again (it carries
``tidemark.replayed-from``) is left out, so a replay does not send a record round the same
loop again (``replay`` leaves them out unless ``--include-replayed``; ``summary`` and ``show``
take them). ``limit`` takes the first matching records in partition, then offset order, so
the same selection over the same topic is the same records.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from app.dead_letters.records import REASONS, DeadLetter
from app.errors import ConfigError

__all__ = ["Selection", "parse_time"]

_AGO = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_time(option: str, text: str, now_ms: int | None = None) -> int:
    """A ``--since``/``--until`` value as epoch milliseconds: ISO-8601 (UTC when it has no
    offset), epoch milliseconds, or a duration with its unit (``90s``, ``15m``, ``2h``,
    ``1d``) meaning that long before now."""
    ago = _AGO.match(text)
    if ago:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return now - int(ago.group(1)) * _UNIT_MS[ago.group(2)]
    stripped = text.strip()
    if re.fullmatch(r"-?\d+", stripped):
        return int(stripped)
    try:
        moment = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(
            f"{option} {text!r} is not a time: give ISO-8601 (2026-01-31T12:00:00Z), epoch"
            " milliseconds, or a duration before now (90s, 15m, 2h, 1d)"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class Selection:
    """The dead letters of a topic a command reads; every bound optional."""

    reasons: frozenset[str] = field(default_factory=frozenset)
    tables: frozenset[str] = field(default_factory=frozenset)
    partitions: frozenset[int] = field(default_factory=frozenset)
    from_offset: int | None = None
    to_offset: int | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    limit: int | None = None
    include_replayed: bool = True

    @classmethod
    def of(
        cls,
        reasons: Iterable[str] = (),
        tables: Iterable[str] = (),
        partitions: Iterable[int] = (),
        from_offset: int | None = None,
        to_offset: int | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int | None = None,
        now_ms: int | None = None,
        include_replayed: bool = True,
    ) -> Selection:
        """A selection from the commands' options, each checked (a ConfigError names the
        option and what it takes)."""
        reasons = frozenset(r.strip().lower() for r in reasons)
        unknown = sorted(reasons - set(REASONS))
        if unknown:
            raise ConfigError(
                f"--reason {', '.join(unknown)}: a dead letter's reason is one of"
                f" {', '.join(REASONS)}"
            )
        for name, offset in (("--from-offset", from_offset), ("--to-offset", to_offset)):
            if offset is not None and offset < 0:
                raise ConfigError(f"{name} {offset}: offsets start at 0")
        if from_offset is not None and to_offset is not None and to_offset < from_offset:
            raise ConfigError(
                f"--to-offset {to_offset} is below --from-offset {from_offset}: both are"
                " included, so --to-offset must be at least --from-offset"
            )
        if limit is not None and limit < 1:
            raise ConfigError(f"--limit {limit}: give at least 1, or no --limit for every record")
        parts = frozenset(partitions)
        if any(p < 0 for p in parts):
            raise ConfigError(f"--partition {min(parts)}: partitions start at 0")
        since_ms = None if since is None else parse_time("--since", since, now_ms)
        until_ms = None if until is None else parse_time("--until", until, now_ms)
        if since_ms is not None and until_ms is not None and until_ms <= since_ms:
            raise ConfigError(
                f"--until {until} is not after --since {since}: the range would be empty"
            )
        return cls(
            reasons=reasons,
            tables=frozenset(tables),
            partitions=parts,
            from_offset=from_offset,
            to_offset=to_offset,
            since_ms=since_ms,
            until_ms=until_ms,
            limit=limit,
            include_replayed=include_replayed,
        )

    def reads_partition(self, partition: int) -> bool:
        return not self.partitions or partition in self.partitions

    def offset_range(self, low: int, high: int) -> tuple[int, int]:
        """The offsets to read of a partition holding ``low`` .. ``high - 1``: [start, end)
        (empty when start >= end)."""
        start = low if self.from_offset is None else max(low, self.from_offset)
        end = high if self.to_offset is None else min(high, self.to_offset + 1)
        return start, end

    def in_range(self, letter: DeadLetter) -> bool:
        """Whether the record is within the offset and time bounds (any record, dead letter
        or not)."""
        if self.from_offset is not None and letter.offset < self.from_offset:
            return False
        if self.to_offset is not None and letter.offset > self.to_offset:
            return False
        if self.since_ms is not None or self.until_ms is not None:
            stamp = letter.timestamp_ms
            if stamp is None:
                return False
            if self.since_ms is not None and stamp < self.since_ms:
                return False
            if self.until_ms is not None and stamp >= self.until_ms:
                return False
        return self.reads_partition(letter.partition)

    def leaves_out_replay(self, letter: DeadLetter) -> bool:
        """Whether ``letter`` is a replayed record refused again that this selection leaves
        out (without ``include_replayed``)."""
        return not self.include_replayed and letter.replayed_from is not None

    def matches(self, letter: DeadLetter) -> bool:
        """Whether a dead letter in range is selected by its reason and table (a replayed
        record refused again too: :meth:`leaves_out_replay` says whether it is taken)."""
        if not letter.is_dead_letter or not self.in_range(letter):
            return False
        if self.reasons and letter.reason not in self.reasons:
            return False
        return not self.tables or letter.table in self.tables

    def describe(self) -> str:
        """The selection in words, for a command's report."""
        parts = []
        if self.reasons:
            parts.append("reason " + "/".join(sorted(self.reasons)))
        if self.tables:
            parts.append("table " + "/".join(sorted(self.tables)))
        if self.partitions:
            parts.append("partition " + "/".join(str(p) for p in sorted(self.partitions)))
        if self.from_offset is not None or self.to_offset is not None:
            low = "" if self.from_offset is None else str(self.from_offset)
            high = "" if self.to_offset is None else str(self.to_offset)
            parts.append(f"offsets {low}..{high}")
        if self.since_ms is not None or self.until_ms is not None:
            from app.dead_letters.records import iso_ms

            low = "" if self.since_ms is None else iso_ms(self.since_ms)
            high = "" if self.until_ms is None else iso_ms(self.until_ms)
            parts.append(f"timestamp {low}..{high}")
        if not self.include_replayed:
            parts.append("no replayed records")
        if self.limit is not None:
            parts.append(f"first {self.limit}")
        return ", ".join(parts) or "every dead letter"
