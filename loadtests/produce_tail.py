"""How long a writing task takes after its last batch:
``python -m loadtests.produce_tail [--batches 4] [--rows 8000] [--gap-ms 40] [--tasks 30]``.

A writing task of (b) gets its completed groups from Spark in a few Arrow batches, with the
JVM's state eviction between them, and ends when its transaction commits. This runs
:func:`app.connectors.sink.produce.produce_partition` as such a task against the local broker:
``--batches`` batches of ``--rows`` output records (Avro-sized values, the S14 header), batch
``k`` ready ``k * --gap-ms`` after the first (Spark's JVM makes them meanwhile, in its own
threads), in one transaction with a step marker, ``--tasks`` times. It prints the median and
90th percentile of the *tail* (from handing over the last batch to the task's end) and of the
whole task, in ms.

Run it on two commits to compare how they write (a worktree of the older one on
``PYTHONPATH``); both share the broker's and machine's state only if run back to back.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Iterator

import pyarrow as pa


def _batch(topic: str, first: int, rows: int) -> pa.RecordBatch:
    """Output records of view ``v`` without keys, as the writers hand them to the sink."""
    from app.runtime.step.encode import ViewEncoding, output_batch

    value = bytes(40)  # about the size of one (b) window row in Avro
    encoding = ViewEncoding("v", topic, "append", [], [], {}, None)
    values = [value + i.to_bytes(8, "big") for i in range(first, first + rows)]
    return output_batch(encoding, [None] * rows, values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--rows", type=int, default=8000)
    parser.add_argument("--gap-ms", type=float, default=40.0)
    parser.add_argument("--tasks", type=int, default=30)
    args = parser.parse_args()

    from confluent_kafka.admin import AdminClient, NewTopic

    from app.connectors.sink import StepMarker, open_early, produce_partition
    from app.connectors.sink.markers import MarkerPlace, ensure_marker_topic
    from app.local_kafka import LocalKafka

    broker = LocalKafka().start()
    try:
        conf = {"bootstrap.servers": broker.bootstrap_servers}
        admin = AdminClient(conf)
        for future in admin.create_topics(
            [NewTopic("out", 2, 1)]
        ).values():
            future.result()
        ensure_marker_topic(conf, "markers", None)
        batches = [_batch("out", b * args.rows, args.rows) for b in range(args.batches)]
        sink = uuid.uuid4().hex[:16]
        tails: list[float] = []
        totals: list[float] = []
        for task in range(args.tasks + 2):  # the first two warm the producer and the broker
            marker = StepMarker(sink, task, MarkerPlace("markers", 0))
            open_early(conf, marker)
            last: list[float] = []

            def spark(last: list[float] = last) -> Iterator[pa.RecordBatch]:
                begun = time.perf_counter()
                for index, batch in enumerate(batches):
                    # Batch ``index`` is ready ``index * gap`` after the first, whatever the
                    # task did meanwhile: Spark's JVM evicts and serialises in threads of its
                    # own while the Python worker writes.
                    ready = begun + index * args.gap_ms / 1000
                    time.sleep(max(0.0, ready - time.perf_counter()))
                    if index == len(batches) - 1:
                        last.append(time.perf_counter())
                    yield batch

            started = time.perf_counter()
            for _ in produce_partition(
                spark(), conf, {}, {"v": [("tidemark.waterline", b"w")]}, marker
            ):
                pass
            ended = time.perf_counter()
            if task >= 2:
                tails.append((ended - last[0]) * 1000)
                totals.append((ended - started) * 1000)
        deciles = statistics.quantiles(tails, n=10)
        print(
            json.dumps(
                {
                    "batches": args.batches,
                    "rows": args.rows,
                    "gap_ms": args.gap_ms,
                    "tasks": args.tasks,
                    "tail_ms_p50": round(statistics.median(tails), 1),
                    "tail_ms_p90": round(deciles[8], 1),
                    "task_ms_p50": round(statistics.median(totals), 1),
                    "task_ms_p90": round(statistics.quantiles(totals, n=10)[8], 1),
                }
            ),
            flush=True,
        )
    finally:
        broker.cleanup()


if __name__ == "__main__":
    main()
