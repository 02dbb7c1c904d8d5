"""SPEC S13 through the real broker and Spark: a Flink program's INSERT INTO a table with
``'key.fields-prefix'`` and ``'value.fields-include' = 'EXCEPT_KEY'`` (the Kafka connector
page's "Overlapping Format Fields" table) writes keys whose JSON fields are the key columns'
names without the prefix and values of the other columns, as a plain consumer reads them; an
INSERT INTO a table of Flink's ``'format' = 'raw'`` beside a raw key writes the one value
column's bytes, as a Java ``StringDeserializer`` reads them."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from app.connectors.topic_reader import read_topic
from app.program.compile import compile_text
from app.runtime.service import Service

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE behaviors (
  `version` INT,
  `user_id` BIGINT,
  `item_id` BIGINT,
  `behavior` STRING
) WITH ('connector' = 'kafka', 'topic' = '{behaviors}', 'format' = 'json');

CREATE TABLE KafkaTable (
  `k_version` INT,
  `k_user_id` BIGINT,
  `k_item_id` BIGINT,
  `version` INT,
  `behavior` STRING
) WITH (
  'connector' = 'kafka',
  'topic' = '{out}',
  'key.format' = 'json',
  'key.fields-prefix' = 'k_',
  'key.fields' = 'k_version;k_user_id;k_item_id',
  'value.format' = 'json',
  'value.fields-include' = 'EXCEPT_KEY'
);

INSERT INTO KafkaTable
SELECT `version`, user_id, item_id, `version` + 1 AS next_version, behavior FROM behaviors;

CREATE TABLE behavior_log (k_user_id BIGINT, behavior STRING) WITH (
  'connector' = 'kafka',
  'topic' = '{log}',
  'key.format' = 'raw',
  'key.fields-prefix' = 'k_',
  'key.fields' = 'k_user_id',
  'format' = 'raw',
  'value.fields-include' = 'EXCEPT_KEY'
);

INSERT INTO behavior_log SELECT user_id, behavior FROM behaviors;
"""

ROWS = [{"version": 1, "user_id": 7, "item_id": 9, "behavior": "buy"},
        {"version": 2, "user_id": 8, "item_id": 4, "behavior": "cart"},
        {"version": 3, "user_id": 7, "item_id": None, "behavior": None}]


def test_s13_inserts_into_prefixed_key_tables_write_flinks_keys_and_values(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.serialization import StringDeserializer

    topics = {n: unique_topic(n) for n in ("behaviors", "out", "log")}
    kafka.create_topic(topics["behaviors"], partitions=1)
    circuit = compile_text(str(tmp_path / "p.sql"), PROGRAM.format(**topics))
    producer = Producer({**kafka.conf(), "log_level": 3})
    for row in ROWS:
        producer.produce(topics["behaviors"], value=json.dumps(row).encode())
    assert producer.flush(30) == 0

    service = Service(circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2))
    service.start(once=True)
    service.wait(timeout_seconds=300)

    written = sorted(((json.loads(m.key()), json.loads(m.value()))
                      for m in read_topic(kafka.conf(), topics["out"])),
                     key=lambda kv: kv[0]["version"])
    assert written == [
        ({"version": 1, "user_id": 7, "item_id": 9}, {"version": 2, "behavior": "buy"}),
        ({"version": 2, "user_id": 8, "item_id": 4}, {"version": 3, "behavior": "cart"}),
        ({"version": 3, "user_id": 7, "item_id": None}, {"version": 4, "behavior": None}),
    ]
    # Kafka's LongSerializer key, StringSerializer value; a NULL is a null value.
    text = StringDeserializer("utf_8")
    logged = sorted(((struct.unpack(">q", m.key())[0], text(m.value(), None))
                     for m in read_topic(kafka.conf(), topics["log"])),
                    key=lambda kv: (kv[0], kv[1] or ""))
    assert logged == [(7, None), (7, "buy"), (8, "cart")]
