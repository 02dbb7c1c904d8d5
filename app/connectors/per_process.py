"""One value per process: the owner of the Kafka client pools (:class:`PerProcess`).

Spark runs tasks in Python worker processes that it reuses across tasks and steps, and ships
each task as a pickled closure, so a pool of Kafka clients cannot be passed to a task: a
task reaches its process's pool through one :class:`PerProcess` holder. librdkafka's threads
do not survive a fork, so a forked child never uses its parent's value; it makes its own.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PerProcess"]

T = TypeVar("T")


class PerProcess(Generic[T]):
    """A value made on first use in each process and closed at the exit of the process that
    made it (Spark's workers end with ``os._exit``, which closes nothing: their clients end
    with the process)."""

    def __init__(self, make: Callable[[], T], close: Callable[[T], None]) -> None:
        self._make = make
        self._close = close
        self._value: T | None = None
        self._pid = -1
        self._lock = threading.Lock()

    def get(self) -> T:
        """This process's value, made now if this process has none yet."""
        with self._lock:
            if self._value is None or self._pid != os.getpid():
                value = self._value = self._make()
                self._pid = os.getpid()
                atexit.register(self._close_if_mine, value, self._pid)
            return self._value

    def swap(self, value: T | None) -> T | None:
        """Make ``value`` this process's value (None: the next :meth:`get` makes one) and
        return the one it replaces; what a test uses to stand for another process."""
        with self._lock:
            previous, self._value, self._pid = self._value, value, os.getpid()
            return previous

    def _close_if_mine(self, value: T, pid: int) -> None:
        if pid == os.getpid():
            self._close(value)
