"""An append view's declared Kafka key and the settings of the topics Tidemark creates, through
the real broker and Spark (SPEC S13, docs/language.md, docs/configuration.md).

The view ``keyed`` declares ``'key' = 'name'``: each record's key is the Avro record of its
``name`` (the same encoding as an upsert key), and lands on the partition the Java client puts
that key on. Its topic is created with the view's 6 partitions and retention; the table's
dead-letter topic with the input's 2 partitions and the ``topic_retention_ms`` setting. With
``'encoding' = 'avro-confluent'`` the key schema is registered under ``<topic>-key`` and frames
the keys, as an upsert view's does.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_java_partitioning import JAVA_PARTITION_OF_6

from app.circuit.reference import StepInput, evaluate
from app.cli import with_schema_registry
from app.config import Settings
from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_text
from app.runtime.service import Service
from app.runtime.step.encode import ViewEncoding, encode_record

pytestmark = pytest.mark.e2e

HOUR = 3_600_000
DAY = 24 * HOUR

#: name -> the partition of 6 the Java client picks for the key ``{"name": name}`` in Avro
#: (zigzag length, then the UTF-8 bytes). Computed as JAVA_PARTITION_OF_6 is, with
#: ``Utils.toPositive(Utils.murmur2(key)) % 6`` of kafka-clients 4.1.1 on each key's bytes.
#: The empty name's key is ``b"\x00"``, also one of JAVA_PARTITION_OF_6's keys.
JAVA_PARTITION_OF_NAME: dict[str, int] = {
    "": 2,
    "user-1": 5,
    "user-2": 1,
    "card-4242": 3,
    "a": 0,
    "e": 4,
    "tidemark": 5,
}


def _program(source: str, out: str) -> Any:
    return compile_text(
        "p.sql",
        "CREATE TABLE t (\n"
        "  ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,\n"
        "  name VARCHAR NOT NULL,\n"
        "  n BIGINT\n"
        f") WITH ('topic' = '{source}');\n"
        f"CREATE VIEW keyed WITH ('topic' = '{out}', 'format' = 'append', 'key' = 'name',\n"
        "  'partitions' = '6', 'retention' = INTERVAL '2' DAY) AS\n"
        "SELECT ts, name, n FROM t;\n",
    )


def _configs(kafka: Any, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({**kafka.conf(), "log_level": 3})
    described = admin.describe_configs([ConfigResource("topic", topic)])
    return {k: v.value for k, v in next(iter(described.values())).result(30).items()}


def _partitions(kafka: Any, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**kafka.conf(), "log_level": 3})
    return len(admin.list_topics(topic, timeout=30).topics[topic].partitions)


def test_the_name_vectors_agree_with_the_java_clients_byte_vectors() -> None:
    codec = AvroCodec(_program("in", "out").view("keyed").output.key_schema)
    assert codec.encode({"name": ""}) == b"\x00"
    assert JAVA_PARTITION_OF_NAME[""] == JAVA_PARTITION_OF_6[b"\x00"]
    assert set(JAVA_PARTITION_OF_NAME.values()) == set(range(6))


def test_a_declared_key_lands_on_the_java_partition_of_a_created_topic(
    kafka: Any, unique_topic: Callable[[str], str], tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    source = kafka.create_topic(unique_topic("in"), 2)
    out = unique_topic("out")
    circuit = _program(source, out)
    output = circuit.view("keyed").output
    values = AvroCodec(circuit.table("t").avro_schema)
    rows = [
        {"ts": 1_000 * i, "name": name, "n": i} for i, name in enumerate(JAVA_PARTITION_OF_NAME)
    ]
    producer = Producer({**kafka.conf(), "log_level": 3})
    for i, row in enumerate(rows):
        producer.produce(source, value=values.encode(row), partition=i % 2)
    assert producer.flush(30) == 0

    service = Service(
        circuit,
        kafka.settings(tmp_path / "ck", shuffle_partitions=2, topic_retention_ms=HOUR),
    )
    service.start(once=True)
    service.wait(timeout_seconds=300)

    assert _partitions(kafka, out) == 6
    assert _configs(kafka, out)["retention.ms"] == str(2 * DAY)
    assert _partitions(kafka, f"{source}.dlq") == 2
    assert _configs(kafka, f"{source}.dlq")["retention.ms"] == str(HOUR)

    keys, value_codec = AvroCodec(output.key_schema), AvroCodec(output.value_schema)
    records = read_topic(kafka.conf(), out)
    landed = {keys.decode(m.key())["name"]: m.partition() for m in records}
    assert landed == JAVA_PARTITION_OF_NAME
    [oracle] = evaluate(circuit, [StepInput(rows={"t": rows})])
    written = Counter((m.key(), m.value()) for m in records)
    expected = Counter(
        (keys.encode(r.key), value_codec.encode(r.value)) for r in oracle.outputs["keyed"]
    )
    assert written == expected
    assert all(value_codec.decode(m.value())["name"] == keys.decode(m.key())["name"]
               for m in records)


def test_an_append_views_key_schema_is_registered_and_frames_its_keys(
    schema_registry: str, unique_topic: Callable[[str], str]
) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    out = unique_topic("out")
    circuit = compile_text(
        "p.sql",
        "CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,\n"
        "  name VARCHAR NOT NULL, n BIGINT) WITH ('topic' = 'in');\n"
        f"CREATE VIEW keyed WITH ('topic' = '{out}', 'encoding' = 'avro-confluent',\n"
        "  'key' = 'n, name') AS SELECT ts, name, n FROM t;\n",
    )
    registered = with_schema_registry(circuit, Settings(schema_registry_url=schema_registry))
    output = registered.view("keyed").output
    client = SchemaRegistryClient({"url": schema_registry})
    latest = client.get_latest_version(f"{out}-key")
    assert latest.schema_id == output.key_schema_id
    assert json.loads(latest.schema.schema_str)["fields"] == output.key_schema["fields"]

    key, _ = encode_record(
        ViewEncoding.for_view(registered.view("keyed")), {"ts": 0, "name": "a", "n": 7}, None
    )
    assert key is not None and key[:5] == b"\x00" + output.key_schema_id.to_bytes(4, "big")
    decoded = AvroDeserializer(client)(key, SerializationContext(out, MessageField.KEY))
    assert decoded == {"n": 7, "name": "a"}
