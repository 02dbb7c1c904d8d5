"""A quiet table's window closes by punctuation alone (SPEC S4), sent with ``tidemark punctuate``.

TUMBLE 1 minute, LATENESS 10 s, EMIT AFTER WATERMARK; the service runs until each data step
and the no-data step after it (where Spark closes windows) are done:

    step  input                                   w after   window [0, 60)
    1     rows at 5 s and 20 s                    10 s      open: nothing written
    -     (the producer goes quiet)
    2     punctuation, bound 70 s (CLI)           60 s      complete: its one final row

The punctuation is a record with a null value and a ``tidemark.bound`` header; it inserts no
row but moves the waterline like a row at 70 s would. Compared with the reference evaluator.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.circuit.reference import Punctuation, StepInput, evaluate
from app.connectors.avro_codec import AvroCodec
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

BASE_MS = 1_700_000_040_000  # a minute boundary
S = 1000

PROGRAM = """
CREATE TABLE quiet (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    n   INT NOT NULL
) WITH ('topic' = '{topic}');

CREATE VIEW per_minute WITH ('topic' = '{out}', 'format' = 'append') AS
SELECT window_start, window_end, COUNT(*) AS c, SUM(n) AS s
FROM TABLE(TUMBLE(TABLE quiet, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;
"""


def test_quiet_table_window_closes_only_after_cli_punctuation_s4_s11(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    t = {k: unique_topic(k) for k in ("topic", "out")}
    kafka.create_topic(t["topic"], partitions=2)
    program = tmp_path / "quiet.sql"
    program.write_text(PROGRAM.format(**t))
    circuit = compile_program(program)
    codec = AvroCodec(circuit.table("quiet").avro_schema)
    out = circuit.view("per_minute").output
    assert out is not None
    out_codec = AvroCodec(out.value_schema)
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    reports: list[StepReport] = []
    service = Service(
        circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2), on_step=reports.append
    )
    rows = [{"ts": BASE_MS + 5 * S, "n": 1}, {"ts": BASE_MS + 20 * S, "n": 2}]
    for i, row in enumerate(rows):
        producer.produce(t["topic"], value=codec.encode(row), partition=i % 2)
    assert producer.flush(30) == 0

    def run_step(step: int) -> None:
        """Run until the data step ``step`` and the no-data step after it (where Spark
        evaluates its event-time timeouts with the moved watermark) are both done."""
        service.start()
        deadline = time.monotonic() + 300
        try:
            while time.monotonic() < deadline:
                steps = [r.step for r in reports]
                if step in steps and None in steps[steps.index(step) + 1 :]:
                    return
                time.sleep(0.5)
            raise AssertionError(f"step {step} and its no-data step did not run: {steps}")
        finally:
            service.stop()

    run_step(1)

    def written() -> list[dict[str, Any]]:
        return [out_codec.decode(m.value()) for m in read_topic(kafka.conf(), t["out"])]

    assert written() == [], "the window [0, 60) is open while w = 10 s"

    bound = format_time_value(BASE_MS + 70 * S, "ms")
    cli = subprocess.run(
        [sys.executable, "-m", "app.cli", "punctuate", "--topic", t["topic"], "--bound", bound,
         "--bootstrap-servers", kafka.bootstrap_servers],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "TIDEMARK_CONFIG": ""},
    )
    assert cli.returncode == 0, cli.stderr
    assert "partition(s) [0, 1]" in cli.stdout
    run_step(2)

    expected = evaluate(circuit, [
        StepInput(rows={"quiet": rows}),
        StepInput(rows={}, punctuations={"quiet": [Punctuation(BASE_MS + 70 * S)]}),
    ])
    assert expected[0].outputs["per_minute"] == ()
    oracle = [dict(r.value) for r in expected[1].outputs["per_minute"] if r.value is not None]
    assert oracle == [{"window_start": BASE_MS, "window_end": BASE_MS + 60 * S, "c": 2, "s": 3}]
    assert written() == oracle
    data_steps = [r for r in reports if r.step is not None]
    assert [r.waterlines["ts"] for r in data_steps] == [e.waterlines["quiet"]["ts"]
                                                        for e in expected]
    assert [r.accepted for r in data_steps] == [2, 0], "a punctuation inserts no row"
    assert sum(sum(r.dead_letters.values()) for r in data_steps) == 0
