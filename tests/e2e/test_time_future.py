"""The far-future guard (SPEC S7 ``max_future``) with and without it, through broker and Spark.

Two tables read the same topic, one with ``'max_future' = INTERVAL '1' DAY``, one without:

    step  rows (relative to now)                 unguarded                  guarded
    1     now - 1 min, now + 10 years            both ok; w = +10y - 1 min  far one: dead letter
                                                                            ``future``; w = now-2min
    2     now - 30 s, now                        both late                  both on time

So the one far-future record, without the guard, makes every later row late; with it, it is a
dead letter and does not move the waterline. Both are compared with the reference evaluator.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from app.circuit.reference import StepInput, evaluate
from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

MINUTE = 60_000
YEAR = 365 * 24 * 60 * MINUTE

PROGRAM = """
CREATE TABLE unguarded (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    id  BIGINT NOT NULL
) WITH ('topic' = '{topic}', 'dead_letter' = '{unguarded_dlq}');

CREATE TABLE guarded (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    id  BIGINT NOT NULL
) WITH ('topic' = '{topic}', 'dead_letter' = '{guarded_dlq}',
        'max_future' = INTERVAL '1' DAY);

CREATE VIEW guarded_rows WITH ('topic' = '{guarded_out}', 'format' = 'append') AS
SELECT ts, id FROM guarded;
"""


def test_far_future_record_is_dead_letter_future_only_with_the_guard_s7(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    t = {k: unique_topic(k) for k in ("topic", "unguarded_dlq", "guarded_dlq", "guarded_out")}
    kafka.create_topic(t["topic"], partitions=2)
    program = tmp_path / "future.sql"
    program.write_text(PROGRAM.format(**t))
    circuit = compile_program(program)
    codec = AvroCodec(circuit.table("guarded").avro_schema)
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    reports: list[StepReport] = []
    service = Service(
        circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2), on_step=reports.append
    )
    now = int(time.time() * 1000)
    steps = [
        [{"ts": now - MINUTE, "id": 1}, {"ts": now + 10 * YEAR, "id": 2}],
        [{"ts": now - MINUTE // 2, "id": 3}, {"ts": now, "id": 4}],
    ]
    inputs = []
    for rows in steps:
        for i, row in enumerate(rows):
            producer.produce(t["topic"], value=codec.encode(row), partition=i % 2)
        assert producer.flush(30) == 0
        inputs.append(
            StepInput(rows={"guarded": rows, "unguarded": rows},
                      wall_clock_ms=int(time.time() * 1000))
        )
        service.start(once=True)
        service.wait(timeout_seconds=300)
    expected = evaluate(circuit, inputs)

    def dead(table: str) -> list[tuple[int, str]]:
        return sorted(
            (codec.decode(m.value())["id"],
             dict(m.headers())["tidemark.error.reason"].decode())
            for m in read_topic(kafka.conf(), t[f"{table}_dlq"])
        )

    for table in ("guarded", "unguarded"):
        assert dead(table) == sorted(
            (d.row["id"], d.reason) for e in expected for d in e.dead_letters
            if d.table == table
        ), table
        data_steps = [r for r in reports if r.table == table and r.step is not None]
        assert [r.waterlines["ts"] for r in data_steps] == [
            e.waterlines[table]["ts"] for e in expected
        ], table
    # Without the guard the far-future row is accepted and makes the later rows late ...
    assert dead("unguarded") == [(3, "late"), (4, "late")]
    # ... with it, it is a dead letter 'future', the waterline ignores it, later rows pass.
    assert dead("guarded") == [(2, "future")]
    assert expected[0].waterlines["guarded"]["ts"] == now - 2 * MINUTE
    out = sorted(codec.decode(m.value())["id"]
                 for m in read_topic(kafka.conf(), t["guarded_out"]))
    assert out == [1, 3, 4]
