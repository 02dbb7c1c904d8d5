"""A Debezium table read as its latest row per key on Spark, through the real broker (ADR
0030; SPEC S5, S6, S16, S18, S19): ``customers`` is a database table captured by Debezium
(``'format' = 'debezium-json'``), each change timed by its ``source.ts_ms``, LATENESS 1 s.
``per_region`` counts customers per region, as Flink counts a changelog source: it reads
the generated view ``customers.latest`` (one row per key, absent while its latest change is
a deletion), an aggregate in a query of its own whose changes reach the count through a
stage boundary (ADR 0023).

    step  customers (events, by source.ts_ms)                      per_region changes
    1     r 1 north, c 2 north, c 3 south (10 s)                   +north 2, +south 1
    2     u 2 north -> south (20 s)                                -north 2 +north 1,
                                                                   -south 1 +south 2
    3     d 1 (30 s), its tombstone                                -north 1
    4     c 1 south (40 s); u 3 south -> north at 5 s (late)       -south 2 +south 3

The tombstone after 1's delete event changes nothing and is no dead letter; the late update
is a ``late`` dead letter and moves nobody. Hand-written expectations, and the reference
evaluator step by step (S19: the same changes, here in the same steps).
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

# Slow (about 4 minutes on 2 cores with the broker's start): the latest row per key and the
# count over it run in two queries, one after the other, every step (ADR 0023).
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

CREATE VIEW per_region WITH ('topic' = '{per_region}', 'format' = 'changelog') AS
SELECT region, COUNT(*) AS customers FROM customers GROUP BY region;
"""

#: A change of a changelog: (undo, region, customers).
Change = tuple[bool, str, int]


def _change(op: str, seconds: int, id_: int, before: str | None,
            after: str | None) -> tuple[str, bytes, bytes]:
    """A Debezium change event of customer ``id_`` (its region before and after), keyed as
    Debezium keys it, at ``seconds`` in the database."""

    def image(region: str | None) -> dict[str, Any] | None:
        return None if region is None else {"id": id_, "region": region}

    event = {"before": image(before), "after": image(after), "op": op,
             "source": {"ts_ms": seconds * 1_000, "db": "shop", "table": "customers"},
             "ts_ms": seconds * 1_000 + 150}
    return ("record", json.dumps({"id": id_}).encode(), json.dumps(event).encode())


STEPS: list[dict[str, list[Any]]] = [
    {"customers": [_change("r", 10, 1, None, "north"), _change("c", 10, 2, None, "north"),
                   _change("c", 10, 3, None, "south")]},
    {"customers": [_change("u", 20, 2, "north", "south")]},
    {"customers": [_change("d", 30, 1, "north", None),
                   ("record", json.dumps({"id": 1}).encode(), None)]},
    {"customers": [_change("c", 40, 1, None, "south"), _change("u", 5, 3, "south", "north")]},
]


def _oracle(results: list[StepResult]) -> list[Counter[Change]]:
    return [Counter((r.value["undo"], r.value["region"], r.value["customers"])
                    for r in result.outputs["per_region"] if r.value is not None)
            for result in results]


def test_s18_a_count_per_region_of_a_debezium_table_follows_each_keys_latest_row(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {name: unique_topic(name)
              for name in ("customers", "customers_dlq", "per_region")}
    kafka.create_topic(topics["customers"], partitions=2)
    program = tmp_path / "customers.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    composed = compose(circuit)
    assert composed.refused == ()
    assert "customers.latest" in composed.boundaries
    output = circuit.view("per_region").output
    assert output is not None
    reader = OutputReader("per_region", output)
    per_step: list[Counter[Change]] = []
    seen = 0

    def after_step() -> None:
        nonlocal seen
        records = [reader.value(m.value())
                   for m in read_topic(kafka.conf(), topics["per_region"])]
        per_step.append(Counter((r["undo"], r["region"], r["customers"])
                                for r in records[seen:]))
        seen = len(records)

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS, after_step=after_step)
    assert per_step == [
        Counter([(False, "north", 2), (False, "south", 1)]),
        Counter([(True, "north", 2), (False, "north", 1), (True, "south", 1),
                 (False, "south", 2)]),
        Counter([(True, "north", 1)]),
        Counter([(True, "south", 2), (False, "south", 3)]),
    ]
    dead = read_topic(kafka.conf(), topics["customers_dlq"])
    assert [dict(m.headers())["tidemark.error.reason"] for m in dead] == [b"late"]
    assert internal_dead_letters(kafka, tmp_path / "ck", "customers.latest") == []
    assert _oracle(evaluate(circuit, inputs)) == per_step
