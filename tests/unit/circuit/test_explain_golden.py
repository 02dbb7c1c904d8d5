"""STYLE habit 9: docs/explain/<program>.txt is what ``tidemark explain`` prints for every
example program, and docs/explain/<program>.physical.txt what ``tidemark explain --physical``
prints, regenerated here so the committed text never goes stale (SPEC L7, S3, S11).

Run with TIDEMARK_REGENERATE=1 to rewrite the files after an intended change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.circuit.explain import explain_json, explain_text
from app.program.compile import compile_program

ROOT = Path(__file__).resolve().parents[3]
PIPELINES = sorted((ROOT / "pipelines").glob("*.sql"))
EXPLAIN_DIR = ROOT / "docs" / "explain"


@pytest.mark.parametrize("program", PIPELINES, ids=[p.stem for p in PIPELINES])
def test_explain_text_matches_committed_docs(program: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    circuit = compile_program(Path("pipelines") / program.name)
    text = explain_text(circuit)
    golden = EXPLAIN_DIR / f"{program.stem}.txt"
    if os.environ.get("TIDEMARK_REGENERATE") == "1":
        EXPLAIN_DIR.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert golden.exists(), f"{golden} is missing: rerun with TIDEMARK_REGENERATE=1"
    assert golden.read_text(encoding="utf-8") == text, (
        f"{golden.relative_to(ROOT)} is stale: rerun with TIDEMARK_REGENERATE=1 and commit it")


@pytest.mark.parametrize("program", PIPELINES, ids=[p.stem for p in PIPELINES])
def test_explain_physical_matches_committed_docs(program: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every example program's physical plan names its queries, where each view is computed
    and what frees its state; a program the Spark runtime refuses says why."""
    from app.runtime.planner.compose import compose, stage_text
    from app.runtime.planner.physical import explain_physical_text

    monkeypatch.chdir(ROOT)
    circuit = compile_program(Path("pipelines") / program.name)
    composed = compose(circuit)
    refused = tuple(str(problem) for problem in composed.refused)
    text = explain_physical_text(composed.physical, refused) + stage_text(composed)
    golden = EXPLAIN_DIR / f"{program.stem}.physical.txt"
    if os.environ.get("TIDEMARK_REGENERATE") == "1":
        golden.write_text(text, encoding="utf-8")
    assert golden.exists(), f"{golden} is missing: rerun with TIDEMARK_REGENERATE=1"
    assert golden.read_text(encoding="utf-8") == text, (
        f"{golden.relative_to(ROOT)} is stale: rerun with TIDEMARK_REGENERATE=1 and commit it")
    for view in circuit.views:
        assert f"view {view.name} <- " in text


@pytest.mark.parametrize("program", PIPELINES, ids=[p.stem for p in PIPELINES])
def test_explain_json_is_json_and_names_every_view(program: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    circuit = compile_program(Path("pipelines") / program.name)
    data = json.loads(json.dumps(explain_json(circuit)))
    assert [v["name"] for v in data["views"]] == [v.name for v in circuit.views]
    assert [t["name"] for t in data["tables"]] == [t.name for t in circuit.tables]


def test_s11_explain_says_when_window_state_is_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    text = explain_text(compile_program("pipelines/nexmark_q7.sql"))
    assert "state:        window: a group is freed once w(bid.bidtime) >= wend" in text
    assert "w(bid.bidtime)(t) = max(w(t-1), max bidtime of step t - 4 minutes)" in text
    assert "dead letters: nexmark.bids.dlq" in text


def test_l7_explain_lists_unbounded_state_warning() -> None:
    text = explain_text(compile_program("p.sql", (
        "CREATE TABLE t (k BIGINT NOT NULL, ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND)"
        " WITH ('topic' = 't');\n"
        "CREATE VIEW c WITH ('topic' = 'c') AS SELECT k, COUNT(*) AS n FROM t GROUP BY k;\n")))
    assert "state:        unbounded" in text
    assert "warnings\n  p.sql:2:" in text
