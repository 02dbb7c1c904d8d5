"""Decoded slices of recent steps on the local disk (:class:`SliceCache`)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pyarrow as pa

from app.connectors.kafka_fetch import read_slice
from app.connectors.kafka_source import KafkaPartitionSlice
from app.connectors.late_gate import SourceSpec
from app.runtime.step.step_files import forget_steps_before, state_error

__all__ = ["SliceCache", "cached_slice"]


class SliceCache:
    """Decoded slices of recent steps on the local disk, as Arrow IPC files.

    One step's plan reads the source once per branch (dead letters with the probe and the rows
    of the step sink's views, each view computed in the query, the aggregates): Spark re-runs
    the scan for each branch of the union, and a slice-views plan reads its slices in both of
    the step sink's jobs (ADR 0007). Without this, every read would consume the same Kafka
    offsets and decode the same Avro again. The first reader of a slice writes it here; the
    others read the file.

    Invariant: a slice is a pure function of (offsets, step, waterlines, wall clock), all
    fixed by the offset log, and of the table's spec, and all of them are in the file's name,
    so a cached slice is exactly what a fresh read would give, on replay too. Files of older
    steps are removed. A file that cannot be read is read from Kafka again; one that cannot be
    written raises :class:`~app.errors.StateError`.
    """

    KEEP_STEPS = 3

    def __init__(self, state_dir: str, spec: SourceSpec | None = None) -> None:
        import hashlib
        import tempfile

        tag = hashlib.sha1(os.path.abspath(state_dir).encode()).hexdigest()[:16]  # noqa: S324
        self.directory = Path(tempfile.gettempdir()) / "tidemark-slices" / tag
        # What the rows hold depends on the table's spec too (its columns, ok_payload): a
        # program changed on the same checkpoint never reads the old program's files.
        self.spec = json.dumps(spec.to_json(), sort_keys=True) if spec is not None else ""

    def _path(self, part: KafkaPartitionSlice) -> Path:
        import hashlib

        # Everything the gate's verdicts depend on is in the name, so a stale file of a
        # deleted checkpoint or another run can never be taken for this slice.
        inputs = json.dumps([part.waterlines, part.wall_clock_ms, self.spec], sort_keys=True)
        digest = hashlib.sha1(inputs.encode()).hexdigest()[:12]  # noqa: S324
        return self.directory / (
            f"{part.step}-{part.partition}-{part.start}-{part.end}-{digest}.arrow"
        )

    def read(
        self, part: KafkaPartitionSlice, decode: Callable[[], Iterator[pa.RecordBatch]]
    ) -> Iterator[pa.RecordBatch]:
        path = self._path(part)
        try:
            cached = pa.ipc.open_file(pa.BufferReader(path.read_bytes()))
            batches = [cached.get_batch(i) for i in range(cached.num_record_batches)]
        except (FileNotFoundError, pa.ArrowInvalid, OSError):
            batches = None
        if batches is not None:
            yield from batches
            return
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        writer = None
        try:
            try:
                for batch in decode():
                    if writer is None:
                        writer = self._open(tmp, batch.schema)
                    writer.write_batch(batch)
                    yield batch
                if writer is not None:
                    writer.close()
                    writer = None
                    os.replace(tmp, path)
            finally:
                if writer is not None:
                    writer.close()
                with contextlib.suppress(OSError):
                    tmp.unlink(missing_ok=True)
        except OSError as exc:
            raise state_error("write the cached slice", path, exc) from exc
        forget_steps_before(self.directory, part.step - self.KEEP_STEPS, ".arrow")

    def _open(self, tmp: Path, schema: pa.Schema) -> pa.ipc.RecordBatchFileWriter:
        self.directory.mkdir(parents=True, exist_ok=True)
        return pa.ipc.new_file(str(tmp), schema)

    def clear(self) -> None:
        """Remove this query's cached slices (the service calls it when its queries stop)."""
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)


def cached_slice(
    spec: SourceSpec, conf: Mapping[str, str], state_dir: str, part: KafkaPartitionSlice
) -> Iterator[pa.RecordBatch]:
    """One slice's batches: from the slice cache, else read from Kafka (and cached)."""
    return SliceCache(state_dir, spec).read(part, lambda: read_slice(spec, conf, part))
