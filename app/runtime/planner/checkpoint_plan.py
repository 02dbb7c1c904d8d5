"""The plan recorded with a checkpoint, and the guard ``tidemark run`` passes before Spark starts.

``<checkpoint>/tidemark-plan.json`` holds the fingerprint of the last plan that ran on the
checkpoint (:mod:`app.runtime.planner.plan_fingerprint`). Before a run reads anything else there,
and while it holds the checkpoint lock, :func:`guard_checkpoint` compares it with the program's
plan by the rules of docs/adr/0015-checkpoint-compatibility-guard.md: a new checkpoint, one
made before plans were recorded, the same plan or a compatible change proceed (and the plan is
recorded); any change the checkpoint's state cannot follow is a
:class:`~app.errors.CheckpointError` that lists the changes and the options, with nothing
written. :func:`judge_checkpoint` is the same verdict without writing (``tidemark explain
--against``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import structlog

from app import __version__
from app.errors import CheckpointError, StateError
from app.runtime.planner.plan_fingerprint import PlanComparison, PlanFingerprint, compare_plans
from app.runtime.store import join, store_at

__all__ = [
    "ADR",
    "PLAN_NAME",
    "CheckpointVerdict",
    "guard_checkpoint",
    "judge_checkpoint",
    "read_recorded_plan",
    "record_plan",
]

log = structlog.get_logger("tidemark.checkpoint")

#: The plan's file, in the checkpoint directory.
PLAN_NAME = "tidemark-plan.json"
ADR = "docs/adr/0015-checkpoint-compatibility-guard.md"

Verdict = Literal["new", "adopted", "same", "changed", "refused"]


@dataclass(frozen=True)
class CheckpointVerdict:
    """What ``tidemark run`` does with ``checkpoint`` for the plan ``fingerprint``: record it
    on a ``new`` checkpoint, or on one made before plans were recorded (``adopted``); continue
    the ``same`` plan; continue after compatible changes and record the new plan
    (``changed``); or refuse (``refused``), with ``comparison`` saying why."""

    checkpoint: str | Path
    verdict: Verdict
    fingerprint: PlanFingerprint
    comparison: PlanComparison | None = None
    #: The Tidemark version that recorded the checkpoint's plan, when it has one.
    recorded_by: str | None = None

    @property
    def refused(self) -> bool:
        return self.verdict == "refused"

    @property
    def records(self) -> bool:
        """``tidemark run`` writes the program's plan to the checkpoint."""
        return self.verdict in ("new", "adopted", "changed")

    def text(self) -> str:
        """The verdict for people, as ``tidemark explain --against`` prints it and ``run``'s
        refusal says it."""
        where = f"checkpoint {self.checkpoint}"
        if self.verdict == "new":
            return f"{where}: no state yet; tidemark run starts it and records this plan\n"
        if self.verdict == "adopted":
            return (
                f"{where}: made before plans were recorded; tidemark run accepts it once as it"
                " is and records this plan\n"
            )
        if self.verdict == "same":
            return f"{where}: the same plan; tidemark run continues it\n"
        assert self.comparison is not None
        lines: list[str]
        if self.verdict == "changed":
            lines = [
                f"{where}: compatible changes; tidemark run continues it and records the new plan"
            ]
            lines += [f"  changed: {c}" for c in self.comparison.accepted]
            lines += [f"  kept:    {k}" for k in self.comparison.kept]
            return "\n".join(lines) + "\n"
        recorded = f" (recorded by Tidemark {self.recorded_by})" if self.recorded_by else ""
        lines = [
            f"{where} was made by another plan{recorded}, and its state cannot follow these"
            " changes:"
        ]
        lines += [f"  {c}" for c in self.comparison.refused]
        if self.comparison.accepted:
            lines.append("changes it could follow:")
            lines += [f"  {c}" for c in self.comparison.accepted]
        lines += [
            "options:",
            "  - run the program this checkpoint was made with (undo the changes above);",
            "  - give the changed program a new checkpoint directory (--checkpoint,"
            " TIDEMARK_CHECKPOINT): each table then starts at its 'scan.startup.mode'"
            " ('earliest-offset', the default, recomputes every view from the topics'"
            " retained records; 'latest-offset' or 'timestamp' start later, with partial"
            " windows at first), and its outputs are written again unless their topics are"
            " renamed;",
            "  - check a change before a deploy: tidemark explain PROGRAM --against CHECKPOINT"
            f" ({ADR})",
        ]
        return "\n".join(lines) + "\n"


def _plan_path(checkpoint: str | Path) -> str:
    return join(str(checkpoint), PLAN_NAME)


def _has_state(checkpoint: str | Path) -> bool:
    """The checkpoint holds something of an earlier run: a table's directory (Spark's
    checkpoint and the step files are under ``<checkpoint>/<table>/``; the lock, the plan
    and Spark's log are files)."""
    where = str(checkpoint)
    try:
        return any(not name.startswith(".") for name in store_at(where).directories(where))
    except StateError as exc:
        raise StateError(f"checkpoint {checkpoint} cannot be read: {exc}") from exc


def read_recorded_plan(checkpoint: str | Path) -> dict[str, Any] | None:
    """The record of the checkpoint's plan (``digest``, ``recorded_by``, ``document``), or
    None when it has none. A record that cannot be read is a CheckpointError."""
    path = _plan_path(checkpoint)
    try:
        text = store_at(path).read_text(path)
    except StateError as exc:
        raise CheckpointError(
            f"the plan recorded with checkpoint {checkpoint} cannot be read: {exc}"
        ) from exc
    if text is None:
        return None
    try:
        record = json.loads(text)
        if not isinstance(record, dict) or not isinstance(record.get("document"), dict):
            raise ValueError("no plan document in it")
    except ValueError as exc:
        raise CheckpointError(
            f"the plan recorded with checkpoint {checkpoint} is damaged ({path}: {exc}). If"
            " the program is the one that made the checkpoint, delete the file: the next run"
            f" accepts the checkpoint once as one made before plans were recorded ({ADR})"
        ) from exc
    return record


def record_plan(checkpoint: str | Path, fingerprint: PlanFingerprint) -> None:
    """Write the plan's record whole and durably (app/runtime/store), so a crash leaves one
    whole record."""
    path = _plan_path(checkpoint)
    record = {
        "digest": fingerprint.digest,
        "recorded_by": __version__,
        "document": fingerprint.document,
    }
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    try:
        store_at(path).write(path, text)
    except StateError as exc:
        raise StateError(
            f"the plan cannot be recorded in checkpoint {checkpoint}: {exc}; give a writable"
            " --checkpoint"
        ) from exc


def judge_checkpoint(checkpoint: str | Path, fingerprint: PlanFingerprint) -> CheckpointVerdict:
    """What ``tidemark run`` would do with ``checkpoint`` for this plan; writes nothing."""
    if not _has_state(checkpoint):
        # Nothing ran here yet (a run that stopped before its queries started may have
        # recorded a plan): whatever plan comes is the checkpoint's first.
        return CheckpointVerdict(checkpoint, "new", fingerprint)
    record = read_recorded_plan(checkpoint)
    if record is None:
        return CheckpointVerdict(checkpoint, "adopted", fingerprint)
    recorded_by = str(record.get("recorded_by")) if record.get("recorded_by") else None
    if record.get("digest") == fingerprint.digest:
        return CheckpointVerdict(checkpoint, "same", fingerprint, recorded_by=recorded_by)
    comparison = compare_plans(record["document"], fingerprint.document)
    return CheckpointVerdict(
        checkpoint,
        "changed" if comparison.compatible else "refused",
        fingerprint,
        comparison,
        recorded_by,
    )


def guard_checkpoint(checkpoint: str | Path, fingerprint: PlanFingerprint) -> CheckpointVerdict:
    """Judge ``checkpoint`` (the caller holds its lock), then refuse with a CheckpointError
    that lists the changes and the options, or record the plan where the verdict says so."""
    verdict = judge_checkpoint(checkpoint, fingerprint)
    if verdict.refused:
        assert verdict.comparison is not None
        log.error(
            "checkpoint.plan.refused",
            checkpoint=str(checkpoint),
            changes=[str(c) for c in verdict.comparison.refused],
        )
        raise CheckpointError(verdict.text().rstrip("\n"))
    if verdict.records:
        record_plan(checkpoint, fingerprint)
    if verdict.verdict == "adopted":
        log.warning(
            "checkpoint.plan.adopted",
            checkpoint=str(checkpoint),
            digest=fingerprint.digest,
            reason="the checkpoint was made before plans were recorded: accepted once as it is",
        )
    elif verdict.verdict == "changed":
        assert verdict.comparison is not None
        log.info(
            "checkpoint.plan.changed",
            checkpoint=str(checkpoint),
            digest=fingerprint.digest,
            changed=[str(c) for c in verdict.comparison.accepted],
            kept=list(verdict.comparison.kept),
        )
    else:
        log.info(
            "checkpoint.plan.recorded" if verdict.verdict == "new" else "checkpoint.plan.same",
            checkpoint=str(checkpoint),
            digest=fingerprint.digest,
        )
    return verdict
