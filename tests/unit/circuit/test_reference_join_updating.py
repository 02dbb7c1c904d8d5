"""SPEC S16, S18: an INNER join without a time bound (a regular join) of updating views.

Each side holds its rows per key as a Z-set (a retraction takes its row out), and each step
writes, for every key it touched, the pairs after the step less the pairs before,
retractions first (``Join.per_key``, app/circuit/regular_join.py): the pairs written so far
sum to the join of what both sides hold after every step. The join is updating itself:
written as a changelog, and an aggregate over it takes each retraction back.

The tables have LATENESS 30 seconds on ``ts``. Expected changes are written by hand, step
by step; within a step the reference evaluator takes the tables' rows (accepted in the
order the tables are declared) before an aggregate's changes, each retraction before the
insertion that replaces it, and one aggregate's changes before the next one's.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from circuit_builders import at

from app.circuit.explain import explain_text
from app.circuit.ir import Circuit
from app.circuit.reference import StepInput, StepResult, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program

TABLES = """
CREATE TABLE orders (
    ts       TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    customer BIGINT
) WITH ('topic' = 'orders');

CREATE TABLE customers (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    id     BIGINT,
    region VARCHAR NOT NULL
) WITH ('topic' = 'customers');

CREATE LOCAL VIEW per_customer AS
SELECT customer, COUNT(*) AS n FROM orders GROUP BY customer EMIT STREAM;
"""

WITH_TABLE = """
CREATE VIEW enriched WITH ('topic' = 'enriched') AS
SELECT p.customer, p.n, c.region
FROM per_customer AS p JOIN customers AS c ON p.customer = c.id;

CREATE VIEW per_region WITH ('topic' = 'per_region') AS
SELECT region, SUM(n) AS orders, COUNT(*) AS customers FROM enriched GROUP BY region;
"""

WITH_AGGREGATE = """
CREATE LOCAL VIEW regions AS
SELECT id, MAX(region) AS region FROM customers GROUP BY id;

CREATE VIEW enriched WITH ('topic' = 'enriched') AS
SELECT p.customer, p.n, r.region
FROM per_customer AS p JOIN regions AS r ON p.customer = r.id;
"""


def order(clock: str, customer: int | None) -> dict[str, Any]:
    return {"ts": at(clock), "customer": customer}


def customer(clock: str, id_: int | None, region: str) -> dict[str, Any]:
    return {"ts": at(clock), "id": id_, "region": region}


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=text)


def _run(text: str, steps: list[dict[str, list[dict[str, Any]]]]) -> list[StepResult]:
    return evaluate(compile_sql(text), [StepInput(rows, batch_time_ms=1) for rows in steps])


def _changes(result: StepResult, view: str) -> list[tuple[Any, ...]]:
    return [(r.value["undo"], r.value["customer"], r.value["n"], r.value["region"])
            for r in result.outputs[view] if r.value is not None]


def _net(results: list[StepResult], view: str) -> Counter[tuple[Any, ...]]:
    """The sum of every change written so far: each row with its weight, zeros dropped."""
    total: Counter[tuple[Any, ...]] = Counter()
    for result in results:
        for undo, *row in _changes(result, view):
            total[tuple(row)] += -1 if undo else 1
    return +total


def _with_table() -> list[StepResult]:
    return _run(TABLES + WITH_TABLE, [
        {"orders": [order("8:00:01", 1), order("8:00:02", 1), order("8:00:03", 3),
                    order("8:00:04", None)],
         "customers": [customer("8:00:05", 1, "eu"), customer("8:00:06", 2, "us"),
                       customer("8:00:07", None, "eu")]},
        {"orders": [order("8:00:10", 1)]},
        {"orders": [order("8:00:20", 2)], "customers": [customer("8:00:21", 3, "us")]},
        {"customers": [customer("8:00:30", 1, "apac")]},
    ])


def test_s16_s18_an_updating_count_joined_with_a_table_retracts_its_old_pairs() -> None:
    """``enriched`` joins the EMIT STREAM count per customer with the customers table on the
    customer id. A customers row is held from its step on; a count's retraction takes its
    row out of the join's side.

        step  per_customer changes          customers rows          enriched changes
        1     +(NULL 1), +(1 2), +(3 1)     1 eu, 2 us, NULL eu     +(1 2 eu)
        2     -(1 2), +(1 3)                                        -(1 2 eu), +(1 3 eu)
        3     +(2 1)                        3 us                    +(3 1 us), +(2 1 us)
        4                                   1 apac                  +(1 3 apac)

    Step 1: customer 3 has no customers row yet, and the NULL count and the NULL id match
    nothing (a NULL key matches nothing, S16). Step 3: the new customers row of id 3
    matches the count held since step 1. Step 4: a second row of id 1 meets customer 1's
    count now, 3 (its count of 2 left in step 2).
    """
    circuit = compile_sql(TABLES + WITH_TABLE)
    assert circuit.updating("enriched") and circuit.updating("per_region")
    view = circuit.view("enriched")
    assert view.output is not None and view.output.format == "changelog"
    assert view.time_attributes == ()
    assert view.state.kind == "unbounded"
    assert "every row of both sides is kept (retracted rows leave)" in view.state.description
    results = _with_table()
    assert [_changes(r, "enriched") for r in results] == [
        [(False, 1, 2, "eu")],
        [(True, 1, 2, "eu"), (False, 1, 3, "eu")],
        [(False, 3, 1, "us"), (False, 2, 1, "us")],
        [(False, 1, 3, "apac")],
    ]
    # The sum of the changes is the join of the counts now with the customers rows.
    assert _net(results, "enriched") == Counter(
        {(1, 3, "eu"): 1, (3, 1, "us"): 1, (2, 1, "us"): 1, (1, 3, "apac"): 1})
    # The rows held now: each customer's count (NULL's too) and the customers rows; a
    # retracted count leaves.
    assert [r.state_rows["enriched"] for r in results] == [6, 6, 8, 9]


def test_s16_s18_an_aggregate_over_the_join_takes_each_retraction_back() -> None:
    """``per_region`` sums the counts of the join per region (upsert by region):

        step  enriched changes                          eu (orders, customers)  us      apac
        1     +(1 2 eu)                                 2, 1
        2     -(1 2 eu), +(1 3 eu)                      3, 1
        3     +(3 1 us), +(2 1 us)                                              2, 2
        4     +(1 3 apac)                                                               3, 1
    """
    results = _with_table()
    assert [[(r.key, r.value) for r in result.outputs["per_region"]] for result in results] == [
        [({"region": "eu"}, {"region": "eu", "orders": 2, "customers": 1})],
        [({"region": "eu"}, {"region": "eu", "orders": 3, "customers": 1})],
        [({"region": "us"}, {"region": "us", "orders": 2, "customers": 2})],
        [({"region": "apac"}, {"region": "apac", "orders": 3, "customers": 1})],
    ]


def test_s16_s18_a_join_of_two_updating_aggregates_weighs_each_pair_by_both_sides() -> None:
    """``enriched`` joins the count per customer with each customer's region (MAX, an
    updating aggregate without EMIT STREAM: its readers see its changes all the same).

        step  per_customer        regions             enriched changes
        1     +(1 2)              +(1 eu)             +(1 2 eu)
        2     -(1 2), +(1 3)      -(1 eu), +(1 us)    -(1 2 eu), +(1 3 us)

    Step 2: both sides of customer 1 change; the step writes the pair before, retracted,
    and the one pair of the values now, (1 3 us).
    """
    text = TABLES + WITH_AGGREGATE
    results = _run(text, [
        {"orders": [order("8:00:01", 1), order("8:00:02", 1)],
         "customers": [customer("8:00:03", 1, "eu")]},
        {"orders": [order("8:00:10", 1)], "customers": [customer("8:00:11", 1, "us")]},
    ])
    assert [_changes(r, "enriched") for r in results] == [
        [(False, 1, 2, "eu")],
        [(True, 1, 2, "eu"), (False, 1, 3, "us")],
    ]
    assert _net(results[:1], "enriched") == Counter({(1, 2, "eu"): 1})
    assert _net(results, "enriched") == Counter({(1, 3, "us"): 1})


def test_s16_s18_min_over_the_join_reads_a_steps_changes_whatever_their_order() -> None:
    """``least`` takes MIN(n) per customer over the join of the two aggregates: step 2
    retracts (1 2 eu) and inserts (1 3 us), and the values left are those of the one pair
    now."""
    text = TABLES + WITH_AGGREGATE + """
CREATE VIEW least WITH ('topic' = 'least') AS
SELECT customer, MIN(n) AS least, COUNT(*) AS pairs FROM enriched GROUP BY customer;
"""
    results = _run(text, [
        {"orders": [order("8:00:01", 1), order("8:00:02", 1)],
         "customers": [customer("8:00:03", 1, "eu")]},
        {"orders": [order("8:00:10", 1)], "customers": [customer("8:00:11", 1, "us")]},
    ])
    assert [[r.value for r in result.outputs["least"]] for result in results] == [
        [{"customer": 1, "least": 2, "pairs": 1}],
        [{"customer": 1, "least": 3, "pairs": 1}],
    ]


def test_s16_s18_explain_says_the_join_takes_changes_and_keeps_the_rows_held() -> None:
    text = explain_text(compile_sql(TABLES + WITH_TABLE))
    block = text[text.index("view enriched"):text.index("view per_region")]
    assert "REGULAR JOIN (INNER) per_customer AS p, customers AS c; keys p.customer = c.id" \
        in block
    assert "state:        unbounded: every row of both sides is kept (retracted rows " \
        "leave); never freed" in block
    assert "emit:         per key the step touched, its pairs after the step less its " \
        "pairs before, retractions first" in block
    assert "output:       enriched (format changelog" in block
    assert "time:         (no time attribute)" in block


def test_s18_a_join_of_an_updating_view_is_a_changelog() -> None:
    """Written as ``changelog`` only, as any stateless reader of an updating view."""
    for fmt in ("upsert", "append"):
        with pytest.raises(ProgramError, match=f"view enriched reads the updated rows of view "
                                               f"per_customer .* '{fmt}'"):
            compile_sql(TABLES + WITH_TABLE.replace(
                "('topic' = 'enriched')", f"('topic' = 'enriched', 'format' = '{fmt}')"))


def test_s16_s18_interval_joins_of_updating_rows_are_refused() -> None:
    """An interval join (as a window or temporal one) writes each match once, final
    (Flink's read insert-only rows too); an OUTER join without a time bound takes the
    changes (test_reference_outer_join.py)."""
    windowed = TABLES + """
CREATE LOCAL VIEW per_minute AS
SELECT window_end AS we, customer, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, customer EMIT STREAM;
"""
    with pytest.raises(ProgramError) as interval:
        compile_sql(windowed + """
CREATE VIEW v WITH ('topic' = 'v') AS
SELECT m.customer, c.region FROM per_minute AS m JOIN customers AS c
ON m.customer = c.id AND c.ts BETWEEN m.we - INTERVAL '1' MINUTE AND m.we;""")
    found = interval.value.diagnostics[0]
    assert found.message.startswith(
        "unsupported: view v joins view per_minute, whose rows are updated (it aggregates "
        "without EMIT AFTER WATERMARK, or reads such a view), in an interval join")
    assert (found.position.line, found.position.column) == (windowed.count("\n") + 3, 34)
    assert found.fix is not None and "join without a time bound" in found.fix
