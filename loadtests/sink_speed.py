"""What a writing task's sink costs per record (app/connectors/sink/):
``python -m loadtests.sink_speed [--transactions 14] [--records 67000]``.

One writing task of benchmark (b) finishes ~67,000 groups a step and hands the sink its
view's records in batches of up to 20,000 (SINK_SCHEMA rows with the view's S14 header). This
runs ``produce_partition`` on batches of that shape, one transaction with a step marker per
round, against the real broker (``KAFKA_BOOTSTRAP_SERVERS``, else the local one), and reports
the process's CPU per record (librdkafka's threads included) as the median of the rounds after
the first two. ``--build-only`` replaces the Kafka write by nothing and so measures the Python
that turns the batches into the producer's calls alone. One JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
import uuid
from collections.abc import Mapping

import pyarrow as pa

from app.connectors.sink import StepMarker, produce, produce_partition
from app.connectors.sink.markers import MarkerPlace, ensure_marker_topic
from app.runtime.step.encode import ViewEncoding, output_batch

_BATCH = 20_000
_WARM_ROUNDS = 2
#: A waterline header as (b)'s records carry it.
_HEADERS = {"v": [("tidemark.waterline", b"2026-11-25T10:00:00.000Z")]}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def batches(topic: str, records: int) -> list[pa.RecordBatch]:
    """``records`` records of view ``v`` (10,000 keys, 40-byte values) in batches of 20,000,
    in the shape the writers hand the sink (``output_batch``, which reads only the
    encoding's view and topic)."""
    encoding = ViewEncoding("v", topic, "append", [], [], {}, None)
    out = []
    for first in range(0, records, _BATCH):
        n = min(_BATCH, records - first)
        keys = [b"user-%05d" % (i % 10_000) for i in range(first, first + n)]
        out.append(output_batch(encoding, keys, [os.urandom(40) for _ in range(n)]))
    return out


def measure(conf: Mapping[str, str], topic: str, markers: str, rounds: int, records: int) -> float:
    """Median CPU microseconds per record over the rounds after the first two."""
    data = batches(topic, records)
    sink = uuid.uuid4().hex[:12]
    per_record = []
    for step in range(rounds):
        marker = StepMarker(sink, step, MarkerPlace(markers, 0))
        started = _cpu()
        summary = list(produce_partition(iter(data), conf, {}, _HEADERS, marker))
        used = _cpu() - started
        written = sum(row["n"] for b in summary for row in b.to_pylist() if row["kind"] == "output")
        if written != records:
            raise RuntimeError(f"round {step} wrote {written} records of {records}")
        if step >= _WARM_ROUNDS:
            per_record.append(1e6 * used / records)
    return statistics.median(per_record)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transactions", type=int, default=14)
    parser.add_argument("--records", type=int, default=67_000)
    parser.add_argument("--build-only", action="store_true")
    args = parser.parse_args()
    if args.build_only:
        produce.write_transaction = lambda *_args: None
        us = measure({}, "out", "markers", args.transactions, args.records)
        print(json.dumps({"build_only": True, "cpu_us_per_record": round(us, 3)}))
        return
    from loadtests.bench import broker, create_topic

    bootstrap, local = broker()
    try:
        topic, markers = f"sink.{uuid.uuid4().hex[:6]}", f"sink.markers.{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, 2)
        started = time.perf_counter()
        conf = {"bootstrap.servers": bootstrap}
        ensure_marker_topic(conf, markers, None)
        us = measure(conf, topic, markers, args.transactions, args.records)
        figures = {
            "build_only": False,
            "cpu_us_per_record": round(us, 3),
            "records": args.records,
            "transactions": args.transactions,
            "seconds": round(time.perf_counter() - started, 1),
        }
        print(json.dumps(figures))
    finally:
        if local is not None:
            local.cleanup()


if __name__ == "__main__":
    main()
