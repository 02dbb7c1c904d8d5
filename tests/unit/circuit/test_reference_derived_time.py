"""Derived time attributes (SPEC S10, S11, S14; docs/semantics.md) in the reference evaluator,
from SQL text, step by step.

Seed 004's daily aggregate groups amounts by ``CEIL(rowtime TO DAY)``: the day a row ends
in. ``CEIL``, ``FLOOR``/``DATE_TRUNC`` and ``+``/``- INTERVAL`` are monotone non-decreasing, so a
column computed by them from a time attribute ``c`` is one, with waterline ``f(w(c))``; a
group keyed by its value ``d`` is complete once that waterline passes ``d`` (no accepted row is
below it, so none has ``d`` any more). amounts has LATENESS 0. Expected outputs are written
by hand.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from app.circuit.derived_time import monotone_steps
from app.circuit.explain import explain_text
from app.circuit.functions import parse_timestamp
from app.circuit.ir import Call, Circuit, ColumnRef, Literal_, SqlType, TimeStep
from app.circuit.reference import Punctuation, StepInput, evaluate
from app.circuit.waterline import completion_threshold, derived_waterline
from app.errors import ProgramError
from app.program.compile import compile_program

TABLE = """
CREATE TABLE amounts (
    rowtime  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR   NOT NULL,
    amount   INT       NOT NULL
) WITH ('topic' = 'amounts');
"""

DAILY = """
CREATE VIEW daily WITH ('topic' = 'daily', 'format' = 'append') AS
SELECT currency, SUM(amount) AS amount_sum, {day} AS day
FROM amounts GROUP BY currency, {day}
EMIT AFTER WATERMARK;
"""

HOUR_MS = 3_600_000


def ts(text: str) -> int:
    value = parse_timestamp(text)
    assert value is not None
    return value


def amount(when: str, currency: str, value: int) -> dict[str, Any]:
    return {"rowtime": ts(when), "currency": currency, "amount": value}


#: Five steps: 10:00 and 11:00 on Jan 1 (w = Jan 1 11:00); midnight Jan 2 exactly, whose
#: CEIL is itself (w = Jan 2 00:00); Jan 2 08:00, beside a late Jan 1 23:00 (below w = Jan 2
#: 00:00); a bound of Jan 3 00:00; a bound of Jan 3 00:00:01.
STEPS = [
    StepInput({"amounts": [amount("2024-01-01 10:00:00", "EUR", 3),
                           amount("2024-01-01 11:00:00", "USD", 5)]}),
    StepInput({"amounts": [amount("2024-01-02 00:00:00", "EUR", 4)]}),
    StepInput({"amounts": [amount("2024-01-02 08:00:00", "USD", 2),
                           amount("2024-01-01 23:00:00", "EUR", 100)]}),
    StepInput({}, punctuations={"amounts": [Punctuation(ts("2024-01-03 00:00:00"))]}),
    StepInput({}, punctuations={"amounts": [Punctuation(ts("2024-01-03 00:00:01"))]}),
]


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=TABLE + text)


def day_row(currency: str, total: int, day: str) -> dict[str, Any]:
    return {"currency": currency, "amount_sum": total, "day": ts(day)}


def outputs(circuit: Circuit, view: str, steps: list[StepInput] = STEPS) -> list[list[Any]]:
    return [[r.value for r in x.outputs[view]] for x in evaluate(circuit, steps)]


def test_s10_waterline_of_each_derived_form_is_the_function_of_the_waterline() -> None:
    w = ts("2024-01-01 10:30:00")
    assert derived_waterline((TimeStep("ceil", unit="DAY"),), w) == ts("2024-01-02 00:00:00")
    assert derived_waterline((TimeStep("floor", unit="DAY"),), w) == ts("2024-01-01 00:00:00")
    assert derived_waterline((TimeStep("shift", amount=HOUR_MS),), w) == ts(
        "2024-01-01 11:30:00")
    assert derived_waterline((TimeStep("shift", amount=-HOUR_MS),
                              TimeStep("ceil", unit="HOUR")), w) == ts("2024-01-01 10:00:00")
    assert derived_waterline((TimeStep("ceil", unit="MONTH"),), w) == ts("2024-02-01 00:00:00")
    # A boundary is its own CEIL and FLOOR; -infinity stays -infinity.
    midnight = ts("2024-01-02 00:00:00")
    assert derived_waterline((TimeStep("ceil", unit="DAY"),), midnight) == midnight
    assert derived_waterline((TimeStep("floor", unit="DAY"),), midnight) == midnight
    assert derived_waterline((TimeStep("ceil", unit="DAY"),), None) is None


def test_s11_completion_threshold_is_the_least_source_waterline_reaching_the_bound() -> None:
    """A group of value d is complete once w(attribute) >= d + 1; on the source column that is
    CEIL: w > d (the last row of day d is at d itself); FLOOR: w >= d + 1 day; + 1 hour:
    w > d - 1 hour."""
    d = ts("2024-01-02 00:00:00")
    assert completion_threshold((TimeStep("ceil", unit="DAY"),), d + 1) == d + 1
    assert completion_threshold((TimeStep("floor", unit="DAY"),), d + 1) == ts(
        "2024-01-03 00:00:00")
    assert completion_threshold((TimeStep("shift", amount=HOUR_MS),), d + 1) == d - HOUR_MS + 1
    assert completion_threshold((), d) == d  # a window_end: w >= e
    # Brute force: the threshold is the least w whose derived waterline reaches the bound.
    steps = (TimeStep("shift", amount=-90_000), TimeStep("ceil", unit="MINUTE"),
             TimeStep("floor", unit="HOUR"))
    for bound in range(d - 3 * HOUR_MS, d + 3 * HOUR_MS, 17 * 60_000 + 1):
        threshold = completion_threshold(steps, bound)
        reached = derived_waterline(steps, threshold)
        below = derived_waterline(steps, threshold - 1)
        assert reached is not None and reached >= bound
        assert below is not None and below < bound


def test_s10_monotone_expressions_keep_the_property_and_others_lose_it() -> None:
    t = SqlType("TIMESTAMP", nullable=False)
    i = SqlType("INT", nullable=False)
    c = ColumnRef("c", t)
    hour = Literal_(HOUR_MS, SqlType("BIGINT", nullable=False))
    day = Literal_("DAY", SqlType("VARCHAR", nullable=False))
    assert monotone_steps(c) == (c, ())
    assert monotone_steps(Call("-", (c, hour), t)) == (c, (TimeStep("shift", -HOUR_MS),))
    assert monotone_steps(Call("+", (hour, c), t)) == (c, (TimeStep("shift", HOUR_MS),))
    nested = Call("DATE_CEIL", (day, Call("+", (c, hour), t)), t)
    assert monotone_steps(nested) == (c, (TimeStep("shift", HOUR_MS),
                                          TimeStep("ceil", unit="DAY")))
    n = ColumnRef("n", i)
    assert monotone_steps(Call("+", (n, Literal_(5, i)), i)) == (n, (TimeStep("shift", 5),))
    assert monotone_steps(Call("-", (Literal_(5, i), n), i)) is None  # decreasing
    assert monotone_steps(Call("*", (n, Literal_(2, i)), i)) is None
    assert monotone_steps(Call("+", (n, n), i)) is None  # not a constant
    assert monotone_steps(Call("HOUR", (c,), SqlType("BIGINT"))) is None


def test_s11_seed_004_daily_sums_by_ceil_are_written_once_the_waterline_passes_the_day() -> None:
    """CEIL(rowtime TO DAY): Jan 1's rows and Jan 2 00:00 exactly form the day Jan 2, complete
    once w(day) = CEIL(w(rowtime) TO DAY) > Jan 2, i.e. once w(rowtime) > Jan 2 00:00: in step
    3 (w = Jan 2 08:00). A bound of Jan 3 00:00 completes nothing (a row at Jan 3 00:00 is
    still on time and in the day Jan 3); Jan 3 00:00:01 completes Jan 3."""
    results = evaluate(compile_sql(DAILY.format(day="CEIL(rowtime TO DAY)")), STEPS)
    assert [[r.value for r in x.outputs["daily"]] for x in results] == [
        [],
        [],
        [day_row("EUR", 7, "2024-01-02 00:00:00"), day_row("USD", 5, "2024-01-02 00:00:00")],
        [],
        [day_row("USD", 2, "2024-01-03 00:00:00")],
    ]
    # S14: the view's waterline is w(day), on every record of the step.
    assert [x.view_waterlines["daily"] for x in results] == [
        ts("2024-01-02 00:00:00"), ts("2024-01-02 00:00:00"), ts("2024-01-03 00:00:00"),
        ts("2024-01-03 00:00:00"), ts("2024-01-04 00:00:00")]
    assert [r.waterline for r in results[2].outputs["daily"]] == [ts("2024-01-03 00:00:00")] * 2
    # S11: a day's groups are freed in the step that writes them.
    assert [x.state_rows["daily"] for x in results] == [2, 2, 1, 1, 0]
    assert [(d.reason, d.value) for x in results for d in x.dead_letters] == [
        ("late", ts("2024-01-01 23:00:00"))]


def test_s11_daily_sums_by_floor_complete_when_the_waterline_reaches_the_next_day() -> None:
    """FLOOR(rowtime TO DAY) and DATE_TRUNC('DAY', rowtime): the day a row starts in, complete
    once FLOOR(w TO DAY) > d, i.e. w >= d + 1 day: Jan 1 in step 2 (w = Jan 2 00:00, whose
    row is in Jan 2), Jan 2 in step 4 (w = Jan 3 00:00)."""
    expected = [
        [],
        [day_row("EUR", 3, "2024-01-01 00:00:00"), day_row("USD", 5, "2024-01-01 00:00:00")],
        [],
        [day_row("EUR", 4, "2024-01-02 00:00:00"), day_row("USD", 2, "2024-01-02 00:00:00")],
        [],
    ]
    for day in ("FLOOR(rowtime TO DAY)", "DATE_TRUNC('DAY', rowtime)"):
        assert outputs(compile_sql(DAILY.format(day=day)), "daily") == expected


def test_s11_a_shifted_time_key_group_is_complete_once_the_waterline_passes_its_row() -> None:
    """rowtime + 1 hour as a key: each instant its own group, complete once w + 1 hour > d,
    i.e. once w(rowtime) passes the row's own time (strictly: USD's 08:00 waits for step 4,
    w = 08:00 in step 3 still admits a row at 08:00)."""
    circuit = compile_sql(DAILY.format(day="rowtime + INTERVAL '1' HOUR"))
    assert outputs(circuit, "daily") == [
        [day_row("EUR", 3, "2024-01-01 11:00:00")],
        [day_row("USD", 5, "2024-01-01 12:00:00")],
        [day_row("EUR", 4, "2024-01-02 01:00:00")],
        [day_row("USD", 2, "2024-01-02 09:00:00")],
        [],
    ]


SHIFTED = """
CREATE LOCAL VIEW shifted AS
SELECT rowtime + INTERVAL '1' HOUR AS ts, currency, amount FROM amounts;

CREATE VIEW hourly WITH ('topic' = 'hourly', 'format' = 'append') AS
SELECT window_start, window_end, currency, SUM(amount) AS total
FROM TABLE(TUMBLE(TABLE shifted, DESCRIPTOR(ts), INTERVAL '1' HOUR))
GROUP BY window_start, window_end, currency
EMIT AFTER WATERMARK;
"""


def test_s10_a_shifted_column_of_a_view_is_a_window_column() -> None:
    """ts = rowtime + 1 hour, w(ts) = w(rowtime) + 1 hour: the window [11:00, 12:00) of ts
    (EUR's 10:00) is complete once w(ts) >= 12:00, in step 1 (w(rowtime) = 11:00)."""
    circuit = compile_sql(SHIFTED)
    (attr,) = circuit.view("shifted").time_attributes
    assert (attr.column, attr.kind, attr.table, attr.source_column, attr.steps) == (
        "ts", "derived", "amounts", "rowtime", (TimeStep("shift", HOUR_MS),))
    results = evaluate(circuit, STEPS)

    def window(start: str, end: str, currency: str, total: int) -> dict[str, Any]:
        return {"window_start": ts(start), "window_end": ts(end), "currency": currency,
                "total": total}

    assert [[r.value for r in x.outputs["hourly"]] for x in results] == [
        [window("2024-01-01 11:00:00", "2024-01-01 12:00:00", "EUR", 3)],
        [window("2024-01-01 12:00:00", "2024-01-01 13:00:00", "USD", 5)],
        [window("2024-01-02 01:00:00", "2024-01-02 02:00:00", "EUR", 4)],
        [window("2024-01-02 09:00:00", "2024-01-02 10:00:00", "USD", 2)],
        [],
    ]
    # S14: the waterline of window_start, the start of the hour holding w(ts) (S10).
    assert [x.view_waterlines["hourly"] for x in results] == [
        ts("2024-01-01 12:00:00"), ts("2024-01-02 01:00:00"), ts("2024-01-02 09:00:00"),
        ts("2024-01-03 01:00:00"), ts("2024-01-03 01:00:00")]


def test_s10_integer_time_columns_keep_the_property_under_integer_shifts() -> None:
    circuit = compile_program("test.sql", text="""
CREATE TABLE ticks (t BIGINT NOT NULL LATENESS 2, n INT NOT NULL) WITH ('topic' = 'ticks');
CREATE VIEW per_t WITH ('topic' = 'per_t', 'format' = 'append') AS
SELECT t + 10 AS later, COUNT(*) AS c FROM ticks GROUP BY t + 10 EMIT AFTER WATERMARK;
""")
    steps = [StepInput({"ticks": [{"t": 5, "n": 1}, {"t": 6, "n": 1}]}),
             StepInput({"ticks": [{"t": 9, "n": 1}]})]
    # w(t) = 4, then 7: w(later) = 14, then 17: 15 and 16 are complete in step 2.
    results = evaluate(circuit, steps)
    assert [[r.value for r in x.outputs["per_t"]] for x in results] == [
        [], [{"later": 15, "c": 1}, {"later": 16, "c": 1}]]
    assert [x.view_waterlines["per_t"] for x in results] == [14, 17]


def test_s10_explain_names_the_derivation() -> None:
    text = explain_text(compile_sql(DAILY.format(day="CEIL(rowtime TO DAY)") + SHIFTED))
    assert ("time:         day (derived: w = CEIL(w(amounts.rowtime) TO DAY), a monotone "
            "function of rowtime)") in text
    assert ("state:        window: a group is freed once w(day) > day (w(day) = "
            "CEIL(w(amounts.rowtime) TO DAY))") in text
    assert "ts (derived: w = (w(amounts.rowtime) + 1 hour), a monotone function of rowtime)" \
        in text
    assert ("state:        window: a group is freed once (w(amounts.rowtime) + 1 hour) >= "
            "window_end") in text


def test_l7_a_window_on_a_non_monotone_expression_is_refused() -> None:
    with pytest.raises(ProgramError, match="column ts is not a time attribute"):
        compile_sql("""
CREATE LOCAL VIEW odd AS SELECT CASE WHEN amount > 0 THEN rowtime
    ELSE rowtime - INTERVAL '1' DAY END AS ts, amount FROM amounts;
CREATE VIEW v WITH ('topic' = 'v') AS SELECT window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE odd, DESCRIPTOR(ts), INTERVAL '1' HOUR)) GROUP BY window_end;
""")


def _doc_examples() -> list[str]:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "language.md").read_text("utf-8")
    section = doc[doc.index("### Derived time attributes"):]
    section = section[:section.index("\n## ", 1) if "\n## " in section[1:] else len(section)]
    return re.findall(r"```sql\n(.*?)```", section, re.S)


def test_s11_language_doc_derived_time_examples_run() -> None:
    """docs/language.md's examples: seed 004's daily sums by CEIL, and a window over a
    shifted column, write what the tests above expect."""
    daily, shifted = _doc_examples()
    circuit = compile_program("doc.sql", text=TABLE + daily)
    assert outputs(circuit, "daily")[2] == [
        day_row("EUR", 7, "2024-01-02 00:00:00"), day_row("USD", 5, "2024-01-02 00:00:00")]
    circuit = compile_program("doc.sql", text=TABLE + shifted)
    assert outputs(circuit, "hourly") == outputs(compile_sql(SHIFTED), "hourly")


RATES = """
CREATE TABLE rates (
    rowtime  TIMESTAMP      NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR        NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = 'rates');

CREATE LOCAL VIEW daily AS
SELECT currency, SUM(amount) AS amount_sum, CEIL(rowtime TO DAY) AS day
FROM amounts GROUP BY currency, CEIL(rowtime TO DAY)
EMIT AFTER WATERMARK;

CREATE VIEW daily_converted WITH ('topic' = 'daily_converted', 'format' = 'append') AS
SELECT d.day, d.currency, d.amount_sum, r.rate AS closing_rate
FROM daily AS d
JOIN rates FOR SYSTEM_TIME AS OF d.day AS r
  ON d.currency = r.currency;
"""


def test_s16_seed_004_daily_sums_by_ceil_join_the_closing_rate() -> None:
    """Seed 004's original form: each day's sum (a derived time attribute) AS OF the day's
    end, the version of its currency's rate valid at midnight: EUR's of Jan 1 20:00 (1.20),
    not Jan 2 09:00's (1.30). The days of Jan 2 are final in step 3, and rates' waterline
    (Jan 2 09:00) has passed their time, so both are written in step 3."""
    def rate(when: str, currency: str, value: str) -> dict[str, Any]:
        return {"rowtime": ts(when), "currency": currency, "rate": Decimal(value)}

    steps = [
        StepInput({**STEPS[0].rows, "rates": [rate("2024-01-01 00:00:00", "EUR", "1.10"),
                                              rate("2024-01-01 00:00:00", "USD", "1.00"),
                                              rate("2024-01-01 20:00:00", "EUR", "1.20")]}),
        STEPS[1],
        StepInput({**STEPS[2].rows, "rates": [rate("2024-01-02 09:00:00", "EUR", "1.30")]}),
    ]
    results = evaluate(compile_sql(RATES), steps)
    assert [[r.value for r in x.outputs["daily_converted"]] for x in results] == [
        [], [],
        [{"day": ts("2024-01-02 00:00:00"), "currency": "EUR", "amount_sum": 7,
          "closing_rate": Decimal("1.20")},
         {"day": ts("2024-01-02 00:00:00"), "currency": "USD", "amount_sum": 5,
          "closing_rate": Decimal("1.00")}],
    ]


def test_s16_an_interval_join_bounds_on_a_derived_column() -> None:
    """x.t2 = a.ts + 1 minute bounds the join: a row of b is held until w(x.t2) = w(a.ts) +
    1 minute is past its time + 10 s, a row of x until w(b.ts) is past its t2 (S16)."""
    circuit = compile_program("j.sql", text="""
CREATE TABLE a (ts TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND, k BIGINT NOT NULL)
WITH ('topic' = 'a');
CREATE TABLE b (ts TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND, k BIGINT NOT NULL)
WITH ('topic' = 'b');
CREATE LOCAL VIEW sa AS SELECT ts + INTERVAL '1' MINUTE AS t2, k FROM a;
CREATE VIEW j WITH ('topic' = 'j') AS SELECT x.t2, x.k, y.ts FROM sa AS x JOIN b AS y
ON x.k = y.k AND y.ts BETWEEN x.t2 - INTERVAL '10' SECOND AND x.t2;
""")
    assert circuit.view("j").state.description == (
        "rows of x are freed once w(b.ts) > x.t2; rows of y once (w(a.ts) + 1 minute) > "
        "y.ts + 10 seconds")
    results = evaluate(circuit, [
        StepInput({"a": [{"ts": 0, "k": 1}], "b": [{"ts": 55_000, "k": 1},
                                                   {"ts": 61_000, "k": 1}]}),
        StepInput({"a": [{"ts": 200_000, "k": 1}], "b": [{"ts": 200_000, "k": 1}]}),
    ])
    assert [[r.value for r in x.outputs["j"]] for x in results] == [
        [{"t2": 60_000, "k": 1, "ts": 55_000}], []]
    # Step 1: x's row is freed (w(b) = 61 s > 60 s), b's two are held (w(x.t2) = 60 s);
    # step 2: w(x.t2) = 260 s frees b's rows, x's new row waits for w(b) > 260 s.
    assert [x.state_rows["j"] for x in results] == [2, 1]
