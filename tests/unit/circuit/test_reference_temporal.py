"""SPEC S16: the temporal join (``b FOR SYSTEM_TIME AS OF a.t``) in the reference evaluator,
from SQL text, step by step.

Seed 004's amounts-and-rates join (Flink's event-time temporal join): each amount is joined
with the rate of its currency valid at the amount's time, i.e. the rate row of that currency
with the greatest time at or below it; and a daily aggregate of the amounts is joined with
the day's closing rate (the version valid at the window's end). Both tables have LATENESS 0,
so a row (or a punctuation) at x moves its table's waterline to x. S16: an amount row is
written once the rates' waterline passes its time (until then no rate at or below it is
known to be final), once, insert-only. Expected outputs are written by hand.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from circuit_builders import at

from app.circuit.explain import explain_text
from app.circuit.ir import Circuit
from app.circuit.reference import Deletion, Punctuation, StepInput, StepResult, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program

ROOT = Path(__file__).resolve().parents[3]

TABLES = """
CREATE TABLE amounts (
    rowtime  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR NOT NULL,
    amount   INT NOT NULL
) WITH ('topic' = 'amounts');

CREATE TABLE rates (
    rowtime  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = 'rates');
"""

# Seed 004's first query: "r.rowtime = (SELECT MAX(r2.rowtime) FROM rates AS r2 WHERE
# r2.rowtime <= a.rowtime)", written as Flink writes it.
CONVERTED = """
CREATE VIEW converted WITH ('topic' = 'converted') AS
SELECT a.rowtime, a.currency, a.amount, r.rate, a.amount * r.rate AS converted
FROM amounts AS a
{kind} JOIN rates FOR SYSTEM_TIME AS OF a.rowtime AS r
  ON a.currency = r.currency;
"""

# Seed 004's second query: the daily sums joined with the day's closing rate.
DAILY = """
CREATE LOCAL VIEW daily AS
SELECT currency, SUM(amount) AS amount_sum, window_end AS day
FROM TABLE(TUMBLE(TABLE amounts, DESCRIPTOR(rowtime), INTERVAL '1' DAY))
GROUP BY currency, window_end
EMIT AFTER WATERMARK;

CREATE VIEW daily_converted WITH ('topic' = 'daily_converted') AS
SELECT d.day, d.currency, d.amount_sum, r.rate AS closing_rate
FROM daily AS d
JOIN rates FOR SYSTEM_TIME AS OF d.day AS r
  ON d.currency = r.currency;
"""


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=TABLES + text)


def converted(kind: str = "") -> Circuit:
    return compile_sql(CONVERTED.format(kind=kind))


def amount(clock: str, currency: str, value: int) -> dict[str, Any]:
    return {"rowtime": at(clock), "currency": currency, "amount": value}


def rate(clock: str, currency: str, value: str) -> dict[str, Any]:
    return {"rowtime": at(clock), "currency": currency, "rate": Decimal(value)}


def rates_bound(clock: str) -> StepInput:
    """S4: a punctuation; with LATENESS 0 it moves the rates' waterline to this time."""
    return StepInput({}, punctuations={"rates": [Punctuation(at(clock))]})


def row(clock: str, currency: str, value: int, rate_value: str | None) -> dict[str, Any]:
    found = None if rate_value is None else Decimal(rate_value)
    return {"rowtime": at(clock), "currency": currency, "amount": value, "rate": found,
            "converted": None if found is None else value * found}


def values(result: StepResult, view: str = "converted") -> list[Any]:
    return [r.value for r in result.outputs[view]]


# The seed's amounts and rates, one table per step where the order matters.
SEED_STEPS = [
    StepInput({"rates": [rate("9:00", "EUR", "1.10"), rate("9:00", "GBP", "1.25")]}),
    StepInput({"amounts": [amount("9:30", "EUR", 100), amount("9:45", "GBP", 20)]}),
    StepInput({"rates": [rate("10:00", "EUR", "1.12")]}),
    StepInput({"amounts": [amount("10:15", "EUR", 50)]}),
    rates_bound("10:30"),
]


def test_s16_seed_004_each_amount_gets_the_rate_valid_at_its_time() -> None:
    """S16: step 2's amounts (9:30, 9:45) wait: w(rates) = 9:00 does not pass them, so a
    rate at or below their time could still come. Step 3's rate at 10:00 moves w(rates) to
    10:00: both are written, EUR with the 9:00 rate 1.10 (the 10:00 rate is valid only from
    10:00), GBP with 1.25. The 10:15 amount waits for the punctuation at 10:30 and gets the
    10:00 rate. Written once each, append (insert-only), in arrival order."""
    results = evaluate(converted(), SEED_STEPS)
    assert [values(r) for r in results] == [
        [],
        [],
        [row("9:30", "EUR", 100, "1.10"), row("9:45", "GBP", 20, "1.25")],
        [],
        [row("10:15", "EUR", 50, "1.12")],
    ]
    assert all(record.key is None for r in results for record in r.outputs["converted"])
    # docs/semantics.md's table: held amounts plus the versions kept.
    assert [r.state_rows["converted"] for r in results] == [2, 4, 3, 3, 2]


# Seed 004's first query as the seed writes it: a FROM list and a correlated MAX subquery.
CONVERTED_BY_SUBQUERY = """
CREATE VIEW converted WITH ('topic' = 'converted') AS
SELECT a.rowtime, a.currency, a.amount, r.rate, a.amount * r.rate AS converted
FROM amounts AS a, rates AS r
WHERE a.currency = r.currency
  AND r.rowtime = (
    SELECT MAX(r2.rowtime)
    FROM rates AS r2
    WHERE r2.currency = a.currency
    AND r2.rowtime <= a.rowtime);
"""


def test_s16_seed_004_correlated_max_subquery_is_the_temporal_join() -> None:
    """The subquery picks, per amount, the rate row of its currency with the greatest time at
    or below the amount's: the version valid at its time. It compiles to the same join as
    FOR SYSTEM_TIME AS OF and writes the same rows in the same steps."""
    by_subquery = compile_sql(CONVERTED_BY_SUBQUERY)
    assert by_subquery.view("converted").join == converted().view("converted").join
    assert [values(r) for r in evaluate(by_subquery, SEED_STEPS)] == [
        values(r) for r in evaluate(converted(), SEED_STEPS)]


@pytest.mark.parametrize(("change", "message"), [
    ("SELECT MAX(r2.rowtime)", "SELECT MIN(r2.rowtime)"),
    ("r2.rowtime <= a.rowtime", "r2.rowtime < a.rowtime"),
    ("WHERE a.currency = r.currency\n  AND", "WHERE"),
])
def test_l7_a_subquery_that_states_no_temporal_join_is_refused(change: str,
                                                                message: str) -> None:
    text = CONVERTED_BY_SUBQUERY.replace(change.replace("\\n", "\n"), message)
    assert text != CONVERTED_BY_SUBQUERY
    with pytest.raises(ProgramError) as raised:
        compile_sql(text)
    assert raised.value.diagnostics[0].fix


def test_s16_s14_output_waterline_is_held_back_by_the_rates() -> None:
    """S10/S16: a.rowtime stays a time attribute with w = min(w(amounts), w(rates)): a row
    written later is at or above both (a held amount is at or above w(rates))."""
    results = evaluate(converted(), SEED_STEPS)
    assert [r.view_waterlines["converted"] for r in results] == [
        None, at("9:00"), at("9:45"), at("10:00"), at("10:15")]


def test_s16_out_of_order_rates_of_one_step_are_versions_by_their_time() -> None:
    """S16: a version is the rate row with the greatest time at or below the amount's, not
    the last one to arrive: 10:00 arrives before 9:00 in the same step."""
    results = evaluate(converted(), [
        StepInput({"rates": [rate("10:00", "EUR", "1.12"), rate("9:00", "EUR", "1.10")],
                   "amounts": [amount("9:30", "EUR", 100), amount("10:30", "EUR", 7)]}),
        rates_bound("11:00"),
    ])
    assert [values(r) for r in results] == [
        [row("9:30", "EUR", 100, "1.10")],
        [row("10:30", "EUR", 7, "1.12")],
    ]


def test_s16_a_rate_arriving_after_the_amount_with_an_earlier_time_counts() -> None:
    """S5/S16: the 9:20 rate arrives a step after the 9:30 amount, but at or above
    w(rates) = 9:00, so it is on time; the amount is still held (w(rates) has not passed
    9:30), so it is joined with the 9:20 version, the one valid at 9:30."""
    results = evaluate(converted(), [
        StepInput({"rates": [rate("9:00", "EUR", "1.10")]}),
        StepInput({"amounts": [amount("9:30", "EUR", 100)]}),
        StepInput({"rates": [rate("9:20", "EUR", "1.15")]}),
        rates_bound("10:00"),
    ])
    assert [values(r) for r in results] == [[], [], [], [row("9:30", "EUR", 100, "1.15")]]
    assert results[2].dead_letters == ()


def test_s16_a_later_row_at_the_same_time_replaces_that_version() -> None:
    """S2/S16: the table is insert-only and its key not enforced: a second EUR row at 9:00
    is the 9:00 version from then on (the later arrival wins, as in Flink)."""
    results = evaluate(converted(), [
        StepInput({"rates": [rate("9:00", "EUR", "1.10")]}),
        StepInput({"rates": [rate("9:00", "EUR", "1.11")],
                   "amounts": [amount("9:30", "EUR", 100)]}),
        rates_bound("10:00"),
    ])
    assert values(results[2]) == [row("9:30", "EUR", 100, "1.11")]


def test_s16_left_writes_an_amount_without_a_rate_with_nulls_inner_drops_it() -> None:
    """S16: CHF has no rate, and the 8:00 EUR amount is before EUR's first version. LEFT
    writes both with NULL rate once w(rates) passes their time (never earlier: a rate could
    still come); INNER drops them."""
    steps = [
        StepInput({"rates": [rate("8:30", "EUR", "1.10")],
                   "amounts": [amount("8:00", "EUR", 5), amount("9:00", "CHF", 40),
                               amount("9:10", "EUR", 1)]}),
        rates_bound("9:05"),
        rates_bound("9:30"),
    ]
    left = evaluate(converted("LEFT"), steps)
    assert [values(r) for r in left] == [
        [row("8:00", "EUR", 5, None)],
        [row("9:00", "CHF", 40, None)],
        [row("9:10", "EUR", 1, "1.10")],
    ]
    inner = evaluate(converted(), steps)
    assert [values(r) for r in inner] == [[], [], [row("9:10", "EUR", 1, "1.10")]]


def test_s16_s5_s6_late_rows_of_each_side_go_to_their_own_dead_letters() -> None:
    """S5/S6/S16: after step 2, w(rates) = 10:00 and w(amounts) = 9:55. Step 3's 9:50 rate
    and 9:00 amount are below them: dead letters of rates and of amounts, never joined; the
    10:20 amount is on time and gets the 10:00 rate."""
    results = evaluate(converted(), [
        StepInput({"rates": [rate("9:00", "EUR", "1.10")],
                   "amounts": [amount("9:55", "EUR", 100)]}),
        StepInput({"rates": [rate("10:00", "EUR", "1.12")]}),
        StepInput({"rates": [rate("9:50", "EUR", "9.99")],
                   "amounts": [amount("9:00", "EUR", 3), amount("10:20", "EUR", 2)]}),
        rates_bound("10:30"),
    ])
    assert [values(r) for r in results] == [
        [], [row("9:55", "EUR", 100, "1.10")], [], [row("10:20", "EUR", 2, "1.12")]]
    dead = results[2].dead_letters
    assert [(d.table, d.reason, d.column, d.value, d.waterline) for d in dead] == [
        ("amounts", "late", "rowtime", at("9:00"), at("9:55")),
        ("rates", "late", "rowtime", at("9:50"), at("10:00")),
    ]


def test_s16_s11_versions_no_lookup_can_reach_are_freed() -> None:
    """S16 state: held amounts plus, per key, the latest version at or below
    min(w(amounts), w(rates)) and every later one. Ten steps of one EUR rate and one EUR
    amount at the same minute: the amount waits a step for the next rate, then the older
    version is freed, so the state stays at one held amount, one EUR version and GBP's
    only version (one per key stays), however long the input flows."""
    steps = [StepInput({"rates": [rate("8:00", "GBP", "1.25")]})] + [
        StepInput({"rates": [rate(f"10:{m:02d}", "EUR", f"1.{m:02d}")],
                   "amounts": [amount(f"10:{m:02d}", "EUR", m)]})
        for m in range(10)
    ]
    results = evaluate(converted(), steps)
    assert [r.state_rows["converted"] for r in results] == [1] + [3] * 10
    assert [values(r) for r in results[2:]] == [
        [row(f"10:{m:02d}", "EUR", m, f"1.{m:02d}")] for m in range(9)]


def test_s16_versions_are_kept_for_an_amount_below_the_rates_waterline() -> None:
    """S16: w(amounts) lags: an amount at 9:10 is on time after the rates moved to 11:00,
    and is written at once with the 9:00 version, which was kept because w(amounts) = 9:05
    had not passed the 10:00 version."""
    results = evaluate(converted(), [
        StepInput({"rates": [rate("9:00", "EUR", "1.10")],
                   "amounts": [amount("9:05", "EUR", 1)]}),
        StepInput({"rates": [rate("10:00", "EUR", "1.12"), rate("11:00", "EUR", "1.13")]}),
        StepInput({"amounts": [amount("9:10", "EUR", 2)]}),
    ])
    assert [values(r) for r in results] == [
        [], [row("9:05", "EUR", 1, "1.10")], [row("9:10", "EUR", 2, "1.10")]]
    # After step 3, w(amounts) = 9:10: the 9:00 version is the latest at or below it.
    assert [r.state_rows["converted"] for r in results] == [2, 3, 3]


def test_s16_seed_004_daily_sums_get_the_days_closing_rate() -> None:
    """Seed 004's second query: the daily sum (TUMBLE of a day, EMIT AFTER WATERMARK, final
    in step 3 when w(amounts) passes midnight, S18) is joined with the rate valid at the
    window's end, the day's closing rate 1.12 (23:00), once w(rates) passes midnight (step
    4); the next day's rate 1.20 at 0:10 is not the closing rate."""
    results = evaluate(compile_sql(DAILY), [
        StepInput({"rates": [rate("8:00", "EUR", "1.10")],
                   "amounts": [amount("9:00", "EUR", 100), amount("15:00", "EUR", 50)]}),
        StepInput({"rates": [rate("23:00", "EUR", "1.12")]}),
        StepInput({"amounts": [amount("24:30", "EUR", 10)]}),
        StepInput({"rates": [rate("24:10", "EUR", "1.20")]}),
    ])
    assert [values(r, "daily_converted") for r in results] == [
        [], [], [],
        [{"day": at("24:00"), "currency": "EUR", "amount_sum": 150,
          "closing_rate": Decimal("1.12")}],
    ]


def test_s16_language_doc_temporal_example_compiles_and_runs() -> None:
    """The temporal join example of docs/language.md is this file's tables and its LEFT
    converted view; over the seed's steps it writes the rows above (every amount has a
    rate, so LEFT and INNER agree)."""
    doc = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
    section = doc[doc.index("### Temporal joins"):]
    example = re.search(r"```sql\n(CREATE TABLE amounts.*?)```", section, re.S)
    assert example is not None
    written = "\n".join(line for line in example[1].splitlines() if not line.startswith("--"))
    assert written.strip() == (TABLES + CONVERTED.format(kind="LEFT")).strip()
    results = evaluate(compile_program("doc.sql", text=example[1]), SEED_STEPS)
    assert [values(r) for r in results] == [
        [],
        [],
        [row("9:30", "EUR", 100, "1.10"), row("9:45", "GBP", 20, "1.25")],
        [],
        [row("10:15", "EUR", 50, "1.12")],
    ]


KEYED_RATES = TABLES.replace(
    """    rowtime  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR NOT NULL,
    rate""",
    """    rowtime  TIMESTAMP NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '0' SECOND,
    currency VARCHAR NOT NULL METADATA FROM 'key',
    rate""",
)


def keyed(kind: str = "") -> Circuit:
    """converted over rates keyed by currency on their topic (the Kafka key), each rate's
    time its record's timestamp: a tombstone deletes its currency."""
    return compile_program("test.sql", text=KEYED_RATES + CONVERTED.format(kind=kind))


def gone(clock: str, currency: str | None) -> Deletion:
    """The tombstone of ``currency`` at ``clock``: its key and timestamp, no value."""
    return Deletion({"rowtime": at(clock), "currency": currency})


def test_s16_only_a_table_keyed_by_its_kafka_key_deletes_by_tombstone() -> None:
    assert keyed().table("rates").deletes_by_tombstone
    assert not converted().table("rates").deletes_by_tombstone
    assert "a tombstone deletes its key" in explain_text(keyed())
    assert "tombstone" not in explain_text(converted())
    with pytest.raises(ValueError, match="PRIMARY KEY is not its Kafka key"):
        evaluate(converted(), [StepInput({"rates": [gone("9:00", "EUR")]})])


def test_s16_a_tombstone_ends_its_keys_version_until_the_next_one() -> None:
    """S16 (a table read as the latest row per key, a tombstone deletes): GBP's rate is
    deleted at 9:40. The 9:30 GBP amount still has the 9:00 rate; the 9:45 one has none
    (LEFT pads it, INNER drops it), and the 10:10 one has the 10:05 rate. The tombstone
    moves w(rates) like a row (S3): the 9:30 amounts are written in its step."""
    steps = [
        StepInput({"rates": [rate("9:00", "EUR", "1.10"), rate("9:00", "GBP", "1.25")]}),
        StepInput({"amounts": [amount("9:30", "GBP", 1), amount("9:45", "GBP", 2)],
                   "rates": [gone("9:40", "GBP")]}),
        StepInput({"amounts": [amount("10:10", "GBP", 3)],
                   "rates": [rate("10:05", "GBP", "1.30"), gone("10:20", "EUR")]}),
    ]
    left = evaluate(keyed("LEFT"), steps)
    assert [values(r) for r in left] == [
        [],
        [row("9:30", "GBP", 1, "1.25")],
        [row("9:45", "GBP", 2, None), row("10:10", "GBP", 3, "1.30")],
    ]
    inner = evaluate(keyed(), steps)
    assert [values(r) for r in inner][2] == [row("10:10", "GBP", 3, "1.30")]
    assert all(not r.dead_letters for r in left)


def test_s16_a_tombstone_at_a_versions_time_replaces_it_in_arrival_order() -> None:
    """A tombstone after a row of its key at the same time deletes that version; a row after
    the tombstone brings it back (a later record of a key at a time replaces its version)."""
    results = evaluate(keyed("LEFT"), [
        StepInput({"rates": [rate("9:00", "EUR", "1.10"), gone("9:00", "EUR"),
                             rate("9:00", "GBP", "1.25")]}),
        StepInput({"rates": [gone("9:00", "GBP"), rate("9:00", "GBP", "1.26")],
                   "amounts": [amount("9:00", "EUR", 1), amount("9:00", "GBP", 2)]}),
        rates_bound("9:01"),
    ])
    assert values(results[2]) == [row("9:00", "EUR", 1, None), row("9:00", "GBP", 2, "1.26")]


def test_s16_s5_s7_tombstones_are_gated_like_rows_and_reach_no_other_view() -> None:
    """A late tombstone and one without a key are dead letters of rates (late, invalid) and
    delete nothing; an on-time one is no row of rates for any other view."""
    circuit = compile_program("test.sql", text=KEYED_RATES + CONVERTED.format(kind="LEFT") + """
CREATE VIEW rate_rows WITH ('topic' = 'rate_rows') AS SELECT currency, rate FROM rates;
""")
    results = evaluate(circuit, [
        StepInput({"rates": [rate("10:00", "EUR", "1.10")]}),
        StepInput({"rates": [gone("9:59", "EUR"), gone("10:05", None), gone("10:06", "GBP")],
                   "amounts": [amount("10:01", "EUR", 1)]}),
        rates_bound("10:30"),
    ])
    assert [(d.reason, d.row["currency"]) for d in results[1].dead_letters] == [
        ("invalid", None), ("late", "EUR")]
    assert [[r.value for r in x.outputs["rate_rows"]] for x in results] == [
        [{"currency": "EUR", "rate": Decimal("1.10")}], [], []]
    assert values(results[1]) == [row("10:01", "EUR", 1, "1.10")]
    assert results[1].waterlines["rates"]["rowtime"] == at("10:06")


def test_s16_s11_a_deleted_key_is_freed_once_no_lookup_can_reach_it() -> None:
    """A key whose latest version at or below min(w(amounts), w(rates)) is its deletion, with
    no later version, holds no state: keys that come and go do not grow it."""
    steps = [
        StepInput({"rates": [rate(f"9:{m:02d}", f"C{m}", "1.00") for m in range(10)],
                   "amounts": [amount("9:00", "C0", 1)]}),
        StepInput({"rates": [gone(f"9:{10 + m:02d}", f"C{m}") for m in range(10)],
                   "amounts": [amount("9:30", "C0", 2)]}),
        rates_bound("9:40"),
    ]
    results = evaluate(keyed("LEFT"), steps)
    # Step 1: ten versions (the 9:00 amount is written: w(rates) = 9:09 passes it). Step 2:
    # each key's deletion is its latest version at or below min(9:30, 9:19): every key is
    # freed, the 9:30 amount is held. Step 3 writes it.
    assert [r.state_rows["converted"] for r in results] == [10, 1, 0]
    assert values(results[0]) == [row("9:00", "C0", 1, "1.00")]
    assert values(results[2]) == [row("9:30", "C0", 2, None)]
