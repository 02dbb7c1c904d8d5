"""The late gate step by step (SPEC S2-S7), read like Beam's TestStream: steps, then assertions.

Also the worked examples of seed 000 (Feldera's LATENESS post) and seed 003 (SQLstream's
rowtime bounds, "Grouping by Hours").
"""

from __future__ import annotations

from typing import Any

import pytest
from circuit_builders import (
    BIGINT,
    BIGINT_NULL,
    HOUR_MS,
    MONEY,
    TIMESTAMP,
    VARCHAR,
    agg,
    at,
    circuit,
    grouped,
    make_table,
    make_view,
    materialize,
    money,
    ref,
    tumble,
    values,
    window_attributes,
)

from app.circuit.ir import (
    Call,
    Cast,
    Column,
    EmitPolicy,
    Filter,
    Literal_,
    Project,
    SqlType,
    Table,
)
from app.circuit.reference import (
    DeadLetter,
    Punctuation,
    Reference,
    StepInput,
    StepResult,
    evaluate,
)

PURCHASE = make_table(
    "purchase",
    [Column("date_time", TIMESTAMP), Column("credit_card", BIGINT), Column("amount", MONEY)],
    lateness={"date_time": HOUR_MS},
)


def purchase(clock: str, card: int = 1, amount: int = 10) -> dict[str, Any]:
    return {"date_time": at(clock), "credit_card": card, "amount": money(amount)}


def passthrough(table: Table, name: str = "out") -> Any:
    """A stateless output view forwarding every column (append)."""
    return make_view(name, table.name, [], list(table.columns), fmt="append")


def steps(*batches: list[dict[str, Any]], table: str = "purchase") -> list[StepInput]:
    return [StepInput({table: batch}, batch_time_ms=index) for index, batch in enumerate(batches)]


def waterline(result: StepResult, table: str = "purchase", column: str = "date_time") -> Any:
    return result.waterlines[table][column]


# ---------------------------------------------------------------------------------------------
# Seed 000: Feldera's LATENESS post.


def test_s3_seed000_insert_at_10_00_moves_the_waterline_to_09_00() -> None:
    [result] = evaluate(circuit([PURCHASE], []), steps([purchase("10:00")]))
    assert waterline(result) == at("9:00")


def test_s3_seed000_waterline_is_max_of_the_step_minus_lateness() -> None:
    [result] = evaluate(circuit([PURCHASE], []),
                        steps([purchase("10:00:00"), purchase("10:00:01")]))
    assert waterline(result) == at("9:00:01")


def test_s3_waterline_starts_at_minus_infinity_and_an_empty_step_keeps_it() -> None:
    results = evaluate(circuit([PURCHASE], []), steps([], [purchase("10:00")], []))
    assert [waterline(r) for r in results] == [None, at("9:00"), at("9:00")]


def test_s3_waterline_never_decreases() -> None:
    results = evaluate(circuit([PURCHASE], []),
                       steps([purchase("10:00")], [purchase("9:30")], [purchase("11:00")]))
    assert [waterline(r) for r in results] == [at("9:00"), at("9:00"), at("10:00")]


# ---------------------------------------------------------------------------------------------
# S5/S6: the late filter and its dead letters.


def test_s5_row_equal_to_the_waterline_is_on_time() -> None:
    results = evaluate(circuit([PURCHASE], [passthrough(PURCHASE)]),
                       steps([purchase("10:00")], [purchase("9:00")]))
    assert results[1].dead_letters == ()
    assert values(results, "out") == [purchase("10:00"), purchase("9:00")]


def test_s5_step_that_moves_the_waterline_is_judged_by_the_previous_value() -> None:
    # Step 0 moves the waterline to 11:00, yet 8:00 in the same step is on time (w(-1) = -inf).
    # Step 1: 9:59:59 is below w(0) = 11:00 - late; the waterline of step 1 is still 11:00.
    results = evaluate(
        circuit([PURCHASE], [passthrough(PURCHASE)]),
        steps([purchase("12:00"), purchase("8:00")], [purchase("9:59:59", card=7)]),
    )
    assert results[0].dead_letters == ()
    assert values(results[:1], "out") == [purchase("12:00"), purchase("8:00")]
    assert results[1].dead_letters == (
        DeadLetter(
            "purchase", purchase("9:59:59", card=7), "late",
            f"column date_time = {at('9:59:59')} is below the waterline {at('11:00')} "
            "of table purchase",
            column="date_time", value=at("9:59:59"), waterline=at("11:00"),
        ),
    )
    assert results[1].outputs["out"] == ()


def test_s5_s8_late_rows_never_reach_a_view() -> None:
    count = make_view(
        "counts", "purchase",
        grouped([("credit_card", ref("credit_card", BIGINT))],
                [("n", agg("COUNT", type_=BIGINT))]),
        [Column("credit_card", BIGINT), Column("n", BIGINT)], key=("credit_card",), fmt="upsert",
    )
    results = evaluate(circuit([PURCHASE], [count]),
                       steps([purchase("10:00")], [purchase("8:00"), purchase("9:00")]))
    assert materialize(results, "counts") == {(1,): {"credit_card": 1, "n": 2}}
    assert [d.reason for d in results[1].dead_letters] == ["late"]


def test_s3_late_row_still_moves_another_columns_waterline() -> None:
    # Two LATENESS columns; the row is late on ts, and its seq still raises w_seq (S3 counts
    # every well-formed row of D(t), late or not).
    table = make_table("ev", [Column("ts", TIMESTAMP), Column("seq", BIGINT)],
                       lateness={"ts": 0, "seq": 10})
    results = evaluate(
        circuit([table], []),
        steps([{"ts": at("10:00"), "seq": 100}], [{"ts": at("9:00"), "seq": 500}], table="ev"),
    )
    assert results[1].dead_letters[0].column == "ts"
    assert results[1].waterlines["ev"] == {"ts": at("10:00"), "seq": 490}


def test_s5_dead_letter_names_the_first_late_column_in_declaration_order() -> None:
    # Lateness declared seq-first in the IR, but ts comes first among the table's columns.
    table = make_table("ev", [Column("ts", TIMESTAMP), Column("seq", BIGINT)],
                       lateness={"seq": 0, "ts": 0})
    results = evaluate(
        circuit([table], []),
        steps([{"ts": at("10:00"), "seq": 100}], [{"ts": at("9:00"), "seq": 50}],
              [{"ts": at("10:00"), "seq": 50}], table="ev"),
    )
    assert [(d.column, d.value, d.waterline) for d in results[1].dead_letters] == [
        ("ts", at("9:00"), at("10:00"))
    ]
    assert [(d.column, d.value, d.waterline) for d in results[2].dead_letters] == [
        ("seq", 50, 100)
    ]


def test_s6_every_late_row_is_one_dead_letter_in_arrival_order() -> None:
    results = evaluate(
        circuit([PURCHASE], []),
        steps([purchase("12:00")],
              [purchase("1:00", card=1), purchase("12:30"), purchase("2:00", card=2)]),
    )
    assert [(d.reason, d.row["credit_card"]) for d in results[1].dead_letters] == [
        ("late", 1), ("late", 2)
    ]


def test_s2_s5_integer_lateness_column() -> None:
    table = make_table("ticks", [Column("n", BIGINT)], lateness={"n": 5})
    results = evaluate(circuit([table], [passthrough(table)]),
                       steps([{"n": 100}], [{"n": 95}, {"n": 94}], table="ticks"))
    assert values(results, "out") == [{"n": 100}, {"n": 95}]
    assert [d.value for d in results[1].dead_letters] == [94]


# ---------------------------------------------------------------------------------------------
# S7: invalid and future rows.


def test_s7_null_in_not_null_column_is_invalid_and_moves_no_waterline() -> None:
    bad = {"date_time": at("23:00"), "credit_card": None, "amount": money(1)}
    results = evaluate(circuit([PURCHASE], [passthrough(PURCHASE)]),
                       steps([purchase("10:00"), bad]))
    [dead] = results[0].dead_letters
    assert (dead.reason, dead.column, dead.row) == ("invalid", "credit_card", bad)
    assert "credit_card" in dead.message
    assert waterline(results[0]) == at("9:00")
    assert values(results, "out") == [purchase("10:00")]


def test_s7_invalid_is_checked_before_future_and_late() -> None:
    table = make_table(
        "purchase", PURCHASE.columns, lateness={"date_time": HOUR_MS}, max_future_ms=HOUR_MS
    )
    too_far = {"date_time": at("23:00"), "credit_card": None, "amount": None}
    results = evaluate(circuit([table], []),
                       [StepInput({"purchase": [too_far]}, wall_clock_ms=at("10:00"))])
    assert [d.reason for d in results[0].dead_letters] == ["invalid"]


def test_s7_max_future_guard_sends_rows_ahead_of_the_wall_clock_to_dead_letters() -> None:
    table = make_table(
        "purchase", PURCHASE.columns, lateness={"date_time": HOUR_MS}, max_future_ms=HOUR_MS
    )
    ok, limit, ahead = purchase("11:00"), purchase("11:00"), purchase("11:00:01")
    limit["credit_card"] = 2
    results = evaluate(
        circuit([table], [passthrough(table)]),
        [StepInput({"purchase": [ok, limit, ahead]}, wall_clock_ms=at("10:00"))],
    )
    [dead] = results[0].dead_letters
    assert (dead.reason, dead.column, dead.value) == ("future", "date_time", at("11:00:01"))
    assert waterline(results[0]) == at("10:00")  # the future row moved nothing
    assert values(results, "out") == [ok, limit]


def test_s7_without_wall_clock_the_future_guard_is_not_applied() -> None:
    table = make_table(
        "purchase", PURCHASE.columns, lateness={"date_time": HOUR_MS}, max_future_ms=HOUR_MS
    )
    results = evaluate(circuit([table], []), [StepInput({"purchase": [purchase("23:00")]})])
    assert results[0].dead_letters == ()
    assert waterline(results[0]) == at("22:00")


# ---------------------------------------------------------------------------------------------
# S4: punctuation.


def test_s4_punctuation_moves_the_waterline_like_a_row_and_inserts_nothing() -> None:
    results = evaluate(
        circuit([PURCHASE], [passthrough(PURCHASE)]),
        [StepInput({}, punctuations={"purchase": [Punctuation(at("12:00"))]}),
         StepInput({"purchase": [purchase("10:59")]})],
    )
    assert waterline(results[0]) == at("11:00")
    assert results[0].outputs["out"] == ()
    assert [d.reason for d in results[1].dead_letters] == ["late"]


def test_s4_punctuation_can_target_one_column() -> None:
    table = make_table("ev", [Column("ts", TIMESTAMP), Column("seq", BIGINT)],
                       lateness={"ts": 0, "seq": 10})
    [result] = evaluate(
        circuit([table], []),
        [StepInput({}, punctuations={"ev": [Punctuation(1000, column="seq")]})],
    )
    assert result.waterlines["ev"] == {"ts": None, "seq": 990}


def test_s4_punctuation_below_the_waterline_changes_nothing() -> None:
    results = evaluate(
        circuit([PURCHASE], []),
        [StepInput({"purchase": [purchase("12:00")]}),
         StepInput({}, punctuations={"purchase": [Punctuation(at("8:00"))]})],
    )
    assert [waterline(r) for r in results] == [at("11:00"), at("11:00")]


# ---------------------------------------------------------------------------------------------
# L2: LATENESS on a view column (the decoding case of seed 000).


def test_l2_view_lateness_gates_decoded_rows_and_dead_letters_the_original_row() -> None:
    raw = make_table("raw", [Column("date_time", SqlType("VARCHAR", False)),
                             Column("credit_card", BIGINT)])
    decoded = make_view(
        "decoded", "raw",
        [Project((
            ("date_time", Cast(ref("date_time", SqlType("VARCHAR", False)), TIMESTAMP)),
            ("credit_card", ref("credit_card", BIGINT)),
        ))],
        [Column("date_time", TIMESTAMP), Column("credit_card", BIGINT)],
        lateness=[("date_time", HOUR_MS)], fmt="append",
    )
    results = evaluate(
        circuit([raw], [decoded]),
        steps([{"date_time": "2024-01-01 10:00:00", "credit_card": 1}],
              [{"date_time": "2024-01-01 08:59:59", "credit_card": 2},
               {"date_time": "2024-01-01 09:00:00", "credit_card": 3}], table="raw"),
    )
    assert results[0].waterlines["decoded"] == {"date_time": at("9:00")}
    [dead] = results[1].dead_letters
    assert dead.table == "raw" and dead.reason == "late"
    assert dead.row == {"date_time": "2024-01-01 08:59:59", "credit_card": 2}
    assert (dead.column, dead.waterline) == ("decoded.date_time", at("9:00"))
    assert [v["credit_card"] for v in values(results, "decoded")] == [1, 3]


# ---------------------------------------------------------------------------------------------
# Seed 003: SQLstream's "Grouping by Hours".


def _hourly_counts() -> Any:
    events = make_table("events", [Column("rowtime", TIMESTAMP), Column("color", VARCHAR)],
                        lateness={"rowtime": 0})
    view = make_view(
        "hourly", "events",
        [tumble("rowtime", HOUR_MS),
         *grouped([("window_start", ref("window_start", TIMESTAMP)),
                   ("color", ref("color", VARCHAR))],
                  [("n", agg("COUNT", type_=BIGINT))])],
        [Column("window_start", TIMESTAMP), Column("color", VARCHAR), Column("n", BIGINT)],
        key=("window_start", "color"), time_attributes=window_attributes("events", "rowtime")[:1],
        emit=EmitPolicy(after_watermark=True), fmt="upsert",
    )
    return circuit([events], [view])


SEED003_ROWS = [("3:01", "blue"), ("3:15", "red"), ("4:00", "red"), ("4:06", "blue"),
                ("4:45", "blue"), ("6:15", "red")]


def _seed003_steps(punctuate_at_5: bool) -> list[StepInput]:
    out = []
    for clock, color in SEED003_ROWS:
        if punctuate_at_5 and clock == "6:15":
            out.append(StepInput({}, at("5:00"),
                                 punctuations={"events": [Punctuation(at("5:00"))]}))
        out.append(StepInput({"events": [{"rowtime": at(clock), "color": color}]}, at(clock)))
    return out


def test_s11_seed003_hourly_counts_close_when_a_row_passes_the_hour() -> None:
    # The seed's table (six rows; its prose counts come from a longer table not shown there):
    # 3:00-4:00 holds blue 3:01 and red 3:15; 4:00-5:00 holds red 4:00, blue 4:06, blue 4:45.
    # LATENESS 0: the row at 4:00 closes 3:00-4:00; only the row at 6:15 closes 4:00-5:00.
    results = evaluate(_hourly_counts(), _seed003_steps(punctuate_at_5=False))
    emitted = {at(clock): [(r.value["color"], r.value["n"]) for r in res.outputs["hourly"]
                           if r.value is not None]
               for (clock, _), res in zip(SEED003_ROWS, results, strict=True)}
    assert emitted[at("4:00")] == [("blue", 1), ("red", 1)]
    assert emitted[at("6:15")] == [("blue", 2), ("red", 1)]
    assert sum(len(v) for v in emitted.values()) == 4


def test_s4_seed003_punctuation_at_5_00_closes_the_4_00_hour_without_waiting() -> None:
    results = evaluate(_hourly_counts(), _seed003_steps(punctuate_at_5=True))
    punctuation_step = results[5]  # the step inserted before the 6:15 row
    assert [(r.value["color"], r.value["n"]) for r in punctuation_step.outputs["hourly"]
            if r.value is not None] == [("blue", 2), ("red", 1)]
    assert punctuation_step.state_rows["hourly"] == 0
    assert results[6].outputs["hourly"] == ()  # 6:15 opens 6:00-7:00; nothing final yet
    assert results[6].state_rows["hourly"] == 1


def test_s12_records_within_a_step_are_ordered_by_group_key_none_first() -> None:
    table = make_table("t", [Column("ts", TIMESTAMP), Column("k", BIGINT_NULL)],
                       lateness={"ts": 0})
    view = make_view(
        "by_k", "t",
        grouped([("k", ref("k", BIGINT_NULL))], [("n", agg("COUNT", type_=BIGINT))]),
        [Column("k", BIGINT_NULL), Column("n", BIGINT)], key=("k",), fmt="upsert",
    )
    rows = [{"ts": at("1:00"), "k": k} for k in (3, None, 1, 3, 2)]
    [result] = evaluate(circuit([table], [view]), [StepInput({"t": rows})])
    assert [(r.key, r.value) for r in result.outputs["by_k"]] == [
        ({"k": None}, {"k": None, "n": 1}), ({"k": 1}, {"k": 1, "n": 1}),
        ({"k": 2}, {"k": 2, "n": 1}), ({"k": 3}, {"k": 3, "n": 2}),
    ]


def test_s8_filter_with_null_predicate_drops_the_row() -> None:
    view = make_view(
        "big", "purchase",
        [Filter(Call(">", (ref("amount", MONEY), Literal_(money(5), MONEY)),
                     SqlType("BOOLEAN")))],
        list(PURCHASE.columns), fmt="append",
    )
    rows = [purchase("10:00", amount=4), purchase("10:01", amount=6),
            {"date_time": at("10:02"), "credit_card": 3, "amount": None}]
    results = evaluate(circuit([PURCHASE], [view]), steps(rows))
    assert values(results, "big") == [purchase("10:01", amount=6)]


def test_s1_a_step_naming_an_unknown_table_or_column_is_refused() -> None:
    reference = Reference(circuit([PURCHASE], []))
    with pytest.raises(ValueError, match="purchases"):
        reference.step(StepInput({"purchases": [purchase("10:00")]}))
    with pytest.raises(ValueError, match="no LATENESS"):
        reference.step(StepInput({}, punctuations={
            "purchase": [Punctuation(0, column="credit_card")]}))
