"""One driver per checkpoint: the checkpoint lock refuses a second holder, naming the first,
and a dead holder never keeps it (the kernel releases flock with the process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.errors import ConfigError
from app.runtime.checkpoint_lock import LOCK_NAME, CheckpointLock

HOLD = """
import sys, time
from pathlib import Path
from app.runtime.checkpoint_lock import CheckpointLock
CheckpointLock(Path(sys.argv[1])).acquire(program="held.sql")
print("held", flush=True)
time.sleep(600)
"""


def _holder(checkpoint: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(checkpoint)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_holder_is_refused_with_the_first_named(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    try:
        with pytest.raises(ConfigError) as refused:
            CheckpointLock(tmp_path).acquire()
        text = str(refused.value)
        assert f"process {holder.pid} on host" in text
        assert "program held.sql" in text
        assert "TIDEMARK_CHECKPOINT_LOCK_WAIT_SECONDS" in text
        assert str(tmp_path / LOCK_NAME) in text
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_leaves_the_checkpoint_free(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    lock = CheckpointLock(tmp_path)
    lock.acquire()
    assert lock.held
    assert f'"pid": {os.getpid()}' in (tmp_path / LOCK_NAME).read_text()
    lock.release()


def test_released_in_process_it_can_be_taken_again_and_waiting_outlasts_a_holder(
    tmp_path: Path,
) -> None:
    first = CheckpointLock(tmp_path)
    first.acquire()
    first.acquire()  # taking it again is a no-op
    second = CheckpointLock(tmp_path)
    with pytest.raises(ConfigError, match="is in use by process"):
        second.acquire()
    threading.Timer(0.6, first.release).start()
    started = time.monotonic()
    second.acquire(wait_seconds=10)
    assert second.held and 0.5 < time.monotonic() - started < 5
    with pytest.raises(ConfigError, match="after waiting 0.2 s"):
        CheckpointLock(tmp_path).acquire(wait_seconds=0.2)
    second.release()
