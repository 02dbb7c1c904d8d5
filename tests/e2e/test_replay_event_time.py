"""A replayed dead letter keeps its event time where the Kafka timestamp is the event time, and
a replay does not send a record refused again round the same loop (SPEC S6, L1).

One program, real broker and Spark: ``clicks`` is timed by ``METADATA FROM 'timestamp'``
(LATENESS 5 s); ``fixes`` reads the correction topic the dead letters are replayed to, with
the same time column, a NOT NULL ``src`` from a header, and the same dead-letter topic. T is a
multiple of 10 s, ten minutes before the test starts.

    step  input                                          dead letters (Kafka timestamp)
    1     clicks: T+1 s id 1, T+12 s id 2 (w: T+7 s)     -
    2     clicks: T+1 s id 3 src web, T+2 s id 4          late id 3 (T+1 s), late id 4 (T+2 s)
    replay the dead-letter topic to fixes (2 written, each with its Kafka timestamp)
    3     fixes: id 3 (ts T+1 s), id 4 (no src)           invalid id 4 (T+2 s), replayed-from

Before dead letters kept their source record's timestamp, id 3 came back with the time its
dead letter was written (about T+10 min) as its event time. Then a second replay of the
whole topic writes nothing: the first two are in the ledger, and id 4's second dead letter
is a replayed record refused again, left out unless ``include_replayed``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.dead_letters.replay import Replay
from app.dead_letters.selection import Selection
from app.program.compile import compile_text
from app.runtime.service import Service

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE clicks (
    id  BIGINT    NOT NULL,
    ts  TIMESTAMP NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '5' SECOND,
    src VARCHAR   METADATA FROM 'headers.source'
) WITH ('topic' = '{clicks}', 'dead_letter' = '{dlq}');

CREATE TABLE fixes (
    id  BIGINT    NOT NULL,
    ts  TIMESTAMP NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '1' DAY,
    src VARCHAR   NOT NULL METADATA FROM 'headers.source'
) WITH ('topic' = '{fixes}', 'dead_letter' = '{dlq}');

CREATE VIEW seen WITH ('topic' = '{seen}') AS SELECT id, ts FROM clicks;

CREATE VIEW fixed WITH ('topic' = '{fixed}') AS SELECT id, ts, src FROM fixes;
"""


@pytest.mark.slow  # three runs of the program: ~85 s, ~110 s with the broker and Spark's start
def test_a_replayed_row_keeps_its_event_time_and_a_refused_replay_is_left_out_s6(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    from confluent_kafka import TIMESTAMP_CREATE_TIME, Producer

    topics = {name: unique_topic(name) for name in ("clicks", "fixes", "dlq", "seen", "fixed")}
    kafka.create_topic(topics["clicks"])
    kafka.create_topic(topics["fixes"])
    circuit = compile_text(str(tmp_path / "p.sql"), PROGRAM.format(**topics))
    values = AvroCodec(circuit.table("clicks").avro_schema)
    dlq = topics["dlq"]

    t0 = (int(time.time() * 1000) // 10_000) * 10_000 - 600_000
    steps = [
        [(1_000, 1, None), (12_000, 2, None)],
        [(1_000, 3, b"web"), (2_000, 4, None)],
    ]
    producer = Producer({**kafka.conf(), "log_level": 3})
    service = Service(circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=1))
    for records in steps:
        for delta, ident, source in records:
            producer.produce(
                topics["clicks"], key=str(ident).encode(), value=values.encode({"id": ident}),
                timestamp=t0 + delta, headers=[("source", source)] if source else None,
            )
        assert producer.flush(30) == 0
        service.start(once=True)
        service.wait(timeout_seconds=300)

    # Each dead letter has its source record's Kafka timestamp, not the time it was written.
    dead = read_topic(kafka.conf(), dlq)
    assert [(m.key(), m.timestamp()) for m in dead] == [
        (b"3", (TIMESTAMP_CREATE_TIME, t0 + 1_000)),
        (b"4", (TIMESTAMP_CREATE_TIME, t0 + 2_000)),
    ]
    assert {dict(m.headers())["tidemark.error.reason"] for m in dead} == {b"late"}

    first = Replay(kafka.conf(), dlq, topics["fixes"], Selection.of(include_replayed=False)).run()
    assert (first.written, first.already, first.replays) == (2, [], [])
    assert [m.timestamp() for m in read_topic(kafka.conf(), topics["fixes"])] == [
        (TIMESTAMP_CREATE_TIME, t0 + 1_000),
        (TIMESTAMP_CREATE_TIME, t0 + 2_000),
    ]

    service.start(once=True)
    service.wait(timeout_seconds=300)

    # The replayed row has the event time of the record it was: T+1 s, to the millisecond.
    fixed = AvroCodec(circuit.view("fixed").output.value_schema)
    rows = [fixed.decode(m.value()) for m in read_topic(kafka.conf(), topics["fixed"])]
    assert rows == [{"id": 3, "ts": t0 + 1_000, "src": "web"}]

    # id 4 has no source header: refused again, a dead letter that names the replay it came
    # from and still has its first record's timestamp.
    again = read_topic(kafka.conf(), dlq)[2:]
    assert len(again) == 1
    headers = dict(again[0].headers())
    assert headers["tidemark.error.reason"] == b"invalid"
    assert headers["tidemark.table"] == b"fixes"
    assert headers["tidemark.replayed-from"] == f"{dlq}/0/{dead[1].offset()}".encode()
    assert again[0].timestamp() == (TIMESTAMP_CREATE_TIME, t0 + 2_000)

    # A full replay sends nothing round again: two in the ledger, one a refused replay.
    second = Replay(kafka.conf(), dlq, topics["fixes"], Selection.of(include_replayed=False)).run()
    assert second.written == 0
    assert [letter.offset for letter, _entry in second.already] == [m.offset() for m in dead]
    assert second.replays == [(0, again[0].offset())]
    assert "left out: 1 dead letter(s) of records a replay wrote" in second.to_text()
    # Asked for, it is written (once: the ledger records it like any other).
    third = Replay(kafka.conf(), dlq, topics["fixes"], Selection.of(include_replayed=True)).run()
    assert (third.written, third.replays) == (1, [])
    assert len(read_topic(kafka.conf(), topics["fixes"])) == 3
