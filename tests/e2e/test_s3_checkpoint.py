"""Checkpoints on object storage (ADR 0025): ``tidemark run --checkpoint s3a://...`` against a
real S3-compatible server (S3Proxy, tests/local_s3proxy.py) and a real broker.

A program with a windowed aggregate runs step by step twice over the same input, once on a
local checkpoint and once on an s3a:// one, each step a ``--once`` run that continues from
its checkpoint: each step writes the same windows on both (S11, S14), and the late record the
same dead letter (S5). Two runs started together on one fresh s3a:// checkpoint write every
record once: the lease lets one run, the other refuses naming the holder (S15).

The first test is ``slow`` (six runs); the second, two runs at once, runs with the e2e suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.checkpoint_lease import LEASE_DIRECTORY
from app.runtime.store import join, store_at

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
BASE_MS = 1_700_000_040_000  # a minute boundary

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    sensor  BIGINT NOT NULL
) WITH ('topic' = '{topic}', 'dead_letter' = '{dlq}');

CREATE VIEW per_minute WITH ('topic' = '{out}', 'format' = 'append') AS
SELECT window_start, window_end, COUNT(*) AS c, SUM(sensor) AS s
FROM TABLE(TUMBLE(TABLE reading, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;
"""


def _environment(kafka: Any, object_store: Any) -> dict[str, str]:
    return (
        {**os.environ}
        | {f"TIDEMARK_KAFKA_{k.upper().replace('.', '_')}": v
           for k, v in kafka.client_config().items()}
        | object_store.environment
    )


def _run_args(kafka: Any, program: Path, checkpoint: str, log: Path) -> list[str]:
    return [sys.executable, "-m", "app.cli", "run", str(program), "--bootstrap-servers",
            kafka.bootstrap_servers, "--checkpoint", checkpoint, "--metrics-port", "0",
            "--spark-log-file", str(log), "--once"]


def _program(tmp_path: Path, name: str, topic: str, unique_topic: Any) -> tuple[Path, Any]:
    path = tmp_path / f"{name}.sql"
    path.write_text(PROGRAM.format(topic=topic, dlq=unique_topic(f"{name}-dlq"),
                                   out=unique_topic(f"{name}-out")))
    return path, compile_program(path)


def _written(kafka: Any, circuit: Any) -> list[tuple[Any, ...]]:
    view = circuit.view("per_minute").output
    codec = AvroCodec(view.value_schema)
    return [tuple(sorted(codec.decode(m.value()).items()))
            for m in read_topic(kafka.conf(), view.topic)]


def _dead_letters(kafka: Any, circuit: Any) -> list[bytes]:
    return [m.value() for m in read_topic(kafka.conf(), circuit.table("reading").dead_letter_topic)]


@pytest.mark.slow  # six runs, each a JVM: 3-8 min on 2 cores; the next test runs in CI
def test_an_aggregate_on_an_s3a_checkpoint_writes_what_a_local_one_does_step_by_step_s11_s14(
    kafka: Any, unique_topic: Any, object_store: Any, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    topic = kafka.create_topic(unique_topic("in"), 2)
    local_program, local = _program(tmp_path, "local", topic, unique_topic)
    s3_program, on_s3 = _program(tmp_path, "s3", topic, unique_topic)
    codec = AvroCodec(local.table("reading").avro_schema)
    producer = Producer({**kafka.conf(), "log_level": 3})
    env = _environment(kafka, object_store)
    checkpoint = object_store.url("ck")
    steps = [
        [BASE_MS + i * 4_000 for i in range(30)],  # two minutes
        [BASE_MS + 120_000 + i * 4_000 for i in range(30)],
        [BASE_MS + 240_000 + i * 4_000 for i in range(15)] + [BASE_MS + 1_000],  # one late
    ]
    seen_local: Counter[Any] = Counter()
    seen_s3: Counter[Any] = Counter()
    for number, times in enumerate(steps):
        for i, ts in enumerate(times):
            producer.produce(topic, value=codec.encode({"ts": ts, "sensor": i}), partition=i % 2)
        assert producer.flush(30) == 0
        for program, where in ((local_program, str(tmp_path / "ck")), (s3_program, checkpoint)):
            done = subprocess.run(  # noqa: S603 - this interpreter, our own command line
                _run_args(kafka, program, where, tmp_path / f"spark-{number}-{program.stem}.log"),
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
            )
            assert done.returncode == 0, done.stderr[-3000:]
        # The outputs have two partitions: what a step added is a difference of multisets.
        local_rows, s3_rows = Counter(_written(kafka, local)), Counter(_written(kafka, on_s3))
        assert s3_rows - seen_s3 == local_rows - seen_local, f"step {number}"
        assert local_rows - seen_local, f"step {number} closed windows"
        seen_local, seen_s3 = local_rows, s3_rows
    assert seen_s3 == seen_local
    assert sorted(seen_local.values()) == [1, 1, 1, 1], "minutes 0-3 closed, each once"
    assert len(_dead_letters(kafka, on_s3)) == len(_dead_letters(kafka, local)) == 1
    # Tidemark's files are in the bucket, Spark's too.
    state = join(checkpoint, "reading", "tidemark")
    store = store_at(state)
    assert store.exists(join(state, "sink-id"))
    assert store.names(join(state, "waterlines"))
    assert store.names(join(checkpoint, "reading", "spark", "offsets"))
    # Each of the three runs took the lease after the one before released it.
    lease = join(checkpoint, LEASE_DIRECTORY)
    epochs = store.names(lease)
    assert epochs[-1] == "000000000003", epochs
    assert json.loads(store.read_text(join(lease, epochs[-1])) or "{}")["released"] is True


def test_two_runs_started_together_on_one_s3a_checkpoint_write_everything_once_s15(
    kafka: Any, unique_topic: Any, object_store: Any, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    topic = kafka.create_topic(unique_topic("in"), 2)
    program, circuit = _program(tmp_path, "leased", topic, unique_topic)
    codec = AvroCodec(circuit.table("reading").avro_schema)
    producer = Producer({**kafka.conf(), "log_level": 3})
    for i in range(40):
        producer.produce(topic, value=codec.encode({"ts": BASE_MS + i * 4_000, "sensor": i}),
                         partition=i % 2)
    assert producer.flush(30) == 0
    checkpoint = object_store.url("ck")
    env = _environment(kafka, object_store)
    runs = [
        subprocess.Popen(  # noqa: S603 - this interpreter, our own command line
            _run_args(kafka, program, checkpoint, tmp_path / f"spark-{n}.log"),
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        for n in range(2)
    ]
    errors = [run.communicate(timeout=300)[1] for run in runs]
    codes = [run.returncode for run in runs]
    assert sorted(codes) == [0, 2], errors
    winner = codes.index(0)
    refused = errors[1 - winner]
    assert (
        f"tidemark: error: checkpoint {checkpoint} is in use by process {runs[winner].pid} on"
        " host"
    ) in refused
    assert "Traceback" not in refused
    windows = _written(kafka, circuit)
    assert len(windows) == len(set(windows)) == 2, "minutes 0 and 1 closed, each written once"
