"""Seed 004's first query as its author wrote it, on Spark through the real broker (SPEC S13,
S16): each amount joined with "the exchange rate of the corresponding currency that is valid
when the amounts row arrives", ``r.proctime = (SELECT MAX(r2.proctime) ... r2.proctime <=
a.proctime)``, and Flink's spelling of it, ``LEFT JOIN rates FOR SYSTEM_TIME AS OF
a.proctime``, and RisingWave's, ``JOIN rates FOR SYSTEM_TIME AS OF PROCTIME()``, in one
program (Tidemark's join operator, ADR 0017).

Processing time is the step's batch time: a version's time is the batch time of the step it
arrives in, and an amount is written in its own step with the latest rate its currency has
after that step's rates. Neither table has LATENESS. One ``--once`` run per step, rows over
two partitions:

    step  amounts           rates                          converted (INNER)    enriched (LEFT)
    1     100 EUR, 7 USD    EUR 1.10, GBP 1.25             100 at 1.10          + 7 with NULL
    2     50 EUR            EUR 1.12 (its rowtime 9:30)    50 at 1.12           the same
    3     -                 GBP 1.30 (its rowtime 8:00)    -                    -
    4     20 GBP, 30 EUR    -                              20 at 1.30, 30 1.12  the same

Step 2's amount meets the rate of its own step; step 4's GBP amount the rate of step 3,
whose rowtime is older than the first GBP rate's (arrival orders processing-time versions).
Hand-written expectations, each amount's ``arrived`` the batch time of its step (Spark's
offset log), and the reference evaluator fed those batch times, step by step.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from spark_offset_log import spark_batches
from table_steps import frozen, run_steps, watch_views, written

from app.circuit.reference import evaluate
from app.program.compile import compile_program
from app.runtime.planner.physical import explain_physical_text, physical_plan
from app.runtime.planner.support import refused_by_spark

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE amounts (
    amount   INT NOT NULL,
    currency VARCHAR NOT NULL,
    proctime AS PROCTIME()
) WITH ('topic' = '{amounts}');

CREATE TABLE rates (
    currency VARCHAR NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    rowtime  TIMESTAMP,
    proctime AS PROCTIME(),
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = '{rates}');

CREATE VIEW converted WITH ('topic' = '{converted}') AS
SELECT a.amount, a.currency, r.rate, a.proctime AS arrived
FROM amounts AS a, rates AS r
WHERE a.currency = r.currency AND
  r.proctime = (
    SELECT MAX(r2.proctime)
    FROM rates AS r2
    WHERE r2.currency = a.currency
    AND r2.proctime <= a.proctime);

CREATE VIEW on_arrival WITH ('topic' = '{on_arrival}') AS
SELECT o.amount, o.currency, r.rate
FROM amounts AS o
JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r
  ON o.currency = r.currency;

CREATE VIEW enriched WITH ('topic' = '{enriched}') AS
SELECT o.amount, o.currency, r.rate, o.amount * r.rate AS converted
FROM amounts AS o
LEFT JOIN rates FOR SYSTEM_TIME AS OF o.proctime AS r
  ON o.currency = r.currency;
"""


def _amount(value: int, currency: str) -> dict[str, Any]:
    return {"amount": value, "currency": currency}


def _rate(currency: str, value: str, clock: str = "9:00") -> dict[str, Any]:
    hours, minutes = (int(x) for x in clock.split(":"))
    return {"currency": currency, "rate": Decimal(value),
            "rowtime": 1_700_000_000_000 + (hours * 60 + minutes) * 60_000}


STEPS: list[dict[str, list[Any]]] = [
    {"rates": [_rate("EUR", "1.10"), _rate("GBP", "1.25")],
     "amounts": [_amount(100, "EUR"), _amount(7, "USD")]},
    {"amounts": [_amount(50, "EUR")], "rates": [_rate("EUR", "1.12", "9:30")]},
    {"rates": [_rate("GBP", "1.30", "8:00")]},
    {"amounts": [_amount(20, "GBP"), _amount(30, "EUR")]},
]


def _enriched(value: int, currency: str, rate: str | None) -> Any:
    found = None if rate is None else Decimal(rate)
    return frozen({"amount": value, "currency": currency, "rate": found,
                   "converted": None if found is None else value * found})


@pytest.mark.slow  # 90 s; the unit tests run the rule, the planner's verdict, on every CI
def test_seed_004_amounts_get_the_rate_valid_when_they_arrive_s13_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    names = ("amounts", "rates", "converted", "on_arrival", "enriched")
    topics = {name: unique_topic(name) for name in names}
    for table in ("amounts", "rates"):
        kafka.create_topic(topics[table], partitions=2)
    path = tmp_path / "seed_004.sql"
    path.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(path)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    assert ("per key, the latest version of the versioned table; each probe row is written "
            "in the step it arrives in") in explain_physical_text(plan, ())

    seen, watch = watch_views(kafka, circuit, ["converted", "on_arrival", "enriched"], topics)
    offsets = tmp_path / "ck" / "amounts" / "spark"
    step_times: list[int] = []

    def after_step() -> None:
        watch()
        # The step's rows are read by the first batch of its --once run.
        batches = spark_batches(offsets, written=None)
        step_times.append(batches[len(step_times)].time_ms if len(batches) > len(
            step_times) else -1)

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS, after_step=after_step)
    batches = spark_batches(offsets, written=None)
    assert len(batches) == len(STEPS), batches  # one batch per --once run
    times = [b.time_ms for b in batches]
    assert step_times == times and times == sorted(set(times))

    assert seen["enriched"] == [
        Counter([_enriched(100, "EUR", "1.10"), _enriched(7, "USD", None)]),
        Counter([_enriched(50, "EUR", "1.12")]),
        Counter(),
        Counter([_enriched(20, "GBP", "1.30"), _enriched(30, "EUR", "1.12")]),
    ]
    assert seen["converted"] == [
        Counter([frozen({"amount": value, "currency": currency, "rate": Decimal(rate),
                         "arrived": times[step]}) for value, currency, rate in rows])
        for step, rows in enumerate([
            [(100, "EUR", "1.10")], [(50, "EUR", "1.12")], [],
            [(20, "GBP", "1.30"), (30, "EUR", "1.12")],
        ])
    ]

    # RisingWave's AS OF PROCTIME(): the same pairs as the seed's join.
    assert seen["on_arrival"] == [
        Counter(frozen({k: v for k, v in dict(value).items() if k != "arrived"})
                for value in step.elements())
        for step in seen["converted"]
    ]

    # The reference evaluator, fed each step's batch time from Spark's offset log.
    oracle = evaluate(circuit, [replace(step, batch_time_ms=t)
                                for step, t in zip(inputs, times, strict=True)])
    for view in ("converted", "on_arrival", "enriched"):
        # S14: processing time publishes no waterline, so no record has the header.
        assert {mark for _, mark in written(kafka, circuit, view, topics[view])} == {None}
        assert seen[view] == [
            Counter(frozen(r.value or {}) for r in result.outputs[view]) for result in oracle
        ]
