"""``tidemark explain PROGRAM --against CHECKPOINT``: the verdict ``tidemark run`` would reach
on a checkpoint (ADR 0015), its exit code 1 when run would refuse, and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli_errors import _tidemark

from app.program.compile import compile_program
from app.runtime.planner.checkpoint_plan import PLAN_NAME, guard_checkpoint
from app.runtime.planner.plan_fingerprint import plan_fingerprint

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


def _with_state(checkpoint: Path) -> Path:
    (checkpoint / "t" / "spark").mkdir(parents=True)
    return checkpoint


def _program(tmp_path: Path, hours: int, extra: str = "") -> Path:
    path = tmp_path / f"p{hours}{len(extra)}.sql"
    path.write_text(PROGRAM.format(hours=hours) + extra, encoding="utf-8")
    return path


def test_explain_against_says_what_run_would_do_and_writes_nothing(tmp_path: Path) -> None:
    checkpoint = _with_state(tmp_path / "checkpoint")
    guard_checkpoint(
        checkpoint, plan_fingerprint(compile_program("p.sql", PROGRAM.format(hours=1)))
    )
    recorded = (checkpoint / PLAN_NAME).read_bytes()

    refused = _tidemark("explain", str(_program(tmp_path, 2)), "--against", str(checkpoint))
    assert refused.returncode == 1, refused.stderr
    assert "view hourly: window TUMBLE 1 hour on ts -> TUMBLE 2 hours on ts" in refused.stdout

    compatible = _tidemark(
        "explain",
        str(_program(tmp_path, 1, FILTER)),
        "--against",
        str(checkpoint),
        "--format",
        "json",
    )
    assert compatible.returncode == 0, compatible.stderr
    data = json.loads(compatible.stdout)
    assert data["verdict"] == "changed"
    assert data["changes"] == [
        {
            "subject": "view f",
            "change": "added, stateless: it computes from the next step on",
            "compatible": True,
        }
    ]
    assert (checkpoint / PLAN_NAME).read_bytes() == recorded


def test_explain_against_a_new_checkpoint_says_run_records_the_plan(tmp_path: Path) -> None:
    result = _tidemark("explain", str(_program(tmp_path, 1)), "--against", str(tmp_path / "new"))
    assert result.returncode == 0, result.stderr
    assert "no state yet; tidemark run starts it and records this plan" in result.stdout
    assert not (tmp_path / "new").exists()
