"""One driver per checkpoint (S15): two ``tidemark run`` started together on one fresh
checkpoint write every record once. The second finds the checkpoint locked and refuses with
exit code 2, naming the holder's process; without the lock each would create its own sink id
and both would write everything.
"""

from __future__ import annotations

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

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    sensor  BIGINT NOT NULL
) WITH ('topic' = '{topic}', 'dead_letter' = '{dlq}');

CREATE VIEW everything WITH ('topic' = '{out}', 'format' = 'append') AS
SELECT ts, sensor FROM reading;
"""


def test_two_runs_started_together_on_one_checkpoint_write_everything_once_s15(
    kafka: Any, unique_topic: Any, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    topic, out = kafka.create_topic(unique_topic("in"), 2), unique_topic("out")
    program = tmp_path / "locked.sql"
    program.write_text(PROGRAM.format(topic=topic, dlq=unique_topic("dlq"), out=out))
    circuit = compile_program(program)
    codec = AvroCodec(circuit.table("reading").avro_schema)
    producer = Producer({**kafka.conf(), "log_level": 3})
    for i in range(20):
        value = codec.encode({"ts": 1_700_000_000_000 + i, "sensor": i})
        producer.produce(topic, value=value, partition=i % 2)
    assert producer.flush(30) == 0

    env = {**os.environ} | {
        f"TIDEMARK_KAFKA_{k.upper().replace('.', '_')}": v
        for k, v in kafka.client_config().items()
    }
    args = [sys.executable, "-m", "app.cli", "run", str(program), "--bootstrap-servers",
            kafka.bootstrap_servers, "--checkpoint", str(tmp_path / "cp"),
            "--metrics-port", "0", "--once"]
    runs = [
        subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    errors = [run.communicate(timeout=300)[1] for run in runs]
    codes = [run.returncode for run in runs]
    assert sorted(codes) == [0, 2], errors
    winner = codes.index(0)
    refused = errors[1 - winner]
    assert (
        f"tidemark: error: checkpoint {tmp_path / 'cp'} is in use by process"
        f" {runs[winner].pid} on host"
    ) in refused
    assert "Traceback" not in refused

    view = circuit.view("everything").output
    assert view is not None
    out_codec = AvroCodec(view.value_schema)
    written = Counter(out_codec.decode(m.value())["sensor"] for m in read_topic(kafka.conf(), out))
    assert written == Counter(range(20)), "every record once"
