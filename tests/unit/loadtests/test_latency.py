"""The latency probe's definition (loadtests/latency.py, docs/performance.md "Latency"): which
input event each output record is attributed to, and the statistics over a measured period.

Stateless views: the output row is the input row that passed the filter. AFTER WATERMARK
windows: the first event (in production order) whose event time took the waterline
``max event time - LATENESS`` to the window's end or past it (SPEC S3, S11). INNER interval
joins (workload d): the later-produced of the auction and the bid the output row pairs."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from app.circuit.ir import Call, ColumnRef, Literal_, SqlType
from app.program.compile import compile_program
from loadtests.latency import (
    JoinRule,
    Produced,
    Rule,
    Sample,
    Visible,
    attribute,
    continuous_spec,
    expected,
    input_topics,
    percentile,
    rule_for,
    slowest_dues,
    step_lengths,
    summarize,
)
from loadtests.workloads import WORKLOADS

INT = SqlType("INT", nullable=False)
N_OVER_500 = Call(">", (ColumnRef("n", INT), Literal_(500, INT)), SqlType("BOOLEAN", False))
FILTER = Rule("ts", 10_000, match=(("ts", "ts"), ("usr", "usr"), ("n", "n")), filters=(N_OVER_500,))
TUMBLE_1MIN = Rule("ts", 10_000, window_ms=60_000, output_time="window_end")


def click(ts: int, usr: str = "k1", n: int = 600) -> dict[str, object]:
    return {"ts": ts, "usr": usr, "n": n}


def test_stateless_output_is_attributed_to_its_own_input_record() -> None:
    produced = [
        Produced(1_000.0, click(10, "a")),
        Produced(1_010.0, click(12, "b")),
        Produced(1_020.0, click(11, "c")),
    ]
    outputs = [Visible(1_250.0, click(12, "b")), Visible(1_100.0, click(10, "a"))]
    got = attribute(produced, outputs, FILTER)
    assert [(s.key, s.due_ms, s.latency_ms) for s in got.samples] == [
        ((12, "b", 600), 1_010.0, 240.0),
        ((10, "a", 600), 1_000.0, 100.0),
    ]
    assert got.unmatched == 0 and got.early == 0


def test_equal_stateless_rows_are_matched_in_production_order_and_extras_are_unmatched() -> None:
    produced = [Produced(1_000.0, click(10)), Produced(2_000.0, click(10))]
    outputs = [
        Visible(2_500.0, click(10)),
        Visible(2_600.0, click(10)),
        Visible(2_700.0, click(10)),
    ]
    got = attribute(produced, outputs, FILTER)
    assert [s.latency_ms for s in got.samples] == [1_500.0, 600.0]
    assert got.unmatched == 1


def test_window_is_due_at_the_first_event_that_takes_the_waterline_to_its_end() -> None:
    # LATENESS 10 s: window [0, 60 s) closes when an event at >= 70 s arrives (w = 60 s >= end,
    # equal included, S11). The out-of-order 71 s after 75 s and the late 5 s do not move it.
    produced = [
        Produced(100.0, click(30_000)),
        Produced(200.0, click(69_999)),  # w = 59.999 s: not yet
        Produced(300.0, click(75_000)),  # w = 65 s: closes [0, 60 s)
        Produced(400.0, click(71_000)),
        Produced(500.0, click(5_000), late=True),
        Produced(600.0, click(130_000)),  # w = 120 s: closes [60 s, 120 s) exactly
    ]
    outputs = [
        Visible(900.0, {"window_end": 60_000, "usr": "a"}),
        Visible(950.0, {"window_end": 60_000, "usr": "b"}),
        Visible(1_600.0, {"window_end": 120_000, "usr": "a"}),
    ]
    got = attribute(produced, outputs, TUMBLE_1MIN)
    assert [(s.key, s.due_ms, s.latency_ms) for s in got.samples] == [
        (60_000, 300.0, 600.0),
        (60_000, 300.0, 650.0),
        (120_000, 600.0, 1_000.0),
    ]
    assert got.early == 0


def test_window_output_before_any_event_closed_it_is_counted_early_not_sampled() -> None:
    produced = [Produced(100.0, click(30_000)), Produced(200.0, click(75_000))]
    outputs = [
        Visible(150.0, {"window_end": 60_000}),  # before the closing event was produced
        Visible(300.0, {"window_end": 120_000}),  # waterline never reached 120 s
        Visible(300.0, {"window_end": 60_000}),
    ]
    got = attribute(produced, outputs, TUMBLE_1MIN)
    assert got.early == 2
    assert [s.latency_ms for s in got.samples] == [100.0]


def test_expected_outputs_skip_filtered_and_deliberately_late_events() -> None:
    produced = [
        Produced(1.0, click(10, n=600)),
        Produced(2.0, click(11, n=400)),  # the filter drops it
        Produced(3.0, click(12, n=900), late=True),  # either side may drop it
    ]
    assert expected(produced, FILTER) == [((10, "k1", 600), 1.0)]


def test_expected_windows_are_those_with_on_time_events_that_an_event_closed() -> None:
    produced = [
        Produced(1.0, click(-200_000), late=True),  # its window is not expected
        Produced(2.0, click(30_000)),
        Produced(3.0, click(90_000)),  # closes [0, 60 s); [60 s, 120 s) stays open
    ]
    assert expected(produced, TUMBLE_1MIN) == [(60_000, 3.0)]


def test_summary_counts_outputs_due_in_the_measured_period_and_bounds_the_missing() -> None:
    produced = [Produced(float(t), click(t, usr=f"u{t}")) for t in (0, 100, 200, 300, 400)]
    outputs = [
        Visible(50.0, click(0, usr="u0")),  # due before the period: warm-up
        Visible(130.0, click(100, usr="u100")),
        Visible(290.0, click(200, usr="u200")),
        Visible(480.0, click(400, usr="u400")),  # due after the period: tail
    ]  # u300 never became visible
    got = summarize(
        attribute(produced, outputs, FILTER), expected(produced, FILTER), 100.0, 400.0, 1_000.0
    )
    # Latencies in the period: 30, 90 and, for the missing one, at least 1000 - 300 = 700.
    assert got["count"] == 2 and got["missing"] == 1 and got["lower_bound"] is True
    assert (got["p50_ms"], got["p99_ms"], got["max_ms"]) == (90.0, 700.0, 700.0)


def test_summary_of_window_rows_counts_distinct_due_events() -> None:
    produced = [Produced(100.0, click(30_000)), Produced(200.0, click(75_000))]
    outputs = [Visible(300.0 + i, {"window_end": 60_000}) for i in range(10)]
    got = summarize(
        attribute(produced, outputs, TUMBLE_1MIN),
        expected(produced, TUMBLE_1MIN),
        0.0,
        1_000.0,
        2_000.0,
    )
    assert (got["count"], got["dues"], got["missing"], got["lower_bound"]) == (10, 1, 0, False)
    assert (got["p50_ms"], got["p99_ms"], got["max_ms"]) == (104.0, 109.0, 109.0)


def test_empty_period_has_no_percentiles() -> None:
    got = summarize(attribute([], [], FILTER), [], 0.0, 1.0, 2.0)
    assert got["count"] == 0 and got["p99_ms"] is None


def test_step_lengths_cover_the_steps_that_started_in_the_measured_period() -> None:
    log = [{"start_ms": 900, "ms": 5000, "phases_ms": {"addBatch": 4000}}] + [
        {"start_ms": 1000 + 100 * i, "ms": 100 + i, "phases_ms": {"addBatch": 50 + i}}
        for i in range(10)
    ] + [{"start_ms": 2000, "ms": 7000}]
    assert step_lengths(log, 1000, 2000) == {
        "n": 10, "p50_ms": 104.0, "p90_ms": 108.0, "max_ms": 109.0,
        "phases_p50_ms": {"addBatch": 54.0},
    }
    assert step_lengths(log, 3000, 4000) is None


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([7.0], 0.99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


@pytest.mark.parametrize(
    ("workload", "window_ms", "lateness_ms", "output_time"),
    [("b", 60_000, 10_000, "window_end"), ("c", 600_000, 240_000, "wend")],
)
def test_rules_of_the_windowed_workloads_come_from_their_programs(
    workload: str, window_ms: int, lateness_ms: int, output_time: str
) -> None:
    rule = rule_for(_compiled(workload))
    assert (rule.window_ms, rule.lateness_ms, rule.output_time) == (
        window_ms,
        lateness_ms,
        output_time,
    )


def test_rule_of_the_filter_workload_matches_forwarded_columns_and_applies_its_where() -> None:
    rule = rule_for(_compiled("a"))
    assert not rule.windowed
    assert rule.match == (("ts", "ts"), ("usr", "usr"), ("n", "n"))
    assert rule.accepts(click(1, n=501)) and not rule.accepts(click(1, n=500))


def _compiled(workload: str) -> object:
    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "p.sql"
        topics = input_topics(workload, "t")
        program.write_text(WORKLOADS[workload].program.format(out="o", **topics))
        return compile_program(program)


def test_slowest_dues_split_into_the_wait_and_the_steps_until_visible() -> None:
    samples = [
        Sample("w1", 1000.0, 1500.0),
        Sample("w1", 1000.0, 1900.0),  # a window's last record decides
        Sample("w2", 2000.0, 2300.0),
        Sample("w1b", 1001.0, 1900.0),  # read by w1's step: the same episode, left out
        Sample("w3", 9000.0, 9900.0),  # due outside the measured period
    ]
    log = [{"start_ms": 900 + 250 * i, "ms": 250} for i in range(20)]
    # Steps start at 900, 1150, ...: w1 waits 150 ms for the step at 1150, then three steps
    # end by 1900; w2 waits for the step at 2150, visible 150 ms into it.
    assert slowest_dues(samples, log, 0, 5000, count=2) == [
        {"latency_ms": 900.0, "wait_ms": 150.0, "steps_ms": [250, 250, 250], "then_ms": 0.0},
        {"latency_ms": 300.0, "wait_ms": 150.0, "steps_ms": [], "then_ms": 150.0},
    ]
    assert slowest_dues([Sample("w", 10.0, 20.0)], [], 0, 100) == [
        {"latency_ms": 10.0, "wait_ms": None, "steps_ms": [], "then_ms": 10.0}
    ]


# ---------------------------------------------------------------------------------------------
# Workload (d): auctions JOIN bids on the id, the bid within ten minutes of its auction.

AUCTION_BID = JoinRule(
    "auction",
    "bid",
    keys=(("id", "auction"),),
    left_time="date_time",
    right_time="date_time",
    lower_ms=0,
    upper_ms=600_000,
    left_match=(
        ("seller", "seller"),
        ("category", "category"),
        ("auction_time", "date_time"),
        ("auction", "id"),
    ),
    right_match=(
        ("date_time", "date_time"),
        ("auction", "auction"),
        ("bidder", "bidder"),
        ("price", "price"),
    ),
)


def auction(at_ms: float, id_: int, t: int, seller: int = 1, late: bool = False) -> Produced:
    row = {"id": id_, "seller": seller, "category": 10, "date_time": t, "expires": t + 600_000}
    return Produced(at_ms, row, late, "auction")


def bid(at_ms: float, on: int, t: int, bidder: int = 1, late: bool = False) -> Produced:
    row = {"auction": on, "bidder": bidder, "price": 5, "date_time": t}
    return Produced(at_ms, row, late, "bid")


def joined(a: Produced, b: Produced, visible_ms: float) -> Visible:
    """The output record the view writes for the pair (its SELECT list, workloads.py)."""
    return Visible(
        visible_ms,
        {
            "date_time": b.row["date_time"],
            "auction": b.row["auction"],
            "bidder": b.row["bidder"],
            "price": b.row["price"],
            "seller": a.row["seller"],
            "category": a.row["category"],
            "auction_time": a.row["date_time"],
        },
    )


def test_rule_of_the_join_workload_identifies_the_auction_and_the_bid_of_each_output() -> None:
    # The bid's four columns are all in the output; the auction's id is the bid's `auction`
    # (the join key), its `expires` (date_time + 10 min) alone is not output.
    assert rule_for(_compiled("d")) == AUCTION_BID


def test_join_output_is_due_at_the_later_produced_of_its_auction_and_bid() -> None:
    a1 = auction(1_000.0, 1, 50_000)
    b1 = bid(1_200.0, 1, 60_000)  # produced after its auction: due at the bid
    b2 = bid(2_000.0, 2, 70_000)  # produced before its auction: due at the auction
    a2 = auction(2_100.0, 2, 65_000, seller=2)
    outputs = [joined(a2, b2, 2_600.0), joined(a1, b1, 1_500.0)]
    got = attribute([a1, b1, b2, a2], outputs, AUCTION_BID)
    assert [(s.due_ms, s.latency_ms) for s in got.samples] == [(2_100.0, 500.0), (1_200.0, 300.0)]
    assert got.samples[1].key == ((1, 10, 50_000, 1), (60_000, 1, 1, 5))
    assert got.unmatched == 0 and got.early == 0


def test_an_auction_pairs_with_each_bid_of_its_id_within_the_bound_both_ends_included() -> None:
    a = auction(0.0, 7, 100_000)
    bids = [
        bid(1.0, 7, 100_000),  # at the auction's time
        bid(2.0, 7, 700_000),  # ten minutes after it
        bid(3.0, 7, 700_001),  # past the bound
        bid(4.0, 7, 99_999),  # before the auction
        bid(5.0, 8, 200_000),  # another id
    ]
    assert expected([a, *bids], AUCTION_BID) == [
        (AUCTION_BID.input_key(a.row, bids[0].row), 1.0),
        (AUCTION_BID.input_key(a.row, bids[1].row), 2.0),
    ]
    outputs = [joined(a, b, 10.0) for b in bids]  # three of them no pair of the input
    got = attribute([a, *bids], outputs, AUCTION_BID)
    assert [s.due_ms for s in got.samples] == [1.0, 2.0] and got.unmatched == 3


def test_equal_join_outputs_are_matched_in_production_order_and_extras_are_unmatched() -> None:
    a = auction(0.0, 1, 10_000)
    first, again = bid(100.0, 1, 20_000), bid(300.0, 1, 20_000)  # the same bid twice
    outputs = [joined(a, first, 400.0), joined(a, again, 500.0), joined(a, first, 600.0)]
    got = attribute([a, first, again], outputs, AUCTION_BID)
    assert [s.latency_ms for s in got.samples] == [300.0, 200.0] and got.unmatched == 1


def test_join_outputs_of_late_events_are_attributed_but_not_expected() -> None:
    """An event the generator made late may be accepted (Spark's watermark, or a late gate
    whose previous step ended far back in event time) or routed: its pairs are attributed
    when output, never counted missing."""
    a, late_a = auction(0.0, 1, 10_000), auction(1.0, 2, 10_000, late=True)
    b, late_b = bid(2.0, 1, 20_000), bid(3.0, 1, 30_000, late=True)
    b_of_late_a = bid(4.0, 2, 20_000)
    produced = [a, late_a, b, late_b, b_of_late_a]
    assert expected(produced, AUCTION_BID) == [(AUCTION_BID.input_key(a.row, b.row), 2.0)]
    outputs = [joined(a, late_b, 5.0), joined(late_a, b_of_late_a, 6.0)]
    got = attribute(produced, outputs, AUCTION_BID)
    assert [s.due_ms for s in got.samples] == [3.0, 4.0] and got.unmatched == 0


def test_summary_of_a_join_bounds_a_missing_pair_from_its_later_event() -> None:
    a = auction(0.0, 1, 10_000)
    bids = [bid(100.0 * k, 1, 10_000 + k, bidder=k) for k in (1, 2, 3)]
    outputs = [joined(a, bids[0], 150.0), joined(a, bids[2], 390.0)]  # the second never
    got = summarize(
        attribute([a, *bids], outputs, AUCTION_BID),
        expected([a, *bids], AUCTION_BID),
        0.0,
        1_000.0,
        2_000.0,
    )
    assert (got["count"], got["dues"], got["missing"], got["lower_bound"]) == (2, 2, 1, True)
    assert (got["p50_ms"], got["max_ms"]) == (90.0, 1_800.0)


def test_every_output_of_the_join_program_is_a_pair_of_the_generator() -> None:
    """The rule against the program itself (the reference evaluator, SPEC S16) over the
    generator's events: each output identifies exactly one pair; each pair of on-time events
    is output, due at its bid (the generator opens an auction before any bid names it)."""
    from app.circuit.reference import StepInput, evaluate
    from loadtests.bench import pair_shape_of
    from loadtests.generator import AUCTION, pair_timeline

    text = WORKLOADS["d"].program.format(out="o", **input_topics("d", "t"))
    circuit = compile_program("d.sql", text)
    tables = ("auction", "bid")
    produced = [
        Produced(float(i), row, late, "auction" if side == AUCTION else "bid")
        for i, side, row, late in pair_timeline(pair_shape_of("d"), 4_000)
    ]
    steps = [  # four steps: the later ones find late rows
        StepInput(
            rows={t: [p.row for p in produced[k : k + 1_000] if p.table == t] for t in tables}
        )
        for k in range(0, len(produced), 1_000)
    ]
    outputs = [
        Visible(1e9, record.value)
        for r in evaluate(circuit, steps)
        for record in r.outputs["auction_bid"]
        if record.value is not None
    ]
    got = attribute(produced, outputs, AUCTION_BID)
    due = expected(produced, AUCTION_BID)
    assert got.unmatched == 0 and len(got.samples) >= len(due) > 3_000
    assert all(produced[int(at)].table == "bid" for _, at in due)
    assert summarize(got, due, 0.0, 1e9, 2e9)["missing"] == 0


def test_a_side_of_the_join_reads_both_topics_and_the_probe_names_them() -> None:
    from loadtests.side import program_text

    inputs = input_topics("d", "lt")
    assert inputs == {"auctions": "lt.auctions", "bids": "lt.bids"}
    assert input_topics("a", "lt") == {"topic": "lt"}
    out = ("lt.auctions", "lt.d.out")
    spec = continuous_spec("tidemark", "d", "b:9092", out, "local[2]", Path("/w"), 0, 60, inputs)
    text = program_text(spec)
    assert "'topic' = 'lt.auctions'" in text and "'topic' = 'lt.bids'" in text
    assert "'topic' = 'lt.d.out'" in text
