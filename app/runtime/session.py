"""The Spark session factory: one place that decides how Spark runs Tidemark.

Local mode by default (the embedded default of the demo and tests). Python workers must run
the interpreter that has Tidemark installed, so ``PYSPARK_PYTHON`` is pinned to it before the
JVM starts (the default picks the system python, whose missing packages look like a crash of
the Python worker). State lives in RocksDB so it is checkpointed with the offsets.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from app.connectors.kafka_source import KafkaSource

__all__ = ["spark_session"]


def spark_session(
    master: str = "local[2]",
    shuffle_partitions: int = 4,
    app_name: str = "tidemark",
    local_dir: Path | None = None,
) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # The source's `kafka` option carries the client settings, SASL password included:
        # redact it (and anything named like a secret) wherever Spark prints a plan.
        .config("spark.sql.redaction.options.regex", "(?i)url|kafka|password|secret|token")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        # Every step writes Spark's offset log and commit log (and state files) through this.
        # The default (FileContext API) took 35-40 ms per small file on a local disk, this one
        # (FileSystem API, write then rename, atomic on a POSIX file system like the chart's
        # checkpoint volume) 11-22 ms: measured on an idle rate-source query (issue 7). The
        # setting is Spark-internal and the class has moved package before: a Spark upgrade
        # that moves it again stops every query at start with CANNOT_LOAD_CHECKPOINT_FILE_MANAGER.
        .config(
            "spark.sql.streaming.checkpointFileManagerClass",
            "org.apache.spark.sql.execution.streaming.checkpointing."
            "FileSystemBasedCheckpointFileManager",
        )
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20000")
        # Spark's default 64 MB cap on the Arrow batches it sends to Python workers is checked
        # by sizing the batch after every row, which walks the nested `headers` vectors each
        # time: a JVM profile of benchmark (a) showed it as the hottest frame, and lifting the
        # cap (Int.MaxValue skips the check) took the run from 41.7 s to 28.3 s. Batches stay
        # bounded by maxRecordsPerBatch rows.
        .config("spark.sql.execution.arrow.maxBytesPerBatch", str(2**31 - 1))
        .config("spark.python.worker.reuse", "true")
        # Spark talks to its Python workers over loopback TCP by default, and every Python
        # task then lost ~40 ms (the length of Linux's delayed ACK) waiting for its input: a
        # trivial two-task mapInArrow job's tasks took 61 ms, 27 ms over a Unix domain
        # socket, an RDD map's 53 and 13 ms (issue 7, measured with Spark's event log).
        # A step of Tidemark runs two Python stages (the source's read, the writing
        # mapInArrow), so this was ~80 ms of every step; the plain Spark job has none. The
        # sockets are files in the JVM's temporary directory (/tmp: an emptyDir in the chart's
        # pod, whose root file system is read-only). loadtests.worker_socket measures it.
        .config("spark.python.unix.domain.socket.enabled", "true")
        .config("spark.python.daemon.module", "app.runtime.worker_daemon")
        # With no input waiting, Spark asks the source for new offsets again after this long
        # (10 ms by default). Steps run back to back by default (trigger interval 0), and at
        # 10 ms an idle service took 15% of a core asking Kafka for its end offsets; at
        # 100 ms 4% (1% with a 1 s trigger): measured with no input, issue 7. Under load a
        # step always finds input, so it never waits; after a quiet spell the first record
        # waits at most this long.
        .config("spark.sql.streaming.pollingDelay", "100ms")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    )
    if local_dir is not None:
        builder = builder.config("spark.local.dir", str(local_dir))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(KafkaSource)
    return spark
