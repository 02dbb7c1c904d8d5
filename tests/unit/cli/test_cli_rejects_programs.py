"""A broken program fails with file:line:column and a clear message before Spark starts (L7)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TIDEMARK = [sys.executable, "-m", "app.cli"]

CASES = {
    "syntax error": (
        "CREATE TABLE t (\n  ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR\n)"
        " WITH ('topic' = 'x');\nCREATE VIEW v AS SELEC ts FROM t;\n",
        ":4:",
    ),
    "unknown column": (
        "CREATE TABLE t (\n  ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR\n)"
        " WITH ('topic' = 'x');\nCREATE VIEW v WITH ('topic' = 'y') AS SELECT price FROM t;\n",
        ":4:",
    ),
    "LATENESS on a nullable column": (
        "CREATE TABLE t (\n  ts TIMESTAMP LATENESS INTERVAL '1' HOUR\n) WITH ('topic' = 'x');\n",
        ":2:",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_run_rejects_a_broken_program_before_spark_starts_l7(name: str, tmp_path: Path) -> None:
    text, where = CASES[name]
    program = tmp_path / "broken.sql"
    program.write_text(text)
    # An unreachable broker: reaching it would mean compilation did not stop the run first.
    result = subprocess.run(
        [*TIDEMARK, "run", str(program), "--bootstrap-servers", "127.0.0.1:1",
         "--checkpoint", str(tmp_path / "ck"), "--metrics-port", "0"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 2, result.stderr
    first = result.stderr.strip().splitlines()[0]
    assert first.startswith(f"{program}{where}"), result.stderr
    assert "error:" in first
    assert "Traceback" not in result.stderr
    assert "the program was rejected" in result.stderr
    assert not (tmp_path / "ck").exists(), "Spark must not have started"


def test_run_names_a_missing_program_file(tmp_path: Path) -> None:
    result = subprocess.run(
        [*TIDEMARK, "run", str(tmp_path / "nope.sql"), "--metrics-port", "0"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 2
    assert "does not exist" in result.stderr
    assert "Traceback" not in result.stderr
