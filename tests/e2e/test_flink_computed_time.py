"""A Flink program whose event time is computed from an epoch-millis field, with
CURRENT_WATERMARK dropping rows at or below the watermark, through the real broker and Spark
(SPEC L1, L2, S3, S5, S6, S7; docs/porting-from-flink.md).

``ts AS TO_TIMESTAMP_LTZ(epoch_ms, 3)`` with ``WATERMARK FOR ts AS ts - INTERVAL '5'
SECOND``, and ``cost AS price * quantity``; the INSERT keeps the rows above the watermark
their step started with (Flink's idiom). T is a multiple of 10 s, ten minutes ago.

    step  rows (id: epoch_ms - T)                  dead letters          w(t-1)   written
    1     1: 10 s, 2: NULL, 3: 2 s                 invalid (2: no ts)    NULL     1, 3
    2     4: 1 s, 5: 5 s, 6: 20 s                  late (4: below 5 s)   5 s      6 (5: not above)
    3     7: 16 s                                  -                     15 s     7

Checked against these hand-written rows and against the reference evaluator.
"""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from table_steps import frozen, oracle_values, run_steps, values_written

from app.circuit.reference import evaluate
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_text

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE orders (
  id BIGINT NOT NULL,
  epoch_ms BIGINT,
  price DECIMAL(10, 2),
  quantity INT,
  ts AS TO_TIMESTAMP_LTZ(epoch_ms, 3),
  cost AS price * quantity,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = '{orders}', 'format' = 'avro',
        'dead_letter.connect-headers' = 'true');

CREATE TABLE fresh (
  id BIGINT, ts TIMESTAMP(3), cost DECIMAL(21, 2), wm TIMESTAMP(3)
) WITH ('connector' = 'kafka', 'topic' = '{fresh}', 'format' = 'avro');

INSERT INTO fresh
SELECT id, ts, cost, CURRENT_WATERMARK(ts) FROM orders
WHERE CURRENT_WATERMARK(ts) IS NULL OR ts > CURRENT_WATERMARK(ts);
"""


def _order(ident: int, at: int | None, price: str = "2.50", quantity: int = 2) -> dict[str, Any]:
    return {"id": ident, "epoch_ms": at, "price": Decimal(price), "quantity": quantity}


def test_s5_computed_event_time_and_current_watermark_on_spark_as_in_the_reference(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {name: unique_topic(name) for name in ("orders", "fresh")}
    kafka.create_topic(topics["orders"], partitions=2)
    circuit = compile_text(str(tmp_path / "p.sql"), PROGRAM.format(**topics))
    t0 = (int(time.time() * 1000) // 10_000) * 10_000 - 600_000
    steps = [
        {"orders": [_order(1, t0 + 10_000), _order(2, None), _order(3, t0 + 2_000, "1.25", 4)]},
        {"orders": [_order(4, t0 + 1_000), _order(5, t0 + 5_000), _order(6, t0 + 20_000)]},
        {"orders": [_order(7, t0 + 16_000, "0.10", 3)]},
    ]
    reports, inputs = run_steps(kafka, tmp_path, circuit, topics, steps)
    results = evaluate(circuit, inputs)

    data_steps = [r for r in reports if r.step is not None]
    assert [{k: n for k, n in r.dead_letters.items() if n} for r in data_steps] == [
        {"invalid": 1}, {"late": 1}, {}]
    assert [r.waterlines["orders"]["ts"] for r in results] == [
        t0 + 5_000, t0 + 15_000, t0 + 15_000]
    assert [r.waterlines["ts"] for r in data_steps] == [
        t0 + 5_000, t0 + 15_000, t0 + 15_000]

    written = values_written(kafka, circuit, "fresh", topics["fresh"])
    assert written == oracle_values(results, "fresh")
    assert sorted(dict(v)["id"] for v in written) == [1, 3, 6, 7]
    assert frozen({"id": 3, "ts": t0 + 2_000, "cost": Decimal("5.00"), "wm": None}) in written
    assert frozen({"id": 6, "ts": t0 + 20_000, "cost": Decimal("5.00"),
                   "wm": t0 + 5_000}) in written
    assert frozen({"id": 7, "ts": t0 + 16_000, "cost": Decimal("0.30"),
                   "wm": t0 + 15_000}) in written

    dead = [dict(m.headers()) for m in read_topic(kafka.conf(), topics["orders"] + ".dlq")]
    assert sorted(h["tidemark.error.reason"].decode() for h in dead) == ["invalid", "late"]
    invalid = next(h for h in dead if h["tidemark.error.reason"] == b"invalid")
    assert invalid["tidemark.error.message"].decode() == (
        "column ts is NOT NULL but TO_TIMESTAMP_LTZ(epoch_ms, 3) is NULL for the record")
    assert "__connect.errors.exception.message" in invalid
