"""Exactly-once output (SPEC S15) through a kill loop: ``tidemark run`` killed with SIGKILL at
every fault point (:mod:`app.fault_points`: after the step marker, after the flush, after the
commit, between the step's jobs, before Spark's commit log) and at random moments, over every
placement the physical plan chooses (stateless views in the source's tasks, a native
aggregate, the Python state operator, EMIT AFTER DELAY, an interval join), plus a broker
restart while a transaction is held open. Afterwards a read_committed consumer reads exactly
what the reference evaluator computes for Spark's steps, no transaction is left open, and no
waterline went back (:mod:`kill_loop`).

Every variant is ``slow`` (CI keeps S15 through test_crash_recovery.py and
test_step_markers.py): the native aggregate (with a stateless view beside it) with five
kills, one at each point; each placement with twelve kills (each point twice, two at
random), a composed program among them (a filter over an aggregate read through a stage
boundary, ADR 0023); and the broker restart inside a transaction held at ``after_marker``
and at ``after_flush``. Figures are printed (``-s``) for docs/reliability.md.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kill_loop import SCENARIOS, kill_loop

from app.fault_points import POINTS
from app.local_kafka import LocalKafka

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalKafka]:
    """A broker of the test's own: the shared one cannot be restarted."""
    subprocess.run(["bash", str(ROOT / "scripts" / "fetch-kafka.sh")], check=True)
    broker = LocalKafka(workdir=tmp_path / "kafka").start()
    try:
        yield broker
    finally:
        broker.cleanup()


def _report(name: str, figures: object) -> None:
    print(json.dumps({"placement": name, **_plain(figures)}))


def _plain(figures: object) -> dict[str, object]:
    values = dict(vars(figures))
    values["kills"] = sum(values["kills_at"].values())
    values["kills_at"] = dict(values["kills_at"])
    values["seconds"] = round(values["seconds"])
    return {**values, "losses": 0, "duplicates": 0}


@pytest.mark.slow  # ~100 s; CI keeps S15 through test_crash_recovery and test_step_markers
def test_five_kills_one_at_each_fault_point_lose_and_duplicate_nothing_s15(
    tmp_path: Path, own_broker: LocalKafka
) -> None:
    figures = kill_loop(
        SCENARIOS["native_aggregate"],
        own_broker,
        tmp_path / "native",
        kills=list(POINTS),
        rows=400,
        per_step=40,
        broker_pause=None,
        ahead=1,
    )
    _report("native_aggregate", figures)
    assert sum(figures.kills_at.values()) == 5
    assert figures.replayed_tasks >= 1, "a kill landed between the sink's commit and Spark's"


@pytest.mark.slow
@pytest.mark.parametrize("held", ["after_marker", "after_flush"])
def test_a_broker_restart_inside_a_held_transaction_is_ridden_out_s15(
    tmp_path: Path, own_broker: LocalKafka, held: str
) -> None:
    figures = kill_loop(
        SCENARIOS["native_aggregate"],
        own_broker,
        tmp_path / "native",
        kills=["after_commit"],
        rows=400,
        per_step=40,
        broker_pause=held,
        ahead=1,
    )
    _report("native_aggregate", figures)
    assert figures.broker_restarts == 1


@pytest.mark.slow
@pytest.mark.parametrize("placement", list(SCENARIOS))
def test_twelve_kills_per_placement_lose_and_duplicate_nothing_s15(
    tmp_path: Path, own_broker: LocalKafka, placement: str
) -> None:
    kills = [*POINTS, "random", *POINTS, "random"]
    figures = kill_loop(
        SCENARIOS[placement],
        own_broker,
        tmp_path / placement,
        kills=kills,
        rows=1200,
        per_step=40,
        broker_pause=None,
    )
    _report(placement, figures)
    assert sum(figures.kills_at.values()) == len(kills)


@pytest.mark.slow
def test_twelve_kills_on_an_s3a_checkpoint_lose_and_duplicate_nothing_s15(
    tmp_path: Path, own_broker: LocalKafka, object_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The native aggregate's twelve kills with the checkpoint in an S3-compatible store
    (ADR 0025): a killed run leaves its lease unreleased, so the next one waits for it to
    expire (3 s here) and takes it over."""
    monkeypatch.setenv("TIDEMARK_S3_LEASE_SECONDS", "3")
    monkeypatch.setenv("TIDEMARK_CHECKPOINT_LOCK_WAIT_SECONDS", "60")
    kills = [*POINTS, "random", *POINTS, "random"]
    figures = kill_loop(
        SCENARIOS["native_aggregate"],
        own_broker,
        tmp_path / "native",
        kills=kills,
        rows=1200,
        per_step=40,
        broker_pause=None,
        checkpoint=object_store.url("ck"),
    )
    _report("native_aggregate on s3a", figures)
    assert sum(figures.kills_at.values()) == len(kills)
