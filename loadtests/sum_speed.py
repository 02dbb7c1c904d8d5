"""Spark's cost of the native path's exact SUM, against a plain ``sum``
(docs/adr/0004-native-aggregation-for-after-watermark.md):
``python -m loadtests.sum_speed [--rows 8000000] [--repeat 3]``.

A batch aggregation, ``local[2]``, of ``--rows`` cached rows over 10,000 keys and windows of
30,000 rows (workload (b)'s shape), with COUNT(*), SUM(n), MAX(n) of an INT ``n`` written four ways:

* ``plain``: ``count(1), sum(n), max(n)``, what the plain Spark job writes (BIGINT ``sum``,
  which fails the query on overflow under ANSI mode);
* ``decimal``: ``count(1), count(n), sum(cast(n as decimal(38,0))), max(n)``, the exact
  sum Tidemark ran before the slices;
* ``slices``: ``count(1), count(n)``, three BIGINT sums of 21- and 22-bit slices of ``n``, and
  ``max(n)``, Tidemark's exact sum of a BIGINT (app/runtime/operators/native_aggregate.py), which an
  INT used before ``int``;
* ``int``: what the native path runs for (b)'s ``COUNT(*), SUM(n), MAX(n)`` of an ``INT NOT
  NULL`` ``n`` now: one count for both calls, ``try_sum(cast(n as bigint))`` and ``max(n)``.

Prints one JSON line per run: seconds to aggregate and write to Spark's ``noop`` sink.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from pyspark.sql import functions as F

    from app.circuit.ir import AggCall, ColumnRef, SqlType
    from app.runtime.operators.native_aggregate import _spark_aggregate
    from app.runtime.session import spark_session

    bigint = SqlType("BIGINT")
    total = AggCall("SUM", (ColumnRef("n", bigint),), False, bigint)
    n = ColumnRef("n", SqlType("INT", nullable=False))
    count_all = AggCall("COUNT", (), False, bigint)
    int_total = AggCall("SUM", (n,), False, bigint)

    spark = spark_session("local[2]", shuffle_partitions=2)
    rows = spark.range(args.rows).select(
        (F.col("id") % 10_000).alias("usr"),
        (F.col("id") / 30_000).cast("long").alias("w"),
        (F.col("id") % 1000).cast("int").alias("n"),
    )
    rows.cache().count()
    variants = {
        "plain": [F.count(F.lit(1)), F.sum("n"), F.max("n")],
        "decimal": [
            F.count(F.lit(1)),
            F.count("n"),
            F.sum(F.expr("cast(n as decimal(38,0))")),
            F.max("n"),
        ],
        # The native path's own aggregates of SUM(n), so this measures what Tidemark runs.
        "slices": [F.count(F.lit(1)), *_spark_aggregate(0, total), F.max("n")],
        "int": [*_spark_aggregate(0, count_all), *_spark_aggregate(1, int_total), F.max("n")],
    }
    for run in range(args.repeat):
        for name, aggregates in variants.items():
            started = time.perf_counter()
            grouped = rows.groupBy("w", "usr").agg(*aggregates)
            grouped.write.format("noop").mode("overwrite").save()
            seconds = round(time.perf_counter() - started, 2)
            print(json.dumps({"run": run, "variant": name, "seconds": seconds}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
