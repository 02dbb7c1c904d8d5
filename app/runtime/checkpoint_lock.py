"""One driver per checkpoint: an exclusive lock on a file in the checkpoint directory.

Two drivers on one checkpoint would each plan steps and write them, and on a fresh checkpoint
each would create its own sink id (``<checkpoint>/<table>/tidemark/sink-id``), so neither
fences the other's transactions (S15). The driver therefore holds ``fcntl.flock`` on
``<checkpoint>/.tidemark.lock`` from before it reads or creates anything there until its
queries have stopped. The kernel releases the lock when the holding process exits, however it
exits (SIGKILL, a crash, an OOM kill), so a dead driver never keeps a checkpoint locked.

A second driver refuses to start with a :class:`~app.errors.ConfigError` naming the holder
(host, process id, start time, written into the file by the holder), as a Kafka Streams
instance refuses a state directory another instance has locked; with
``checkpoint_lock_wait_seconds`` it waits that long for the holder to go first. What the
lock covers on a shared filesystem is in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.errors import ConfigError

__all__ = ["LOCK_NAME", "CheckpointLock", "in_use"]

#: The lock file, in the checkpoint directory.
LOCK_NAME = ".tidemark.lock"

#: How often a waiting driver tries the lock again.
_POLL_SECONDS = 0.5


def in_use(checkpoint: object, holder: dict[str, Any], unnamed: str, wait_seconds: float,
           where: str) -> ConfigError:
    """The refusal of a second run on a checkpoint: who holds it (``holder`` as the holder
    wrote itself, ``unnamed`` when it has not), how long this run waited, ``where`` the
    lock is kept, and the fixes."""
    if holder:
        who = (
            f"process {holder.get('pid')} on host {holder.get('host')}"
            f" (since {holder.get('since')}"
            + (f", program {holder['program']}" if holder.get("program") else "")
            + ")"
        )
    else:
        who = unnamed
    waited = f" after waiting {wait_seconds:g} s" if wait_seconds else ""
    return ConfigError(
        f"checkpoint {checkpoint} is in use by {who}{waited}: one run at a time may use a"
        f" checkpoint ({where}). Stop that run first, give this one its own --checkpoint"
        " (TIDEMARK_CHECKPOINT), or set TIDEMARK_CHECKPOINT_LOCK_WAIT_SECONDS to wait for it"
    )


class CheckpointLock:
    """The lock of one checkpoint directory, held by this process between :meth:`acquire`
    and :meth:`release` (or the process's end)."""

    def __init__(self, checkpoint: Path) -> None:
        self.checkpoint = checkpoint
        self.path = checkpoint / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, wait_seconds: float = 0, program: str | None = None) -> None:
        """Take the lock, waiting up to ``wait_seconds`` for another holder to release it;
        a ConfigError naming the holder when it does not. Taking it again is a no-op."""
        if self._fd is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(
                f"cannot open the checkpoint lock {self.path}"
                f" ({exc.strerror or type(exc).__name__}): give a checkpoint directory this"
                " user can write with --checkpoint or TIDEMARK_CHECKPOINT"
            ) from exc
        deadline = time.monotonic() + wait_seconds
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise self._refusal(fd, wait_seconds) from None
                    time.sleep(_POLL_SECONDS)
                except OSError as exc:
                    raise ConfigError(
                        f"cannot lock the checkpoint {self.checkpoint}"
                        f" ({exc.strerror or type(exc).__name__}): its filesystem must support"
                        " file locks (flock); see docs/reliability.md"
                    ) from exc
            holder = {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "since": datetime.now(UTC).isoformat(timespec="seconds"),
                "program": program,
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (closing the file releases it); the holder line stays, stale
        but harmless: only the kernel's lock counts."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _refusal(self, fd: int, wait_seconds: float) -> ConfigError:
        try:
            text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
            holder = json.loads(text) if text else {}
        except (OSError, ValueError):
            holder = {}
        return in_use(self.checkpoint, holder, "another process (it has not written its name "
                      "yet)", wait_seconds, f"its lock file is {self.path}")
