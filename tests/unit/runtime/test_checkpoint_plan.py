"""The plan recorded with a checkpoint and the guard ``tidemark run`` passes before Spark
starts (app/runtime/planner/checkpoint_plan.py, ADR 0015), on real directories, without Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.errors import CheckpointError
from app.program.compile import compile_program
from app.runtime.planner.checkpoint_plan import (
    PLAN_NAME,
    guard_checkpoint,
    judge_checkpoint,
    read_recorded_plan,
)
from app.runtime.planner.plan_fingerprint import PlanFingerprint, plan_fingerprint

PROGRAM = """
CREATE TABLE t (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    k   BIGINT    NOT NULL,
    x   DOUBLE
) WITH ('topic' = 'in');
CREATE VIEW hourly WITH ('topic' = 'h') AS
SELECT window_start, window_end, k, SUM(x) AS total
FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '{hours}' HOUR))
GROUP BY window_start, window_end, k;
"""
FILTER = "CREATE VIEW f WITH ('topic' = 'f', 'format' = 'append') AS SELECT ts, k FROM t;\n"


def _fingerprint(hours: int = 1, extra: str = "") -> PlanFingerprint:
    return plan_fingerprint(compile_program("p.sql", PROGRAM.format(hours=hours) + extra))


def _with_state(checkpoint: Path) -> Path:
    """A checkpoint an earlier run wrote in: a table's directory."""
    (checkpoint / "t" / "spark").mkdir(parents=True)
    return checkpoint


def test_a_new_checkpoint_records_the_plan_durably(tmp_path: Path) -> None:
    fingerprint = _fingerprint()
    verdict = guard_checkpoint(tmp_path, fingerprint)
    assert verdict.verdict == "new"
    record = read_recorded_plan(tmp_path)
    assert record is not None
    assert record["digest"] == fingerprint.digest
    assert record["document"] == fingerprint.document
    # Written through a temporary file, renamed: nothing else is left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == [PLAN_NAME]


def test_a_checkpoint_without_a_plan_is_adopted_once_and_the_plan_recorded(
    tmp_path: Path,
) -> None:
    checkpoint = _with_state(tmp_path)
    assert guard_checkpoint(checkpoint, _fingerprint()).verdict == "adopted"
    # From then on, the recorded plan is compared: a changed window is refused.
    with pytest.raises(CheckpointError):
        guard_checkpoint(checkpoint, _fingerprint(hours=2))


def test_a_changed_window_is_refused_with_the_change_and_the_options_s11(
    tmp_path: Path,
) -> None:
    checkpoint = _with_state(tmp_path)
    guard_checkpoint(checkpoint, _fingerprint())
    before = (checkpoint / PLAN_NAME).read_bytes()
    with pytest.raises(CheckpointError) as refused:
        guard_checkpoint(checkpoint, _fingerprint(hours=2))
    text = str(refused.value)
    assert (
        "view hourly: window TUMBLE 1 hour on ts -> TUMBLE 2 hours on ts "
        "(its state is kept per window)"
    ) in text
    assert "--checkpoint" in text and "'scan.startup.mode'" in text
    assert "tidemark explain PROGRAM --against CHECKPOINT" in text
    # Nothing is written on a refusal: the recorded plan is still the old one.
    assert (checkpoint / PLAN_NAME).read_bytes() == before


def test_a_compatible_change_proceeds_says_what_it_kept_and_records_the_new_plan(
    tmp_path: Path,
) -> None:
    checkpoint = _with_state(tmp_path)
    guard_checkpoint(checkpoint, _fingerprint())
    changed = _fingerprint(extra=FILTER)
    verdict = guard_checkpoint(checkpoint, changed)
    assert verdict.verdict == "changed"
    text = verdict.text()
    assert "changed: view f: added, stateless" in text
    assert "kept:    view hourly: its state (python)" in text
    assert "kept:    table t: offsets and waterlines" in text
    record = read_recorded_plan(checkpoint)
    assert record is not None and record["digest"] == changed.digest
    assert guard_checkpoint(checkpoint, changed).verdict == "same"


def test_a_recorded_plan_on_a_checkpoint_with_no_state_yet_is_replaced(tmp_path: Path) -> None:
    """A run that stopped before any query started leaves only the plan: the next run's
    program is the checkpoint's first, whatever it is."""
    guard_checkpoint(tmp_path, _fingerprint())
    assert guard_checkpoint(tmp_path, _fingerprint(hours=2)).verdict == "new"


def test_a_damaged_record_is_refused_naming_the_file(tmp_path: Path) -> None:
    checkpoint = _with_state(tmp_path)
    (checkpoint / PLAN_NAME).write_text("{not json", encoding="utf-8")
    with pytest.raises(CheckpointError, match=PLAN_NAME):
        judge_checkpoint(checkpoint, _fingerprint())
