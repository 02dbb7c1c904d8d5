"""Processing time on Spark, through the real broker, with real time (seed 004; S11-S13, S15).

Processing time is the step's recorded batch time (Spark's batch timestamp in its offset log):
a ``pt AS PROCTIME()`` column is the batch time of the step its row arrives in, NOW() the batch
time of the step that evaluates it, and a TUMBLE window on ``pt`` is complete in the first step
whose batch time reaches its end, which Spark runs without input (by the clock).

TUMBLE 10 s on ``pt``, trigger interval 1 s, the service running continuously. Input: a warm-up
row (Spark's first step is slow), then three rows in one record batch; then no input until a
step's batch time has passed the end of the second row batch's window. Every record of every
view is compared with the reference evaluator fed the steps Spark ran (rows by offset range,
batch times from the offset log), and the clock's part is checked by hand: the window's final
row is written in a step without input whose batch time (its ``ptime``) is at or after the
window's end, and the step before it is before the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_offset_log import Batch, spark_batches

from app.circuit.ir import Circuit
from app.circuit.reference import Reference, StepInput, StepResult
from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service

pytestmark = pytest.mark.e2e

S = 1000
SIZE_S = 10

PROGRAM = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,
    usr VARCHAR NOT NULL,
    pt  AS PROCTIME()
) WITH ('topic' = '{topic}');

CREATE VIEW stamped WITH ('topic' = '{stamped}') AS
SELECT usr, ts, pt, NOW() AS seen_at, CURRENT_TIMESTAMP AS c FROM clicks;

CREATE VIEW logged WITH ('topic' = '{logged}', 'format' = 'changelog') AS
SELECT usr, NOW() AS seen_at FROM clicks WHERE ts <= NOW();

CREATE LOCAL VIEW gated AS SELECT usr, ts, NOW() AS seen_at FROM clicks;
LATENESS gated.ts INTERVAL '5' SECOND;
CREATE VIEW gated_out WITH ('topic' = '{gated_out}') AS SELECT usr, seen_at FROM gated;

CREATE VIEW per_window WITH ('topic' = '{per_window}') AS
SELECT window_start, window_end, COUNT(*) AS clicks
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(pt), INTERVAL '{size}' SECOND))
GROUP BY window_start, window_end
EMIT STREAM AFTER WATERMARK;

CREATE VIEW per_user WITH ('topic' = '{per_user}') AS
SELECT usr, window_start, window_end, COUNT(*) AS clicks
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(pt), INTERVAL '{size}' SECOND))
GROUP BY usr, window_start, window_end;
"""
VIEWS = ("stamped", "logged", "gated_out", "per_window", "per_user")


class Run:
    """The service running; input produced with its (partition, offset) recorded."""

    def __init__(self, kafka: Any, tmp_path: Path, topics: dict[str, str]) -> None:
        program = tmp_path / "clicks.sql"
        program.write_text(PROGRAM.format(size=SIZE_S, **topics))
        self.circuit: Circuit = compile_program(program)
        self.codec = AvroCodec(self.circuit.table("clicks").avro_schema)
        self.topics = topics
        self.kafka_conf = kafka.conf()
        from confluent_kafka import Producer

        self.producer = Producer({**kafka.conf(), "log_level": 3})
        self.placed: list[tuple[int, int, dict[str, Any]]] = []
        self.checkpoint = tmp_path / "ck"
        self.service = Service(
            self.circuit,
            kafka.settings(self.checkpoint, shuffle_partitions=2, trigger_interval="1000ms"),
        )

    def produce(self, rows: list[tuple[int, str]]) -> None:
        """Rows (event time ms, user) to partition 0, in order, as one record batch."""
        for ts, usr in rows:
            row = {"ts": ts, "usr": usr}

            def delivered(err: Any, msg: Any, row: dict[str, Any] = row) -> None:
                assert err is None, err
                self.placed.append((msg.partition(), msg.offset(), row))

            self.producer.produce(
                self.topics["topic"], value=self.codec.encode(row), partition=0,
                on_delivery=delivered,
            )
        assert self.producer.flush(30) == 0

    def batches(self) -> list[Batch]:
        return spark_batches(self.checkpoint / "clicks" / "spark", written=set())

    def wait(self, what: str, condition: Callable[[], bool], seconds: float = 240) -> None:
        deadline = time.monotonic() + seconds
        while not condition():
            for query in self.service.queries:
                if query.exception() is not None:
                    raise AssertionError(f"query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; batches {self.batches()}")
            time.sleep(0.2)

    def read_all(self) -> int:
        """The first committed step whose end offsets include every record produced so far."""
        wanted: dict[int, int] = {}
        for p, o, _ in self.placed:
            wanted[p] = max(wanted.get(p, 0), o + 1)
        for batch in self.batches():
            if all(batch.ends.get(p, 0) >= o for p, o in wanted.items()):
                return batch.batch_id
        return -1

    def records(self, view: str) -> list[tuple[Any, Any]]:
        out = self.circuit.view(view).output
        assert out is not None
        key_codec = AvroCodec(out.key_schema) if out.key_schema else None
        value_codec = AvroCodec(out.value_schema)
        found = []
        for msg in read_topic(self.kafka_conf, self.topics[view]):
            key = key_codec.decode(msg.key()) if key_codec and msg.key() is not None else None
            value = value_codec.decode(msg.value()) if msg.value() is not None else None
            found.append((key, value))
        return found


def _reference(run: Run, batches: list[Batch]) -> list[StepResult]:
    """The oracle fed Spark's steps: each step's rows (by offset range) and batch time."""
    reference = Reference(run.circuit)
    results = []
    previous: dict[int, int] = {}
    for batch in batches:
        rows = sorted(
            (p, o, row)
            for p, o, row in run.placed
            if previous.get(p, 0) <= o < batch.ends.get(p, 0)
        )
        results.append(
            reference.step(
                StepInput(rows={"clicks": [r for _, _, r in rows]}, batch_time_ms=batch.time_ms)
            )
        )
        previous = batch.ends
    return results


def _window_end(ms: int) -> int:
    return (ms // (SIZE_S * S) + 1) * SIZE_S * S


def test_proctime_and_now_are_sparks_batch_time_and_windows_close_by_the_clock_s11_s13(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {"topic": unique_topic("in"), **{v: unique_topic(v) for v in VIEWS}}
    kafka.create_topic(topics["topic"], partitions=1)
    run = Run(kafka, tmp_path, topics)
    run.service.start()
    try:
        now_ms = int(time.time() * 1000)
        run.produce([(now_ms, "w")])
        run.wait("warm-up read", lambda: run.read_all() >= 0)
        now_ms = int(time.time() * 1000)
        run.produce([(now_ms - 2 * S, "a"), (now_ms - S, "b"), (now_ms, "a")])
        warm = run.read_all()
        run.wait("rows read", lambda: run.read_all() > warm)
        read = run.read_all()
        t_read = next(b.time_ms for b in run.batches() if b.batch_id == read)
        end = _window_end(t_read)
        # No more input: the window of the rows' step must close by the clock alone.
        run.wait(
            "a step past the window's end",
            lambda: any(b.time_ms >= end + 2 * S for b in run.batches()),
            seconds=120,
        )
        run.wait(
            "the window's final row",
            lambda: any(v and v["window_end"] == end for _, v in run.records("per_window")),
            seconds=60,
        )
    finally:
        run.service.stop()
    batches = run.batches()
    results = _reference(run, batches)

    # Every record of every view equals the oracle's fed Spark's steps: pt and NOW() are the
    # batch time of each row's step, the windows those batch times put the rows in.
    for view in VIEWS:
        want = [
            (None if r.key is None else dict(r.key), None if r.value is None else dict(r.value))
            for result in results
            for r in result.outputs[view]
        ]
        got = run.records(view)
        if view == "per_user":  # upsert: per key, the values in order
            assert sorted(map(repr, got)) == sorted(map(repr, want)), (view, got, want)
        else:
            assert got == want, (view, got, want)

    by_time = {b.time_ms: b for b in batches}
    stamped = [v for _, v in run.records("stamped")]
    assert [v["usr"] for v in stamped] == ["w", "a", "b", "a"]
    for value in stamped:
        assert value["pt"] == value["seen_at"] == value["c"]
        assert value["pt"] in by_time  # a batch time of Spark's offset log
    assert {v["pt"] for v in stamped[1:]} == {t_read}
    # changelog: NOW() is the ptime Spark writes for the same step.
    for _, value in run.records("logged"):
        assert value["seen_at"] == value["ptime"]

    # By the clock: the window of the rows' step is written once, final, in the first step
    # whose batch time reaches its end; no input came in that step.
    finals = [v for _, v in run.records("per_window") if v["window_end"] == end]
    assert len(finals) == 1
    final = finals[0]
    assert final["clicks"] == sum(1 for v in stamped if end - SIZE_S * S <= v["pt"] < end)
    assert final["clicks"] >= 3 and not final["undo"]
    written = by_time[final["ptime"]]
    assert written.time_ms >= end
    before = [b for b in batches if b.batch_id < written.batch_id]
    assert before and before[-1].time_ms < end
    assert written.ends == before[-1].ends, "the closing step read no input"
