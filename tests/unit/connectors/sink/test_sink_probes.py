"""The sink hands probe rows back as summary rows and never writes them (S3, S15).

The step's first job writes the dead letters and brings the probes in one pass, so a probe
must come back from :func:`produce_partition` whatever else the task wrote; a batch of probes
alone needs no producer (the broker is never asked), which is what this checks without one.
"""

from __future__ import annotations

import json

import pyarrow as pa

from app.connectors.sink import produce_partition
from app.connectors.sink.record import SINK_RECORD


def test_probe_rows_come_back_as_summary_rows_and_are_not_written() -> None:
    schema = SINK_RECORD
    probes = [
        {
            "kind": "probe",
            "rel": "t",
            "value": json.dumps({"ts": 5, "_accepted": 3}).encode(),
            "step": 7,
        },
        {
            "kind": "probe",
            "rel": "t",
            "value": json.dumps({"ts": None, "_accepted": 0}).encode(),
            "step": 7,
        },
    ]
    batch = pa.RecordBatch.from_pylist(probes, schema=schema)
    out = pa.Table.from_batches(
        list(produce_partition(iter([batch]), conf={}, tables={}, view_headers={}))
    ).to_pylist()
    assert out == [
        {
            "kind": "probe",
            "rel": "t",
            "topic": None,
            "reason": None,
            "n": 7,
            "detail": p["value"].decode(),
        }
        for p in probes
    ]
