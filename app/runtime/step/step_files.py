"""The files a table's steps coordinate through, in its state directory
(``<checkpoint>/<table>/tidemark``).

Waterlines (S3) are kept by Tidemark, not by Spark: after each step the driver (the step sink)
writes ``waterlines/<t>.json``, w(t); when Spark plans step t, the source reader loads the
newest file below t, w(t-1), and ships it to its tasks inside each slice (ADR 0001).

Invariant: **a waterline file never changes once its step commits.** A replayed step loads
the same w(t-1) its first run did, so it classifies and encodes every record as before (S15);
a replay of the step that writes ``<t>.json`` writes the same content again. Every file here is
written whole (:func:`write_atomically`): a reader sees the old file or the new one, never a
part; and durably: the file and its directory are fsync'ed before the step goes on, so a
machine that loses power keeps what the step's Kafka commit already depends on.

Beside them, ``planned-slices.json`` holds the slices of the step Spark planned last, which a
step sink whose query writes its own records reads in a job of its own (ADR 0008), and
``step-fingerprints/<batch id>`` the fingerprint of each batch the step sink began
(:func:`begin_step`): a replay that would read other input or run another plan refuses
before any task writes.

A file that cannot be read or written raises :class:`~app.errors.StateError` naming it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from app.connectors.kafka_source import KafkaPartitionSlice
from app.errors import StateError

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


def state_error(action: str, path: Path, exc: OSError) -> StateError:
    """The project's error for an ``OSError`` met while ``action`` (e.g. "write") ``path``."""
    return StateError(
        f"cannot {action} {path} ({exc.strerror or type(exc).__name__}): check that its"
        " directory exists, is writable by this user and its disk is not full"
    )


def _waterline_dir(state_dir: str) -> Path:
    return Path(state_dir) / "waterlines"


def load_waterlines(state_dir: str, before_step: int) -> dict[str, int | None]:
    """w(before_step - 1): the newest stored waterlines of a step below ``before_step``."""
    directory = _waterline_dir(state_dir)
    try:
        if not directory.is_dir():
            return {}
        steps = sorted(
            (int(p.stem) for p in directory.glob("*.json") if p.stem.isdigit()), reverse=True
        )
    except OSError as exc:
        raise state_error("list", directory, exc) from exc
    for step in steps:
        if step < before_step:
            path = directory / f"{step}.json"
            try:
                data: dict[str, int | None] = json.loads(path.read_text())
            except OSError as exc:
                raise state_error("read", path, exc) from exc
            return data
    return {}


def write_atomically(path: Path, data: str | bytes, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so a reader sees the old file or the whole new one, never
    a part (write beside it, then rename over it), creating its directory if needed.

    ``durable``: the data is fsync'ed before the rename and the directory after it, so the
    new file survives a crash of the machine, not only of the process. Only a file that every
    attempt of a step writes again (a source task's probe for its step's writers, the planned
    slices) may skip it: a durable write took 5-7 ms at the median here, a plain one 0.7 ms."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    raw = data if isinstance(data, bytes) else data.encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as out:
            out.write(raw)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path)
        if durable:
            directory = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
    except OSError as exc:
        raise state_error("write", path, exc) from exc


def forget_steps_before(directory: Path, step: int, suffix: str) -> None:
    """Remove the files ``<step>-...<suffix>`` of steps below ``step`` from ``directory``."""
    try:
        for old in directory.glob(f"*{suffix}"):
            head = old.name.split("-", 1)[0]
            if head.isdigit() and int(head) < step:
                old.unlink(missing_ok=True)
    except OSError as exc:
        raise state_error("remove old files from", directory, exc) from exc


def store_waterlines(
    state_dir: str, step: int, waterlines: Mapping[str, int | None], keep: int = KEEP_WATERLINES
) -> None:
    """Atomically write w(step) and drop files older than the newest ``keep``."""
    directory = _waterline_dir(state_dir)
    write_atomically(directory / f"{step}.json", json.dumps(dict(waterlines), sort_keys=True))
    try:
        steps = sorted(int(p.stem) for p in directory.glob("*.json") if p.stem.isdigit())
        for old in steps[:-keep]:
            (directory / f"{old}.json").unlink(missing_ok=True)
    except OSError as exc:
        raise state_error("remove old waterlines from", directory, exc) from exc


def record_planned_slices(state_dir: str, slices: Sequence[KafkaPartitionSlice]) -> None:
    """Keep the slices Spark just planned (none for a step without data), so the step sink
    can read them in a job of its own before the step's query runs. Not fsync'ed: Spark plans
    a replayed step again, which writes the file again before the sink reads it."""
    write_atomically(
        Path(state_dir) / PLANNED_SLICES,
        json.dumps([vars(part) for part in slices]),
        durable=False,
    )


def planned_slices(state_dir: str) -> list[KafkaPartitionSlice]:
    """The slices of the step Spark planned last, in the order of the query's source tasks
    (so a task of a job over them has the number the source task has)."""
    path = Path(state_dir) / PLANNED_SLICES
    try:
        if not path.is_file():
            return []
        fields = json.loads(path.read_text())
    except OSError as exc:
        raise state_error("read", path, exc) from exc
    return [KafkaPartitionSlice(**each) for each in fields]


#: How many batches' fingerprint files are kept.
KEEP_FINGERPRINTS = 50


def begin_step(state_dir: str, batch_id: int, fingerprint: str) -> str | None:
    """Record that the step sink begins ``batch_id`` with ``fingerprint`` before any of its
    tasks writes; the fingerprint a run recorded before for the batch if it is another
    (nothing is recorded then), else None. Files of the newest :data:`KEEP_FINGERPRINTS`
    batches are kept."""
    directory = Path(state_dir) / "step-fingerprints"
    path = directory / str(batch_id)
    try:
        stored = path.read_text().strip() if path.is_file() else None
    except OSError as exc:
        raise state_error("read", path, exc) from exc
    if stored is not None and stored != fingerprint:
        return stored
    if stored is None:
        write_atomically(path, fingerprint)
        try:
            batches = sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
            for old in batches[:-KEEP_FINGERPRINTS]:
                (directory / str(old)).unlink(missing_ok=True)
        except OSError as exc:
            raise state_error("remove old step fingerprints from", directory, exc) from exc
    return None
