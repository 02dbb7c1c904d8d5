"""Kafka keys as columns through the real broker and Spark (docs/language.md, Kafka keys).

A Java-style producer keys purchases by card with a ``StringSerializer`` (the key is the
card's UTF-8 bytes) and shops by a JSON key of two fields. The tables read those keys into
columns (``'key.format'`` raw and json); bad keys are dead letters with their reason. The
outputs are keyed by one column with ``'key.format' = 'raw'``: a consumer with a
``StringDeserializer`` reads the card back, and every record is on the partition Java's
murmur2 gives the same key, so the view is co-partitioned with the producer's topic. With
the tests' schema registry (slow suite), a producer's primitive Avro string key is read and
an output's key is the registry's primitive schema, read by ``AvroDeserializer``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from test_java_partitioning import JAVA_PARTITION_OF_6

from app.cli import with_schema_registry
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_text
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE purchases (
    card   VARCHAR   NOT NULL,
    ts     TIMESTAMP NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '5' SECOND,
    amount BIGINT    NOT NULL
) WITH ('topic' = '{purchases}', 'format' = 'json',
        'key.format' = 'raw', 'key.fields' = 'card');

CREATE TABLE shops (
    shop   VARCHAR   NOT NULL,
    region VARCHAR   NOT NULL,
    ts     TIMESTAMP NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '5' SECOND,
    visits BIGINT    NOT NULL
) WITH ('topic' = '{shops}', 'format' = 'json',
        'key.format' = 'json', 'key.fields' = 'shop;region');

CREATE VIEW large WITH ('topic' = '{large}', 'key' = 'card', 'key.format' = 'raw',
                        'encoding' = 'json', 'partitions' = '6') AS
SELECT card, amount FROM purchases WHERE amount > 10;

CREATE VIEW visits WITH ('topic' = '{visits}', 'key' = 'shop', 'key.format' = 'raw',
                         'encoding' = 'json', 'partitions' = '6') AS
SELECT shop, region, visits FROM shops;
"""

#: Cards whose partition of 6 the Java client is known to pick (test_java_partitioning).
CARDS = ["card-4242", "user-1", "user-3", "tidemark", "hello world", "a"]


def _produce(producer: Any, topic: str, key: bytes | None, value: bytes, at_ms: int) -> None:
    producer.produce(topic, key=key, value=value, timestamp=at_ms)


def _dead(kafka: Any, topic: str) -> list[tuple[bytes | None, str, str]]:
    found = []
    for message in read_topic(kafka.conf(), topic):
        headers = dict(message.headers())
        found.append((message.key(), headers["tidemark.error.reason"].decode(),
                      headers["tidemark.error.message"].decode()))
    return sorted(found, key=lambda d: d[2])


def test_raw_and_json_keys_are_columns_and_raw_output_keys_are_javas(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.serialization import StringDeserializer, StringSerializer

    topics = {n: unique_topic(n) for n in ("purchases", "shops", "large", "visits")}
    kafka.create_topic(topics["purchases"], partitions=2)
    kafka.create_topic(topics["shops"], partitions=1)
    circuit = compile_text(str(tmp_path / "p.sql"), PROGRAM.format(**topics))
    now = int(time.time() * 1000) - 60_000
    strings = StringSerializer("utf_8")
    producer = Producer({**kafka.conf(), "log_level": 3})
    for number, card in enumerate(CARDS):
        value = json.dumps({"amount": 5 + 10 * number}).encode()
        _produce(producer, topics["purchases"], strings(card), value, now + number)
    value = json.dumps({"amount": 100}).encode()
    _produce(producer, topics["purchases"], b"\xff\xfe", value, now)  # no UTF-8 text
    _produce(producer, topics["purchases"], None, value, now)  # no key at all
    visit = json.dumps({"visits": 3}).encode()
    _produce(producer, topics["shops"], b'{"shop": "user-1", "region": "eu"}', visit, now)
    _produce(producer, topics["shops"], b"{oops", visit, now)
    _produce(producer, topics["shops"], b'{"shop": 7, "region": "eu"}', visit, now)
    assert producer.flush(30) == 0

    reports: list[StepReport] = []
    service = Service(circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2),
                      on_step=reports.append)
    service.start(once=True)
    service.wait(timeout_seconds=300)

    # Keys are the card's UTF-8 bytes: a StringDeserializer reads them, and each record is
    # on the partition Java's murmur2 gives that key (S13).
    text = StringDeserializer("utf_8")
    large = {text(m.key(), None): (m.partition(), json.loads(m.value()))
             for m in read_topic(kafka.conf(), topics["large"])}
    assert large == {card: (JAVA_PARTITION_OF_6[card.encode()],
                            {"card": card, "amount": 5 + 10 * number})
                     for number, card in enumerate(CARDS) if number >= 1}
    [visited] = read_topic(kafka.conf(), topics["visits"])
    assert (visited.key(), visited.partition()) == (b"user-1", JAVA_PARTITION_OF_6[b"user-1"])
    assert json.loads(visited.value()) == {"shop": "user-1", "region": "eu", "visits": 3}

    # Bad keys are dead letters with their reason, kept as they came.
    assert _dead(kafka, circuit.table("purchases").dead_letter_topic) == [
        (None, "invalid", "column card is NOT NULL but the record has no key field card (a "
                          "null key, or a key without it)"),
        (b"\xff\xfe", "invalid", "key: not UTF-8 text (invalid start byte at byte 0)"),
    ]
    shops = _dead(kafka, circuit.table("shops").dead_letter_topic)
    assert [(key, reason) for key, reason, _ in shops] == [
        (b'{"shop": 7, "region": "eu"}', "invalid"), (b"{oops", "malformed")]
    assert shops[0][2] == 'key: column shop: expected a VARCHAR string, got 7'
    assert shops[1][2].startswith("key: not a JSON record of table shops's key: ")
    assert sum(sum(r.dead_letters.values()) for r in reports) == 4


REGISTRY_PROGRAM = """
CREATE TABLE purchases (
    card   VARCHAR   NOT NULL,
    amount BIGINT    NOT NULL
) WITH ('topic' = '{purchases}', 'format' = 'json',
        'key.format' = 'avro-confluent', 'key.fields' = 'card');

CREATE VIEW by_card WITH ('topic' = '{by_card}', 'key' = 'card',
                          'key.format' = 'avro-confluent', 'encoding' = 'json') AS
SELECT card, amount FROM purchases;
"""


@pytest.mark.slow
def test_a_registry_producers_string_key_is_read_and_written_as_a_primitive(
    kafka: Any, schema_registry: str, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topics = {n: unique_topic(n) for n in ("purchases", "by_card")}
    kafka.create_topic(topics["purchases"], partitions=1)
    settings = kafka.settings(tmp_path / "ck", shuffle_partitions=2,
                              schema_registry_url=schema_registry)
    circuit = with_schema_registry(
        compile_text(str(tmp_path / "p.sql"), REGISTRY_PROGRAM.format(**topics)), settings)
    registry = SchemaRegistryClient({"url": schema_registry})
    keys = AvroSerializer(registry, json.dumps("string"))
    context = SerializationContext(topics["purchases"], MessageField.KEY)
    producer = Producer({**kafka.conf(), "log_level": 3})
    for card, amount in (("c1", 5), ("c2", 7)):
        producer.produce(topics["purchases"], key=keys(card, context),
                         value=json.dumps({"amount": amount}).encode())
    producer.produce(topics["purchases"], key=b"c3", value=b'{"amount": 1}')  # no framing
    assert producer.flush(30) == 0

    service = Service(circuit, settings)
    service.start(once=True)
    service.wait(timeout_seconds=300)

    output = circuit.view("by_card").output
    assert output is not None
    subject = registry.get_latest_version(f"{topics['by_card']}-key")
    assert (subject.schema.schema_str.strip('"'), subject.schema_id) == (
        "string", output.key_schema_id)
    read = AvroDeserializer(registry)
    out = SerializationContext(topics["by_card"], MessageField.KEY)
    written = sorted((read(m.key(), out), json.loads(m.value()))
                     for m in read_topic(kafka.conf(), topics["by_card"]))
    assert written == [("c1", {"card": "c1", "amount": 5}), ("c2", {"card": "c2", "amount": 7})]
    [(key, reason, message)] = _dead(kafka, circuit.table("purchases").dead_letter_topic)
    assert (key, reason) == (b"c3", "malformed")
    assert message.startswith("key: not a Confluent-framed Avro key: ")
