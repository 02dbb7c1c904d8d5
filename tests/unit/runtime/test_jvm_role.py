"""Whether a table's rows ever enter the JVM (ADR 0007): decided from the circuit alone,
because the session's JVM options (C1 alone for a JVM that only coordinates) are
fixed before any query is built. ``plan_query`` asserts that a table said to be computed in
its source's tasks gets a plan with no branch of Spark's own."""

from __future__ import annotations

import pytest

from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan

TABLE = """
CREATE TABLE t (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    k   VARCHAR   NOT NULL,
    n   INT       NOT NULL,
    x   DOUBLE,
    dt  VARCHAR
) WITH ('topic' = 'in');
"""


def _computed(views: str) -> bool:
    circuit = compile_program("p.sql", TABLE + views)
    return not physical_plan(circuit).query_of(circuit.tables[0].name).rows_in_jvm


def test_filters_and_projections_of_columns_are_computed_in_the_source_tasks() -> None:
    assert _computed(
        "CREATE LOCAL VIEW big AS SELECT ts, k, n FROM t WHERE n > 5 AND k <> 'x';\n"
        "CREATE VIEW out WITH ('topic' = 'o', 'format' = 'append') AS "
        "SELECT ts, k FROM big WHERE k IS NOT NULL;"
    )


@pytest.mark.parametrize(
    "views",
    [
        # floating point: Spark orders NaN above every number, so Spark computes it (ADR 0007)
        "CREATE VIEW out WITH ('topic' = 'o', 'format' = 'append') AS SELECT ts, x FROM t "
        "WHERE x > 1.5;",
        # arithmetic
        "CREATE VIEW out WITH ('topic' = 'o', 'format' = 'append') AS SELECT ts, n + 1 AS m "
        "FROM t;",
        # a changelog writes the step's batch time, which is Spark's
        "CREATE VIEW out WITH ('topic' = 'o', 'format' = 'changelog') AS SELECT ts, n FROM t;",
        # an aggregate next to a filter: the table's rows enter the JVM anyway
        "CREATE VIEW out WITH ('topic' = 'o', 'format' = 'append') AS SELECT ts, n FROM t "
        "WHERE n > 5;\n"
        "CREATE VIEW per_window WITH ('topic' = 'w') AS "
        "SELECT window_start, window_end, COUNT(*) AS c "
        "FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) "
        "GROUP BY window_start, window_end EMIT AFTER WATERMARK;",
        # a view with LATENESS of its own has a view gate in the query
        "CREATE LOCAL VIEW decoded AS SELECT CAST(dt AS TIMESTAMP) AS dt, n FROM t;\n"
        "LATENESS decoded.dt INTERVAL 1 HOUR;\n"
        "CREATE VIEW out WITH ('topic' = 'o', 'format' = 'append') AS SELECT dt, n FROM decoded "
        "WHERE n > 5;",
    ],
    ids=["double", "arithmetic", "changelog", "aggregate", "view-lateness"],
)
def test_anything_else_puts_the_rows_in_the_jvm(views: str) -> None:
    assert not _computed(views)


def test_a_table_without_output_views_is_not_computed_in_its_source_tasks() -> None:
    assert not _computed("CREATE LOCAL VIEW big AS SELECT ts, n FROM t WHERE n > 5;")
