"""Where Tidemark keeps the files beside Spark's checkpoint: a local directory or an
``s3a://bucket/prefix`` (ADR 0025).

Every such file (step files, the plan record, the sink id, the stage prefix, probes, the
entries of Spark's offset log Tidemark reads) is read and written through a
:class:`CheckpointStore` chosen by its location with :func:`store_at`. A location is a
string: a path, or a URL whose key is the path below the bucket; :func:`join` extends
either.

The invariants the step protocol rests on hold on both backends:

- **Whole**: a reader sees a file's old content or its whole new content, never a part
  (local: a temporary file renamed over it; S3: a PUT is whole).
- **Durable**: a durable write has reached stable storage before it returns (local: the file
  and its directory fsync'ed; S3: a PUT is acknowledged once stored).
- **Once**: :meth:`CheckpointStore.create` writes a file only if it does not exist, and of
  two writers racing exactly one succeeds (local: ``link(2)``, which fails on an existing
  name; S3: ``If-None-Match: *``).

Errors are :class:`~app.errors.StateError`, naming the location and the fix.
"""

from __future__ import annotations

import os
import posixpath
from abc import ABC, abstractmethod

__all__ = [
    "SCHEME",
    "CheckpointStore",
    "is_url",
    "join",
    "parent",
    "store_at",
]

#: The one URL scheme of a checkpoint on object storage: Spark's (hadoop-aws) S3A.
SCHEME = "s3a://"


def is_url(location: str) -> bool:
    """Whether ``location`` is on object storage (``s3a://``) rather than a local path."""
    return location.startswith(SCHEME)


def join(location: str, *parts: str) -> str:
    """``location`` extended by ``parts``, as a path or a URL."""
    if is_url(location):
        return posixpath.join(location.rstrip("/"), *parts)
    return os.path.join(location, *parts)


def parent(location: str) -> str:
    """The directory (or prefix) holding ``location``."""
    if is_url(location):
        head = posixpath.dirname(location.rstrip("/"))
        return head if len(head) > len(SCHEME) else location
    return os.path.dirname(os.path.normpath(location))


class CheckpointStore(ABC):
    """The file operations of a checkpoint; locations are as :func:`store_at` was given."""

    @abstractmethod
    def read_bytes(self, location: str) -> bytes | None:
        """The file's content, None when there is no such file."""

    def read_text(self, location: str) -> str | None:
        """The file's content as UTF-8 text, None when there is no such file."""
        data = self.read_bytes(location)
        return None if data is None else data.decode("utf-8")

    @abstractmethod
    def write(self, location: str, data: str | bytes, durable: bool = True) -> None:
        """Write the file whole (replacing what was there); ``durable``: on stable storage
        when this returns (only a file every attempt of a step writes again may skip it)."""

    @abstractmethod
    def create(self, location: str, data: str | bytes) -> bool:
        """Write the file whole and durably only if it does not exist: True when this call
        created it, False when it existed (its content unchanged). Of two racing, one wins."""

    @abstractmethod
    def names(self, directory: str) -> list[str]:
        """The names directly in ``directory`` (files and sub-directories), none when it
        does not exist. Temporary files of writes in flight (``.*.tmp``) are left out."""

    @abstractmethod
    def directories(self, directory: str) -> list[str]:
        """The names of the sub-directories (prefixes holding files) directly in
        ``directory``, none when it does not exist."""

    @abstractmethod
    def delete(self, location: str) -> None:
        """Remove the file; one already gone is no error."""

    def exists(self, location: str) -> bool:
        """Whether the file exists."""
        return self.read_bytes(location) is not None

    @abstractmethod
    def check_writable(self, directory: str) -> None:
        """``directory`` exists or can be made, and this process can write there; a
        :class:`~app.errors.ConfigError` naming the fix when not."""


def store_at(location: str) -> CheckpointStore:
    """The store of ``location``: the local filesystem, or the S3-compatible store that
    ``TIDEMARK_S3_*`` names (the settings' ``s3`` group, which the driver exports to its
    Python workers, ADR 0025)."""
    if is_url(location):
        from app.runtime.store.s3 import s3_store

        return s3_store()
    from app.runtime.store.local import LOCAL

    return LOCAL
