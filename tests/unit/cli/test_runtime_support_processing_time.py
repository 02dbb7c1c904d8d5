"""Processing time on the Spark runtime (seed 004; SPEC S10, S11, L7): windows on a PROCTIME
column run on the Python state operator's processing-time timeouts, in every EMIT form, never
Spark's own aggregation; the source's tasks never compute a view of such a table (they know
no batch time); what Spark cannot run is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.config import Settings
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.operators.aggregate import plan_of
from app.runtime.operators.aggregate_support import polls_every_step
from app.runtime.operators.source import source_spec
from app.runtime.planner.physical import FREED_BY_BATCH_TIME, physical_plan
from app.runtime.planner.support import check_supported
from app.runtime.service import Service

TABLE = """
CREATE TABLE t (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    k  BIGINT NOT NULL,
    pt AS PROCTIME()
) WITH ('topic' = 'in');
"""

TUMBLE = "TABLE(TUMBLE(TABLE t, DESCRIPTOR(pt), INTERVAL '1' MINUTE))"
TUMBLE_U = "TABLE(TUMBLE(TABLE u, DESCRIPTOR(pt), INTERVAL '1' MINUTE))"
#: Every EMIT form a processing-time window runs in.
EMITS = [
    "",
    "EMIT STREAM",
    "EMIT AFTER WATERMARK",
    "EMIT STREAM AFTER WATERMARK",
    "EMIT AFTER DELAY INTERVAL '2' SECOND",
]


@pytest.mark.parametrize("emit", EMITS)
def test_s11_proctime_windows_run_on_the_polled_state_operator(emit: str) -> None:
    circuit = compile_program("p.sql", TABLE + f"""
CREATE VIEW v WITH ('topic' = 'out') AS
SELECT window_start, window_end, k, COUNT(*) AS n FROM {TUMBLE}
GROUP BY window_start, window_end, k {emit};
""")
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    assert plan.placement("v").placement == "state_operator"
    assert plan.placement("v").state_freed_by == FREED_BY_BATCH_TIME
    assert plan_of(circuit.view("v")).processing_time
    assert polls_every_step([circuit.view("v")])


@pytest.mark.parametrize("tvf", [
    "HOP(TABLE t, DESCRIPTOR(pt), INTERVAL '30' SECOND, INTERVAL '1' MINUTE)",
    "CUMULATE(TABLE t, DESCRIPTOR(pt), INTERVAL '30' SECOND, INTERVAL '1' MINUTE)",
])
def test_s11_hop_and_cumulate_on_proctime_run_on_the_polled_state_operator(tvf: str) -> None:
    circuit = compile_program("p.sql", TABLE + f"""
CREATE VIEW v WITH ('topic' = 'out') AS
SELECT window_end, COUNT(*) AS n FROM TABLE({tvf}) GROUP BY window_end EMIT AFTER WATERMARK;
""")
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    assert plan.placement("v").placement == "state_operator"
    assert plan_of(circuit.view("v")).processing_time


def test_s13_proctime_column_is_no_source_column_and_its_views_leave_the_source_tasks() -> None:
    circuit = compile_program("p.sql", TABLE + """
CREATE VIEW v WITH ('topic' = 'out') AS SELECT k, pt FROM t WHERE k > 1;
""")
    assert [c.name for c in source_spec(circuit.table("t")).columns] == ["ts", "k"]
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    assert plan.placement("v").placement == "step_sink"
    assert plan.queries[0].shape == "step_sink"


@pytest.mark.parametrize(("views", "message", "fix"), [
    ("CREATE VIEW v WITH ('topic' = 'out') AS SELECT k, pt FROM t UNION ALL "
     "SELECT k, pt FROM t;",
     "view v: processing time (a PROCTIME() column or NOW()) in a UNION ALL",
     "use processing time in a view that reads it"),
    ("CREATE VIEW v WITH ('topic' = 'out') AS SELECT k, window_end, COUNT(*) AS n "
     "FROM TABLE(SESSION(TABLE t PARTITION BY k, DESCRIPTOR(pt), INTERVAL '1' MINUTE)) "
     "GROUP BY k, window_end EMIT AFTER WATERMARK;",
     "view v: this SESSION window aggregate", "Spark's session_window"),
])
def test_l7_processing_time_forms_spark_cannot_run_are_refused_by_name(
        views: str, message: str, fix: str) -> None:
    circuit = compile_program("p.sql", TABLE + views)
    with pytest.raises(ProgramError) as info:
        check_supported(circuit, physical_plan(circuit))
    problem = info.value.diagnostics[0]
    assert message in problem.message
    assert problem.fix is not None and fix in problem.fix


@pytest.mark.parametrize("view", [
    f"SELECT window_end, COUNT(*) AS n, NOW() AS at_ FROM {TUMBLE} GROUP BY window_end",
    "SELECT window_end, COUNT(*) AS n, CURRENT_TIMESTAMP AS at_ "
    "FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) "
    "GROUP BY window_end EMIT AFTER WATERMARK",
    "SELECT k, MAX(ts) AS last_ts FROM t GROUP BY k HAVING MAX(ts) <= NOW()",
    "SELECT k, COUNT(*) AS n, LOCALTIMESTAMP AS at_ FROM t GROUP BY k "
    "HAVING PROCTIME() > MAX(ts) EMIT AFTER DELAY INTERVAL '2' SECOND",
])
def test_s13_now_in_having_and_an_aggregates_select_list_runs_on_the_state_operator(
        view: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NOW() after an aggregate is the batch time of the group's last change, which the
    state operator keeps per group (Spark's own aggregation does not, so a windowed EMIT
    AFTER WATERMARK view that reads it leaves it): explain --physical says the program
    runs and run's planner agrees."""
    program = tmp_path / "p.sql"
    program.write_text(TABLE + f"CREATE VIEW v WITH ('topic' = 'out') AS {view};\n",
                       encoding="utf-8")
    circuit = compile_program(program)
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    assert plan.placement("v").placement == "state_operator"
    assert plan_of(circuit.view("v")).reads_now

    monkeypatch.chdir(tmp_path)
    explained = CliRunner().invoke(app, ["explain", "--physical", str(program)])
    assert explained.exit_code == 0, explained.output
    assert "runs on Spark: yes" in explained.output
    assert "view v <- t: state_operator" in explained.output
    service = Service(circuit, Settings(program=program, checkpoint=tmp_path / "ck"))
    assert service.composed.refused == ()


UNTIMED = "CREATE TABLE u (k BIGINT NOT NULL, pt AS PROCTIME()) WITH ('topic' = 'in');\n"


@pytest.mark.parametrize("tvf", [
    "TUMBLE(TABLE u, DESCRIPTOR(pt), INTERVAL '1' MINUTE)",
    "HOP(TABLE u, DESCRIPTOR(pt), INTERVAL '30' SECOND, INTERVAL '1' MINUTE)",
    "CUMULATE(TABLE u, DESCRIPTOR(pt), INTERVAL '30' SECOND, INTERVAL '1' MINUTE)",
])
@pytest.mark.parametrize("emit", EMITS)
def test_s11_proctime_window_of_a_table_without_lateness_runs_without_a_watermark(
        tvf: str, emit: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table with no LATENESS column has no Spark watermark; its processing-time windows
    complete by the step's batch time, on the state operator's processing-time timeouts, so
    they run: explain --physical says so and run's planner agrees."""
    program = tmp_path / "p.sql"
    program.write_text(UNTIMED + f"""
CREATE VIEW v WITH ('topic' = 'out') AS SELECT window_start, window_end, k, COUNT(*) AS n
FROM TABLE({tvf}) GROUP BY window_start, window_end, k {emit};
""", encoding="utf-8")
    circuit = compile_program(program)
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    (query,) = plan.queries
    assert query.watermark is None
    assert plan.placement("v").placement == "state_operator"
    assert plan.placement("v").state_freed_by == FREED_BY_BATCH_TIME
    assert plan_of(circuit.view("v")).processing_time
    assert polls_every_step([circuit.view("v")])

    monkeypatch.chdir(tmp_path)
    explained = CliRunner().invoke(app, ["explain", "--physical", str(program)])
    assert explained.exit_code == 0, explained.output
    assert "runs on Spark: yes" in explained.output
    assert "watermark:    (none: the state of v is freed by the step's batch time)" in (
        explained.output)
    assert "freed once the step's batch time passes the window's end" in explained.output
    service = Service(circuit, Settings(program=program, checkpoint=tmp_path / "ck"))
    assert service.composed.refused == ()


def test_s11_a_table_without_lateness_mixes_proctime_windows_and_unbounded_aggregates() -> None:
    """Beside a processing-time window, an aggregate that never completes a group (and one
    held by AFTER DELAY) runs on the same polled operator without a watermark."""
    circuit = compile_program("p.sql", UNTIMED + f"""
CREATE VIEW w WITH ('topic' = 'out') AS SELECT window_end, COUNT(*) AS n FROM {TUMBLE_U}
GROUP BY window_end EMIT AFTER WATERMARK;
CREATE VIEW per_k WITH ('topic' = 'out2') AS SELECT k, COUNT(*) AS n FROM u GROUP BY k;
CREATE VIEW held WITH ('topic' = 'out3') AS SELECT k, COUNT(*) AS n FROM u GROUP BY k
EMIT AFTER DELAY INTERVAL '2' SECOND;
""")
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    assert plan.queries[0].watermark is None
    assert {v.view: v.placement for v in plan.queries[0].views} == {
        "w": "state_operator", "per_k": "state_operator", "held": "state_operator"}



def test_s11_s19_a_proctime_window_beside_a_views_lateness_window_runs_composed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One table, two waterlines (its batch time, a view's own LATENESS): Spark keeps one
    watermark per query, so the window that the view's waterline frees is the one refused
    in the table's query, and the planner moves it to a query of its own, which reads the
    view through a stage boundary; the processing-time window keeps the table's query."""
    program = tmp_path / "p.sql"
    program.write_text("""
CREATE TABLE taps (usr VARCHAR NOT NULL, ts TIMESTAMP NOT NULL, pt AS PROCTIME())
WITH ('topic' = 'taps');
CREATE VIEW per_tick WITH ('topic' = 'per_tick') AS
SELECT window_start, window_end, usr, COUNT(*) AS c
FROM TABLE(TUMBLE(TABLE taps, DESCRIPTOR(pt), INTERVAL '10' SECOND))
GROUP BY window_start, window_end, usr;
CREATE LOCAL VIEW timed AS SELECT usr, ts FROM taps;
LATENESS timed.ts INTERVAL '5' SECOND;
CREATE VIEW per_min WITH ('topic' = 'per_min') AS
SELECT window_start, window_end, usr, COUNT(*) AS c
FROM TABLE(TUMBLE(TABLE timed, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr EMIT AFTER WATERMARK;
""", encoding="utf-8")
    circuit = compile_program(program)
    with pytest.raises(ProgramError) as info:
        check_supported(circuit, physical_plan(circuit))
    (problem,) = info.value.diagnostics
    assert problem.message.startswith("view per_min: aggregate views of taps freed by "
                                      "different waterlines (taps, timed)")
    monkeypatch.chdir(tmp_path)
    explained = CliRunner().invoke(app, ["explain", "--physical", str(program)])
    assert explained.exit_code == 0, explained.output
    assert "runs on Spark: yes" in explained.output
    assert "timed -> tidemark.internal.timed -> per_min" in explained.output
    composed = Service(circuit, Settings(program=program, checkpoint=tmp_path / "ck")).composed
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"timed"})
    plan = composed.physical
    assert plan.query_of("per_tick").watermark is None
    assert plan.query_of("per_min").watermark == "__in_timed.ts"
