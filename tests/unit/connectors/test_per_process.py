"""The owner of the Kafka client pools: one value per process, a forked child's its own."""

from __future__ import annotations

import os

from app.connectors.per_process import PerProcess


class _Pool:
    closed = 0

    def close(self) -> None:
        self.closed += 1


def test_a_process_gets_one_value_made_on_first_use() -> None:
    holder: PerProcess[_Pool] = PerProcess(_Pool, _Pool.close)
    assert holder.get() is holder.get()


def test_a_forked_child_makes_a_value_of_its_own() -> None:
    holder: PerProcess[_Pool] = PerProcess(_Pool, _Pool.close)
    parent = id(holder.get())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        mine = holder.get()
        os.write(write, b"own" if id(mine) != parent and holder.get() is mine else b"shared")
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"own"
    os.close(read)


def test_swap_stands_for_another_process_and_gives_back_the_old_value() -> None:
    holder: PerProcess[_Pool] = PerProcess(_Pool, _Pool.close)
    first, other = holder.get(), _Pool()
    assert holder.swap(other) is first
    assert holder.get() is other
    assert holder.swap(None) is other
    assert holder.get() not in (first, other)


def test_the_value_is_closed_at_exit_only_by_the_process_that_made_it() -> None:
    holder: PerProcess[_Pool] = PerProcess(_Pool, _Pool.close)
    pool = holder.get()
    holder._close_if_mine(pool, os.getpid() + 1)
    assert pool.closed == 0
    holder._close_if_mine(pool, os.getpid())
    assert pool.closed == 1
