"""A relation joined with itself (SPEC S16) on Spark: the physical plan and the support
verdict. Both sides are the one table's rows under two aliases, in the table's one query
(read once), its state freed by the table's own watermark as any join's; a view read twice,
two views of one table, and a TUMBLE of a table joined with a HOP of it run the same way. An
OUTER or temporal self-join runs on Tidemark's join operator (ADR 0017); what Spark does not
run of any join (a bound on a second LATENESS column, INNER) stays refused by that name."""

from __future__ import annotations

import pytest

from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.compose import compose
from app.runtime.planner.physical import explain_physical_text, physical_plan
from app.runtime.planner.support import check_supported, refused_by_spark

BIDS = """
CREATE TABLE bids (ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,
    auction BIGINT NOT NULL, bidder VARCHAR NOT NULL, price BIGINT NOT NULL,
    t2 TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND) WITH ('topic' = 'bids');
"""

#: Each bid with the bids of the same auction in the ten seconds before it (NEXMark's shape).
BEFORE = """
CREATE VIEW before WITH ('topic' = 'before') AS
SELECT a.ts, a.auction, a.price, b.price AS earlier
FROM {left} AS a {kind}JOIN {right} AS b ON a.auction = b.auction
 AND b.ts BETWEEN a.{column} - INTERVAL '10' SECOND AND a.{column};
"""

#: A minute's TUMBLE of bids joined with the two-minute HOPs of bids ending with it.
WINDOWS = """
CREATE LOCAL VIEW minutes AS SELECT window_start, window_end, auction, price
    FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '1' MINUTE));
CREATE LOCAL VIEW hops AS SELECT window_start, window_end, auction, bidder
    FROM TABLE(HOP(TABLE bids, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '2' MINUTE));
CREATE VIEW both_windows WITH ('topic' = 'both') AS
SELECT m.window_end, m.auction, m.price, h.bidder FROM minutes AS m {kind}JOIN hops AS h
    ON m.window_end = h.window_end AND m.auction = h.auction;
"""

#: A table of versions joined with itself AS OF its own rows' time: each rate with the rate
#: of its base currency valid then.
RATES = """
CREATE TABLE rates (ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,
    currency VARCHAR NOT NULL, base VARCHAR NOT NULL, rate DOUBLE NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED) WITH ('topic' = 'rates');
CREATE VIEW crossed WITH ('topic' = 'crossed') AS
SELECT r.ts, r.currency, r.rate * b.rate AS rate
FROM rates AS r {kind}JOIN rates FOR SYSTEM_TIME AS OF r.ts AS b ON r.base = b.currency;
"""


def test_s16_a_table_joined_with_itself_runs_in_its_one_query_on_sparks_join() -> None:
    circuit = compile_program("p.sql", BIDS + BEFORE.format(
        left="bids", right="bids", kind="", column="ts"))
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    (query,) = plan.queries
    assert query.tables == ("bids",) and query.watermark == "bids.ts"
    placed = plan.placement("before")
    assert (placed.placement, placed.state, placed.state_freed_by) == ("jvm", "join", "bids.ts")
    assert query.state_operators == ("before",)
    assert "view before <- bids JOIN bids: jvm" in explain_physical_text(plan)


@pytest.mark.parametrize(
    ("views", "left", "right"),
    [
        # One view read twice.
        ("CREATE LOCAL VIEW big AS SELECT * FROM bids WHERE price > 10;", "big", "big"),
        # Two views of one table.
        (
            "CREATE LOCAL VIEW big AS SELECT * FROM bids WHERE price > 10;\n"
            "CREATE LOCAL VIEW small AS SELECT ts, auction, price FROM bids WHERE price < 5;",
            "big",
            "small",
        ),
        # A view of the table and the table.
        ("CREATE LOCAL VIEW big AS SELECT * FROM bids WHERE price > 10;", "big", "bids"),
    ],
)
def test_s16_views_of_one_table_joined_run_in_its_one_query(
    views: str, left: str, right: str
) -> None:
    circuit = compile_program(
        "p.sql", BIDS + views + BEFORE.format(left=left, right=right, kind="", column="ts")
    )
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    (query,) = plan.queries
    assert query.tables == ("bids",) and query.watermark == "bids.ts"
    assert plan.placement("before").state == "join"


def test_s9_s16_a_tumble_of_a_table_joined_with_a_hop_of_it_runs_on_sparks_join() -> None:
    circuit = compile_program("p.sql", BIDS + WINDOWS.format(kind=""))
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    (query,) = plan.queries
    assert query.tables == ("bids",) and query.watermark == "bids.ts"
    assert plan.placement("both_windows").state_freed_by == "bids.ts"


@pytest.mark.parametrize("kind", ["LEFT ", "RIGHT ", "FULL OUTER "])
def test_s16_an_outer_self_join_runs_on_tidemarks_join_operator(kind: str) -> None:
    for text in (
        BEFORE.format(left="bids", right="bids", kind=kind, column="ts"),
        # The operator reads any LATENESS column's waterline from the probes.
        BEFORE.format(left="bids", right="bids", kind=kind, column="t2"),
        WINDOWS.format(kind=kind),
    ):
        circuit = compile_program("p.sql", BIDS + text)
        plan = physical_plan(circuit)
        assert refused_by_spark(circuit, plan) == (), text
        (query,) = plan.queries
        assert query.tables == ("bids",) and query.watermark is None
        (view,) = [v for v in query.views if v.state == "join_operator"]
        assert view.state_freed_by in ("bids.ts", "bids.t2")


@pytest.mark.parametrize("kind", ["", "LEFT "])
def test_s16_a_temporal_join_of_a_table_with_itself_runs_on_tidemarks_join_operator(
    kind: str,
) -> None:
    circuit = compile_program("p.sql", RATES.format(kind=kind))
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    (query,) = plan.queries
    assert query.tables == ("rates",)
    assert plan.placement("crossed").state == "join_operator"


def test_s16_a_join_without_a_time_bound_of_a_table_with_itself_keeps_every_row_l7() -> None:
    text = BEFORE.format(left="bids", right="bids", kind="", column="ts")
    circuit = compile_program("p.sql", BIDS + text.split(" AND b.ts")[0] + ";")
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    assert plan.placement("before").state == "unbounded"


def test_s16_l7_an_inner_self_join_on_a_second_lateness_column_is_refused_by_that() -> None:
    """Spark's watermark follows the table's first LATENESS column only: refused as for two
    tables, never as a self-join, and no stage boundary lifts it."""
    text = BIDS + BEFORE.format(left="bids", right="bids", kind="", column="t2")
    circuit = compile_program("p.sql", text)
    with pytest.raises(ProgramError) as info:
        check_supported(circuit, physical_plan(circuit))
    (diagnostic,) = info.value.diagnostics
    assert diagnostic.message == (
        "view before: a join bound on a.t2 is not supported by the Spark runtime yet"
    )
    assert [p.message for p in compose(circuit).refused] == [diagnostic.message]
