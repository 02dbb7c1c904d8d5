"""What one streaming query per table costs (docs/adr/0002-one-query-per-table.md), measured.

The same rows go to one table alone, then to two tables (lateness 10 s and 100 s) in one
program; per step we record the wall time of a ``--once`` run, each query's own step time
(``StepReport.seconds``) and the CPU seconds of this process tree (driver JVM and Python
workers, read from /proc so other users of the machine do not count). Run with ``-s`` to see
the table the ADR quotes:

    .venv/bin/pytest -m slow -s tests/e2e/test_time_query_cost.py

The assertion is the point of the design: the second table's waterline stays its own.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from app.connectors.avro_codec import AvroCodec
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BASE_MS = 1_700_000_000_000
ROWS_PER_STEP = 2000
STEPS = 3

TABLE = """
CREATE TABLE {name} (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '{lateness}' SECOND,
    id  BIGINT NOT NULL
) WITH ('topic' = '{topic}');

CREATE VIEW {name}_rows WITH ('topic' = '{topic}.out', 'format' = 'append') AS
SELECT ts, id FROM {name} WHERE id % 2 = 0;
"""


def _tree_cpu_seconds() -> float:
    """User + system CPU of this process and all its descendants (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    me = os.getpid()

    def descends(pid: int) -> bool:
        while pid > 1:
            if pid == me:
                return True
            pid = parents.get(pid, 0)
        return False

    return sum(seconds for pid, seconds in cpu.items() if descends(pid))


def _run(kafka: Any, unique_topic: Any, tmp: Path, tables: list[tuple[str, int]]) -> dict[str, Any]:
    topics = {name: unique_topic(f"{tmp.name}.{name}") for name, _ in tables}
    for topic in topics.values():
        kafka.create_topic(topic, partitions=2)
    tmp.mkdir(parents=True, exist_ok=True)
    program = tmp / "program.sql"
    program.write_text("".join(
        TABLE.format(name=name, lateness=lateness, topic=topics[name])
        for name, lateness in tables
    ))
    circuit = compile_program(program)
    codec = AvroCodec(circuit.tables[0].avro_schema)
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    reports: list[StepReport] = []
    service = Service(circuit, kafka.settings(tmp / "ck", shuffle_partitions=2),
                      on_step=reports.append)
    walls, cpus = [], []
    for step in range(STEPS):
        for i in range(ROWS_PER_STEP):
            ident = step * ROWS_PER_STEP + i
            value = codec.encode({"ts": BASE_MS + ident * 10, "id": ident})
            for topic in topics.values():
                producer.produce(topic, value=value, partition=i % 2)
        assert producer.flush(60) == 0
        cpu0, wall0 = _tree_cpu_seconds(), time.monotonic()
        service.start(once=True)
        service.wait(timeout_seconds=300)
        walls.append(time.monotonic() - wall0)
        cpus.append(_tree_cpu_seconds() - cpu0)
    data = [r for r in reports if r.step is not None]
    return {
        "wall": walls[1:],  # the first step also warms the Python workers up
        "cpu": cpus[1:],
        "step_seconds": [r.seconds for r in data if r.step and r.step > 1],
        "waterlines": {name: [r.waterlines["ts"] for r in data if r.table == name]
                       for name, _ in tables},
    }


def test_one_query_per_table_cost_and_separate_waterlines_s3(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    one = _run(kafka, unique_topic, tmp_path / "one", [("a", 10)])
    two = _run(kafka, unique_topic, tmp_path / "two", [("a", 10), ("b", 100)])
    last = BASE_MS + (STEPS * ROWS_PER_STEP - 1) * 10
    assert one["waterlines"]["a"][-1] == last - 10_000
    assert two["waterlines"]["a"][-1] == last - 10_000
    assert two["waterlines"]["b"][-1] == last - 100_000, "b keeps its own lateness"
    for label, run in (("1 table ", one), ("2 tables", two)):
        print(
            f"\n{label}: {ROWS_PER_STEP} rows/table/step, steps 2-{STEPS}: "
            f"wall/step median {statistics.median(run['wall']):.1f} s, "
            f"CPU/step median {statistics.median(run['cpu']):.1f} s, "
            f"query step median {statistics.median(run['step_seconds']):.1f} s"
        )
