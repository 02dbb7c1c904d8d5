"""What a Tidemark service with nothing to do costs: ``python -m loadtests.idle_cpu
[--workload b] [--trigger-ms 0 1000] [--seconds 30]`` (the trigger interval's default,
docs/adr/0003-aggregates-in-one-pandas-state-operator.md).

With the trigger interval 0 (steps back to back, the default) Spark asks the source for new
offsets whenever a step finds no input, after ``spark.sql.streaming.pollingDelay``
(app/runtime/session.py). This runs the workload's program as a continuous service
(loadtests/side.py) on an empty topic, once per trigger interval given, and reports the CPU
its process tree (driver, JVM, Python workers; not the broker) used per second over the
measured period, after a warm-up of the same length. One JSON line per interval.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from loadtests.bench import TreeCpu, broker, create_topic
from loadtests.latency import _Side, continuous_spec
from loadtests.workloads import ONE_INPUT


def measure(bootstrap: str, workload: str, trigger_ms: int, seconds: float) -> dict[str, Any]:
    topic = f"idle.{workload}.{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 2)
    create_topic(bootstrap, topic + ".out", 2)
    work = Path(tempfile.mkdtemp(prefix="idle-"))
    spec = continuous_spec(
        "tidemark", workload, bootstrap, (topic, topic + ".out"), "local[2]", work, trigger_ms,
        600 + 2 * seconds,
    )
    side = _Side(spec, work / "side.log")
    try:
        side.wait_for(side.ready, "did not start", 900)
        cpu = TreeCpu(side.proc.pid)
        time.sleep(seconds)  # warm-up: the first steps, the Python workers starting
        before, started = cpu.total(), time.monotonic()
        time.sleep(seconds)
        used = cpu.stop() - before
        elapsed = time.monotonic() - started
    except BaseException:
        side.proc.kill()
        raise
    side.stop()  # SIGTERM; raises if the service did not end cleanly
    return {
        "workload": workload,
        "trigger_ms": trigger_ms,
        "seconds": round(elapsed, 1),
        "cpu_share_of_a_core": round(used / elapsed, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=ONE_INPUT, default="b")
    parser.add_argument("--trigger-ms", type=int, nargs="+", default=[0, 1000])
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    bootstrap, local = broker()
    try:
        for trigger_ms in args.trigger_ms:
            print(json.dumps(measure(bootstrap, args.workload, trigger_ms, args.seconds)),
                  flush=True)
    finally:
        if local is not None:
            local.cleanup()


if __name__ == "__main__":
    main()
