"""Named fault points: a test-only hook that stops the process at a chosen place.

The kill loop (``tests/e2e/test_kill_loop.py``) kills ``tidemark run`` with SIGKILL at the
places where exactly-once output (SPEC S15) could break, not only at random moments. The
runtime calls :func:`fault_point` at each such place; it does nothing unless the environment
names the point, so production never stops here. The points:

``after_marker``
    in a writing task's Kafka transaction, right after its records and then its step marker
    were produced (the transaction is open, the records on their way);
``after_flush``
    the task's records and marker are all acknowledged, the transaction not yet committed;
``after_commit``
    the task's transaction committed;
``between_jobs``
    on the driver, after the step's first job (probes, waterlines) and before the job that
    writes the outputs;
``before_spark_commit``
    on the driver, at the end of the ``foreachBatch`` function: every write and step file is
    done, Spark's commit log does not record the batch yet.

Configured by the environment alone (read once per process; Spark's Python workers inherit
the driver's in local mode):

``TIDEMARK_FAULT_POINT``
    ``name`` or ``name@batch``: the point, and the Spark batch id from which it fires (the
    first batch at or after it that reaches the point: a batch whose tasks write nothing never
    reaches a task's point); any batch when left out. Unset: every call is a no-op.
``TIDEMARK_FAULT_DIR``
    a directory: on reaching the point the process writes ``reached-<name>-<pid>`` there
    (atomically), so the test knows where the process stands before it kills it.
``TIDEMARK_FAULT_PAUSE``
    set: instead of waiting to be killed, wait until a file ``release`` exists in the
    directory, then go on (holds a transaction open while the test restarts the broker).

A point fires at most once per process. These variables are for tests; never set them in a
deployment.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

__all__ = ["POINTS", "fault_point"]

POINTS = ("after_marker", "after_flush", "after_commit", "between_jobs", "before_spark_commit")

log = structlog.get_logger("tidemark.fault")

_fired: set[str] = set()
_lock = threading.Lock()


@dataclass(frozen=True)
class _Fault:
    name: str
    batch: int | None
    directory: Path
    pause: bool


@functools.cache
def _configured() -> _Fault | None:
    """The fault the environment names, read once per process; None when none is."""
    spec = os.environ.get("TIDEMARK_FAULT_POINT", "").strip()
    if not spec:
        return None
    name, _, batch = spec.partition("@")
    if name not in POINTS:
        raise ValueError(f"TIDEMARK_FAULT_POINT names no fault point: {spec!r} (one of {POINTS})")
    directory = Path(os.environ.get("TIDEMARK_FAULT_DIR") or ".")
    pause = bool(os.environ.get("TIDEMARK_FAULT_PAUSE"))
    return _Fault(name, int(batch) if batch else None, directory, pause)


def fault_point(name: str, batch: int | None = None) -> None:
    """Stop here if the environment names this point (and ``batch``); else return at once."""
    fault = _configured()
    if fault is None or fault.name != name:
        return
    if fault.batch is not None and (batch is None or batch < fault.batch):
        return
    with _lock:
        if name in _fired:
            return
        _fired.add(name)
    fault.directory.mkdir(parents=True, exist_ok=True)
    reached = fault.directory / f"reached-{name}-{os.getpid()}"
    temporary = reached.with_name(f".{reached.name}.tmp")
    temporary.write_text(f"{name} {batch}\n")
    temporary.replace(reached)  # the test sees the file whole or not at all
    log.warning("fault_point.reached", point=name, batch=batch, pause=fault.pause)
    release = fault.directory / "release"
    while not (fault.pause and release.exists()):
        time.sleep(0.05 if fault.pause else 1.0)
    log.warning("fault_point.released", point=name, batch=batch)
