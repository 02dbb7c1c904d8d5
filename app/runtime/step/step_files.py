"""The files a table's steps coordinate through, in its state directory
(``<checkpoint>/<table>/tidemark``).

Waterlines (S3) are kept by Tidemark, not by Spark: after each step the driver (the step sink)
writes ``waterlines/<t>.json``, w(t); when Spark plans step t, the source reader loads the
newest file below t, w(t-1), and ships it to its tasks inside each slice (ADR 0001).

Invariant: **a waterline file never changes once its step commits.** A replayed step loads
the same w(t-1) its first run did, so it classifies and encodes every record as before (S15);
a replay of the step that writes ``<t>.json`` writes the same content again. Every file here is
written whole (:func:`write_atomically`): a reader sees the old file or the new one, never a
part; and durably: the file (and locally its directory) is on stable storage before the step
goes on, so a machine that loses power keeps what the step's Kafka commit already depends on.

Beside them, ``planned-slices.json`` holds the slices of the step Spark planned last, which a
step sink whose query writes its own records reads in a job of its own (ADR 0008), and
``step-fingerprints/<batch id>`` the fingerprint of each batch the step sink began
(:func:`begin_step`): a replay that would read other input or run another plan refuses
before any task writes.

The files live in a local directory or under an ``s3a://`` prefix (app/runtime/store, ADR
0025), with the same invariants on both. A file that cannot be read or written raises
:class:`~app.errors.StateError` naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from app.connectors.kafka_source import KafkaPartitionSlice
from app.runtime.store import CheckpointStore, join, store_at
from app.runtime.store.local import state_error

__all__ = [
    "PLANNED_SLICES",
    "begin_step",
    "forget_steps_before",
    "load_waterlines",
    "planned_slices",
    "record_planned_slices",
    "state_error",
    "store_waterlines",
    "write_atomically",
]

#: The file in the state directory holding the slices of the step Spark planned last.
PLANNED_SLICES = "planned-slices.json"

#: How many steps' waterline files are kept.
KEEP_WATERLINES = 50


def _waterline_dir(state_dir: str) -> str:
    return join(state_dir, "waterlines")


def _steps(store: CheckpointStore, directory: str, suffix: str = ".json") -> list[int]:
    """The step numbers of the files ``<step><suffix>`` in ``directory``, ascending."""
    stems = (name.removesuffix(suffix) for name in store.names(directory) if name.endswith(suffix))
    return sorted(int(stem) for stem in stems if stem.isdigit())


def load_waterlines(state_dir: str, before_step: int) -> dict[str, int | None]:
    """w(before_step - 1): the newest stored waterlines of a step below ``before_step``."""
    directory = _waterline_dir(state_dir)
    store = store_at(directory)
    for step in reversed(_steps(store, directory)):
        if step < before_step:
            text = store.read_text(join(directory, f"{step}.json"))
            if text is None:
                continue  # dropped as old since it was listed
            data: dict[str, int | None] = json.loads(text)
            return data
    return {}


def write_atomically(location: str | Path, data: str | bytes, durable: bool = True) -> None:
    """Write ``data`` to ``location`` so a reader sees the old file or the whole new one, never
    a part, creating its directory if needed (app/runtime/store: a local file is written
    beside and renamed over, an object is PUT whole).

    ``durable``: on stable storage when this returns (a local file and its directory are
    fsync'ed), so the new file survives a crash of the machine, not only of the process. Only
    a file that every attempt of a step writes again (a source task's probe for its step's
    writers, the planned slices) may skip it: a durable local write took 5-7 ms at the
    median here, a plain one 0.7 ms."""
    text = str(location)
    store_at(text).write(text, data, durable)


def forget_steps_before(directory: str | Path, step: int, suffix: str) -> None:
    """Remove the files ``<step>-...<suffix>`` of steps below ``step`` from ``directory``."""
    where = str(directory)
    store = store_at(where)
    for name in store.names(where):
        head = name.split("-", 1)[0]
        if name.endswith(suffix) and head.isdigit() and int(head) < step:
            store.delete(join(where, name))


def store_waterlines(
    state_dir: str, step: int, waterlines: Mapping[str, int | None], keep: int = KEEP_WATERLINES
) -> None:
    """Atomically write w(step) and drop files older than the newest ``keep``."""
    directory = _waterline_dir(state_dir)
    store = store_at(directory)
    store.write(join(directory, f"{step}.json"), json.dumps(dict(waterlines), sort_keys=True))
    for old in _steps(store, directory)[:-keep]:
        store.delete(join(directory, f"{old}.json"))


def record_planned_slices(state_dir: str, slices: Sequence[KafkaPartitionSlice]) -> None:
    """Keep the slices Spark just planned (none for a step without data), so the step sink
    can read them in a job of its own before the step's query runs. Not fsync'ed: Spark plans
    a replayed step again, which writes the file again before the sink reads it."""
    write_atomically(
        join(state_dir, PLANNED_SLICES),
        json.dumps([vars(part) for part in slices]),
        durable=False,
    )


def planned_slices(state_dir: str) -> list[KafkaPartitionSlice]:
    """The slices of the step Spark planned last, in the order of the query's source tasks
    (so a task of a job over them has the number the source task has)."""
    location = join(state_dir, PLANNED_SLICES)
    text = store_at(location).read_text(location)
    if text is None:
        return []
    return [KafkaPartitionSlice(**each) for each in json.loads(text)]


#: How many batches' fingerprint files are kept.
KEEP_FINGERPRINTS = 50


def begin_step(state_dir: str, batch_id: int, fingerprint: str) -> str | None:
    """Record that the step sink begins ``batch_id`` with ``fingerprint`` before any of its
    tasks writes; the fingerprint a run recorded before for the batch if it is another
    (nothing is recorded then), else None. Files of the newest :data:`KEEP_FINGERPRINTS`
    batches are kept."""
    directory = join(state_dir, "step-fingerprints")
    path = join(directory, str(batch_id))
    store = store_at(directory)
    found = store.read_text(path)
    stored = found.strip() if found is not None else None
    if stored is not None and stored != fingerprint:
        return stored
    if stored is None:
        store.write(path, fingerprint)
        batches = sorted(int(name) for name in store.names(directory) if name.isdigit())
        for old in batches[:-KEEP_FINGERPRINTS]:
            store.delete(join(directory, str(old)))
    return None
