"""Windowed aggregation through the real broker and Spark, one view per EMIT form (S11-S13).

TUMBLE 1 minute, LATENESS 10 s, COUNT/SUM per user; one ``--once`` run per step:

    step  rows (second, user, n)         w after   complete windows
    1     (5,a,1) (20,a,2) (30,b,5)      20        -
    2     (50,a,3) (65,a,1)              55        -
    3     (80,b,1)                       70        [0,60)
    4     (200,c,1)                      190       [60,120)
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service

pytestmark = pytest.mark.e2e

BASE_MS = 1_700_000_040_000  # a minute boundary
S = 1000

PROGRAM = """
CREATE TABLE clicks (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr  VARCHAR NOT NULL,
    n    INT NOT NULL
) WITH ('topic' = '{topic}');

CREATE VIEW per_user WITH ('topic' = '{upsert}') AS
SELECT window_start, window_end, usr, COUNT(*) AS c, SUM(n) AS s
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr;

CREATE VIEW per_user_stream WITH ('topic' = '{changelog}') AS
SELECT window_start, window_end, usr, COUNT(*) AS c, SUM(n) AS s
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr
EMIT STREAM;

CREATE VIEW per_user_events WITH ('topic' = '{events}', 'format' = 'changelog',
                                  'encoding' = 'debezium-json') AS
SELECT window_start, window_end, usr, COUNT(*) AS c, SUM(n) AS s
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr
EMIT STREAM;

CREATE VIEW per_user_final WITH ('topic' = '{append}', 'format' = 'append') AS
SELECT window_start, window_end, usr, COUNT(*) AS c, SUM(n) AS s
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr
EMIT AFTER WATERMARK;
"""


def _w(start_s: int) -> tuple[int, int]:
    return (start_s, start_s + 60)


def _iso_ms(text: str) -> int:
    """A JSON output's TIMESTAMP (ISO-8601 UTC with milliseconds) as epoch ms."""
    import datetime as dt

    return int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def test_each_emit_form_and_encoding_s12_s13(kafka: Any, unique_topic: Any, tmp_path: Path,
                                               spark: Any) -> None:
    t = {k: unique_topic(k) for k in ("in", "upsert", "changelog", "events", "append")}
    kafka.create_topic(t["in"], partitions=2)
    program = tmp_path / "clicks.sql"
    program.write_text(PROGRAM.format(topic=t["in"], upsert=t["upsert"],
                                      changelog=t["changelog"], events=t["events"],
                                      append=t["append"]))
    circuit = compile_program(program)
    codec = AvroCodec(circuit.table("clicks").avro_schema)
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    service = Service(circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2))
    steps = [
        [(5, "a", 1), (20, "a", 2), (30, "b", 5)],
        [(50, "a", 3), (65, "a", 1)],
        [(80, "b", 1)],
        [(200, "c", 1)],
    ]
    for rows in steps:
        for i, (sec, usr, n) in enumerate(rows):
            producer.produce(t["in"], value=codec.encode({"ts": BASE_MS + sec * S, "usr": usr,
                                                          "n": n}), partition=i % 2)
        assert producer.flush(30) == 0
        service.start(once=True)
        service.wait(timeout_seconds=300)

    def rows_of(view: str, topic: str) -> list[tuple[Any, ...]]:
        out = circuit.view(view).output
        assert out is not None
        value_codec = AvroCodec(out.value_schema)
        records = []
        for msg in read_topic(kafka.conf(), topic):
            value = value_codec.decode(msg.value()) if msg.value() is not None else None
            records.append((msg, value))
        return records  # type: ignore[return-value]

    def window(v: dict[str, Any]) -> tuple[int, int]:
        return ((v["window_start"] - BASE_MS) // S, (v["window_end"] - BASE_MS) // S)

    # Default EMIT, upsert: the last value per key is the table's final content (compaction).
    upsert = circuit.view("per_user").output
    assert upsert is not None and upsert.format == "upsert"
    key_codec = AvroCodec(upsert.key_schema or {})
    final: dict[tuple[Any, ...], tuple[int, int]] = {}
    updates: dict[tuple[Any, ...], list[tuple[int, int]]] = defaultdict(list)
    for msg, value in rows_of("per_user", t["upsert"]):
        key = key_codec.decode(msg.key())
        k = (window(key), key["usr"])
        assert value is not None
        final[k] = (value["c"], value["s"])
        updates[k].append((value["c"], value["s"]))
    assert final == {
        (_w(0), "a"): (3, 6), (_w(0), "b"): (1, 5), (_w(60), "a"): (1, 1),
        (_w(60), "b"): (1, 1), (_w(180), "c"): (1, 1),
    }
    assert updates[(_w(0), "a")] == [(2, 3), (3, 6)], "one update per step that changed it"

    # EMIT STREAM, changelog: retraction/insertion pairs with increasing ver (paper listing 9).
    changes: dict[tuple[Any, ...], list[tuple[bool, int, int, int]]] = defaultdict(list)
    for _msg, value in rows_of("per_user_stream", t["changelog"]):
        assert value is not None
        changes[(window(value), value["usr"])].append(
            (value["undo"], value["c"], value["s"], value["ver"]))
    for group in changes.values():
        group.sort(key=lambda change: change[3])
    assert changes[(_w(0), "a")] == [(False, 2, 3, 0), (True, 2, 3, 1), (False, 3, 6, 2)]
    assert changes[(_w(0), "b")] == [(False, 1, 5, 0)]
    assert changes[(_w(60), "a")] == [(False, 1, 1, 0)]

    # The same changes as Debezium change events ('encoding' = 'debezium-json'): a create
    # per insertion, a delete of the row per retraction, in each key's order, at the step's
    # ptime (one partition per key keeps a key's events in order).
    import json

    events: dict[tuple[Any, ...], list[tuple[str, int, int, int]]] = defaultdict(list)
    for msg in read_topic(kafka.conf(), t["events"]):
        event = json.loads(msg.value())
        row = event["before"] if event["op"] == "d" else event["after"]
        assert json.loads(msg.key()) == {k: row[k] for k in ("window_start", "window_end", "usr")}
        start = (int(_iso_ms(row["window_start"])) - BASE_MS) // S
        events[(_w(start), row["usr"])].append((event["op"], row["c"], row["s"],
                                                event["ts_ms"]))
    assert [e[:3] for e in events[(_w(0), "a")]] == [("c", 2, 3), ("d", 2, 3), ("c", 3, 6)]
    assert [e[:3] for e in events[(_w(0), "b")]] == [("c", 1, 5)]
    ptimes = [e[3] for e in events[(_w(0), "a")]]
    assert ptimes[0] < ptimes[1] == ptimes[2], "the update's two events carry its step's ptime"

    # EMIT AFTER WATERMARK: exactly one row per window, only once it is complete (listing 12).
    finals = sorted((window(v), v["usr"], v["c"], v["s"])
                    for _m, v in rows_of("per_user_final", t["append"]) if v is not None)
    assert finals == [(_w(0), "a", 3, 6), (_w(0), "b", 1, 5), (_w(60), "a", 1, 1),
                      (_w(60), "b", 1, 1)]
