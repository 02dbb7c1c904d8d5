"""Derived time attributes on Spark through the real broker (SPEC S10, S11, S12, S14): seed
004's daily sums by ``CEIL(rowtime TO DAY)`` and a TUMBLE over ``rowtime + INTERVAL '1' HOUR``
computed in a view, both completed by the Python state operator at the threshold of their
derivation on the table's watermark; equal to the reference evaluator record for record,
``tidemark.waterline`` headers included.

amounts (LATENESS 0), step by step (2026-11-26 unless said):

    step  amounts                              w(rowtime)   daily (day = CEIL TO DAY)
    1     10:00 EUR 3, 11:00 USD 5             11:00        -            header 27th 00:00
    2     27th 00:00 EUR 4 (its own CEIL)      27th 00:00   -            header 27th 00:00
    3     27th 08:00 USD 2, 23:00 EUR 100 late 27th 08:00   EUR 7, USD 5 (day 27th), header 28th
    4     bound 28th 00:00                     28th 00:00   -            header 28th 00:00
    5     bound 28th 00:00:01                  28th 00:00:01 USD 2 (day 28th), header 29th

hourly: windows of 1 hour on ts = rowtime + 1 hour (w(ts) = w(rowtime) + 1 hour), each
written once w(ts) reaches its end: [11:00, 12:00) EUR 3 in step 1, [12:00, 13:00) USD 5 in
step 2, [27th 01:00, 02:00) EUR 4 in step 3, [27th 09:00, 10:00) USD 2 in step 4.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from table_steps import clock_ms, frozen, new_values_per_step, oracle_written, run_steps, written

from app.circuit.reference import evaluate
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

# Slow (about 50 s, CI's budget): CI's differential runs 6 derived-time aggregates on Spark.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROGRAM = """
CREATE TABLE amounts (
    rowtime  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR   NOT NULL,
    amount   INT       NOT NULL
) WITH ('topic' = '{amounts}', 'dead_letter' = '{amounts_dlq}');

CREATE VIEW daily WITH ('topic' = '{daily}', 'format' = 'append') AS
SELECT currency, SUM(amount) AS amount_sum, CEIL(rowtime TO DAY) AS day
FROM amounts
GROUP BY currency, CEIL(rowtime TO DAY)
EMIT AFTER WATERMARK;

CREATE LOCAL VIEW shifted AS
SELECT rowtime + INTERVAL '1' HOUR AS ts, currency, amount FROM amounts;

CREATE VIEW hourly WITH ('topic' = '{hourly}', 'format' = 'append') AS
SELECT window_start, window_end, currency, SUM(amount) AS total
FROM TABLE(TUMBLE(TABLE shifted, DESCRIPTOR(ts), INTERVAL '1' HOUR))
GROUP BY window_start, window_end, currency
EMIT AFTER WATERMARK;
"""


def _at(clock: str, day: int = 26) -> int:
    return clock_ms(clock, day)


def _amount(clock: str, currency: str, amount: int, day: int = 26) -> dict[str, Any]:
    return {"rowtime": _at(clock, day), "currency": currency, "amount": amount}


def _day(currency: str, total: int, day: int) -> Any:
    return frozen({"currency": currency, "amount_sum": total, "day": _at("0:00", day)})


def _hour(start: str, currency: str, total: int, day: int = 26) -> Any:
    begin = _at(start, day)
    return frozen({"window_start": begin, "window_end": begin + 3_600_000,
                   "currency": currency, "total": total})


def _header(ms: int) -> str:
    return format_time_value(ms, "ms")


def test_s11_derived_time_keys_and_windows_complete_on_spark_as_in_the_reference(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    names = ("amounts", "amounts_dlq", "daily", "hourly")
    topics = {name: unique_topic(name) for name in names}
    kafka.create_topic(topics["amounts"], partitions=2)
    program = tmp_path / "derived.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    assert plan.placement("daily").placement == "state_operator"
    assert plan.placement("hourly").placement == "state_operator"
    steps: list[dict[str, list[Any]]] = [
        {"amounts": [_amount("10:00", "EUR", 3), _amount("11:00", "USD", 5)]},
        {"amounts": [_amount("0:00", "EUR", 4, day=27)]},
        {"amounts": [_amount("8:00", "USD", 2, day=27), _amount("23:00", "EUR", 100)]},
        {"amounts": [("bound", _at("0:00", 28))]},
        {"amounts": [("bound", _at("0:00:01", 28))]},
    ]
    daily_seen, daily_rows = new_values_per_step(kafka, circuit, "daily", topics["daily"])
    hourly_seen, hourly_rows = new_values_per_step(kafka, circuit, "hourly", topics["hourly"])

    def after_step() -> None:
        daily_rows()
        hourly_rows()

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=after_step)
    assert daily_seen == [
        Counter(),
        Counter(),
        Counter([_day("EUR", 7, 27), _day("USD", 5, 27)]),
        Counter(),
        Counter([_day("USD", 2, 28)]),
    ]
    assert hourly_seen == [
        Counter([_hour("11:00", "EUR", 3)]),
        Counter([_hour("12:00", "USD", 5)]),
        Counter([_hour("1:00", "EUR", 4, day=27)]),
        Counter([_hour("9:00", "USD", 2, day=27)]),
        Counter(),
    ]
    # S14: each record carries its view's waterline after the step that wrote it: w(day) =
    # CEIL(w(rowtime) TO DAY), w(window_start) = w(ts) = w(rowtime) + 1 hour.
    assert written(kafka, circuit, "daily", topics["daily"]) == Counter({
        (_day("EUR", 7, 27), _header(_at("0:00", 28))): 1,
        (_day("USD", 5, 27), _header(_at("0:00", 28))): 1,
        (_day("USD", 2, 28), _header(_at("0:00", 29))): 1,
    })
    assert written(kafka, circuit, "hourly", topics["hourly"]) == Counter({
        (_hour("11:00", "EUR", 3), _header(_at("12:00"))): 1,
        (_hour("12:00", "USD", 5), _header(_at("1:00", 27))): 1,
        (_hour("1:00", "EUR", 4, day=27), _header(_at("9:00", 27))): 1,
        (_hour("9:00", "USD", 2, day=27), _header(_at("1:00", 28))): 1,
    })
    late = read_topic(kafka.conf(), topics["amounts_dlq"])
    assert [dict(m.headers())["tidemark.error.reason"] for m in late] == [b"late"]
    oracle = evaluate(circuit, inputs)
    for view in ("daily", "hourly"):
        assert written(kafka, circuit, view, topics[view]) == oracle_written(oracle, view)
