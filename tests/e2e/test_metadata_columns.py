"""Columns read from the Kafka record (``METADATA FROM ...``) through the real broker and Spark
(SPEC L1, L2, S3, S5, S6, S12).

The table's event time is the Kafka timestamp the producer set on each record
(``produce(timestamp=...)``); its partition, offset, key and one header are columns too. Two
views: every row with its metadata (append), and a 10-second tumbling count on the Kafka
timestamp, written once final (EMIT AFTER WATERMARK). T is a multiple of 10 s, ten minutes
before the test starts; LATENESS is 5 s.

    step  records (Kafka timestamp, id, key, header source)   dead letters   w after   count
    1     T+1 s 1 a web, T+2 s 2 (no key) app, T+12 s 3 b     -              T+7 s     -
    2     T+1 s 4 c web (below T+7 s), T+21 s 5 d web         late (id 4)    T+16 s    [T, T+10) 2

Outputs are checked against hand-written expectations and against the reference evaluator fed
the rows the broker gave each record (its offset from the delivery report).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from app.circuit.reference import StepInput, evaluate
from app.connectors.avro_codec import AvroCodec
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_text
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE clicks (
    id  BIGINT    NOT NULL,
    ts  TIMESTAMP NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '5' SECOND,
    p   INT       NOT NULL METADATA FROM 'partition',
    o   BIGINT    NOT NULL METADATA FROM 'offset',
    k   VARCHAR   METADATA FROM 'key',
    src VARCHAR   METADATA FROM 'headers.source'
) WITH ('topic' = '{clicks}');

CREATE VIEW seen WITH ('topic' = '{seen}') AS SELECT id, ts, p, o, k, src FROM clicks;

CREATE VIEW counts WITH ('topic' = '{counts}', 'format' = 'append') AS
SELECT window_start, window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;
"""


def _freeze(value: Any) -> Any:
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


def _written(kafka: Any, circuit: Any, view: str, topic: str) -> Counter[Any]:
    output = circuit.view(view).output
    codec = AvroCodec(output.value_schema)
    return Counter(
        (_freeze(codec.decode(m.value())), dict(m.headers())["tidemark.waterline"].decode())
        for m in read_topic(kafka.conf(), topic)
    )


def _oracle(results: Any, view: str) -> Counter[Any]:
    return Counter(
        (_freeze(r.value), format_time_value(r.waterline, "ms"))
        for result in results
        for r in result.outputs[view]
    )


def test_the_kafka_timestamp_is_the_lateness_column_l1_l2_s5_s6(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    from confluent_kafka import Producer

    topics = {name: unique_topic(name) for name in ("clicks", "seen", "counts")}
    kafka.create_topic(topics["clicks"], partitions=2)
    circuit = compile_text(str(tmp_path / "p.sql"), PROGRAM.format(**topics))
    table = circuit.table("clicks")
    assert [f["name"] for f in table.avro_schema["fields"]] == ["id"]
    values = AvroCodec(table.avro_schema)

    t0 = (int(time.time() * 1000) // 10_000) * 10_000 - 600_000
    # (offset into T in ms, id, key, header source, partition)
    steps = [
        [(1_000, 1, "a", "web", 0), (2_000, 2, None, "app", 1), (12_000, 3, "b", None, 0)],
        [(1_000, 4, "c", "web", 1), (21_000, 5, "d", "web", 0)],
    ]
    producer = Producer({**kafka.conf(), "log_level": 3})
    reports: list[StepReport] = []
    service = Service(
        circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2), on_step=reports.append
    )
    inputs: list[StepInput] = []
    for records in steps:
        rows: list[dict[str, Any]] = []
        for delta, ident, key, source, partition in records:
            delivered: list[Any] = []
            producer.produce(
                topics["clicks"],
                key=None if key is None else key.encode(),
                value=values.encode({"id": ident}),
                partition=partition,
                timestamp=t0 + delta,
                headers=[("trace", b"x")] + ([("source", source.encode())] if source else []),
                on_delivery=lambda err, msg, into=delivered: into.append((err, msg)),
            )
            assert producer.flush(30) == 0
            [(error, message)] = delivered
            assert error is None
            row = {"id": ident, "ts": t0 + delta, "p": partition, "o": message.offset(),
                   "k": key, "src": source}
            rows.append(row)
        inputs.append(StepInput(rows={"clicks": rows}))
        service.start(once=True)
        service.wait(timeout_seconds=300)
    results = evaluate(circuit, inputs)

    data_steps = [r for r in reports if r.step is not None]
    assert [{k: n for k, n in r.dead_letters.items() if n} for r in data_steps] == [
        {},
        {"late": 1},
    ]
    assert [r.waterlines["clicks"]["ts"] for r in results] == [t0 + 7_000, t0 + 16_000]

    # Every accepted row carries its record's metadata.
    seen = _written(kafka, circuit, "seen", topics["seen"])
    assert seen == _oracle(results, "seen")
    shown = sorted((dict(value) for value, _ in seen), key=lambda r: r["id"])
    assert [(r["id"], r["ts"] - t0, r["p"], r["k"], r["src"]) for r in shown] == [
        (1, 1_000, 0, "a", "web"),
        (2, 2_000, 1, None, "app"),
        (3, 12_000, 0, "b", None),
        (5, 21_000, 0, "d", "web"),
    ]
    assert [r["o"] for r in shown] == [inputs[0].rows["clicks"][i]["o"] for i in (0, 1, 2)] + [
        inputs[1].rows["clicks"][1]["o"]
    ]

    # The window [T, T+10 s) closes once w(ts) = T+16 s passes its end: ids 1 and 2.
    # The view's first time attribute is window_start, so its header is S10's start
    # waterline: the start of w(ts)'s window, T+10 s.
    counts = _written(kafka, circuit, "counts", topics["counts"])
    assert counts == _oracle(results, "counts")
    assert counts == Counter(
        {(_freeze({"window_start": t0, "window_end": t0 + 10_000, "n": 2}),
          format_time_value(t0 + 10_000, "ms")): 1}
    )

    # The record with an old Kafka timestamp is a late dead letter, kept as it came.
    [dead] = read_topic(kafka.conf(), table.dead_letter_topic)
    headers = dict(dead.headers())
    assert headers["tidemark.error.reason"] == b"late"
    assert headers["tidemark.late.column"] == b"ts"
    assert headers["tidemark.late.value"].decode() == format_time_value(t0 + 1_000, "ms")
    assert headers["tidemark.late.waterline"].decode() == format_time_value(t0 + 7_000, "ms")
    assert dead.key() == b"c" and values.decode(dead.value()) == {"id": 4}
    assert headers["source"] == b"web" and headers["trace"] == b"x"
