"""The physical plan's passes (app/runtime/planner/physical.py), one rule at a time: queries per
connected part, each view's placement, the waterline that frees its state (S11), and each
query's step shape (ADRs 0005-0009)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from app.program.compile import compile_program
from app.runtime.planner.compose import compose
from app.runtime.planner.physical import (
    PASSES,
    PhysicalPlan,
    explain_physical_json,
    explain_physical_text,
    group_queries,
    physical_plan,
)

TABLES = """
CREATE TABLE t (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    k   BIGINT    NOT NULL,
    n   INT       NOT NULL,
    x   DOUBLE,
    dt  VARCHAR
) WITH ('topic' = 'in');
CREATE TABLE u (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    k   BIGINT    NOT NULL
) WITH ('topic' = 'in2');
"""

FILTER = (
    "CREATE VIEW f WITH ('topic' = 'f', 'format' = 'append') AS "
    "SELECT ts, k FROM t WHERE n > 5;\n"
)
NATIVE = (
    "CREATE VIEW w WITH ('topic' = 'w') AS SELECT window_start, window_end, k, COUNT(*) AS c "
    "FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) "
    "GROUP BY window_start, window_end, k EMIT AFTER WATERMARK;\n"
)
PYTHON_OPERATOR = (
    "CREATE VIEW s WITH ('topic' = 's') AS SELECT window_start, window_end, k, SUM(x) AS total "
    "FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) "
    "GROUP BY window_start, window_end, k;\n"
)
UNBOUNDED = "CREATE VIEW g WITH ('topic' = 'g') AS SELECT k, COUNT(*) AS c FROM u GROUP BY k;\n"
DECODED = (
    "CREATE LOCAL VIEW decoded AS SELECT CAST(dt AS TIMESTAMP) AS dt, n FROM t;\n"
    "LATENESS decoded.dt INTERVAL 1 HOUR;\n"
)


def _plan(views: str) -> PhysicalPlan:
    return physical_plan(compile_program("p.sql", TABLES + views))


def test_each_connected_part_of_the_circuit_is_one_query_holding_its_views() -> None:
    plan = _plan(FILTER + NATIVE + UNBOUNDED)
    assert [(q.name, q.tables) for q in plan.queries] == [
        ("tidemark-t", ("t",)),
        ("tidemark-u", ("u",)),
    ]
    assert [v.view for v in plan.query_of("t").views] == ["f", "w"]
    assert plan.query_of("g").name == "tidemark-u"


def test_a_table_no_view_reads_still_has_its_query_for_its_dead_letters() -> None:
    plan = _plan(FILTER)
    assert plan.query_of("u").views == ()
    assert (plan.query_of("u").shape, plan.query_of("u").batch) == ("step_sink", "reread")


def test_exact_after_watermark_aggregates_are_native_others_the_python_operator() -> None:
    plan = _plan(NATIVE + PYTHON_OPERATOR)
    assert plan.placement("w").placement == "native"
    assert plan.placement("s").placement == "state_operator"
    assert plan.query_of("t").state_operators == ("w", "s")


def test_filters_of_columns_are_computed_in_the_source_tasks_alone() -> None:
    query = _plan(FILTER).query_of("t")
    assert query.placed("source_task") == ("f",)
    assert (query.shape, query.writing_stage, query.batch) == ("query_writes", "source", None)
    assert not query.rows_in_jvm


def test_a_step_view_spark_must_compute_is_computed_at_the_end_of_the_step() -> None:
    query = _plan(
        "CREATE VIEW f WITH ('topic' = 'f', 'format' = 'append') AS SELECT ts, n + 1 AS m FROM t;"
    ).query_of("t")
    assert query.placed("step_sink") == ("f",)
    assert (query.shape, query.writing_stage, query.batch) == ("step_sink", None, "reread")
    assert query.rows_in_jvm


def test_a_step_view_beside_a_python_operator_is_computed_at_the_end_of_the_step() -> None:
    query = _plan(FILTER + PYTHON_OPERATOR).query_of("t")
    assert query.placed("step_sink") == ("f",)
    assert (query.shape, query.writing_stage, query.batch) == ("step_sink", None, "cached")


def test_native_aggregates_and_source_task_views_write_in_the_query() -> None:
    query = _plan(FILTER + NATIVE).query_of("t")
    assert (query.shape, query.writing_stage) == ("query_writes", "aggregate")
    assert query.placed("source_task") == ("f",)
    assert query.scans_once


def test_views_after_a_view_lateness_gate_are_computed_in_the_jvm() -> None:
    plan = _plan(
        DECODED + "CREATE VIEW o WITH ('topic' = 'o', 'format' = 'append') AS "
        "SELECT dt, n FROM decoded WHERE n > 5;"
    )
    assert plan.placement("decoded").gate
    assert plan.query_of("t").placed("jvm") == ("decoded", "o")
    assert plan.query_of("t").shape == "step_sink"


def test_s11_window_state_is_freed_by_the_first_lateness_column_upstream() -> None:
    plan = _plan(NATIVE)
    w = plan.placement("w")
    assert (w.state, w.state_owner, w.state_freed_by) == ("window", "t", "t.ts")
    assert plan.query_of("t").watermark == "t.ts"
    gated = _plan(
        DECODED + "CREATE VIEW per_hour WITH ('topic' = 'h') AS "
        "SELECT window_start, window_end, COUNT(*) AS c "
        "FROM TABLE(TUMBLE(TABLE decoded, DESCRIPTOR(dt), INTERVAL '1' HOUR)) "
        "GROUP BY window_start, window_end;"
    )
    assert gated.placement("per_hour").state_freed_by == "decoded.dt"


def test_l7_group_by_without_a_time_key_is_unbounded_state() -> None:
    plan = _plan(UNBOUNDED)
    g = plan.placement("g")
    assert (g.state, g.state_freed_by) == ("unbounded", None)
    assert "unbounded" in explain_physical_text(plan)


def test_the_passes_run_in_order_and_the_plan_is_a_frozen_value() -> None:
    assert PASSES[0] is group_queries
    circuit = compile_program("p.sql", TABLES + FILTER + NATIVE)
    plan = physical_plan(circuit)
    assert plan == physical_plan(circuit)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.queries[0].shape = "step_sink"  # type: ignore[misc]


def test_explain_physical_json_is_json_with_every_view_once() -> None:
    plan = _plan(FILTER + NATIVE + PYTHON_OPERATOR + UNBOUNDED)
    data = json.loads(json.dumps(explain_physical_json(plan)))
    names = [v["name"] for q in data["queries"] for v in q["views"]]
    assert sorted(names) == ["f", "g", "s", "w"]
    assert data["rows_in_jvm"] is True


def test_a_query_whose_state_no_waterline_bounds_says_so_in_its_watermark_line() -> None:
    """A query without a watermark holds no state only if none of its views does: an
    aggregate over a table without LATENESS, or over an updating view read through a stage
    boundary (which has no time attribute), holds state that no waterline bounds."""
    circuit = compile_program("p.sql", """
CREATE TABLE clicks (ts TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
                     usr VARCHAR NOT NULL) WITH ('topic' = 'c');
CREATE TABLE plain (usr VARCHAR NOT NULL, n BIGINT) WITH ('topic' = 'p');
CREATE LOCAL VIEW per_user AS SELECT usr, COUNT(*) AS c FROM clicks GROUP BY usr;
CREATE VIEW histogram WITH ('topic' = 'h') AS
SELECT c, COUNT(*) AS users FROM per_user GROUP BY c;
CREATE VIEW totals WITH ('topic' = 't') AS SELECT usr, SUM(n) AS s FROM plain GROUP BY usr;
CREATE VIEW copied WITH ('topic' = 'cp', 'format' = 'append') AS SELECT usr, n FROM plain;
""")
    composed = compose(circuit)
    assert composed.refused == ()
    plan = physical_plan(composed.circuit)
    text = explain_physical_text(plan)
    assert plan.query_of("plain").watermark is None
    assert plan.query_of("__in_per_user").watermark is None
    assert "(none: the query holds no state)" not in text
    assert ("watermark:    (none: the state of totals is not bounded by a waterline)"
            in text)
    assert ("watermark:    (none: the state of histogram is not bounded by a waterline)"
            in text)
    stateless = physical_plan(compile_program("p.sql", """
CREATE TABLE plain (usr VARCHAR NOT NULL, n BIGINT) WITH ('topic' = 'p');
CREATE VIEW copied WITH ('topic' = 'cp', 'format' = 'append') AS SELECT usr, n FROM plain;
"""))
    assert "watermark:    (none: the query holds no state)" in explain_physical_text(stateless)
