"""Every branch's watermark node sees the table's probe rows (ADR 0001): Spark's watermark is
the minimum over all its ``EventTimeWatermark`` nodes, so a node below a view's WHERE or a
join's inferred ``isnotnull(key)`` would follow only the rows that pass them and hold every
window of the query back (S11, S17)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.program.compile import compile_program
from app.runtime.operators.query import plan_query
from app.runtime.planner.physical import physical_plan

PROGRAM = """
CREATE TABLE a (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND, k BIGINT, x INT)
    WITH ('topic' = 'a');
CREATE TABLE b (ts TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND, k BIGINT, x INT)
    WITH ('topic' = 'b');
CREATE LOCAL VIEW merged AS
SELECT ts, k FROM a WHERE x > 2 UNION ALL SELECT ts, k FROM b WHERE k = 7;
CREATE VIEW per_five WITH ('topic' = 'per_five') AS
SELECT window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE merged, DESCRIPTOR(ts), INTERVAL '5' SECOND))
GROUP BY window_end EMIT AFTER WATERMARK;
CREATE VIEW pairs WITH ('topic' = 'pairs') AS
SELECT l.ts, r.x FROM a AS l JOIN b AS r
    ON l.k = r.k AND r.ts BETWEEN l.ts AND l.ts + INTERVAL '1' SECOND
WHERE l.x < 100;
"""


def _children(node: Any) -> list[Any]:
    seq = node.children()
    return [seq.apply(i) for i in range(seq.size())]


def _filters_below(node: Any) -> list[tuple[str, set[str]]]:
    """(condition, the columns it reads) of each filter under ``node``."""
    found = []
    for child in _children(node):
        if child.nodeName() == "Filter":
            condition = child.condition()
            names = condition.references().toSeq()
            found.append((condition.sql(), {names.apply(i).name() for i in range(names.size())}))
        found += _filters_below(child)
    return found


def _watermark_nodes(node: Any) -> list[Any]:
    here = [node] if node.nodeName() == "EventTimeWatermark" else []
    return here + [w for c in _children(node) for w in _watermark_nodes(c)]


def test_no_filter_but_the_verdicts_runs_below_a_watermark_node(
    spark: Any, tmp_path: Path
) -> None:
    circuit = compile_program("p.sql", PROGRAM)
    physical = physical_plan(circuit)
    (query,) = physical.queries
    plan = plan_query(
        spark,
        circuit,
        query,
        {"bootstrap.servers": "localhost:1"},
        {t: str(tmp_path / t) for t in query.tables},
        1000,
    )
    session = plan.frame.sparkSession._jsparkSession
    analyzed = plan.frame._jdf.queryExecution().analyzed()
    optimized = session.sessionState().optimizer().execute(analyzed)
    nodes = _watermark_nodes(optimized)
    assert len(nodes) >= 4  # two union branches, two join sides
    for node in nodes:
        # The source's own verdicts (ok and probe rows pass) may run below it; no view's.
        filters = _filters_below(node)
        assert all(names == {"_kind"} for _, names in filters), filters
