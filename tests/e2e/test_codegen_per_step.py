"""A stateless pipeline compiles no new Java classes once warm (ADR 0005).

Spark writes ``current_timestamp()`` into its generated code as a literal, so a plan holding it
compiles new classes every step, and the JVM runs them interpreted until its JIT compiles
them again (measured on benchmark (a): two compiles per step, the JIT busy with 0.4-0.8 of the
two cores). Only changelog views write the batch time (``ptime``), so only they may hold it.
The count is Spark's own (``CodegenMetrics``, one per compiled class), read from the shared
session's JVM around later steps of a service reading the real broker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.connectors.avro_codec import AvroCodec
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

BASE_MS = 1_700_000_000_000
ROWS_PER_STEP = 500

PROGRAM = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr VARCHAR   NOT NULL,
    n   INT       NOT NULL
) WITH ('topic' = '{topic}');

CREATE VIEW big WITH ('topic' = '{topic}.big', 'format' = 'append') AS
SELECT ts, usr, n FROM clicks WHERE n > 5;

CREATE LOCAL VIEW small AS SELECT usr, ts, n FROM clicks WHERE n <= 5;

CREATE VIEW small_users WITH ('topic' = '{topic}.small', 'format' = 'append') AS
SELECT usr, n FROM small WHERE n > 1;
"""


def _compiles(spark: Any) -> int:
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def test_a_warm_stateless_step_compiles_nothing(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topic = unique_topic("clicks")
    for name in (topic, f"{topic}.big", f"{topic}.small"):
        kafka.create_topic(name, partitions=2)
    circuit = compile_program("p.sql", PROGRAM.format(topic=topic))
    codec = AvroCodec(circuit.tables[0].avro_schema)
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    reports: list[StepReport] = []
    service = Service(
        circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2), on_step=reports.append
    )
    compiled = []
    for step in range(4):
        for i in range(ROWS_PER_STEP):
            ident = step * ROWS_PER_STEP + i
            # Every 50th row 20 s behind: late rows (dead letters) in every step but the first.
            ts = BASE_MS + ident * 100 - (20_000 if i % 50 == 49 else 0)
            value = codec.encode({"ts": ts, "usr": f"u{ident % 7}", "n": ident % 10})
            producer.produce(topic, value=value, partition=i % 2)
        assert producer.flush(60) == 0
        before = _compiles(spark)
        service.start(once=True)
        service.wait(timeout_seconds=300)
        compiled.append(_compiles(spark) - before)
    written = [r for r in reports if r.step is not None]
    assert sum(r.outputs.get("big", 0) + r.outputs.get("small_users", 0) for r in written) > 0
    assert sum(r.dead_letters.get("late", 0) for r in written) > 0
    # The first steps compile the plans (and the second sees its first dead letters); after
    # that every step runs the same generated classes.
    assert compiled[2:] == [0, 0], compiled
