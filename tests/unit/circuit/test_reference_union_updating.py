"""SPEC S17, S18: a UNION ALL with a branch over an updating view passes every branch's
changes on: the rows of an insert-only branch as insertions, the insertions and retractions
of an updating one. The union is updating itself: written as a changelog, read by a filter
that passes the retractions on and by a GROUP BY that takes them back.

The tables ``ev`` and ``clicks`` have LATENESS 30 seconds on ``ts``. Expected changes are
written by hand, step by step; within a step the reference evaluator passes a table's rows
(accepted first) before an aggregate's changes, each retraction before the insertion that
replaces it.
"""

from __future__ import annotations

from typing import Any

import pytest
from circuit_builders import at

from app.circuit.ir import Circuit
from app.circuit.reference import StepInput, StepResult, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program

TABLES = """
CREATE TABLE ev (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    k  VARCHAR NOT NULL
) WITH ('topic' = 'ev');

CREATE TABLE clicks (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    k  VARCHAR NOT NULL
) WITH ('topic' = 'clicks');
"""

COUNT_AND_ROWS = """
CREATE LOCAL VIEW counts AS
SELECT k, COUNT(*) AS n FROM ev GROUP BY k EMIT STREAM;

CREATE VIEW u WITH ('topic' = 'u') AS
SELECT k, n FROM counts
UNION ALL
SELECT k, CAST(100 AS BIGINT) AS n FROM ev WHERE k = 'b';

CREATE VIEW totals WITH ('topic' = 'totals') AS
SELECT k, SUM(n) AS s, COUNT(*) AS parts FROM u GROUP BY k;
"""


def ev(clock: str, k: str = "a") -> dict[str, Any]:
    return {"ts": at(clock), "k": k}


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=text)


def _steps(steps: list[dict[str, list[dict[str, Any]]]]) -> list[StepInput]:
    return [StepInput(rows, batch_time_ms=1) for rows in steps]


def _changes(result: StepResult, view: str, *columns: str) -> list[tuple[Any, ...]]:
    return [(r.value["undo"], *(r.value[c] for c in columns)) for r in result.outputs[view]
            if r.value is not None]


def _upserts(result: StepResult, view: str) -> list[tuple[Any, Any]]:
    return [(r.key, r.value) for r in result.outputs[view]]


def _count_and_rows() -> list[StepResult]:
    circuit = compile_sql(TABLES + COUNT_AND_ROWS)
    return evaluate(circuit, _steps([
        {"ev": [ev("8:00:10"), ev("8:00:20"), ev("8:00:30", "b")]},
        {"ev": [ev("8:00:40"), ev("8:00:50", "b")]},
        {"ev": [ev("8:01:00", "b")]},
    ]))


def test_s17_s18_a_union_of_an_updating_count_and_a_table_passes_every_change_on() -> None:
    """``u`` unites the changes of ``counts`` (an EMIT STREAM count per key) with 100 per
    row of key b, read from the table itself. It is updating, so written as a changelog.

        step  ev            counts changes          u changes
        1     a, a, b       +a 2, +b 1              +b 100, +a 2, +b 1
        2     a, b          -a 2 +a 3, -b 1 +b 2    +b 100, -a 2 +a 3, -b 1 +b 2
        3     b             -b 2 +b 3               +b 100, -b 2 +b 3
    """
    circuit = compile_sql(TABLES + COUNT_AND_ROWS)
    assert circuit.updating("u") and circuit.updating("totals")
    output = circuit.view("u").output
    assert output is not None and output.format == "changelog"
    results = _count_and_rows()
    assert [_changes(r, "u", "k", "n") for r in results] == [
        [(False, "b", 100), (False, "a", 2), (False, "b", 1)],
        [(False, "b", 100), (True, "a", 2), (False, "a", 3), (True, "b", 1), (False, "b", 2)],
        [(False, "b", 100), (True, "b", 2), (False, "b", 3)],
    ]


def test_s17_s18_a_group_by_over_the_union_takes_each_retraction_back() -> None:
    """``totals`` sums ``u`` per key: each retraction of ``counts`` is subtracted, the
    table's rows only added (upsert by key, the default of an aggregate).

        step  u changes                        a (s, parts)   b (s, parts)
        1     +b 100, +a 2, +b 1               2, 1           101, 2
        2     +b 100, -a 2 +a 3, -b 1 +b 2     3, 1           202, 3
        3     +b 100, -b 2 +b 3                3, 1           303, 4  (a unchanged: no record)
    """
    results = _count_and_rows()
    assert [_upserts(r, "totals") for r in results] == [
        [({"k": "a"}, {"k": "a", "s": 2, "parts": 1}),
         ({"k": "b"}, {"k": "b", "s": 101, "parts": 2})],
        [({"k": "a"}, {"k": "a", "s": 3, "parts": 1}),
         ({"k": "b"}, {"k": "b", "s": 202, "parts": 3})],
        [({"k": "b"}, {"k": "b", "s": 303, "parts": 4})],
    ]
    assert [r.state_rows["totals"] for r in results] == [2, 2, 2]


TWO_COUNTS = """
CREATE LOCAL VIEW views_per_key AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k;
CREATE LOCAL VIEW clicks_per_key AS SELECT k, COUNT(*) AS n FROM clicks GROUP BY k;

CREATE LOCAL VIEW both_counts AS
SELECT k, n FROM views_per_key
UNION ALL
SELECT k, n FROM clicks_per_key;

CREATE VIEW histogram WITH ('topic' = 'h') AS
SELECT n, COUNT(*) AS counted FROM both_counts GROUP BY n;
"""


def test_s17_s18_a_histogram_of_a_union_of_two_updating_counts() -> None:
    """Both branches update: ``histogram`` counts the (branch, key) counts per value, each
    branch's retraction taking a count out of its old value's group. A group left with no
    row is deleted (a tombstone), as in SQL's GROUP BY of the current rows.

        step  ev  clicks  views / clicks changes   histogram (n: counted)  upserts
        1     a   a, b    +a 1 / +a 1, +b 1        1: 3                    (1, 3)
        2     a   b       -a 1 +a 2 / -b 1 +b 2    1: 1, 2: 2              (1, 1), (2, 2)
        3     -   a       - / -a 1 +a 2            2: 3                    1 deleted, (2, 3)
    """
    circuit = compile_sql(TABLES + TWO_COUNTS)
    assert circuit.updating("both_counts")
    results = evaluate(circuit, _steps([
        {"ev": [ev("8:00:10")], "clicks": [ev("8:00:10"), ev("8:00:11", "b")]},
        {"ev": [ev("8:00:20")], "clicks": [ev("8:00:21", "b")]},
        {"clicks": [ev("8:00:30")]},
    ]))
    assert [_upserts(r, "histogram") for r in results] == [
        [({"n": 1}, {"n": 1, "counted": 3})],
        [({"n": 1}, {"n": 1, "counted": 1}), ({"n": 2}, {"n": 2, "counted": 2})],
        [({"n": 1}, None), ({"n": 2}, {"n": 2, "counted": 3})],
    ]
    assert [r.state_rows["histogram"] for r in results] == [1, 2, 1]


PER_MINUTE_AND_MARKS = """
CREATE LOCAL VIEW per_min AS
SELECT window_end AS minute_end, k, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, k EMIT STREAM;

CREATE LOCAL VIEW u AS
SELECT minute_end, k, n FROM per_min
UNION ALL
SELECT ts AS minute_end, k, CAST(1 AS BIGINT) AS n FROM clicks;

CREATE VIEW final_ WITH ('topic' = 'f', 'format' = 'append') AS
SELECT minute_end, SUM(n) AS total, COUNT(*) AS parts FROM u
GROUP BY minute_end EMIT AFTER WATERMARK;
"""


def test_s10_s17_s18_an_updating_branch_keeps_its_group_by_time_key_waterline_min() -> None:
    """``per_min``'s ``minute_end`` is a time attribute for its readers (a GROUP BY key of
    the updating aggregate, S10); united with ``clicks.ts`` it stays one, with the smaller
    of the two waterlines (S17). ``final_`` writes a minute once, final, when that minimum
    reaches it: no change of ``per_min`` can reach a minute whose end the waterline of
    ``ev`` has passed, and no row of ``clicks`` below its own waterline.

        step  ev                 clicks     w(ev)    w(clicks)  min      written
        1     a :10, a :20, b :30 a 8:01:00 8:00:00  8:00:30    8:00:00  -
        2     a 8:01:05, b :50   -          8:00:35  8:00:30    8:00:30  -
        3     a 8:01:40          a 8:01:45  8:01:10  8:01:15    8:01:10  (8:01, 5, 3)
        4     a 8:03:00          -          8:02:30  8:01:15    8:01:15  -   (ev alone: 8:02)
        5     -                  b 8:03:00  8:02:30  8:02:30    8:02:30  (8:01:45, 1, 1),
                                                                         (8:02, 2, 1)

    Minute 8:01: a 2 then b 2 (after -b 1 +b 2) from ``per_min``, 1 from the click at 8:01:00
    (5 from 3 rows); minute 8:02 is a's count 2 (after -a 1 +a 2).
    """
    circuit = compile_sql(TABLES + PER_MINUTE_AND_MARKS)
    (attribute,) = circuit.view("u").time_attributes
    assert attribute.column == "minute_end"
    assert {(a.table, a.kind) for a in attribute.merged} == {
        ("ev", "window_end"), ("clicks", "forwarded")}
    results = evaluate(circuit, _steps([
        {"ev": [ev("8:00:10"), ev("8:00:20"), ev("8:00:30", "b")], "clicks": [ev("8:01:00")]},
        {"ev": [ev("8:01:05"), ev("8:00:50", "b")]},
        {"ev": [ev("8:01:40")], "clicks": [ev("8:01:45")]},
        {"ev": [ev("8:03:00")]},
        {"clicks": [ev("8:03:00", "b")]},
    ]))
    assert [r.view_waterlines["final_"] for r in results] == [
        at("8:00:00"), at("8:00:30"), at("8:01:10"), at("8:01:15"), at("8:02:30")]
    assert [[r.value for r in result.outputs["final_"]] for result in results] == [
        [],
        [],
        [{"minute_end": at("8:01"), "total": 5, "parts": 3}],
        [],
        [{"minute_end": at("8:01:45"), "total": 1, "parts": 1},
         {"minute_end": at("8:02"), "total": 2, "parts": 1}],
    ]


DELAYED = """
CREATE LOCAL VIEW per_min AS
SELECT window_end AS minute_end, k, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, k EMIT AFTER DELAY INTERVAL '1' MINUTE;

CREATE LOCAL VIEW u AS
SELECT minute_end, k, n FROM per_min
UNION ALL
SELECT ts AS minute_end, k, CAST(1 AS BIGINT) AS n FROM clicks;
"""


def test_s10_s17_a_branch_over_a_view_that_holds_its_changes_has_no_time_attribute() -> None:
    """A view that holds its changes (EMIT AFTER DELAY) gives its readers no time attribute
    (S10, S11): the union has none at that column, so an AFTER WATERMARK aggregate of it
    by that column is refused."""
    circuit = compile_sql(TABLES + DELAYED)
    assert circuit.view("u").time_attributes == ()
    with pytest.raises(ProgramError, match="holds its changes back"):
        compile_sql(TABLES + DELAYED + """
CREATE VIEW final_ WITH ('topic' = 'f', 'format' = 'append') AS
SELECT minute_end, SUM(n) AS total FROM u GROUP BY minute_end EMIT AFTER WATERMARK;
""")


def test_s18_an_updating_union_is_a_changelog_and_cannot_be_windowed_joined_or_ranked() -> None:
    """Written as ``changelog`` only; and what cannot read updating rows yet (a window,
    an OUTER join, OVER, a ranking) refuses the union as it refuses any updating view."""
    local = COUNT_AND_ROWS.replace("CREATE VIEW u WITH ('topic' = 'u')", "CREATE LOCAL VIEW u")
    for fmt in ("upsert", "append"):
        with pytest.raises(ProgramError, match=f"view u reads the updated rows of view counts "
                                               f"and passes their retractions on .* '{fmt}'"):
            compile_sql(TABLES + COUNT_AND_ROWS.replace(
                "('topic' = 'u')", f"('topic' = 'u', 'format' = '{fmt}')"))
    # A window aggregate needs a time attribute of the union (none here: k is a key).
    with pytest.raises(ProgramError, match="column k is not a time attribute"):
        compile_sql(TABLES + local + """
CREATE VIEW w WITH ('topic' = 'w') AS
SELECT window_end, COUNT(*) AS c FROM TABLE(TUMBLE(TABLE u, DESCRIPTOR(k), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end;""")
    with pytest.raises(ProgramError, match="ranks or runs OVER view u, whose rows are updated"):
        compile_sql(TABLES + local + """
CREATE VIEW o WITH ('topic' = 'o') AS
SELECT k, n, SUM(n) OVER (PARTITION BY k ORDER BY n) AS s FROM u;""")
    # An OUTER join without a time bound takes its changes (S16, S18), as a changelog.
    joined = compile_sql(TABLES + local + """
CREATE VIEW j WITH ('topic' = 'j') AS
SELECT e.ts, u.n FROM ev AS e LEFT JOIN u ON e.k = u.k;""")
    output = joined.view("j").output
    assert output is not None and output.format == "changelog"
