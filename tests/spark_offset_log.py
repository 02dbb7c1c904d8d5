"""Steps as Spark recorded them in a query's checkpoint (offset and commit logs), for tests that
feed the reference evaluator the very steps a continuously running service took."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Batch", "spark_batches"]


@dataclass(frozen=True)
class Batch:
    """One step of one table's query, as its offset log recorded it."""

    batch_id: int
    time_ms: int
    ends: dict[int, int]  # partition -> next offset after the step


def spark_batches(checkpoint: Path, written: set[int] | None) -> list[Batch]:
    """The steps of one query whose output is in Kafka: batch time and end offsets from the
    offset log (the values a replay reuses), for the batches in the commit log or reported by
    the sink (``written``: a step stopped between its Kafka commit and Spark's commit log still
    wrote its records; None: every step in the offset log)."""
    offsets, commits = checkpoint / "offsets", checkpoint / "commits"
    if not offsets.is_dir():
        return []
    done = (
        {int(p.name) for p in commits.iterdir() if p.name.isdigit()} if commits.is_dir() else set()
    )
    batches = []
    numbered = [p for p in offsets.iterdir() if p.name.isdigit()]
    for path in sorted(numbered, key=lambda p: int(p.name)):
        batch_id = int(path.name)
        if written is not None and batch_id not in done | written:
            continue
        lines = path.read_text().splitlines()
        if len(lines) < 3:
            continue  # being written
        metadata = json.loads(lines[1])
        source = json.loads(lines[2])
        ends = {int(p): int(o) for p, o in source["partitions"].items()}
        batches.append(Batch(batch_id, int(metadata["batchTimestampMs"]), ends))
    return batches
