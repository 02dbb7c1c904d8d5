"""The lease of an s3a:// checkpoint (app/runtime/checkpoint_lease.py, ADR 0025) against a
real S3-compatible server (S3Proxy): one holder at a time (S15's one driver per checkpoint),
renewed while held, released on stop, taken over only after its expiry, and a holder that
stopped renewing knows it lost the lease before it writes again."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from app.errors import CheckpointError, ConfigError
from app.runtime.checkpoint_lease import LEASE_DIRECTORY, CheckpointLease
from app.runtime.store import join, store_at


def _lease(object_store: Any, seconds: float = 30, name: str = "ck") -> CheckpointLease:
    settings = object_store.settings().model_copy(update={"lease_seconds": seconds})
    return CheckpointLease(object_store.url(name), settings)


def test_a_second_run_is_refused_naming_the_holder_while_the_lease_lives_s15(
    object_store: Any,
) -> None:
    first, second = _lease(object_store), _lease(object_store)
    first.acquire(program="p.sql")
    try:
        assert first.held and first.epoch == 1
        with pytest.raises(ConfigError, match=r"is in use by process \d+ on host .*program p.sql"):
            second.acquire()
        assert not second.held
    finally:
        first.release()


def test_a_released_lease_is_taken_at_once_by_the_next_run(object_store: Any) -> None:
    first, second = _lease(object_store), _lease(object_store)
    first.acquire()
    first.release()
    started = time.monotonic()
    second.acquire()
    try:
        assert second.epoch == 2
        assert time.monotonic() - started < 5
    finally:
        second.release()


def test_renewing_keeps_the_lease_past_its_length(object_store: Any) -> None:
    first, second = _lease(object_store, seconds=3), _lease(object_store, seconds=3)
    first.acquire()
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            first.renew()
            with pytest.raises(ConfigError):
                second.acquire()
            time.sleep(0.5)
        first.check()
    finally:
        first.release()


def test_an_expired_lease_is_taken_over_and_its_holder_finds_it_lost(
    object_store: Any,
) -> None:
    """A holder killed (or paused) stops renewing: after the lease's length by the store's
    clock another run takes the next epoch, and the old holder's next renewal fails."""
    stale, taker = _lease(object_store, seconds=2), _lease(object_store, seconds=2)
    stale.acquire()
    stale._stop.set()  # as if the process were frozen: its renewing thread stops
    started = time.monotonic()
    taker.acquire(wait_seconds=20)
    try:
        waited = time.monotonic() - started
        assert taker.epoch == 2
        assert waited >= 1.0, "taken over before the lease could have expired"
        with pytest.raises(CheckpointError, match="lost the lease"):
            stale.check()  # its own clock: more than 2 s without a renewal
        stale._renewed_at = time.monotonic()  # even had its clock not run out,
        stale._lost = None
        with pytest.raises(CheckpointError, match="took the lease over"):
            stale.renew()  # the newer epoch tells it
    finally:
        taker.release()


def _race(leases: list[CheckpointLease]) -> list[str]:
    """Each lease acquired at once from a thread of its own: what each got."""
    gate = threading.Barrier(len(leases))
    outcomes: list[str] = [""] * len(leases)

    def take(i: int) -> None:
        gate.wait()
        try:
            leases[i].acquire()
            outcomes[i] = "held"
        except ConfigError:
            outcomes[i] = "refused"

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(leases))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


@pytest.mark.parametrize("round_", range(3))
def test_of_runs_racing_for_a_free_checkpoint_exactly_one_takes_it_s15(
    object_store: Any, round_: int
) -> None:
    leases = [_lease(object_store, name=f"race-{round_}") for _ in range(6)]
    outcomes = _race(leases)
    try:
        assert outcomes.count("held") == 1, outcomes
        assert outcomes.count("refused") == len(leases) - 1
    finally:
        for lease in leases:
            lease.release()
    directory = join(object_store.url(f"race-{round_}"), LEASE_DIRECTORY)
    assert store_at(directory).names(directory) == ["000000000001"]


def test_of_runs_racing_to_take_over_an_expired_lease_exactly_one_wins_s15(
    object_store: Any,
) -> None:
    stale = _lease(object_store, seconds=1, name="expired")
    stale.acquire()
    stale._stop.set()
    time.sleep(2.5)  # the store's clock counts whole seconds
    leases = [_lease(object_store, seconds=1, name="expired") for _ in range(6)]
    outcomes = _race(leases)
    try:
        assert outcomes.count("held") == 1, outcomes
        assert [lease.epoch for lease in leases if lease.held] == [2]
    finally:
        for lease in leases:
            lease.release()
