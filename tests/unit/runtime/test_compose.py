"""The planner's stage boundaries (SPEC S19, ADR 0023): what moves to a later query, what
the boundary's table carries, and what stays refused, in the program's own names."""

from __future__ import annotations

from pathlib import Path

from app.program.compile import compile_program, compile_text
from app.runtime.planner.compose import compose, stage_text
from app.runtime.planner.physical import physical_plan

ROOT = Path(__file__).resolve().parents[3]
COMPOSED = ROOT / "tests" / "fixtures" / "programs" / "composed"

CLICKS = """
CREATE TABLE clicks (ts TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
                     usr VARCHAR NOT NULL) WITH ('topic' = 'clicks');
"""


def test_s19_a_program_one_query_runs_keeps_its_plan() -> None:
    circuit = compile_program(ROOT / "pipelines" / "click_rollups.sql")
    composed = compose(circuit)
    assert composed.refused == () and composed.boundaries == frozenset()
    assert composed.circuit is circuit
    assert composed.physical == physical_plan(circuit)


def test_s19_a_filter_over_an_aggregate_reads_it_through_a_boundary() -> None:
    composed = compose(compile_program(COMPOSED / "alerts.sql"), "tidemark.t.1")
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"per_min"})
    assert dict(composed.composition.stages) == {"alerts": 1, "per_2min": 1}
    (table,) = [t for t in composed.circuit.tables if t.stage_input is not None]
    assert (table.name, table.topic) == ("__in_per_min", "tidemark.t.1.per_min")
    # LATENESS columns of amount 0, moved by punctuation only: the start first, which
    # per_2min windows on (the stage's lead), with its own waterline (S10's exact one).
    assert [(x.column, x.amount) for x in table.lateness] == [
        ("minute_start", 0), ("minute_end", 0)]
    assert table.derived_attributes == ()
    writer = composed.circuit.view("per_min")
    assert writer.output is not None and writer.output.stage_output
    assert (writer.output.format, writer.output.partitions) == ("append", 1)
    assert composed.circuit.view("alerts").sources == ("__in_per_min",)
    assert "per_min -> tidemark.t.1.per_min -> alerts, per_2min" in stage_text(composed)


def test_s19_an_output_view_read_later_gets_a_twin_and_a_table_a_passthrough() -> None:
    composed = compose(compile_program(COMPOSED / "join_and_count.sql"))
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"trades"})
    passthrough = composed.circuit.view("__out_trades")
    assert passthrough.sources == ("trades",) and passthrough.output is not None
    composed = compose(compile_text("p.sql", CLICKS + """
CREATE VIEW per_min WITH ('topic' = 'per_min') AS
SELECT window_start AS ms, window_end AS me, usr, COUNT(*) AS c
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr EMIT AFTER WATERMARK;
CREATE VIEW busy WITH ('topic' = 'busy') AS SELECT me, usr FROM per_min WHERE c > 2;
"""))
    assert composed.refused == ()
    own, twin = composed.circuit.view("per_min"), composed.circuit.view("__out_per_min")
    assert own.output is not None and own.output.topic == "per_min"
    assert twin.output is not None and twin.output.stage_output
    assert twin.operators == own.operators


def test_s19_a_temporal_join_reads_a_versioned_table_through_a_boundary() -> None:
    composed = compose(compile_text("p.sql", """
CREATE TABLE a (ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND, k VARCHAR NOT NULL,
                v BIGINT NOT NULL) WITH ('topic'='a');
CREATE TABLE b (ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND, k VARCHAR NOT NULL,
                w BIGINT NOT NULL) WITH ('topic'='b');
CREATE TABLE r (ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND, k VARCHAR NOT NULL,
                rate BIGINT NOT NULL, PRIMARY KEY (k) NOT ENFORCED) WITH ('topic'='r');
CREATE LOCAL VIEW ab AS SELECT a.ts, a.k, a.v, b.w FROM a JOIN b
ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts;
CREATE VIEW o WITH ('topic'='o') AS SELECT ab.k, ab.v * r.rate AS x
FROM ab JOIN r FOR SYSTEM_TIME AS OF ab.ts ON ab.k = r.k;
"""))
    assert composed.refused == ()
    assert composed.circuit.table("__in_r").primary_key == ("k",)


def test_s19_what_no_boundary_lifts_is_refused_in_the_programs_names() -> None:
    composed = compose(compile_text("p.sql", CLICKS.replace(
        "usr VARCHAR NOT NULL", "usr VARCHAR NOT NULL, "
        "t2 TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND") + """
CREATE VIEW pairs WITH ('topic' = 'pairs') AS
SELECT x.ts, x.usr, y.ts AS y_ts FROM clicks x JOIN clicks y ON x.usr = y.usr
AND y.ts BETWEEN x.t2 - INTERVAL '1' MINUTE AND x.t2;
"""))
    (problem,) = composed.refused
    assert "view pairs: a join bound on x.t2" in problem.message
    assert "__in_" not in str(problem)
    # The program's own plan, one query per table, is what explain shows beside it.
    assert [q.tables for q in composed.physical.queries] == [("clicks",)]


def test_s17_s19_a_union_of_an_aggregates_rows_reads_them_through_a_boundary() -> None:
    composed = compose(compile_text("p.sql", """
CREATE TABLE tb (ts TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND, k VARCHAR NOT NULL,
                 v BIGINT NOT NULL) WITH ('topic' = 'tb');
CREATE LOCAL VIEW a AS SELECT window_start AS ws, window_end AS we, k, MIN(v) AS m
FROM TABLE(TUMBLE(TABLE tb, DESCRIPTOR(ts), INTERVAL '4' SECOND))
GROUP BY window_start, window_end, k EMIT AFTER WATERMARK;
CREATE VIEW u WITH ('topic' = 'u', 'format' = 'append') AS
SELECT we AS t, k, m AS v FROM a WHERE k = 'a' OR m >= 5
UNION ALL SELECT we AS t, k, m + 1 AS v FROM a;
"""))
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"a"})
    assert composed.circuit.view("u").sources == ("__in_a", "__in_a")


def test_s19_an_aggregate_crowded_in_a_later_query_moves_on_to_one_of_its_own() -> None:
    """Stage 1 joins tb's passthrough with f's rows; the count of tb, moved out of stage 0's
    query of ta and tb, would sit beside that join again: it moves on to stage 2, where it
    reads tb through a table of its own."""
    composed = compose(compile_text("p.sql", """
CREATE TABLE ta (ts TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND, k VARCHAR NOT NULL,
                 v BIGINT NOT NULL) WITH ('topic' = 'ta');
CREATE TABLE tb (ts TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND, k VARCHAR NOT NULL,
                 v BIGINT NOT NULL) WITH ('topic' = 'tb');
CREATE LOCAL VIEW f AS SELECT ts, k, v FROM tb WHERE v <= 1;
CREATE VIEW j WITH ('topic' = 'j', 'format' = 'append') AS
SELECT l.ts AS lt, r.ts AS rt, l.k, l.v AS lv, r.v AS rv
FROM tb AS l JOIN f AS r ON l.k = r.k AND r.ts BETWEEN l.ts - INTERVAL '2' SECOND AND l.ts;
CREATE VIEW j2 WITH ('topic' = 'j2', 'format' = 'append') AS
SELECT l.ts AS lt, r.ts AS rt, l.k, l.v AS lv, r.v AS rv
FROM ta AS l JOIN tb AS r ON l.k = r.k AND r.ts BETWEEN l.ts - INTERVAL '2' SECOND AND l.ts;
CREATE VIEW c WITH ('topic' = 'c', 'format' = 'append') AS SELECT window_end AS we, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE tb, DESCRIPTOR(ts), INTERVAL '4' SECOND))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;
"""))
    assert composed.refused == ()
    stages = composed.composition.stages
    assert stages["c"] > max(stages.get("j", 0), stages.get("j2", 0))
    (read,) = composed.circuit.view("c").sources
    assert composed.physical.query_of("c").tables == (read,)
    assert composed.circuit.table(read).stage_input == "tb"


def test_s10_s19_a_cascade_on_window_time_reads_it_derived_from_the_window_end() -> None:
    """Flink's cascade windows on window_time (window_end - 1 ms): behind the boundary it is
    derived from the window end again, the column the reader's watermark follows."""
    composed = compose(compile_text("p.sql", """
CREATE TABLE Bid (bidtime TIMESTAMP(3), price DECIMAL(10, 2), supplier_id STRING,
  WATERMARK FOR bidtime AS bidtime - INTERVAL '1' SECOND)
WITH ('connector' = 'kafka', 'topic' = 'bid', 'format' = 'avro');
CREATE TABLE result (window_start TIMESTAMP(3), window_end TIMESTAMP(3),
  total_price DECIMAL(10, 2)) WITH ('connector' = 'kafka', 'topic' = 'result', 'format' = 'avro');
CREATE VIEW window1 AS
SELECT window_start, window_end, window_time as rowtime, SUM(price) as partial_price
  FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES))
  GROUP BY supplier_id, window_start, window_end, window_time;
INSERT INTO result
SELECT window_start, window_end, SUM(partial_price) as total_price
  FROM TABLE(TUMBLE(TABLE window1, DESCRIPTOR(rowtime), INTERVAL '10' MINUTES))
  GROUP BY window_start, window_end;
"""))
    assert composed.refused == ()
    table = composed.circuit.table("__in_window1")
    assert [x.column for x in table.lateness] == ["window_end"]
    (rowtime,) = [a for a in table.derived_attributes if a.column == "rowtime"]
    assert rowtime.derivation is not None and rowtime.derivation.steps[0].amount == -1


def test_s18_s19_a_count_of_counts_runs_on_the_state_operator_after_a_boundary() -> None:
    """The aggregate over an updating view's changes reads them through a boundary that
    carries the changelog, on the Python state operator (Spark's aggregation cannot take a
    retraction back), without a watermark (no group of it is ever complete); its filter,
    updating again, reads it through a second boundary."""
    composed = compose(compile_text("p.sql", CLICKS + """
CREATE LOCAL VIEW per_user AS SELECT usr, COUNT(*) AS c FROM clicks GROUP BY usr;
CREATE VIEW histogram WITH ('topic' = 'h') AS
SELECT c, COUNT(*) AS users, MIN(c) AS lo FROM per_user GROUP BY c;
CREATE VIEW crowded WITH ('topic' = 'crowded') AS SELECT c FROM histogram WHERE users > 1;
"""))
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"per_user", "histogram"})
    assert dict(composed.composition.stages) == {"histogram": 1, "crowded": 2}
    changes = {t.name: t for t in composed.circuit.tables if t.retractions}
    assert set(changes) == {"__in_per_user", "__in_histogram"}
    assert changes["__in_per_user"].lateness == ()
    placement = composed.physical.placement("histogram")
    assert placement.placement == "state_operator"
    assert composed.physical.query_of("histogram").watermark is None
    writer = composed.circuit.view("__out_histogram")
    assert writer.output is not None and writer.output.format == "changelog"


def test_s18_s19_window_aggregates_over_an_updating_view_run_after_its_boundary() -> None:
    """A HOP on an updating aggregate's window start (derived from its end at the boundary)
    and a CUMULATE on its window end read its changelog through one boundary, on the Python
    state operator (never Spark's aggregation, which cannot take a retraction back), freed
    by the boundary's waterline: the final HOP as well as the updating CUMULATE."""
    composed = compose(compile_text("p.sql", CLICKS + """
CREATE LOCAL VIEW per_min AS
SELECT window_start AS minute_start, window_end AS minute_end, usr, COUNT(*) AS c
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr EMIT STREAM;
CREATE VIEW hop WITH ('topic' = 'hop', 'format' = 'append') AS
SELECT window_start, window_end, SUM(c) AS total
FROM TABLE(HOP(TABLE per_min, DESCRIPTOR(minute_start), INTERVAL '1' MINUTE,
               INTERVAL '2' MINUTE))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;
CREATE VIEW cumulated WITH ('topic' = 'cumulated') AS
SELECT window_start, window_end, usr, MAX(c) AS peak
FROM TABLE(CUMULATE(TABLE per_min, DESCRIPTOR(minute_end), INTERVAL '1' MINUTE,
                    INTERVAL '3' MINUTE))
GROUP BY window_start, window_end, usr;
"""))
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"per_min"})
    (table,) = [t for t in composed.circuit.tables if t.retractions]
    assert table.name == "__in_per_min"
    assert [x.column for x in table.lateness] == ["minute_end"]
    for view in ("hop", "cumulated"):
        assert composed.physical.placement(view).placement == "state_operator", view
        assert composed.physical.query_of(view).tables == ("__in_per_min",)


def test_s17_s19_a_cascade_over_a_union_aggregate_is_placed_not_crashed() -> None:
    """The support pass asked a cascade over a native aggregate of a UNION ALL for its one
    root table, which a union does not have: it now finds none, so the cascade is not alone
    in its query of two tables and reads the aggregate through a boundary."""
    composed = compose(compile_text("p.sql", """
CREATE TABLE ta (ts TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND, k VARCHAR NOT NULL,
                 v BIGINT NOT NULL) WITH ('topic' = 'ta');
CREATE TABLE tb (ts TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND, k VARCHAR NOT NULL,
                 v BIGINT NOT NULL) WITH ('topic' = 'tb');
CREATE LOCAL VIEW both_ AS SELECT ts, k, v FROM tb UNION ALL SELECT ts, k, v FROM ta;
CREATE LOCAL VIEW per6 AS
SELECT window_end AS we, k, MAX(v) AS top
FROM TABLE(TUMBLE(TABLE both_, DESCRIPTOR(ts), INTERVAL '6' SECOND))
GROUP BY window_start, window_end, k EMIT AFTER WATERMARK;
CREATE VIEW per12 WITH ('topic' = 'per12', 'format' = 'append') AS
SELECT window_start, window_end, k, SUM(top) AS total
FROM TABLE(TUMBLE(TABLE per6, DESCRIPTOR(we), INTERVAL '12' SECOND))
GROUP BY window_start, window_end, k EMIT AFTER WATERMARK;
"""))
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"per6"})
    assert composed.physical.query_of("per12").tables == ("__in_per6",)


TWO_TABLES = """
CREATE TABLE ta (ts TIMESTAMP NOT NULL LATENESS INTERVAL '4' SECOND, k VARCHAR NOT NULL,
                 v BIGINT NOT NULL) WITH ('topic' = 'ta');
CREATE TABLE tb (ts TIMESTAMP NOT NULL LATENESS INTERVAL '4' SECOND, k VARCHAR NOT NULL,
                 v BIGINT NOT NULL) WITH ('topic' = 'tb');
"""


def test_s16_s19_the_join_that_crowds_an_aggregate_moves_on_not_the_aggregate() -> None:
    """A SESSION aggregate of ta, written and read by a filter and by an interval join with
    tb: the join brings tb into ta's query, where no aggregate runs beside another table.
    The join moves a stage on (reading the aggregate's final rows through a boundary); the
    aggregate stays in ta's query. Moving the aggregate instead took its join along, stage
    after stage, and the program was refused."""
    composed = compose(compile_text("p.sql", TWO_TABLES + """
CREATE VIEW sessions WITH ('topic' = 'sessions', 'format' = 'append') AS
SELECT window_end AS we, k, MIN(v) AS low
FROM TABLE(SESSION(TABLE ta PARTITION BY k, DESCRIPTOR(ts), INTERVAL '4' SECOND))
GROUP BY window_start, window_end, k EMIT AFTER WATERMARK;
CREATE VIEW low_sessions WITH ('topic' = 'low') AS SELECT we, k, low FROM sessions WHERE low <> 1;
CREATE VIEW near WITH ('topic' = 'near') AS
SELECT l.ts, r.we, l.k, l.v, r.low FROM tb AS l JOIN sessions AS r
  ON l.k = r.k AND r.we BETWEEN l.ts - INTERVAL '3' SECOND AND l.ts AND l.v <> r.low;
"""))
    assert composed.refused == ()
    assert dict(composed.composition.stages) == {"low_sessions": 1, "near": 1}
    assert composed.physical.query_of("sessions").tables == ("ta",)


def test_s19_a_boundarys_first_lateness_column_is_the_one_its_readers_window_on() -> None:
    """A window Top-N of a self-join's rows on the right side's time: through the boundary
    (the join's query cannot rank), that column is the table's first LATENESS column, which
    Spark's watermark follows, so the ranking runs; before, the left side's time was."""
    composed = compose(compile_text("p.sql", TWO_TABLES + """
CREATE LOCAL VIEW pairs AS
SELECT l.ts AS lt, r.ts AS rt, l.k AS k, r.v AS rv FROM ta AS l JOIN ta AS r
  ON l.k = r.k AND r.ts BETWEEN l.ts - INTERVAL '5' SECOND AND l.ts + INTERVAL '1' SECOND;
CREATE VIEW best WITH ('topic' = 'best') AS
SELECT window_start, window_end, lt, rt, k, rv FROM (
  SELECT window_start, window_end, lt, rt, k, rv,
    ROW_NUMBER() OVER (PARTITION BY window_start, window_end, k ORDER BY rv) AS r
  FROM TABLE(TUMBLE(TABLE pairs, DESCRIPTOR(rt), INTERVAL '5' SECOND))) WHERE r = 1;
"""))
    assert composed.refused == ()
    assert dict(composed.composition.leads) == {"__in_pairs": "rt"}
    table = composed.circuit.table("__in_pairs")
    assert [x.column for x in table.lateness] == ["rt", "lt"]


def test_s10_s16_s19_a_temporal_join_as_of_a_window_start_follows_its_derived_waterline(
) -> None:
    """The day's sum at the day's opening rate: AS OF the window's start, read through a
    boundary where it is derived from the window's end, runs on the join operator, whose
    probe floor takes the derivation's steps; the join's output column is a key of the
    query's waterline map of its own (its steps over the boundary's window end)."""
    from app.runtime.planner.waterline_keys import query_waterlines

    composed = compose(compile_text("p.sql", """
CREATE TABLE amounts (rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
                      currency VARCHAR NOT NULL, amount INT NOT NULL) WITH ('topic' = 'a');
CREATE TABLE rates (rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
                    currency VARCHAR NOT NULL, rate DECIMAL(10, 2) NOT NULL,
                    PRIMARY KEY (currency) NOT ENFORCED) WITH ('topic' = 'r');
CREATE LOCAL VIEW daily AS
SELECT currency, SUM(amount) AS amount_sum, window_start AS day_start, window_end AS day
FROM TABLE(TUMBLE(TABLE amounts, DESCRIPTOR(rowtime), INTERVAL '1' DAY))
GROUP BY currency, window_start, window_end EMIT AFTER WATERMARK;
CREATE VIEW opening WITH ('topic' = 'o') AS
SELECT d.day_start, d.currency, d.amount_sum, r.rate FROM daily AS d
JOIN rates FOR SYSTEM_TIME AS OF d.day_start AS r ON d.currency = r.currency;
"""))
    assert composed.refused == ()
    query = composed.physical.query_of("opening")
    keys = query_waterlines(composed.circuit, query)
    inputs = keys.merged[keys.time_source["opening"]]
    (stepped, base), = [(k, keys.derived[k]) for k, _ in inputs if k in keys.derived]
    assert base[0] == "__in_daily.day" and base[1][0].amount == -86_400_000
    assert sorted(k for k, _ in inputs) == sorted([stepped, "__in_rates.rowtime"])


def test_s19_a_time_key_of_a_tables_second_lateness_column_runs_after_a_passthrough() -> None:
    """A GROUP BY on a time attribute derived from a table's second LATENESS column is
    refused in the table's query (Spark's watermark follows the first); a later query reads
    the table passed through a boundary with that column first, the stage's lead."""
    composed = compose(compile_text("p.sql", """
CREATE TABLE orders (placed TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,
                     shipped TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
                     id BIGINT NOT NULL) WITH ('topic' = 'orders');
CREATE VIEW due WITH ('topic' = 'due') AS
SELECT CEIL(shipped TO DAY) AS day, COUNT(*) AS n FROM orders
GROUP BY CEIL(shipped TO DAY) EMIT AFTER WATERMARK;
"""))
    assert composed.refused == ()
    assert composed.boundaries == frozenset({"orders"})
    assert dict(composed.composition.leads) == {"__in_orders": "shipped"}
    table = composed.circuit.table("__in_orders")
    assert [x.column for x in table.lateness] == ["shipped", "placed"]
    assert composed.physical.query_of("due").watermark == "__in_orders.shipped"


def test_s10_s19_every_stage_reading_a_boundary_lists_its_window_start_when_one_leads() -> None:
    """Two stages read one boundary (an updating per-window sum), one by a join, one by a
    window on its start. Both tables read the one topic and its punctuations, so both list
    the start as a LATENESS column (each its own lead first) and the punctuation bounds it;
    before, the start was derived in the first stage's table, the punctuation followed that
    table alone, and the window on the start never completed."""
    from app.runtime.planner.waterline_keys import query_waterlines

    composed = compose(compile_text("p.sql", TWO_TABLES + """
CREATE VIEW sums WITH ('topic' = 'sums', 'format' = 'changelog') AS
SELECT window_start AS ws, window_end AS we, k, SUM(v) AS total
FROM TABLE(TUMBLE(TABLE tb, DESCRIPTOR(ts), INTERVAL '6' SECOND))
GROUP BY window_start, window_end, k EMIT STREAM;
CREATE VIEW joined WITH ('topic' = 'joined', 'format' = 'changelog') AS
SELECT l.k AS k, l.v AS v, r.total AS total FROM ta AS l JOIN sums AS r ON l.k = r.k;
CREATE VIEW per4 WITH ('topic' = 'per4', 'format' = 'append') AS
SELECT window_start AS s4, k, MAX(total) AS top
FROM TABLE(TUMBLE(TABLE sums, DESCRIPTOR(ws), INTERVAL '4' SECOND))
GROUP BY window_start, window_end, k EMIT AFTER WATERMARK;
"""))
    assert composed.refused == ()
    readers = {t.name: [x.column for x in t.lateness] for t in composed.circuit.tables
               if t.stage_input == "sums"}
    assert readers == {"__in_sums": ["we", "ws"], "__in1_sums": ["ws", "we"]}
    query = composed.physical.query_of("sums")
    (punctuation,) = query_waterlines(composed.circuit, query).punctuations
    assert [column for column, _ in punctuation.columns] == ["we", "ws"]


def test_s10_s14_a_window_joins_start_follows_its_sides_window() -> None:
    """The window of a window join's ``window_start`` is its sides' (S10): the join's SELECT
    reads it qualified (``c.window_start``), and the S14 header steps through that window
    (a header of w(ts) itself would be too high)."""
    from app.program.stages import start_window

    circuit = compile_text("p.sql", TWO_TABLES + """
CREATE LOCAL VIEW am AS SELECT * FROM TABLE(TUMBLE(TABLE ta, DESCRIPTOR(ts), INTERVAL '1' MINUTE));
CREATE LOCAL VIEW bm AS SELECT * FROM TABLE(TUMBLE(TABLE tb, DESCRIPTOR(ts), INTERVAL '1' MINUTE));
CREATE VIEW both_ WITH ('topic' = 'both', 'format' = 'append') AS
SELECT a.window_start, a.window_end, a.k, b.v FROM am AS a FULL OUTER JOIN bm AS b
  ON a.window_start = b.window_start AND a.window_end = b.window_end AND a.k = b.k;
""")
    views = {v.name: v for v in circuit.views}
    window = start_window(views, circuit.view("both_"), "window_start")
    assert window is not None and window.size == 60_000
