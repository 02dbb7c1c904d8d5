"""A Debezium topic in Avro through the registry as the versioned side of a temporal join (and,
last, counted as its latest row per key, ADR 0030), on
Spark through the real broker and the tests' real schema registry (ADR 0028; SPEC S7, S16):
rates is captured by a Debezium connector with Kafka Connect's AvroConverter
(``'format' = 'debezium-avro-confluent'``), produced here with confluent-kafka's own
AvroSerializer, each change timed by its ``source.ts_ms``, LATENESS 0:

    step  amounts              rates (events, by source.ts_ms)                 w(rates)
    1     -                    c EUR 1.10 9:00, r GBP 1.25 9:00 (snapshot)      9:00
    2     9:30 EUR, 9:45 GBP   u EUR 1.10 -> 1.12 9:40                          9:40
    3     -                    d GBP 9:50, its tombstone, garbage, bound 10:00  10:00
    4     9:55 GBP, 10:05 EUR  c GBP 1.30 10:10                                 10:10

Each amount is written once w(rates) passes its time, with the rate valid then: 9:45 GBP with
1.25 (deleted only at 9:50), 9:55 GBP with none (LEFT pads it), 10:05 EUR with the 9:40
update. The tombstone changes nothing and is no dead letter; the garbage (framed with the
envelope's schema id, a body that is no Avro of it) is a ``malformed`` one, its bytes
unchanged. Hand-written expectations, and the reference evaluator record for record.
"""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from debezium_avro import avro_events
from table_steps import clock_ms, frozen, new_values_per_step, oracle_written, run_steps, written

from app.circuit.reference import evaluate
from app.connectors.output_reader import OutputReader
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

# Slow (about 4 minutes of steps, CI's budget): `pytest -m slow -k debezium_avro tests/e2e`;
# CI's unit test_debezium_avro decodes the same envelopes.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROGRAM = """
CREATE TABLE amounts (
    rowtime  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR   NOT NULL,
    amount   INT       NOT NULL
) WITH ('topic' = '{amounts}', 'dead_letter' = '{amounts_dlq}');

CREATE TABLE rates (
    changed  TIMESTAMP NOT NULL METADATA FROM 'value.source.timestamp'
             LATENESS INTERVAL '0' SECOND,
    currency VARCHAR        NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = '{rates}', 'format' = 'debezium-avro-confluent',
        'schema-registry.url' = '{url}', 'dead_letter' = '{rates_dlq}');

CREATE VIEW converted WITH ('topic' = '{converted}') AS
SELECT a.rowtime, a.currency, a.amount, r.rate, a.amount * r.rate AS converted
FROM amounts AS a
LEFT JOIN rates FOR SYSTEM_TIME AS OF a.rowtime AS r
  ON a.currency = r.currency;
"""


def _amount(clock: str, currency: str, value: int) -> dict[str, Any]:
    return {"rowtime": clock_ms(clock), "currency": currency, "amount": value}


def _converted(clock: str, currency: str, value: int, rate: str | None) -> Any:
    found = None if rate is None else Decimal(rate)
    return frozen({
        "rowtime": clock_ms(clock),
        "currency": currency,
        "amount": value,
        "rate": found,
        "converted": None if found is None else value * found,
    })


def test_s16_a_debezium_avro_topic_is_the_versioned_side_of_a_temporal_join(
    kafka: Any, schema_registry: str, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {
        name: unique_topic(name)
        for name in ("amounts", "rates", "amounts_dlq", "rates_dlq", "converted")
    }
    kafka.create_topic(topics["amounts"], partitions=2)
    kafka.create_topic(topics["rates"], partitions=2)
    program = tmp_path / "debezium_avro_rates.sql"
    program.write_text(PROGRAM.format(**topics, url=schema_registry), encoding="utf-8")
    circuit = compile_program(program)
    assert circuit.table("rates").deletes_keys
    assert refused_by_spark(circuit, physical_plan(circuit)) == ()

    event = avro_events(schema_registry, topics["rates"])

    def change(op: str, clock: str, currency: str, before: str | None,
               after: str | None) -> tuple[str, bytes, bytes]:
        key = json.dumps({"currency": currency}).encode()
        return ("record", key, event(op, clock_ms(clock), currency, before, after))

    created = change("c", "9:00", "EUR", None, "1.10")
    garbage = created[2][:5] + b"\x02\x02\xff"
    steps: list[dict[str, list[Any]]] = [
        {"rates": [created, change("r", "9:00", "GBP", None, "1.25")]},
        {"amounts": [_amount("9:30", "EUR", 100), _amount("9:45", "GBP", 20)],
         "rates": [change("u", "9:40", "EUR", "1.10", "1.12")]},
        {"rates": [change("d", "9:50", "GBP", "1.25", None),
                   ("record", json.dumps({"currency": "GBP"}).encode(), None),
                   ("record", b"GBP", garbage), ("bound", clock_ms("10:00"))]},
        {"amounts": [_amount("9:55", "GBP", 5), _amount("10:05", "EUR", 50)],
         "rates": [change("c", "10:10", "GBP", None, "1.30")]},
    ]
    seen, new_rows = new_values_per_step(kafka, circuit, "converted", topics["converted"])
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=new_rows)
    assert seen == [
        Counter(),
        Counter([_converted("9:30", "EUR", 100, "1.10")]),
        Counter([_converted("9:45", "GBP", 20, "1.25")]),
        Counter([_converted("9:55", "GBP", 5, None), _converted("10:05", "EUR", 50, "1.12")]),
    ]
    dead = read_topic(kafka.conf(), topics["rates_dlq"])
    assert [(m.value(), dict(m.headers())["tidemark.error.reason"]) for m in dead] == [
        (garbage, b"malformed")]
    assert read_topic(kafka.conf(), topics["amounts_dlq"]) == []
    oracle = evaluate(circuit, inputs)
    assert written(kafka, circuit, "converted", topics["converted"]) == oracle_written(
        oracle, "converted"
    )


LATEST = """
CREATE TABLE rates (
    changed  TIMESTAMP NOT NULL METADATA FROM 'value.source.timestamp'
             LATENESS INTERVAL '0' SECOND,
    currency VARCHAR        NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = '{rates}', 'format' = 'debezium-avro-confluent',
        'schema-registry.url' = '{url}', 'dead_letter' = '{rates_dlq}');

CREATE VIEW per_rate WITH ('topic' = '{per_rate}', 'format' = 'changelog') AS
SELECT rate, COUNT(*) AS currencies FROM rates GROUP BY rate;
"""


def test_s18_a_debezium_avro_topic_is_counted_as_its_latest_row_per_key(
    kafka: Any, schema_registry: str, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """ADR 0030: a GROUP BY over the table counts each currency's latest rate:

        step  rates (events)                       per_rate changes (rate, currencies)
        1     c EUR 1.10, r GBP 1.25 (9:00)        +(1.10 1), +(1.25 1)
        2     u EUR 1.10 -> 1.25 (9:40)            -(1.10 1), -(1.25 1) +(1.25 2)
        3     d GBP (9:50), its tombstone          -(1.25 2) +(1.25 1)
        4     c GBP 1.30 (10:10)                   +(1.30 1)
    """
    topics = {name: unique_topic(name) for name in ("rates", "rates_dlq", "per_rate")}
    kafka.create_topic(topics["rates"], partitions=2)
    program = tmp_path / "debezium_avro_latest.sql"
    program.write_text(LATEST.format(**topics, url=schema_registry), encoding="utf-8")
    circuit = compile_program(program)
    assert circuit.view("per_rate").sources == ("rates.latest",)
    event = avro_events(schema_registry, topics["rates"])

    def change(op: str, clock: str, currency: str, before: str | None,
               after: str | None) -> tuple[str, bytes, bytes]:
        key = json.dumps({"currency": currency}).encode()
        return ("record", key, event(op, clock_ms(clock), currency, before, after))

    steps: list[dict[str, list[Any]]] = [
        {"rates": [change("c", "9:00", "EUR", None, "1.10"),
                   change("r", "9:00", "GBP", None, "1.25")]},
        {"rates": [change("u", "9:40", "EUR", "1.10", "1.25")]},
        {"rates": [change("d", "9:50", "GBP", "1.25", None),
                   ("record", json.dumps({"currency": "GBP"}).encode(), None)]},
        {"rates": [change("c", "10:10", "GBP", None, "1.30")]},
    ]
    output = circuit.view("per_rate").output
    assert output is not None
    reader = OutputReader("per_rate", output)
    per_step: list[Counter[tuple[Any, ...]]] = []
    seen = 0

    def after_step() -> None:
        nonlocal seen
        records = [reader.value(m.value())
                   for m in read_topic(kafka.conf(), topics["per_rate"])]
        per_step.append(Counter((r["undo"], r["rate"], r["currencies"])
                                for r in records[seen:]))
        seen = len(records)

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)
    d = Decimal
    assert per_step == [
        Counter([(False, d("1.10"), 1), (False, d("1.25"), 1)]),
        Counter([(True, d("1.10"), 1), (True, d("1.25"), 1), (False, d("1.25"), 2)]),
        Counter([(True, d("1.25"), 2), (False, d("1.25"), 1)]),
        Counter([(False, d("1.30"), 1)]),
    ]
    assert read_topic(kafka.conf(), topics["rates_dlq"]) == []
    oracle = [Counter((r.value["undo"], r.value["rate"], r.value["currencies"])
                      for r in result.outputs["per_rate"] if r.value is not None)
              for result in evaluate(circuit, inputs)]
    assert oracle == per_step
