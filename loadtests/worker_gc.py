"""What pyspark's ``gc.collect()`` after every task costs a forked Python worker, with and
without ``gc.freeze()`` in the daemon before it forks (app/runtime/worker_daemon.py):
``python -m loadtests.worker_gc [--tasks 15] [--rows 100000]``.

The parent imports what Tidemark's worker daemon imports and encodes ``--rows`` Avro values of
workload (b) (loadtests.source_speed; bytes, which the collector does not track, so the parent
holds what the daemon holds plus one list); for ``frozen`` it then calls ``gc.freeze()``. A
forked child runs ``--tasks`` source tasks, each building its Kafka messages and decoding them
(``decode_slice``) as a Spark worker's task does, and ``gc.collect()`` after each, and reports
the CPU of both per task. Each variant forks twice; one JSON line per child.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from typing import Any


def _child(spec: Any, values: list[bytes | None], tasks: int, variant: str) -> None:
    from confluent_kafka import Message

    from app.connectors.kafka_source import KafkaPartitionSlice, decode_slice

    work = collect = 0.0
    for step in range(1, tasks + 1):
        part = KafkaPartitionSlice(0, 0, len(values), step, 0, {})
        started = time.process_time()
        messages = [
            Message(topic="t", partition=0, offset=i, value=value)
            for i, value in enumerate(values)
        ]
        for _batch in decode_slice(spec, part, iter(messages)):
            pass
        del messages
        decoded = time.process_time()
        gc.collect()
        work += decoded - started
        collect += time.process_time() - decoded
    figures = {
        "variant": variant,
        "task_cpu_ms": round(1000 * work / tasks, 1),
        "gc_collect_cpu_ms": round(1000 * collect / tasks, 1),
    }
    print(json.dumps(figures), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=15)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()

    import app.runtime.worker_daemon  # noqa: F401 - what the daemon imports
    from loadtests.source_speed import _spec, messages

    spec = _spec("b")
    values = [message.value() for message in messages(spec, "b", args.rows, False)]
    gc.collect()
    for variant in ("collected", "frozen"):
        if variant == "frozen":
            gc.freeze()
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                try:
                    _child(spec, values, args.tasks, variant)
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
