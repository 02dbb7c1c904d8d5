"""Seed 004's first query as its author wrote it, on processing time (SPEC S13, S16), in the
reference evaluator, from SQL text, step by step.

The seed joins each amount with "the exchange rate of the corresponding currency that is valid
when the amounts row arrives": ``r.proctime = (SELECT MAX(r2.proctime) FROM rates AS r2 WHERE
... r2.proctime <= a.proctime)``, Flink's processing-time temporal join ``JOIN rates FOR
SYSTEM_TIME AS OF a.proctime``. Processing time is the step's batch time, so a version's time
is the batch time of the step it arrives in, and an amount (at its step's batch time) is
written in its own step with the latest rate its currency has after that step's rates; no
LATENESS is needed on either table. Expected outputs are written by hand.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from circuit_builders import at

from app.circuit.explain import explain_text
from app.circuit.ir import Circuit, JoinAsOf
from app.circuit.reference import StepInput, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program

TABLES = """
CREATE TABLE amounts (
    amount   INT NOT NULL,
    currency VARCHAR NOT NULL,
    proctime AS PROCTIME()
) WITH ('topic' = 'amounts');

CREATE TABLE rates (
    currency VARCHAR NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    rowtime  TIMESTAMP,
    proctime AS PROCTIME(),
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = 'rates');
"""

# The seed's text, with the WHERE of its subquery completed by the key (the seed's "AND
# r2.proctime" follows a FROM without WHERE, and compares no currency).
SEED = """
CREATE VIEW converted WITH ('topic' = 'converted') AS
SELECT a.amount, r.rate
FROM amounts AS a, rates AS r
WHERE a.currency = r.currency AND
  r.proctime = (
    SELECT MAX(r2.proctime)
    FROM rates AS r2
    WHERE r2.currency = a.currency
    AND r2.proctime <= a.proctime);
"""

FLINK = """
CREATE VIEW converted WITH ('topic' = 'converted') AS
SELECT a.amount, r.rate
FROM amounts AS a
{kind} JOIN rates FOR SYSTEM_TIME AS OF a.proctime AS r
  ON a.currency = r.currency;
"""


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=TABLES + text)


def rate(currency: str, value: str, rowtime: str = "9:00") -> dict[str, Any]:
    return {"currency": currency, "rate": Decimal(value), "rowtime": at(rowtime)}


def amount(value: int, currency: str) -> dict[str, Any]:
    return {"amount": value, "currency": currency}


#: Batch times 10:00, 10:01, 10:02, 10:03. Step 2 has an EUR amount before and after a new
#: EUR rate in arrival order, step 3 a rate whose event time (8:00) is older than the one it
#: replaces: processing time orders versions by arrival, not by rowtime.
STEPS = [
    StepInput({"rates": [rate("EUR", "1.10"), rate("GBP", "1.25")],
               "amounts": [amount(100, "EUR"), amount(7, "USD")]},
              batch_time_ms=at("10:00")),
    StepInput({"amounts": [amount(50, "EUR")], "rates": [rate("EUR", "1.12", "9:30")]},
              batch_time_ms=at("10:01")),
    StepInput({"rates": [rate("GBP", "1.30", "8:00")]}, batch_time_ms=at("10:02")),
    StepInput({"amounts": [amount(20, "GBP"), amount(30, "EUR")]},
              batch_time_ms=at("10:03")),
]


def written(circuit: Circuit, steps: list[StepInput] = STEPS) -> list[list[dict[str, Any]]]:
    return [[r.value for r in result.outputs["converted"]] for result in evaluate(circuit, steps)]


def pair(value: int, rate_value: str | None) -> dict[str, Any]:
    return {"amount": value, "rate": None if rate_value is None else Decimal(rate_value)}


def test_s13_s16_each_amount_gets_the_rate_its_currency_has_in_its_step() -> None:
    """Step 1: the EUR amount meets the EUR rate of its own step (all of a step's rows have
    its batch time, so ``r2.proctime <= a.proctime`` holds); USD has no rate, INNER drops it.
    Step 2: the amount arrived before the step's new EUR rate, and still gets it (the version
    its key has after the step's versions). Step 3 writes nothing. Step 4: GBP's rate of step
    3 (its rowtime older than the first GBP rate's: arrival orders processing-time versions),
    EUR's of step 2. Each amount is written in its own step: no waterline holds it."""
    assert written(compile_sql(SEED)) == [
        [pair(100, "1.10")],
        [pair(50, "1.12")],
        [],
        [pair(20, "1.30"), pair(30, "1.12")],
    ]


def test_s13_s16_the_seeds_subquery_is_flinks_processing_time_temporal_join() -> None:
    """The subquery compiles to the same join as Flink's ``FOR SYSTEM_TIME AS OF
    a.proctime``: versions timed by the batch time of their step, none by a column."""
    by_subquery = compile_sql(SEED).view("converted").join
    flink = compile_sql(FLINK.format(kind="")).view("converted").join
    assert by_subquery == flink
    assert by_subquery is not None and by_subquery.as_of == JoinAsOf("proctime", None)


def test_s16_left_join_pads_an_amount_whose_currency_has_no_rate() -> None:
    assert written(compile_sql(FLINK.format(kind="LEFT")))[0] == [
        pair(100, "1.10"), pair(7, None)]


def test_s13_s16_the_versioned_table_needs_no_lateness_nor_proctime_column() -> None:
    """Flink's form over a versioned table without a PROCTIME column (nor LATENESS): a
    version's time is its step's batch time all the same; one version per key is held."""
    text = TABLES.replace(
        "    proctime AS PROCTIME(),\n    PRIMARY", "    PRIMARY") + FLINK.format(kind="")
    circuit = compile_program("test.sql", text=text)
    assert written(circuit) == written(compile_sql(SEED))
    results = evaluate(circuit, STEPS)
    assert [r.state_rows["converted"] for r in results] == [2, 2, 2, 2]


def test_l7_explain_says_each_amount_is_written_in_its_step() -> None:
    text = explain_text(compile_sql(SEED))
    assert ("as of a.proctime (processing time): the latest version of r its key has after "
            "the step's versions; each row of a is written in the step it arrives in") in text
    assert "default: each row in the step it arrives in (processing time)" in text


def test_l7_a_processing_time_bound_over_versions_by_event_time_is_an_error() -> None:
    """Versions ordered by rowtime against a processing-time bound: AS OF processing time
    the version is the latest by arrival, which the subquery does not state."""
    text = (SEED.replace("r.proctime = (", "r.rowtime = (")
            .replace("MAX(r2.proctime)", "MAX(r2.rowtime)")
            .replace("r2.proctime <= a.proctime", "r2.rowtime <= a.proctime"))
    with pytest.raises(ProgramError) as info:
        compile_sql(text)
    assert ("test.sql:20:3: error: AS OF processing time, the version of r is the latest its "
            "key has when the a row arrives (by arrival), not the one with the greatest "
            "r.rowtime") in str(info.value)


def test_l7_event_time_subquery_over_a_processing_time_column_is_an_error() -> None:
    """Versions ordered by proctime with an event-time bound: the temporal join of an
    event-time probe orders versions by the table's LATENESS column."""
    text = TABLES.replace("amount   INT NOT NULL,", "amount INT NOT NULL, ts TIMESTAMP NOT "
                          "NULL LATENESS INTERVAL '0' SECOND,").replace(
        "rowtime  TIMESTAMP,", "rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,"
    ) + SEED.replace(
        "r2.proctime <= a.proctime", "r2.proctime <= a.ts")
    with pytest.raises(ProgramError) as info:
        compile_program("test.sql", text=text)
    assert ("the versions of rates are ordered by its first LATENESS column rowtime, not by "
            "proctime; compare r.rowtime with the MAX of rowtime at or below a.<time>") in str(
        info.value)


RISINGWAVE = """
CREATE VIEW converted WITH ('topic' = 'converted') AS
SELECT a.amount, r.rate
FROM amounts AS a
{kind} JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r
  ON a.currency = r.currency;
"""


def test_s13_s16_as_of_proctime_is_each_rows_step_as_risingwave_writes_it() -> None:
    """RisingWave's spelling, AS OF PROCTIME(): the probe side needs no PROCTIME column,
    each row is at its own step's batch time, so it writes what AS OF a.proctime writes;
    the view has no time attribute, and Spark runs it on the join operator."""
    from app.runtime.planner.physical import physical_plan
    from app.runtime.planner.support import refused_by_spark

    text = TABLES.replace("    proctime AS PROCTIME()\n) WITH ('topic' = 'amounts')",
                          ") WITH ('topic' = 'amounts')").replace(
        "currency VARCHAR NOT NULL,\n) WITH ('topic' = 'amounts')",
        "currency VARCHAR NOT NULL\n) WITH ('topic' = 'amounts')")
    for kind in ("", "LEFT"):
        circuit = compile_program("test.sql", text=text + RISINGWAVE.format(kind=kind))
        join = circuit.view("converted").join
        assert join is not None and join.as_of == JoinAsOf(None, None)
        assert circuit.view("converted").time_attributes == ()
        assert written(circuit) == written(compile_sql(FLINK.format(kind=kind)))
        assert refused_by_spark(circuit, physical_plan(circuit)) == ()
    assert "as of PROCTIME() (processing time)" in explain_text(circuit)
