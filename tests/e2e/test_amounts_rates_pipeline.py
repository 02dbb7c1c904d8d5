"""Seed 004 on Spark through the real broker: pipelines/amounts_rates.sql, as shipped on test
topics (SPEC S5, S14, S16): each amount converted at the rate of its currency valid at the
amount's time, by Tidemark's join operator (ADR 0017). The seed's amounts and rates, with
LATENESS 0 (a row or punctuation at x moves its table's waterline to x):

    step  amounts                      rates                              w(rates)
    1     -                            9:00 EUR 1.10, 9:00 GBP 1.25       9:00
    2     9:30 EUR 100, 9:45 GBP 20    -                                  9:00
    3     -                            10:00 EUR 1.12                     10:00
    4     10:15 EUR 50                 -                                  10:00
    5     -                            bound 10:30                        10:30
    6     10:40 CHF 7                  9:50 EUR 1.30 (late), bound 11:00  11:00

An amount is written in the step w(rates) passes its time, never earlier (step 2's amounts in
step 3, with the 9:00 rates: the 10:00 one is valid only from 10:00), once; CHF has no rate
and is written with NULLs (LEFT); the late rate is a dead letter of rates and changes no
version. Hand-written expectations, and the reference evaluator record for record.

Seed 004's second query, in the same program: each currency's daily sum (Spark's own
aggregation, final once w(amounts) passes midnight) at the day's closing rate (AS OF the
window's end), written once w(rates) passes midnight as well.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from table_steps import (
    clock_ms,
    frozen,
    new_values_per_step,
    oracle_values,
    oracle_written,
    run_steps,
    shipped_program,
    values_written,
    written,
)

from app.circuit.reference import evaluate
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.compose import compose
from app.runtime.planner.physical import explain_physical_text, physical_plan
from app.runtime.planner.support import refused_by_spark

pytestmark = pytest.mark.e2e

SHIPPED = {
    "amounts": "amounts",
    "rates": "rates",
    "amounts.dlq": "amounts_dlq",
    "rates.dlq": "rates_dlq",
    "amounts_rates.converted": "converted",
    "amounts_rates.daily": "daily",
}


def _amount(clock: str, currency: str, value: int) -> dict[str, Any]:
    return {"rowtime": clock_ms(clock), "currency": currency, "amount": value}


def _rate(clock: str, currency: str, value: str) -> dict[str, Any]:
    return {"rowtime": clock_ms(clock), "currency": currency, "rate": Decimal(value)}


def _converted(clock: str, currency: str, value: int, rate: str | None) -> Any:
    found = None if rate is None else Decimal(rate)
    return frozen(
        {
            "rowtime": clock_ms(clock),
            "currency": currency,
            "amount": value,
            "rate": found,
            "converted": None if found is None else value * found,
        }
    )


STEPS: list[dict[str, list[Any]]] = [
    {"rates": [_rate("9:00", "EUR", "1.10"), _rate("9:00", "GBP", "1.25")]},
    {"amounts": [_amount("9:30", "EUR", 100), _amount("9:45", "GBP", 20)]},
    {"rates": [_rate("10:00", "EUR", "1.12")]},
    {"amounts": [_amount("10:15", "EUR", 50)]},
    {"rates": [("bound", clock_ms("10:30"))]},
    {
        "amounts": [_amount("10:40", "CHF", 7)],
        "rates": [_rate("9:50", "EUR", "1.30"), ("bound", clock_ms("11:00"))],
    },
]


@pytest.mark.slow  # CI's budget (about 2 min)
def test_seed_temporal_join_writes_each_amount_with_the_rate_valid_at_its_time_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    circuit, topics = shipped_program(
        kafka, unique_topic, tmp_path, "amounts_rates.sql", SHIPPED, ["amounts", "rates"]
    )
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    assert "view converted <- amounts LEFT OUTER JOIN rates FOR SYSTEM_TIME AS OF a.rowtime" in (
        explain_physical_text(plan, ())
    )
    seen, new_rows = new_values_per_step(kafka, circuit, "converted", topics["converted"])
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS, after_step=new_rows)
    assert seen == [
        Counter(),
        Counter(),
        Counter(
            [
                _converted("9:30", "EUR", 100, "1.10"),
                _converted("9:45", "GBP", 20, "1.25"),
            ]
        ),
        Counter(),
        Counter([_converted("10:15", "EUR", 50, "1.12")]),
        Counter([_converted("10:40", "CHF", 7, None)]),
    ]
    late = read_topic(kafka.conf(), topics["rates_dlq"])
    assert [dict(m.headers())["tidemark.error.reason"] for m in late] == [b"late"]
    assert read_topic(kafka.conf(), topics["amounts_dlq"]) == []
    oracle = evaluate(circuit, inputs)
    assert written(kafka, circuit, "converted", topics["converted"]) == oracle_written(
        oracle, "converted"
    )


@pytest.mark.slow  # ~1.5 min with its registry; CI joins AS OF in the self-join case
def test_seed_daily_sums_get_the_days_closing_rate_s16_s18(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """The sum of the 26th (150) is final in step 3, when w(amounts) passes midnight, and is
    written in step 4, when w(rates) passes it too, with the 23:00 rate 1.12 (the closing
    rate: the 0:10 rate of the 27th is valid only from then)."""
    circuit, topics = shipped_program(
        kafka, unique_topic, tmp_path, "amounts_rates.sql", SHIPPED, ["amounts", "rates"]
    )
    assert refused_by_spark(circuit, physical_plan(circuit)) == ()
    assert physical_plan(circuit).placement("daily").placement == "native"
    steps: list[dict[str, list[Any]]] = [
        {
            "rates": [_rate("8:00", "EUR", "1.10")],
            "amounts": [_amount("9:00", "EUR", 100), _amount("15:00", "EUR", 50)],
        },
        {"rates": [_rate("23:00", "EUR", "1.12")]},
        {"amounts": [_day27(_amount("0:30", "EUR", 10))]},
        {"rates": [_day27(_rate("0:10", "EUR", "1.20"))]},
    ]
    seen, new_rows = new_values_per_step(kafka, circuit, "daily_converted", topics["daily"])
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=new_rows)
    day = frozen(
        {
            "day": clock_ms("0:00", day=27),
            "currency": "EUR",
            "amount_sum": 150,
            "closing_rate": Decimal("1.12"),
        }
    )
    assert seen == [Counter(), Counter(), Counter(), Counter([day])]
    oracle = evaluate(circuit, inputs)
    assert written(kafka, circuit, "daily_converted", topics["daily"]) == oracle_written(
        oracle, "daily_converted"
    )


def _day27(row: dict[str, Any]) -> dict[str, Any]:
    """The row a day later (its clock on the 27th)."""
    return {**row, "rowtime": row["rowtime"] + 86_400_000}


#: The LEFT temporal join of the programs below (topics by name).
CONVERTED = """
CREATE VIEW converted WITH ('topic' = '{converted}') AS
SELECT a.rowtime, a.currency, a.amount, r.rate, a.amount * r.rate AS converted
FROM amounts AS a
LEFT JOIN rates FOR SYSTEM_TIME AS OF a.rowtime AS r
  ON a.currency = r.currency;
"""

KEYED = """
CREATE TABLE amounts (
    rowtime  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR   NOT NULL,
    amount   INT       NOT NULL
) WITH ('topic' = '{amounts}', 'dead_letter' = '{amounts_dlq}');

CREATE TABLE rates (
    rowtime  TIMESTAMP      NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '0' SECOND,
    currency VARCHAR        NOT NULL METADATA FROM 'key',
    rate     DECIMAL(10, 2) NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = '{rates}', 'dead_letter' = '{rates_dlq}');

CREATE VIEW priced WITH ('topic' = '{priced}') AS
SELECT a.rowtime, a.currency, a.amount, r.rate
FROM amounts AS a
JOIN rates FOR SYSTEM_TIME AS OF a.rowtime AS r
  ON a.currency = r.currency;
"""


def _gone(clock: str, currency: str) -> tuple[str, dict[str, Any]]:
    """The tombstone of ``currency``'s rate at ``clock`` (its key and timestamp)."""
    return ("delete", {"rowtime": clock_ms(clock), "currency": currency})


@pytest.mark.slow  # ~1 min; CI runs a temporal join's deletions in the self-join case
def test_a_tombstone_on_the_compacted_rates_topic_ends_its_currencys_rate_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """rates keyed by currency on a compacted topic, each rate's time its record's timestamp:
    GBP's tombstone at 9:40 deletes its rate, so the 9:45 and 9:50 GBP amounts have none
    (LEFT pads them, INNER drops them) until GBP's 10:05 rate; a late tombstone (EUR at 9:20
    once w(rates) is 10:00) is a dead letter of rates, and EUR's rate stays. Punctuation
    carries a key (a compacted topic refuses a null one). Hand-written expectations, and
    the reference evaluator record for record."""
    topics = {
        name: unique_topic(name)
        for name in ("amounts", "rates", "amounts_dlq", "rates_dlq", "converted", "priced")
    }
    kafka.create_topic(topics["amounts"], partitions=2)
    kafka.create_topic(topics["rates"], partitions=2, config={"cleanup.policy": "compact"})
    program = tmp_path / "keyed_rates.sql"
    program.write_text((KEYED + CONVERTED).format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    assert circuit.table("rates").deletes_by_tombstone
    assert refused_by_spark(circuit, physical_plan(circuit)) == ()
    steps: list[dict[str, list[Any]]] = [
        {"rates": [_rate("9:00", "EUR", "1.10"), _rate("9:00", "GBP", "1.25")]},
        {
            "amounts": [_amount("9:30", "EUR", 100), _amount("9:45", "GBP", 20)],
            "rates": [_gone("9:40", "GBP")],
        },
        {"rates": [("bound", clock_ms("10:00"))]},
        {
            "amounts": [_amount("10:15", "EUR", 50), _amount("9:50", "GBP", 5)],
            "rates": [
                _rate("10:05", "GBP", "1.30"),
                _gone("9:20", "EUR"),
                ("bound", clock_ms("10:30")),
            ],
        },
        {"amounts": [_amount("10:20", "GBP", 8)], "rates": [("bound", clock_ms("11:00"))]},
    ]
    seen, new_rows = new_values_per_step(kafka, circuit, "converted", topics["converted"])
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=new_rows)
    assert seen == [
        Counter(),
        Counter([_converted("9:30", "EUR", 100, "1.10")]),
        Counter([_converted("9:45", "GBP", 20, None)]),
        Counter([_converted("10:15", "EUR", 50, "1.10"), _converted("9:50", "GBP", 5, None)]),
        Counter([_converted("10:20", "GBP", 8, "1.30")]),
    ]
    priced = Counter(value for value, _ in written(kafka, circuit, "priced", topics["priced"]))
    assert sorted((dict(v)["currency"], dict(v)["amount"]) for v in priced.elements()) == [
        ("EUR", 50),
        ("EUR", 100),
        ("GBP", 8),
    ]
    dead = read_topic(kafka.conf(), topics["rates_dlq"])
    assert [dict(m.headers())["tidemark.error.reason"] for m in dead] == [b"late"]
    assert read_topic(kafka.conf(), topics["amounts_dlq"]) == []
    oracle = evaluate(circuit, inputs)
    for view in ("converted", "priced"):
        assert written(kafka, circuit, view, topics[view]) == oracle_written(oracle, view)


RATES = """
CREATE TABLE rates (
    rowtime  TIMESTAMP      NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR        NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = '{rates}', 'dead_letter' = '{rates_dlq}');
"""

BOOKED = """
CREATE TABLE amounts (
    booked   TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,
    rowtime  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR   NOT NULL,
    amount   INT       NOT NULL
) WITH ('topic' = '{amounts}', 'dead_letter' = '{amounts_dlq}');

""" + RATES


@pytest.mark.slow  # CI's budget; the planner's side is a unit test (test_runtime_support_join)
def test_a_temporal_join_as_of_the_probe_tables_second_lateness_column_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """amounts' first LATENESS column is its booking time; the join is AS OF its second,
    rowtime, whose waterline the operator reads from the same probes: the seed's steps
    give the seed's rows in the seed's steps, and the reference evaluator's records."""
    topics = {
        name: unique_topic(name)
        for name in ("amounts", "rates", "amounts_dlq", "rates_dlq", "converted")
    }
    for name in ("amounts", "rates"):
        kafka.create_topic(topics[name], partitions=2)
    program = tmp_path / "booked.sql"
    program.write_text((BOOKED + CONVERTED).format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    assert refused_by_spark(circuit, physical_plan(circuit)) == ()

    def booked(step: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return {
            table: [
                {**row, "booked": row["rowtime"] - 60_000} if table == "amounts" else row
                for row in rows
            ]
            for table, rows in step.items()
        }

    seen, new_rows = new_values_per_step(kafka, circuit, "converted", topics["converted"])
    _, inputs = run_steps(
        kafka, tmp_path, circuit, topics, [booked(s) for s in STEPS], after_step=new_rows
    )
    assert seen == [
        Counter(),
        Counter(),
        Counter([_converted("9:30", "EUR", 100, "1.10"), _converted("9:45", "GBP", 20, "1.25")]),
        Counter(),
        Counter([_converted("10:15", "EUR", 50, "1.12")]),
        Counter([_converted("10:40", "CHF", 7, None)]),
    ]
    oracle = evaluate(circuit, inputs)
    assert written(kafka, circuit, "converted", topics["converted"]) == oracle_written(
        oracle, "converted"
    )


#: Each day's sum at the day's opening rate: AS OF the window's start, a time attribute
#: derived from its end through the stage boundary the join reads the sums through.
OPENING = """
CREATE TABLE amounts (
    rowtime  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR   NOT NULL,
    amount   INT       NOT NULL
) WITH ('topic' = '{amounts}', 'dead_letter' = '{amounts_dlq}');
""" + RATES + """
CREATE LOCAL VIEW daily AS
SELECT currency, SUM(amount) AS amount_sum, window_start AS day_start, window_end AS day
FROM TABLE(TUMBLE(TABLE amounts, DESCRIPTOR(rowtime), INTERVAL '1' DAY))
GROUP BY currency, window_start, window_end
EMIT AFTER WATERMARK;

CREATE VIEW daily_opening WITH ('topic' = '{opening}') AS
SELECT d.day_start, d.currency, d.amount_sum, r.rate AS opening_rate
FROM daily AS d
JOIN rates FOR SYSTEM_TIME AS OF d.day_start AS r
  ON d.currency = r.currency;
"""


@pytest.mark.slow  # ~2 min: two stages per step
def test_daily_sums_get_the_days_opening_rate_as_of_the_window_start_s10_s16_s19(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """The day's sum is final once w(amounts) passes its end; the join reads it through a
    stage boundary, where ``day_start`` is ``day - 1 day``, derived from the boundary's
    waterline (S10), and gets the rate valid at the day's start: the 26th's at 1.05 (the 25th
    23:00 rate; 1.10 is valid only from 8:00), the 27th's at 1.10 (1.20 comes at 0:10)."""
    names = ("amounts", "rates", "amounts_dlq", "rates_dlq", "opening")
    topics = {name: unique_topic(name) for name in names}
    for table in ("amounts", "rates"):
        kafka.create_topic(topics[table], partitions=2)
    path = tmp_path / "opening.sql"
    path.write_text(OPENING.format(**topics), encoding="utf-8")
    circuit = compile_program(path)
    composed = compose(circuit)
    assert not composed.refused and "daily" in composed.boundaries
    steps: list[dict[str, list[Any]]] = [
        {
            "rates": [_rate("23:00", "EUR", "1.05") | {"rowtime": clock_ms("23:00", day=25)}],
            "amounts": [_amount("9:00", "EUR", 100), _amount("15:00", "EUR", 50)],
        },
        {"rates": [_rate("8:00", "EUR", "1.10")]},
        {"amounts": [_day27(_amount("0:30", "EUR", 10))]},
        {"rates": [_day27(_rate("0:10", "EUR", "1.20"))]},
        {"amounts": [("bound", clock_ms("0:30", day=28))]},
    ]
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps)
    got = values_written(kafka, circuit, "daily_opening", topics["opening"])
    assert got == Counter([
        frozen({"day_start": clock_ms("0:00"), "currency": "EUR", "amount_sum": 150,
                "opening_rate": Decimal("1.05")}),
        frozen({"day_start": clock_ms("0:00", day=27), "currency": "EUR", "amount_sum": 10,
                "opening_rate": Decimal("1.10")}),
    ])
    # S19: the same rows as the reference evaluator, which runs the program in one pass.
    assert got == oracle_values(evaluate(circuit, inputs), "daily_opening")
