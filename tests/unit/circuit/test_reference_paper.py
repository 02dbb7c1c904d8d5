"""The worked examples of seed 001 ("One SQL to Rule Them All") through the reference evaluator.

Step mapping used by every test here (SPEC S1, S4): each line of the paper's data set (section
4) is one step whose ``batch_time_ms`` is the line's processing time; an ``INSERT`` is a row of
``bid``; ``WM -> x`` is a punctuation with bound ``x + LATENESS``, which moves the waterline to
exactly ``x`` (S3/S4). ``bid.bidtime`` has LATENESS 10 minutes, large enough that no row of the
data set moves the waterline past the paper's watermark and no row is late (8:05 arrives at
8:13 with the waterline at 8:05: equal is on time, S5).

The paper's Q7 (listing 2) joins Bid with its per-window MAX; a view of one input says the
same with ``ARG_MAX(x, price)`` (ties would go to the earliest bid; the data set has none):

    SELECT window_start AS wstart, window_end AS wend, ARG_MAX(bidtime, price) AS bidtime,
           MAX(price) AS price, ARG_MAX(item, price) AS item
    FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE))
    GROUP BY window_start, window_end
"""

from __future__ import annotations

from typing import Any

import pytest
from circuit_builders import (
    DATA_SET,
    LATENESS_MS,
    MINUTE_MS,
    MONEY,
    TIMESTAMP,
    VARCHAR,
    agg,
    at,
    circuit,
    grouped,
    hop,
    make_table,
    make_view,
    materialize,
    money,
    paper_steps,
    ref,
    tumble,
    values,
    window_attributes,
)

from app.circuit.ir import Column, EmitPolicy, SqlType, TimeAttribute, View
from app.circuit.reference import Reference, StepResult
from app.circuit.windows import hop_starts, tumble_start

TIMESTAMP_NULL = TIMESTAMP.with_nullable(True)
SUM_MONEY = SqlType("DECIMAL", True, 20, 2)  # SUM(DECIMAL(10, 2)), Spark's rule

BID = make_table(
    "bid",
    [Column("bidtime", TIMESTAMP), Column("price", MONEY), Column("item", VARCHAR)],
    lateness={"bidtime": LATENESS_MS},
)

def run(view: View) -> list[StepResult]:
    reference = Reference(circuit([BID], [view]))
    return [reference.step(step) for step in paper_steps()]


def q7(emit: EmitPolicy, fmt: str) -> View:
    return make_view(
        "q7",
        "bid",
        [
            tumble("bidtime", 10 * MINUTE_MS),
            *grouped(
                [("window_start", ref("window_start", TIMESTAMP)),
                 ("window_end", ref("window_end", TIMESTAMP))],
                [
                    ("bidtime", agg("ARG_MAX", ref("bidtime", TIMESTAMP), ref("price", MONEY),
                                    type_=TIMESTAMP_NULL)),
                    ("price", agg("MAX", ref("price", MONEY), type_=MONEY)),
                    ("item", agg("ARG_MAX", ref("item", VARCHAR), ref("price", MONEY),
                                 type_=VARCHAR)),
                ],
                project=[
                    ("wstart", ref("window_start", TIMESTAMP)),
                    ("wend", ref("window_end", TIMESTAMP)),
                    ("bidtime", ref("bidtime", TIMESTAMP_NULL)),
                    ("price", ref("price", MONEY)),
                    ("item", ref("item", VARCHAR)),
                ],
            ),
        ],
        [Column("wstart", TIMESTAMP), Column("wend", TIMESTAMP), Column("bidtime", TIMESTAMP_NULL),
         Column("price", MONEY), Column("item", VARCHAR)],
        key=("wstart", "wend"),
        time_attributes=(
            TimeAttribute("wstart", "bid", "bidtime", "window_start"),
            TimeAttribute("wend", "bid", "bidtime", "window_end"),
        ),
        emit=emit,
        fmt=fmt,
    )


def row(wstart: str, wend: str, bidtime: str, price: int, item: str) -> dict[str, Any]:
    return {"wstart": at(wstart), "wend": at(wend), "bidtime": at(bidtime),
            "price": money(price), "item": item}


def changelog(base: dict[str, Any], undo: bool, ptime: str, ver: int) -> dict[str, Any]:
    return {**base, "undo": undo, "ptime": at(ptime), "ver": ver}


def test_s9_listing5_tumble_assigns_each_bid_to_its_ten_minute_window() -> None:
    view = make_view(
        "tumbled", "bid", [tumble("bidtime", 10 * MINUTE_MS)],
        [Column("window_start", TIMESTAMP), Column("window_end", TIMESTAMP),
         Column("bidtime", TIMESTAMP), Column("price", MONEY), Column("item", VARCHAR)],
        time_attributes=window_attributes("bid", "bidtime"), fmt="append",
    )
    expected = [
        ("8:00", "8:10", "8:07", 2, "A"), ("8:10", "8:20", "8:11", 3, "B"),
        ("8:00", "8:10", "8:05", 4, "C"), ("8:00", "8:10", "8:09", 5, "D"),
        ("8:10", "8:20", "8:13", 1, "E"), ("8:10", "8:20", "8:17", 6, "F"),
    ]
    got = values(run(view), "tumbled")
    assert got == [
        {"window_start": at(s), "window_end": at(e), "bidtime": at(b), "price": money(p),
         "item": i}
        for s, e, b, p, i in expected
    ]


def test_s9_listing7_hop_puts_each_bid_in_two_overlapping_windows() -> None:
    view = make_view(
        "hopped", "bid", [hop("bidtime", 5 * MINUTE_MS, 10 * MINUTE_MS)],
        [Column("window_start", TIMESTAMP), Column("window_end", TIMESTAMP),
         Column("bidtime", TIMESTAMP), Column("price", MONEY), Column("item", VARCHAR)],
        time_attributes=window_attributes("bid", "bidtime"), fmt="append",
    )
    expected = [
        ("8:00", "8:10", "8:07", 2, "A"), ("8:05", "8:15", "8:07", 2, "A"),
        ("8:05", "8:15", "8:11", 3, "B"), ("8:10", "8:20", "8:11", 3, "B"),
        ("8:00", "8:10", "8:05", 4, "C"), ("8:05", "8:15", "8:05", 4, "C"),
        ("8:00", "8:10", "8:09", 5, "D"), ("8:05", "8:15", "8:09", 5, "D"),
        ("8:05", "8:15", "8:13", 1, "E"), ("8:10", "8:20", "8:13", 1, "E"),
        ("8:10", "8:20", "8:17", 6, "F"), ("8:15", "8:25", "8:17", 6, "F"),
    ]
    got = values(run(view), "hopped")
    assert got == [
        {"window_start": at(s), "window_end": at(e), "bidtime": at(b), "price": money(p),
         "item": i}
        for s, e, b, p, i in expected
    ]


def test_s9_window_functions_agree_with_listings_5_and_7() -> None:
    size, slide = 10 * MINUTE_MS, 5 * MINUTE_MS
    assert tumble_start(at("8:05"), size) == at("8:00")
    assert tumble_start(at("8:10"), size) == at("8:10")  # [start, end): 8:10 opens a window
    assert hop_starts(at("8:13"), size, slide) == [at("8:05"), at("8:10")]
    assert hop_starts(at("8:05"), size, slide) == [at("8:00"), at("8:05")]


def _sum_by_wend(window: Any) -> View:
    return make_view(
        "sums", "bid",
        [
            window,
            *grouped(
                [("wend", ref("window_end", TIMESTAMP))],
                [("wstart", agg("MAX", ref("window_start", TIMESTAMP), type_=TIMESTAMP_NULL)),
                 ("price", agg("SUM", ref("price", MONEY), type_=SUM_MONEY))],
                project=[("wstart", ref("wstart", TIMESTAMP_NULL)),
                         ("wend", ref("wend", TIMESTAMP)),
                         ("price", ref("price", SUM_MONEY))],
            ),
        ],
        [Column("wstart", TIMESTAMP_NULL), Column("wend", TIMESTAMP),
         Column("price", SUM_MONEY)],
        key=("wend",),
        fmt="upsert",
    )


def test_s8_s9_listing6_tumble_group_by_wend_sums_prices() -> None:
    final = materialize(run(_sum_by_wend(tumble("bidtime", 10 * MINUTE_MS))), "sums")
    assert sorted(final.values(), key=lambda r: r["wend"]) == [
        {"wstart": at("8:00"), "wend": at("8:10"), "price": money(11)},
        {"wstart": at("8:10"), "wend": at("8:20"), "price": money(10)},
    ]


def test_s8_s9_listing8_hop_group_by_wend_sums_prices() -> None:
    final = materialize(
        run(_sum_by_wend(hop("bidtime", 5 * MINUTE_MS, 10 * MINUTE_MS))), "sums"
    )
    assert sorted(final.values(), key=lambda r: r["wend"]) == [
        {"wstart": at("8:00"), "wend": at("8:10"), "price": money(11)},
        {"wstart": at("8:05"), "wend": at("8:15"), "price": money(15)},
        {"wstart": at("8:10"), "wend": at("8:20"), "price": money(10)},
        {"wstart": at("8:15"), "wend": at("8:25"), "price": money(6)},
    ]


def test_s8_listing3_and_4_q7_table_view_at_8_13_and_at_8_21() -> None:
    results = run(q7(EmitPolicy(), "upsert"))
    upto_8_13 = [r for r, (ptime, _) in zip(results, DATA_SET, strict=True)
                 if at(ptime) <= at("8:13")]
    assert sorted(materialize(upto_8_13, "q7").values(), key=lambda r: r["wend"]) == [
        row("8:00", "8:10", "8:05", 4, "C"),  # listing 4
        row("8:10", "8:20", "8:11", 3, "B"),
    ]
    assert sorted(materialize(results, "q7").values(), key=lambda r: r["wend"]) == [
        row("8:00", "8:10", "8:09", 5, "D"),  # listing 3
        row("8:10", "8:20", "8:17", 6, "F"),
    ]


def test_s12_s13_listing9_emit_stream_retracts_then_inserts_with_ver() -> None:
    results = run(q7(EmitPolicy(stream=True), "changelog"))
    a, b = row("8:00", "8:10", "8:07", 2, "A"), row("8:10", "8:20", "8:11", 3, "B")
    c, d = row("8:00", "8:10", "8:05", 4, "C"), row("8:00", "8:10", "8:09", 5, "D")
    f = row("8:10", "8:20", "8:17", 6, "F")
    assert values(results, "q7") == [
        changelog(a, False, "8:08", 0),
        changelog(b, False, "8:12", 0),
        changelog(a, True, "8:13", 1),
        changelog(c, False, "8:13", 2),
        changelog(c, True, "8:15", 3),
        changelog(d, False, "8:15", 4),
        changelog(b, True, "8:18", 1),
        changelog(f, False, "8:18", 2),
    ]
    keys = [r.key for result in results for r in result.outputs["q7"]]
    assert keys[0] == {"wstart": at("8:00"), "wend": at("8:10")}


def test_s11_s12_listings10_to_12_after_watermark_one_final_row_per_window() -> None:
    results = run(q7(EmitPolicy(after_watermark=True), "upsert"))
    by_ptime = dict(zip([at(p) for p, _ in DATA_SET], results, strict=True))
    upto = lambda clock: [r for t, r in by_ptime.items() if t <= at(clock)]  # noqa: E731
    assert materialize(upto("8:13"), "q7") == {}  # listing 10: incomplete
    assert list(materialize(upto("8:16"), "q7").values()) == [
        row("8:00", "8:10", "8:09", 5, "D")  # listing 11: partial
    ]
    assert sorted(materialize(results, "q7").values(), key=lambda r: r["wend"]) == [
        row("8:00", "8:10", "8:09", 5, "D"),  # listing 12: complete
        row("8:10", "8:20", "8:17", 6, "F"),
    ]
    assert len(values(results, "q7")) == 2  # exactly one record per window, ever
    # S11: the first window's state is freed in the step that wrote its final row.
    assert by_ptime[at("8:15")].state_rows["q7"] == 2
    assert by_ptime[at("8:16")].state_rows["q7"] == 1
    assert by_ptime[at("8:21")].state_rows["q7"] == 0


def test_s12_s13_listing13_stream_after_watermark_one_changelog_row_per_window() -> None:
    results = run(q7(EmitPolicy(stream=True, after_watermark=True), "changelog"))
    assert values(results, "q7") == [
        changelog(row("8:00", "8:10", "8:09", 5, "D"), False, "8:16", 0),
        changelog(row("8:10", "8:20", "8:17", 6, "F"), False, "8:21", 0),
    ]


def test_s12_listing14_after_delay_coalesces_changes_six_minutes_after_the_first() -> None:
    results = run(q7(EmitPolicy(stream=True, delay_ms=6 * MINUTE_MS), "changelog"))
    c, d = row("8:00", "8:10", "8:05", 4, "C"), row("8:00", "8:10", "8:09", 5, "D")
    f = row("8:10", "8:20", "8:17", 6, "F")
    assert values(results, "q7") == [
        changelog(c, False, "8:14", 0),
        changelog(f, False, "8:18", 0),
        changelog(c, True, "8:21", 1),
        changelog(d, False, "8:21", 2),
    ]


def test_s14_records_carry_the_view_waterline_after_their_step() -> None:
    results = run(q7(EmitPolicy(stream=True, after_watermark=True), "changelog"))
    headers = [(r.waterline, r.value["ptime"]) for res in results for r in res.outputs["q7"]
               if r.value is not None]
    # The waterline of wstart (S10): the start of the 10-minute window holding w(bidtime).
    assert headers == [(at("8:10"), at("8:16")), (at("8:20"), at("8:21"))]
    assert [res.view_waterlines["q7"] for res in results][:2] == [at("8:00"), at("8:00")]


@pytest.mark.parametrize("fmt", ["upsert", "changelog", "append"])
def test_s13_after_watermark_encodings(fmt: str) -> None:
    view = q7(EmitPolicy(stream=fmt == "changelog", after_watermark=True), fmt)
    got = [r for res in run(view) for r in res.outputs["q7"]]
    assert len(got) == 2
    if fmt == "append":
        assert all(r.key is None for r in got)
    else:
        assert got[0].key == {"wstart": at("8:00"), "wend": at("8:10")}
