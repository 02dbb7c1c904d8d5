"""Batches of a view's output records as sink records (app/connectors/sink/record.py), for
the tests that drive ``produce_partition`` directly."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from app.connectors.sink import StepMarker, produce_partition
from app.connectors.sink.markers import MarkerPlace, ensure_marker_topic, read_markers
from app.connectors.sink.record import SINK_RECORD


def marker_place(conf: Mapping[str, str], topic: str) -> MarkerPlace:
    """A markers' topic created as the service creates it, and its one partition."""
    assert ensure_marker_topic(conf, topic, None) == 1
    return MarkerPlace(topic, 0)


def as_replay(conf: Mapping[str, str], marker: StepMarker) -> StepMarker:
    """``marker`` of a run's first step: with the sink's markers of its batch read as the
    driver reads them at a run's start (the step may be a replay)."""
    found = read_markers(conf, marker.place, marker.prefix())
    mine = tuple(sorted((t, m) for t, m in found.items() if m.batch == marker.batch_id))
    return dataclasses.replace(marker, found=mine)


def output_records(topic: str, first: int, n: int) -> pa.RecordBatch:
    """Records ``r<first>`` .. ``r<first + n - 1>`` of view ``v`` for ``topic``."""
    rows = [
        {"kind": "output", "rel": "v", "topic": topic, "value": f"r{i}".encode()}
        for i in range(first, first + n)
    ]
    return pa.RecordBatch.from_pylist(rows, schema=SINK_RECORD)


def write_task(
    conf: Mapping[str, str], marker: StepMarker | None, batches: Iterable[pa.RecordBatch]
) -> list[dict[str, Any]]:
    """The SUMMARY rows of one writing task producing ``batches`` of view ``v``."""
    out = produce_partition(
        iter(batches),
        conf=conf,
        tables={},
        view_headers={"v": [("tidemark.waterline", b"w")]},
        marker=marker,
    )
    return [row for batch in out for row in batch.to_pylist()]
