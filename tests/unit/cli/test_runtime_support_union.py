"""UNION ALL (SPEC S17) on Spark: a union, the stateless views over it and the windowed AFTER
WATERMARK aggregates Spark computes exactly over it run in one query of its tables; any other
aggregate in such a query is refused by name before Spark starts (L7: never mis-executed)."""

from __future__ import annotations

import pytest

from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.physical import explain_physical_json, explain_physical_text, physical_plan
from app.runtime.planner.support import check_supported, refused_by_spark

PROGRAM = """
CREATE TABLE a (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL)
    WITH ('topic' = 'a');
CREATE TABLE b (ts TIMESTAMP NOT NULL LATENESS INTERVAL '2' MINUTE, k BIGINT NOT NULL)
    WITH ('topic' = 'b');
CREATE TABLE c (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL)
    WITH ('topic' = 'c');
CREATE VIEW only_c WITH ('topic' = 'only_c') AS SELECT ts, k FROM c;
CREATE VIEW both WITH ('topic' = 'both') AS
SELECT ts, k FROM a UNION ALL SELECT ts, k FROM b;
CREATE VIEW counts WITH ('topic' = 'counts') AS
SELECT window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE both, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_end
EMIT AFTER WATERMARK;
"""


def test_a_windowed_after_watermark_aggregate_over_a_union_all_runs_natively_s17() -> None:
    circuit = compile_program("p.sql", PROGRAM)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    assert plan.placement("counts").placement == "native"
    # Spark's one watermark, the minimum of the union's tables': the union's waterline.
    assert plan.queries[0].watermark == "min(a.ts, b.ts)"
    assert "view counts <- both: native" in explain_physical_text(plan)


def _refused(program: str) -> list[str]:
    circuit = compile_program("p.sql", program)
    with pytest.raises(ProgramError) as info:
        check_supported(circuit, physical_plan(circuit))
    assert all(d.fix for d in info.value.diagnostics)
    return [d.message for d in info.value.diagnostics]


@pytest.mark.parametrize(
    "change",
    [
        ("EMIT AFTER WATERMARK", "EMIT STREAM"),
        ("COUNT(*) AS n", "ARG_MAX(k, ts) AS n"),  # ties broken by arrival, per table
    ],
    ids=["emit-stream", "arg-max"],
)
def test_an_aggregate_over_a_union_all_spark_cannot_run_exactly_is_refused_by_name_l7(
    change: tuple[str, str],
) -> None:
    assert _refused(PROGRAM.replace(*change)) == [
        "view counts: this aggregate in a query of several tables (over a UNION ALL, or beside"
        " one) is not supported by the Spark runtime yet",
    ]


def test_a_union_column_that_is_not_each_tables_first_lateness_column_is_not_native() -> None:
    """Spark's watermark follows each table's first LATENESS column only: a union column
    merged from another one has a waterline Spark does not keep."""
    program = PROGRAM.replace(
        "CREATE TABLE b (ts TIMESTAMP NOT NULL LATENESS INTERVAL '2' MINUTE, k BIGINT NOT NULL)",
        "CREATE TABLE b (t0 TIMESTAMP NOT NULL LATENESS INTERVAL '2' MINUTE,\n"
        "    ts TIMESTAMP NOT NULL LATENESS INTERVAL '2' MINUTE, k BIGINT NOT NULL)",
    )
    assert "t0 TIMESTAMP" in program
    circuit = compile_program("p.sql", program)
    assert physical_plan(circuit).placement("counts").placement == "state_operator"
    assert _refused(program) == [
        "view counts: this aggregate in a query of several tables (over a UNION ALL, or beside"
        " one) is not supported by the Spark runtime yet",
    ]


def test_a_union_aggregate_beside_a_join_of_another_table_is_refused_l7() -> None:
    """The join puts table c in the union's query, and c's watermark in Spark's minimum,
    which would then be below the union's waterline (windows written late)."""
    joined = PROGRAM + (
        "CREATE VIEW bc WITH ('topic' = 'bc') AS SELECT b.ts, c.k FROM b JOIN c "
        "ON b.k = c.k AND c.ts BETWEEN b.ts AND b.ts + INTERVAL '1' MINUTE;"
    )
    assert _refused(joined) == [
        "view counts: an aggregate over a UNION ALL of a, b in a query whose watermark also"
        " follows c is not supported by the Spark runtime yet",
    ]


def test_a_stateless_union_all_runs_in_one_cached_query_of_its_tables() -> None:
    circuit = compile_program("p.sql", PROGRAM.split("CREATE VIEW counts")[0])
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    assert [q.tables for q in plan.queries] == [("a", "b"), ("c",)]
    union = plan.queries[0]
    assert (union.shape, union.batch) == ("step_sink", "cached")
    text = explain_physical_text(plan)
    assert "view both <- a UNION ALL b: jvm" in text
    assert "runs on Spark: yes" in text


def test_explain_physical_shows_one_query_for_the_union_tables() -> None:
    circuit = compile_program("p.sql", PROGRAM)
    plan = physical_plan(circuit)
    assert [q.tables for q in plan.queries] == [("a", "b"), ("c",)]
    text = explain_physical_text(plan, refused_by_spark(circuit, plan))
    assert "view both <- a UNION ALL b: jvm" in text
    assert "runs on Spark: yes" in text
    data = explain_physical_json(plan)
    assert data["queries"][0]["views"][0]["source"] == "a UNION ALL b"
    assert plan.placement("counts").state_owner == "both"
    assert plan.placement("counts").state_freed_by == "both.ts"  # the minimum (S17)
