"""SPEC S16, S18: an OUTER join without a time bound (a regular OUTER join) is an updating
view. No waterline can prove a row unmatched, so a row without a match is written padded
with NULLs at once and retracted when its first match comes (Flink's -D/+I of the padded
row). Per key, each side's rows so far are a Z-set (a row whose weight sums to 0 leaves);
the view's content of a key is every pair passing the condition, and every row of an outer
side with no match of positive weight, padded; a step writes, for the keys it touched,
content after less content before, retractions first (S8 at every step).

The tables have LATENESS 30 seconds on ``ts``. Expected changes are written by hand, step by
step, as (undo, columns...) in the order written; within a step the reference evaluator
takes the tables' rows (in declared order) before an aggregate's changes.
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
    id       BIGINT NOT NULL,
    customer BIGINT,
    amount   BIGINT
) WITH ('topic' = 'orders');

CREATE TABLE customers (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    id     BIGINT,
    name   VARCHAR NOT NULL,
    credit BIGINT
) WITH ('topic' = 'customers');
"""


def _joined(kind: str, condition: str = "") -> str:
    return TABLES + f"""
CREATE VIEW enriched WITH ('topic' = 'enriched') AS
SELECT o.id AS order_id, o.customer, c.name
FROM orders AS o {kind} JOIN customers AS c ON o.customer = c.id{condition};
"""


def order(clock: str, id_: int, customer: int | None, amount: int = 10) -> dict[str, Any]:
    return {"ts": at(clock), "id": id_, "customer": customer, "amount": amount}


def customer(clock: str, id_: int | None, name: str, credit: int = 100) -> dict[str, Any]:
    return {"ts": at(clock), "id": id_, "name": name, "credit": credit}


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=text)


def _run(text: str, steps: list[dict[str, list[dict[str, Any]]]]) -> list[StepResult]:
    return evaluate(compile_sql(text), [StepInput(rows, batch_time_ms=1) for rows in steps])


def _changes(result: StepResult, view: str, columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
    return [("-" if r.value["undo"] else "+", *(r.value[c] for c in columns))
            for r in result.outputs[view] if r.value is not None]


ENRICHED = ("order_id", "customer", "name")


def _net(results: list[StepResult], view: str, columns: tuple[str, ...]) -> Counter[Any]:
    """The sum of every change written so far: each row with its weight, zeros dropped."""
    total: Counter[tuple[Any, ...]] = Counter()
    for result in results:
        for undo, *row in _changes(result, view, columns):
            total[tuple(row)] += -1 if undo == "-" else 1
    return +total


def test_s16_s18_a_left_join_pads_at_once_and_retracts_on_the_first_match() -> None:
    """``orders LEFT JOIN customers``: customer 7 arrives after its orders.

        step  orders            customers        enriched changes
        1     1 -> 7, 2 -> 7                     +(1 7 NULL), +(2 7 NULL)
        2                       7 ann            -(1 7 NULL), -(2 7 NULL), +(1 7 ann), +(2 7 ann)
        3     3 -> 7            7 bob            +(1 7 bob), +(2 7 bob), +(3 7 ann), +(3 7 bob)

    Step 2 retracts the padded rows before inserting their pairs. Step 3: a second match of
    customer 7 adds its pairs only (the padded rows are gone), and order 3, matched in its
    own step, is never written padded.
    """
    circuit = compile_sql(_joined("LEFT"))
    view = circuit.view("enriched")
    assert circuit.updating("enriched")
    assert view.output is not None and view.output.format == "changelog"
    assert view.time_attributes == ()
    assert view.state.kind == "unbounded"
    assert view.state.description == ("every row of both sides is kept (retracted rows "
                                      "leave); never freed")
    results = _run(_joined("LEFT"), [
        {"orders": [order("8:00:01", 1, 7), order("8:00:02", 2, 7)]},
        {"customers": [customer("8:00:03", 7, "ann")]},
        {"orders": [order("8:00:04", 3, 7)], "customers": [customer("8:00:05", 7, "bob")]},
    ])
    assert _changes(results[0], "enriched", ENRICHED) == [
        ("+", 1, 7, None), ("+", 2, 7, None)]
    assert _changes(results[1], "enriched", ENRICHED) == [
        ("-", 1, 7, None), ("-", 2, 7, None), ("+", 1, 7, "ann"), ("+", 2, 7, "ann")]
    assert Counter(_changes(results[2], "enriched", ENRICHED)) == Counter([
        ("+", 1, 7, "bob"), ("+", 2, 7, "bob"), ("+", 3, 7, "ann"), ("+", 3, 7, "bob")])
    assert results[2].state_rows["enriched"] == 5


def test_s16_s18_a_residual_condition_decides_the_match_and_so_the_padding() -> None:
    """``... ON o.customer = c.id AND o.amount <= c.credit``: a pair is a match only if it
    passes the condition, so an order over the credit of every row of its customer stays
    padded, until a row with enough credit comes.

        step  orders                 customers       enriched changes
        1     1 -> 7 (50), 2 -> 7 (5)                 +(1 7 NULL), +(2 7 NULL)
        2                            7 ann (10)      -(2 7 NULL), +(2 7 ann)
        3                            7 bob (100)     -(1 7 NULL), +(1 7 bob), +(2 7 bob)
    """
    text = _joined("LEFT", " AND o.amount <= c.credit")
    results = _run(text, [
        {"orders": [order("8:00:01", 1, 7, 50), order("8:00:02", 2, 7, 5)]},
        {"customers": [customer("8:00:03", 7, "ann", 10)]},
        {"customers": [customer("8:00:04", 7, "bob", 100)]},
    ])
    assert [_changes(r, "enriched", ENRICHED) for r in results] == [
        [("+", 1, 7, None), ("+", 2, 7, None)],
        [("-", 2, 7, None), ("+", 2, 7, "ann")],
        [("-", 1, 7, None), ("+", 1, 7, "bob"), ("+", 2, 7, "bob")],
    ]


def test_s16_s18_a_full_join_pads_both_sides_until_they_match() -> None:
    """FULL: a customer without orders is padded too, and both padded rows go when they
    match.

        step  orders       customers      enriched changes
        1     1 -> 7       8 cy           +(1 7 NULL), +(NULL NULL cy)
        2     2 -> 8       7 ann          -(1 7 NULL), -(NULL NULL cy), +(1 7 ann), +(2 8 cy)
    """
    results = _run(_joined("FULL"), [
        {"orders": [order("8:00:01", 1, 7)], "customers": [customer("8:00:02", 8, "cy")]},
        {"orders": [order("8:00:03", 2, 8)], "customers": [customer("8:00:04", 7, "ann")]},
    ])
    assert [_changes(r, "enriched", ENRICHED) for r in results] == [
        [("+", 1, 7, None), ("+", None, None, "cy")],
        [("-", None, None, "cy"), ("-", 1, 7, None), ("+", 2, 8, "cy"), ("+", 1, 7, "ann")],
    ]
    assert _net(results, "enriched", ENRICHED) == Counter({(1, 7, "ann"): 1, (2, 8, "cy"): 1})


def test_s16_s18_a_right_join_pads_the_right_side_only() -> None:
    """RIGHT: an order without its customer is not written; a customer without orders is,
    padded, until its first order.

        step  orders       customers      enriched changes
        1     1 -> 7       8 cy           +(NULL NULL cy)
        2     2 -> 8                      -(NULL NULL cy), +(2 8 cy)
    """
    results = _run(_joined("RIGHT"), [
        {"orders": [order("8:00:01", 1, 7)], "customers": [customer("8:00:02", 8, "cy")]},
        {"orders": [order("8:00:03", 2, 8)]},
    ])
    assert [_changes(r, "enriched", ENRICHED) for r in results] == [
        [("+", None, None, "cy")],
        [("-", None, None, "cy"), ("+", 2, 8, "cy")],
    ]


def test_s16_s18_a_null_key_matches_nothing_and_stays_padded() -> None:
    """A NULL key matches nothing, a NULL of the other side included: under FULL both rows
    are padded at once and stay so; under LEFT the customer of NULL id is never written.

        step  orders          customers      FULL changes
        1     1 -> NULL       NULL dee       +(1 NULL NULL), +(NULL NULL dee)
        2     2 -> NULL       NULL eve       +(2 NULL NULL), +(NULL NULL eve)
    """
    steps = [
        {"orders": [order("8:00:01", 1, None)], "customers": [customer("8:00:02", None, "dee")]},
        {"orders": [order("8:00:03", 2, None)], "customers": [customer("8:00:04", None, "eve")]},
    ]
    full = _run(_joined("FULL"), steps)
    assert [_changes(r, "enriched", ENRICHED) for r in full] == [
        [("+", 1, None, None), ("+", None, None, "dee")],
        [("+", 2, None, None), ("+", None, None, "eve")],
    ]
    left = _run(_joined("LEFT"), steps)
    assert [_changes(r, "enriched", ENRICHED) for r in left] == [
        [("+", 1, None, None)], [("+", 2, None, None)]]


COUNTS = TABLES + """
CREATE LOCAL VIEW per_customer AS
SELECT customer, COUNT(*) AS n FROM orders GROUP BY customer EMIT STREAM;

CREATE VIEW listed WITH ('topic' = 'listed') AS
SELECT c.id, c.name, p.n
FROM customers AS c LEFT JOIN per_customer AS p ON c.id = p.customer AND p.n < 3;
"""
LISTED = ("id", "name", "n")


def test_s16_s18_a_match_that_goes_away_brings_the_padded_row_back() -> None:
    """``customers LEFT JOIN`` the EMIT STREAM count per customer, matched while the count
    is below 3: the count's retraction of its old row takes the pair away, and its new row
    fails the condition, so the padded row comes back.

        step  orders     customers   per_customer changes     listed changes
        1                7 ann                                +(7 ann NULL)
        2     7                      +(7 1)                   -(7 ann NULL), +(7 ann 1)
        3     7                      -(7 1), +(7 2)           -(7 ann 1), +(7 ann 2)
        4     7                      -(7 2), +(7 3)           -(7 ann 2), +(7 ann NULL)

    Step 3: the old pair is retracted and the new one inserted in one step; the padded row
    they pass through is never written.
    """
    circuit = compile_sql(COUNTS)
    assert circuit.view("listed").output.format == "changelog"  # type: ignore[union-attr]
    results = _run(COUNTS, [
        {"customers": [customer("8:00:01", 7, "ann")]},
        {"orders": [order("8:00:02", 1, 7)]},
        {"orders": [order("8:00:03", 2, 7)]},
        {"orders": [order("8:00:04", 3, 7)]},
    ])
    assert [_changes(r, "listed", LISTED) for r in results] == [
        [("+", 7, "ann", None)],
        [("-", 7, "ann", None), ("+", 7, "ann", 1)],
        [("-", 7, "ann", 1), ("+", 7, "ann", 2)],
        [("-", 7, "ann", 2), ("+", 7, "ann", None)],
    ]
    assert results[3].state_rows["listed"] == 2  # ann, and the count's one row (7 3)


def test_s16_s18_a_match_inserted_and_retracted_in_one_step_is_never_written() -> None:
    """In one step customer 8 arrives and its count changes from 1 to 2: the customer
    first meets the held (8 1), which the count's retraction then takes away, and (8 2)
    replaces it. Only the content after the step less before is written: neither the pair
    with (8 1) nor the customer padded.

        step  orders     customers   per_customer changes     listed changes
        1     8                      +(8 1)
        2     8          8 bo        -(8 1), +(8 2)           +(8 bo 2)
    """
    results = _run(COUNTS, [
        {"orders": [order("8:00:01", 1, 8)]},
        {"orders": [order("8:00:02", 2, 8)], "customers": [customer("8:00:03", 8, "bo")]},
    ])
    assert [_changes(r, "listed", LISTED) for r in results] == [[], [("+", 8, "bo", 2)]]


def test_s16_s18_explain_says_a_padded_row_is_written_at_once_and_retracted() -> None:
    text = explain_text(compile_sql(_joined("LEFT")))
    assert ("REGULAR JOIN (LEFT OUTER) orders AS o, customers AS c; keys o.customer = c.id; "
            "no time bound; a match is written when its second row arrives; a row without a "
            "match is written padded with NULLs at once and retracted when its first match "
            "comes (S16, S18)") in text
    assert "state:        unbounded: every row of both sides is kept (retracted rows leave); " \
           "never freed" in text


@pytest.mark.parametrize("fmt", ["upsert", "append"])
def test_s16_s18_a_regular_outer_join_is_written_as_a_changelog_only(fmt: str) -> None:
    """Its padded rows are retracted, which 'changelog' writes and 'upsert'/'append'
    cannot (as any reader that passes retractions)."""
    with pytest.raises(ProgramError, match=f"view enriched is a LEFT OUTER join without a "
                                           f"time bound: .* '{fmt}' cannot"):
        compile_sql(_joined("LEFT").replace(
            "('topic' = 'enriched')", f"('topic' = 'enriched', 'format' = '{fmt}')"))


def test_s16_a_regular_outer_join_without_an_equality_key_is_refused() -> None:
    with pytest.raises(ProgramError) as info:
        compile_sql(TABLES + """
CREATE VIEW v WITH ('topic' = 'v') AS
SELECT o.id, c.name FROM orders AS o LEFT JOIN customers AS c ON o.amount <= c.credit;""")
    found = info.value.diagnostics[0]
    assert found.message.startswith("unsupported: a LEFT OUTER join without a time bound "
                                    "needs an equality key")
    assert found.fix is not None and found.fix.startswith("add a key to ON, e.g. o.k = c.k")
    assert (found.position.line, found.position.column) == (TABLES.count("\n") + 3, 38)
