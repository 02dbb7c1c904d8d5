"""The two-input generator of workload (d) (loadtests/generator.py, ``pair_timeline``): one
auction in eleven events, the bids naming recent auctions so that most fall within their
auction's ten-minute bound, each id back only after that bound, and the same late and
out-of-order fractions as the one-input workloads."""

from __future__ import annotations

from collections import defaultdict

from loadtests.bench import pair_shape_of
from loadtests.generator import AUCTION, BID, PairShape, pair_timeline

SHAPE = pair_shape_of("d")


def test_pair_timeline_is_the_same_for_a_seed_and_other_for_another() -> None:
    first = list(pair_timeline(SHAPE, 3_000))
    assert first == list(pair_timeline(SHAPE, 3_000))
    other = PairShape(SHAPE.auction_schema, SHAPE.bid_schema, seed=8)
    assert [row for *_, row, _ in first] != [row for *_, row, _ in pair_timeline(other, 3_000)]


def test_one_auction_per_ten_bids_each_with_its_tables_columns() -> None:
    columns = {
        AUCTION: [f["name"] for f in SHAPE.auction_schema["fields"]],
        BID: [f["name"] for f in SHAPE.bid_schema["fields"]],
    }
    sides = []
    for i, side, row, _late in pair_timeline(SHAPE, 11_000):
        assert sorted(row) == sorted(columns[side]), (i, side, row)
        sides.append(side)
    assert sides.count(AUCTION) == 1_000 and sides.count(BID) == 10_000
    assert sides[:12] == [AUCTION] + [BID] * 10 + [AUCTION]


def test_late_flag_marks_exactly_the_events_behind_lateness_and_spread() -> None:
    lates = {AUCTION: 0, BID: 0}
    for i, side, row, late in pair_timeline(SHAPE, 40_000):
        behind = SHAPE.base_ms + (i + 1) * SHAPE.step_ms - row["date_time"]
        assert late == (behind > SHAPE.lateness_ms + SHAPE.spread_ms), (i, row, late)
        if not late:
            assert 0 <= behind < SHAPE.spread_ms
        lates[side] += late
    # About 1% of each input.
    assert 20 < lates[AUCTION] < 60 and 270 < lates[BID] < 460, lates


def test_most_bids_match_one_auction_within_the_bound_and_none_two() -> None:
    """The join's input: ids cycle over 10k keys, each back only after the bound, so a bid
    matches at most one auction; bids name recent auctions, so nearly all match one."""
    count = 300_000  # 27,273 auctions: every id opened 2-3 times
    opened: dict[int, list[int]] = defaultdict(list)
    bids = []
    for _i, side, row, _late in pair_timeline(SHAPE, count):
        if side == AUCTION:
            assert 0 <= row["id"] < SHAPE.keys
            assert row["expires"] == row["date_time"] + SHAPE.bound_ms
            opened[row["id"]].append(row["date_time"])
        else:
            bids.append(row)
    assert len(opened) == SHAPE.keys
    matches = [
        sum(1 for t in opened[b["auction"]] if t <= b["date_time"] <= t + SHAPE.bound_ms)
        for b in bids
    ]
    assert max(matches) == 1
    assert 0.98 < sum(matches) / len(bids) < 1.0, sum(matches) / len(bids)
