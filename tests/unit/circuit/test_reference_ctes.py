"""SPEC S18 in the reference evaluator: WITH queries and subqueries in FROM are local views.

A program written with them writes, step by step, the rows its twin with explicit LOCAL views
writes: the same records (keys, values, waterline headers), the same S14 waterlines and the
same state held by its output views. The steps are those of
test_reference_views_over_views.py (``ev`` with LATENESS 30 seconds, rows out of order) and
the paper's data set for NEXMark Q7 (test_reference_sql.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from circuit_builders import DATA_SET, at, paper_steps

from app.circuit.ir import Circuit
from app.circuit.reference import StepInput, StepResult, evaluate
from app.program.compile import compile_program

ROOT = Path(__file__).resolve().parents[3]

TABLE = """
CREATE TABLE ev (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    k  VARCHAR NOT NULL
) WITH ('topic' = 'ev');
"""

EXPLICIT = """
CREATE LOCAL VIEW per_minute AS
SELECT window_end AS minute_end, k, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, k
EMIT AFTER WATERMARK;

CREATE LOCAL VIEW busy_minutes AS SELECT minute_end, k, n FROM per_minute WHERE n >= 2;

CREATE VIEW busy WITH ('topic' = 'busy') AS SELECT minute_end, k, n FROM busy_minutes;

CREATE VIEW per_two WITH ('topic' = 'per_two') AS
SELECT window_end AS wend, k, SUM(n) AS total, COUNT(*) AS minutes
FROM TABLE(TUMBLE(TABLE per_minute, DESCRIPTOR(minute_end), INTERVAL '2' MINUTE))
GROUP BY window_end, k;
"""

INLINED = """
CREATE VIEW busy WITH ('topic' = 'busy') AS
WITH per_minute AS (
    SELECT window_end AS minute_end, k, COUNT(*) AS n
    FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
    GROUP BY window_start, window_end, k
)
SELECT minute_end, k, n FROM (SELECT minute_end, k, n FROM per_minute WHERE n >= 2) AS b;

CREATE VIEW per_two WITH ('topic' = 'per_two') AS
WITH per_minute AS (
    SELECT window_end AS minute_end, k, COUNT(*) AS n
    FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
    GROUP BY window_start, window_end, k
)
SELECT window_end AS wend, k, SUM(n) AS total, COUNT(*) AS minutes
FROM TABLE(TUMBLE(TABLE per_minute, DESCRIPTOR(minute_end), INTERVAL '2' MINUTE))
GROUP BY window_end, k;
"""


def ev(clock: str, k: str = "a") -> dict[str, Any]:
    return {"ts": at(clock), "k": k}


# w after each step: 8:00:50, 8:01:10, 8:01:40, 8:04:00.
STEPS = [
    StepInput({"ev": rows}, i * 60_000) for i, rows in enumerate([
        [ev("8:00:10"), ev("8:00:50"), ev("8:01:20")],
        [ev("8:00:55"), ev("8:01:40")],
        [ev("8:02:10", "b"), ev("8:01:59")],
        [ev("8:04:30")],
    ])
]


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=text)


def observed(results: list[StepResult], views: tuple[str, ...]) -> list[Any]:
    """What a consumer of the output views sees after each step."""
    return [
        ({v: [(r.key, r.value, r.waterline) for r in res.outputs[v]] for v in views},
         {v: res.view_waterlines[v] for v in views},
         {v: res.state_rows[v] for v in views},
         res.waterlines, res.dead_letters)
        for res in results
    ]


def test_s18_with_queries_write_the_rows_of_their_explicit_local_views_step_by_step() -> None:
    inlined = compile_sql(TABLE + INLINED)
    explicit = compile_sql(TABLE + EXPLICIT)
    assert [v.name for v in inlined.views] == [
        "busy.per_minute", "busy.b", "busy", "per_two.per_minute", "per_two"]
    mine = evaluate(inlined, STEPS)
    theirs = evaluate(explicit, STEPS)
    assert observed(mine, ("busy", "per_two")) == observed(theirs, ("busy", "per_two"))
    # The hand-written answers of test_reference_views_over_views.py: final rows only.
    assert [[r.value["n"] for r in res.outputs["busy"]] for res in mine] == [[], [3], [], [3]]
    assert [[(r.value["k"], r.value["total"]) for r in res.outputs["per_two"]]
            for res in mine] == [[], [("a", 3)], [], [("a", 3), ("b", 1)]]
    # Each generated aggregate holds its own groups, as a local view does.
    assert [res.state_rows["busy.per_minute"] for res in mine] == [
        res.state_rows["per_minute"] for res in theirs]


BID = """
CREATE TABLE bid (
    bidtime TIMESTAMP NOT NULL LATENESS INTERVAL '10' MINUTE,
    price   DECIMAL(10, 2) NOT NULL,
    item    VARCHAR NOT NULL
) WITH ('topic' = 'bids');
"""


def _doc_example() -> str:
    doc = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
    section = doc[doc.index("### WITH and subqueries in FROM"):doc.index("## UNION ALL")]
    example = re.search(r"```sql\n(CREATE TABLE bid.*?)```", section, re.S)
    assert example is not None
    return example[1]


def test_s18_language_doc_with_example_writes_the_join_form_of_q7_step_by_step() -> None:
    """docs/language.md's example: the WITH form and the subquery form of Q7 write, in every
    step of the paper's data set, the rows of pipelines/nexmark_q7.sql's ``max_bid_join``
    (listing 3's top bids, each once its window is final: at 8:16 and 8:21)."""
    example = _doc_example()
    assert example.startswith(BID.lstrip())
    shipped = (ROOT / "pipelines" / "nexmark_q7.sql").read_text(encoding="utf-8")
    join_form = shipped[shipped.index("CREATE LOCAL VIEW max_price"):]
    expected = evaluate(compile_sql(BID + join_form), paper_steps())
    results = evaluate(compile_sql(example), paper_steps())
    for view in ("q7", "q7_subquery"):
        assert [[(r.key, r.value, r.waterline) for r in res.outputs[view]] for res in results] \
            == [[(r.key, r.value, r.waterline) for r in res.outputs["max_bid_join"]]
                for res in expected], view
    written = [(ptime, [r.value["item"] for r in res.outputs["q7"]])
               for (ptime, _), res in zip(DATA_SET, results, strict=True) if res.outputs["q7"]]
    assert written == [("8:16", ["D"]), ("8:21", ["F"])]
