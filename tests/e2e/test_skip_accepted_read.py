"""The step sink's first job over a re-read batch reads no accepted row of a slice.

A table whose query is its gate rows alone (no Spark state, no view gate) is not cached
between the step's two jobs (ADR 0011): the first (dead letters and probes) asks the source,
through its step order, to leave the accepted rows out, and the source still reads the
whole slice into its slice cache, from which the second job's read comes. This runs the
real source in real Spark tasks against a real broker: with the property a task sees the
dead letters and the probe with the slice's figures; without it, every row, equal to a fresh
decode of the slice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from app.connectors.avro_codec import AvroCodec
from app.connectors.kafka_fetch import read_slice
from app.connectors.kafka_source import KafkaPartitionSlice
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec
from app.runtime.step.slice_cache import SliceCache
from app.runtime.step.source_reader import KafkaStreamReader
from app.runtime.step.step_orders import StepOrder

pytestmark = pytest.mark.e2e

NOW = 1_800_000_000_000
PROGRAM = """
CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND, n BIGINT)
WITH ('topic' = '{topic}');
"""


def test_outside_a_spark_task_the_source_reads_every_row() -> None:
    assert not StepOrder.of_task().skip_accepted


def test_a_job_skipping_accepted_rows_gets_the_rest_and_the_next_job_every_row_from_the_cache(
    kafka: Any, unique_topic: Callable[[str], str], spark: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(unique_topic("in"))
    program = tmp_path / "p.sql"
    program.write_text(PROGRAM.format(topic=topic))
    spec = source_spec(compile_program(program).table("t"), ok_payload=False)
    codec = AvroCodec(spec.avro_schema)
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    for i in range(30):  # the last 5 are late against the slice's waterline
        value = codec.encode({"ts": NOW + i if i < 25 else NOW - 60_000, "n": i})
        producer.produce(topic, value=value, key=str(i).encode(), partition=0)
    producer.produce(topic, value=b"\x00 not avro", partition=0)
    assert producer.flush(30) == 0
    options = {
        "spec": json.dumps(spec.to_json()),
        "kafka": json.dumps(kafka.conf()),
        "state_dir": str(tmp_path / "state"),
    }
    part = KafkaPartitionSlice(0, 0, 31, 1, NOW, {"ts": NOW - 1_000})

    def read(_: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = pa.Table.from_batches(list(KafkaStreamReader(options).read(part)))
        yield pa.RecordBatch.from_pylist([{"rows": json.dumps(rows.to_pylist(), default=str)}])

    def run() -> list[dict[str, Any]]:
        (result,) = spark.range(1, numPartitions=1).mapInArrow(read, "rows string").collect()
        rows: list[dict[str, Any]] = json.loads(result["rows"])
        return rows

    context = spark.sparkContext
    properties = StepOrder(skip_accepted=True).properties()
    for key, value in properties.items():
        context.setLocalProperty(key, value)
    try:
        rest = run()
    finally:
        for key in properties:
            context.setLocalProperty(key, None)
    assert [r["_kind"] for r in rest] == ["late"] * 5 + ["malformed", "probe"]
    assert rest[-1]["_accepted"] == 25
    assert all(r["_value"] is not None for r in rest[:-1])
    cache = SliceCache(options["state_dir"], spec)
    assert len(list(cache.directory.glob("*.arrow"))) == 1

    try:
        every = run()
    finally:
        cache.clear()
    fresh = pa.Table.from_batches(list(read_slice(spec, kafka.conf(), part))).to_pylist()
    assert every == json.loads(json.dumps(fresh, default=str))
    kinds = [r["_kind"] for r in every]
    assert (kinds.count("ok"), kinds.count("late")) == (25, 5)
    assert kinds[-2:] == ["malformed", "probe"]
    # Without a view gate, accepted rows carry no Kafka payload; dead letters keep theirs.
    assert all(r["_value"] is None for r in every if r["_kind"] == "ok")
    assert all(r["_value"] is not None for r in every if r["_kind"] in ("late", "malformed"))
