"""The step fingerprint a step marker carries, and how a replayed task judges the marker it
finds (app/connectors/sink/fingerprint.py, transactions.py, S15): equal fingerprints skip
with the stored counts, different ones refuse naming the step, the transactional id, both
fingerprints and what to do; a marker written before fingerprints is trusted as before. No
broker: the judgement is a function of the committed marker."""

from __future__ import annotations

import re

import pytest

from app.connectors.sink import StepMarker
from app.connectors.sink.fingerprint import FINGERPRINT_HEX, SourceRanges, step_fingerprint
from app.connectors.sink.markers import FoundMarker, MarkerPlace
from app.connectors.sink.summary import (
    METADATA_LIMIT,
    decode_marker,
    encode_marker,
    encode_summary,
)
from app.connectors.sink.transactions import replayed_counts
from app.errors import SinkError

PLAN = "a" * 64
INPUT = [SourceRanges("purchases", ((0, 100, 150), (1, 90, 140)))]
COUNTS = [{"kind": "output", "rel": "v", "topic": "out", "reason": "", "n": 7, "detail": None}]


def test_the_fingerprint_is_fixed_size_hex_and_stable_s15() -> None:
    first = step_fingerprint(PLAN, INPUT)
    assert re.fullmatch(f"[0-9a-f]{{{FINGERPRINT_HEX}}}", first), first
    # An equal plan and equal ranges, built afresh: the same step, the same fingerprint.
    again = [SourceRanges("purchases", ((0, 100, 150), (1, 90, 140)))]
    assert step_fingerprint("".join(["a"] * 64), again) == first
    # Same ranges listed in another partition order: the same step.
    shuffled = [SourceRanges("purchases", ((1, 90, 140), (0, 100, 150)))]
    assert step_fingerprint(PLAN, shuffled) == first
    # Another plan over the same input: another fingerprint.
    assert step_fingerprint("b" * 64, again) != first


@pytest.mark.parametrize(
    ("plan", "sources"),
    [
        ("b" * 64, INPUT),  # another plan
        (PLAN, [SourceRanges("purchases", ((0, 100, 151), (1, 90, 140)))]),  # one end moved
        (PLAN, [SourceRanges("purchases", ((0, 100, 150), (1, 91, 140)))]),  # one start moved
        (PLAN, [SourceRanges("purchases", ((0, 100, 150),))]),  # a partition less
        (PLAN, [SourceRanges("purchases", ((0, 100, 120), (0, 120, 150), (1, 90, 140)))]),
        (PLAN, [SourceRanges("sales", ((0, 100, 150), (1, 90, 140)))]),  # another topic
        (PLAN, [*INPUT, SourceRanges("bids", ((0, 0, 5),))]),  # another source
    ],
)
def test_another_plan_or_other_input_ranges_change_the_fingerprint_s15(
    plan: str, sources: list[SourceRanges]
) -> None:
    assert step_fingerprint(plan, sources) != step_fingerprint(PLAN, INPUT)


def test_marker_metadata_carries_the_fingerprint_and_the_counts_s15() -> None:
    fingerprint = step_fingerprint(PLAN, INPUT)
    text = encode_marker(COUNTS, fingerprint)
    assert decode_marker(text) == (fingerprint, COUNTS)
    # A marker written before fingerprints: the counts alone.
    assert decode_marker(encode_summary(COUNTS)) == (None, COUNTS)
    assert decode_marker(encode_marker(COUNTS, None)) == (None, COUNTS)


def test_marker_metadata_stays_within_the_broker_limit_with_many_topics_s15() -> None:
    rows = [
        {"kind": "output", "rel": f"v{i}" * 30, "topic": f"t{i}" * 30, "reason": "", "n": i}
        for i in range(400)
    ]
    text = encode_marker(rows, step_fingerprint(PLAN, INPUT))
    assert len(text) <= METADATA_LIMIT
    fingerprint, counts = decode_marker(text)
    assert fingerprint == step_fingerprint(PLAN, INPUT)
    assert counts[0]["n"] == sum(range(400))  # cut to the totals per kind


def test_a_fingerprint_must_be_hex() -> None:
    with pytest.raises(ValueError, match="hex"):
        encode_marker(COUNTS, "f1:x")


def _marker(fingerprint: str | None) -> StepMarker:
    place = MarkerPlace("tidemark.step-markers", 0)
    return StepMarker("0123456789abcdef", 41, place, 0, fingerprint)


def test_a_replay_with_the_same_fingerprint_skips_with_the_stored_counts_s15() -> None:
    fingerprint = step_fingerprint(PLAN, INPUT)
    metadata = encode_marker(COUNTS, fingerprint)
    done = FoundMarker(41, metadata)
    assert replayed_counts(done, _marker(fingerprint), "tidemark-x-0") == COUNTS


def test_a_replay_with_another_fingerprint_refuses_naming_what_and_the_fix_s15() -> None:
    stored = step_fingerprint(PLAN, INPUT)
    now = step_fingerprint("b" * 64, INPUT)
    with pytest.raises(SinkError) as caught:
        replayed_counts(
            FoundMarker(41, encode_marker(COUNTS, stored)), _marker(now), "tidemark-x-0"
        )
    text = str(caught.value)
    for part in ("step batch 41", "tidemark-x-0", stored, now, "nothing of the step is written"):
        assert part in text
    assert "--checkpoint" in text and "scan.startup.mode" in text
    assert "docs/reliability.md" in text


def test_a_marker_without_fingerprint_is_trusted_as_before_s15() -> None:
    now = step_fingerprint(PLAN, INPUT)
    old = FoundMarker(41, encode_summary(COUNTS))
    assert replayed_counts(old, _marker(now), "tidemark-x-0") == COUNTS
    # A sink that keeps no fingerprint trusts a marker that has one.
    kept = FoundMarker(41, encode_marker(COUNTS, now))
    assert replayed_counts(kept, _marker(None), "t") == COUNTS


def test_a_marker_of_a_later_batch_refuses_the_replay_s15() -> None:
    """The checkpoint is behind what the sink committed (a restored copy): the marker of
    batch 44 says nothing of batch 41's input, so skipping would be a guess."""
    now = step_fingerprint(PLAN, INPUT)
    with pytest.raises(SinkError, match=r"step batch 41: .*tidemark-x-0 is at batch 44"):
        replayed_counts(FoundMarker(44, encode_marker(COUNTS, now)), _marker(now), "tidemark-x-0")
