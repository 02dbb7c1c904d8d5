"""CUMULATE windows on the Spark runtime (SPEC L4, S11, L7): the Python state operator runs
them in every EMIT form, never Spark's own aggregation (whose ``window`` has one size); an
aggregate by window bounds computed in another view is refused by name."""

from __future__ import annotations

import pytest

from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.operators.aggregate import plan_of
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import check_supported

TABLE = """
CREATE TABLE t (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    k  BIGINT NOT NULL
) WITH ('topic' = 'in');
"""

CUMULATE = "TABLE(CUMULATE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '5' MINUTE))"


@pytest.mark.parametrize("emit", [
    "",
    "EMIT STREAM",
    "EMIT AFTER WATERMARK",
    "EMIT STREAM AFTER WATERMARK",
    "EMIT AFTER DELAY INTERVAL '2' SECOND",
    "EMIT STREAM AFTER WATERMARK AND AFTER DELAY INTERVAL '1' MINUTE",
])
def test_s11_cumulate_aggregates_run_on_the_state_operator_by_window_end(emit: str) -> None:
    """The state operator frees a group at its ``window_end`` key (the windows of a start
    end at different times), even when ``window_start`` is grouped by first."""
    circuit = compile_program("p.sql", TABLE + f"""
CREATE VIEW v WITH ('topic' = 'out') AS
SELECT window_start, k, window_end, COUNT(*) AS n FROM {CUMULATE}
GROUP BY window_start, k, window_end {emit};
""")
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    assert plan.placement("v").placement == "state_operator"
    operator = plan_of(circuit.view("v"))
    assert (operator.window_key, operator.key_offset) == (2, 0)


def test_l7_an_aggregate_by_the_windows_of_another_view_is_refused_by_name() -> None:
    """The state operator reads a group's window end from the view's own window: an
    aggregate over a view that windows its rows is refused, never run without completing."""
    circuit = compile_program("p.sql", TABLE + f"""
CREATE LOCAL VIEW windowed AS SELECT k, window_start, window_end FROM {CUMULATE};
CREATE VIEW v WITH ('topic' = 'out') AS
SELECT window_end, COUNT(*) AS n FROM windowed GROUP BY window_end EMIT AFTER WATERMARK;
""")
    with pytest.raises(ProgramError) as info:
        check_supported(circuit, physical_plan(circuit))
    (problem,) = info.value.diagnostics
    assert "view v: an aggregate by the window bounds of windowed's rows" in problem.message
    assert problem.fix is not None and "window in the aggregate's own query" in problem.fix
