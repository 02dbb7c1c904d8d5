"""A running pipeline fed by a real broker, observed through a real Prometheus.

``tidemark run`` (the real CLI, in its own process) reads a program with a stateless and a
windowed view from a real Kafka broker (``app.local_kafka``); a real Prometheus scrapes its
/metrics every second; the checks go through Prometheus' HTTP query API:

- ``tidemark_waterline_seconds`` equals the waterline the test computes (SPEC S3: the largest
  event time minus the LATENESS; no clock involved);
- the late counter equals the late dead letters read back from the dead-letter topic (S6);
- state rows are reported per view: the windowed view has a series, stateless views none (S11).
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus import PrometheusServer, prometheus_server  # noqa: F401

from app.local_kafka import LocalKafka

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = fastavro.parse_schema(json.loads((ROOT / "schemas/purchase.avsc").read_text()))
LATENESS_MS = 60_000
T0 = 1_763_600_000_000 - 1_763_600_000_000 % 60_000  # a minute boundary
PROGRAM = """
CREATE TABLE purchase (
    date_time   TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    credit_card BIGINT NOT NULL,
    amount      DECIMAL(10, 2)
) WITH ('topic' = '{topic}', 'format' = 'avro', 'dead_letter' = '{topic}.dlq');

CREATE VIEW large_purchase WITH ('topic' = '{topic}.large', 'format' = 'append') AS
SELECT date_time, credit_card, amount FROM purchase WHERE amount >= 100;

CREATE VIEW per_minute WITH ('topic' = '{topic}.per_minute') AS
SELECT window_start, window_end, COUNT(*) AS purchases, SUM(amount) AS total
FROM TABLE(TUMBLE(TABLE purchase, DESCRIPTOR(date_time), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end;
"""


def avro(date_time_ms: int, card: int, amount: str) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, SCHEMA, {
        "date_time": date_time_ms, "credit_card": card, "amount": Decimal(amount)})
    return out.getvalue()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def read_all(conf: dict[str, str], topic: str) -> list[Any]:
    """Every record of ``topic`` (all partitions, from the start to the current end)."""
    consumer = Consumer({**conf, "group.id": f"t-{uuid.uuid4()}", "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: list[Any] = []
        deadline = time.monotonic() + 60
        while sum(ends.values()) > len(records) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                records.append(msg)
        return records
    finally:
        consumer.close()


@pytest.fixture
def kafka() -> Iterator[LocalKafka]:
    with LocalKafka() as broker:
        yield broker


# In the slow suite (CI's budget); CI scrapes a real Prometheus in tests/e2e/test_prometheus.py.
# Run: `pytest -m slow -k prometheus_sees`.
@pytest.mark.slow
def test_prometheus_sees_the_waterline_late_counter_and_state_of_a_running_pipeline(
    kafka: LocalKafka,
    tmp_path: Path,
    prometheus_server: Callable[..., PrometheusServer],  # noqa: F811
) -> None:
    conf = {"bootstrap.servers": kafka.bootstrap_servers, **kafka.client_config()}
    topic = f"purchases-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(conf)
    for future in admin.create_topics([NewTopic(topic, num_partitions=2)]).values():
        future.result(timeout=30)
    program = tmp_path / "purchases.sql"
    program.write_text(PROGRAM.format(topic=topic))
    producer = Producer(conf)

    def send(rows: list[tuple[int, int, str]]) -> None:
        for date_time, card, amount in rows:
            producer.produce(topic, value=avro(date_time, card, amount), partition=card % 2)
        assert producer.flush(30) == 0

    # Step(s) 1: ten minutes of purchases in order; the waterline ends at T0 + 10 min - 1 min.
    first = [(T0 + i * 6_000, i, "150.00" if i % 5 == 0 else "12.50") for i in range(100)]
    send(first)

    port = free_port()
    env = {**os.environ, "TIDEMARK_LOG_FORMAT": "json", "PYSPARK_PYTHON": sys.executable}
    service = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "run", str(program),
         "--bootstrap-servers", kafka.bootstrap_servers,
         "--checkpoint", str(tmp_path / "checkpoint"), "--metrics-port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=(tmp_path / "tidemark.log").open("wb"),
    )
    try:
        prom = prometheus_server([f"127.0.0.1:{port}"])

        def running() -> bool:
            return service.poll() is None

        input_total = 'sum(tidemark_input_records_total{table="purchase"})'
        prom.wait_for(f"{input_total} == {len(first)}", timeout_seconds=180,
                      alive=running)

        # Later steps: 7 rows far below the waterline (late, SPEC S5) and 20 newer ones.
        late = [(T0 + 60_000 + i * 1_000, 1000 + i, "99.00") for i in range(7)]
        newer = [(T0 + 600_000 + i * 3_000, 2000 + i, "20.00") for i in range(20)]
        send(late + newer)
        prom.wait_for(f"{input_total} == {len(first) + len(late) + len(newer)}",
                      timeout_seconds=120, alive=running)

        expected_waterline_ms = max(t for t, _, _ in first + late + newer) - LATENESS_MS
        waterline = prom.wait_for(
            'tidemark_waterline_seconds{table="purchase",column="date_time"}',
            lambda r: bool(r) and float(r[0]["value"][1]) == expected_waterline_ms / 1000,
            timeout_seconds=30, alive=running,
        )
        assert float(waterline[0]["value"][1]) == expected_waterline_ms / 1000

        dead_letters = read_all(conf, f"{topic}.dlq")
        reasons = [dict(m.headers() or [])["tidemark.error.reason"].decode()
                   for m in dead_letters]
        late_in_topic = reasons.count("late")
        assert late_in_topic == len(late)
        late_counter = prom.values(
            'tidemark_dead_letter_records_total{table="purchase",reason="late"}', "table")
        assert late_counter == {("purchase",): float(late_in_topic)}

        state = prom.wait_for("tidemark_state_rows > 0", timeout_seconds=60, alive=running)
        assert {r["metric"]["view"] for r in state} == {"per_minute"}
        assert prom.values("tidemark_query_up", "query") == {("tidemark-purchase",): 1.0}

        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=120) == 0
    finally:
        if service.poll() is None:
            service.kill()
            service.wait(timeout=30)
        if service.returncode != 0:
            sys.stderr.write((tmp_path / "tidemark.log").read_text(errors="replace")[-5000:])
