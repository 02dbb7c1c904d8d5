"""A dead letter keeps its source record's Kafka timestamp (SPEC S6).

A table timed by ``METADATA FROM 'timestamp'`` reads its event time from that timestamp, so a
dead letter written with a new one, replayed into the table, would come back with a new event
time. The source carries each rejected record's timestamp (``_timestamp``) on both decoding
paths, and the sink produces the dead letter with it; output records keep the producer's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message

from app.connectors.kafka_source import KafkaPartitionSlice, decode_slice
from app.connectors.late_gate import SourceSpec
from app.connectors.sink import produce_partition, producers
from app.connectors.sink.producers import ProducerPool
from app.connectors.sink.record import sink_batch
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec
from app.runtime.step.sink_rows import arrow_dead_letters

NOW = 1_800_000_000_000
PROGRAM = """
CREATE TABLE clicks (
    ts BIGINT NOT NULL LATENESS 10,
    n  BIGINT
) WITH ('topic' = 'in', 'format' = 'json');
"""


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> SourceSpec:
    path = tmp_path_factory.mktemp("stamp") / "p.sql"
    path.write_text(PROGRAM)
    return source_spec(compile_program(path).table("clicks"))


def _messages() -> list[Any]:
    return [
        Message(topic="in", partition=0, offset=10, value=b'{"ts": 1000, "n": 1}',
                timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_123)),
        Message(topic="in", partition=0, offset=11, value=b'{"ts": 10, "n": 2}',
                timestamp=(TIMESTAMP_CREATE_TIME, 1_600_000_000_456)),
        Message(topic="in", partition=0, offset=12, value=b"not json",
                timestamp=(TIMESTAMP_LOG_APPEND_TIME, 1_650_000_000_789)),
        Message(topic="in", partition=0, offset=13, value=b"{", key=b"k"),
    ]


def _dead_letters(spec: SourceSpec, columnar: bool) -> pa.RecordBatch:
    part = KafkaPartitionSlice(0, 10, 14, 3, NOW, {"ts": 500})
    batches = list(decode_slice(spec, part, _messages(), columnar=columnar))
    return arrow_dead_letters(pa.Table.from_batches(batches).to_batches()[0], "clicks", "in.dlq")


@pytest.mark.parametrize("columnar", [True, False])
def test_a_dead_letter_row_carries_its_source_records_timestamp_s6(
    spec: SourceSpec, columnar: bool
) -> None:
    dead = _dead_letters(spec, columnar).to_pydict()
    assert dead["src_offset"] == [11, 12, 13]
    assert dead["reason"] == ["late", "malformed", "malformed"]
    # Create or log-append time alike; a record without one has none (stamped when written).
    assert dead["record_timestamp_ms"] == [1_600_000_000_456, 1_650_000_000_789, None]


class _Recorder:
    """A producer that keeps what it is asked to produce."""

    def __init__(self) -> None:
        self.produced: list[tuple[str, bytes | None, int]] = []

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:
        self.produced.append((topic, key, kw.get("timestamp", 0)))

    def flush(self, _timeout: float) -> int:
        return 0


class _Pool(ProducerPool):
    def __init__(self, producer: _Recorder) -> None:
        super().__init__()
        self.producer = producer

    def idempotent(self, conf: Any) -> Any:
        return self.producer


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    producer = _Recorder()
    pool = _Pool(producer)
    previous = producers.PRODUCERS.swap(pool)
    yield producer
    producers.PRODUCERS.swap(previous)


def test_the_sink_writes_a_dead_letter_with_its_source_records_timestamp_s6(
    recorder: _Recorder, spec: SourceSpec
) -> None:
    outputs = sink_batch(
        2, {"kind": ["output"] * 2, "rel": ["v"] * 2, "topic": ["out"] * 2, "key": [b"a", b"b"]}
    )
    dead = _dead_letters(spec, columnar=True)
    tables = {"clicks": {"topic": "in", "units": {"ts": "integer"}}}
    list(produce_partition(iter([outputs, dead]), {}, tables, {}))
    assert recorder.produced == [
        ("out", b"a", 0),
        ("out", b"b", 0),
        ("in.dlq", None, 1_600_000_000_456),
        ("in.dlq", None, 1_650_000_000_789),
        ("in.dlq", b"k", 0),  # no timestamp of its own: the time it is written
    ]
