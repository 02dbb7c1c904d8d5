"""Two tables, two lateness values, one program, through the real broker and Spark (S3, S14).

Each table runs as its own streaming query (docs/adr/0002-one-query-per-table.md) with its own
waterline files, so each table's late rows are exactly those its own waterline implies. Both
topics receive the same rows (seconds after BASE); ``fast`` has LATENESS 10 s, ``slow`` 100 s:

    step  rows                 fast: w before / late / w after   slow: w before / late / w after
    1     100, 105             -inf / - / 95                     -inf / - / 5
    2     90, 50, 200          95 / 90, 50 / 190                 5 / - / 100
    3     150, 95              190 / 150, 95 / 190               100 / 95 / 100

Dead letters per table and every output record's ``tidemark.waterline`` header (S14) are
compared with the reference evaluator step by step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.circuit.reference import StepInput, evaluate
from app.connectors.avro_codec import AvroCodec
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

BASE_MS = 1_700_000_000_000
S = 1000

PROGRAM = """
CREATE TABLE fast (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    id  BIGINT NOT NULL
) WITH ('topic' = '{fast}', 'dead_letter' = '{fast_dlq}');

CREATE TABLE slow (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '100' SECOND,
    id  BIGINT NOT NULL
) WITH ('topic' = '{slow}', 'dead_letter' = '{slow_dlq}');

CREATE VIEW fast_rows WITH ('topic' = '{fast_out}', 'format' = 'append') AS
SELECT ts, id FROM fast;

CREATE VIEW slow_rows WITH ('topic' = '{slow_out}', 'format' = 'append') AS
SELECT ts, id FROM slow;
"""

STEPS = [[100, 105], [90, 50, 200], [150, 95]]


def test_each_table_keeps_its_own_waterline_and_late_rows_s3_s5_s14(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    t = {k: unique_topic(k) for k in ("fast", "fast_dlq", "slow", "slow_dlq", "fast_out",
                                      "slow_out")}
    kafka.create_topic(t["fast"], partitions=2)
    kafka.create_topic(t["slow"], partitions=1)
    program = tmp_path / "two_tables.sql"
    program.write_text(PROGRAM.format(**t))
    circuit = compile_program(program)
    codec = AvroCodec(circuit.table("fast").avro_schema)
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    reports: list[StepReport] = []
    service = Service(
        circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2), on_step=reports.append
    )
    inputs: list[StepInput] = []
    step_of_id: dict[int, int] = {}
    next_id = 0
    for index, seconds in enumerate(STEPS):
        rows = []
        for i, sec in enumerate(seconds):
            next_id += 1
            step_of_id[next_id] = index
            row = {"ts": BASE_MS + sec * S, "id": next_id}
            rows.append(row)
            producer.produce(t["fast"], value=codec.encode(row), partition=i % 2)
            producer.produce(t["slow"], value=codec.encode(row))
        assert producer.flush(30) == 0
        inputs.append(StepInput(rows={"fast": rows, "slow": rows}))
        service.start(once=True)
        service.wait(timeout_seconds=300)
    expected = evaluate(circuit, inputs)

    # S3: each table's waterline after each of its data steps, from its own rows only.
    for table in ("fast", "slow"):
        steps = [r for r in reports if r.table == table and r.step is not None]
        assert [r.waterlines["ts"] for r in steps] == [
            e.waterlines[table]["ts"] for e in expected
        ], table
    assert [e.waterlines["fast"]["ts"] for e in expected] == [
        BASE_MS + 95 * S, BASE_MS + 190 * S, BASE_MS + 190 * S]
    assert [e.waterlines["slow"]["ts"] for e in expected] == [
        BASE_MS + 5 * S, BASE_MS + 100 * S, BASE_MS + 100 * S]

    # S5/S6: the late rows of each table are exactly those of its own waterline.
    for table in ("fast", "slow"):
        want = sorted(
            (d.row["id"], d.waterline) for e in expected for d in e.dead_letters
            if d.table == table
        )
        got = sorted(
            (codec.decode(m.value())["id"],
             dict(m.headers())["tidemark.late.waterline"].decode())
            for m in read_topic(kafka.conf(), t[f"{table}_dlq"])
        )
        assert got == [(i, format_time_value(w, "ms")) for i, w in want], table
    late_ids = {
        table: {d.row["id"] for e in expected for d in e.dead_letters if d.table == table}
        for table in ("fast", "slow")
    }
    assert late_ids == {"fast": {3, 4, 6, 7}, "slow": {7}}

    # S14: each record carries its own view's waterline after the step that wrote it.
    for table in ("fast", "slow"):
        view = f"{table}_rows"
        got_marks = {}
        for m in read_topic(kafka.conf(), t[f"{table}_out"]):
            ident = codec.decode(m.value())["id"]
            got_marks[ident] = dict(m.headers())["tidemark.waterline"].decode()
        want_marks = {
            r.value["id"]: format_time_value(expected[step_of_id[r.value["id"]]]
                                             .view_waterlines[view], "ms")
            for e in expected
            for r in e.outputs[view]
            if r.value is not None
        }
        assert got_marks == want_marks, view
        assert all(r.waterline == e.view_waterlines[view] for e in expected
                   for r in e.outputs[view])
