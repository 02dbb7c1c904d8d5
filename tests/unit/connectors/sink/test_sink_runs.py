"""The sink produces a batch's records in row order, each with its view's S14 headers, and
counts them per (kind, view, topic, reason) (S14, S15).

A writing task hands the sink batches of one view's records (the common case, produced as one
run sharing the view's headers) or of several views and dead letters mixed; either way the
records of one topic must reach the producer in the order of the rows, since two records of
one key (a changelog's retraction and insertion) land on one partition in that order.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from app.connectors.sink.runs import output_runs
from app.connectors.sink.summary import count_rows

#: The sink's columns these read (SINK_SCHEMA has more).
_TEXT = ("kind", "rel", "topic", "reason")
OUTPUT = pa.schema(
    [*((name, pa.string()) for name in _TEXT), *((b, pa.binary()) for b in ("key", "value"))]
)
HEADERS = {"v": [("tidemark.waterline", b"1")], "w": [("tidemark.waterline", b"2")]}


def _batch(rows: list[tuple[str, str, str]]) -> pa.RecordBatch:
    """Rows of (kind, view, topic), keyed and valued by their position."""
    return pa.RecordBatch.from_pylist(
        [
            {"kind": kind, "rel": rel, "topic": topic, "key": b"k%d" % i, "value": b"v%d" % i}
            for i, (kind, rel, topic) in enumerate(rows)
        ],
        schema=OUTPUT,
    )


def test_one_views_batch_is_one_run_with_its_headers() -> None:
    batch = _batch([("output", "v", "tv")] * 3)
    keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
    assert output_runs(batch, keys, values, HEADERS) == [
        ("tv", [("tidemark.waterline", b"1")], [b"k0", b"k1", b"k2"], [b"v0", b"v1", b"v2"], None)
    ]


def test_interleaved_views_keep_row_order() -> None:
    batch = _batch(
        [("output", "v", "tv"), ("output", "v", "tv"), ("output", "w", "tw"), ("output", "v", "tv")]
    )
    keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
    runs = output_runs(batch, keys, values, HEADERS)
    assert runs == [
        ("tv", HEADERS["v"], [b"k0", b"k1"], [b"v0", b"v1"], None),
        ("tw", HEADERS["w"], [b"k2"], [b"v2"], None),
        ("tv", HEADERS["v"], [b"k3"], [b"v3"], None),
    ]
    produced = [(topic, key) for topic, _, keys_, _, _ in runs for key in keys_]
    assert produced == [("tv", b"k0"), ("tv", b"k1"), ("tw", b"k2"), ("tv", b"k3")]


def test_a_view_without_headers_gets_none() -> None:
    batch = _batch([("output", "x", "tx")])
    assert output_runs(batch, [b"k0"], [b"v0"], HEADERS) == [("tx", [], [b"k0"], [b"v0"], None)]


def test_counts_per_kind_view_topic_and_reason() -> None:
    batch = pa.RecordBatch.from_pylist(
        [
            {"kind": "output", "rel": "v", "topic": "tv"},
            {"kind": "dead_letter", "rel": "t", "topic": "dlq", "reason": "late"},
            {"kind": "output", "rel": "v", "topic": "tv", "reason": ""},
            {"kind": "dead_letter", "rel": "t", "topic": "dlq", "reason": "late"},
            {"kind": "dead_letter", "rel": "t", "topic": "dlq", "reason": "malformed"},
        ],
        schema=OUTPUT,
    )
    counts: Counter[tuple[str, str, str, str]] = Counter({("output", "v", "tv", ""): 4})
    count_rows(counts, batch)
    assert counts == {
        ("output", "v", "tv", ""): 6,
        ("dead_letter", "t", "dlq", "late"): 2,
        ("dead_letter", "t", "dlq", "malformed"): 1,
    }
