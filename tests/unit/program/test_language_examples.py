"""Every SQL example of docs/language.md compiles and runs on the reference evaluator.

The language reference is what users copy from, so each of its ```sql blocks is taken as
written:

- a synopsis (square brackets or ``...``: the grammar of a statement) is not SQL to run;
- a block with CREATE TABLE is a whole program;
- any other block is a fragment of the program the text around it describes: it is compiled
  together with every table the document defined before it (the latest definition of a name),
  a bare SELECT as the query of an append view.

A program runs on the reference evaluator over three steps of rows generated from its
columns (app/demo_inputs.py), out of order within each table's lateness, then a punctuation
two days ahead on every table so windows of any size complete; a program with an output view
must write some output (one of tables only must compile and take its rows).
"""

from __future__ import annotations

import random
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.circuit.ir import Circuit, Table
from app.circuit.reference import Punctuation, Reference, StepInput
from app.demo_inputs import TableInputs
from app.program.compile import compile_text

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "language.md"
START_MS = 1_795_000_000_000  # 2026-11-17, a round hour
STEP_MS = 20 * 60_000
DAY_MS = 86_400_000


@dataclass(frozen=True)
class Example:
    line: int
    text: str

    @property
    def is_synopsis(self) -> bool:
        return "[" in self.text or "..." in self.text

    @property
    def is_program(self) -> bool:
        return re.search(r"\bCREATE\s+TABLE\b", self.text, re.I) is not None


def _examples() -> list[Example]:
    found, lines = [], DOC.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sql":
            start, body = i + 1, []
            i += 1
            while lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            found.append(Example(start, textwrap.dedent("\n".join(body)).strip()))
        i += 1
    return found


def _statements(text: str) -> list[str]:
    """The statements of a program text (split at semicolons outside string literals)."""
    out, current, quoted = [], [], False
    for ch in text:
        if ch == "'":
            quoted = not quoted
        if ch == ";" and not quoted:
            out.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    tail = "".join(current).strip()
    return [s for s in [*out, tail] if s]


def _table_name(statement: str) -> str | None:
    match = re.match(r"CREATE\s+TABLE\s+(\w+)", statement, re.I)
    return match.group(1).lower() if match else None


def _cases() -> list[tuple[Example, str]]:
    """Each runnable example and the program text it runs as."""
    tables: dict[str, str] = {}
    cases = []
    for n, example in enumerate(_examples()):
        if example.is_synopsis:
            continue
        if example.is_program:
            for statement in _statements(example.text):
                name = _table_name(statement)
                if name is not None:
                    tables[name] = statement
            cases.append((example, example.text))
            continue
        body = example.text
        if re.match(r"SELECT\b", body, re.I):
            body = (f"CREATE VIEW example_{n} WITH ('topic' = 'example-{n}', "
                    f"'format' = 'append') AS\n{body.rstrip(';')};")
        context = "".join(f"{statement};\n" for statement in tables.values())
        cases.append((example, context + body))
    return cases


def _with_metadata(table: Table, inputs: TableInputs, row: dict[str, Any], clock: int,
                   rng: random.Random) -> dict[str, Any]:
    """The row as the source decodes it: Kafka metadata columns read from the record."""
    for column in table.columns:
        if column.metadata == "timestamp":
            row[column.name] = clock - rng.randrange(1000)
        elif column.metadata is not None:
            row[column.name] = inputs.value(column, clock)
    return row


def _run(circuit: Circuit) -> int:
    rng = random.Random(7)
    inputs = {t.name: TableInputs(t, rng, late_fraction=0.1) for t in circuit.tables}
    reference = Reference(circuit)
    written = 0
    for step in range(3):
        clock = START_MS + step * STEP_MS
        rows = {
            t.name: [_with_metadata(t, inputs[t.name], inputs[t.name].row(clock + i * 1000,
                                                                          rng.random() < 0.1),
                                    clock + i * 1000, rng)
                     for i in range(12)]
            for t in circuit.tables
        }
        result = reference.step(StepInput(rows=rows, batch_time_ms=clock))
        written += sum(len(records) for records in result.outputs.values())
    ahead = START_MS + 2 * DAY_MS
    result = reference.step(StepInput(
        rows={}, batch_time_ms=ahead,
        punctuations={t.name: [Punctuation(ahead)] for t in circuit.tables if t.lateness}))
    return written + sum(len(records) for records in result.outputs.values())


CASES = _cases()


def test_the_document_has_examples_of_every_section() -> None:
    assert len(CASES) >= 10


@pytest.mark.parametrize(("example", "program"), CASES,
                         ids=[f"line{example.line}" for example, _ in CASES])
def test_language_example_compiles_and_runs(example: Example, program: str) -> None:
    circuit = compile_text(f"docs/language.md:{example.line}", program)
    written = _run(circuit)
    if any(v.output is not None for v in circuit.views):
        assert written > 0, "the example wrote nothing over generated input"
