"""A changed program on an existing checkpoint (ADR 0015), through the real broker and Spark:

    run 1  hourly = SUM(x) per TUMBLE 1 hour, f = a filter      runs, records its plan
    run 2  the same, TUMBLE 2 hours (``tidemark run``)          refused, exit code 2, with the
                                                                change and the options; the
                                                                checkpoint and the outputs
                                                                unchanged
    run 3  run 1's program and a new stateless view g           proceeds: hourly's state is
                                                                kept (its total continues), g
                                                                has the rows of run 3 only

A restart after a deploy that changed a window (a crash loop restarts it again and again) is
refused every time, loudly, instead of completing the old windows by the new rule (S11, S15).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.checkpoint_lock import LOCK_NAME
from app.runtime.planner.checkpoint_plan import PLAN_NAME
from app.runtime.service import Service

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
#: An hour's start: every row below is in the window [T0, T0 + 1 hour).
T0 = 1_700_002_800_000

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    sensor  BIGINT NOT NULL,
    x       DOUBLE
) WITH ('topic' = '{topic}', 'dead_letter' = '{dlq}');

CREATE VIEW hourly WITH ('topic' = '{hourly}') AS
SELECT window_start, window_end, sensor, SUM(x) AS total
FROM TABLE(TUMBLE(TABLE reading, DESCRIPTOR(ts), INTERVAL '{hours}' HOUR))
GROUP BY window_start, window_end, sensor;

CREATE VIEW f WITH ('topic' = '{f}', 'format' = 'append') AS
SELECT ts, sensor FROM reading WHERE x > 0;
"""
ADDED = """
CREATE VIEW g WITH ('topic' = '{g}', 'format' = 'append') AS
SELECT ts, x FROM reading WHERE sensor = 1;
"""


def _files(checkpoint: Path) -> dict[str, bytes]:
    """Every file of the checkpoint but the lock, with its contents."""
    return {
        str(p.relative_to(checkpoint)): p.read_bytes()
        for p in sorted(checkpoint.rglob("*"))
        if p.is_file() and p.name != LOCK_NAME
    }


def _values(kafka: Any, circuit: Any, view: str) -> list[dict[str, Any]]:
    output = circuit.view(view).output
    codec = AvroCodec(output.value_schema)
    return [codec.decode(m.value()) for m in read_topic(kafka.conf(), output.topic) if m.value()]


def test_a_changed_window_is_refused_and_a_new_stateless_view_proceeds_s11(
    kafka: Any, unique_topic: Callable[[str], str], tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    topic = kafka.create_topic(unique_topic("in"), 2)
    names = {
        "topic": topic,
        "dlq": unique_topic("dlq"),
        "hourly": unique_topic("hourly"),
        "f": unique_topic("f"),
        "g": unique_topic("g"),
    }
    one_hour = tmp_path / "one_hour.sql"
    one_hour.write_text(PROGRAM.format(hours=1, **names), encoding="utf-8")
    two_hours = tmp_path / "two_hours.sql"
    two_hours.write_text(PROGRAM.format(hours=2, **names), encoding="utf-8")
    added = tmp_path / "added.sql"
    added.write_text(PROGRAM.format(hours=1, **names) + ADDED.format(**names), encoding="utf-8")
    circuit = compile_program(one_hour)
    codec = AvroCodec(circuit.table("reading").avro_schema)
    producer = Producer({**kafka.conf(), "log_level": 3})

    def send(minute: int, x: float) -> None:
        row = {"ts": T0 + minute * 60_000, "sensor": 1, "x": x}
        producer.produce(topic, value=codec.encode(row), partition=minute % 2)
        assert producer.flush(30) == 0

    checkpoint = tmp_path / "ck"
    settings = kafka.settings(checkpoint, shuffle_partitions=2)
    send(0, 1.0)
    send(1, 2.0)
    service = Service(circuit, settings)
    service.start(once=True)
    service.wait(timeout_seconds=300)
    assert service.plan_verdict is not None and service.plan_verdict.verdict == "new"
    assert (checkpoint / PLAN_NAME).is_file()
    assert [r["total"] for r in _values(kafka, circuit, "hourly")][-1] == 3.0

    # Run 2: the window changed. Refused before Spark starts, and nothing is written.
    send(2, 4.0)
    before = _files(checkpoint)
    hourly_before = _values(kafka, circuit, "hourly")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")} | {
        f"TIDEMARK_KAFKA_{k.upper().replace('.', '_')}": v for k, v in kafka.client_config().items()
    }
    refused = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", str(two_hours), "--bootstrap-servers",
         kafka.bootstrap_servers, "--checkpoint", str(checkpoint), "--metrics-port", "0",
         "--spark-log", "console", "--once"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr
    assert (f"tidemark: error: checkpoint {checkpoint} was made by another plan") in refused.stderr
    assert (
        "view hourly: window TUMBLE 1 hour on ts -> TUMBLE 2 hours on ts "
        "(its state is kept per window)"
    ) in refused.stderr
    assert "new checkpoint directory (--checkpoint" in refused.stderr
    assert _files(checkpoint) == before
    assert _values(kafka, circuit, "hourly") == hourly_before

    # Run 3: a stateless view added. It proceeds; hourly's state is kept.
    extended = compile_program(added)
    service = Service(extended, settings)
    service.start(once=True)
    service.wait(timeout_seconds=300)
    verdict = service.plan_verdict
    assert verdict is not None and verdict.verdict == "changed", verdict
    assert verdict.comparison is not None
    assert [str(c) for c in verdict.comparison.changes] == [
        "view g: added, stateless: it computes from the next step on"
    ]
    assert "view hourly: its state (python)" in verdict.comparison.kept
    assert [r["total"] for r in _values(kafka, extended, "hourly")][-1] == 7.0
    assert [r["x"] for r in _values(kafka, extended, "g")] == [4.0]
    assert sorted(r["ts"] for r in _values(kafka, extended, "f")) == [
        T0 + m * 60_000 for m in range(3)
    ]
