"""``tidemark demo``: the whole product on one machine, checked by eye and by code.

It starts a real Kafka broker (KRaft, local jars), creates the ``purchases`` topic, produces
out-of-order purchases for a while (a few deliberately late, a few malformed), runs
``pipelines/purchases_demo.sql`` (a filter view and a 10-minute window) on local Spark the
way ``tidemark run`` does, shows progress per step, then what a consumer reads: the filter
view's last rows, the windows written once final, and one dead letter with its headers
decoded. It ends with a summary whose counts must add up: records in = accepted + late +
malformed, and what Tidemark says it wrote equals what a consumer reads back from each
output topic and the dead-letter topic.

With ``--program`` it runs any program instead: each table's topic is created and fed
records generated from the table's columns (:mod:`app.demo_inputs`: plausible values per
column type, event times that advance out of order within the LATENESS, a few late and a
few malformed records), each output view's last rows are shown decoded (whatever its
encoding) with one dead letter, and the same summary checks hold.

Spark's own logs go to a file (``DEMO_SPARK_LOG`` unless told otherwise), and everything is
stopped in order before the broker: the streaming query, Spark, then this process's Kafka
clients, so the console shows Tidemark's lines only.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable

from app.circuit.ir import Circuit, Table
from app.connectors.avro_codec import AvroCodec
from app.connectors.output_reader import OutputReader
from app.connectors.topic_reader import read_topic
from app.errors import ConfigError, KafkaError, TidemarkError
from app.local_kafka import LocalKafka
from app.runtime.step.step_sink import StepReport

__all__ = ["run_demo"]

PROGRAM = Path(__file__).resolve().parent.parent / "pipelines" / "purchases_demo.sql"
#: Where the demo's Spark logs go by default (relative to the working directory); each run
#: starts them afresh.
DEMO_SPARK_LOG = Path("var") / "demo" / "spark.log"
HOUR_MS = 3_600_000
#: Event time passes this many times faster than the wall clock, so 20 seconds of demo
#: cover 100 minutes of purchases and the waterline (one hour behind) closes windows.
EVENT_TIME_SPEED = 300
#: Rows of each output view shown at the end.
SHOWN_ROWS = 4


class _Generator:
    """Out-of-order purchases: event time runs :data:`EVENT_TIME_SPEED` times the wall
    clock, jitter within the 1-hour LATENESS, a share sent 2-3 hours behind (late once the
    waterline moved)."""

    def __init__(self, conf: dict[str, str], rate: int, late_fraction: float, seed: int) -> None:
        from confluent_kafka import Producer

        from app.connectors.sink.producers import PRODUCER_DEFAULTS

        schema = json.loads((PROGRAM.parent.parent / "schemas" / "purchase.avsc").read_text())
        self.codec = AvroCodec(schema)
        # Keyed by card, partitioned as a Java client would (the sink's partitioner).
        self.producer: Any = Producer(
            {**PRODUCER_DEFAULTS, **conf, "linger.ms": 5, "log_level": 3}
        )
        self.rate, self.late_fraction = rate, late_fraction
        self.random = random.Random(seed)
        self.sent = self.late_sent = self.malformed_sent = 0
        self.stop = threading.Event()
        self.start_ms = (int(time.time() * 1000) // HOUR_MS - 24) * HOUR_MS

    def run(self, seconds: float) -> None:
        started = time.monotonic()
        while not self.stop.is_set() and time.monotonic() - started < seconds:
            tick = time.monotonic()
            clock = self.start_ms + int((tick - started) * 1000 * EVENT_TIME_SPEED)
            for _ in range(max(1, self.rate // 10)):
                self._one(clock)
            self.producer.poll(0)
            time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
        self.producer.flush(30)

    def close(self) -> None:
        """Flush and destroy the producer: no client of it keeps reconnecting to a broker
        that is stopping."""
        if self.producer is not None:
            self.producer.flush(30)
            self.producer = None

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


class _ProgramGenerator:
    """Records of every table of a program (:mod:`app.demo_inputs`), its event-time clock
    running :data:`EVENT_TIME_SPEED` times the wall clock; each record goes to a table chosen
    at random, so all tables' waterlines move together."""

    def __init__(
        self, conf: dict[str, str], circuit: Circuit, rate: int, late_fraction: float, seed: int
    ) -> None:
        from confluent_kafka import Producer

        from app.connectors.sink.producers import PRODUCER_DEFAULTS
        from app.demo_inputs import table_inputs

        self.inputs = table_inputs(circuit, seed, late_fraction)
        self.topics = {t.name: t.topic for t in circuit.tables}
        self.producer: Any = Producer(
            {**PRODUCER_DEFAULTS, **conf, "linger.ms": 5, "log_level": 3}
        )
        self.rate = rate
        self.random = random.Random(seed + 1)
        self.stop = threading.Event()
        self.start_ms = (int(time.time() * 1000) // HOUR_MS - 24) * HOUR_MS

    @property
    def sent(self) -> int:
        return sum(inputs.sent for inputs in self.inputs.values())

    def run(self, seconds: float) -> None:
        started = time.monotonic()
        names = sorted(self.inputs)
        while not self.stop.is_set() and time.monotonic() - started < seconds:
            tick = time.monotonic()
            clock = self.start_ms + int((tick - started) * 1000 * EVENT_TIME_SPEED)
            for _ in range(max(1, self.rate // 10)):
                name = self.random.choice(names)
                self.producer.produce(self.topics[name], value=self.inputs[name].record(clock))
            self.producer.poll(0)
            time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
        self.producer.flush(30)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(30)
            self.producer = None


def _warm_up(
    generator: _Generator | _ProgramGenerator, service: Any, timeout_seconds: float = 180
) -> None:
    """Send one purchase and wait for its step, so Python workers are up before the clock
    of the generator starts (the first step pays several seconds of start-up)."""
    generator.run(0.05)
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if any(q.lastProgress and q.lastProgress.get("numInputRows") for q in service.queries):
            return
        time.sleep(0.5)


class _InBackground:
    """``function()`` run in a thread; :meth:`wait` joins it and raises what it raised."""

    def __init__(self, function: Callable[[], object]) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(function,), daemon=True)
        self._thread.start()

    def _run(self, function: Callable[[], object]) -> None:
        try:
            function()
        except BaseException as exc:  # noqa: BLE001 - handed to wait()
            self._error = exc

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def _stop(service: Any, opening: _InBackground) -> None:
    """Stop the queries (the step in flight finishes), then Spark; safe to repeat. A session
    still starting is waited for first, so no JVM outlives the demo."""
    with contextlib.suppress(Exception):  # raised where the session was needed
        opening.wait()
    try:
        service.stop()
    finally:
        service.shutdown()


def _wait_settled(service: Any, timeout_seconds: float = 30) -> None:
    """Wait until no query has a step in flight and none started a step for a while: the
    step Spark runs after the waterline moved, without new input, writes the windows that
    became final then."""
    deadline = time.monotonic() + timeout_seconds
    seen: list[Any] = []
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        now = [q.lastProgress and q.lastProgress.get("batchId") for q in service.queries]
        busy = any(q.status.get("isTriggerActive") for q in service.queries)
        if busy or now != seen:
            seen, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since > 2.5:
            return
        time.sleep(0.25)


def _clear_logs(log_file: Path) -> None:
    """Remove an earlier demo's Spark logs, so the file holds this run's only."""
    from app.observability.logging import jvm_output_path

    for path in [log_file, jvm_output_path(log_file), *log_file.parent.glob(f"{log_file.name}.*")]:
        path.unlink(missing_ok=True)


def _time(millis: int, seconds: bool = True) -> str:
    """An epoch-millisecond time as ``2026-11-24 21:40:58`` (UTC; minutes only without
    ``seconds``)."""
    moment = datetime.fromtimestamp(millis / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def _read_view(messages: list[Any], schema: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """A view's records decoded, and the ``tidemark.waterline`` header of the last one."""
    codec = AvroCodec(schema)
    records = [codec.decode(msg.value()) for msg in messages]
    waterline = dict(messages[-1].headers() or []).get("tidemark.waterline") if messages else None
    return records, waterline.decode() if waterline else "-"


def _show_outputs(console: Console, circuit: Any, read_back: dict[str, list[Any]]) -> None:
    """The filter view's last rows and the final windows, decoded as a consumer reads them."""
    large = circuit.view("large_purchase").output
    windows = circuit.view("purchases_per_10m").output
    rows, _ = _read_view(read_back["large_purchase"], large.value_schema)
    console.print(f"[bold]{large.topic}[/]: the filter view, rows as they arrive")
    shown = RichTable(caption=f"last {min(SHOWN_ROWS, len(rows))} of {len(rows)}")
    for column in ("date_time", "credit_card", "amount"):
        shown.add_column(column, justify="right")
    for row in rows[-SHOWN_ROWS:]:
        shown.add_row(_time(row["date_time"]), str(row["credit_card"]), str(row["amount"]))
    console.print(shown)
    rows, waterline = _read_view(read_back["purchases_per_10m"], windows.value_schema)
    rows.sort(key=lambda row: int(row["window_start"]))
    console.print(f"[bold]{windows.topic}[/]: 10-minute windows, each written once, when final")
    shown = RichTable(caption=f"last {min(SHOWN_ROWS, len(rows))} of {len(rows)}")
    for column in ("window", "purchases", "total", "largest"):
        shown.add_column(column, justify="left" if column == "window" else "right")
    for row in rows[-SHOWN_ROWS:]:
        span = f"{_time(row['window_start'], False)}-{_time(row['window_end'], False)[-5:]}"
        shown.add_row(span, str(row["purchases"]), str(row["total"]), str(row["largest"]))
    console.print(shown)
    console.print(
        f"final: each window ends at or before its record's tidemark.waterline ({waterline})",
        soft_wrap=True,
    )


def _shown_value(value: Any, timestamp: bool) -> str:
    if value is None:
        return "NULL"
    return _time(value) if timestamp else str(value)


def _show_views(console: Console, circuit: Circuit, read_back: dict[str, list[Any]]) -> None:
    """Each output view's last rows, decoded as a consumer reads them (any encoding)."""
    for view in circuit.views:
        out = view.output
        if out is None:
            continue
        reader = OutputReader(view.name, out)
        messages = [m for m in read_back[view.name] if m.value() is not None]
        rows = [reader.value(m.value()) or {} for m in messages]
        console.print(
            f"[bold]{out.topic}[/]: view {view.name} ({out.format}, {out.encoding}), "
            f"{len(read_back[view.name])} records"
        )
        fields = out.value_schema["fields"]
        shown = RichTable(caption=f"last {min(SHOWN_ROWS, len(rows))} of {len(rows)} values")
        for field in fields:
            shown.add_column(field["name"], justify="right")
        stamps = {f["name"] for f in fields if "timestamp-millis" in json.dumps(f["type"])}
        for row in rows[-SHOWN_ROWS:]:
            shown.add_row(*(_shown_value(row.get(f["name"]), f["name"] in stamps) for f in fields))
        console.print(shown)
        if out.encoding == "json" and messages:
            last = messages[-1]
            key = last.key().decode() if last.key() is not None else "null"
            console.print(f"as written: key {key} value {last.value().decode()}", soft_wrap=True)


def _show_dead_letter(console: Console, table: Table, dlq: list[Any]) -> None:
    """One dead letter (a late one if any), its headers decoded, its value the original."""
    if not dlq:
        console.print(f"no dead letters in {table.dead_letter_topic}")
        return
    reasons = [dict(m.headers() or []).get("tidemark.error.reason") for m in dlq]
    msg = dlq[reasons.index(b"late")] if b"late" in reasons else dlq[0]
    topic = table.dead_letter_topic
    console.print(f"one dead letter from [bold]{topic}[/], as a consumer reads it")
    shown = RichTable(show_header=True)
    shown.add_column("header")
    shown.add_column("value")
    for key, value in msg.headers() or []:
        if key.startswith("tidemark."):
            shown.add_row(key, value.decode(errors="replace"))
    value = msg.value() or b""
    stamps = {c.name for c in table.columns if c.type.name == "TIMESTAMP"}
    try:
        if table.format == "json":
            what = value.decode()
        else:
            original = AvroCodec(table.avro_schema).decode(value)
            what = ", ".join(
                f"{k}={_time(v) if k in stamps and v is not None else v}"
                for k, v in original.items()
            )
    except TidemarkError:
        what = "not Avro"
    except UnicodeDecodeError:
        what = "not UTF-8 text"
    shown.add_row("(value)", f"{len(value)} bytes, the original record unchanged: {what}")
    console.print(shown)


def _check_program(circuit: Circuit) -> None:
    """Refuse what the demo cannot run before anything starts: registry formats, change
    events (the demo generates none of their updates and deletes)."""
    for table in circuit.tables:
        if table.changelog:
            events = ("upserts by key ('upsert-kafka')" if table.upserts
                      else f"'{table.format}' change events")
            raise ConfigError(
                f"table {table.name} reads {events}, whose updates and deletes the demo "
                "does not generate: run the program with tidemark run"
            )
    for view in circuit.views:
        if view.output is not None and view.output.encoding in (
            "avro-confluent", "json-registry", "protobuf-confluent"
        ):
            raise ConfigError(
                f"view {view.name} writes '{view.output.encoding}' records, which need a schema "
                "registry the demo does not start: run the program with tidemark run"
            )
    from app.demo_inputs import table_inputs

    table_inputs(circuit, 0, 0.0)  # raises for a table the generator cannot feed


def run_demo(
    duration_seconds: int,
    rate: int,
    late_fraction: float,
    seed: int,
    spark_log: Path | None = None,
    program: Path | None = None,
) -> bool:
    """Run the demo on ``program`` (None: pipelines/purchases_demo.sql with its purchase
    generator); ``spark_log`` is the file for Spark's own logs (None: the console).
    True when every check of the summary holds."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from app.config import KafkaSecurity, Settings
    from app.program.compile import compile_program
    from app.runtime.service import Service

    console = Console()
    started = time.monotonic()
    console.rule("[bold]Tidemark demo")
    path = PROGRAM if program is None else program
    circuit = compile_program(path)
    if program is not None:
        _check_program(circuit)
    console.print(
        f"program {path.name}: {len(circuit.tables)} table(s), "
        f"{len(circuit.views)} view(s); starting a local Kafka broker..."
    )
    if spark_log is not None:
        try:
            spark_log.parent.mkdir(parents=True, exist_ok=True)
            _clear_logs(spark_log)
        except OSError as exc:
            raise ConfigError(
                f"Spark's log file {spark_log} cannot be written"
                f" ({exc.strerror or type(exc).__name__}): give a writable file with"
                " --spark-log-file, or --spark-log console"
            ) from exc
        from app.observability.logging import jvm_output_path

        console.print(
            f"Spark's own logs go to {spark_log} (its JVM's output: "
            f"{jvm_output_path(spark_log).name})"
        )
    try:
        workdir = Path(tempfile.mkdtemp(prefix="tidemark-demo-"))
    except OSError as exc:
        raise ConfigError(
            f"cannot make the demo's directory in {tempfile.gettempdir()}"
            f" ({exc.strerror or type(exc).__name__}): set TMPDIR to a writable directory"
        ) from exc
    totals: dict[str, int] = {"in": 0, "accepted": 0, "steps": 0}
    #: Table -> dead-letter reason -> records.
    dead: dict[str, dict[str, int]] = {t.name: {} for t in circuit.tables}
    outputs: dict[str, int] = {}
    several = len(circuit.tables) > 1

    def on_step(report: StepReport) -> None:
        totals["in"] += report.records_in
        totals["accepted"] += report.accepted
        totals["steps"] += 1
        for reason, n in report.dead_letters.items():
            if n:
                dead[report.table][reason] = dead[report.table].get(reason, 0) + n
        for view, n in report.outputs.items():
            outputs[view] = outputs.get(view, 0) + n
        if report.records_in == 0 and not any(report.outputs.values()):
            return  # a step without input that wrote nothing
        from app.connectors.sink import format_time_value

        waterline = (
            report.waterlines.get("date_time")
            if program is None
            else next(iter(report.waterlines.values()), None)
        )
        letters = " ".join(f"{r} {n}" for r, n in sorted(report.dead_letters.items()) if n)
        table = f"{report.table:<10} " if several else ""
        console.print(
            f"step {report.step or '-':>3}  {table}in {report.records_in:>5}  accepted "
            f"{report.accepted:>5}  dead letters {letters or '-':<18} out "
            f"{sum(report.outputs.values()):>5}  waterline "
            f"{format_time_value(waterline, 'ms')}  ({report.seconds:.1f}s)",
            soft_wrap=True,
        )

    #: Output view -> its topic.
    views = {v.name: v.output.topic for v in circuit.views if v.output is not None}
    #: The broker's address once it is up; the service's settings get it before ``start()``.
    conf: dict[str, str] = {}
    # The demo runs a fixed configuration: TIDEMARK_* variables configure `tidemark run`.
    settings = Settings(
        checkpoint=str(workdir / "checkpoint"),
        spark_master="local[2]",
        trigger_interval="1000ms",
        max_records_per_step=max(1000, rate * 5),
        shuffle_partitions=4,
        wait_for_topics_seconds=0,
        exactly_once=True,
        spark_log="console" if spark_log is None else "file",
        spark_log_file=spark_log,
        kafka=KafkaSecurity(security_protocol="PLAINTEXT"),
    )
    service = Service(circuit, settings, on_step=on_step)
    # Spark's JVM starts while the broker does: neither needs the other to start.
    opening = _InBackground(service.open_session)
    generator: _Generator | _ProgramGenerator | None = None
    what = "purchases" if program is None else "records"
    try:
        with LocalKafka(workdir=workdir / "kafka") as kafka:
            conf["bootstrap.servers"] = kafka.bootstrap_servers
            service.settings = settings.model_copy(
                update={"bootstrap_servers": kafka.bootstrap_servers}
            )
            try:
                admin = AdminClient({**conf, "log_level": 3})
                for table in circuit.tables:
                    try:
                        admin.create_topics([NewTopic(table.topic, 2, 1)])[table.topic].result(30)
                    except KafkaException as exc:
                        raise KafkaError(
                            f"the demo could not create topic {table.topic} on the local "
                            f"broker: {exc}"
                        ) from exc
                del admin
                console.print(
                    f"broker at {kafka.bootstrap_servers}; generating {rate} {what}/s "
                    f"for {duration_seconds}s ({late_fraction:.0%} sent late)"
                )
                if program is None:
                    generator = _Generator(conf, rate, late_fraction, seed)
                else:
                    generator = _ProgramGenerator(conf, circuit, rate, late_fraction, seed)
                console.print("starting Spark (local[2]) and the streaming query...")
                opening.wait()
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
                _wait_settled(service)
                console.print("stopping the streaming query and Spark...")
                _stop(service, opening)
                read_back = {name: read_topic(conf, topic) for name, topic in views.items()}
                dlqs = {t.name: read_topic(conf, t.dead_letter_topic) for t in circuit.tables}
            finally:
                # Spark before the broker: no task or worker is left writing to it.
                _stop(service, opening)
                if generator is not None:
                    generator.close()
            console.print("stopping the broker...")
    finally:
        _stop(service, opening)
        shutil.rmtree(workdir, ignore_errors=True)
    if program is None:
        _show_outputs(console, circuit, read_back)
        _show_dead_letter(console, circuit.table("purchase"), dlqs["purchase"])
    else:
        _show_views(console, circuit, read_back)
        shown = next((t for t in circuit.tables if dlqs[t.name]), circuit.tables[0])
        _show_dead_letter(console, shown, dlqs[shown.name])
    dlq_reasons: dict[str, dict[str, int]] = {t.name: {} for t in circuit.tables}
    for name, messages in dlqs.items():
        for msg in messages:
            reason = dict(msg.headers() or [])["tidemark.error.reason"].decode()
            dlq_reasons[name][reason] = dlq_reasons[name].get(reason, 0) + 1
    written = {name: outputs.get(name, 0) for name in views}
    read_counts = {name: len(read_back[name]) for name in views}
    dead_total = sum(n for reasons in dead.values() for n in reasons.values())
    checks = [
        ("records in = produced", totals["in"] == generator.sent),
        (
            "in = accepted + late + malformed + other dead letters",
            totals["in"] == totals["accepted"] + dead_total,
        ),
        ("output written = output read back, per view", written == read_counts),
        ("dead letters written = read back, per reason", dead == dlq_reasons),
    ]
    summary = RichTable(title="Tidemark demo summary", show_header=True)
    summary.add_column("what")
    summary.add_column("count", justify="right")
    rows: list[tuple[str, int]] = [("records produced", generator.sent)]
    if isinstance(generator, _ProgramGenerator) and several:
        rows += [(f"{name} produced", i.sent) for name, i in sorted(generator.inputs.items())]
    rows += [
        ("records in (read by Tidemark)", totals["in"]),
        ("accepted", totals["accepted"]),
    ]
    for table in circuit.tables:
        reasons = dead[table.name]
        for reason in ("late", "malformed", *sorted(set(reasons) - {"late", "malformed"})):
            rows.append((f"{reason} -> {table.dead_letter_topic}", reasons.get(reason, 0)))
    for name, topic in views.items():
        rows.append((f"out -> {topic} (written)", written[name]))
        rows.append((f"{topic} read back", read_counts[name]))
    rows += [(f"{t.dead_letter_topic} read back", len(dlqs[t.name])) for t in circuit.tables]
    rows.append(("steps", totals["steps"]))
    for name, value in rows:
        summary.add_row(name, str(value))
    console.print(summary)
    for name, ok in checks:
        console.print(f"  {'[green]ok ' if ok else '[red]FAIL'}[/] {name}")
    console.print(f"demo took {time.monotonic() - started:.0f}s")
    return all(ok for _, ok in checks)
