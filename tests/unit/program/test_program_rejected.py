"""SPEC L7: every golden rejected program fails with its message at its line and column.

Each file under tests/fixtures/programs/rejected/ starts with
``-- expect: <line>:<column> <message substring>`` and ``-- fix: <fix substring>``: every
refusal says how to fix the program.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.errors import ProgramError
from app.program.compile import compile_program

REJECTED = Path(__file__).resolve().parents[2] / "fixtures" / "programs" / "rejected"
FILES = sorted(REJECTED.glob("*.sql"))


def _expectation(path: Path) -> tuple[int, int, str, str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    match = re.fullmatch(r"-- expect: (\d+):(\d+) (.+)", lines[0])
    assert match, f"{path.name}: first line must be '-- expect: L:C message'"
    fix_match = re.fullmatch(r"-- fix: (.+)", lines[1])
    assert fix_match, f"{path.name}: second line must be '-- fix: text'"
    return int(match[1]), int(match[2]), match[3], fix_match[1]


def test_l7_there_are_at_least_25_rejected_programs() -> None:
    assert len(FILES) >= 25


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_l7_rejected_program_names_position_message_and_fix(path: Path) -> None:
    line, column, message, fix = _expectation(path)
    with pytest.raises(ProgramError) as info:
        compile_program(path)
    first = info.value.diagnostics[0]
    assert first.severity == "error"
    assert first.position.file == str(path)
    assert (first.position.line, first.position.column) == (line, column), str(first)
    assert message in first.message
    assert first.fix is not None and fix in first.fix
    assert f"{path}:{line}:{column}: error:" in str(info.value)


def test_l7_errors_of_several_statements_are_reported_together() -> None:
    text = (
        "CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR, x INT)\n"
        "  WITH ('topic' = 't');\n"
        "CREATE VIEW a AS SELECT nope FROM t;\n"
        "CREATE VIEW b AS SELECT x FROM missing;\n"
    )
    with pytest.raises(ProgramError) as info:
        compile_program("p.sql", text)
    found = [(d.position.line, d.message) for d in info.value.diagnostics]
    assert found == [(3, "unknown column nope"), (4, "unknown table or view missing")]


def test_l7_missing_file_is_a_program_error() -> None:
    with pytest.raises(ProgramError, match="cannot read the program"):
        compile_program("does/not/exist.sql")


def test_l7_a_failed_table_does_not_cascade_into_its_views() -> None:
    text = (
        "CREATE TABLE t (ts TIMESTAMP LATENESS INTERVAL '1' HOUR) WITH ('topic' = 't');\n"
        "CREATE VIEW a AS SELECT ts FROM t;\n"
    )
    with pytest.raises(ProgramError) as info:
        compile_program("p.sql", text)
    assert [d.message for d in info.value.diagnostics] == ["LATENESS on nullable column t.ts"]
