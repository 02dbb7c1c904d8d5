"""Batches of a view's output records as sink records (app/connectors/sink/record.py), for
the tests that drive ``produce_partition`` directly."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from app.connectors.sink import StepMarker, produce_partition
from app.connectors.sink.record import SINK_RECORD


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
