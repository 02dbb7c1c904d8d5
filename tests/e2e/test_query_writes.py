"""Aggregates written in the query (ADR 0008), step by step: many small steps, so windows close
while data keeps coming and the steps that read data write them (S11, S14).

``clicks`` has one AFTER WATERMARK view, so its query reads the source once and, in local mode,
each step is one job whose aggregate tasks compute the step's header from the probes the
source tasks leave. ``taps`` has two, so each of its steps first runs the step sink's job over
the planned slices, as on a cluster. Events arrive in event-time order (2 per second, two
partitions read in step), so no batching makes any of them late; five events far behind the
waterline come last and are late whatever the steps. Checked: every closed window's row, once;
the late events as dead letters; and each step's records carry the waterline the step sink
computed after that very step (a writing task that took the previous step's waterline fails
this).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from app.circuit.windows import tumble_start
from app.connectors.avro_codec import AvroCodec
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

BASE_MS = 1_700_000_040_000  # a minute boundary
EVENTS = 600  # one every 500 ms: 300 s, five 1-minute windows
LATE = 5

PROGRAM = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr VARCHAR   NOT NULL,
    n   INT       NOT NULL
) WITH ('topic' = '{clicks}', 'dead_letter' = '{clicks}.dlq');

CREATE TABLE taps (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr VARCHAR   NOT NULL,
    n   INT       NOT NULL
) WITH ('topic' = '{taps}', 'dead_letter' = '{taps}.dlq');

CREATE VIEW click_users WITH ('topic' = '{click_users}', 'format' = 'append') AS
SELECT window_start, window_end, usr, COUNT(*) AS c, SUM(n) AS s
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr
EMIT AFTER WATERMARK;

CREATE VIEW tap_users WITH ('topic' = '{tap_users}', 'format' = 'append') AS
SELECT window_start, window_end, usr, COUNT(*) AS c, SUM(n) AS s
FROM TABLE(TUMBLE(TABLE taps, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr
EMIT AFTER WATERMARK;

CREATE VIEW tap_totals WITH ('topic' = '{tap_totals}', 'format' = 'append') AS
SELECT window_start, window_end, COUNT(*) AS c, SUM(n) AS s
FROM TABLE(TUMBLE(TABLE taps, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;
"""

VIEWS = {"click_users": "clicks", "tap_users": "taps", "tap_totals": "taps"}


def _events() -> list[tuple[int, str, int]]:
    return [(BASE_MS + i * 500, f"u{i % 3}", i % 7) for i in range(EVENTS)]


def _expected(per_user: bool) -> Counter[tuple[Any, ...]]:
    """Each window the final waterline closed, as (start, end[, usr], c, s)."""
    waterline = BASE_MS + (EVENTS - 1) * 500 - 10_000
    groups: dict[tuple[Any, ...], list[int]] = {}
    for ts, usr, n in _events():
        start = ts - (ts - BASE_MS) % 60_000
        if start + 60_000 > waterline:
            continue
        key = (start, start + 60_000, usr) if per_user else (start, start + 60_000)
        groups.setdefault(key, []).append(n)
    return Counter((*key, len(ns), sum(ns)) for key, ns in groups.items())


def test_each_step_writes_its_windows_with_its_own_waterline_s11_s14(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    t = {name: unique_topic(name) for name in ("clicks", "taps", *VIEWS)}
    for table in ("clicks", "taps"):
        kafka.create_topic(t[table], partitions=2)
    for view in VIEWS:
        kafka.create_topic(t[view], partitions=1)  # a step's records follow the last step's
    program = tmp_path / "query_writes.sql"
    program.write_text(PROGRAM.format(**t))
    circuit = compile_program(program)
    assert {q.writing_stage for q in physical_plan(circuit).queries} == {"aggregate"}
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    for table in ("clicks", "taps"):
        codec = AvroCodec(circuit.table(table).avro_schema)
        for i, (ts, usr, n) in enumerate(_events()):
            value = codec.encode({"ts": ts, "usr": usr, "n": n})
            producer.produce(t[table], value=value, partition=i % 2)
        for i in range(LATE):
            value = codec.encode({"ts": BASE_MS + 1000 + i, "usr": "late", "n": 1})
            producer.produce(t[table], value=value, partition=0)
    assert producer.flush(30) == 0

    reports: list[StepReport] = []
    service = Service(
        circuit,
        kafka.settings(tmp_path / "ck", shuffle_partitions=2, max_records_per_step=80),
        on_step=reports.append,
    )
    service.start(once=True)
    service.wait(timeout_seconds=600)

    def values(view: str) -> Counter[tuple[Any, ...]]:
        output = circuit.view(view).output
        assert output is not None
        codec = AvroCodec(output.value_schema)
        rows: Counter[tuple[Any, ...]] = Counter()
        for msg in read_topic(kafka.conf(), t[view]):
            value = codec.decode(msg.value())
            rows[tuple(value.values())] += 1
        return rows

    assert values("click_users") == _expected(per_user=True)
    assert values("tap_users") == _expected(per_user=True)
    assert values("tap_totals") == _expected(per_user=False)
    for table in ("clicks", "taps"):
        late = [r for r in read_topic(kafka.conf(), t[table] + ".dlq")]
        assert len(late) == LATE, table
        assert sum(r.dead_letters.get("late", 0) for r in reports if r.table == table) == LATE

    # S14 step by step: a step's records are the next report.outputs[view] of the topic.
    # Each view's first time attribute is its window_start: S10's start waterline, the
    # start of the 1-minute window of w(ts).
    for view, table in VIEWS.items():
        messages = list(read_topic(kafka.conf(), t[view]))
        position = 0
        writing_data_steps = 0
        for report in (r for r in reports if r.table == table):
            count = report.outputs.get(view, 0)
            waterline = report.waterlines.get("ts")
            start = None if waterline is None else tumble_start(waterline, 60_000)
            want = format_time_value(start, "ms").encode()
            for msg in messages[position : position + count]:
                assert dict(msg.headers() or ())["tidemark.waterline"] == want, (view, report)
            position += count
            writing_data_steps += bool(count and report.step is not None)
        assert position == len(messages), view
        assert writing_data_steps >= 2, f"{view}: windows closed while data kept coming"

    # clicks ran each step as one job (its source tasks left their probes), taps as two.
    probes = tmp_path / "ck" / "{}" / "tidemark" / "step-probes"
    assert list(Path(str(probes).format("clicks")).glob("*.json"))
    assert not list(Path(str(probes).format("taps")).glob("*.json"))
