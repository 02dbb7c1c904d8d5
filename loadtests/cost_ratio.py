"""The cost of Tidemark's design against plain Spark, one quick side-by-side run
(docs/differential.md, "The cost of the design").

Both sides read the same topic the same way (the ``tidemark-kafka`` source: confluent-kafka +
fastavro + the late gate) on the same machine, one after the other, with the same Spark
settings (``app.runtime.session.spark_session``):

- **tidemark**: ``Service`` running a program with one view
  ``TUMBLE 1 minute, COUNT(*)/SUM(n)/MAX(n) per usr, EMIT AFTER WATERMARK`` (append), i.e.
  the late split, the one ``applyInPandasWithState`` operator with compact accumulators in
  RocksDB, Avro encoding and the Kafka sink;
- **plain**: ``withWatermark(ts) + groupBy(window(ts, 1 minute), usr).agg(count, sum, max)``
  in append mode over the accepted rows of the same source, written to Spark's ``noop`` sink
  (so plain Spark pays neither the encoding nor the Kafka writes: the ratio is an upper bound
  of the design's cost).

events/s = input records / wall seconds from the query start to the last step (both sides
read everything in one ``--once``-style run, ``max_records_per_step`` apart).

    .venv/bin/python loadtests/cost_ratio.py --events 400000

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the local broker (scripts/fetch-kafka.sh).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, Python puts loadtests/ first on sys.path, where other load tests' modules
# (profile.py) shadow the standard library: put the project root there instead.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(ROOT)
else:
    sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.connectors.avro_codec import AvroCodec  # noqa: E402
from app.connectors.kafka_offsets import topic_end_offsets  # noqa: E402
from app.program.compile import compile_program  # noqa: E402
from app.runtime.operators.source import source_spec  # noqa: E402
from app.runtime.service import Service  # noqa: E402
from app.runtime.session import spark_session  # noqa: E402
from app.runtime.step.source_reader import KafkaSource  # noqa: E402
from app.runtime.step.step_sink import StepReport  # noqa: E402
from loadtests.bench import broker as local_or_given_broker  # noqa: E402

BASE_MS = 1_700_000_040_000

PROGRAM = """
CREATE TABLE clicks (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr  BIGINT NOT NULL,
    n    BIGINT NOT NULL
) WITH ('topic' = '{topic}');

CREATE VIEW per_user WITH ('topic' = '{out}', 'format' = 'append') AS
SELECT window_start, window_end, usr, COUNT(*) AS c, SUM(n) AS s, MAX(n) AS m
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr
EMIT AFTER WATERMARK;
"""


def produce(conf: dict[str, str], topic: str, events: int, users: int, seed: int) -> None:
    """``events`` clicks, 200/s of event time, out of order by up to 5 s (none late)."""
    from confluent_kafka import Producer

    codec = AvroCodec(
        {
            "type": "record",
            "name": "clicks",
            "fields": [
                {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                {"name": "usr", "type": "long"},
                {"name": "n", "type": "long"},
            ],
        }
    )
    rng = random.Random(seed)
    producer = Producer({**conf, "linger.ms": 20, "batch.num.messages": 10000, "log_level": 3})
    for i in range(events):
        ts = BASE_MS + i * 5 - rng.randint(0, 5000)
        value = codec.encode({"ts": ts, "usr": rng.randrange(users), "n": rng.randint(0, 100)})
        while True:
            try:
                producer.produce(topic, value=value, partition=i % 2)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def wait_done(query: Any, target: dict[int, int], timeout: float = 1800) -> None:
    """Until the query committed ``target`` and is idle (like ``Service``'s ``--once``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        progress = query.lastProgress
        if progress and not query.status.get("isTriggerActive"):
            end = progress["sources"][0].get("endOffset")
            done = json.loads(end) if isinstance(end, str) else (end or {})
            reached = {int(p): int(o) for p, o in done.get("partitions", {}).items()}
            if all(reached.get(p, 0) >= o for p, o in target.items()):
                # and the no-data step that writes the windows the last step closed has run
                time.sleep(1.0)
                if query.lastProgress == progress and not query.status.get("isTriggerActive"):
                    return
        if query.exception() is not None:
            raise query.exception()
        time.sleep(0.2)
    raise TimeoutError("the plain Spark query did not finish")


def run_tidemark(
    conf: dict[str, str], topics: dict[str, str], work: Path, max_records: int
) -> tuple[float, int]:
    program = work / "cost.sql"
    program.write_text(PROGRAM.format(topic=topics["in"], out=topics["out"]))
    circuit = compile_program(program)
    reports: list[StepReport] = []
    settings = Settings(bootstrap_servers=conf["bootstrap.servers"],
                        checkpoint=work / "ck-tidemark", shuffle_partitions=2,
                        max_records_per_step=max_records, spark_log="console")
    service = Service(circuit, settings, on_step=reports.append)
    started = time.monotonic()
    service.start(once=True)
    service.wait(timeout_seconds=1800)
    return time.monotonic() - started, sum(r.outputs.get("per_user", 0) for r in reports)


def run_plain(
    conf: dict[str, str], topics: dict[str, str], work: Path, max_records: int
) -> tuple[float, int]:
    from pyspark.sql import functions as F

    program = work / "cost.sql"
    circuit = compile_program(program)
    table = circuit.table("clicks")
    spark = spark_session("local[2]", shuffle_partitions=2)
    target = topic_end_offsets(conf, table.topic)
    started = time.monotonic()
    rows = (
        spark.readStream.format(KafkaSource.name())
        .option("spec", json.dumps(source_spec(table).to_json()))
        .option("kafka", json.dumps(conf))
        .option("state_dir", str(work / "ck-plain" / "tidemark"))
        .option("max_records_per_step", str(max_records))
        .option("stop_at", json.dumps({str(p): o for p, o in target.items()}))
        .load()
        .filter(F.col("_kind") == "ok")
        .select("ts", "usr", "n")
    )
    counts = (
        rows.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "1 minute"), "usr")
        .agg(F.count("*").alias("c"), F.sum("n").alias("s"), F.max("n").alias("m"))
    )
    query = (
        counts.writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", str(work / "ck-plain" / "spark"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    wait_done(query, target)
    seconds = time.monotonic() - started - 1.0  # the idle check of wait_done
    rows = sum(int(p["sink"].get("numOutputRows", 0)) for p in query.recentProgress)
    query.stop()
    return seconds, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--max-records-per-step", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    bootstrap, broker = local_or_given_broker()
    conf = {"bootstrap.servers": bootstrap}
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        tag = f"cost.{int(time.time())}"
        topics = {"in": f"{tag}.in", "out": f"{tag}.out"}
        admin = AdminClient({**conf, "log_level": 3})  # kept alive until the result is in
        admin.create_topics([NewTopic(topics["in"], 2, 1)])[topics["in"]].result(30)
        produce(conf, topics["in"], args.events, args.users, args.seed)
        work = Path(tempfile.mkdtemp(prefix="tidemark-cost-"))
        tidemark, tidemark_rows = run_tidemark(conf, topics, work, args.max_records_per_step)
        plain, plain_rows = run_plain(conf, topics, work, args.max_records_per_step)
        result = {
            "events": args.events,
            "users": args.users,
            "max_records_per_step": args.max_records_per_step,
            "tidemark_seconds": round(tidemark, 1),
            "plain_seconds": round(plain, 1),
            "tidemark_window_rows": tidemark_rows,
            "plain_window_rows": plain_rows,
            "tidemark_events_per_s": round(args.events / tidemark),
            "plain_events_per_s": round(args.events / plain),
            "tidemark_cost_ratio": round(tidemark / plain, 2),  # >1: Tidemark is slower
        }
        print(json.dumps(result, indent=2))
    finally:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()  # before the broker it reads goes away
        if broker is not None:
            broker.cleanup()


if __name__ == "__main__":
    main()
