"""One driver per checkpoint on object storage: a lease, renewed while the run lives (ADR 0025).

A kernel lock cannot guard an ``s3a://`` checkpoint: nothing releases an object when its
holder is killed (SIGKILL, an evicted pod). The driver instead holds a lease, a sequence of
objects ``<checkpoint>/.tidemark-lease/<epoch>`` of which the newest is the lease:

- **Take.** A run takes epoch 1 of a checkpoint without one, and epoch n+1 when epoch n is
  released or expired, by creating the object with ``If-None-Match: *``: of runs racing for
  one epoch exactly one creates it; the others see it live and wait or refuse
  (``checkpoint_lock_wait_seconds``), naming the holder written in it.
- **Renew.** The holder rewrites its epoch's object with ``If-Match: <its ETag>`` at each
  step and every third of the lease's length (:attr:`~app.config.ObjectStore.lease_seconds`)
  between steps. A refused renewal, or a newer epoch, means the lease was lost.
- **Expire.** Epoch n is expired when the store's clock at a HEAD (its ``Date``) is more than
  ``lease_seconds`` past the object's ``Last-Modified``: both readings are the store's, so the
  runs' clocks need not agree. The holder itself stops writing (:meth:`CheckpointLease.check`
  raises) once ``lease_seconds`` have passed on its own clock since it sent its last renewal
  that succeeded, which is before the store can count the lease expired.
- **Release.** A run that stops rewrites its epoch as released, so the next run takes over at
  once rather than after the expiry.

Every contended write is a create with ``If-None-Match: *`` (atomic on S3 and on S3Proxy's
filesystem backend); ``If-Match`` is only ever used by the one holder on its own epoch. A
holder that is paused past the expiry and wakes before noticing is fenced by the sink id
(the same Kafka transactional ids, S15): the newer run's producers fence its transactions.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from datetime import UTC, datetime
from typing import Any

import structlog

from app.config import ObjectStore
from app.errors import CheckpointError, ConfigError
from app.runtime.checkpoint_lock import in_use
from app.runtime.store import join
from app.runtime.store.s3 import S3Store, s3_store

__all__ = ["LEASE_DIRECTORY", "CheckpointLease"]

log = structlog.get_logger("tidemark.lease")

#: The lease's objects, under the checkpoint.
LEASE_DIRECTORY = ".tidemark-lease"

#: How often a waiting run looks at the lease again.
_POLL_SECONDS = 0.5


def _epoch_name(epoch: int) -> str:
    return f"{epoch:012d}"


class CheckpointLease:
    """The lease of one ``s3a://`` checkpoint, held by this process between :meth:`acquire`
    and :meth:`release`; a daemon thread renews it in between."""

    def __init__(self, checkpoint: str, settings: ObjectStore | None = None) -> None:
        self.checkpoint = checkpoint
        self.settings = settings if settings is not None else ObjectStore()
        self.lease_seconds = self.settings.lease_seconds
        self.directory = join(checkpoint, LEASE_DIRECTORY)
        self._store: S3Store = s3_store(self.settings)
        self._epoch: int | None = None
        self._etag: str | None = None
        self._holder: dict[str, Any] = {}
        #: monotonic time at which the last successful renewal (or the take) was sent.
        self._renewed_at = 0.0
        self._lost: str | None = None
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return self._epoch is not None

    @property
    def epoch(self) -> int | None:
        return self._epoch

    def _location(self, epoch: int) -> str:
        return join(self.directory, _epoch_name(epoch))

    def _newest(self) -> int | None:
        epochs = [int(name) for name in self._store.names(self.directory) if name.isdigit()]
        return max(epochs) if epochs else None

    def _free(self, epoch: int) -> tuple[bool, dict[str, Any]]:
        """Whether epoch ``epoch`` may be taken over (released or expired), and its holder."""
        location = self._location(epoch)
        version = self._store.head(location)
        text = self._store.read_text(location) if version is not None else None
        if version is None or text is None:
            return True, {}
        try:
            holder: dict[str, Any] = json.loads(text)
        except ValueError:
            holder = {}
        if holder.get("released"):
            return True, holder
        if version.server_time is None or version.last_modified is None:
            raise CheckpointError(
                f"the object store answers without Date or Last-Modified for {location}:"
                " a lease cannot expire there; see docs/reliability.md"
            )
        age = (version.server_time - version.last_modified).total_seconds()
        return age > self.lease_seconds, holder

    def acquire(self, wait_seconds: float = 0, program: str | None = None) -> None:
        """Take the lease, waiting up to ``wait_seconds`` for a holder to release it or for
        its lease to expire; a ConfigError naming the holder when neither happens. Taking it
        again is a no-op."""
        if self._epoch is not None:
            return
        deadline = time.monotonic() + wait_seconds
        while True:
            newest = self._newest()
            holder: dict[str, Any] = {}
            if newest is None:
                epoch: int | None = 1
            else:
                free, holder = self._free(newest)
                epoch = newest + 1 if free else None
            if epoch is not None and self._take(epoch, program):
                if newest is not None:
                    log.info("checkpoint.lease.taken_over", checkpoint=self.checkpoint,
                             epoch=epoch, previous=holder)
                return
            if epoch is not None:
                continue  # another run took that epoch first: look at it
            if time.monotonic() >= deadline:
                raise self._refusal(holder, wait_seconds)
            time.sleep(_POLL_SECONDS)

    def _take(self, epoch: int, program: str | None) -> bool:
        holder = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
            "program": program,
            "epoch": epoch,
        }
        sent = time.monotonic()
        if not self._store.create(self._location(epoch), json.dumps(holder)):
            return False
        version = self._store.head(self._location(epoch))
        if version is None:
            return False
        self._epoch, self._etag, self._holder = epoch, version.etag, holder
        self._renewed_at, self._lost = sent, None
        self._forget_before(epoch - 1)
        self._stop.clear()
        self._renewer = threading.Thread(
            target=self._renew_while_held, name="tidemark-lease", daemon=True
        )
        self._renewer.start()
        return True

    def _forget_before(self, epoch: int) -> None:
        """Remove the objects of epochs below ``epoch`` (the one before stays, to say who
        held the checkpoint last)."""
        for name in self._store.names(self.directory):
            if name.isdigit() and int(name) < epoch:
                self._store.delete(join(self.directory, name))

    def renew(self) -> None:
        """Renew the lease now; a CheckpointError when it was lost (see :meth:`check`)."""
        with self._mutex:
            if self._epoch is None or self._etag is None:
                return
            self._raise_if_lost()
            sent = time.monotonic()
            body = json.dumps({**self._holder, "renewed": datetime.now(UTC).isoformat()})
            etag = self._store.replace(self._location(self._epoch), body, self._etag)
            if etag is None:
                self._lost = "its lease object was replaced or removed"
            elif self._store.exists(self._location(self._epoch + 1)):
                self._lost = "another run took the lease over after it expired"
            else:
                self._etag, self._renewed_at = etag, sent
            self._raise_if_lost()

    def check(self) -> None:
        """Nothing, while the lease is held; a CheckpointError once it was lost or has gone
        ``lease_seconds`` unrenewed (the step must not write then)."""
        with self._mutex:
            self._raise_if_lost()

    def _raise_if_lost(self) -> None:
        if self._lost is None and self._epoch is not None:
            unrenewed = time.monotonic() - self._renewed_at
            if unrenewed > self.lease_seconds:
                self._lost = f"it went {unrenewed:.1f} s without a renewal"
        if self._lost is not None:
            raise CheckpointError(
                f"this run lost the lease of checkpoint {self.checkpoint}"
                f" (epoch {self._epoch}): {self._lost}. It stops before writing more; another"
                " run may hold the checkpoint now. Restart it when that run has stopped"
                " (TIDEMARK_S3_LEASE_SECONDS sets how long a lease lasts unrenewed)"
            )

    def _renew_while_held(self) -> None:
        interval = self.lease_seconds / 3
        while not self._stop.wait(interval):
            try:
                self.renew()
            except CheckpointError as exc:
                log.error("checkpoint.lease.lost", checkpoint=self.checkpoint, reason=str(exc))
                return
            except Exception as exc:  # noqa: BLE001 - a store error: the next try may pass
                log.warning("checkpoint.lease.renewal_failed", checkpoint=self.checkpoint,
                            reason=str(exc))

    def release(self) -> None:
        """Give the lease up: its epoch is marked released, so the next run takes over at
        once. A lease already lost is left as it is."""
        self._stop.set()
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.join(timeout=5)
        with self._mutex:
            epoch, etag, self._epoch, self._etag = self._epoch, self._etag, None, None
            if epoch is None or etag is None or self._lost is not None:
                return
            body = json.dumps({**self._holder, "released": True})
            try:
                self._store.replace(self._location(epoch), body, etag)
            except Exception as exc:  # noqa: BLE001 - the lease then expires instead
                log.warning("checkpoint.lease.release_failed", checkpoint=self.checkpoint,
                            reason=str(exc))

    def _refusal(self, holder: dict[str, Any], wait_seconds: float) -> ConfigError:
        return in_use(self.checkpoint, holder, "another run", wait_seconds,
                      f"its lease is {self.directory}, taken over {self.lease_seconds:g} s "
                      "after its holder last renewed it")
