"""One side of a benchmark in its own process (so its JVM and Python workers can be measured
alone): ``python -m loadtests.side SPEC_JSON`` runs Tidemark or the peer over a pre-produced
topic until every event is processed and prints one JSON line: seconds and state figures.
The Spark session starts before the clock does; both sides pay their query start-up.

With ``"once": false`` in the spec (the latency probe, loadtests/latency.py) the side runs
continuously, steps back to back, prints ``READY`` once its query has started, and stops on
SIGTERM (or after ``timeout`` seconds); the result line follows as before."""

from __future__ import annotations

import glob
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from loadtests.workloads import WORKLOADS

ROOT = Path(__file__).resolve().parent.parent


def _state(progress: list[dict[str, Any]]) -> dict[str, int]:
    """Largest state seen: memoryUsedBytes and numRowsTotal of the stateful operators."""
    best = {"bytes": 0, "rows": 0}
    for p in progress:
        ops = p.get("stateOperators") or []
        rows = sum(int(o.get("numRowsTotal", 0)) for o in ops)
        if rows > best["rows"]:
            best = {"bytes": sum(int(o.get("memoryUsedBytes", 0)) for o in ops), "rows": rows}
    return best


def _offsets(value: Any) -> dict[str, int]:
    """A source offset of either side as {partition: offset}: Tidemark's source keeps
    ``{"partitions": {...}, "step": n}``, Spark's Kafka source ``{topic: {partition: n}}``."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        return {}
    inner = value["partitions"] if "partitions" in value else next(iter(value.values()), {})
    return {str(p): int(o) for p, o in inner.items()} if isinstance(inner, dict) else {}


def _read(source: dict[str, Any]) -> int:
    """The records a step's source read: its end offsets past its start offsets."""
    begin, end = _offsets(source.get("startOffset")), _offsets(source.get("endOffset"))
    return sum(max(0, n - begin.get(part, n)) for part, n in end.items())


def program_text(spec: dict[str, Any]) -> str:
    """The workload's program, its input and output topics filled in; with ``"encoding":
    "avro-confluent"`` its tables read and its view writes the Confluent wire format (the
    registry is the ``schema_registry_url`` setting, ``spec["registry"]``)."""
    w = WORKLOADS[spec["workload"]]
    topics = spec.get("topics") or {w.inputs[0]: spec["topic"]}
    text = w.program.format(out=spec["out"], **topics)
    if spec.get("encoding", "avro") == "avro":
        return text
    if spec["encoding"] != "avro-confluent":
        raise ValueError(f"unknown encoding {spec['encoding']}")
    for topic in topics.values():
        table = f"('topic' = '{topic}')"
        assert table in text, table
        text = text.replace(table, f"('topic' = '{topic}', 'format' = 'avro-confluent')")
    view = f"('topic' = '{spec['out']}', 'format' = 'append')"
    assert view in text, view
    return text.replace(
        view, f"('topic' = '{spec['out']}', 'format' = 'append', 'encoding' = 'avro-confluent')"
    )


def _program(spec: dict[str, Any]) -> Path:
    """The workload's program (:func:`program_text`), in the side's work dir."""
    program = Path(spec["work_dir"]) / "program.sql"
    program.write_text(program_text(spec))
    return program


def _steps(progress: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each step's start (epoch ms), duration and events read (over all the query's sources:
    one per input topic), for the steady-state rate.

    Events come from the source offsets, not ``numInputRows``: Spark counts a source's rows once
    per scan, and Tidemark's plan scans its source once per union branch."""
    from datetime import datetime

    seen: dict[tuple[str, int], dict[str, Any]] = {}
    for p in progress:
        start = datetime.fromisoformat(str(p["timestamp"]).replace("Z", "+00:00"))
        sources = p.get("sources") or [{}]
        seen[(str(p.get("runId")), int(p.get("batchId", -1)))] = {
            "start_ms": int(start.timestamp() * 1000),
            "ms": int((p.get("durationMs") or {}).get("triggerExecution", 0)),
            # Where the step's time went, by Spark's phases (addBatch is the sink's jobs;
            # latestOffset, walCommit, commitOffsets and queryPlanning come between them).
            "phases_ms": {k: int(v) for k, v in (p.get("durationMs") or {}).items()},
            # None: the first step of a fresh checkpoint has no start offset (Spark's source).
            "events": (
                sum(_read(source) for source in sources)
                if all(source.get("startOffset") is not None for source in sources)
                else None
            ),
        }
    return sorted(seen.values(), key=lambda s: s["start_ms"])


def _result(seconds: float, progress: list[dict[str, Any]]) -> dict[str, Any]:
    """What a side reports; ``steps`` counts each step once (see :func:`_steps`)."""
    step_log = _steps(progress)
    return {
        "seconds": seconds,
        "state": _state(progress),
        "steps": len(step_log),
        "step_log": step_log,
    }


def _listener(progress: list[dict[str, Any]], announce: bool) -> Any:
    """A listener keeping every progress event; ``announce`` prints ``STEP <input rows>`` per
    step, which the latency probe uses to start its warm-up at the first step with input."""
    from app.observability.listener import ProgressListener

    class Progress(ProgressListener):
        def onQueryStarted(self, event: Any) -> None:
            return None

        def onQueryProgress(self, event: Any) -> None:
            p = json.loads(event.progress.json)
            progress.append(p)
            if announce:
                # One write of the whole line: the service's log lines go to the same stdout
                # from other threads, and print's separate newline let one land in between
                # ("STEP 4" and a log line's timestamp on one line).
                sys.stdout.write(f"STEP {int(p.get('numInputRows', 0))}\n")
                sys.stdout.flush()

        def onQueryIdle(self, event: Any) -> None:
            return None

        def onQueryTerminated(self, event: Any) -> None:
            return None

    return Progress()


def run_tidemark(spec: dict[str, Any]) -> dict[str, Any]:
    from app.cli import with_schema_registry
    from app.config import Settings
    from app.program.compile import compile_program
    from app.runtime.service import Service

    work = Path(spec["work_dir"])
    circuit = compile_program(_program(spec))
    progress: list[dict[str, Any]] = []
    once = spec.get("once", True)
    settings = Settings(
        bootstrap_servers=spec["bootstrap"],
        checkpoint=spec.get("checkpoint") or str(work / "ck"),
        spark_master=spec["master"],
        shuffle_partitions=spec["shuffle_partitions"],
        max_records_per_step=spec["max_records_per_step"],
        trigger_interval=f"{int(spec.get('trigger_ms', 0))}ms",  # 0: Tidemark's default
        spark_log="console",
        schema_registry_url=spec.get("registry"),
    )
    # As `tidemark run` does: registry settings completed, output schemas registered.
    circuit = with_schema_registry(circuit, settings)
    service = Service(circuit, settings)
    service.open_session()  # the JVM's start is not the workload's
    if not once:
        service.install_signal_handlers()
    started = time.monotonic()
    service.start(once=once, listener=_listener(progress, announce=not once))
    if not once:
        print("READY", flush=True)
    service.wait(timeout_seconds=spec.get("timeout", 1800))
    seconds = time.monotonic() - started
    service.shutdown()
    return _result(seconds, progress)


def run_peer(spec: dict[str, Any]) -> dict[str, Any]:
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    from app.program.compile import compile_program
    from app.runtime.session import spark_session

    w = WORKLOADS[spec["workload"]]
    work = Path(spec["work_dir"])
    tables = compile_program(_program(spec)).tables
    spark = spark_session(spec["master"], spec["shuffle_partitions"], app_name="spark-peer")
    once = spec.get("once", True)
    progress: list[dict[str, Any]] = []
    spark.streams.addListener(_listener(progress, announce=not once))
    frames = []
    for table in tables:  # one Kafka source per input topic, as a user joining two would write
        source = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", spec["bootstrap"])
            .option("subscribe", table.topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(spec["max_records_per_step"]))
            .load()
        )
        schema = json.dumps(table.avro_schema)
        frames.append(source.select(from_avro("value", schema).alias("r")).select("r.*"))
    out = w.peer(*frames).select(to_avro(F.struct("*"), w.peer_out_schema).alias("value"))
    writer = (
        out.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", spec["bootstrap"])
        .option("topic", spec["out"])
        .option("checkpointLocation", str(work / "ck"))
        .outputMode("append")
    )
    writer = (
        writer.trigger(availableNow=True)
        if once
        else writer.trigger(processingTime=f"{int(spec.get('trigger_ms', 0))} milliseconds")
    )
    stopping = threading.Event()
    if not once:
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    started = time.monotonic()
    query = writer.start()
    if once:
        query.awaitTermination(spec.get("timeout", 1800))
    else:
        print("READY", flush=True)
        deadline = started + spec.get("timeout", 1800)
        while not stopping.is_set() and query.isActive and time.monotonic() < deadline:
            query.awaitTermination(0.5)
        failure = query.exception()
        if failure is not None:
            raise failure
    if query.isActive:
        query.stop()
    seconds = time.monotonic() - started
    # The listener may lag; recentProgress repeats what it did see (_steps keeps each once).
    progress += [json.loads(p.json) for p in query.recentProgress]
    spark.stop()
    return _result(seconds, progress)


def main() -> None:
    spec = json.loads(sys.argv[1])
    if spec["side"] == "peer":
        # The peer's jars, before any arguments given (an event log, say: --conf ...).
        given = os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
        os.environ["PYSPARK_SUBMIT_ARGS"] = (
            "--jars "
            + ",".join(sorted(glob.glob(str(ROOT / ".cache/spark-peer/*.jar"))))
            + " "
            + given
        )
        result = run_peer(spec)
    else:
        result = run_tidemark(spec)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
