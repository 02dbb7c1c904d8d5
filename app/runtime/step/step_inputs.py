"""A step's input offset ranges as Spark's offset log fixes them: what the step fingerprint
hashes (:mod:`app.connectors.sink.fingerprint`, docs/reliability.md).

Spark writes ``<spark checkpoint>/offsets/<batch id>`` before it runs the batch, and a replay
of the batch reads the same entry: ``v1``, a line of batch metadata, then one line per source
of the query (in the query's source order) with the end offset dict the source returned
(:func:`~app.connectors.kafka_offsets.latest_offset`), or ``-`` for a source without one. The
batch's start is the entry of the batch before (a table's initial offset,
``initial-offset.json`` in its state directory, for the first), and the ranges between them
are the source's own slices (:func:`~app.connectors.kafka_offsets.step_slices`). This leans
on the offset log's layout, internal to Spark and unchanged since Spark 2: it is read here
only, and an entry that is not there or not of that shape is a
:class:`~app.errors.StateError` naming it, never an empty fingerprint.

A query's Spark checkpoint is ``spark`` beside its first table's state directory
(``<checkpoint>/<table>/spark`` and ``<checkpoint>/<table>/tidemark``, as the service lays
them out).

The plan's part of the fingerprint is the program's plan digest
(:mod:`app.runtime.planner.plan_fingerprint`): the one ``tidemark run`` recorded with the checkpoint
before the queries started (ADR 0015, :func:`plan_digest`), else :func:`query_digest`, the
digest of the one query as the step sink runs it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.connectors.kafka_offsets import step_slices
from app.connectors.sink.fingerprint import SourceRanges
from app.errors import StateError
from app.runtime.planner.checkpoint_plan import read_recorded_plan
from app.runtime.planner.plan_fingerprint import canonical_json, plain_value, state_version
from app.runtime.store import join, parent, store_at

if TYPE_CHECKING:
    from app.runtime.operators.query import TablePlan

__all__ = ["plan_digest", "query_digest", "spark_checkpoint", "step_input_ranges"]

#: The file in a table's state directory with the offsets its checkpoint started at (the
#: source reader's ``INITIAL_OFFSET``).
_INITIAL_OFFSET = "initial-offset.json"


def spark_checkpoint(state_dir: str) -> str:
    """The Spark checkpoint of the query whose first table keeps ``state_dir``."""
    return join(parent(state_dir), "spark")


def plan_digest(plan: TablePlan) -> str:
    """The plan digest a step of ``plan`` hashes: the program's, as recorded with the
    checkpoint (``<checkpoint>/tidemark-plan.json``, written before any query starts), else
    the query's own (:func:`query_digest`)."""
    record = read_recorded_plan(parent(parent(plan.state_dirs[0])))
    digest = record.get("digest") if record is not None else None
    return digest if isinstance(digest, str) and digest else query_digest(plan)


def _entry(checkpoint: str | Path, batch_id: int) -> list[dict[str, Any] | None] | None:
    """The source offsets of ``batch_id``'s offset-log entry (None per source without
    one); None when the log has no such entry."""
    path = join(str(checkpoint), "offsets", str(batch_id))
    text = store_at(path).read_text(path)
    if text is None:
        return None
    lines = text.splitlines()
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise StateError(
            f"Spark's offset log entry {path} is not of the layout Tidemark reads (a version"
            " line, a metadata line, a line per source): the step's input cannot be"
            " fingerprinted; is this Spark version supported?"
        )
    return [None if line.strip() == "-" else json.loads(line) for line in lines[2:]]


def step_input_ranges(
    checkpoint: str | Path, batch_id: int, state_dirs: Mapping[str, str]
) -> list[SourceRanges]:
    """What each source of the query reads in ``batch_id``, in the query's source order.
    ``state_dirs``: each table's input topic -> its state directory (its initial offset)."""
    ends = _entry(checkpoint, batch_id)
    if ends is None:
        raise StateError(
            f"Spark's offset log has no entry {join(str(checkpoint), 'offsets', str(batch_id))}"
            " for the"
            " step it runs: is the query's checkpoint somewhere else?"
        )
    starts = _entry(checkpoint, batch_id - 1) if batch_id > 0 else None
    out = []
    for i, end in enumerate(ends):
        if end is None:
            continue
        start = starts[i] if starts is not None and i < len(starts) else None
        if start is None or start.get("topic") != end.get("topic"):
            start = _initial(state_dirs.get(str(end.get("topic"))), end)
        slices = step_slices(start, end, {})
        ranges = tuple((part.partition, part.start, part.end) for part in slices)
        out.append(SourceRanges(str(end.get("topic")), ranges))
    return out


def _initial(state_dir: str | None, end: Mapping[str, Any]) -> dict[str, Any]:
    """The offset dict the source started from: its table's initial offset, else (none
    kept) every partition from 0, as :func:`step_slices` reads a partition it has no start
    for."""
    if state_dir is not None:
        path = join(state_dir, _INITIAL_OFFSET)
        text = store_at(path).read_text(path)
        if text is not None:
            found: dict[str, Any] = json.loads(text)
            if found.get("topic") == end.get("topic"):
                return found
    return {"topic": end.get("topic"), "partitions": {}, "step": 0}


def query_digest(plan: TablePlan) -> str:
    """The digest of a query as the step sink runs it: its tables and sources, the views it
    writes and computes per step, its physical query (views, placements, step shape), its
    waterline map, and the Tidemark ``major.minor`` version. Where a statement stands in the
    program file is left out (a comment or a moved statement changes no step)."""
    parts = {
        "tidemark": state_version(),
        "tables": plain_value(plan.tables),
        "sources": plain_value(plan.sources),
        "output_views": plain_value(plan.output_views),
        "step_views": plain_value(plan.step_views),
        "query": plain_value(plan.query),
        "view_time_source": plain_value(dict(plan.view_time_source)),
        "merged": plain_value(dict(plan.merged)),
    }
    if plan.derived:  # absent where no view has one: earlier queries keep their digest
        parts["derived"] = plain_value(dict(plan.derived))
    return hashlib.sha256(canonical_json(parts).encode()).hexdigest()
