"""The step marker's counts fit the broker's offset-metadata limit (4096 bytes by default),
however many output topics a table writes (found by the differential tests: ~40 topics
overflowed it and stopped the query)."""

from __future__ import annotations

from app.connectors.sink.summary import decode_summary, encode_summary


def _rows(n: int, width: int = 1) -> list[dict[str, object]]:
    return [
        {
            "kind": "output",
            "rel": f"view_{i}" * width,
            "topic": f"topic.of.view.{i}" * width,
            "reason": "",
            "n": i + 1,
            "detail": None,
        }
        for i in range(n)
    ]


def test_counts_round_trip_small_and_compressed_s15() -> None:
    for rows in (_rows(3), _rows(150)):
        text = encode_summary(rows)
        assert len(text) <= 4000
        assert decode_summary(text) == rows


def test_past_the_limit_only_totals_per_kind_are_kept_s15() -> None:
    rows = _rows(2000, width=20)
    text = encode_summary(rows)
    assert len(text) <= 4000
    assert decode_summary(text) == [
        {
            "kind": "output",
            "rel": None,
            "topic": None,
            "reason": None,
            "n": sum(range(1, 2001)),
            "detail": None,
        }
    ]
