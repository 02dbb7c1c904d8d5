"""The kill loop's harness: ``tidemark run`` killed with SIGKILL, over and over, at named fault
points (:mod:`app.fault_points`) and at random moments, then checked against the reference.

A :class:`Scenario` is a program of one placement the physical plan chooses, with the
placement it must get. :func:`kill_loop` produces its input up front (rows out of order within
LATENESS, some late, some malformed), then starts ``tidemark run`` as a subprocess in its own
process group (like a pod), lets it reach a fault point (``TIDEMARK_FAULT_POINT=name@batch``
and the ``reached-*`` file) or a random moment, kills the group with SIGKILL and starts again
from the checkpoint. Optionally one run holds a transaction open at a point
(``TIDEMARK_FAULT_PAUSE``) while the broker restarts, then goes on. The last run reads to the
end of the input. Then:

- every record a read_committed consumer reads of each view equals the reference evaluator's
  (:class:`app.circuit.reference.Reference`) fed the steps Spark recorded in its offset log
  (the offsets and batch time a replay reuses): no loss, no duplicate;
- the dead letters are the malformed records and the reference's late rows, each once;
- no transaction is left open (no partition of an output, dead-letter or the step markers'
  topic has its last stable offset below its end);
- the waterlines of the step log never went back.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from app.circuit.ir import Circuit
from app.circuit.reference import Reference, StepInput
from app.connectors.avro_codec import AvroCodec
from app.connectors.sink.markers import MARKER_TOPIC
from app.connectors.topic_reader import read_topic
from app.fault_points import POINTS
from app.local_kafka import LocalKafka
from app.program.compile import compile_program
from app.runtime.store import join, parent, store_at

ROOT = Path(__file__).resolve().parents[2]
BASE_MS = 1_700_000_000_000

READING = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND,
    sensor  BIGINT NOT NULL,
    value   DOUBLE
) WITH ('topic' = '{p}.in', 'dead_letter' = '{p}.dlq');
"""


@dataclass(frozen=True)
class Scenario:
    """A program whose views the physical plan places as ``placements`` say (view ->
    placement), its queries taking ``shapes`` (step shapes, in query order)."""

    name: str
    program: str
    placements: dict[str, str]
    shapes: tuple[str, ...]


def _scenarios() -> dict[str, Scenario]:
    stateless = Scenario(
        "stateless",
        READING.format(p="kl.stateless")
        + """
CREATE VIEW everything WITH ('topic' = 'kl.stateless.all', 'format' = 'append') AS
SELECT ts, sensor, value FROM reading;
""",
        {"everything": "source_task"},
        ("query_writes",),
    )
    native = Scenario(
        "native_aggregate",
        READING.format(p="kl.native")
        + """
CREATE VIEW per_window WITH ('topic' = 'kl.native.windows', 'format' = 'append') AS
SELECT window_start, window_end, COUNT(*) AS n, SUM(sensor) AS total
FROM TABLE(TUMBLE(TABLE reading, DESCRIPTOR(ts), INTERVAL '5' SECOND))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;

CREATE VIEW hot WITH ('topic' = 'kl.native.hot', 'format' = 'append') AS
SELECT ts, value, sensor FROM reading;
""",
        {"per_window": "native", "hot": "source_task"},
        ("query_writes",),
    )
    python = Scenario(
        "python_aggregate",
        READING.format(p="kl.python")
        + """
CREATE VIEW per_bucket WITH ('topic' = 'kl.python.buckets') AS
SELECT window_start, window_end, sensor % 3 AS bucket, COUNT(*) AS n, SUM(sensor) AS total
FROM TABLE(TUMBLE(TABLE reading, DESCRIPTOR(ts), INTERVAL '5' SECOND))
GROUP BY window_start, window_end, sensor % 3;

CREATE VIEW doubled WITH ('topic' = 'kl.python.doubled', 'format' = 'append') AS
SELECT ts, sensor, value * 2 AS twice FROM reading;
""",
        {"per_bucket": "state_operator", "doubled": "step_sink"},
        ("step_sink",),
    )
    delay = Scenario(
        "after_delay",
        READING.format(p="kl.delay")
        + """
CREATE VIEW delayed WITH ('topic' = 'kl.delay.windows') AS
SELECT window_start, window_end, COUNT(*) AS n, SUM(sensor) AS total
FROM TABLE(TUMBLE(TABLE reading, DESCRIPTOR(ts), INTERVAL '5' SECOND))
GROUP BY window_start, window_end
EMIT AFTER DELAY INTERVAL '1' SECOND;
""",
        {"delayed": "state_operator"},
        ("step_sink",),
    )
    join = Scenario(
        "join",
        """
CREATE TABLE orders (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND,
    id      BIGINT NOT NULL,
    amount  BIGINT NOT NULL
) WITH ('topic' = 'kl.join.orders', 'dead_letter' = 'kl.join.orders.dlq');

CREATE TABLE fills (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND,
    id      BIGINT NOT NULL,
    amount  BIGINT NOT NULL
) WITH ('topic' = 'kl.join.fills', 'dead_letter' = 'kl.join.fills.dlq');

CREATE VIEW matched WITH ('topic' = 'kl.join.matched', 'format' = 'append') AS
SELECT o.ts, o.id, o.amount AS ordered, f.amount AS filled
FROM orders AS o
JOIN fills AS f
  ON o.id = f.id
 AND f.ts BETWEEN o.ts AND o.ts + INTERVAL '10' SECOND;
""",
        {"matched": "jvm"},
        ("step_sink",),
    )
    composed = Scenario(
        "composed",
        READING.format(p="kl.composed")
        + """
CREATE LOCAL VIEW per_window AS
SELECT window_start, window_end, COUNT(*) AS n, SUM(sensor) AS total
FROM TABLE(TUMBLE(TABLE reading, DESCRIPTOR(ts), INTERVAL '5' SECOND))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;

CREATE VIEW even WITH ('topic' = 'kl.composed.even', 'format' = 'append') AS
SELECT window_end, n, total FROM per_window WHERE total % 2 = 0;
""",
        # A stage boundary (ADR 0023): per_window is written to an internal topic by the
        # first query and read back by the second, which computes the filter.
        {"per_window": "native", "even": "step_sink"},
        ("query_writes", "step_sink"),
    )
    return {s.name: s for s in (stateless, native, python, delay, join, composed)}


SCENARIOS = _scenarios()


@dataclass
class Produced:
    """What went into a table's topic: decoded rows and garbage, by (partition, offset)."""

    rows: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    garbage: set[tuple[int, int]] = field(default_factory=set)

    def ends(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for p, o in [*self.rows, *self.garbage]:
            out[p] = max(out.get(p, 0), o + 1)
        return out


def _row(table: str, i: int, rng: random.Random) -> dict[str, Any]:
    """Row ``i`` of ``table``: about 200 ms apart, out of order within LATENESS (2 s); every
    53rd 12 s behind (late once the table's waterline has moved past it)."""
    ts = BASE_MS + i * 200 + rng.randrange(-1500, 300)
    if i % 53 == 52:
        ts -= 12_000
    if table == "reading":
        return {"ts": ts, "sensor": i, "value": round(rng.random() * 100, 2)}
    if table == "orders":
        return {"ts": ts, "id": i, "amount": i}
    # A fill of an order up to 40 rows (about 8 s) before it; some fall outside 10 s.
    return {"ts": ts, "id": max(0, i - rng.randrange(0, 60)), "amount": 100_000 + i}


def produce_input(conf: dict[str, str], circuit: Any, rows: int, seed: int) -> dict[str, Produced]:
    """Every table's input, produced up front to 2 partitions in blocks of 10 rows, with a
    malformed record every 41 rows and a last row 60 s ahead that completes every window."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({**conf, "log_level": 3})
    topics = [t.topic for t in circuit.tables]
    for topic, future in admin.create_topics([NewTopic(t, 2, 1) for t in topics]).items():
        future.result(30)
        del topic
    rng = random.Random(seed)
    producer = Producer({**conf, "log_level": 3, "enable.idempotence": True})
    out: dict[str, Produced] = {}
    for table in circuit.tables:
        codec = AvroCodec(table.avro_schema)
        produced = out[table.name] = Produced()

        def delivered(err: Any, msg: Any, row: dict[str, Any] | None, into: Produced) -> None:
            assert err is None, err
            if row is None:
                into.garbage.add((msg.partition(), msg.offset()))
            else:
                into.rows[(msg.partition(), msg.offset())] = row

        for i in range(rows):
            row = _row(table.name, i, rng)
            partition = (i // 10) % 2
            producer.produce(
                table.topic,
                key=f"{table.name}-{i}".encode(),
                value=codec.encode(row),
                partition=partition,
                on_delivery=lambda e, m, r=row, p=produced: delivered(e, m, r, p),
            )
            if i % 41 == 40:
                producer.produce(
                    table.topic,
                    key=f"garbage-{table.name}-{i}".encode(),
                    value=b"\xff garbage",
                    partition=1 - partition,
                    on_delivery=lambda e, m, p=produced: delivered(e, m, None, p),
                )
        for partition in (0, 1):
            closing = dict(
                _row(table.name, rows + partition, rng), ts=BASE_MS + rows * 200 + 60_000
            )
            producer.produce(
                table.topic,
                key=f"{table.name}-closing-{partition}".encode(),
                value=codec.encode(closing),
                partition=partition,
                on_delivery=lambda e, m, r=closing, p=produced: delivered(e, m, r, p),
            )
        assert producer.flush(30) == 0
    return out


@dataclass(frozen=True)
class Batch:
    """A step as Spark's offset log recorded it: its batch time and each topic's end offsets."""

    batch_id: int
    time_ms: int
    ends: dict[str, dict[int, int]]


def offset_log(spark_dir: str | Path) -> tuple[list[Batch], set[int]]:
    """The batches of a query's offset log, and the ids its commit log holds (a directory,
    or an s3a:// prefix: read through the checkpoint's store, ADR 0025)."""
    offsets, commits = join(str(spark_dir), "offsets"), join(str(spark_dir), "commits")
    store = store_at(offsets)
    done = {int(name) for name in store.names(commits) if name.isdigit()}
    batches = []
    for number in sorted(int(name) for name in store.names(offsets) if name.isdigit()):
        text = store.read_text(join(offsets, str(number)))
        lines = text.splitlines() if text is not None else []
        if len(lines) < 3:
            continue  # being written
        metadata = json.loads(lines[1])
        ends: dict[str, dict[int, int]] = {}
        for line in lines[2:]:
            try:
                source = json.loads(line)
            except ValueError:
                continue
            if isinstance(source, dict) and "topic" in source:
                ends[source["topic"]] = {int(p): int(o) for p, o in source["partitions"].items()}
        batches.append(Batch(number, int(metadata["batchTimestampMs"]), ends))
    return batches, done


class Run:
    """One ``tidemark run`` process in its own process group; its JSON log lines arrive on a
    queue, its step events are kept in ``steps``."""

    def __init__(
        self,
        program: Path,
        broker: LocalKafka,
        checkpoint: str | Path,
        steps: list[dict[str, Any]],
        fault: dict[str, str],
        per_step: int,
        env_extra: dict[str, str] | None = None,
    ) -> None:
        """``env_extra``: further environment of the run (a Spark master, say)."""
        env = {
            key: value for key, value in os.environ.items() if not key.startswith("TIDEMARK_FAULT")
        }
        env |= {"TIDEMARK_LOG_FORMAT": "json", "TIDEMARK_TRIGGER_INTERVAL": "500ms", **fault}
        env |= env_extra or {}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app.cli",
                "run",
                str(program),
                "--bootstrap-servers",
                broker.bootstrap_servers,
                "--checkpoint",
                str(checkpoint),
                "--metrics-port",
                "0",
                "--max-records-per-step",
                str(per_step),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.steps = steps
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            text = line.decode(errors="replace").rstrip()
            if "rror" in text or "xception" in text or not text.startswith(("{", " ", "+", ":")):
                self.lines = [*self.lines[-80:], text[:600]]
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                if event.get("event") == "step":
                    self.steps.append(event)
                self.events.put(event)

    def alive(self) -> None:
        """Raise with the log's end if the run exited."""
        if self.process.poll() is not None:
            tail = "\n".join(self.lines[-40:])
            raise AssertionError(
                f"tidemark run exited with {self.process.returncode}; its log ends:\n{tail}"
            )

    def next_event(self, name: str, timeout: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=0.5)
            except queue.Empty:
                self.alive()
                continue
            if event.get("event") == name:
                return event
        raise AssertionError(f"no {name} event within {timeout} s")

    def kill(self, also: int | None = None) -> None:
        """SIGKILL the run's process group, and ``also`` (a Python worker stopped at a fault
        point: pyspark's daemon puts its workers in a process group of their own)."""
        with contextlib.suppress(ProcessLookupError):  # the group may be gone already
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        if also is not None:
            try:
                os.kill(also, signal.SIGKILL)
            except ProcessLookupError:
                pass


def wait_for(what: str, condition: Callable[[], Any], run: Run, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        run.alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.1)


def reached(fault_dir: Path, point: str) -> tuple[int, float] | None:
    """The pid that reached ``point`` and when, from its ``reached-*`` file."""
    for path in fault_dir.glob(f"reached-{point}-*"):
        return int(path.name.rsplit("-", 1)[1]), path.stat().st_mtime
    return None


def open_transactions(conf: dict[str, str], topics: list[str]) -> list[str]:
    """What shows a transaction still open: a partition of ``topics`` whose last stable
    offset (a read_committed reader's end) is below its end."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({**conf, "log_level": 3})
    found = []
    metadata = admin.list_topics(timeout=30).topics
    wanted = [TopicPartition(t, p) for t in topics if t in metadata for p in metadata[t].partitions]
    ends = {}
    for level in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        futures = admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in wanted}, isolation_level=level, request_timeout=30
        )
        ends[level] = {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
    for key, end in ends[IsolationLevel.READ_UNCOMMITTED].items():
        stable = ends[IsolationLevel.READ_COMMITTED][key]
        if stable < end:
            found.append(f"{key[0]}[{key[1]}]: last stable offset {stable} < end {end}")
    return found


def written_topics(circuit: Circuit, checkpoint: str | Path | None = None) -> list[str]:
    """Every topic a run writes in its transactions: outputs, dead letters, step markers, and
    with ``checkpoint`` the internal topics of its stage boundaries (ADR 0023)."""
    if checkpoint is not None:
        from app.runtime.planner.compose import compose, read_stage_prefix

        circuit = compose(circuit, read_stage_prefix(checkpoint)).circuit
    topics = [v.output.topic for v in circuit.views if v.output is not None]
    return [*topics, *(t.dead_letter_topic for t in circuit.tables), MARKER_TOPIC]


@dataclass
class Figures:
    kills_at: Counter[str] = field(default_factory=Counter)
    records_checked: int = 0
    replayed_tasks: int = 0
    broker_restarts: int = 0
    seconds: float = 0.0


def kill_loop(
    scenario: Scenario,
    broker: LocalKafka,
    work: Path,
    *,
    kills: list[str],
    rows: int,
    per_step: int,
    broker_pause: str | None,
    ahead: int = 2,  # the point fires in the run's ahead-th batch of its own
    seed: int = 7,
    checkpoint: str | None = None,
) -> Figures:
    """Run ``scenario`` through ``kills`` (each a fault point name, or ``random``), then, with
    ``broker_pause`` (a point inside a transaction), hold a transaction open at that point
    while the broker restarts; run to the end of the input and check everything (module
    docstring). ``checkpoint``: where the runs keep it (an s3a:// URL, say); by default a
    directory in ``work``. Returns the figures."""
    started = time.monotonic()
    figures = Figures()
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    work.mkdir(parents=True, exist_ok=True)
    program = work / f"{scenario.name}.sql"
    program.write_text(scenario.program)
    check_placement(program, scenario)
    circuit = compile_program(program)
    produced = produce_input(conf, circuit, rows, seed)
    checkpoint = checkpoint or str(work / "checkpoint")
    spark_dir = join(checkpoint, circuit.tables[0].name, "spark")
    steps: list[dict[str, Any]] = []
    rng = random.Random(seed)

    def fresh() -> int:
        """The first batch a new run plans itself: a replayed batch whose tasks all committed
        writes nothing, so a task's point would never fire in it."""
        return max((b.batch_id for b in offset_log(spark_dir)[0]), default=-1) + 1

    for k, point in enumerate(kills):
        fault_dir = work / f"fault-{k}"
        fault: dict[str, str] = {}
        if point != "random":
            assert point in POINTS, point
            fault = {
                "TIDEMARK_FAULT_POINT": f"{point}@{fresh() + ahead - 1}",
                "TIDEMARK_FAULT_DIR": str(fault_dir),
            }
        run = Run(program, broker, checkpoint, steps, fault, per_step)
        with _killed_on_failure(run):
            _kill_at(run, point, fault_dir, rng)
        figures.kills_at[point] += 1

    run = _broker_restart_run(
        program,
        broker,
        checkpoint,
        steps,
        work,
        per_step,
        fresh() + ahead - 1,
        broker_pause,
        conf,
        circuit,
        figures,
    )
    try:
        batches = _read_to_the_end(run, spark_dir, circuit, produced, conf)
        outputs = _snapshot(run, conf, circuit, spark_dir, batches)
    finally:
        run.kill()
    figures.records_checked = _check(circuit, produced, batches, outputs, conf, steps)
    topics = written_topics(circuit, checkpoint)
    assert not open_transactions(conf, topics), open_transactions(conf, topics)
    figures.replayed_tasks = sum(int(s.get("replayed_tasks", 0)) for s in steps)
    figures.seconds = time.monotonic() - started
    return figures


@contextlib.contextmanager
def _killed_on_failure(run: Run) -> Iterator[None]:
    """A run the test gives up on is killed, not left running."""
    try:
        yield
    except BaseException:
        run.kill()
        raise


def _kill_at(run: Run, point: str, fault_dir: Path, rng: random.Random) -> None:
    """Kill ``run`` at a random moment, or once it reached ``point``."""
    if point == "random":
        run.next_event("query.started")
        time.sleep(rng.uniform(0.5, 5.0))
        run.alive()
        run.kill()
    else:
        pid, _ = wait_for(f"fault point {point}", partial(reached, fault_dir, point), run, 300)
        run.kill(also=pid)


def check_placement(program: Path, scenario: Scenario) -> None:
    """``tidemark explain --physical`` places the views as the scenario says."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "explain",
            "--physical",
            "--format",
            "json",
            str(program),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    plan = json.loads(result.stdout)
    placed = {v["name"]: v["placement"] for q in plan["queries"] for v in q["views"]}
    assert placed == scenario.placements, (scenario.name, placed)
    assert tuple(q["step_shape"] for q in plan["queries"]) == scenario.shapes, plan


def _broker_restart_run(
    program: Path,
    broker: LocalKafka,
    checkpoint: str | Path,
    steps: list[dict[str, Any]],
    work: Path,
    per_step: int,
    batch: int,
    pause: str | None,
    conf: dict[str, str],
    circuit: Any,
    figures: Figures,
) -> Run:
    """The last run; with ``pause``, one of its tasks holds its transaction open at that
    point while the broker restarts, and goes on once it is back."""
    if pause is None:
        return Run(program, broker, checkpoint, steps, {}, per_step)
    fault_dir = work / "fault-broker"
    fault = {
        "TIDEMARK_FAULT_POINT": f"{pause}@{batch}",
        "TIDEMARK_FAULT_DIR": str(fault_dir),
        "TIDEMARK_FAULT_PAUSE": "1",
    }
    run = Run(program, broker, checkpoint, steps, fault, per_step)
    with _killed_on_failure(run):
        wait_for(f"fault point {pause}", lambda: reached(fault_dir, pause), run, 300)
    topics = written_topics(circuit)
    # The point is inside the task's transaction: it is open while the broker restarts. Its
    # records (after the flush) also show as a last stable offset below the partition's end.
    held = open_transactions(conf, topics)
    assert not (fault_dir / "release").exists()
    broker.restart(down_seconds=3)  # the open transaction's coordinator goes away
    (fault_dir / "release").touch()  # only now the held task goes on
    figures.broker_restarts += 1
    restarted = time.time()
    assert reached(fault_dir, pause)[1] < restarted, "the transaction was open before"
    print(json.dumps({"broker_restart_in_transaction_at": pause, "seen_open": held[:2]}))
    return run


def _read_to_the_end(
    run: Run, spark_dir: str, circuit: Any, produced: dict[str, Produced], conf: dict[str, str]
) -> list[Batch]:
    """Wait until a committed batch has read every table's whole input and then every
    committed batch a few seconds more (held changes due); the batches of the commit log."""
    topic_of = {t.name: t.topic for t in circuit.tables}
    wanted = {topic_of[name]: p.ends() for name, p in produced.items()}

    def all_read() -> bool:
        batches, done = offset_log(spark_dir)
        return any(
            b.batch_id in done
            and all(
                all(b.ends.get(topic, {}).get(part, 0) >= end for part, end in ends.items())
                for topic, ends in wanted.items()
            )
            for b in batches
        )

    wait_for("the whole input read", all_read, run, 600)
    time.sleep(4)  # the AFTER DELAY changes (1 s) and the windows' final rows come out
    _stages_read(run, parent(parent(spark_dir)), circuit, conf)
    return offset_log(spark_dir)[0]


def _stages_read(run: Run, checkpoint: str, circuit: Circuit, conf: dict[str, str]) -> None:
    """Wait until each query reading a stage boundary (ADR 0023) has committed a batch that
    read its internal topic to its end (the first query is at rest by now)."""
    from app.connectors.kafka_offsets import topic_end_offsets
    from app.runtime.planner.compose import compose, read_stage_prefix

    composed = compose(circuit, read_stage_prefix(checkpoint)).circuit
    for table in (t for t in composed.tables if t.stage_input is not None):
        ends = topic_end_offsets(conf, table.topic)
        spark_dir = join(checkpoint, table.name, "spark")

        def read(topic: str = table.topic, ends: dict[int, int] = ends,
                 spark_dir: str = spark_dir) -> bool:
            batches, done = offset_log(spark_dir)
            return any(
                b.batch_id in done
                and all(b.ends.get(topic, {}).get(p, 0) >= end for p, end in ends.items())
                for b in batches
            )

        wait_for(f"the boundary {table.stage_input} read", read, run, 300)


def _snapshot(
    run: Run, conf: dict[str, str], circuit: Any, spark_dir: str, batches: list[Batch]
) -> dict[str, Counter[str]]:
    """Every topic's records read while no batch ran: the offset log ends at a batch of the
    commit log before and after the reading. A query that never rests (an AFTER DELAY
    view's processing-time timeouts make Spark run a step after every step, back to back
    under load) is read until two reads with a committed batch between them agree: its
    input is all read, so those batches wrote nothing. Keyed by view name, and
    ``dlq:<table>``."""
    previous: tuple[int, dict[str, Counter[str]]] | None = None
    for _ in range(60):
        before, done = offset_log(spark_dir)
        if not before:
            time.sleep(0.3)
            continue
        outputs = {view.name: read_view(conf, view) for view in circuit.views if view.output}
        for table in circuit.tables:
            outputs[f"dlq:{table.name}"] = read_dead_letters(conf, table)
        after, done_after = offset_log(spark_dir)
        if (
            before[-1].batch_id in done
            and after[-1].batch_id == before[-1].batch_id
            and after[-1].batch_id in done_after
        ):
            batches[:] = after
            return outputs
        committed = max(done_after, default=-1)
        if previous is not None and previous[1] == outputs and committed > previous[0]:
            batches[:] = [b for b in after if b.batch_id in done_after]
            return outputs
        previous = (max(done, default=-1), outputs)
    raise AssertionError("the run never rested between batches, nor stopped writing")


def read_view(conf: dict[str, str], view: Any) -> Counter[str]:
    output = view.output
    keys = AvroCodec(output.key_schema) if output.key_schema else None
    values = AvroCodec(output.value_schema)
    found: Counter[str] = Counter()
    for msg in read_topic(conf, output.topic):
        key = keys.decode(msg.key()) if keys is not None and msg.key() is not None else None
        value = values.decode(msg.value()) if msg.value() is not None else None
        found[json.dumps([key, value], sort_keys=True, default=str)] += 1
    return found


def read_dead_letters(conf: dict[str, str], table: Any) -> Counter[str]:
    found: Counter[str] = Counter()
    for msg in read_topic(conf, table.dead_letter_topic):
        headers = {k: v.decode() for k, v in msg.headers() or []}
        found[
            json.dumps(
                [
                    headers["tidemark.error.reason"],
                    int(headers["tidemark.source.partition"]),
                    int(headers["tidemark.source.offset"]),
                ]
            )
        ] += 1
    return found


def _check(
    circuit: Any,
    produced: dict[str, Produced],
    batches: list[Batch],
    outputs: dict[str, Counter[str]],
    conf: dict[str, str],
    steps: list[dict[str, Any]],
) -> int:
    """The outputs and dead letters equal the reference fed Spark's steps; the waterlines of
    the step log never went back. Returns how many records were checked."""
    expected = _reference(circuit, produced, batches)
    checked = 0
    for name, want in expected.items():
        got = outputs[name]
        missing, duplicated = want - got, got - want
        assert not missing and not duplicated, (
            f"{name}: {sum(missing.values())} missing {list(missing)[:3]},"
            f" {sum(duplicated.values())} extra {list(duplicated)[:3]}"
        )
        checked += sum(want.values())
    for table in circuit.tables:
        marks = [
            s["waterlines"]["ts"]
            for s in steps
            if s.get("table") == table.name and s.get("waterlines", {}).get("ts")
        ]
        assert marks == sorted(marks), f"the waterline of {table.name} went back: {marks}"
    return checked


def _reference(
    circuit: Any, produced: dict[str, Produced], batches: list[Batch]
) -> dict[str, Counter[str]]:
    """The reference's records per view and dead letters per table for Spark's steps."""
    reference = Reference(circuit)
    topic_of = {t.name: t.topic for t in circuit.tables}
    position = {
        (table, _identity(row)): where
        for table, p in produced.items()
        for where, row in p.rows.items()
    }
    expected: dict[str, Counter[str]] = {v.name: Counter() for v in circuit.views if v.output}
    for table in circuit.tables:
        expected[f"dlq:{table.name}"] = Counter(
            json.dumps(["malformed", p, o]) for p, o in produced[table.name].garbage
        )
    previous: dict[str, dict[int, int]] = {}
    for batch in batches:
        rows: dict[str, list[dict[str, Any]]] = {}
        for table, p in produced.items():
            topic = topic_of[table]
            start, end = previous.get(topic, {}), batch.ends.get(topic, previous.get(topic, {}))
            rows[table] = [
                row
                for (part, offset), row in sorted(p.rows.items())
                if start.get(part, 0) <= offset < end.get(part, 0)
            ]
        previous = {**previous, **batch.ends}
        result = reference.step(StepInput(rows=rows, batch_time_ms=batch.time_ms))
        for view, records in result.outputs.items():
            for record in records:
                key = dict(record.key) if record.key is not None else None
                value = dict(record.value) if record.value is not None else None
                expected[view][json.dumps([key, value], sort_keys=True, default=str)] += 1
        for dead in result.dead_letters:
            part, offset = position[(dead.table, _identity(dead.row))]
            expected[f"dlq:{dead.table}"][json.dumps([dead.reason, part, offset])] += 1
    return expected


def _identity(row: Any) -> str:
    """A produced row's identity: every row differs (its sensor, id or amount is its index)."""
    return json.dumps(dict(row), sort_keys=True, default=str)
