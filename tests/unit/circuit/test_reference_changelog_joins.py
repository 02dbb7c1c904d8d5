"""A regular join of a changelog table (SPEC S16, S18; ADR 0030): an INNER join without a
time bound reads the table as every other reader does, its latest row per key (the
generated view ``<table>.latest``), so the join is one of an updating relation and writes
a changelog, as Flink's regular join of a ``debezium-json`` table does.

The Debezium events are real event bytes (the JsonConverter's, without schemas), decoded
by the table's gate. Expectations are computed by hand: an order whose customer does not
exist yet pairs with nothing, and pairs when the customer is created; an update that
moves the customer's region retracts the order's pair and writes it again with the new
region; a delete retracts it (its tombstone changes nothing more); a re-create writes the
pairs of every order of the customer held since. Within a step the reference evaluator
takes the tables' rows before the latest view's changes (an aggregate's), each retraction
before the insertion that replaces it.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from app.circuit.ir import Circuit
from app.circuit.reference import Deletion, StepInput, StepResult, evaluate
from app.connectors.late_gate import LateGate
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec
from app.runtime.planner.compose import compose

NOW = 1_800_000_000_000

CUSTOMERS = """
CREATE TABLE customers (
    changed TIMESTAMP NOT NULL METADATA FROM 'value.source.timestamp'
            LATENESS INTERVAL '1' SECOND,
    id      BIGINT NOT NULL,
    region  VARCHAR NOT NULL,
    name    VARCHAR,
    PRIMARY KEY (id) NOT ENFORCED
) WITH ('topic' = 'customers', 'format' = 'debezium-json');
"""

ORDERS = """
CREATE TABLE orders (
    ts       TIMESTAMP NOT NULL LATENESS INTERVAL '30' SECOND,
    id       BIGINT NOT NULL,
    customer BIGINT,
    amount   BIGINT NOT NULL
) WITH ('topic' = 'orders', 'format' = 'json');
"""

ENRICHED = CUSTOMERS + ORDERS + """
CREATE VIEW enriched WITH ('topic' = 'enriched') AS
SELECT o.id, o.amount, c.region FROM orders AS o JOIN customers AS c ON o.customer = c.id;

CREATE VIEW per_region WITH ('topic' = 'per_region', 'format' = 'changelog') AS
SELECT region, SUM(amount) AS amount, COUNT(*) AS orders FROM enriched GROUP BY region;
"""


def event(op: str, seconds: int, before: Any = None, after: Any = None,
          table: str = "customers") -> bytes:
    """A Debezium change event as the JsonConverter writes it without schemas."""
    return json.dumps({"before": before, "after": after, "op": op,
                       "source": {"ts_ms": seconds * 1_000, "db": "shop", "table": table},
                       "ts_ms": seconds * 1_000 + 5}).encode()


def customer(id_: int, region: str) -> dict[str, Any]:
    return {"id": id_, "region": region, "name": f"c{id_}"}


def order(seconds: int, id_: int, customer_id: int | None, amount: int) -> dict[str, Any]:
    return {"ts": seconds * 1_000, "id": id_, "customer": customer_id, "amount": amount}


def decoded(gate: LateGate, values: list[bytes | None]) -> list[Any]:
    """The gate's rows and deletions of a step's records, as the source hands them on
    (a tombstone after a delete event is skipped: ADR 0028)."""
    out: list[Any] = []
    for value in values:
        verdict = gate.classify(value, None)
        if verdict.kind == "ok":
            out.append(verdict.row)
        elif verdict.kind == "delete":
            assert verdict.row is not None
            out.append(Deletion(verdict.row))
        else:
            assert verdict.kind == "skipped", verdict
    return out


def run(circuit: Circuit, steps: list[dict[str, list[Any]]]) -> list[StepResult]:
    """Each step's records: a changelog table's as event bytes through its gate (which
    only decodes here: the reference gates rows itself), any other table's as rows."""
    gates = {t.name: LateGate(source_spec(t), {}, NOW) for t in circuit.tables if t.changelog}
    return evaluate(circuit, [
        StepInput({table: decoded(gates[table], records) if table in gates else records
                   for table, records in step.items()})
        for step in steps])


def changes(result: StepResult, view: str, *columns: str) -> list[tuple[Any, ...]]:
    return [(bool((r.value or {})["undo"]), *((r.value or {})[c] for c in columns))
            for r in result.outputs[view]]


def net(result: StepResult, view: str, *columns: str) -> Counter[tuple[Any, ...]]:
    """A step's changes summed: each row with its weight, zeros dropped."""
    total: Counter[tuple[Any, ...]] = Counter()
    for undo, *row in changes(result, view, *columns):
        total[tuple(row)] += -1 if undo else 1
    return Counter({row: n for row, n in total.items() if n})


#: Orders (times in seconds) and customers' change events, step by step.
STEPS: list[dict[str, list[Any]]] = [
    # Order 1 of customer 1, who does not exist yet; customer 2 is created.
    {"orders": [order(10, 1, 1, 10)],
     "customers": [event("c", 10, after=customer(2, "north"))]},
    # Customer 1 is created; order 2 of customer 2.
    {"orders": [order(20, 2, 2, 20)],
     "customers": [event("c", 20, after=customer(1, "north"))]},
    # Customer 1 moves from north to south.
    {"customers": [event("u", 30, before=customer(1, "north"),
                         after=customer(1, "south"))]},
    # Customer 2 is deleted, and its tombstone follows.
    {"customers": [event("d", 40, before=customer(2, "north")), None]},
    # Order 3 of the deleted customer 2, and one with no customer.
    {"orders": [order(45, 3, 2, 30), order(46, 4, None, 40)]},
    # Customer 2 is created again, in east.
    {"customers": [event("c", 50, after=customer(2, "east"))]},
]


def test_s16_s18_a_regular_join_of_a_debezium_table_pairs_each_order_with_the_latest_row(
) -> None:
    """
        step  orders         customers           enriched changes
        1     1 (cust 1)     c 2 north           (none: customer 1 does not exist)
        2     2 (cust 2)     c 1 north           +(2 20 north), +(1 10 north)
        3                    u 1 north -> south  -(1 10 north), +(1 10 south)
        4                    d 2, tombstone      -(2 20 north)
        5     3 (cust 2),                        (none)
              4 (no cust)
        6                    c 2 east            +(2 20 east), +(3 30 east)

    Step 2: order 2's row comes first and finds customer 2's latest row (held since step
    1); customer 1's change then finds order 1, held since step 1. Step 4: the deletion's
    retraction takes customer 2's row out of the join's side (S18: each side's rows per
    key, ``Join.per_key``), so in step 5 order 3 finds no customer 2, and order 4's NULL
    key matches nothing. Each step writes, per key it touched, the pairs after less the
    pairs before, retractions first.
    """
    circuit = compile_program("p.sql", text=ENRICHED)
    view = circuit.view("enriched")
    assert view.sources == ("orders", "customers.latest")
    assert circuit.updating("enriched") and view.time_attributes == ()
    assert view.output is not None and view.output.format == "changelog"
    results = run(circuit, STEPS)
    assert [changes(r, "enriched", "id", "amount", "region") for r in results] == [
        [],
        [(False, 2, 20, "north"), (False, 1, 10, "north")],
        [(True, 1, 10, "north"), (False, 1, 10, "south")],
        [(True, 2, 20, "north")],
        [],
        [(False, 2, 20, "east"), (False, 3, 30, "east")],
    ]
    assert all(not r.dead_letters for r in results)
    # The join holds each side's rows now: orders 1-4 and customers 1 and 2.
    assert results[-1].state_rows["enriched"] == 6
    # The latest row per key holds both customers (2 deleted and created again).
    assert results[-1].state_rows["customers.latest"] == 2


def test_s18_an_aggregate_over_the_join_takes_each_retraction_back() -> None:
    """``per_region`` sums the join's orders per region:

        step  per_region changes (region, amount, orders)
        2     +(north 30 2)
        3     -(north 30 2), +(north 20 1), +(south 10 1)
        4     -(north 20 1)
        6     +(east 50 2)
    """
    results = run(compile_program("p.sql", text=ENRICHED), STEPS)
    assert [changes(r, "per_region", "region", "amount", "orders") for r in results] == [
        [],
        [(False, "north", 30, 2)],
        [(True, "north", 30, 2), (False, "north", 20, 1), (False, "south", 10, 1)],
        [(True, "north", 20, 1)],
        [],
        [(False, "east", 50, 2)],
    ]


def test_s16_the_table_joined_first_writes_the_same_pairs() -> None:
    """The changelog table on the left (FROM) or the right (JOIN) of the join reads the
    same latest rows: the same changes each step, in another order within a step."""
    program = CUSTOMERS + ORDERS + """
CREATE VIEW enriched WITH ('topic' = 'enriched') AS
SELECT o.id, o.amount, c.region FROM customers AS c JOIN orders AS o ON c.id = o.customer;
"""
    circuit = compile_program("p.sql", text=program)
    assert circuit.view("enriched").sources == ("customers.latest", "orders")
    first = run(compile_program("p.sql", text=ENRICHED), STEPS)
    second = run(circuit, STEPS)
    assert [Counter(changes(r, "enriched", "id", "amount", "region")) for r in second] == [
        Counter(changes(r, "enriched", "id", "amount", "region")) for r in first]


def test_s16_s18_a_self_join_of_a_changelog_table_pairs_customers_of_one_region() -> None:
    """Both sides read the one latest view, each holding its rows per key:

        step  customers                    pairs (a, b, region), a < b, net change
        1     c 1 north, c 2 north,        +(1 2 north)
              c 3 south
        2     u 2 north -> south           -(1 2 north), +(2 3 south)
        3     d 1                          (none: customer 1 is alone in north)
        4     c 1 south                    +(1 2 south), +(1 3 south)
    """
    circuit = compile_program("p.sql", text=CUSTOMERS + """
CREATE VIEW neighbours WITH ('topic' = 'neighbours') AS
SELECT c.id AS a, d.id AS b, c.region FROM customers AS c JOIN customers AS d
ON c.region = d.region AND c.id < d.id;
""")
    assert circuit.view("neighbours").sources == ("customers.latest", "customers.latest")
    results = run(circuit, [
        {"customers": [event("c", 10, after=customer(1, "north")),
                       event("c", 10, after=customer(2, "north")),
                       event("c", 10, after=customer(3, "south"))]},
        {"customers": [event("u", 20, before=customer(2, "north"),
                             after=customer(2, "south"))]},
        {"customers": [event("d", 30, before=customer(1, "north")), None]},
        {"customers": [event("c", 40, after=customer(1, "south"))]},
    ])
    assert [net(r, "neighbours", "a", "b", "region") for r in results] == [
        Counter({(1, 2, "north"): 1}),
        Counter({(1, 2, "north"): -1, (2, 3, "south"): 1}),
        Counter(),
        Counter({(1, 2, "south"): 1, (1, 3, "south"): 1}),
    ]


def test_s16_s18_a_join_of_two_changelog_tables_follows_both_latest_rows() -> None:
    """``regions`` is a second Debezium table, keyed by its code:

        step  customers           regions               staffed changes (id, manager)
        1     c 1 north           c north ann           +(1 ann)
        2                         u north ann -> bob    -(1 ann), +(1 bob)
        3     u 1 north -> south                        -(1 bob)
        4                         c south cy            +(1 cy)
        5                         d south, tombstone    -(1 cy)

    Step 3: customer 1 leaves north, whose region row is bob's now (ann's was taken out
    of the join's side in step 2), and south has no row yet.
    """
    regions = """
CREATE TABLE regions (
    changed TIMESTAMP NOT NULL METADATA FROM 'value.source.timestamp'
            LATENESS INTERVAL '1' SECOND,
    code    VARCHAR NOT NULL,
    manager VARCHAR NOT NULL,
    PRIMARY KEY (code) NOT ENFORCED
) WITH ('topic' = 'regions', 'format' = 'debezium-json');

CREATE VIEW staffed WITH ('topic' = 'staffed') AS
SELECT c.id, r.manager FROM customers AS c JOIN regions AS r ON c.region = r.code;
"""
    circuit = compile_program("p.sql", text=CUSTOMERS + regions)
    assert circuit.view("staffed").sources == ("customers.latest", "regions.latest")

    def region(code: str, manager: str) -> dict[str, Any]:
        return {"code": code, "manager": manager}

    results = run(circuit, [
        {"customers": [event("c", 10, after=customer(1, "north"))],
         "regions": [event("c", 10, after=region("north", "ann"), table="regions")]},
        {"regions": [event("u", 20, before=region("north", "ann"),
                           after=region("north", "bob"), table="regions")]},
        {"customers": [event("u", 30, before=customer(1, "north"),
                             after=customer(1, "south"))]},
        {"regions": [event("c", 40, after=region("south", "cy"), table="regions")]},
        {"regions": [event("d", 50, before=region("south", "cy"), table="regions"), None]},
    ])
    assert [changes(r, "staffed", "id", "manager") for r in results] == [
        [(False, 1, "ann")],
        [(True, 1, "ann"), (False, 1, "bob")],
        [(True, 1, "bob")],
        [(False, 1, "cy")],
        [(True, 1, "cy")],
    ]


def test_s16_s18_flinks_cdc_join_ports_as_written() -> None:
    """Flink's enrichment of an insert-only stream by a CDC table, INSERT INTO a
    ``debezium-json`` Kafka table (Flink's way to write a changelog), compiles as written:
    the join reads the latest row per key and writes a changelog."""
    circuit = compile_program("flink.sql", text="""
CREATE TABLE orders (
    id BIGINT, customer BIGINT, amount DECIMAL(10, 2), ts TIMESTAMP(3),
    WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'orders', 'format' = 'json');
CREATE TABLE customers (
    id BIGINT, name STRING, region STRING, PRIMARY KEY (id) NOT ENFORCED
) WITH ('connector' = 'kafka', 'topic' = 'customers', 'format' = 'debezium-json');
CREATE TABLE enriched (id BIGINT, amount DECIMAL(10, 2), region STRING)
WITH ('connector' = 'kafka', 'topic' = 'enriched', 'format' = 'debezium-json');
INSERT INTO enriched
SELECT o.id, o.amount, c.region FROM orders o JOIN customers c ON o.customer = c.id;
""")
    assert circuit.dialect == "flink"
    view = circuit.view("enriched")
    assert view.sources == ("orders", "customers.latest")
    assert view.output is not None and view.output.format == "changelog"
    # On Spark: the latest rows in the table's query, the join in a later one (ADR 0023).
    composed = compose(circuit)
    assert composed.refused == ()
    assert composed.boundaries == {"orders", "customers.latest"}


LEFT = CUSTOMERS + ORDERS + """
CREATE VIEW enriched WITH ('topic' = 'enriched') AS
SELECT o.id, o.amount, c.region FROM orders AS o LEFT JOIN customers AS c ON o.customer = c.id;
"""


def test_s16_s18_a_left_join_of_a_debezium_table_pads_orders_without_a_customer() -> None:
    """Flink's CDC enrichment as a LEFT JOIN: an order without its customer's latest row is
    written padded with NULLs at once, and retracted when the customer comes, moves or goes
    (S16, S18; per key, each step's rows after less its rows before, retractions first):

        step  orders         customers           enriched changes
        1     1 (cust 1)     c 2 north           +(1 10 NULL)
        2     2 (cust 2)     c 1 north           -(1 10 NULL), +(2 20 north), +(1 10 north)
        3                    u 1 north -> south  -(1 10 north), +(1 10 south)
        4                    d 2, tombstone      -(2 20 north), +(2 20 NULL)
        5     3 (cust 2),                        +(3 30 NULL), +(4 40 NULL)
              4 (no cust)
        6                    c 2 east            -(2 20 NULL), -(3 30 NULL), +(2 20 east),
                                                 +(3 30 east)

    Unlike the INNER join's (above), step 5 writes no pair that cancels: the OUTER join
    recomputes the keys a step touched from what each side holds.
    """
    circuit = compile_program("p.sql", text=LEFT)
    assert circuit.view("enriched").sources == ("orders", "customers.latest")
    composed = compose(circuit)
    assert composed.refused == ()
    assert composed.boundaries == {"orders", "customers.latest"}
    results = run(circuit, STEPS)
    written = [changes(r, "enriched", "id", "amount", "region") for r in results]
    assert [Counter(step) for step in written] == [Counter(step) for step in [
        [(False, 1, 10, None)],
        [(True, 1, 10, None), (False, 2, 20, "north"), (False, 1, 10, "north")],
        [(True, 1, 10, "north"), (False, 1, 10, "south")],
        [(True, 2, 20, "north"), (False, 2, 20, None)],
        [(False, 3, 30, None), (False, 4, 40, None)],
        [(True, 2, 20, None), (True, 3, 30, None), (False, 2, 20, "east"),
         (False, 3, 30, "east")],
    ]]
    # Within a step, every retraction comes before the insertions.
    assert all(step == sorted(step, key=lambda c: not c[0]) for step in written)
    assert all(not r.dead_letters for r in results)


@pytest.mark.parametrize(("join", "line", "column", "message", "fix"), [
    ("FROM orders AS o JOIN customers AS c ON o.customer = c.id\n"
     "AND c.changed BETWEEN o.ts - INTERVAL '1' MINUTE AND o.ts", 2, 35,
     "unsupported: view v joins table customers, a changelog table read as its latest row "
     "per key, whose rows are updated (ADR 0030), in an interval join",
     "or join without a time bound"),
    ("FROM customers AS c JOIN orders FOR SYSTEM_TIME AS OF c.changed AS o\n"
     "ON o.id = c.id", 2, 18,
     "joins table customers, a changelog table read as its latest row per key, whose rows "
     "are updated (ADR 0030), in a temporal join", "FOR SYSTEM_TIME AS OF"),
])
def test_l7_an_interval_or_temporal_probe_join_of_the_table_is_refused(
    join: str, line: int, column: int, message: str, fix: str,
) -> None:
    """What refuses an updating view refuses the latest row per key, naming the table: an
    interval join and a temporal join's probe side write each match once, final (S16,
    S18)."""
    text = CUSTOMERS + ORDERS + f"CREATE VIEW v WITH ('topic' = 'v') AS\nSELECT o.id {join};\n"
    with pytest.raises(ProgramError) as info:
        compile_program("p.sql", text=text)
    found = info.value.diagnostics[0]
    offset = text[:text.index("CREATE VIEW v")].count("\n")
    assert (found.position.line - offset, found.position.column) == (line, column)
    assert message in found.message
    assert found.fix is not None and fix in found.fix
