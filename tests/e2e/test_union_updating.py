"""A UNION ALL with an updating branch on Spark (SPEC S17, S18, S19), through the real broker,
step by step against hand-written changes and against the reference evaluator.

``per_usr`` counts each user's clicks (EMIT STREAM, an updating aggregate); ``scores`` unites
its changes with 10 points per click of user b, read from the table itself; ``totals`` sums
the union per user. The union is updating: it writes every branch's changes as its changelog
(an insert-only branch's rows as insertions), and ``totals`` takes each retraction back.
On Spark the union reads the count's changelog through a stage boundary and the aggregate
reads the union's (ADR 0023); each change carries ``_undo``, false on the table's rows.
A second program unites a per-minute count with a table's times: the union's time attribute
has the smaller waterline, and an EMIT AFTER WATERMARK aggregate over it writes final rows.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from table_steps import (
    clock_ms,
    frozen,
    internal_dead_letters,
    oracle_values,
    run_steps,
    watch_views,
)

from app.circuit.reference import StepResult, evaluate
from app.connectors.output_reader import OutputReader
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.compose import compose

# Slow (about 2 minutes each on 2 cores): each union reads two relations through boundaries
# and the aggregate over it reads a third (an aggregate in a query of several tables moves
# on, ADR 0023), so every step runs three queries one after the other (about 20 s a step).
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROGRAM = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr VARCHAR NOT NULL
) WITH ('topic' = '{clicks}', 'dead_letter' = '{clicks_dlq}');

CREATE LOCAL VIEW per_usr AS
SELECT usr, COUNT(*) AS c FROM clicks GROUP BY usr EMIT STREAM;

CREATE VIEW scores WITH ('topic' = '{scores}') AS
SELECT usr, c AS points FROM per_usr
UNION ALL
SELECT usr, CAST(10 AS BIGINT) AS points FROM clicks WHERE usr = 'b';

CREATE VIEW totals WITH ('topic' = '{totals}', 'format' = 'changelog') AS
SELECT usr, SUM(points) AS total, COUNT(*) AS parts FROM scores GROUP BY usr;
"""

#: A change of a changelog: (undo, its row's values in column order).
Change = tuple[Any, ...]


def _click(clock: str, usr: str) -> dict[str, Any]:
    return {"ts": clock_ms(clock), "usr": usr}


def _oracle(results: list[StepResult], view: str,
            columns: tuple[str, ...]) -> list[Counter[Change]]:
    return [Counter((r.value["undo"], *(r.value[c] for c in columns))
                    for r in result.outputs[view] if r.value is not None)
            for result in results]


def test_s17_s18_a_group_by_over_a_union_of_an_emit_stream_count_and_a_table(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """Each step's changes, by hand (S17: the union passes every branch's changes on; S18:
    the aggregate over it takes each retraction back):

        step  clicks               per_usr changes        scores changes
        1     a :10, a :20, b :30  +a 2, +b 1             +a 2, +b 1, +b 10
        2     a :50, b :55         -a 2 +a 3, -b 1 +b 2   -a 2 +a 3, -b 1 +b 2, +b 10
        3     c 8:01:00            +c 1                   +c 1

        step  totals changes (usr, total, parts)
        1     +(a 2 1), +(b 11 2)
        2     -(a 2 1) +(a 3 1), -(b 11 2) +(b 22 3)
        3     +(c 1 1)
    """
    names = ("clicks", "clicks_dlq", "scores", "totals")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["clicks"], partitions=2)
    program = tmp_path / "scores.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    assert circuit.updating("scores")
    composed = compose(circuit)
    assert composed.refused == ()
    assert {"per_usr", "scores"} <= composed.boundaries
    steps: list[dict[str, list[Any]]] = [
        {"clicks": [_click("8:00:10", "a"), _click("8:00:20", "a"), _click("8:00:30", "b")]},
        {"clicks": [_click("8:00:50", "a"), _click("8:00:55", "b")]},
        {"clicks": [_click("8:01:00", "c")]},
    ]
    columns = {"scores": ("usr", "points"), "totals": ("usr", "total", "parts")}
    readers = {}
    for view in columns:
        output = circuit.view(view).output
        assert output is not None and output.format == "changelog"
        readers[view] = OutputReader(view, output)
    per_step: dict[str, list[Counter[Change]]] = {view: [] for view in columns}
    seen: dict[str, int] = dict.fromkeys(columns, 0)

    def after_step() -> None:
        for view, wanted in columns.items():
            records = [readers[view].value(m.value())
                       for m in read_topic(kafka.conf(), topics[view])]
            new = records[seen[view]:]
            seen[view] = len(records)
            per_step[view].append(Counter((r["undo"], *(r[c] for c in wanted)) for r in new))

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)
    assert per_step["scores"] == [
        Counter([(False, "a", 2), (False, "b", 1), (False, "b", 10)]),
        Counter([(True, "a", 2), (False, "a", 3), (True, "b", 1), (False, "b", 2),
                 (False, "b", 10)]),
        Counter([(False, "c", 1)]),
    ]
    assert per_step["totals"] == [
        Counter([(False, "a", 2, 1), (False, "b", 11, 2)]),
        Counter([(True, "a", 2, 1), (False, "a", 3, 1), (True, "b", 11, 2),
                 (False, "b", 22, 3)]),
        Counter([(False, "c", 1, 1)]),
    ]
    assert read_topic(kafka.conf(), topics["clicks_dlq"]) == []
    for boundary in ("per_usr", "scores"):
        assert internal_dead_letters(kafka, tmp_path / "ck", boundary) == []
    # The reference evaluator, in one query, writes the same changes in the same steps.
    oracle = evaluate(circuit, inputs)
    for view, wanted in columns.items():
        assert _oracle(oracle, view, wanted) == per_step[view], view


MINUTES = """
CREATE TABLE ev (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    k  VARCHAR NOT NULL
) WITH ('topic' = '{ev}', 'dead_letter' = '{ev_dlq}');

CREATE TABLE marks (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    k  VARCHAR NOT NULL
) WITH ('topic' = '{marks}', 'dead_letter' = '{marks_dlq}');

CREATE LOCAL VIEW per_min AS
SELECT window_end AS minute_end, k, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, k EMIT STREAM;

CREATE LOCAL VIEW u AS
SELECT minute_end, k, n FROM per_min
UNION ALL
SELECT ts AS minute_end, k, CAST(1 AS BIGINT) AS n FROM marks;

CREATE VIEW final_ WITH ('topic' = '{final_}', 'format' = 'append') AS
SELECT minute_end, SUM(n) AS total, COUNT(*) AS parts FROM u
GROUP BY minute_end EMIT AFTER WATERMARK;
"""


def test_s10_s17_s18_s19_after_watermark_over_an_updating_union_writes_final_rows_once(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """``per_min``'s ``minute_end`` (a GROUP BY key of the updating count) united with
    ``marks.ts`` is a time attribute with the smaller waterline (S10, S17); ``final_`` sums
    the union per minute and writes each minute once, final (S18), through two boundaries
    whose waterlines follow the punctuations (S19: possibly steps later than in one query,
    never earlier, with the same rows).

        step  ev                    marks      per_min changes
        1     a :10, a :20, b :30   a 8:01:00  +(8:01 a 2), +(8:01 b 1)
        2     a 8:01:05, b :50      -          -(8:01 b 1) +(8:01 b 2), +(8:02 a 1)
        3     a 8:01:40             a 8:01:45  -(8:02 a 1) +(8:02 a 2)
        4-6   bound 8:05            bound 8:05 -

    Rows of ``final_`` (minute_end, total, parts): (8:01, 5, 3) from a 2, b 2 and the mark at
    8:01:00; (8:01:45, 1, 1), the mark; (8:02, 2, 1), a's count.
    """
    names = ("ev", "ev_dlq", "marks", "marks_dlq", "final_")
    topics = {name: unique_topic(name) for name in names}
    for table in ("ev", "marks"):
        kafka.create_topic(topics[table], partitions=2)
    program = tmp_path / "final.sql"
    program.write_text(MINUTES.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    assert compose(circuit).refused == ()

    def at(clock: str, k: str = "a") -> dict[str, Any]:
        return {"ts": clock_ms(clock), "k": k}

    bound = ("bound", clock_ms("8:05"))
    steps: list[dict[str, list[Any]]] = [
        {"ev": [at("8:00:10"), at("8:00:20"), at("8:00:30", "b")], "marks": [at("8:01:00")]},
        {"ev": [at("8:01:05"), at("8:00:50", "b")]},
        {"ev": [at("8:01:40")], "marks": [at("8:01:45")]},
        {"ev": [bound], "marks": [bound]},
        {"ev": [bound], "marks": [bound]},
        {"ev": [bound], "marks": [bound]},
    ]
    seen, after_step = watch_views(kafka, circuit, ["final_"], topics)
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)
    expected = Counter([
        frozen({"minute_end": clock_ms("8:01"), "total": 5, "parts": 3}),
        frozen({"minute_end": clock_ms("8:01:45"), "total": 1, "parts": 1}),
        frozen({"minute_end": clock_ms("8:02"), "total": 2, "parts": 1}),
    ])
    assert sum(seen["final_"], Counter()) == expected
    oracle = evaluate(circuit, inputs)
    assert oracle_values(oracle, "final_") == expected
    # Never earlier than the reference evaluator writes a minute (S19).
    for step in range(len(steps)):
        written = sum(seen["final_"][:step + 1], Counter())
        assert not written - oracle_values(oracle[:step + 1], "final_"), step
    for table in ("ev_dlq", "marks_dlq"):
        assert read_topic(kafka.conf(), topics[table]) == []
