"""Flink's upsert-kafka input read as its latest row per key on Spark, through the real
broker (ADR 0030 and its addendum; SPEC S5, S6, S16, S18, S19): ``users`` is keyed by its
JSON Kafka key ``{"user_id": ...}`` on a compacted topic, each record an upsert of its key
timed by its Kafka timestamp (LATENESS 1 s; seconds after 9:00 below), a tombstone the
key's deletion. ``per_region`` (an upsert-kafka
output) counts users and their page views per region: it reads the generated view
``users.latest`` through a stage boundary (ADR 0023).

    step  users (records, by Kafka timestamp)                 per_region upserts
    1     1 eu 1, 2 eu 2, 3 us 4 (10 s)                       eu (2, 3), us (1, 4)
    2     2 us 5 (20 s)                                       eu (1, 1), us (2, 9)
    3     tombstone of 1 (30 s)                               eu: tombstone
    4     1 us 1 (40 s); 3 eu 7 at 5 s (late)                 us (3, 10)

The late record is a ``late`` dead letter and moves nobody. Hand-written expectations, and
the reference evaluator step by step (S19: the same upserts, here in the same steps).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from table_steps import clock_ms, internal_dead_letters, run_steps

from app.circuit.reference import StepResult, evaluate
from app.connectors.output_reader import OutputReader
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.planner.compose import compose

# Slow (minutes on 2 cores with the broker's start): the latest row per key and the count
# over it run in two queries, one after the other, every step (ADR 0023).
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROGRAM = """
CREATE TABLE users (
  user_id BIGINT,
  user_region STRING,
  pageviews BIGINT,
  ts TIMESTAMP(3) METADATA FROM 'timestamp',
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND,
  PRIMARY KEY (user_id) NOT ENFORCED
) WITH ('connector' = 'upsert-kafka', 'topic' = '{users}',
        'key.format' = 'json', 'value.format' = 'json');

CREATE TABLE per_region (
  user_region STRING, users BIGINT, pv BIGINT,
  PRIMARY KEY (user_region) NOT ENFORCED
) WITH ('connector' = 'upsert-kafka', 'topic' = '{per_region}',
        'key.format' = 'json', 'value.format' = 'json');

INSERT INTO per_region
SELECT user_region, COUNT(*), SUM(pageviews) FROM users GROUP BY user_region;
"""

#: An upsert of an output: (region, (users, pv)), None for a tombstone.
Upsert = tuple[str, tuple[int, int] | None]


def _record(user: int, seconds: int, region: str | None,
            views: int = 0) -> tuple[str, bytes, bytes | None, int]:
    """A record as Flink's upsert-kafka writer produces it ('value.fields-include' =
    'ALL'), with its Kafka timestamp ``seconds`` after 9:00 (a recent time: the broker's
    retention would delete records of 1970); a tombstone without a region."""
    value = None if region is None else json.dumps(
        {"user_id": user, "user_region": region, "pageviews": views}).encode()
    return ("record", json.dumps({"user_id": user}).encode(), value,
            clock_ms(f"9:00:{seconds:02d}"))


STEPS: list[dict[str, list[Any]]] = [
    {"users": [_record(1, 10, "eu", 1), _record(2, 10, "eu", 2), _record(3, 10, "us", 4)]},
    {"users": [_record(2, 20, "us", 5)]},
    {"users": [_record(1, 30, None)]},
    {"users": [_record(1, 40, "us", 1), _record(3, 5, "eu", 7)]},
]


def _upserts(pairs: list[tuple[dict[str, Any] | None, dict[str, Any] | None]]
             ) -> list[Upsert]:
    return sorted((key["user_region"], None if value is None else (value["users"],
                                                                  value["pv"]))
                  for key, value in pairs if key is not None)


def _oracle(results: list[StepResult]) -> list[list[Upsert]]:
    return [_upserts([(r.key, r.value) for r in result.outputs["per_region"]])
            for result in results]


def test_s18_a_count_per_region_of_an_upsert_kafka_table_follows_each_keys_latest_row(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {name: unique_topic(name) for name in ("users", "per_region")}
    kafka.create_topic(topics["users"], partitions=2, config={"cleanup.policy": "compact"})
    program = tmp_path / "users.sql"
    program.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(program)
    assert circuit.table("users").changelog
    composed = compose(circuit)
    assert composed.refused == ()
    assert "users.latest" in composed.boundaries
    output = circuit.view("per_region").output
    assert output is not None
    reader = OutputReader("per_region", output)
    per_step: list[list[Upsert]] = []
    seen = 0

    def after_step() -> None:
        nonlocal seen
        records = [(reader.key(m.key()), reader.value(m.value()))
                   for m in read_topic(kafka.conf(), topics["per_region"])]
        per_step.append(_upserts(records[seen:]))
        seen = len(records)

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS, after_step=after_step)
    assert per_step == [
        [("eu", (2, 3)), ("us", (1, 4))],
        [("eu", (1, 1)), ("us", (2, 9))],
        [("eu", None)],
        [("us", (3, 10))],
    ]
    dead = read_topic(kafka.conf(), f"{topics['users']}.dlq")
    assert [dict(m.headers())["tidemark.error.reason"] for m in dead] == [b"late"]
    assert internal_dead_letters(kafka, tmp_path / "ck", "users.latest") == []
    assert _oracle(evaluate(circuit, inputs)) == per_step
