"""The step fingerprint a step marker carries: what the step read and the plan it ran (S15).

A marker proves that its task committed its records for ``(sink, batch, task)``; a replay may
skip the task only if the replayed task would write exactly those records, which holds when
the replay reads the same input and runs the same plan (docs/reliability.md). The fingerprint
is the SHA-256 of the step's input offset ranges, per source of the query, per topic
partition ``[start, end)`` as Spark's offset log fixes them, and of the plan's digest,
cut to :data:`FINGERPRINT_HEX` hex digits: fixed-size, far below the broker's
``offset.metadata.max.bytes``.

Every task of a step carries the same fingerprint, the step's: the rows of a shuffle task
(an aggregate's) come from every input partition, and the task split itself (one source task
per partition with data, the shuffle partitions fixed by the checkpoint) follows from the
ranges and the plan. So two runs of a step with equal fingerprints give each task the same
rows, and a replay that finds a marker with another fingerprint would write something other
than what was committed: it refuses (:func:`replay_refused`) instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from app.errors import SinkError

__all__ = [
    "FINGERPRINT_FORMAT",
    "FINGERPRINT_HEX",
    "SourceRanges",
    "fingerprints_differ",
    "replay_refused",
    "step_fingerprint",
]

#: Hex digits kept of the SHA-256 (128 bits).
FINGERPRINT_HEX = 32

#: The version of what is hashed; a change of it changes every fingerprint.
FINGERPRINT_FORMAT = 1


@dataclass(frozen=True)
class SourceRanges:
    """What one source of a query reads in a step: ``topic``'s partitions, each
    ``(partition, start, end)`` with ``start < end``, in partition order."""

    topic: str
    ranges: tuple[tuple[int, int, int], ...]


def step_fingerprint(plan_digest: str, sources: Sequence[SourceRanges]) -> str:
    """The fingerprint of a step that read ``sources`` (in the query's source order) with the
    plan of ``plan_digest``."""
    document = {
        "format": FINGERPRINT_FORMAT,
        "plan": plan_digest,
        "inputs": [[s.topic, [list(r) for r in sorted(s.ranges)]] for s in sources],
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_HEX]


def replay_refused(batch_id: int, why: str) -> SinkError:
    """The error of a replayed step that cannot be proven to write what was committed:
    ``why`` names the marker (its transactional id) or step file and what it holds; the text
    says what to do."""
    return SinkError(
        f"refusing to replay step batch {batch_id}: {why}; nothing of the step is written."
        " Either run the program and Tidemark version that wrote the step until it has"
        " committed the step, stop it cleanly (SIGTERM), then start the new one; or, if the"
        " checkpoint was restored or lost its last offset-log entry, start a new checkpoint"
        " (--checkpoint) placed after what was written ('scan.startup.mode' 'timestamp' or"
        " 'latest-offset'): see docs/reliability.md, 'A replay that refuses'"
    )


def fingerprints_differ(where: str, stored: str, now: str) -> str:
    """Why a replay refuses when ``where`` (a marker or step file) holds ``stored``."""
    return (
        f"{where} records fingerprint {stored}, this run's is {now} (other input offsets or"
        " another plan), so it would write other records than those committed"
    )
