"""The generator's timeline (loadtests/generator.py): the latency probe regenerates the events
it produced from the seed, so the timeline must be deterministic, and its ``late`` flag must
mark exactly the events moved back past LATENESS (the ones Tidemark's late gate routes, S5)."""

from __future__ import annotations

from pathlib import Path

from loadtests.generator import EventShape, events, timeline

SCHEMA = {
    "type": "record",
    "name": "clicks",
    "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "usr", "type": "string"},
        {"name": "n", "type": "int"},
    ],
}
SHAPE = EventShape(SCHEMA, keys=100, late=0.05, disorder=0.2)


def test_timeline_is_the_same_for_a_seed_and_events_is_its_rows() -> None:
    first = list(timeline(SHAPE, 2_000))
    assert first == list(timeline(SHAPE, 2_000))
    assert [(i, row) for i, row, _ in first] == list(events(SHAPE, 2_000))


def test_late_flag_marks_exactly_the_events_behind_lateness_and_spread() -> None:
    lates = 0
    for i, row, late in timeline(SHAPE, 5_000):
        clock = SHAPE.base_ms + (i + 1) * SHAPE.step_ms
        behind = clock - row["ts"]
        assert late == (behind > SHAPE.lateness_ms + SHAPE.spread_ms), (i, row, late)
        if not late:
            assert 0 <= behind < SHAPE.spread_ms  # out of order at most, never late
        lates += late
    assert 150 < lates < 350  # about 5%


def test_encoded_events_are_the_events_encoded_in_order(tmp_path: Path) -> None:
    """The latency probe produces from a file encoded beforehand: it must hold exactly the
    values produce() would encode, so the attribution (which regenerates the timeline) and
    the throughput runs see the same events."""
    from app.connectors.avro_codec import AvroCodec
    from loadtests.generator import encode_events, encoded_events

    path = tmp_path / "events.bin"
    encode_events(SHAPE, 3_000, path)
    codec = AvroCodec(SCHEMA)
    assert list(encoded_events(path)) == [codec.encode(row) for _, row in events(SHAPE, 3_000)]
