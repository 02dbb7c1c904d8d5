"""LATENESS on a view column through the real broker and Spark (SPEC L2, the decoding case).

pipelines/decoded_purchases.sql with test topics: the event time arrives as VARCHAR, a local
view CASTs it, ``LATENESS decoded_purchase.date_time INTERVAL 1 HOUR`` gates the view's rows.
One ``--once`` run per step (times on 2024-01-01 unless marked +1d):

    step  rows (time, card, amount)                     view w before   late        w after
    1     10:00 1 50, 09:30 2 150                       -inf            -           09:00
    2     08:59 1 20, 09:00 2 10, +1d 03:00 1 120       09:00           08:59       +1d 02:00
    3     23:00 2 30, +1d 05:00 1 200                   +1d 02:00       23:00       +1d 04:00

The table itself has no LATENESS, so every late row is late by the view's waterline only; it
becomes a dead letter of the table with the original bytes. Everything is compared with the
reference evaluator: dead letters, waterlines, outputs and their S14 headers.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from app.circuit.reference import StepInput, evaluate
from app.connectors.avro_codec import AvroCodec
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE purchase_raw (
    date_time   VARCHAR NOT NULL,
    credit_card BIGINT  NOT NULL,
    amount      DECIMAL(10, 2)
) WITH ('topic' = '{raw}', 'dead_letter' = '{dlq}');

CREATE LOCAL VIEW decoded_purchase AS
SELECT CAST(date_time AS TIMESTAMP) AS date_time, credit_card, amount
FROM purchase_raw;

LATENESS decoded_purchase.date_time INTERVAL 1 HOUR;

CREATE VIEW daily_card_spend WITH ('topic' = '{daily}') AS
SELECT window_start, window_end, credit_card, SUM(amount) AS total, COUNT(*) AS purchases
FROM TABLE(TUMBLE(TABLE decoded_purchase, DESCRIPTOR(date_time), INTERVAL '1' DAY))
GROUP BY window_start, window_end, credit_card;

CREATE VIEW large_purchase WITH ('topic' = '{large}', 'format' = 'append') AS
SELECT date_time, credit_card, amount FROM decoded_purchase WHERE amount >= 100;
"""

STEPS: list[list[tuple[str, int, str]]] = [
    [("2024-01-01 10:00:00", 1, "50.00"), ("2024-01-01 09:30:00", 2, "150.00")],
    [
        ("2024-01-01 08:59:00", 1, "20.00"),
        ("2024-01-01 09:00:00", 2, "10.00"),
        ("2024-01-02 03:00:00", 1, "120.00"),
    ],
    [("2024-01-01 23:00:00", 2, "30.00"), ("2024-01-02 05:00:00", 1, "200.00")],
]


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def test_view_lateness_gates_decoded_rows_dead_letters_keep_original_bytes_l2_s6_s14(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    t = {k: unique_topic(k) for k in ("raw", "dlq", "daily", "large")}
    kafka.create_topic(t["raw"], partitions=2)
    program = tmp_path / "decoded_purchases.sql"
    program.write_text(PROGRAM.format(**t))
    circuit = compile_program(program)
    table = circuit.table("purchase_raw")
    codec = AvroCodec(table.avro_schema)
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    reports: list[StepReport] = []
    service = Service(
        circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2), on_step=reports.append
    )
    sent: dict[tuple[str, int], tuple[bytes, bytes]] = {}
    inputs: list[StepInput] = []
    for rows in STEPS:
        dicts = [
            {"date_time": when, "credit_card": card, "amount": Decimal(amount)}
            for when, card, amount in rows
        ]
        for i, row in enumerate(dicts):
            key = f"{row['date_time']}/{row['credit_card']}".encode()
            value = codec.encode(row)
            sent[(row["date_time"], row["credit_card"])] = (key, value)
            producer.produce(
                t["raw"], key=key, value=value, partition=i % 2, headers=[("origin", b"pos")]
            )
        assert producer.flush(30) == 0
        inputs.append(StepInput(rows={"purchase_raw": dicts}))
        service.start(once=True)
        service.wait(timeout_seconds=300)
    expected = evaluate(circuit, inputs)

    # S3 for the view: the step sink keeps w(decoded_purchase.date_time) with the table's.
    data_steps = [r for r in reports if r.step is not None]
    assert [r.waterlines["decoded_purchase.date_time"] for r in data_steps] == [
        e.waterlines["decoded_purchase"]["date_time"] for e in expected
    ]
    assert [r.dead_letters.get("late", 0) for r in data_steps] == [
        len(e.dead_letters) for e in expected
    ] == [0, 1, 1]

    # S6: a late view row is a dead letter of the table, original key/value/headers unchanged.
    want = {
        (
            d.row["date_time"],
            d.row["credit_card"],
            d.column,
            format_time_value(d.value, "ms"),
            format_time_value(d.waterline, "ms"),
        )
        for e in expected
        for d in e.dead_letters
    }
    got = set()
    for msg in read_topic(kafka.conf(), t["dlq"]):
        headers = {k: v.decode() for k, v in msg.headers()}
        row = codec.decode(msg.value())
        assert (msg.key(), msg.value()) == sent[(row["date_time"], row["credit_card"])]
        assert headers["origin"] == "pos"
        assert headers["tidemark.error.reason"] == "late"
        assert headers["tidemark.table"] == "purchase_raw"
        assert headers["tidemark.source.topic"] == t["raw"]
        got.add(
            (
                row["date_time"],
                row["credit_card"],
                headers["tidemark.late.column"],
                headers["tidemark.late.value"],
                headers["tidemark.late.waterline"],
            )
        )
    assert got == want
    assert {c for _, _, c, _, _ in got} == {"decoded_purchase.date_time"}

    # S8/S12/S14: every record of both views, with its waterline header, as the oracle says.
    for view, topic in (("daily_card_spend", t["daily"]), ("large_purchase", t["large"])):
        out = circuit.view(view).output
        assert out is not None
        values = AvroCodec(out.value_schema)
        keys = AvroCodec(out.key_schema) if out.key_schema else None
        records = Counter(
            (
                _freeze(keys.decode(m.key())) if keys and m.key() is not None else None,
                _freeze(values.decode(m.value())) if m.value() is not None else None,
                dict(m.headers())["tidemark.waterline"].decode(),
            )
            for m in read_topic(kafka.conf(), topic)
        )
        oracle = Counter(
            (_freeze(r.key), _freeze(r.value), format_time_value(r.waterline, "ms"))
            for e in expected
            for r in e.outputs[view]
        )
        assert records == oracle, view
        assert records, view
