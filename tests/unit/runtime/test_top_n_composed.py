"""A window Top-N over an aggregate one query cannot read (ADR 0020, ADR 0023): the aggregate
is a stage boundary, and the Top-N, in the query that reads it back, holds each window's rows
in Spark's aggregation keyed by ``window_end`` until the punctuated waterline completes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.circuit.ir import Circuit, Filter
from app.program.compile import compile_program, compile_text
from app.runtime.operators.top_n_support import ranks_stage_rows, spark_problem
from app.runtime.planner.compose import compose
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

FLINK = Path(__file__).parents[2] / "fixtures" / "programs" / "composed" / "topn_decimal.sql"

TABLE = """
CREATE TABLE bid (
    ts    TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    item  VARCHAR NOT NULL,
    price DECIMAL(10, 2) NOT NULL
) WITH ('topic' = 'bids');
"""


def _ranked(fn: str, partition: str, order: str, where: str = "") -> Circuit:
    """A Top-N of a WITH query's DECIMAL sums (the Python state operator's)."""
    return compile_text("t.sql", TABLE + f"""
CREATE VIEW top WITH ('topic' = 'top') AS
WITH sums AS (SELECT window_start, window_end, item, SUM(price) AS total
              FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' MINUTES))
              GROUP BY window_start, window_end, item)
SELECT * FROM (
  SELECT *, {fn}() OVER (PARTITION BY {partition} ORDER BY {order}) AS r FROM sums {where})
WHERE r <= 3;
""")


def test_adr_0020_flinks_top_n_over_a_decimal_sum_is_held_behind_a_stage_boundary() -> None:
    """Flink's documentation example: one query refuses it (a DECIMAL SUM runs on the
    Python state operator, whose rows no view reads); composed, nothing is refused."""
    program = compile_program(FLINK)
    assert refused_by_spark(program, physical_plan(program)) != ()
    composed = compose(program)
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"top_items.subquery1.subquery1"})
    table = "__in_top_items_subquery1_subquery1"
    assert composed.circuit.view("top_items").sources == (table,)
    plan = composed.physical
    placed = plan.placement("top_items")
    assert (placed.placement, placed.top_n, placed.state) == ("native", "held", "window")
    assert (placed.state_owner, placed.state_freed_by) == (table, f"{table}.window_end")
    query = plan.query_of("top_items")
    assert query.tables == (table,)
    assert query.watermark == f"{table}.window_end"
    assert query.state_operators == ("top_items",)
    # The aggregate stays in the table's query, on the Python state operator.
    assert plan.placement("top_items.subquery1.subquery1").placement == "state_operator"


def test_s10_the_top_n_keeps_the_boundarys_window_columns_as_time_attributes() -> None:
    """Its window_end is the boundary's punctuated LATENESS column, its window_start that
    less the window's size (S10: never above what a later row can carry)."""
    view = compose(compile_program(FLINK)).circuit.view("top_items")
    attributes = {a.column: a for a in view.time_attributes}
    assert attributes["window_end"].kind == "window_end"
    start = attributes["window_start"]
    assert start.kind == "derived" and start.source_column == "window_end"
    assert [(s.op, s.amount) for s in start.steps] == [("shift", -600_000)]


@pytest.mark.parametrize("fn", ["ROW_NUMBER", "RANK"])
@pytest.mark.parametrize("order", ["total DESC", "total ASC, item DESC"])
def test_adr_0020_row_number_and_rank_in_any_directions_are_held(fn: str, order: str) -> None:
    """Every row of a window is held, so RANK's ties and keys in both directions run (the
    reference's rule ranks them once the window is complete)."""
    composed = compose(_ranked(fn, "window_end", order))
    assert composed.refused == ()
    assert composed.physical.placement("top").top_n == "held"


def test_adr_0020_a_filter_before_the_ranking_runs_over_the_boundarys_rows() -> None:
    composed = compose(_ranked("ROW_NUMBER", "window_start, window_end, item", "total DESC",
                               "WHERE total > 1"))
    assert composed.refused == ()
    view = composed.circuit.view("top")
    assert isinstance(view.operators[0], Filter)
    assert spark_problem(composed.circuit, view) is None



CROWDED = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr VARCHAR NOT NULL,
    n   BIGINT NOT NULL
) WITH ('topic' = 'clicks');
CREATE TABLE buys (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr    VARCHAR NOT NULL,
    amount BIGINT NOT NULL
) WITH ('topic' = 'buys');
CREATE TABLE users (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr    VARCHAR NOT NULL,
    region VARCHAR
) WITH ('topic' = 'users');
CREATE LOCAL VIEW top2 AS
SELECT * FROM (
  SELECT window_start, window_end, usr, n,
         ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY n DESC) AS rk
  FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
) WHERE rk <= 2;
CREATE VIEW top_big WITH ('topic' = 'top_big') AS
SELECT window_end, usr, n FROM top2 WHERE n >= 3;
CREATE VIEW bought WITH ('topic' = 'bought') AS
SELECT c.ts, c.usr, b.amount, u.region
FROM clicks AS c
JOIN buys AS b ON c.usr = b.usr AND b.ts BETWEEN c.ts AND c.ts + INTERVAL '1' MINUTE
JOIN users AS u ON c.usr = u.usr AND u.ts BETWEEN c.ts - INTERVAL '1' MINUTE AND c.ts;
"""


def test_adr_0020_a_top_n_of_a_tables_windows_in_a_later_query_windows_its_rows() -> None:
    """A window Top-N moved to a later query (its table's query is crowded by a join chain)
    reads the table's rows passed through a boundary and windows them itself: it holds the
    best rows per window as over the table's own rows, not a boundary's final rows by
    their window end (which would find no window columns to rank by)."""
    composed = compose(compile_text("t.sql", CROWDED))
    assert composed.refused == ()
    top2 = composed.circuit.view("top2")
    table = composed.circuit.table(top2.source)
    assert table.stage_input == "clicks"
    assert not ranks_stage_rows(composed.circuit, top2)
    assert spark_problem(composed.circuit, top2) is None
    placed = composed.physical.placement("top2")
    assert placed.top_n == "held"


AGGREGATE = """
CREATE TABLE ta (ts TIMESTAMP NOT NULL LATENESS INTERVAL '4' SECOND, k VARCHAR NOT NULL,
                 v BIGINT NOT NULL) WITH ('topic' = 'ta');

CREATE VIEW per4 WITH ('topic' = 'per4', 'format' = 'append') AS
SELECT window_start AS ws, window_end AS we, MIN(v) AS low
FROM TABLE(TUMBLE(TABLE ta, DESCRIPTOR(ts), INTERVAL '4' SECOND, INTERVAL '2' SECOND))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;
"""


def test_s10_adr_0020_a_rank_of_a_hop_on_an_aggregates_start_holds_rows_after_a_boundary(
) -> None:
    """A window of an aggregate's final rows spans steps, so it is not ranked per step in
    the aggregate's query (which would rank each step's part of a window): the Top-N reads
    the aggregate through a boundary whose first LATENESS column is the start it windows
    on, with its own waterline (S10's), and holds each window's rows until it completes."""
    composed = compose(compile_text("t.sql", AGGREGATE + """
CREATE VIEW best WITH ('topic' = 'best', 'format' = 'append') AS
SELECT window_start AS bs, window_end AS be, ws, low
FROM (SELECT window_start, window_end, ws, low,
        RANK() OVER (PARTITION BY window_start, window_end ORDER BY low DESC) AS r
      FROM TABLE(HOP(TABLE per4, DESCRIPTOR(ws), INTERVAL '1' SECOND, INTERVAL '3' SECOND)))
WHERE r = 1;
"""))
    assert composed.refused == ()
    best = composed.circuit.view("best")
    table = composed.circuit.table(best.source)
    assert table.stage_input == "per4"
    assert [x.column for x in table.lateness] == ["ws", "we"]
    assert table.derived_attributes == ()
    assert not ranks_stage_rows(composed.circuit, best)
    assert spark_problem(composed.circuit, best) is None
    assert composed.physical.placement("best").top_n == "held"


def test_s10_s19_views_over_a_top_n_of_an_aggregate_subquery_know_its_window() -> None:
    """The Top-N renames its subquery's window columns (``window_start AS ws``): read
    through a boundary, ``ws`` is a time attribute derived from ``we`` by the subquery's
    window, so a window on either runs in the later query."""
    composed = compose(compile_text("t.sql", """
CREATE TABLE ta (ts TIMESTAMP NOT NULL LATENESS INTERVAL '4' SECOND, k VARCHAR NOT NULL,
                 v BIGINT NOT NULL) WITH ('topic' = 'ta');

CREATE VIEW top WITH ('topic' = 'top', 'format' = 'append') AS
SELECT ws, we, k, total
FROM (SELECT window_start AS ws, window_end AS we, k, total,
        ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY total DESC) AS r
      FROM (SELECT window_start, window_end, k, SUM(v) AS total
            FROM TABLE(TUMBLE(TABLE ta, DESCRIPTOR(ts), INTERVAL '4' SECOND))
            GROUP BY window_start, window_end, k))
WHERE r < 3;

CREATE VIEW by_start WITH ('topic' = 'by_start', 'format' = 'append') AS
SELECT window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE top, DESCRIPTOR(ws), INTERVAL '8' SECOND))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;

CREATE VIEW by_end WITH ('topic' = 'by_end', 'format' = 'append') AS
SELECT window_end, SUM(total) AS total
FROM TABLE(TUMBLE(TABLE top, DESCRIPTOR(we), INTERVAL '8' SECOND))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;
"""))
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"top"})
    table = composed.circuit.table("__in_top")
    assert [x.column for x in table.lateness] == ["we"]
    (start,) = table.derived_attributes
    assert start.column == "ws" and start.steps[0].amount == -4_000


def test_adr_0020_a_top_n_of_a_filter_of_an_aggregates_final_rows_runs_composed() -> None:
    """A filter of a boundary's table passes its window end on, so a Top-N partitioned by
    it ranks the filter's rows as the aggregate's: through a boundary of the filter, whose
    first LATENESS column is the window end the Top-N ranks by."""
    composed = compose(compile_text("t.sql", AGGREGATE.replace(
        "GROUP BY window_start, window_end EMIT", "GROUP BY window_start, window_end, k EMIT"
    ).replace("AS we, MIN", "AS we, k, MIN") + """
CREATE LOCAL VIEW some AS SELECT ws, we, k, low FROM per4 WHERE low > 2;
CREATE VIEW best WITH ('topic' = 'best', 'format' = 'append') AS
SELECT * FROM (SELECT ws, we, k, low,
                 ROW_NUMBER() OVER (PARTITION BY we ORDER BY low DESC) AS r FROM some)
WHERE r <= 2;
"""))
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"per4", "some"})
    assert dict(composed.composition.stages) == {"some": 1, "best": 2}
    best = composed.circuit.view("best")
    table = composed.circuit.table(best.source)
    assert table.stage_input == "some"
    assert [x.column for x in table.lateness] == ["we", "ws"]
    assert ranks_stage_rows(composed.circuit, best)
    assert composed.physical.placement("best").top_n == "held"


def test_s10_s19_a_window_on_the_start_of_a_top_n_of_a_boundary_is_derived_from_its_end(
) -> None:
    """A Top-N of a DECIMAL sum reads its subquery through a boundary and renames its
    window columns; read through a second boundary, its start is derived from its end (the
    same source column: the first boundary's window end), not a LATENESS column of its own
    that a window on it could not be freed by."""
    composed = compose(compile_text("t.sql", TABLE + """
CREATE VIEW top WITH ('topic' = 'top', 'format' = 'append') AS
SELECT ts, te, item, total FROM (
  SELECT window_start AS ts, window_end AS te, item, total,
    ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY total DESC) AS r
  FROM (SELECT window_start, window_end, item, SUM(price) AS total
        FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' MINUTES))
        GROUP BY window_start, window_end, item))
WHERE r <= 3;
CREATE VIEW by_start WITH ('topic' = 'by_start', 'format' = 'append') AS
SELECT window_start, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE top, DESCRIPTOR(ts), INTERVAL '1' HOUR))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;
CREATE VIEW by_end WITH ('topic' = 'by_end', 'format' = 'append') AS
SELECT window_start, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE top, DESCRIPTOR(te), INTERVAL '1' HOUR))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;
"""))
    assert composed.refused == ()
    assert "top" in composed.boundaries
    table = composed.circuit.table(composed.circuit.view("by_start").source)
    assert [x.column for x in table.lateness] == ["te"]
    (start,) = table.derived_attributes
    assert start.column == "ts" and start.steps[0].amount == -600_000
