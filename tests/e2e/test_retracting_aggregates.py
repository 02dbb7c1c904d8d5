"""An aggregate over an updating view on Spark (SPEC S18, S19, ADR 0023): the count of
counts, through the real broker, step by step against hand-written rows and against the
reference evaluator.

``per_user`` counts clicks per user without EMIT AFTER WATERMARK, so its rows are updated;
``histogram`` counts the users per count. The planner writes ``per_user``'s changelog to an
internal topic; a second query reads it back, each row with its ``undo``, and runs
``histogram`` on the Python state operator, a retraction going in with weight -1.
``crowded``, a filter of ``histogram`` (updating again), reads its changelog through a second
boundary, in a third query.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from table_steps import clock_ms, internal_dead_letters, run_steps

from app.circuit.reference import StepResult, evaluate
from app.connectors.output_reader import OutputReader
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.compose import compose
from app.runtime.planner.physical import physical_plan

pytestmark = pytest.mark.e2e

COUNT_OF_COUNTS = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr VARCHAR NOT NULL
) WITH ('topic' = '{clicks}', 'dead_letter' = '{clicks_dlq}');

CREATE LOCAL VIEW per_user AS
SELECT usr, COUNT(*) AS c FROM clicks GROUP BY usr;

CREATE VIEW histogram WITH ('topic' = '{histogram}') AS
SELECT c, COUNT(*) AS users FROM per_user GROUP BY c;

CREATE VIEW crowded WITH ('topic' = '{crowded}') AS
SELECT c, users FROM histogram WHERE users >= 2;
"""


def _click(clock: str, usr: str) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "usr": usr}


def _histogram(results: list[StepResult]) -> list[list[tuple[int, int | None]]]:
    return [[(r.key["c"], None if r.value is None else r.value["users"])
             for r in result.outputs["histogram"] if r.key is not None]
            for result in results]


def _crowded(results: list[StepResult]) -> list[list[tuple[bool, int, int]]]:
    return [[(r.value["undo"], r.value["c"], r.value["users"])
             for r in result.outputs["crowded"] if r.value is not None]
            for result in results]


@pytest.mark.slow
def test_s18_s19_count_of_counts_takes_retractions_back_on_spark(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """The users' counts after each step, and what each view writes:

        step  clicks        per_user        histogram upserts         crowded changes
        1     a, b, c, c    a 1, b 1, c 2   (1, 2), (2, 1)            +(1, 2)
        2     a, b, b, c    a 2, b 3, c 3   1 deleted, (3, 2)         -(1, 2), +(3, 2)

    In step 2, count 2 loses c and gains a: its row is unchanged, so nothing is written.
    Spark writes, in the same steps, what the reference evaluator writes in one query.
    """
    names = ("clicks", "clicks_dlq", "histogram", "crowded")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["clicks"], partitions=2)
    program = tmp_path / "count_of_counts.sql"
    program.write_text(COUNT_OF_COUNTS.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    composed = compose(circuit)
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"per_user", "histogram"})
    placed = physical_plan(composed.circuit)
    assert placed.placement("histogram").placement == "state_operator"
    steps: list[dict[str, list[Any]]] = [
        {"clicks": [_click("8:00:01", "a"), _click("8:00:02", "b"), _click("8:00:03", "c"),
                    _click("8:00:04", "c")]},
        {"clicks": [_click("8:00:05", "a"), _click("8:00:06", "b"), _click("8:00:07", "b"),
                    _click("8:00:08", "c")]},
    ]
    histogram = circuit.view("histogram").output
    crowded = circuit.view("crowded").output
    assert histogram is not None and crowded is not None
    histogram_reader = OutputReader("histogram", histogram)
    crowded_reader = OutputReader("crowded", crowded)
    upserts: list[list[tuple[int, int | None]]] = []
    changes: list[list[tuple[bool, int, int]]] = []

    def after_step() -> None:
        written = [(histogram_reader.key(m.key())["c"],
                    None if m.value() is None else histogram_reader.value(m.value())["users"])
                   for m in read_topic(kafka.conf(), topics["histogram"])]
        upserts.append(written[sum(map(len, upserts)):])
        records = [crowded_reader.value(m.value())
                   for m in read_topic(kafka.conf(), topics["crowded"])]
        rows = [(r["undo"], r["c"], r["users"]) for r in records]
        changes.append(rows[sum(map(len, changes)):])

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)
    assert [sorted(step) for step in upserts] == [[(1, 2), (2, 1)], [(1, None), (3, 2)]]
    assert [sorted(step) for step in changes] == [
        [(False, 1, 2)], [(False, 3, 2), (True, 1, 2)]]
    assert read_topic(kafka.conf(), topics["clicks_dlq"]) == []
    for relation in ("per_user", "histogram"):
        assert internal_dead_letters(kafka, tmp_path / "ck", relation) == []
    # The reference evaluator, in one query, writes the same records in the same steps.
    oracle = evaluate(circuit, inputs)
    assert [sorted(step) for step in _histogram(oracle)] == [sorted(s) for s in upserts]
    assert [sorted(step) for step in _crowded(oracle)] == [sorted(s) for s in changes]
