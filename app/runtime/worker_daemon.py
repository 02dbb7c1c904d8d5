"""Spark's Python worker daemon, with Tidemark's executor-side modules imported before it forks.

Spark starts one daemon per executor and forks a Python worker from it for each concurrent
task (``spark.python.daemon.module``, set by :mod:`app.runtime.session`). pyspark's own daemon
has only pyspark imported, so every new worker paid ~0.45 s of CPU importing pyarrow, numpy,
pandas, confluent-kafka, fastavro and the source, sink and operator modules before its first
row (the first step of a run forks several). Imported here, the forks inherit them.
The daemon itself is pyspark's, unchanged; it imports the worker module (``pyspark.worker``)
in each fork, so that is imported here too.

Everything imported is frozen out of the garbage collector (``gc.freeze``) before the daemon
forks: pyspark's worker calls ``gc.collect()`` after every task, and each call walked the
~83,000 objects every fork inherits, about 45 ms of CPU a task, twice a step per worker
(measured in Spark's workers during a run of benchmark (b); 0.1 ms frozen, the tasks' own
work no slower: ``loadtests.worker_gc``, docs/performance.md). The frozen objects
live as long as the daemon anyway; freezing them also spares the forks' copy-on-write of the
pages they sit on.
"""

from __future__ import annotations

import pyspark.worker  # noqa: F401 - imported for the forks
from pyspark.daemon import manager

import app.connectors.sink  # noqa: F401 - imported for the forks
import app.runtime.operators.aggregate  # noqa: F401
import app.runtime.operators.arrow_views  # noqa: F401
import app.runtime.operators.native_aggregate  # noqa: F401
import app.runtime.operators.view_gate  # noqa: F401
import app.runtime.step.encode  # noqa: F401
import app.runtime.step.query_writes  # noqa: F401
import app.runtime.step.slice_writers  # noqa: F401
import app.runtime.step.source_reader  # noqa: F401

if __name__ == "__main__":
    import gc

    gc.freeze()
    manager()
