"""SPEC S11-S13 emission and state: HAVING, formats, AFTER DELAY, AFTER WATERMARK, GC."""

from __future__ import annotations

from typing import Any

from circuit_builders import (
    BIGINT,
    MINUTE_MS,
    TIMESTAMP,
    VARCHAR,
    agg,
    at,
    circuit,
    grouped,
    make_table,
    make_view,
    materialize,
    ref,
    tumble,
    values,
    window_attributes,
)

from app.circuit.ir import Call, Column, EmitPolicy, Literal_, SqlType, View
from app.circuit.reference import Reference, StepInput, StepResult, evaluate

EV = make_table("ev", [Column("ts", TIMESTAMP), Column("k", VARCHAR), Column("x", BIGINT)],
                lateness={"ts": 0})
BOOL = SqlType("BOOLEAN")
BIGINT_N = SqlType("BIGINT")


def ev(clock: str, k: str = "a", x: int = 1) -> dict[str, Any]:
    return {"ts": at(clock), "k": k, "x": x}


DEFAULT = EmitPolicy()


def counts(emit: EmitPolicy = DEFAULT, fmt: str | None = "upsert",
           having_min: int | None = None, name: str = "c") -> View:
    """COUNT(*) and SUM(x) per k per 10-minute window, optionally HAVING COUNT(*) >= n."""
    having = None
    if having_min is not None:
        having = Call(">=", (ref("n", BIGINT), Literal_(having_min, BIGINT)), BOOL)
    return make_view(
        name, "ev",
        [tumble("ts", 10 * MINUTE_MS),
         *grouped([("window_end", ref("window_end", TIMESTAMP)), ("k", ref("k", VARCHAR))],
                  [("n", agg("COUNT", type_=BIGINT)),
                   ("total", agg("SUM", ref("x", BIGINT), type_=BIGINT_N))],
                  having=having)],
        [Column("window_end", TIMESTAMP), Column("k", VARCHAR), Column("n", BIGINT),
         Column("total", BIGINT_N)],
        key=("window_end", "k"), time_attributes=window_attributes("ev", "ts")[1:],
        emit=emit, fmt=fmt,
    )


def run(view: View, *batches: list[dict[str, Any]], times: list[int] | None = None
        ) -> list[StepResult]:
    times = times or [i * MINUTE_MS for i in range(len(batches))]
    return evaluate(circuit([EV], [view]),
                    [StepInput({"ev": b}, t) for b, t in zip(batches, times, strict=True)])


def out(result: StepResult, view: str = "c") -> list[tuple[Any, Any]]:
    return [(r.key, r.value) for r in result.outputs[view]]


def test_s12_default_upsert_writes_each_changed_group_once_per_step() -> None:
    results = run(counts(), [ev("8:01"), ev("8:02"), ev("8:03", "b")], [ev("8:04", "b")], [])
    end = at("8:10")
    assert out(results[0]) == [
        ({"window_end": end, "k": "a"}, {"window_end": end, "k": "a", "n": 2, "total": 2}),
        ({"window_end": end, "k": "b"}, {"window_end": end, "k": "b", "n": 1, "total": 1}),
    ]
    assert out(results[1]) == [
        ({"window_end": end, "k": "b"}, {"window_end": end, "k": "b", "n": 2, "total": 2})
    ]
    assert out(results[2]) == []


def test_s12_upsert_tombstone_when_a_group_stops_passing_having() -> None:
    # HAVING n >= 2 on a view reading an updating view would need retractions; on insert-only
    # input a group only ever starts passing. So check the no-row-before-passing half here and
    # the tombstone half through a view whose HAVING fails as the count grows.
    having_small = Call("<=", (ref("n", BIGINT), Literal_(1, BIGINT)), BOOL)
    view = make_view(
        "c", "ev",
        [tumble("ts", 10 * MINUTE_MS),
         *grouped([("window_end", ref("window_end", TIMESTAMP)), ("k", ref("k", VARCHAR))],
                  [("n", agg("COUNT", type_=BIGINT))], having=having_small)],
        [Column("window_end", TIMESTAMP), Column("k", VARCHAR), Column("n", BIGINT)],
        key=("window_end", "k"), time_attributes=window_attributes("ev", "ts")[1:], fmt="upsert",
    )
    results = run(view, [ev("8:01")], [ev("8:02")], [ev("8:03")])
    key = {"window_end": at("8:10"), "k": "a"}
    assert out(results[0]) == [(key, {"window_end": at("8:10"), "k": "a", "n": 1})]
    assert out(results[1]) == [(key, None)]  # tombstone
    assert out(results[2]) == []  # still failing: nothing more


def test_s12_changelog_group_failing_having_gets_only_its_retraction() -> None:
    having_small = Call("<=", (ref("n", BIGINT), Literal_(1, BIGINT)), BOOL)
    view = make_view(
        "c", "ev",
        [tumble("ts", 10 * MINUTE_MS),
         *grouped([("window_end", ref("window_end", TIMESTAMP))],
                  [("n", agg("COUNT", type_=BIGINT))], having=having_small)],
        [Column("window_end", TIMESTAMP), Column("n", BIGINT)],
        key=("window_end",), emit=EmitPolicy(stream=True), fmt="changelog",
    )
    results = run(view, [ev("8:01")], [ev("8:02")], times=[100, 200])
    row = {"window_end": at("8:10"), "n": 1}
    assert values(results, "c") == [
        {**row, "undo": False, "ptime": 100, "ver": 0},
        {**row, "undo": True, "ptime": 200, "ver": 1},
    ]


def test_s12_having_holds_a_group_back_until_it_passes() -> None:
    results = run(counts(having_min=2), [ev("8:01")], [ev("8:02")])
    assert out(results[0]) == []
    assert [v["n"] for _, v in out(results[1])] == [2]


def test_s11_default_upsert_frees_a_window_once_complete_and_written() -> None:
    results = run(counts(), [ev("8:01"), ev("8:05", "b")], [ev("8:09")], [ev("8:10")],
                  [ev("8:20")])
    assert [r.state_rows["c"] for r in results] == [2, 2, 1, 1]
    # The step that completes 8:00-8:10 (w = 8:10) writes nothing new for it and frees it.
    assert [v["window_end"] for _, v in out(results[2])] == [at("8:20")]


def test_s11_state_of_a_local_view_is_freed_too() -> None:
    results = run(counts(fmt=None), [ev("8:01")], [ev("8:10")])
    assert [r.state_rows["c"] for r in results] == [1, 1]
    assert "c" not in results[0].outputs


def test_s12_after_watermark_never_emits_before_the_window_is_complete() -> None:
    view = counts(EmitPolicy(after_watermark=True))
    results = run(view, [ev("8:01")], [ev("8:09:59")], [ev("8:10")], [ev("8:25")])
    assert [len(r.outputs["c"]) for r in results] == [0, 0, 1, 1]
    assert out(results[2])[0][1]["n"] == 2
    assert out(results[3])[0][1] == {"window_end": at("8:20"), "k": "a", "n": 1, "total": 1}


def test_s12_after_watermark_counts_on_time_rows_of_the_completing_step() -> None:
    # w(t-1) = 8:00, so 8:05 is on time in the step whose 8:30 row completes its window.
    view = counts(EmitPolicy(after_watermark=True))
    results = run(view, [ev("8:00")], [ev("8:05"), ev("8:30")])
    assert out(results[1])[0][1]["n"] == 2


def test_s12_after_delay_holds_and_coalesces_upsert_changes() -> None:
    view = counts(EmitPolicy(delay_ms=5 * MINUTE_MS))
    results = run(view, [ev("8:01")], [ev("8:02")], [ev("8:03")], [],
                  times=[0, 2 * MINUTE_MS, 5 * MINUTE_MS, 6 * MINUTE_MS])
    assert [len(r.outputs["c"]) for r in results] == [0, 0, 1, 0]
    assert out(results[2])[0][1]["n"] == 3


def test_s11_after_delay_keeps_a_complete_group_until_its_change_is_written() -> None:
    view = counts(EmitPolicy(delay_ms=5 * MINUTE_MS))
    results = run(view, [ev("8:01")], [ev("8:30")], [], times=[0, MINUTE_MS, 5 * MINUTE_MS])
    # Step 1 completes 8:00-8:10 but its change (pending since 0) is not due until 5 min.
    assert [r.state_rows["c"] for r in results] == [1, 2, 1]
    assert out(results[1]) == []
    assert [v["window_end"] for _, v in out(results[2])] == [at("8:10")]  # 8:40 due at 6 min


def test_s12_after_watermark_and_after_delay_emits_early_then_final_then_never() -> None:
    view = counts(EmitPolicy(stream=True, after_watermark=True, delay_ms=5 * MINUTE_MS),
                  fmt="changelog")
    results = run(view, [ev("8:01")], [ev("8:02")], [ev("8:03")], [ev("8:10")],
                  times=[0, MINUTE_MS, 5 * MINUTE_MS, 6 * MINUTE_MS])
    first = [(v["n"], v["undo"], v["ver"]) for _, v in out(results[2])]
    assert first == [(3, False, 0)]  # due at 5 min: coalesced 1 -> 3
    final = [(v["window_end"], v["n"], v["undo"], v["ver"]) for _, v in out(results[3])]
    # Completed at 8:10 with no change since the delayed write: no final record needed; the
    # new window's first change waits for its delay.
    assert final == []
    assert results[3].state_rows["c"] == 1


def test_s12_after_watermark_and_after_delay_final_row_flushes_pending_change() -> None:
    view = counts(EmitPolicy(stream=True, after_watermark=True, delay_ms=5 * MINUTE_MS),
                  fmt="changelog")
    results = run(view, [ev("8:01")], [ev("8:02")], [ev("8:03"), ev("8:30")],
                  times=[0, 5 * MINUTE_MS, 6 * MINUTE_MS])
    assert [(v["n"], v["undo"], v["ver"]) for _, v in out(results[1])] == [(2, False, 0)]
    assert [(v["window_end"], v["n"], v["undo"], v["ver"]) for _, v in out(results[2])] == [
        (at("8:10"), 2, True, 1), (at("8:10"), 3, False, 2)
    ]


def test_s12_stateless_changelog_rows_have_undo_false_ver_0_and_the_step_ptime() -> None:
    view = make_view("s", "ev", [], list(EV.columns), emit=EmitPolicy(stream=True),
                     fmt="changelog")
    [result] = evaluate(circuit([EV], [view]), [StepInput({"ev": [ev("8:01"), ev("8:00")]}, 7)])
    assert [r.value for r in result.outputs["s"]] == [
        {**ev("8:01"), "undo": False, "ptime": 7, "ver": 0},
        {**ev("8:00"), "undo": False, "ptime": 7, "ver": 0},
    ]


def test_s8_global_aggregate_has_its_row_from_the_first_step() -> None:
    view = make_view("total", "ev", grouped([], [("n", agg("COUNT", type_=BIGINT))]),
                     [Column("n", BIGINT)], fmt="upsert")
    results = run(view, [], [ev("8:00")])
    assert [[r.value for r in res.outputs["total"]] for res in results] == [[{"n": 0}], [{"n": 1}]]


def test_s8_view_over_an_aggregate_view_sees_its_updates() -> None:
    inner = counts(fmt=None)
    outer = make_view(
        "big", "c",
        grouped([("k", ref("k", VARCHAR))], [("windows", agg("COUNT", type_=BIGINT)),
                                              ("most", agg("MAX", ref("n", BIGINT),
                                                           type_=BIGINT_N))]),
        [Column("k", VARCHAR), Column("windows", BIGINT), Column("most", BIGINT_N)],
        key=("k",), fmt="upsert",
    )
    reference = Reference(circuit([EV], [inner, outer]))
    results = [reference.step(StepInput({"ev": b})) for b in
               ([ev("8:01"), ev("8:11")], [ev("8:12"), ev("8:13")])]
    assert materialize(results, "big") == {("a",): {"k": "a", "windows": 2, "most": 3}}


def test_s14_view_without_time_attribute_has_no_waterline() -> None:
    view = make_view("total", "ev", grouped([], [("n", agg("COUNT", type_=BIGINT))]),
                     [Column("n", BIGINT)], fmt="upsert")
    [result] = run(view, [ev("8:00")])
    assert result.view_waterlines == {"total": None}
    assert result.outputs["total"][0].waterline is None
