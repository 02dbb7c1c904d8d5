"""What the socket between Spark and its Python workers costs a task
(app/runtime/session.py): ``python -m loadtests.worker_socket [--jobs 40]``.

Each variant runs in a child process with Tidemark's Spark session (``spark_session()``), with
``spark.python.unix.domain.socket.enabled`` as the variant says (``tcp``: Spark's default,
loopback TCP; ``uds``: a Unix domain socket, Tidemark's setting). The child runs ``--jobs``
trivial two-task jobs of each kind a Tidemark step runs Python in (a ``mapInArrow``, as the
writing stage; an RDD ``mapPartitions``, as the step sink's slice jobs) and reports the median
wall time of a job after the first ten, so nothing but the hand-off to the worker and back is
measured. Variants alternate, each twice; one JSON line per child.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

_WARM_JOBS = 10


def _median_ms(run: Callable[[], Any], jobs: int) -> float:
    times = []
    for _ in range(jobs):
        started = time.perf_counter()
        run()
        times.append(1000 * (time.perf_counter() - started))
    return round(statistics.median(times[_WARM_JOBS:]), 1)


def _child(variant: str, jobs: int) -> None:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from app.runtime.session import spark_session

    # Tidemark's session, then the same settings but the one compared.
    tidemark = spark_session("local[2]", shuffle_partitions=2)
    conf = tidemark.sparkContext.getConf()
    tidemark.stop()
    conf.set("spark.python.unix.domain.socket.enabled", str(variant == "uds").lower())
    spark = SparkSession.builder.config(conf=conf).getOrCreate()

    def passthrough(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from batches

    frame = spark.range(0, 2, 1, 2)
    rdd = spark.sparkContext.parallelize([1, 2], 2)
    figures = {
        "variant": variant,
        "map_in_arrow_job_ms": _median_ms(
            lambda: frame.mapInArrow(passthrough, "id long").collect(), jobs
        ),
        "rdd_job_ms": _median_ms(lambda: rdd.mapPartitions(lambda rows: rows).collect(), jobs),
        "jvm_job_ms": _median_ms(lambda: frame.selectExpr("id + 1").collect(), jobs),
    }
    print(json.dumps(figures), flush=True)
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--child", choices=("tcp", "uds"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.jobs <= _WARM_JOBS:
        parser.error(f"--jobs must be above the {_WARM_JOBS} warm-up jobs")
    if args.child:
        _child(args.child, args.jobs)
        return
    for variant in ("tcp", "uds", "tcp", "uds"):
        child = subprocess.run(
            [
                sys.executable,
                "-m",
                "loadtests.worker_socket",
                "--child",
                variant,
                "--jobs",
                str(args.jobs),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        print(child.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
