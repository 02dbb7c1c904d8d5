"""The first end-to-end slice through the real broker and Spark (SPEC S1-S6, S8, L6 append).

A hand-computed multi-step example, one ``--once`` run per step so step boundaries are ours:

    lateness 10 s                     w before   rows (seconds)          late          w after
    step 1                            -inf       100, 105                -             95
    step 2                            95         95, 94, 200, 96         94            190
    step 3                            190        150, 190, 185           150, 185      190

Rows equal to the waterline are on time (95 in step 2, 190 in step 3); the step that moves the
waterline (step 2, to 190) is judged by the old value (96 is on time in step 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

BASE_MS = 1_700_000_000_000
S = 1000

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    sensor  BIGINT NOT NULL,
    value   DOUBLE
) WITH ('topic' = '{topic}', 'dead_letter' = '{dlq}');

CREATE VIEW everything WITH ('topic' = '{out_all}') AS
SELECT ts, sensor, value FROM reading;

CREATE VIEW hot WITH ('topic' = '{out_hot}', 'format' = 'append') AS
SELECT ts, sensor, CAST(value * 10 AS BIGINT) AS tenths FROM reading WHERE value > 50;
"""


def _decode(schema: dict[str, Any], data: bytes) -> dict[str, Any]:
    """TIMESTAMP as epoch ms, as the circuit IR and the reference evaluator see it."""
    return AvroCodec(schema).decode(data)


def test_late_rows_follow_the_waterline_of_the_previous_step_s3_s5_s6(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    names = {k: unique_topic(k) for k in ("in", "dlq", "all", "hot")}
    kafka.create_topic(names["in"], partitions=2)
    program = tmp_path / "readings.sql"
    program.write_text(PROGRAM.format(topic=names["in"], dlq=names["dlq"],
                                      out_all=names["all"], out_hot=names["hot"]))
    circuit = compile_program(program)
    table = circuit.table("reading")
    codec = AvroCodec(table.avro_schema)
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    sent: dict[int, tuple[bytes, bytes]] = {}

    def produce_step(rows: list[tuple[int, int, float]]) -> None:
        for i, (seconds, sensor, value) in enumerate(rows):
            payload = codec.encode({"ts": BASE_MS + seconds * S, "sensor": sensor,
                                    "value": value})
            key = f"k{seconds}".encode()
            sent[seconds] = (key, payload)
            producer.produce(names["in"], key=key, value=payload, partition=i % 2,
                             headers=[("origin", b"test")])
        assert producer.flush(30) == 0

    reports: list[StepReport] = []
    service = Service(circuit, kafka.settings(tmp_path / "checkpoint", shuffle_partitions=2),
                      on_step=reports.append)

    def run_step() -> None:
        service.start(once=True)
        service.wait(timeout_seconds=240)

    produce_step([(100, 1, 10.0), (105, 2, 60.5)])
    run_step()
    produce_step([(95, 3, 70.0), (94, 4, 80.0), (200, 5, 1.0), (96, 6, 99.9)])
    run_step()
    produce_step([(150, 7, 55.0), (190, 8, 51.0), (185, 9, 52.0)])
    run_step()

    # S3: the waterline after each data step, per the table above.
    data_steps = [r for r in reports if r.step is not None]
    assert [r.waterlines["ts"] for r in data_steps] == [
        BASE_MS + 95 * S, BASE_MS + 190 * S, BASE_MS + 190 * S]
    assert [r.dead_letters.get("late", 0) for r in data_steps] == [0, 1, 2]

    # S6: late rows in the dead-letter topic, bytes unchanged, headers complete.
    dead = read_topic(kafka.conf(), names["dlq"])
    assert len(dead) == 3, "each late row exactly once, although two views read the table"
    by_second = {}
    for msg in dead:
        headers = {k: v.decode() for k, v in msg.headers()}
        seconds = (_decode(table.avro_schema, msg.value())["ts"] - BASE_MS) // S
        by_second[seconds] = headers
        assert (msg.key(), msg.value()) == sent[seconds]
        assert headers["origin"] == "test", "the original headers are kept for replay"
        assert headers["tidemark.error.reason"] == "late"
        assert headers["tidemark.table"] == "reading"
        assert headers["tidemark.source.topic"] == names["in"]
        assert headers["tidemark.late.column"] == "ts"
        assert "below the waterline" in headers["tidemark.error.message"]
    assert sorted(by_second) == [94, 150, 185]
    assert by_second[94]["tidemark.late.waterline"] == "2023-11-14T22:14:55.000Z"  # base+95s
    assert by_second[94]["tidemark.late.value"] == "2023-11-14T22:14:54.000Z"
    assert by_second[150]["tidemark.late.waterline"] == "2023-11-14T22:16:30.000Z"  # base+190s
    assert {int(by_second[s]["tidemark.source.partition"]) for s in by_second} <= {0, 1}

    # S8: the on-time rows reach the outputs; append values are the view's rows.
    everything = circuit.view("everything").output
    assert everything is not None
    outputs = read_topic(kafka.conf(), names["all"])
    seen = sorted((_decode(everything.value_schema, m.value())["ts"] - BASE_MS) // S
                  for m in outputs)
    assert seen == [95, 96, 100, 105, 190, 200]
    assert all(m.key() is None for m in outputs)
    hot = circuit.view("hot").output
    assert hot is not None
    hot_rows = sorted(
        (_decode(hot.value_schema, m.value()) for m in read_topic(kafka.conf(), names["hot"])),
        key=lambda r: r["ts"],
    )
    assert [((r["ts"] - BASE_MS) // S, r["sensor"], r["tenths"]) for r in hot_rows] == [
        (95, 3, 700), (96, 6, 999), (105, 2, 605), (190, 8, 510)]
    # S14: every output record carries the view's waterline after its step.
    marks = {dict(m.headers())["tidemark.waterline"].decode() for m in outputs}
    assert marks <= {"2023-11-14T22:14:55.000Z", "2023-11-14T22:16:30.000Z"}
