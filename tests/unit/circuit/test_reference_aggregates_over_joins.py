"""SPEC S16, S18: a query that joins and then aggregates, is DISTINCT or runs OVER, in one
SELECT, as Flink SQL users write it (``SELECT c.region, SUM(o.amount) FROM orders o JOIN
customers c ON ... GROUP BY c.region``).

The compiler plans it as a user of an engine without the form would write it by hand: the
joined rows (the query's WHERE included) are a generated local view, ``<view>.o_join_c``,
each column named ``alias__column``, and the rest of the query reads that view (ADR 0031).
So each test checks two things: the rows written by hand, step by step, and that the
program gives exactly the rows of its hand-split twin (a LOCAL VIEW of the join and a view
aggregating it).

The tables have LATENESS 0 seconds on ``ts``; the rows of a step are accepted in the order
the tables are declared.
"""

from __future__ import annotations

from typing import Any

import pytest
from circuit_builders import at

from app.circuit.ir import Circuit
from app.circuit.reference import StepInput, StepResult, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.compose import compose

TABLES = """
CREATE TABLE orders (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    cid    INT NOT NULL,
    amount INT NOT NULL
) WITH ('topic' = 'orders');

CREATE TABLE customers (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    id     INT NOT NULL,
    region VARCHAR NOT NULL
) WITH ('topic' = 'customers');

CREATE TABLE regions (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    name    VARCHAR NOT NULL,
    manager VARCHAR NOT NULL
) WITH ('topic' = 'regions');
"""

PER_REGION = """
CREATE VIEW per_region WITH ('topic' = 'per_region') AS
SELECT c.region, SUM(o.amount) AS total, COUNT(*) AS n
FROM orders o JOIN customers c ON o.cid = c.id
WHERE o.amount > 0
GROUP BY c.region;
"""

PER_REGION_BY_HAND = """
CREATE LOCAL VIEW joined AS
SELECT c.region, o.amount FROM orders o JOIN customers c ON o.cid = c.id WHERE o.amount > 0;

CREATE VIEW per_region WITH ('topic' = 'per_region') AS
SELECT region, SUM(amount) AS total, COUNT(*) AS n FROM joined GROUP BY region;
"""


def order(clock: str, cid: int, amount: int) -> dict[str, Any]:
    return {"ts": at(clock), "cid": cid, "amount": amount}


def customer(clock: str, id_: int, region: str) -> dict[str, Any]:
    return {"ts": at(clock), "id": id_, "region": region}


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=text)


def run(text: str, steps: list[dict[str, list[dict[str, Any]]]]) -> list[StepResult]:
    return evaluate(compile_sql(text), [StepInput(rows, batch_time_ms=1) for rows in steps])


def written(results: list[StepResult], view: str) -> list[list[dict[str, Any] | None]]:
    return [[None if r.value is None else dict(r.value) for r in result.outputs[view]]
            for result in results]


ORDERS_STEPS = [
    {"orders": [order("8:00:01", 1, 10), order("8:00:02", 2, 5), order("8:00:03", 1, -3)],
     "customers": [customer("8:00:04", 1, "eu"), customer("8:00:05", 2, "us")]},
    {"orders": [order("8:00:10", 1, 7)], "customers": [customer("8:00:11", 3, "eu")]},
    {"orders": [order("8:00:20", 3, 4), order("8:00:21", 4, 9)]},
]


def test_s16_s18_an_aggregate_over_a_join_in_one_select() -> None:
    """Flink's commonest CDC-free join aggregate, written in one SELECT:

        step  joined rows (WHERE o.amount > 0)     per_region (upsert by region)
        1     (eu 10), (us 5); (1, -3) filtered    eu 10 1, us 5 1
        2     (eu 7)                               eu 17 2
        3     (eu 4): customer 3 is in eu;         eu 21 3
              order of customer 4 matches nothing
    """
    circuit = compile_sql(TABLES + PER_REGION)
    assert circuit.view("per_region.o_join_c").output is None  # local
    assert circuit.view("per_region").output is not None
    results = run(TABLES + PER_REGION, ORDERS_STEPS)
    assert written(results, "per_region") == [
        [{"region": "eu", "total": 10, "n": 1}, {"region": "us", "total": 5, "n": 1}],
        [{"region": "eu", "total": 17, "n": 2}],
        [{"region": "eu", "total": 21, "n": 3}],
    ]
    assert written(results, "per_region") == written(
        run(TABLES + PER_REGION_BY_HAND, ORDERS_STEPS), "per_region")


def test_s19_spark_runs_the_aggregate_over_a_join_across_a_stage_boundary() -> None:
    """The Spark runtime runs it as it runs the hand-split program: the joined rows are a
    stage boundary that the aggregate reads (ADR 0023); nothing is refused."""
    composed = compose(compile_sql(TABLES + PER_REGION))
    assert composed.refused == ()
    assert "per_region.o_join_c" in composed.boundaries


NEXMARK_Q4_FORM = """
CREATE VIEW per_minute WITH ('topic' = 'per_minute') AS
SELECT DATE_TRUNC('MINUTE', o.ts) AS minute, c.region, SUM(o.amount) AS total
FROM orders o, customers c
WHERE o.cid = c.id AND c.ts BETWEEN o.ts - INTERVAL '1' MINUTE AND o.ts
GROUP BY DATE_TRUNC('MINUTE', o.ts), c.region
EMIT AFTER WATERMARK;
"""


def test_s16_s10_a_windowed_aggregate_over_an_interval_join_in_a_from_list() -> None:
    """NEXMark Q4's form: two relations in FROM, the join condition in WHERE (an interval
    join: the customer row at most a minute before the order), grouped by the order's
    minute, a time attribute derived from the join's ``o.ts`` (S10). Each minute is
    written once, final, when w = min(w(orders.ts), w(customers.ts)) passes its end.

        step  rows                                     w(orders), w(customers)   written
        1     c1 eu 8:00:00, o(1, 10) 8:00:30,         8:00:30, 8:00:00          -
              o(1, 2) 8:01:20 (c1 is 80 s earlier:
              no pair yet; the order is held)
        2     c1 eu 8:01:10, o(1, 5) 8:01:40:          8:01:40, 8:01:10          [8:00 eu 10]
              the new c1 pairs with both orders
              of 8:01 (2 + 5)
        3     c2 us 8:02:30, o(2, 1) 8:02:40           8:02:40, 8:02:30          [8:01 eu 7]
    """
    results = run(TABLES + NEXMARK_Q4_FORM, [
        {"orders": [order("8:00:30", 1, 10), order("8:01:20", 1, 2)],
         "customers": [customer("8:00:00", 1, "eu")]},
        {"orders": [order("8:01:40", 1, 5)], "customers": [customer("8:01:10", 1, "eu")]},
        {"orders": [order("8:02:40", 2, 1)], "customers": [customer("8:02:30", 2, "us")]},
    ])
    assert written(results, "per_minute") == [
        [],
        [{"minute": at("8:00"), "region": "eu", "total": 10}],
        [{"minute": at("8:01"), "region": "eu", "total": 7}],
    ]


CHAIN = """
CREATE VIEW per_manager WITH ('topic' = 'per_manager') AS
SELECT r.manager, COUNT(*) AS orders, SUM(amount) AS total
FROM orders o JOIN customers c ON o.cid = c.id JOIN regions r ON c.region = r.name
GROUP BY r.manager;
"""


def test_s16_an_aggregate_over_a_join_chain() -> None:
    """Three relations, then GROUP BY: the chain's first join is its own generated view
    (as for any chain), the join of all three another, and the aggregate reads that one.
    A bare ``amount`` names the one relation's column that has it.

        step  rows                                   per_manager
        1     o(1, 10), c1 eu, eu -> ann             ann 1 10
        2     o(1, 3), o(2, 8), c2 us, us -> bob     ann 2 13, bob 1 8
    """
    circuit = compile_sql(TABLES + CHAIN)
    assert {"per_manager.o_join_c", "per_manager.o_join_c_join_r"} <= {
        v.name for v in circuit.views}
    results = run(TABLES + CHAIN, [
        {"orders": [order("8:00:01", 1, 10)], "customers": [customer("8:00:02", 1, "eu")],
         "regions": [{"ts": at("8:00:03"), "name": "eu", "manager": "ann"}]},
        {"orders": [order("8:00:10", 1, 3), order("8:00:11", 2, 8)],
         "customers": [customer("8:00:12", 2, "us")],
         "regions": [{"ts": at("8:00:13"), "name": "us", "manager": "bob"}]},
    ])
    assert written(results, "per_manager") == [
        [{"manager": "ann", "orders": 1, "total": 10}],
        [{"manager": "ann", "orders": 2, "total": 13},
         {"manager": "bob", "orders": 1, "total": 8}],
    ]


OUTER = """
CREATE VIEW orders_per_customer WITH ('topic' = 'orders_per_customer') AS
SELECT c.id, COUNT(o.cid) AS orders
FROM customers c LEFT JOIN orders o ON o.cid = c.id
GROUP BY c.id;
"""


def test_s16_s18_a_count_over_a_left_join_takes_the_padded_row_back() -> None:
    """A LEFT JOIN writes a customer without orders at once, padded with NULLs, and
    retracts that row when its first order comes (S16); the count over it takes the
    retraction back (S18), as Flink's retracting aggregate does.

        step  join changes                          orders_per_customer (upsert by id)
        1     +(1 NULL)                             1: 0
        2     -(1 NULL), +(1 o1)                    1: 1
        3     +(1 o2), +(2 NULL)                    1: 2, 2: 0
    """
    results = run(TABLES + OUTER, [
        {"customers": [customer("8:00:01", 1, "eu")]},
        {"orders": [order("8:00:10", 1, 10)]},
        {"orders": [order("8:00:20", 1, 3)], "customers": [customer("8:00:21", 2, "us")]},
    ])
    assert written(results, "orders_per_customer") == [
        [{"id": 1, "orders": 0}],
        [{"id": 1, "orders": 1}],
        [{"id": 1, "orders": 2}, {"id": 2, "orders": 0}],
    ]


DISTINCT = """
CREATE VIEW buying_regions WITH ('topic' = 'buying_regions') AS
SELECT DISTINCT c.region, o.ts
FROM orders o JOIN customers c
  ON o.cid = c.id AND c.ts BETWEEN o.ts - INTERVAL '1' MINUTE AND o.ts;
"""


def test_s16_select_distinct_over_a_join() -> None:
    """DISTINCT over the joined rows, as a GROUP BY of its columns: the two orders of eu at
    8:00:30 are one row; the order at 8:01:00 is another."""
    results = run(TABLES + DISTINCT, [
        {"orders": [order("8:00:30", 1, 10), order("8:00:30", 2, 5)],
         "customers": [customer("8:00:00", 1, "eu"), customer("8:00:01", 2, "eu")]},
        {"orders": [order("8:01:00", 1, 1)], "customers": [customer("8:00:59", 1, "eu")]},
    ])
    rows = [row for step in written(results, "buying_regions") for row in step]
    assert rows == [{"region": "eu", "ts": at("8:00:30")}, {"region": "eu", "ts": at("8:01:00")}]


# -- errors (L7) ---------------------------------------------------------------------------


def rejected(text: str) -> tuple[int, int, str, str]:
    with pytest.raises(ProgramError) as info:
        compile_sql(TABLES + text)
    first = info.value.diagnostics[0]
    return first.position.line, first.position.column, first.message, first.fix or ""


LINE = TABLES.count("\n") + 2  # the query's first line (after CREATE VIEW ... AS)


@pytest.mark.parametrize(("query", "where", "message", "fix"), [
    ("SELECT c.region, o.cid, COUNT(*) AS n FROM orders o JOIN customers c ON o.cid = c.id "
     "GROUP BY c.region", (0, 18),
     "column o.cid must appear in GROUP BY or be used in an aggregate function",
     "add o.cid to GROUP BY"),
    ("SELECT ts, COUNT(*) AS n FROM orders o JOIN customers c ON o.cid = c.id GROUP BY ts",
     (0, 8), "ambiguous column ts: both sides of the join have it", "qualify it: o.ts or c.ts"),
    ("SELECT c.regoin, COUNT(*) AS n FROM orders o JOIN customers c ON o.cid = c.id "
     "GROUP BY c.regoin", (0, 8), "unknown column regoin in c", "did you mean c.region?"),
    ("SELECT x.region, COUNT(*) AS n FROM orders o JOIN customers c ON o.cid = c.id "
     "GROUP BY x.region", (0, 8), "unknown table or view alias x in x.region",
     "the relations of the join are o, c"),
    ("SELECT o.cid, ARG_MAX(c.region, c.ts) AS r FROM orders o LEFT JOIN customers c "
     "ON o.cid = c.id GROUP BY o.cid", (0, 15),
     "unsupported: ARG_MAX in view v, over the updated rows of the join",
     "select MAX/MIN of the value and join it back"),
    ("SELECT * FROM (SELECT o.ts, c.region, ROW_NUMBER() OVER (PARTITION BY c.region "
     "ORDER BY o.amount DESC) AS rn FROM orders o JOIN customers c ON o.cid = c.id) "
     "WHERE rn <= 2", (0, 39),
     "unsupported: ROW_NUMBER() OVER (...) over rows of no window (the join has no window "
     "columns)", "PARTITION BY window_start, window_end"),
])
def test_l7_errors_over_a_join_name_the_sql_as_written(
        query: str, where: tuple[int, int], message: str, fix: str) -> None:
    """L7: an error in the part of the query over the join points at the SQL as written and
    names its columns as written (``o.cid``), never the generated view's (``o__cid``), and
    no fix asks for an EMIT on a view the query does not have."""
    line, column, found, found_fix = rejected(
        f"CREATE VIEW v WITH ('topic' = 'v') AS\n{query};")
    assert (line, column) == (LINE + where[0], where[1]), found
    assert found.startswith(message), found
    assert fix in found_fix, found_fix
    assert "__" not in found + found_fix and "EMIT" not in found_fix
