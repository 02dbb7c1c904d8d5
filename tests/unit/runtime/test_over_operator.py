"""One slot's steps of Tidemark's OVER operator (app/runtime/operators/over_operator.py, ADR 0019),
by hand: a row once the waterline its probes give passes its time, with its frame's values;
the state document survives JSON between steps (as Spark stores it) with decimals, doubles
and running aggregates exact."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from app.circuit.ir import Over
from app.program.compile import compile_program
from app.runtime.operators.over_slots import OverOperatorSpec, step_slot

TABLE = """
CREATE TABLE t (
    ts    BIGINT NOT NULL LATENESS 1,
    item  VARCHAR NOT NULL,
    price DECIMAL(10, 2),
    score DOUBLE
) WITH ('topic' = 't');
"""


def _over(select: str) -> Over:
    circuit = compile_program("over.sql", text=TABLE + f"CREATE VIEW v AS SELECT {select};")
    over = circuit.view("v").over
    assert over is not None
    return over


def _row(item: str, t: int, offset: int, **vals: Any) -> dict[str, Any]:
    return {"side": "O", "k": json.dumps({"k0": item}), "t": t, "tbl": None, "pt": 0,
            "of": offset, "row": f"r{offset}", "vals": json.dumps(vals) if vals else None}


def _probe(top: int) -> dict[str, Any]:
    return {"side": "P", "k": None, "t": top, "tbl": "T", "pt": 0, "of": 0, "row": None,
            "vals": None}


def _steps(spec: OverOperatorSpec, steps: list[list[dict[str, Any]]]) -> list[list[Any]]:
    doc = None
    out = []
    for rows in steps:
        written, doc = step_slot(spec, doc, rows)
        doc = json.loads(json.dumps(doc))  # the state store's round trip
        out.append([(row, json.loads(res)) for row, res in written])
    return out


def test_range_frame_waits_for_the_waterline_and_gives_peers_equal_values() -> None:
    over = _over("ts, SUM(price) OVER (PARTITION BY item ORDER BY ts RANGE BETWEEN 10 "
                 "PRECEDING AND CURRENT ROW) AS s, MAX(score) OVER (PARTITION BY item "
                 "ORDER BY ts RANGE BETWEEN 10 PRECEDING AND CURRENT ROW) AS m FROM t")
    spec = OverOperatorSpec.of(over, 1)
    assert spec.arg_types == ("DECIMAL", "DOUBLE")
    assert _steps(spec, [
        [_row("a", 100, 1, a0="1.10", a1="0.1"), _row("a", 105, 2, a0="2.20", a1="0.2"),
         _probe(105)],
        # Another row at 105 (above w = 104: on time); 120 moves w to 119.
        [_row("a", 105, 3, a0="3.30", a1="0.3"), _row("a", 120, 4, a0="0.01"), _probe(120)],
        [_probe(200)],
    ]) == [
        [("r1", {"_over0": "1.10", "_over1": "0.1"})],
        [("r2", {"_over0": "6.60", "_over1": "0.3"}),
         ("r3", {"_over0": "6.60", "_over1": "0.3"})],
        # [110, 120]: only itself; MAX of no non-null score is NULL.
        [("r4", {"_over0": "0.01", "_over1": None})],
    ]


def test_unbounded_rows_frame_keeps_running_aggregates_across_steps() -> None:
    over = _over("ts, AVG(price) OVER (PARTITION BY item ORDER BY ts ROWS BETWEEN UNBOUNDED "
                 "PRECEDING AND CURRENT ROW) AS a, COUNT(*) OVER (PARTITION BY item ORDER BY "
                 "ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS n FROM t")
    spec = OverOperatorSpec.of(over, 0)
    results = _steps(spec, [
        [_row("a", 1, 1, a0="1.00"), _row("b", 1, 2, a0="5.00"), _probe(2)],
        [_row("a", 3, 3, a0="2.00"), _probe(4)],
    ])
    assert results == [
        [("r1", {"_over0": "1.000000", "_over1": 1}), ("r2", {"_over0": "5.000000", "_over1": 1})],
        [("r3", {"_over0": "1.500000", "_over1": 2})],
    ]
    assert Decimal(results[1][0][1]["_over0"]) == Decimal("1.5")


def test_rows_frame_frees_all_but_the_last_n_rows_and_empty_partitions() -> None:
    over = _over("ts, SUM(price) OVER (ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) "
                 "AS s FROM t")
    spec = OverOperatorSpec.of(over, 0)
    doc = None
    _, doc = step_slot(spec, doc, [_row("x", 1, 1, a0="1.00"), _row("x", 2, 2, a0="2.00"),
                                   _row("x", 3, 3, a0="4.00"), _probe(3)])
    (part,) = doc["parts"].values()
    # 1 and 2 written; 2 is the one a future frame reads; 3 waits (equal to w).
    assert [r[0] for r in part["written"]] == [2]
    assert [r[0] for r in part["waiting"]] == [3]
    assert doc["w"] == {"T": 3}


def _refused(views: str) -> tuple[str, ...]:
    from app.runtime.planner.physical import physical_plan
    from app.runtime.planner.support import refused_by_spark

    circuit = compile_program("over.sql", text=TABLE + TABLE.replace("TABLE t", "TABLE t2")
                              .replace("'t'", "'t2'") + views)
    return refused_by_spark(circuit, physical_plan(circuit))


def test_spark_runs_an_over_view_over_a_table_or_a_filtering_view() -> None:
    assert _refused("""
CREATE LOCAL VIEW cheap AS SELECT ts AS at, item FROM t WHERE price < 10;
CREATE VIEW v WITH ('topic' = 'v') AS
SELECT item, COUNT(*) OVER (PARTITION BY item ORDER BY at) AS n FROM cheap;
""") == ()


def test_spark_refuses_other_over_shapes_by_name() -> None:
    union = _refused("""
CREATE LOCAL VIEW both_ AS SELECT ts, item FROM t UNION ALL SELECT ts, item FROM t2;
CREATE VIEW v WITH ('topic' = 'v') AS
SELECT item, COUNT(*) OVER (ORDER BY ts) AS n FROM both_;
""")
    assert len(union) == 1 and "OVER aggregates over the view both_" in union[0]
    reader = _refused("""
CREATE LOCAL VIEW o AS SELECT ts, item, COUNT(*) OVER (ORDER BY ts) AS n FROM t;
CREATE VIEW v WITH ('topic' = 'v') AS SELECT item, n FROM o WHERE n > 1;
""")
    assert len(reader) == 1 and "reading the OVER view o" in reader[0]
