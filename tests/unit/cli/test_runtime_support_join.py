"""JOIN (SPEC S16) on Spark: an INNER interval join of two tables bounded on their first
LATENESS columns (or of a table and a native aggregate bounded on its window's end), and an
INNER window join of windows on those columns, run (Spark's stream-stream join, in one query
of both tables); OUTER interval and window joins on any LATENESS columns and temporal joins AS
OF any LATENESS column of the probe table run on Tidemark's join operator (ADR 0017), which
reads each column's waterline from the probes, as do OUTER joins without a time bound (S18:
padded rows retracted when a match comes), of tables or, through a stage boundary, of
updating views; every other join, and an
aggregate over a join, is refused by name before Spark starts (L7: never mis-executed), with
the fix."""

from __future__ import annotations

import pytest

from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import check_supported, refused_by_spark

TABLES = """
CREATE TABLE a (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL,
    t2 TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE) WITH ('topic' = 'a');
CREATE TABLE b (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL)
    WITH ('topic' = 'b');
"""

PAIRS = """
CREATE VIEW pairs WITH ('topic' = 'pairs') AS
SELECT a.ts, a.k, b.ts AS b_ts FROM a {kind} JOIN b
    ON a.k = b.k AND b.ts BETWEEN a.{column} - INTERVAL '1' MINUTE
                             AND a.{column} + INTERVAL '1' MINUTE;
"""

COUNTS = """
CREATE VIEW counts WITH ('topic' = 'counts') AS
SELECT window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE pairs, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_end
EMIT AFTER WATERMARK;
"""

FIX = (
    "an INNER interval or window join on each table's first LATENESS column, an OUTER one "
    "on any of them, a join without a time bound (INNER or OUTER, of no UNION ALL), or a "
    "temporal join AS OF a LATENESS or AS PROCTIME() column of the probe table runs on Spark"
)

WINDOWED = """
CREATE LOCAL VIEW wa AS SELECT *
    FROM TABLE(TUMBLE(TABLE a, DESCRIPTOR({column}), INTERVAL '1' MINUTE));
CREATE LOCAL VIEW wb AS SELECT window_start, window_end, k
    FROM TABLE(TUMBLE(TABLE b, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) WHERE k > 0;
CREATE VIEW pairs WITH ('topic' = 'pairs') AS
SELECT x.window_start, x.window_end, x.k FROM wa AS x JOIN wb AS y
    ON x.window_start = y.window_start AND x.window_end = y.window_end AND x.k = y.k;
"""

TEMPORAL = """
CREATE TABLE r (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL, v INT,
    PRIMARY KEY (k) NOT ENFORCED) WITH ('topic' = 'r');
CREATE VIEW rated WITH ('topic' = 'rated') AS
SELECT a.ts, a.k, r.v FROM a {kind} JOIN r FOR SYSTEM_TIME AS OF a.{column} ON a.k = r.k;
"""


def _refused(text: str) -> list[str]:
    circuit = compile_program("p.sql", TABLES + text)
    plan = physical_plan(circuit)  # planning a join program does not fail
    try:
        check_supported(circuit, plan)
    except ProgramError as error:
        assert len(refused_by_spark(circuit, plan)) == len(error.diagnostics)
        return [d.message for d in error.diagnostics]
    return []


def test_s16_an_inner_interval_join_runs_on_spark_in_one_query() -> None:
    circuit = compile_program("p.sql", TABLES + PAIRS.format(kind="", column="ts"))
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    (query,) = plan.queries
    assert query.tables == ("a", "b") and (query.shape, query.batch) == ("step_sink", "cached")


def test_s16_an_inner_window_join_runs_on_spark_in_one_query() -> None:
    circuit = compile_program("p.sql", TABLES + WINDOWED.format(column="ts"))
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    (query,) = plan.queries
    assert query.tables == ("a", "b")


@pytest.mark.parametrize("kind", ["LEFT", "RIGHT", "FULL"])
def test_s16_an_outer_join_with_conditions_of_one_side_each_runs_on_spark(kind: str) -> None:
    """A conjunct of one side's columns decides whether that side's row can match at all:
    Spark evaluates it before Tidemark's join operator (ADR 0017)."""
    text = PAIRS.format(kind=kind, column="ts").replace(
        "b.k AND", "b.k AND a.k > 2 AND (b.k < 9 OR b.ts IS NULL) AND"
    )
    circuit = compile_program("p.sql", TABLES + text)
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    assert plan.placement("pairs").state == "join_operator"


@pytest.mark.parametrize("kind", ["", "LEFT"])
def test_s16_a_temporal_join_as_of_the_first_lateness_column_runs_on_spark(kind: str) -> None:
    """Tidemark's join operator (ADR 0017) in the query of both tables, which follows no
    Spark watermark for it."""
    circuit = compile_program("p.sql", TABLES + TEMPORAL.format(kind=kind, column="ts"))
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    query = plan.query_of("rated")
    assert query.tables == ("a", "r") and query.watermark is None
    assert plan.placement("rated").state == "join_operator"


#: The paper's NEXMark Q7 as a join: table a joined with its own per-window maximum, bounded
#: on the window's end (``{having}``: a HAVING keeps the maximum's rows from feeding Spark).
TOP = """
CREATE LOCAL VIEW top AS
SELECT window_end AS wend, MAX(k) AS mk
FROM TABLE(TUMBLE(TABLE a, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end {having}
EMIT AFTER WATERMARK;
CREATE VIEW tops WITH ('topic' = 'tops') AS
SELECT x.ts, x.k FROM a AS x JOIN top AS m
    ON x.k = m.mk AND x.ts >= m.wend - INTERVAL '1' MINUTE AND x.ts < m.wend;
"""


def test_s16_a_join_with_a_native_aggregates_window_end_runs_on_spark() -> None:
    """The aggregate is native (its final rows feed the join in the query, ADR 0014) and the
    join reads them by the window's end, which carries Spark's event time."""
    circuit = compile_program("p.sql", TABLES + TOP.format(having=""))
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    assert plan.placement("top").placement == "native"
    assert plan.query_of("tops").tables == ("a",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (WINDOWED.format(column="t2"), "view pairs: a join bound on x.window_end"),
        (TOP.format(having="HAVING MAX(k) > 0"), "view tops: a join bound on m.wend"),
        (PAIRS.format(kind="", column="t2"), "view pairs: a join bound on a.t2"),
        (
            PAIRS.format(kind="", column="ts") + COUNTS,
            "view counts: an aggregate over the JOIN view pairs",
        ),
    ],
)
def test_s16_other_joins_are_refused_by_name_l7(text: str, message: str) -> None:
    refused = _refused(text)
    assert [m.split(" is not supported")[0] for m in refused][:1] == [message]
    assert all(m.endswith("is not supported by the Spark runtime yet") for m in refused)


@pytest.mark.parametrize("kind", ["LEFT", "RIGHT", "FULL"])
def test_s16_an_outer_interval_join_runs_on_tidemarks_operator(kind: str) -> None:
    circuit = compile_program("p.sql", TABLES + PAIRS.format(kind=kind, column="ts"))
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    # Its operator reads each table's waterline from the probes: no Spark watermark.
    assert plan.query_of("pairs").watermark is None
    assert plan.query_of("pairs").state_operators == ("pairs",)


@pytest.mark.parametrize(
    "text",
    [
        PAIRS.format(kind="FULL", column="t2"),
        PAIRS.format(kind="LEFT", column="ts").replace("b.k AND", "b.k AND a.k > b.k AND"),
        TEMPORAL.format(kind="", column="t2"),
        TEMPORAL.format(kind="LEFT", column="t2"),
    ],
)
def test_s16_the_join_operator_follows_a_second_lateness_column(text: str) -> None:
    """Spark's watermark follows a table's first LATENESS column only, but the operator
    reads any column's waterline from the table's probes."""
    circuit = compile_program("p.sql", TABLES + text)
    check_supported(circuit, physical_plan(circuit))


def test_s16_the_refusal_carries_its_position_and_fix() -> None:
    circuit = compile_program("p.sql", TABLES + PAIRS.format(kind="", column="t2"))
    with pytest.raises(ProgramError) as info:
        check_supported(circuit, physical_plan(circuit))
    (diagnostic,) = info.value.diagnostics
    assert diagnostic.fix is not None and FIX in diagnostic.fix
    assert (diagnostic.position.line, diagnostic.position.column) == (7, 13)


@pytest.mark.parametrize("kind", ["LEFT", "RIGHT", "FULL"])
def test_s16_an_outer_window_join_runs_on_tidemarks_operator(kind: str) -> None:
    text = WINDOWED.format(column="ts").replace("wa AS x JOIN", f"wa AS x {kind} JOIN")
    assert f"{kind} JOIN" in text
    circuit = compile_program("p.sql", TABLES + text)
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    assert plan.placement("pairs").state == "join_operator"


REGULAR = """
CREATE VIEW joined WITH ('topic' = 'joined') AS
SELECT a.k, b.ts FROM a {kind} JOIN b ON a.k = b.k AND a.ts <> b.ts;
"""

UPDATING = """
CREATE LOCAL VIEW per_k AS SELECT k, COUNT(*) AS n FROM a GROUP BY k EMIT STREAM;
CREATE VIEW joined WITH ('topic' = 'joined') AS
SELECT b.k, p.n FROM b {kind} JOIN per_k AS p ON b.k = p.k AND p.n < 3;
"""


@pytest.mark.parametrize("kind", ["LEFT", "RIGHT", "FULL"])
def test_s16_s18_an_outer_join_without_a_time_bound_runs_on_tidemarks_operator(
    kind: str,
) -> None:
    """In the query of both tables, with no watermark: its state is never freed."""
    circuit = compile_program("p.sql", TABLES + REGULAR.format(kind=kind))
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    (query,) = plan.queries
    assert query.tables == ("a", "b") and query.watermark is None
    assert plan.placement("joined").state == "unbounded"
    assert query.state_operators == ("joined",)


@pytest.mark.parametrize("kind", ["LEFT", "FULL"])
def test_s16_s18_an_outer_join_of_an_updating_view_reads_it_through_a_boundary(
    kind: str,
) -> None:
    """The join's query is refused in the aggregate's (S18: its changes reach readers
    through a stage boundary); :func:`compose` moves it one stage on, where it runs."""
    from app.runtime.planner.compose import compose

    refused = _refused(UPDATING.format(kind=kind))
    assert ("view joined: reading the changes of the updating view per_k in its own query "
            "is not supported by the Spark runtime yet") in refused
    composed = compose(compile_program("p.sql", TABLES + UPDATING.format(kind=kind)))
    check_supported(composed.circuit, composed.physical)
    assert composed.physical.query_of("joined").tables == ("__in_b", "__in_per_k")
