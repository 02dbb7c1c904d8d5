"""The two-input generator of workload (d) (loadtests/generator.py, ``pair_timeline``): one
auction in eleven events, the bids naming recent auctions so that most fall within their
auction's ten-minute bound, each id back only after that bound, and the same late and
out-of-order fractions as the one-input workloads; encoded beforehand and produced at a rate
to both topics for the latency probe."""

from __future__ import annotations

from array import array
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from loadtests.bench import pair_shape_of
from loadtests.generator import (
    AUCTION,
    BID,
    PairShape,
    encode_pair,
    encoded_pair,
    pair_timeline,
    produce_pair,
)

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


def test_encoded_pair_is_each_event_encoded_for_its_input_in_order(tmp_path: Path) -> None:
    """The latency probe produces (d) from a file encoded beforehand: it must hold exactly
    the values produce_pair() would encode, each with its input, so the attribution (which
    regenerates the timeline) sees the events produced."""
    from app.connectors.avro_codec import AvroCodec

    path = tmp_path / "pair.bin"
    encode_pair(SHAPE, 2_000, path)
    codecs = (AvroCodec(SHAPE.auction_schema), AvroCodec(SHAPE.bid_schema))
    assert list(encoded_pair(path)) == [
        (side, codecs[side].encode(row)) for _, side, row, _late in pair_timeline(SHAPE, 2_000)
    ]


class _Producer:
    """confluent_kafka.Producer's calls that produce_pair makes, kept."""

    sent: list[tuple[str, bytes, bytes]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        _Producer.sent = []

    def produce(self, topic: str, value: bytes, key: bytes) -> None:
        _Producer.sent.append((topic, value, key))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def test_produce_pair_sends_each_event_to_its_inputs_topic_at_the_rate_until_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One sequence over both topics, in production order and keyed by index; ``times``
    gets one produce time per event, paced at ``rate`` over both inputs together."""
    import confluent_kafka

    monkeypatch.setattr(confluent_kafka, "Producer", _Producer)
    path = tmp_path / "pair.bin"
    encode_pair(SHAPE, 500, path)
    times = array("d")
    seconds = produce_pair(
        {}, ("a", "b"), SHAPE, 300, rate=2_000, times=times, values=encoded_pair(path)
    )
    values = list(encoded_pair(path))[:300]
    assert _Producer.sent == [
        (("a", "b")[side], value, str(i).encode()) for i, (side, value) in enumerate(values)
    ]
    assert len(times) == 300 and list(times) == sorted(times)
    assert seconds > 0.13 and 130 < times[-1] - times[0] < 5_000  # 300 events at 2,000/s
    calls = iter(range(1_000))
    produce_pair({}, ("a", "b"), SHAPE, 2**40, stop=lambda: next(calls) == 2)
    assert len(_Producer.sent) == 200  # checked every 100 events
