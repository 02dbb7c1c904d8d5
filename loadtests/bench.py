"""The side-by-side benchmark: ``python -m loadtests.bench --workload a`` (docs/performance.md).

1. Pre-produce N events of the workload to a fresh topic (loadtests.generator); a workload of
   two inputs (d: auctions and bids) to a fresh topic each, the N events split between them.
2. The limit: raw confluent-kafka consume rate and fastavro decode rate of those topics.
3. Tidemark, then the peer (``--sides`` gives the order), each in its own process
   (loadtests.side), once the machine is idle (:func:`wait_quiet`), over the same topic
   until every event is processed: throughput =
   N / seconds, and the steady rate once warm (:func:`steady_rate`); CPU seconds of the whole
   process tree (driver JVM + Python workers) per million; the records in its output topic.
   ``--encodings avro avro-confluent``: Tidemark runs again over a second topic of the same
   events in the Confluent wire format (the input schema registered in a local schema
   registry, tests/local_schema_registry.py), its table reading and its view writing
   ``avro-confluent``; the peer runs on schemaless Avro only.
4. ``--latency``: after the throughput runs, each side (per master and partition count) runs
   continuously while the generator produces at half that side's measured events/s (the
   steady rate when the run had enough steps, else the whole-run rate; or ``--rate``; (d):
   the events of both topics together); loadtests.latency reports p50/p99/max of
   produce-to-visible latency.
Writes ``var/loadtests/<workload>-<stamp>.json`` and its plot beside it (``.png``), outside the
tracked tree; ``--out`` and ``--plot`` choose other places.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from loadtests.generator import EventShape, PairShape, _encoded, produce, produce_pair
from loadtests.workloads import WORKLOADS

ROOT = Path(__file__).resolve().parent.parent
# Where a run writes its result and plot unless --out/--plot say otherwise: git-ignored
# (/var/ in .gitignore), so a run never dirties the tree. The results docs/performance.md
# cites are the files in loadtests/results/; a run writes there only when told to.
RESULTS = ROOT / "var" / "loadtests"


class TreeCpu:
    """CPU seconds of a process and all its descendants, sampled while it runs (a child that
    exits between samples loses at most one interval of its time).

    :meth:`split` says where they went (:func:`cpu_part`): in the JVM, its task threads, its
    JIT compilers, its garbage collector and the rest; in Python, the process itself (the
    driver), Spark's workers, and the other processes Spark starts (the Python source's
    planners). In workload (b) a third of each side's JVM CPU is its JIT compilers
    (docs/performance.md, "What bounds Tidemark")."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.pid, self.interval = pid, interval
        self.seen: dict[int, float] = {}
        self.parts: dict[int, str] = {}
        self.threads: dict[tuple[int, str], tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in procs:
            try:
                t = p.cpu_times()
                self.seen[p.pid] = max(self.seen.get(p.pid, 0.0), t.user + t.system)
                # Every time: spark-class's shell becomes the JVM (exec) under the same pid.
                # An empty command line (an exited child not yet reaped) keeps the last part.
                cmdline = p.cmdline()
                if cmdline or p.pid not in self.parts:
                    self.parts[p.pid] = cpu_part(cmdline, p.pid == self.pid)
            except psutil.NoSuchProcess:
                continue
            if self.parts[p.pid] == "jvm":
                self._sample_threads(p.pid)

    def _sample_threads(self, pid: int) -> None:
        tasks = Path(f"/proc/{pid}/task")
        try:
            tids = [t.name for t in tasks.iterdir()]
        except OSError:
            return
        for tid in tids:
            try:
                stat = (tasks / tid / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            seconds = (int(fields[11]) + int(fields[12])) / _TICKS
            self.threads[(pid, tid)] = (jvm_thread_part(name), seconds)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(self.interval)

    def total(self) -> float:
        """CPU seconds so far (sampled now), e.g. at the start and end of a measured period."""
        self._sample()
        return sum(self.seen.values())

    def split(self) -> dict[str, float]:
        """CPU seconds per part so far; they add up to :meth:`total`. A JVM's threads that
        ended before a sample count as ``jvm: other``."""
        out: dict[str, float] = {}
        for pid, seconds in self.seen.items():
            part = self.parts.get(pid, "other")
            if part == "jvm":
                named = 0.0
                for (owner, _), (thread_part, used) in self.threads.items():
                    if owner == pid:
                        out[thread_part] = out.get(thread_part, 0.0) + used
                        named += used
                out["jvm: other"] = out.get("jvm: other", 0.0) + max(0.0, seconds - named)
            else:
                out[part] = out.get(part, 0.0) + seconds
        return {k: round(v, 1) for k, v in sorted(out.items())}

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.total()


def broker() -> tuple[str, Any]:
    import os

    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        return external, None
    subprocess.run(["bash", str(ROOT / "scripts" / "fetch-kafka.sh")], check=True)
    from app.local_kafka import LocalKafka

    local = LocalKafka().start()
    settle(local.bootstrap_servers)
    return local.bootstrap_servers, local


class _Registry:
    """A running registry the bench did not start (``SCHEMA_REGISTRY_URL``)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def cleanup(self) -> None:
        return None


def schema_registry() -> Any:
    """The Confluent-compatible schema registry of ``SCHEMA_REGISTRY_URL`` when set, else a
    local one (the tests', tests/local_schema_registry.py), started."""
    external = os.environ.get("SCHEMA_REGISTRY_URL")
    if external:
        return _Registry(external)
    subprocess.run(["bash", str(ROOT / "scripts" / "fetch-schema-registry.sh")], check=True)
    return _test_servers().local_schema_registry.LocalSchemaRegistry().start()


def _test_servers() -> Any:
    """The tests' local servers (tests/local_*.py), imported as the tests import them: from
    the tests' directory, where they find their shared ``local_process``."""
    import importlib
    from types import SimpleNamespace

    if str(ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests"))
    return SimpleNamespace(**{name: importlib.import_module(name)
                              for name in ("local_schema_registry", "local_s3proxy")})


def settle(bootstrap: str) -> None:
    """Bring a fresh broker to the state of one in service: its first transaction creates the
    transaction and offsets topics, and waited ~1 s on "coordinator load in progress" (measured);
    a broker in service has them. Without this, Tidemark's first step (the only side writing in
    transactions) paid that broker start-up inside the measured run."""
    import uuid

    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"bench.settle.{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic, "log_level": 3})
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "log_level": 3})
    producer.init_transactions(120)
    producer.begin_transaction()
    producer.produce(topic, value=b"settle")
    producer.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 1)], group.consumer_group_metadata(), 120
    )
    producer.commit_transaction(120)
    group.close()


def wait_quiet(
    busy: Callable[[], float] | None = None, threshold: float = 10.0, timeout: float = 60.0
) -> tuple[float, float]:
    """Wait until the machine is idle (``busy()``: percent of all CPUs over the last
    interval, below ``threshold``) or ``timeout`` seconds have passed; the seconds waited and
    the last reading. Before each side, so that neither starts while the broker, the kernel
    or the other side's exit is still busy; the result keeps both (``quiet_wait_s``,
    ``busy_percent_before``), so a run that started on a busy machine shows it."""
    sample = busy or (lambda: float(psutil.cpu_percent(interval=1.0)))
    started = time.monotonic()
    while True:
        reading = sample()
        waited = time.monotonic() - started
        if reading < threshold or waited >= timeout:
            return round(waited, 1), reading


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def shape_of(workload: str, schema: dict[str, Any], **over: Any) -> EventShape:
    w = WORKLOADS[workload]
    keys = over.pop("keys", w.keys)
    return EventShape(schema, keys=keys, lateness_ms=w.lateness_ms, **over)


def input_schemas(workload: str) -> list[dict[str, Any]]:
    """The Avro schema of each input of ``workload``, in the order of its tables."""
    from app.program.compile import compile_program

    w = WORKLOADS[workload]
    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "p.sql"
        program.write_text(w.program.format(out="o", **{name: name for name in w.inputs}))
        return [dict(table.avro_schema) for table in compile_program(program).tables]


def input_schema(workload: str) -> dict[str, Any]:
    return input_schemas(workload)[0]


def pair_shape_of(workload: str) -> PairShape:
    """The auctions and bids of a workload of two inputs (d)."""
    w = WORKLOADS[workload]
    auction, bid = input_schemas(workload)
    return PairShape(auction, bid, keys=w.keys, lateness_ms=w.lateness_ms)


def limit(
    bootstrap: str, schemas: dict[str, dict[str, Any]], count: int, framed: bool = False
) -> dict[str, float]:
    """Raw consume rate (confluent-kafka, one consumer, all partitions) and fastavro decode
    rate of the same records: what any Python reader of these topics (``schemas``: each
    topic's schema; ``framed``: values in the Confluent wire format) is bounded by."""
    from confluent_kafka import Consumer

    from app.connectors.avro_codec import AvroCodec

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"limit-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
            "max.partition.fetch.bytes": 10485760,
            "log_level": 3,
        }
    )
    consumer.subscribe(list(schemas))
    values: list[tuple[str, bytes]] = []
    started = time.monotonic()
    first: float | None = None
    while len(values) < count:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                first = first or time.monotonic()
                values.append((str(m.topic()), m.value() or b""))
        if time.monotonic() - started > 300:
            break
    consume_s = time.monotonic() - (first or started)
    consumer.close()
    codecs = {name: AvroCodec(s) for name, s in schemas.items()}
    started = time.monotonic()
    skip = 5 if framed else 0  # the magic byte and the schema id
    for name, v in values:
        codecs[name].decode(v[skip:])
    decode_s = time.monotonic() - started
    return {
        "consume_per_s": len(values) / consume_s,
        "decode_per_s": len(values) / decode_s,
        "consume_and_decode_per_s": len(values) / (consume_s + decode_s),
    }


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_part(cmdline: list[str], root: bool) -> str:
    """Which part of a side a process is (:class:`TreeCpu`); ``jvm`` is split by thread."""
    if cmdline and Path(cmdline[0]).name == "java":
        return "jvm"
    if root:
        return "python: driver"
    if not cmdline or "python" not in Path(cmdline[0]).name:
        return "other"  # the spark-class shell (whose arguments name the Python too)
    if cmdline[-1] == "pyspark.worker":
        return "python: workers"
    return "python: planners"


def jvm_thread_part(name: str) -> str:
    """The part of a JVM a thread is, by its (15-character) Linux name."""
    if name.startswith("Executor task"):
        return "jvm: tasks"
    if "CompilerThre" in name:
        return "jvm: JIT"
    if name.startswith(("GC Thread", "G1 ")):
        return "jvm: GC"
    return "jvm: other"


def run_side(spec: dict[str, Any]) -> dict[str, Any]:
    log_path = Path(spec["work_dir"]) / "side.log"
    with log_path.open("w") as log:  # Spark's log; the child keeps its own descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "loadtests.side", json.dumps(spec)],
            cwd=ROOT,
            env={**os.environ, **spec.get("env", {})},
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    cpu = TreeCpu(proc.pid)
    out, _ = proc.communicate()
    cpu_s = cpu.stop()
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        err = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"{spec['side']} failed (rc {proc.returncode}): {out[-2000:]}\n{err}")
    result: dict[str, Any] = json.loads(line[7:])
    result["cpu_s_total"] = cpu_s  # includes JVM start-up: see cpu_s_per_m below
    result["cpu_split_s"] = cpu.split()
    return result


def count_records(bootstrap: str, topic: str) -> int:
    """The records of ``topic`` a ``read_committed`` consumer sees: a side's output rows
    (Tidemark writes in transactions, whose markers take offsets of their own)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"count-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )
    parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])  # 0: from the beginning
    ended: set[int] = set()
    seen = 0
    deadline = time.monotonic() + 600
    while len(ended) < len(parts) and time.monotonic() < deadline:
        for m in consumer.consume(10_000, 1.0):
            error = m.error()
            if error is None:
                seen += 1
            elif error.code() == KafkaError._PARTITION_EOF:
                ended.add(int(m.partition() or 0))
    consumer.close()
    if len(ended) < len(parts):
        raise RuntimeError(f"{topic}: not read to its end in 600 s")
    return seen


def steady_rate(step_log: list[dict[str, Any]], skip: int | None = None) -> float | None:
    """Events per second once warm: the steps after the first ``skip`` steps that read input
    (default: the first half of them, at least one), from the start of the first counted step
    to the end of the last one (so the time between steps, and any step without input in
    between, counts). None with fewer than two counted steps.

    The whole-run rate (events / seconds) also pays the query's start-up, the first, cold step
    and the JVM's warm-up: during a 1M-event run of (b) the JIT compilers were busy for
    20 s of its first 21 (``jstat -compiler``), on both sides. A service runs for days, so its
    sustainable rate is the warm one; both rates are reported."""
    reading = [s for s in step_log if s["events"] != 0]
    counted = reading[max(1, len(reading) // 2) if skip is None else skip :]
    if len(counted) < 2 or any(s["events"] is None for s in counted):
        return None
    span_ms = counted[-1]["start_ms"] + counted[-1]["ms"] - counted[0]["start_ms"]
    return sum(int(s["events"]) for s in counted) * 1000.0 / span_ms if span_ms > 0 else None


class ObjectStoreBench:
    """S3Proxy (the tests' S3-compatible server, tests/local_s3proxy.py) and a bucket of it,
    for Tidemark's checkpoint in an object store beside its local one (``--checkpoints``)."""

    def __init__(self) -> None:
        subprocess.run(["bash", str(ROOT / "scripts" / "fetch-s3proxy.sh")], check=True)
        from pydantic import SecretStr

        from app.config import ObjectStore
        from app.runtime.store.s3 import s3_store

        self._server = _test_servers().local_s3proxy.LocalS3Proxy().start()
        self.environment: dict[str, str] = self._server.environment()
        self.bucket = f"bench-{uuid.uuid4().hex[:8]}"
        s3_store(ObjectStore(
            endpoint=self._server.endpoint, path_style=True,
            access_key_id=self.environment["TIDEMARK_S3_ACCESS_KEY_ID"],
            secret_access_key=SecretStr(self.environment["TIDEMARK_S3_SECRET_ACCESS_KEY"]),
        )).create_bucket(self.bucket)

    def checkpoint(self) -> str:
        """A fresh checkpoint URL in the bucket."""
        return f"s3a://{self.bucket}/{uuid.uuid4().hex[:8]}"

    def cleanup(self) -> None:
        self._server.cleanup()


def throughput(
    bootstrap: str,
    workload: str,
    events: int,
    partitions: int,
    masters: list[str],
    sides: list[str],
    work: Path,
    max_records_per_step: int = 200_000,
    encoding: str = "avro",
    registry: str | None = None,
    store: ObjectStoreBench | None = None,
) -> dict[str, Any]:
    """One topic (or pair) of ``events`` and each side's run over it. ``encoding``
    ``avro-confluent``: the events framed with the input schema's id in ``registry``, and
    Tidemark's program reading and writing that format (the peer does not run). With
    ``store``, Tidemark runs twice: its checkpoint on a local path, then in the store."""
    w = WORKLOADS[workload]
    topic = f"bench.{workload}.{uuid.uuid4().hex[:6]}"
    framed = encoding == "avro-confluent"
    if framed and (len(w.inputs) != 1 or registry is None):
        raise ValueError("avro-confluent runs need a registry and a workload of one input")
    if len(w.inputs) == 1:
        schema = input_schema(workload)
        topics = {w.inputs[0]: topic}
        create_topic(bootstrap, topic, partitions)
        conf = {"bootstrap.servers": bootstrap}
        shape = shape_of(workload, schema)
        values = None
        if framed:
            from app.connectors.confluent_avro import frame, register_output_schemas

            assert registry is not None
            _, schema_id = register_output_schemas({"url": registry}, topic, None, schema)
            values = (frame(schema_id, v) for v in _encoded(shape, events))
        produce_s = produce(conf, topic, shape, events, values=values)
        readers = {topic: schema}
    else:
        # Each input its own topic of ``partitions`` partitions (each side reads them all).
        topics = {name: f"{topic}.{name}" for name in w.inputs}
        for name in topics.values():
            create_topic(bootstrap, name, partitions)
        pair = pair_shape_of(workload)
        pair_topics = (topics[w.inputs[0]], topics[w.inputs[1]])
        produce_s = produce_pair({"bootstrap.servers": bootstrap}, pair_topics, pair, events)
        readers = {
            pair_topics[0]: dict(pair.auction_schema),
            pair_topics[1]: dict(pair.bid_schema),
        }
    out: dict[str, Any] = {
        "topic": topic,
        "encoding": encoding,
        "events": events,
        "partitions": partitions,
        "max_records_per_step": max_records_per_step,
        "produce_per_s": events / produce_s,
        "limit": limit(bootstrap, readers, events, framed),
        "runs": [],
    }
    if len(w.inputs) > 1:
        out["topics"] = topics
    runs = [(side, where) for side in sides
            for where in (("local", "s3") if side == "tidemark" and store else ("local",))]
    for master in masters:
        for side, where in runs:
            if side == "peer" and framed:
                continue  # the peer's from_avro reads schemaless Avro only
            spec: dict[str, Any] = {
                "side": side,
                "workload": workload,
                "bootstrap": bootstrap,
                "topic": topics[w.inputs[0]],
                "topics": topics,
                "out": f"{topic}.{side}.{where}.{master[6:-1]}.out",
                "master": master,
                "shuffle_partitions": 2,
                "max_records_per_step": max_records_per_step,
                "work_dir": str(Path(tempfile.mkdtemp(dir=work))),
                "encoding": encoding,
                "registry": registry,
            }
            if where == "s3":
                assert store is not None
                spec["checkpoint"] = store.checkpoint()
                spec["env"] = store.environment
            create_topic(bootstrap, spec["out"], partitions)
            quiet_wait_s, busy_percent = wait_quiet()
            r = run_side(spec)
            r["output_records"] = count_records(bootstrap, spec["out"])
            r.update(
                quiet_wait_s=quiet_wait_s,
                busy_percent_before=busy_percent,
                side=side,
                checkpoint=where,
                master=master,
                encoding=encoding,
                events_per_s=events / r["seconds"],
                steady_events_per_s=steady_rate(r.get("step_log", [])),
            )
            state = r["state"]
            r["state_bytes_per_row"] = state["bytes"] / state["rows"] if state["rows"] else None
            print(json.dumps(r), flush=True)
            out["runs"].append(r)
    return out


def latency_runs(
    bootstrap: str,
    args: argparse.Namespace,
    runs: list[dict[str, Any]],
    partitions: int,
    work: Path,
) -> list[dict[str, Any]]:
    """The latency probe for each throughput run: same side, master and partition count, at
    ``--rate`` or half the events/s that run measured (its steady rate when it has one)."""
    from loadtests.latency import measure

    out = []
    for r in runs:
        # Half the sustainable rate: the warm one when the run had enough steps to tell.
        full = r.get("steady_events_per_s") or r["events_per_s"]
        rate = args.rate if args.rate is not None else full / 2
        lat = measure(
            bootstrap,
            args.workload,
            r["side"],
            r["master"],
            partitions,
            rate,
            work,
            args.warmup_seconds,
            args.measure_seconds,
            args.tail_seconds,
        )
        print(json.dumps(lat), flush=True)
        out.append(lat)
    return out


def _label(r: dict[str, Any]) -> str:
    encoding = r.get("encoding", "avro")
    side = r["side"] if encoding == "avro" else f"{r['side']}\n{encoding}"
    if r.get("checkpoint", "local") != "local":
        side = f"{side}\n{r['checkpoint']} checkpoint"
    return f"{side}\n{r['master']}\n{r.get('partitions', '')}p"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for t in result["throughput"] for r in t["runs"]]
    latency = [r for r in result.get("latency", []) if r.get("p99_ms") is not None]
    panels = 2 if latency else 1
    width = max(6, len(runs) * 1.3) + (max(6, len(latency) * 1.3) if latency else 0)
    fig, axes = plt.subplots(1, panels, figsize=(width, 4), squeeze=False)
    ax = axes[0][0]
    colors = ["#1f77b4" if r["side"] == "tidemark" else "#ff7f0e" for r in runs]
    # The steady rate is the max sustainable throughput; the whole-run rate beside
    # it pays the cold start, which is where the two sides differ most (see steady_rate).
    x = range(len(runs))
    steady = [r.get("steady_events_per_s") or 0 for r in runs]
    ax.bar([i - 0.2 for i in x], steady, 0.4, color=colors, label="steady (once warm)")
    ax.bar(
        [i + 0.2 for i in x],
        [r["events_per_s"] for r in runs],
        0.4,
        color=colors,
        alpha=0.45,
        hatch="//",
        label="whole run (cold start included)",
    )
    ax.set_xticks(list(x))
    ax.set_xticklabels([_label(r) for r in runs])
    lim = result["throughput"][0]["limit"]["consume_and_decode_per_s"]
    ax.axhline(lim, color="gray", linestyle="--", label="limit: consume + fastavro decode (1 core)")
    ax.set_yscale("log")  # the limit is often 10-100x both sides; linear hides the bars
    ax.set_ylabel("events/s processed (log)")
    ax.set_title(f"workload {result['workload']}: {WORKLOADS[result['workload']].title}")
    ax.legend(fontsize=8)
    if latency:
        ax = axes[0][1]
        x = range(len(latency))
        ax.bar([i - 0.2 for i in x], [r["p50_ms"] for r in latency], 0.4, label="p50")
        ax.bar([i + 0.2 for i in x], [r["p99_ms"] for r in latency], 0.4, label="p99")
        ax.set_xticks(list(x))
        ax.set_xticklabels(
            [
                f"{_label(r)}\n{r['rate_achieved']:,.0f}/s" + (" (>=)" if r["lower_bound"] else "")
                for r in latency
            ]
        )
        ax.set_yscale("log")
        ax.set_ylabel("ms, produce to visible (log)")
        fixed = result.get("latency_rate")
        ax.set_title(f"latency at {fixed:,.0f} events/s" if fixed else "latency at 50% of max")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Tidemark vs plain Spark, side by side")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), required=True)
    # 4M events: over 2M, a run's counted steps end while the peer's JVM is still warming
    # (its JIT busy for the first ~20 s), which favours Tidemark (docs/performance.md, Method).
    parser.add_argument(
        "--events", type=int, default=4_000_000, help="input events per side (default 4M)"
    )
    parser.add_argument("--partitions", type=int, nargs="+", default=[2])
    parser.add_argument("--masters", nargs="+", default=["local[2]"])
    parser.add_argument("--sides", nargs="+", default=["tidemark", "peer"])
    parser.add_argument(
        "--encodings",
        nargs="+",
        choices=["avro", "avro-confluent"],
        default=["avro"],
        help="input and output encodings of Tidemark's runs, each over its own topic of the "
        "same events (avro-confluent starts a local schema registry; the peer runs avro only)",
    )
    parser.add_argument(
        "--checkpoints",
        nargs="+",
        choices=["local", "s3"],
        default=["local"],
        help="where Tidemark's checkpoint is: s3 runs Tidemark again with its checkpoint in "
        "an S3-compatible store (S3Proxy, started here) beside the local run",
    )
    parser.add_argument(
        "--max-records-per-step",
        type=int,
        default=200_000,
        help="records each source reads a step, on both sides (default 200,000)",
    )
    parser.add_argument("--latency", action="store_true", help="also the 50%%-load latency run")
    parser.add_argument(
        "--rate", type=float, default=None, help="latency input events/s (default: 50%% of max)"
    )
    parser.add_argument("--warmup-seconds", type=float, default=30)
    parser.add_argument("--measure-seconds", type=float, default=120)
    parser.add_argument("--tail-seconds", type=float, default=60)
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help="result directory (default: var/loadtests/)"
    )
    parser.add_argument(
        "--plot", type=Path, default=None, help="plot file (default: the result's name, .png)"
    )
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if "peer" in args.sides:
        subprocess.run(["bash", str(ROOT / "scripts" / "fetch-spark-peer.sh")], check=True)
    if "avro-confluent" in args.encodings and len(WORKLOADS[args.workload].inputs) > 1:
        raise SystemExit(f"--encodings avro-confluent: workload {args.workload} has two inputs")
    bootstrap, local = broker()
    registry = schema_registry() if "avro-confluent" in args.encodings else None
    store = ObjectStoreBench() if "s3" in args.checkpoints else None
    result: dict[str, Any] = {
        "workload": args.workload,
        "cpus": psutil.cpu_count(),
        "load_avg_start": list(psutil.getloadavg()),
        "encodings": args.encodings,
        "checkpoints": args.checkpoints,
        "throughput": [],
        "latency_rate": args.rate,  # None: half of each run's steady (else whole-run) events/s
    }
    try:
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            for partitions in args.partitions:
                for encoding in args.encodings:
                    t = throughput(
                        bootstrap,
                        args.workload,
                        args.events,
                        partitions,
                        args.masters,
                        args.sides,
                        Path(tmp),
                        args.max_records_per_step,
                        encoding,
                        registry.url if registry is not None else None,
                        store,
                    )
                    for r in t["runs"]:
                        r["partitions"] = partitions
                        r["cpu_s_per_m"] = r["cpu_s_total"] / args.events * 1e6
                    result["throughput"].append(t)
                    if args.latency and encoding == "avro":
                        result.setdefault("latency", []).extend(
                            latency_runs(bootstrap, args, t["runs"], partitions, Path(tmp))
                        )
    finally:
        if store is not None:
            store.cleanup()
        if registry is not None:
            registry.cleanup()
        if local is not None:
            local.cleanup()
    result["load_avg_end"] = list(psutil.getloadavg())
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.workload}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=1))
    plot(result, args.plot or path.with_suffix(".png"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
