"""``tidemark demo``: the whole product on one machine, checked by eye and by code.

It starts a real Kafka broker (KRaft, local jars), creates the ``purchases`` topic, produces
out-of-order purchases for a while (a few deliberately late, a few malformed), runs
``pipelines/purchases.sql`` on local Spark the way ``tidemark run`` does, shows progress per
step, and ends with a summary whose counts must add up: records in = accepted + late +
malformed, and what Tidemark says it wrote equals what a consumer reads back from the output
and dead-letter topics.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable

from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.local_kafka import LocalKafka
from app.runtime.step_sink import StepReport

__all__ = ["run_demo"]

PROGRAM = Path(__file__).resolve().parent.parent / "pipelines" / "purchases.sql"
HOUR_MS = 3_600_000


class _Generator:
    """Out-of-order purchases: event time runs 1 minute per second, jitter within the
    1-hour LATENESS, a share sent 2-3 hours behind (late once the waterline moved)."""

    def __init__(self, conf: dict[str, str], rate: int, late_fraction: float, seed: int) -> None:
        import json

        from confluent_kafka import Producer

        schema = json.loads((PROGRAM.parent.parent / "schemas" / "purchase.avsc").read_text())
        self.codec = AvroCodec(schema)
        self.producer = Producer({**conf, "linger.ms": 5, "log_level": 3})
        self.rate, self.late_fraction = rate, late_fraction
        self.random = random.Random(seed)
        self.sent = self.late_sent = self.malformed_sent = 0
        self.stop = threading.Event()
        self.start_ms = (int(time.time() * 1000) // HOUR_MS - 24) * HOUR_MS

    def run(self, seconds: float) -> None:
        started = time.monotonic()
        while not self.stop.is_set() and time.monotonic() - started < seconds:
            tick = time.monotonic()
            clock = self.start_ms + int((tick - started) * 60_000)
            for _ in range(max(1, self.rate // 10)):
                self._one(clock)
            self.producer.poll(0)
            time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
        self.producer.flush(30)

    def _one(self, clock: int) -> None:
        r = self.random
        card = r.randrange(1000, 1100)
        if r.random() < 0.005:
            self.producer.produce("purchases", key=str(card).encode(), value=b"\x00not-avro")
            self.malformed_sent += 1
        else:
            if r.random() < self.late_fraction:
                event = clock - HOUR_MS * 2 - r.randrange(HOUR_MS)
                self.late_sent += 1
            else:
                event = clock - r.randrange(30 * 60_000)
            amount = Decimal(r.randrange(100, 30_000)) / 100
            value = self.codec.encode({"date_time": event, "credit_card": card, "amount": amount})
            self.producer.produce("purchases", key=str(card).encode(), value=value)
        self.sent += 1


def _warm_up(generator: _Generator, service: Any, timeout_seconds: float = 180) -> None:
    """Send one purchase and wait for its step, so Python workers are up before the clock
    of the generator starts (the first step pays several seconds of start-up)."""
    generator.run(0.05)
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if any(q.lastProgress and q.lastProgress.get("numInputRows") for q in service.queries):
            return
        time.sleep(0.5)


def run_demo(duration_seconds: int, rate: int, late_fraction: float, seed: int) -> bool:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from app.program.compile import compile_program
    from app.runtime.service import Service

    console = Console()
    started = time.monotonic()
    console.rule("[bold]Tidemark demo")
    circuit = compile_program(PROGRAM)
    console.print(
        f"program {PROGRAM.name}: {len(circuit.tables)} table(s), "
        f"{len(circuit.views)} view(s); starting a local Kafka broker..."
    )
    workdir = Path(tempfile.mkdtemp(prefix="tidemark-demo-"))
    totals: dict[str, int] = {"in": 0, "accepted": 0, "steps": 0}
    dead: dict[str, int] = {}
    outputs: dict[str, int] = {}
    last: dict[str, Any] = {}

    def on_step(report: StepReport) -> None:
        totals["in"] += report.records_in
        totals["accepted"] += report.accepted
        totals["steps"] += 1
        for reason, n in report.dead_letters.items():
            dead[reason] = dead.get(reason, 0) + n
        for view, n in report.outputs.items():
            outputs[view] = outputs.get(view, 0) + n
        last["waterline"] = report.waterlines.get("date_time")
        from app.connectors.kafka_sink import format_time_value

        console.print(
            f"step {report.step or '-':>3}  in {report.records_in:>5}  accepted "
            f"{report.accepted:>5}  dead letters {dict(sorted(report.dead_letters.items()))}  "
            f"out {sum(report.outputs.values()):>5}  waterline "
            f"{format_time_value(last['waterline'], 'ms')}  ({report.seconds:.1f}s)"
        )

    try:
        with LocalKafka(workdir=workdir / "kafka") as kafka:
            conf = {"bootstrap.servers": kafka.bootstrap_servers}
            admin = AdminClient({**conf, "log_level": 3})
            admin.create_topics([NewTopic("purchases", 2, 1)])["purchases"].result(30)
            console.print(
                f"broker at {kafka.bootstrap_servers}; generating {rate} purchases/s "
                f"for {duration_seconds}s ({late_fraction:.0%} sent late)"
            )
            generator = _Generator(conf, rate, late_fraction, seed)
            service = Service(
                circuit,
                conf,
                workdir / "checkpoint",
                trigger_interval_ms=1000,
                max_records_per_step=max(500, rate * 2),
                on_step=on_step,
            )
            console.print("starting Spark (local[2]) and the streaming query...")
            service.start()
            _warm_up(generator, service)
            producing = threading.Thread(
                target=generator.run, args=(duration_seconds,), daemon=True
            )
            producing.start()
            producing.join()
            console.print(
                f"generator done: {generator.sent} records sent; waiting for "
                "Tidemark to process them all..."
            )
            deadline = time.monotonic() + 300
            while totals["in"] < generator.sent and time.monotonic() < deadline:
                time.sleep(0.5)
            service.stop()
            service.shutdown()
            output_topic = circuit.view("large_purchase").output.topic  # type: ignore[union-attr]
            table = circuit.table("purchase")
            out_read = len(read_topic(conf, output_topic))
            dlq = read_topic(conf, table.dead_letter_topic)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    dlq_reasons: dict[str, int] = {}
    for msg in dlq:
        reason = dict(msg.headers() or [])["tidemark.error.reason"].decode()
        dlq_reasons[reason] = dlq_reasons.get(reason, 0) + 1
    late, malformed = dead.get("late", 0), dead.get("malformed", 0)
    checks = [
        ("records in = produced", totals["in"] == generator.sent),
        (
            "in = accepted + late + malformed + other dead letters",
            totals["in"] == totals["accepted"] + sum(dead.values()),
        ),
        ("output written = output read back", sum(outputs.values()) == out_read),
        ("dead letters written = read back, per reason", dead == dlq_reasons),
    ]
    summary = RichTable(title="Tidemark demo summary", show_header=True)
    summary.add_column("what")
    summary.add_column("count", justify="right")
    for name, value in [
        ("records produced", generator.sent),
        ("records in (read by Tidemark)", totals["in"]),
        ("accepted", totals["accepted"]),
        ("late -> purchases.dlq", late),
        ("malformed -> purchases.dlq", malformed),
        ("out -> purchases.large (written)", sum(outputs.values())),
        ("purchases.large read back", out_read),
        ("purchases.dlq read back", len(dlq)),
        ("steps", totals["steps"]),
    ]:
        summary.add_row(name, str(value))
    console.print(summary)
    for name, ok in checks:
        console.print(f"  {'[green]ok ' if ok else '[red]FAIL'}[/] {name}")
    console.print(f"demo took {time.monotonic() - started:.0f}s")
    return all(ok for _, ok in checks)
