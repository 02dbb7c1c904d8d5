"""``tidemark explain`` and ``tidemark run`` reach one verdict on every program (ADR 0023):
the shipped pipelines, the rejected fixtures and the composed ones. Both ask
app/runtime/planner/compose.py; this runs each program through explain's command and through the
service's planner (no broker, no Spark: planning happens before either is touched) and
requires the same refusals, and for the composed fixtures, none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.config import Settings
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.service import Service

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "programs"
PROGRAMS = sorted(
    [*(ROOT / "pipelines").glob("*.sql"), *(FIXTURES / "rejected").glob("*.sql"),
     *(FIXTURES / "composed").glob("*.sql")]
)


def _planned(program: Path, checkpoint: Path) -> tuple[str, ...] | str:
    """What run's planner refuses (its compile error's text when it does not compile)."""
    try:
        circuit = compile_program(program)
    except ProgramError as exc:
        return str(exc)
    service = Service(circuit, Settings(program=program, checkpoint=checkpoint))
    return tuple(str(problem) for problem in service.composed.refused)


def _explained(program: Path) -> tuple[str, ...] | str:
    result = CliRunner().invoke(app, ["explain", "--format", "json", str(program)])
    if result.exit_code != 0:
        return result.output
    # The JSON alone: a program's warnings (an unbounded join's, say) go to stderr.
    return tuple(json.loads(result.stdout)["refused_by_run"])


@pytest.mark.parametrize("program", PROGRAMS, ids=[f"{p.parent.name}/{p.stem}" for p in PROGRAMS])
def test_explain_and_run_refuse_the_same(program: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    planned = _planned(program, tmp_path / "ck")
    explained = _explained(program)
    if isinstance(planned, str):  # refused by the compiler: explain prints the same error
        assert isinstance(explained, str) and planned.splitlines()[0] in explained
        return
    assert explained == planned
    if program.parent.name == "composed" and program.stem != "topn_decimal":
        assert planned == (), program.name
