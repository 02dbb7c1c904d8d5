"""Regular joins of changelog tables with themselves and each other on Spark, through the
real broker (SPEC S16, S18, S19; ADR 0030): ``customers`` and ``regions`` are Debezium
tables (``'format' = 'debezium-json'``, each change timed by its ``source.ts_ms``,
LATENESS 1 s). ``neighbours`` joins ``customers`` with itself (the pairs of customers of
one region), ``staffed`` joins it with ``regions`` (each customer's region manager). Both
read the generated views ``customers.latest`` and ``regions.latest``, aggregates in their
tables' queries, through stage boundaries into one later query, where Tidemark's join
operator holds each side's rows per key (ADR 0023; ``Join.per_key``).

    step  customers                      regions             neighbours (net)   staffed (net)
    1     c 1 north, c 2 north,          c north ann         +(1 2 north)       +(1 ann), +(2 ann)
          c 3 south (10 s)               (10 s)
    2     u 2 north -> south (20 s)      u north -> bob      -(1 2 north),      -(1 ann), +(1 bob),
                                         (20 s)              +(2 3 south)       -(2 ann)
    3     d 1 (30 s), its tombstone      c south cy (30 s)   (none)             -(1 bob), +(2 cy),
                                                                                +(3 cy)

A step writes, per key it touched, the pairs after less the pairs before, in no order
across keys: the changes are compared as written with the reference evaluator's (the same
multiset, in the same steps, S19) and their sums with the hand-written nets above.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from table_steps import internal_dead_letters, run_steps

from app.circuit.reference import StepResult, evaluate
from app.connectors.output_reader import OutputReader
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.compose import compose

# Slow (minutes on 2 cores with the broker's start): two latest views' queries, then the
# joins' query, every step (ADR 0023).
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROGRAM = """
CREATE TABLE customers (
    changed TIMESTAMP NOT NULL METADATA FROM 'value.source.timestamp'
            LATENESS INTERVAL '1' SECOND,
    id      BIGINT  NOT NULL,
    region  VARCHAR NOT NULL,
    PRIMARY KEY (id) NOT ENFORCED
) WITH ('topic' = '{customers}', 'format' = 'debezium-json',
        'dead_letter' = '{customers_dlq}');

CREATE TABLE regions (
    changed TIMESTAMP NOT NULL METADATA FROM 'value.source.timestamp'
            LATENESS INTERVAL '1' SECOND,
    code    VARCHAR NOT NULL,
    manager VARCHAR NOT NULL,
    PRIMARY KEY (code) NOT ENFORCED
) WITH ('topic' = '{regions}', 'format' = 'debezium-json',
        'dead_letter' = '{regions_dlq}');

CREATE VIEW neighbours WITH ('topic' = '{neighbours}') AS
SELECT c.id AS a, d.id AS b, c.region FROM customers AS c JOIN customers AS d
ON c.region = d.region AND c.id < d.id;

CREATE VIEW staffed WITH ('topic' = '{staffed}') AS
SELECT c.id, r.manager FROM customers AS c JOIN regions AS r ON c.region = r.code;
"""

COLUMNS = {"neighbours": ("a", "b", "region"), "staffed": ("id", "manager")}


def _event(table: str, key: dict[str, Any], op: str, seconds: int,
           before: dict[str, Any] | None, after: dict[str, Any] | None,
           ) -> tuple[str, bytes, bytes]:
    """A Debezium change event, keyed as Debezium keys it."""
    event = {"before": before, "after": after, "op": op,
             "source": {"ts_ms": seconds * 1_000, "db": "shop", "table": table},
             "ts_ms": seconds * 1_000 + 150}
    return ("record", json.dumps(key).encode(), json.dumps(event).encode())


def _customer(op: str, seconds: int, id_: int, before: str | None,
              after: str | None) -> tuple[str, bytes, bytes]:
    def image(region: str | None) -> dict[str, Any] | None:
        return None if region is None else {"id": id_, "region": region}

    return _event("customers", {"id": id_}, op, seconds, image(before), image(after))


def _region(op: str, seconds: int, code: str, before: str | None,
            after: str | None) -> tuple[str, bytes, bytes]:
    def image(manager: str | None) -> dict[str, Any] | None:
        return None if manager is None else {"code": code, "manager": manager}

    return _event("regions", {"code": code}, op, seconds, image(before), image(after))


STEPS: list[dict[str, list[Any]]] = [
    {"customers": [_customer("c", 10, 1, None, "north"), _customer("c", 10, 2, None, "north"),
                   _customer("c", 10, 3, None, "south")],
     "regions": [_region("c", 10, "north", None, "ann")]},
    {"customers": [_customer("u", 20, 2, "north", "south")],
     "regions": [_region("u", 20, "north", "ann", "bob")]},
    {"customers": [_customer("d", 30, 1, "north", None),
                   ("record", json.dumps({"id": 1}).encode(), None)],
     "regions": [_region("c", 30, "south", None, "cy")]},
]


def _net(changes: Counter[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    total: Counter[tuple[Any, ...]] = Counter()
    for (undo, *row), n in changes.items():
        total[tuple(row)] += -n if undo else n
    return Counter({row: n for row, n in total.items() if n})


def _oracle(results: list[StepResult], view: str) -> list[Counter[tuple[Any, ...]]]:
    return [Counter((r.value["undo"], *(r.value[c] for c in COLUMNS[view]))
                    for r in result.outputs[view] if r.value is not None)
            for result in results]


def test_s16_s18_a_self_join_and_a_join_of_two_debezium_tables_on_spark(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    names = ("customers", "customers_dlq", "regions", "regions_dlq", "neighbours", "staffed")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["customers"], partitions=2)
    kafka.create_topic(topics["regions"], partitions=2)
    program = tmp_path / "joins.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    composed = compose(circuit)
    assert composed.refused == ()
    assert composed.boundaries == {"customers.latest", "regions.latest"}
    readers = {}
    for view in COLUMNS:
        output = circuit.view(view).output
        assert output is not None and output.format == "changelog"
        readers[view] = OutputReader(view, output)
    per_step: dict[str, list[Counter[tuple[Any, ...]]]] = {view: [] for view in COLUMNS}
    seen = dict.fromkeys(COLUMNS, 0)

    def after_step() -> None:
        for view, wanted in COLUMNS.items():
            records = [readers[view].value(m.value())
                       for m in read_topic(kafka.conf(), topics[view])]
            new = records[seen[view]:]
            seen[view] = len(records)
            per_step[view].append(Counter((r["undo"], *(r[c] for c in wanted)) for r in new))

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS, after_step=after_step)
    assert [_net(c) for c in per_step["neighbours"]] == [
        Counter({(1, 2, "north"): 1}),
        Counter({(1, 2, "north"): -1, (2, 3, "south"): 1}),
        Counter(),
    ]
    assert [_net(c) for c in per_step["staffed"]] == [
        Counter({(1, "ann"): 1, (2, "ann"): 1}),
        Counter({(1, "ann"): -1, (1, "bob"): 1, (2, "ann"): -1}),
        Counter({(1, "bob"): -1, (2, "cy"): 1, (3, "cy"): 1}),
    ]
    for table in ("customers_dlq", "regions_dlq"):
        assert read_topic(kafka.conf(), topics[table]) == []
    for boundary in ("customers.latest", "regions.latest"):
        assert internal_dead_letters(kafka, tmp_path / "ck", boundary) == []
    oracle = evaluate(circuit, inputs)
    for view in COLUMNS:
        assert _oracle(oracle, view) == per_step[view], view
