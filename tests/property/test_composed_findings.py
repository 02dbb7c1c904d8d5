"""Programs the composed differential's long run found Spark and the reference evaluator
disagreeing on, kept as they were drawn (SPEC S18, S19; docs/differential.md).

Seed 3: two cascades over one output aggregate, in one Spark query (ADR 0014): the aggregate
is computed once per plan, three times here. ``s12v2`` windows ``s12v0``'s window end in 4 s
and ``s12v1`` hops over it; in the last step the table's waterline passes every window at
once, ``s12v0`` writes [14, 20) and both readers close the windows it completes. In the drawn run
``s12v2`` lost [20, 24) twice with Spark's exchange reuse on (the whole seed, and this stack
alone as the generator drew it) and kept it with reuse off, as it does here: with reuse, a
copy of ``s12v0``'s aggregation read another copy's shuffle and evicted a step late, after
``s12v2`` had taken that step's watermark as its bound for late rows (ADR 0020). Written out
as below, the stack has kept the window with reuse on too in three runs, so this test holds
the rows and their timing (no repeated step), not the reuse setting itself. Times are seconds
after 1700000000 s; the program and rows are written out as drawn, so a change to the
generator keeps them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from differential_cases import BASE_MS, S, Step
from differential_composed import Col, Composed, Rel, Stack, ViewDraw
from test_spark_vs_reference_composed import compare, run_composed, spark_records

pytestmark = pytest.mark.slow  # ~3 min


def _at(second: int) -> int:
    return BASE_MS + second * S


def _view(name: str, source: str, sql: str, cols: tuple[Col, ...]) -> ViewDraw:
    return ViewDraw(name, "aggregate", (source,), sql, True, Rel(name, cols, gated=True))


#: Seed 3's stack as the generator drew it then, and its rows: (partition, ts s, k, v).
SEED_3 = Stack([
    _view("s12v0", "ta", """\
SELECT window_end AS we120, MAX(v) AS a120_0, COUNT(v) AS a120_1, SUM(v) AS a120_2
FROM TABLE(TUMBLE(TABLE ta, DESCRIPTOR(ts), INTERVAL '6' SECOND, INTERVAL '4' SECOND))
WHERE v <= 1
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;""", (Col("we120", "time"), Col("a120_0", "val"), Col("a120_1", "val"),
                           Col("a120_2", "val"))),
    _view("s12v1", "s12v0", """\
SELECT window_start AS ws121, window_end AS we121, MAX(a120_1) AS a121_0
FROM TABLE(HOP(TABLE s12v0, DESCRIPTOR(we120), INTERVAL '3' SECOND, INTERVAL '9' SECOND))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;""", (Col("ws121", "time"), Col("we121", "time"), Col("a121_0", "val"))),
    _view("s12v2", "s12v0", """\
SELECT window_start AS ws122, COUNT(a120_1) AS a122_0, SUM(a120_1) AS a122_1
FROM TABLE(TUMBLE(TABLE s12v0, DESCRIPTOR(we120), INTERVAL '4' SECOND))
WHERE a120_1 <> 0
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;""", (Col("ws122", "time"), Col("a122_0", "val"), Col("a122_1", "val"))),
])
SEED_3_ROWS = [
    [(1, 9, "a", 2), (0, 10, "a", 6), (0, 8, "c", 7), (1, 10, "c", 9), (1, 9, "b", 6)],
    [(0, 7, "a", 5), (1, 13, "b", 4), (1, 13, "a", 1), (1, 12, "b", 0), (1, 6, "a", 9),
     (0, 12, "c", 6), (1, 13, "a", 9)],
    [(0, 15, "b", 5), (0, 10, "c", 5), (0, 16, "c", 0), (1, 17, "a", 7), (0, 15, "a", 2),
     (0, 15, "c", 2), (0, 16, "a", 3)],
    [(1, 13, "a", 5), (0, 20, "a", 4), (0, 20, "b", 5), (0, 20, "a", 5), (1, 15, "c", 7),
     (0, 14, "a", 7)],
]


#: The other table's rows: it has no view here, but its own query ran beside ta's in Spark,
#: as when the program was drawn.
SEED_3_TB_ROWS = [
    [(0, 11, "c", 1), (0, 11, "c", 5), (0, 9, "a", 3), (1, 9, "c", 0), (1, 10, "b", 9),
     (1, 9, "a", 3), (1, 11, "c", 8), (1, 10, "c", 4)],
    [(0, 16, "a", 1), (1, 17, "b", 3), (1, 15, "a", 3), (0, 17, "a", 9), (0, 17, "c", 1),
     (1, 6, "b", 3), (0, 16, "c", 7), (0, 17, "a", 9)],
    [(0, 13, "a", 6), (0, 15, "c", 4), (1, 14, "b", 3), (0, 21, "b", 6)],
    [(0, 25, "c", 6), (0, 25, "b", 1), (0, 18, "b", 5), (0, 25, "c", 8), (1, 16, "a", 1),
     (1, 25, "b", 1)],
]


def _records(rows: list[tuple[int, int, str, int]]) -> list[tuple[int, str, Any]]:
    return [(p, "row", {"ts": _at(ts), "k": k, "v": v}) for p, ts, k, v in rows]


def test_s18_sibling_cascades_over_an_output_aggregate_lose_no_window(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    steps = [Step({"ta": _records(a), "tb": _records(b)})
             for a, b in zip(SEED_3_ROWS, SEED_3_TB_ROWS, strict=True)]
    for table in ("ta", "tb"):
        steps[-1].records[table].append((0, "punctuation", _at(621)))
    scenario = Composed(3, {"ta": 2, "tb": 2}, [SEED_3], steps)
    run = run_composed(scenario, kafka, unique_topic, tmp_path)
    found, _ = compare(run)
    assert found == {}
    written = {view: sorted((v for _, v in spark_records(run, view)), key=repr)
               for view in ("s12v0", "s12v2")}
    assert written == {
        "s12v0": sorted([{"we120": _at(14), "a120_0": 1, "a120_1": 2, "a120_2": 1},
                         {"we120": _at(20), "a120_0": 0, "a120_1": 1, "a120_2": 0}], key=repr),
        "s12v2": sorted([{"ws122": _at(12), "a122_0": 1, "a122_1": 2},
                         {"ws122": _at(20), "a122_0": 1, "a122_1": 1}], key=repr),
    }
    assert run.flushes == 0  # every window in the step the reference writes it, or the next
