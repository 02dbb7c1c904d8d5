"""A replayed step proves it would write what its first run committed, or refuses (S15).

Each case first runs ``tidemark run --once`` to the end of the input, then puts the
checkpoint in the state a crash leaves behind right after a step's Kafka transactions
committed, before Spark's commit log recorded the batch (its commit-log entry removed, as a
SIGKILL at that moment leaves it; tests/e2e/test_crash_recovery.py kills for real). The
restart replays that batch:

* with a changed program (a view's WHERE changed, a change the checkpoint may otherwise
  follow): the step's fingerprint differs from the one recorded when the step began, so the
  run stops at once with exit code 2 naming the step, both fingerprints and the recovery, and
  writes nothing; the recovery (the program that wrote the step, run to its end) then finds
  its own fingerprint and every record is in the output once;
* after Spark lost the batch's offset-log entry too (a machine crash before its write reached
  the disk) and more input arrived: Spark plans the batch again over other offsets; it is
  refused by the step file, and with that file gone too (a restored copy of the checkpoint),
  by the step markers in Kafka themselves, in the writing tasks. Nothing is written.

Run: ``.venv/bin/pytest -q -p no:cacheprovider -m slow tests/e2e/test_replay_fingerprint.py``
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from app.circuit.ir import Circuit
from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BASE_MS = 1_700_000_000_000

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    sensor  BIGINT NOT NULL
) WITH ('topic' = '{topic}', 'dead_letter' = '{dlq}');

CREATE VIEW chosen WITH ('topic' = '{out}', 'format' = 'append') AS
SELECT ts, sensor FROM reading WHERE sensor >= {least};
"""


class Case:
    """One program's topics and checkpoint on the shared broker."""

    def __init__(self, kafka: Any, unique_topic: Any, tmp_path: Path) -> None:
        self.kafka = kafka
        self.topic = kafka.create_topic(unique_topic("in"), 2)
        self.dlq, self.out = unique_topic("dlq"), unique_topic("out")
        self.tmp_path = tmp_path
        self.checkpoint = tmp_path / "cp"
        self.spark = self.checkpoint / "reading" / "spark"
        self.steps = self.checkpoint / "reading" / "tidemark" / "step-fingerprints"
        self.sent = 0

    def program(self, least: int) -> Path:
        path = self.tmp_path / f"least_{least}.sql"
        text = PROGRAM.format(topic=self.topic, dlq=self.dlq, out=self.out, least=least)
        path.write_text(text)
        return path

    def circuit(self) -> Circuit:
        return compile_program(self.program(0))

    def send(self, n: int) -> None:
        from confluent_kafka import Producer

        codec = AvroCodec(self.circuit().table("reading").avro_schema)
        producer = Producer({**self.kafka.conf(), "log_level": 3})
        for i in range(self.sent, self.sent + n):
            value = codec.encode({"ts": BASE_MS + i, "sensor": i})
            producer.produce(self.topic, value=value, partition=i % 2)
        assert producer.flush(30) == 0
        self.sent += n

    def run(self, least: int) -> subprocess.CompletedProcess[str]:
        env = {**os.environ} | {
            f"TIDEMARK_KAFKA_{k.upper().replace('.', '_')}": v
            for k, v in self.kafka.client_config().items()
        }
        args = [
            sys.executable, "-m", "app.cli", "run", str(self.program(least)),
            "--bootstrap-servers", self.kafka.bootstrap_servers,
            "--checkpoint", str(self.checkpoint), "--metrics-port", "0", "--once",
            "--max-records-per-step", "8",
        ]  # fmt: skip
        return subprocess.run(
            args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, timeout=400,
        )  # fmt: skip

    def written(self) -> Counter[int]:
        """The sensors in the output, as a read_committed consumer reads them."""
        view = self.circuit().view("chosen").output
        assert view is not None
        codec = AvroCodec(view.value_schema)
        return Counter(
            codec.decode(m.value())["sensor"] for m in read_topic(self.kafka.conf(), self.out)
        )

    def last_batch(self) -> int:
        return max(int(p.name) for p in (self.spark / "commits").iterdir() if p.name.isdigit())

    def forget(self, log: str, batch: int) -> None:
        """Remove ``batch``'s entry of Spark's ``log`` (``commits`` or ``offsets``)."""
        for name in (str(batch), f".{batch}.crc"):
            (self.spark / log / name).unlink(missing_ok=True)


def _refused(result: subprocess.CompletedProcess[str], batch: int, where: str) -> None:
    assert result.returncode == 2, result.stderr[-3000:]
    error = next(line for line in result.stderr.splitlines() if "tidemark: error:" in line)
    assert f"refusing to replay step batch {batch}: {where}" in error, error
    assert "nothing of the step is written" in error
    assert "run the program and Tidemark version that wrote the step" in error
    assert "docs/reliability.md" in error


def test_a_replay_under_a_changed_program_refuses_and_writes_nothing_s15(
    kafka: Any, unique_topic: Any, tmp_path: Path
) -> None:
    case = Case(kafka, unique_topic, tmp_path)
    case.send(20)
    first = case.run(least=0)
    assert first.returncode == 0, first.stderr[-3000:]
    assert case.written() == Counter(range(20))
    batch = case.last_batch()
    recorded = (case.steps / str(batch)).read_text()
    case.forget("commits", batch)  # killed right after the step's Kafka commit

    changed = case.run(least=5)  # deployed during the crash loop
    _refused(changed, batch, "the step file of sink")
    assert recorded in changed.stderr
    assert case.written() == Counter(range(20)), "nothing written by the refused replay"

    recovered = case.run(least=0)  # the recovery: the program that wrote the step
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    assert case.written() == Counter(range(20)), "every record once"


def test_a_step_planned_again_over_other_offsets_refuses_and_writes_nothing_s15(
    kafka: Any, unique_topic: Any, tmp_path: Path
) -> None:
    case = Case(kafka, unique_topic, tmp_path)
    case.send(20)
    first = case.run(least=0)
    assert first.returncode == 0, first.stderr[-3000:]
    batch = case.last_batch()
    assert batch >= 2  # 20 records, 8 a step
    case.forget("commits", batch)
    case.forget("offsets", batch)  # the entry never reached the disk
    case.send(6)  # so the batch is planned again over more records

    replanned = case.run(least=0)
    _refused(replanned, batch, "the step file of sink")
    assert case.written() == Counter(range(20))

    (case.steps / str(batch)).unlink()  # a restored copy without the step file
    case.forget("offsets", batch)
    by_markers = case.run(least=0)
    _refused(by_markers, batch, "the step marker of transaction tidemark-")
    assert case.written() == Counter(range(20)), "no task wrote"
