"""A step's order (app/runtime/step/step_orders.py): what each part asks of a source task, and how
an order rides in Spark local properties. Real slices, decoded from real confluent-kafka
messages; no Spark job is needed (outside a task, a task's order is the empty one)."""

from __future__ import annotations

import base64
import io
import json
import pickle
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka import Message

from app.connectors.kafka_source import (
    QUERY_META,
    KafkaPartitionSlice,
    arrow_schema,
    decode_slice,
)
from app.connectors.late_gate import SourceSpec
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec
from app.runtime.step.query_writes import SourceSide
from app.runtime.step.slice_writers import ProbePass
from app.runtime.step.step_orders import (
    SKIP_ACCEPTED,
    SLICE_OUTPUT,
    SLICE_SUMMARY,
    STEP_OUTPUT,
    STEP_SIDE,
    StepOrder,
)

NOW = 1_800_000_000_000
PROGRAM = """
CREATE TABLE t (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND,
    n  BIGINT NOT NULL
) WITH ('topic' = 't');
"""


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> SourceSpec:
    path = tmp_path_factory.mktemp("orders") / "p.sql"
    path.write_text(PROGRAM)
    return source_spec(compile_program(path).table("t"))


def _batches(spec: SourceSpec, part: KafkaPartitionSlice) -> list[pa.RecordBatch]:
    parsed = fastavro.parse_schema(dict(spec.avro_schema))
    values = []
    for i in range(4):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, {"ts": NOW - 100 * i, "n": i})
        values.append(buffer.getvalue())
    values.append(b"\xff")  # malformed
    messages = [
        Message(topic="t", partition=part.partition, offset=part.start + i, value=v)
        for i, v in enumerate(values)
    ]
    return list(decode_slice(spec, part, messages))


def _part() -> KafkaPartitionSlice:
    return KafkaPartitionSlice(1, 40, 45, 6, NOW, {"ts": NOW - 10_000})


def test_outside_a_task_the_order_is_empty_and_the_slice_is_handed_over(
    spec: SourceSpec,
) -> None:
    order = StepOrder.of_task()
    assert order == StepOrder()
    part = _part()
    batches = _batches(spec, part)
    handed = list(order.source_task(iter(batches), arrow_schema(spec), {}, part))
    assert handed == batches


def test_a_narrow_source_hands_over_its_columns_only(spec: SourceSpec) -> None:
    part = _part()
    narrow = arrow_schema(spec, narrow=True).names
    handed = StepOrder().source_task(
        iter(_batches(spec, part)), arrow_schema(spec), {}, part, narrow
    )
    assert all(batch.schema.names == ["ts", "n", *QUERY_META] for batch in handed)


def test_a_slice_writer_hands_spark_one_summary_row(spec: SourceSpec) -> None:
    part = _part()
    order = StepOrder(slice_output=ProbePass("t", ("ts",)))
    handed = list(order.source_task(iter(_batches(spec, part)), arrow_schema(spec), {}, part))
    assert [b.num_rows for b in handed] == [1]
    row = handed[0].to_pylist()[0]
    assert row["_kind"] == SLICE_SUMMARY
    (probe,) = json.loads(row["_message"])
    assert probe["kind"] == "probe" and probe["n"] == part.step
    assert json.loads(probe["detail"]) == {"ts": NOW, "_accepted": 4}


def test_a_source_side_leaves_the_probe_and_hands_over_the_slice(
    spec: SourceSpec, tmp_path: Path
) -> None:
    part = _part()
    batches = _batches(spec, part)
    side = SourceSide("t", ("ts",), str(tmp_path), "t-dead")
    order = StepOrder(source_side=side)
    handed = list(order.source_task(iter(batches), arrow_schema(spec), {}, part))
    assert handed == batches
    (probe,) = json.loads((tmp_path / f"{part.step}-{part.partition}.json").read_text())
    assert json.loads(probe["detail"]) == {"ts": NOW, "_accepted": 4}
    dead = (tmp_path / f"{part.step}-{part.partition}.dead.arrow").read_bytes()
    with pa.ipc.open_stream(dead) as stream:
        assert sum(b.num_rows for b in stream) == 1  # the malformed record


def test_each_part_of_an_order_rides_pickled_under_its_own_property() -> None:
    assert StepOrder().properties() == {}
    writer = ProbePass("t", ("ts",))
    side = SourceSide("t", ("ts",), "/tmp/x")
    properties = StepOrder(slice_output=writer, source_side=side).properties()
    assert set(properties) == {SLICE_OUTPUT, STEP_SIDE}
    assert pickle.loads(base64.b64decode(properties[SLICE_OUTPUT])) == writer  # noqa: S301
    assert pickle.loads(base64.b64decode(properties[STEP_SIDE])) == side  # noqa: S301
    assert set(StepOrder(skip_accepted=True).properties()) == {SKIP_ACCEPTED}
    assert len({SLICE_OUTPUT, STEP_SIDE, STEP_OUTPUT, SKIP_ACCEPTED}) == 4


def test_skipping_accepted_rows_hands_over_the_dead_letters_and_the_probe(
    spec: SourceSpec,
) -> None:
    part = _part()
    order = StepOrder(skip_accepted=True)
    handed = list(order.source_task(iter(_batches(spec, part)), arrow_schema(spec), {}, part))
    kinds = [row["_kind"] for batch in handed for row in batch.to_pylist()]
    assert kinds == ["malformed", "probe"]
