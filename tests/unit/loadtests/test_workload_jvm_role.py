"""Which benchmark workloads run with a coordinating JVM (ADR 0009): only (a), whose filter
view the source's tasks compute; (b) and (c) aggregate in the JVM."""

from __future__ import annotations

import pytest

from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from loadtests.workloads import WORKLOADS


@pytest.mark.parametrize(("workload", "expected"), [("a", True), ("b", False), ("c", False)])
def test_only_the_filter_workload_keeps_its_rows_out_of_the_jvm(
    workload: str, expected: bool
) -> None:
    text = WORKLOADS[workload].program.format(topic="in", out="out")
    circuit = compile_program("p.sql", text)
    assert (not physical_plan(circuit).query_of(circuit.tables[0].name).rows_in_jvm) is expected
