"""Crash safety and exactly-once output (SPEC S15), and a broker restart, over a real broker.

``tidemark run`` runs as a subprocess (its own process group, like a pod) and is killed with
SIGKILL at several points: right after a step's sink committed its Kafka transaction (before
Spark's commit log records the batch, so the restart replays it), and at random moments during
a step. Once, the broker itself is stopped and restarted on the same data and ports. After the
last restart runs to the end of the input, everything a read_committed consumer reads -- the
outputs of a stateless and a windowed view, and the dead letters -- must equal the reference
evaluator's output for the same input: no loss, no duplicate. Waterlines never go back.

The test uses its own broker (the shared one cannot be restarted). Both variants (three kills,
six kills) are ``slow``: CI kills at the fault points instead (tests/e2e/test_kill_loop.py).
Figures are printed (``-s``) for docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.circuit.reference import StepInput, evaluate
from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.local_kafka import LocalKafka
from app.program.compile import compile_program

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
BASE_MS = 1_700_000_000_000

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND,
    sensor  BIGINT NOT NULL,
    value   DOUBLE
) WITH ('topic' = 'crash.in', 'dead_letter' = 'crash.dlq');

CREATE VIEW everything WITH ('topic' = 'crash.all', 'format' = 'append') AS
SELECT ts, sensor, value FROM reading;

CREATE VIEW per_window WITH ('topic' = 'crash.windows', 'format' = 'append') AS
SELECT window_start, window_end, COUNT(*) AS n, SUM(sensor) AS total
FROM TABLE(TUMBLE(TABLE reading, DESCRIPTOR(ts), INTERVAL '5' SECOND))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;
"""


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalKafka]:
    subprocess.run(["bash", str(ROOT / "scripts" / "fetch-kafka.sh")], check=True)
    broker = LocalKafka(workdir=tmp_path / "kafka").start()
    try:
        yield broker
    finally:
        broker.cleanup()


class Run:
    """One ``tidemark run`` process; its JSON log lines arrive on a queue."""

    def __init__(self, program: Path, broker: LocalKafka, checkpoint: Path) -> None:
        env = {**os.environ, "TIDEMARK_LOG_FORMAT": "json", "TIDEMARK_TRIGGER_INTERVAL": "500ms"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "run", str(program), "--bootstrap-servers",
             broker.bootstrap_servers, "--checkpoint", str(checkpoint), "--metrics-port", "0",
             "--max-records-per-step", "70"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            text = line.decode(errors="replace").rstrip()
            if "rror" in text or "xception" in text or not text.startswith(("{", " ", "+", ":")):
                self.lines = [*self.lines[-80:], text[:600]]
            try:
                self.events.put(json.loads(line))
            except ValueError:
                continue

    def next_event(self, name: str, timeout: float = 240) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None and self.events.empty():
                tail = "\n".join(self.lines[-40:])
                raise AssertionError(
                    f"tidemark run exited with {self.process.returncode}; its log ends:\n{tail}"
                )
            try:
                event = self.events.get(timeout=0.5)
            except queue.Empty:
                continue
            if event.get("event") == "step":
                STEPS.append(event)
            if event.get("event") == name:
                return event
        raise AssertionError(f"no {name} event within {timeout} s")

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def drain(self) -> None:
        while not self.events.empty():
            event = self.events.get()
            if event.get("event") == "step":
                STEPS.append(event)


STEPS: list[dict[str, Any]] = []


def _crash_run(tmp_path: Path, broker: LocalKafka, kills: int, rows: int) -> None:
    STEPS.clear()
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf)
    admin.create_topics([NewTopic("crash.in", 2, 1)])["crash.in"].result(30)
    program = tmp_path / "crash.sql"
    program.write_text(PROGRAM)
    circuit = compile_program(program)
    codec = AvroCodec(circuit.table("reading").avro_schema)
    rng = random.Random(6)
    from confluent_kafka import Producer

    producer = Producer({**conf, "log_level": 3})
    inputs: list[dict[str, Any]] = []
    garbage: list[bytes] = []
    for i in range(rows):
        row = {"ts": BASE_MS + i * 200 + rng.randrange(150), "sensor": i,
               "value": round(rng.random() * 100, 2)}
        inputs.append(row)
        # Per-partition time order with a 2 s lateness: no row is late whatever the steps.
        producer.produce("crash.in", key=str(i).encode(), value=codec.encode(row),
                         partition=(i // 10) % 2)
        if i % 97 == 0:
            garbage.append(f"garbage-{i}".encode())
            producer.produce("crash.in", key=garbage[-1], value=b"\xff" + garbage[-1],
                             partition=i % 2)
    closing = {"ts": BASE_MS + rows * 200 + 60_000, "sensor": -1, "value": None}
    inputs.append(closing)  # moves both partitions' data past every window
    producer.produce("crash.in", value=codec.encode(closing), partition=0)
    assert producer.flush(30) == 0

    oracle = evaluate(circuit, [StepInput(rows={"reading": inputs})])[0]
    expected = {
        view: Counter(json.dumps(r.value, sort_keys=True, default=str)
                      for r in oracle.outputs[view])
        for view in ("everything", "per_window")
    }
    checkpoint = tmp_path / "checkpoint"
    started = time.monotonic()
    after_sink = during_step = 0
    broker_restarts = 0
    for k in range(kills):
        run = Run(program, broker, checkpoint)
        run.next_event("query.started")
        if k % 2 == 0:
            # Right after a step's transaction committed: before Spark's commit log.
            run.next_event("step")
            run.kill()
            after_sink += 1
        else:
            time.sleep(rng.uniform(0.5, 4.0))  # somewhere inside a step
            run.kill()
            during_step += 1
        run.drain()
    run = Run(program, broker, checkpoint)
    run.next_event("step")
    broker.restart(down_seconds=3)  # a broker fault: the run must ride it out by itself
    broker_restarts += 1
    outputs: dict[str, Counter[str]] = {}
    dead: list[Any] = []
    deadline = time.monotonic() + 420
    while time.monotonic() < deadline:
        try:
            run.next_event("step", timeout=5)
        except AssertionError as exc:
            if "exited" in str(exc):
                raise
        outputs = {view: _read_view(conf, circuit, view) for view in expected}
        dead = read_topic(conf, "crash.dlq")
        if sum(outputs["per_window"].values()) >= sum(expected["per_window"].values()) and (
            sum(outputs["everything"].values()) >= sum(expected["everything"].values())
        ):
            break
    time.sleep(3)  # anything still in flight would show up as a duplicate now
    run.process.send_signal(signal.SIGTERM)
    run.process.wait(120)
    run.drain()
    outputs = {view: _read_view(conf, circuit, view) for view in expected}
    dead = read_topic(conf, "crash.dlq")
    seconds = time.monotonic() - started

    for view in expected:
        missing = expected[view] - outputs[view]
        duplicated = outputs[view] - expected[view]
        assert not missing and not duplicated, (view, list(missing)[:3], list(duplicated)[:3])
    assert sorted(m.key() for m in dead) == sorted(garbage), "each dead letter exactly once"
    marks = [s["waterlines"]["ts"] for s in STEPS if s.get("waterlines", {}).get("ts")]
    assert marks == sorted(marks), "waterlines never go back"
    replayed = sum(int(s.get("replayed_tasks", 0)) for s in STEPS)
    checked = sum(expected["everything"].values()) + sum(expected["per_window"].values())
    print(json.dumps({
        "kills": kills, "after_sink": after_sink, "during_step": during_step,
        "broker_restarts": broker_restarts, "replayed_tasks": replayed,
        "records_checked": checked + len(garbage), "losses": 0, "duplicates": 0,
        "seconds": round(seconds),
    }))
    assert replayed >= 1, "at least one kill landed between the sink's commit and Spark's"


def _read_view(conf: dict[str, str], circuit: Any, view: str) -> Counter[str]:
    output = circuit.view(view).output
    codec = AvroCodec(output.value_schema)
    return Counter(
        json.dumps(codec.decode(m.value()), sort_keys=True, default=str)
        for m in read_topic(conf, output.topic)
    )


@pytest.mark.slow
def test_killed_three_times_and_a_broker_restart_lose_and_duplicate_nothing_s15(
    tmp_path: Path, own_broker: LocalKafka
) -> None:
    _crash_run(tmp_path, own_broker, kills=3, rows=600)


@pytest.mark.slow
def test_killed_six_times_over_more_input_lose_and_duplicate_nothing_s15(
    tmp_path: Path, own_broker: LocalKafka
) -> None:
    _crash_run(tmp_path, own_broker, kills=6, rows=3000)
