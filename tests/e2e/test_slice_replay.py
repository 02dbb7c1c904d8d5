"""A replayed step of a slice-views plan writes nothing twice (SPEC S15, ADR 0007).

The source's tasks of such a plan write each slice's dead letters and view records in one
transaction with a step marker. When Spark replays a batch whose records were committed (a
crash after the Kafka commit, before Spark's commit log recorded it: here the commit-log entry
is removed, and the slice cache with it, so the replay reads Kafka again), every task must find
its marker and write nothing, and read_committed consumers see each record once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.slice_cache import SliceCache
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

BASE_MS = 1_700_000_000_000

PROGRAM = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr VARCHAR   NOT NULL,
    n   INT       NOT NULL
) WITH ('topic' = '{topic}');

CREATE VIEW big WITH ('topic' = '{topic}.big', 'format' = 'append') AS
SELECT ts, usr, n FROM clicks WHERE n > 5;
"""


def test_a_replayed_slice_step_writes_nothing_twice_s15(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topic = unique_topic("clicks")
    for name in (topic, f"{topic}.big", f"{topic}.dlq"):
        kafka.create_topic(name, partitions=2)
    circuit = compile_program("p.sql", PROGRAM.format(topic=topic))
    codec = AvroCodec(circuit.tables[0].avro_schema)
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    rows = 400
    for i in range(rows):
        value = codec.encode({"ts": BASE_MS + i * 100, "usr": f"u{i % 7}", "n": i % 10})
        producer.produce(topic, value=value, partition=i % 2)
    producer.produce(topic, value=b"\x02not avro\xff", partition=0)  # a dead letter
    assert producer.flush(60) == 0

    checkpoint = tmp_path / "ck"
    reports: list[StepReport] = []
    service = Service(circuit, kafka.settings(checkpoint), on_step=reports.append)
    service.start(once=True)
    service.wait(timeout_seconds=300)
    first = [r for r in reports if r.step is not None]
    assert first and first[-1].outputs == {"big": rows * 4 // 10}
    assert first[-1].replayed_tasks == 0

    # The crash: Spark has no record of committing the last batch, and no slice is cached.
    commits = checkpoint / "clicks" / "spark" / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    SliceCache(str(checkpoint / "clicks" / "tidemark")).clear()

    reports.clear()
    service = Service(circuit, kafka.settings(checkpoint), on_step=reports.append)
    service.start(once=True)
    service.wait(timeout_seconds=300)
    replayed = [r for r in reports if r.batch_id == last]
    assert replayed, [r.batch_id for r in reports]
    assert replayed[0].replayed_tasks == 2  # one per slice: both found their step markers
    assert replayed[0].outputs == {"big": rows * 4 // 10}  # the counts the markers kept

    assert len(read_topic(kafka.conf(), f"{topic}.big")) == rows * 4 // 10
    dead = read_topic(kafka.conf(), f"{topic}.dlq")
    assert [dict(m.headers())["tidemark.error.reason"] for m in dead] == [b"malformed"]
