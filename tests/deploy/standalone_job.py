"""A windowed streaming aggregation run by test_spark_standalone.py under a given Spark master.

Run as ``python standalone_job.py MASTER INPUT_DIR CHECKPOINT_DIR``; prints one JSON object:
the finished windows (sorted) and the process ids that did the work. It is a script, not a
test module, so the Spark session lives in its own process and never leaks into pytest.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812


def _jvm_of_this_worker(_: object) -> int:
    """Pid of the JVM that started this Python worker (its nearest ``java`` ancestor): an
    executor's JVM on a cluster, the driver's JVM in local mode. Linux /proc only."""
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            program = cmdline.read().split(b"\0")[0]
        if program.endswith(b"/java") or program == b"java":
            return pid
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no java ancestor")


def _driver_jvm(spark: SparkSession) -> int:
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    assert jvm is not None
    return int(jvm.java.lang.ProcessHandle.current().pid())


def main() -> None:
    master, input_dir, checkpoint = sys.argv[1:4]
    spark = (
        SparkSession.builder.master(master)
        .appName("tidemark-standalone-check")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "512m")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rows = (
        spark.readStream.schema("ts TIMESTAMP, card BIGINT, amount DOUBLE")
        .option("maxFilesPerTrigger", 1)
        .json(input_dir)
    )
    # TUMBLE(ts, 1 minute) with LATENESS 30 s (SPEC S9, S3), emitted once per window (S12).
    windows = (
        rows.withWatermark("ts", "30 seconds")
        .groupBy(F.window("ts", "1 minute"), "card")
        .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
        .select(
            F.date_format("window.start", "HH:mm:ss").alias("start"), "card", "n", "total"
        )
    )
    query = (
        windows.writeStream.outputMode("append").format("memory").queryName("windows")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    result = sorted(
        (r["start"], r["card"], r["n"], r["total"]) for r in spark.table("windows").collect()
    )
    jvms = spark.sparkContext.parallelize(range(8), 8).map(_jvm_of_this_worker).collect()
    block_managers = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()  # noqa: SLF001
    print(json.dumps({
        "windows": result,
        "driver_jvm": _driver_jvm(spark),
        "worker_jvms": sorted(set(jvms)),
        "block_managers": int(block_managers),
    }))
    spark.stop()


if __name__ == "__main__":
    main()
