"""A keyed record Tidemark's sink writes lands on the partition a Java client, Kafka Streams or
ksqlDB would put it on (``toPositive(murmur2(key)) % partitions``), on the real broker, with
transactions and without: an upsert view's topic is co-partitioned with the topics they write.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from sink_records import marker_place, write_task

from app.connectors.sink import StepMarker
from app.connectors.sink.record import SINK_RECORD
from app.connectors.topic_reader import read_topic

pytestmark = pytest.mark.e2e

PARTITIONS = 6

#: key -> the partition of 6 that the Java client picks. Computed with the Java client itself
#: (kafka-clients 4.1.1 from .cache/kafka/libs, Java 17): a single-file program run with
#: ``java -cp ".cache/kafka/libs/*" Murmur.java`` printing
#: ``Utils.toPositive(Utils.murmur2(key)) % 6`` for each key's bytes (UTF-8 text, or the bytes
#: themselves). Each of the six partitions is some key's. An empty key is a key (hashed), unlike
#: a missing one (spread at random).
JAVA_PARTITION_OF_6: dict[bytes, int] = {
    b"": 3,
    b"a": 4,
    b"user-1": 2,
    b"user-2": 2,
    b"user-3": 5,
    b"card-4242": 3,
    b"tidemark": 5,
    b"partition-me": 4,
    b"hello world": 1,
    b"\x00": 2,
    b"\x00\x00\x00\x00\x00\x00\x00\x01": 0,
    b"\x02\x06\x65\x75": 4,
    b"\xff\xfe\xfd\xfc": 1,
}


def _keyed_records(topic: str) -> pa.RecordBatch:
    rows = [
        {"kind": "output", "rel": "v", "topic": topic, "key": key, "value": b"v"}
        for key in JAVA_PARTITION_OF_6
    ]
    return pa.RecordBatch.from_pylist(rows, schema=SINK_RECORD)


def test_the_expected_partitions_differ_from_librdkafkas_default() -> None:
    """The default partitioner (CRC32) would put some of these keys elsewhere, so the
    placement checked below is the Java client's and not a coincidence."""
    crc32 = {key: zlib.crc32(key) % PARTITIONS for key in JAVA_PARTITION_OF_6}
    assert crc32 != JAVA_PARTITION_OF_6
    assert set(JAVA_PARTITION_OF_6.values()) == set(range(PARTITIONS))


@pytest.mark.parametrize("transactional", [True, False], ids=["transactions", "idempotent"])
def test_keyed_records_land_where_the_java_client_puts_them(
    kafka: Any, unique_topic: Callable[[str], str], transactional: bool
) -> None:
    out = kafka.create_topic(unique_topic("out"), PARTITIONS)
    marker = None
    if transactional:
        place = marker_place(kafka.conf(), unique_topic("markers"))
        marker = StepMarker(uuid.uuid4().hex[:16], 0, place)
    summary = write_task(kafka.conf(), marker, [_keyed_records(out)])
    assert sum(row["n"] for row in summary if row["kind"] == "output") == len(JAVA_PARTITION_OF_6)
    landed = {m.key(): m.partition() for m in read_topic(kafka.conf(), out)}
    assert landed == JAVA_PARTITION_OF_6
