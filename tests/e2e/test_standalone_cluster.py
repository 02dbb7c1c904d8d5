"""Scale-out without shared storage: a Spark standalone cluster of two workers (each its own
JVM, started from the pyspark wheel by scripts/spark-standalone.sh), each worker with its own
work, local and temporary directories, and the driver with its own, writes the same outputs
and dead letters as local mode, with the checkpoint on an S3-compatible store (S3Proxy,
tests/local_s3proxy.py): the one place every process reaches.

The program has an interval join of two tables (Spark's stream-stream join), a windowed
aggregate (Spark's own, read through a stage boundary, ADR 0023) and a stateless filter view;
its input (tests/e2e/kill_loop.py) holds rows out of order, rows below the waterline (late,
SPEC S5) and malformed records. Outputs and dead letters are read with read_committed and
checked against the reference evaluator fed the steps Spark's offset log recorded (S15):
nothing lost, nothing doubled.

1. ``tidemark run --once`` in local mode (a local directory) and on the cluster (``s3a://``)
   write the same records and dead letters, each equal to the reference's.
2. A multi-step ``tidemark run`` on the cluster loses one worker mid-run (SIGKILL to the
   worker's JVM, its executor and their Python workers, as when a machine dies); the run goes
   on with the other worker's executor and still writes exactly the reference's records.

Both check, on the live processes and in the executors' logs, that no executor touched
another worker's or the driver's directories, and that the checkpoint has no local path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kill_loop import (
    Run,
    _check,
    _read_to_the_end,
    _snapshot,
    offset_log,
    produce_input,
    read_dead_letters,
    read_view,
    wait_for,
)

from app.program.compile import compile_program
from app.runtime.store import join, store_at

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
WORKERS = ("worker-1", "worker-2")
PROGRAM = """
CREATE TABLE orders (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND,
    id      BIGINT NOT NULL,
    amount  BIGINT NOT NULL
) WITH ('topic' = '{inp}.orders', 'dead_letter' = '{out}.orders.dlq');

CREATE TABLE fills (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND,
    id      BIGINT NOT NULL,
    amount  BIGINT NOT NULL
) WITH ('topic' = '{inp}.fills', 'dead_letter' = '{out}.fills.dlq');

CREATE VIEW matched WITH ('topic' = '{out}.matched', 'format' = 'append') AS
SELECT o.ts, o.id, o.amount AS ordered, f.amount AS filled
FROM orders AS o
JOIN fills AS f
  ON o.id = f.id
 AND f.ts BETWEEN o.ts AND o.ts + INTERVAL '10' SECOND;

CREATE VIEW fills_per_window WITH ('topic' = '{out}.windows', 'format' = 'append') AS
SELECT window_start, window_end, COUNT(*) AS n, SUM(amount) AS total
FROM TABLE(TUMBLE(TABLE fills, DESCRIPTOR(ts), INTERVAL '5' SECOND))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;

CREATE VIEW round_orders WITH ('topic' = '{out}.round', 'format' = 'append') AS
SELECT ts, id, amount FROM orders WHERE amount % 3 = 0;
"""


@pytest.fixture(scope="module")
def short_root() -> Iterator[Path]:
    """A directory with a short path for the workers' and drivers' directories: Spark's Python
    workers listen on Unix sockets in java.io.tmpdir (.<uuid>.sock, 43 bytes), and a socket
    path has at most 107; pytest's temporary paths leave too little of that."""
    root = Path(tempfile.mkdtemp(prefix="tm-sn-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def standalone_cluster(short_root: Path) -> Iterator[tuple[str, Path]]:
    """(master URL, state dir) of a master and two workers; stopped after the module."""
    state = short_root / "cluster"
    env = {**os.environ, "SPARK_STANDALONE_DIR": str(state)}
    script = str(ROOT / "scripts" / "spark-standalone.sh")
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True,
                             timeout=180)
    assert started.returncode == 0, started.stderr
    try:
        yield started.stdout.strip().splitlines()[-1], state
    finally:
        subprocess.run([script, "stop"], env=env, capture_output=True, timeout=60, check=False)


def _program(tmp_path: Path, name: str, inp: str) -> tuple[Path, Any]:
    path = tmp_path / f"{name}.sql"
    path.write_text(PROGRAM.format(inp=inp, out=f"{inp}.{name}"))
    return path, compile_program(path)


def _driver_environment(driver: Path, master: str, object_store: Any) -> dict[str, str]:
    """The driver's own directories (temporary, Spark's local dirs, Spark's log), the cluster
    and the object store: nothing of it is a path a worker uses."""
    for sub in ("tmp", "local"):
        (driver / sub).mkdir(parents=True, exist_ok=True)
    return {
        **object_store.environment,
        "TIDEMARK_SPARK_MASTER": master,
        "TIDEMARK_SPARK_LOG_FILE": str(driver / "spark.log"),
        # One state partition per worker core: fewer Python tasks per step, same results.
        "TIDEMARK_SHUFFLE_PARTITIONS": "2",
        "TMPDIR": str(driver / "tmp"),
        "SPARK_LOCAL_DIRS": str(driver / "local"),
        "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={driver / 'tmp'}",
        # Executors on the workers connect back to the driver: keep everything on loopback.
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }


def _run_once(program: Path, bootstrap: str, checkpoint: str, env: dict[str, str],
              log: Path) -> None:
    with log.open("ab") as stderr:
        result = subprocess.run(  # noqa: S603 - this interpreter, our own command line
            [sys.executable, "-m", "app.cli", "run", str(program),
             "--bootstrap-servers", bootstrap, "--checkpoint", checkpoint,
             "--metrics-port", "0", "--max-records-per-step", "60", "--once"],
            cwd=ROOT, env={**os.environ, "TIDEMARK_LOG_FORMAT": "json", **env},
            stdout=subprocess.DEVNULL, stderr=stderr, timeout=900, check=False,
        )
    assert result.returncode == 0, log.read_text()[-4000:]


def _outputs(conf: dict[str, str], circuit: Any) -> dict[str, Counter[str]]:
    """Every output view's records and every table's dead letters, read_committed."""
    found = {v.name: read_view(conf, v) for v in circuit.views if v.output}
    for table in circuit.tables:
        found[f"dlq:{table.name}"] = read_dead_letters(conf, table)
    return found


# -- what the processes of each worker touch ----------------------------------------------


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process under it (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent_pid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent_pid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def _java_tmpdir(environ: dict[str, str], cmdline: list[str]) -> str | None:
    """The java.io.tmpdir a JVM runs with: its command line's, else JAVA_TOOL_OPTIONS'."""
    options = [*environ.get("JAVA_TOOL_OPTIONS", "").split(), *cmdline]
    found = [o.split("=", 1)[1] for o in options if o.startswith("-Djava.io.tmpdir=")]
    return found[-1] if found else None


def _touched(pid: int) -> tuple[dict[str, str], list[str], list[str]]:
    """A process's environment, command line, and the paths it uses: its working directory,
    its open files and the files it maps."""
    proc = Path("/proc") / str(pid)
    raw = (proc / "environ").read_bytes().split(b"\0")
    environ = dict(e.decode(errors="replace").split("=", 1) for e in raw if b"=" in e)
    cmdline = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0")]
    paths = [os.readlink(proc / "cwd")]
    for fd in (proc / "fd").iterdir():
        try:
            paths.append(os.readlink(fd))
        except OSError:
            continue
    for line in (proc / "maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            paths.append(fields[5])
    return environ, cmdline, [p.removesuffix(" (deleted)") for p in paths if p.startswith("/")]


def _inside(path: str, directory: Path) -> bool:
    return path == str(directory) or path.startswith(f"{directory}/")


def _check_live_workers(state: Path, driver: Path) -> dict[str, int]:
    """Each worker's processes (the worker's JVM, its executors' JVMs, their Python workers)
    run with the worker's own temporary and local directories and use no path of the other
    worker, of the driver, or of the shared temporary directory. Returns the number of
    processes checked per worker."""
    checked: dict[str, int] = {}
    system_tmp = Path("/tmp")
    for name in WORKERS:
        own = state / name
        others = [state / w for w in WORKERS if w != name] + [driver]
        executors = pythons = 0
        for pid in _descendants(int((state / f"{name}.pid").read_text())):
            try:
                environ, cmdline, paths = _touched(pid)
            except (FileNotFoundError, ProcessLookupError):
                continue  # ended meanwhile (a Python worker between tasks)
            assert environ.get("TMPDIR") == str(own / "tmp"), (name, pid, cmdline[:3])
            if Path(cmdline[0]).name == "java":
                assert _java_tmpdir(environ, cmdline) == str(own / "tmp"), (name, cmdline)
            if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in cmdline:
                executors += 1
                local_dirs = environ["SPARK_EXECUTOR_DIRS"].split(os.pathsep)
                assert all(_inside(d, own / "local") for d in local_dirs), local_dirs
                assert _inside(paths[0], own / "work"), f"executor's cwd {paths[0]}"
            elif "python" in Path(cmdline[0]).name:
                pythons += 1
            for path in paths:
                assert not any(_inside(path, other) for other in others), (name, pid, path)
                # The JVM's performance counters are a file per process in the system's
                # temporary directory whatever java.io.tmpdir says (HotSpot fixes it).
                if _inside(path, system_tmp) and "/hsperfdata_" not in path:
                    assert _inside(path, own), f"{name}: pid {pid} uses {path}"
        assert executors >= 1, f"no executor runs on {name}"
        assert pythons >= 1, f"no Python worker runs on {name}"
        checked[name] = executors + pythons
    return checked


_PATH = re.compile(r"/[^\s'\",;:()\[\]]+")


def _check_executor_logs(state: Path, driver: Path, base: Path) -> None:
    """Every executor's log names only its own worker's directories among the test's: its
    local directories (DiskBlockManager's ``Created local directory at``) and temporary one
    (``Picked up JAVA_TOOL_OPTIONS``) included."""
    for name in WORKERS:
        own = state / name
        logs = sorted((own / "work").glob("app-*/*/stderr"))
        assert logs, f"no executor ran on {name}"
        for log in logs:
            text = log.read_text(errors="replace")
            assert f"-Djava.io.tmpdir={own / 'tmp'}" in text, log
            assert re.search(rf"Created local directory at {re.escape(str(own / 'local'))}/",
                             text), log
            named = {p for p in _PATH.findall(text) if _inside(p, base)}
            strays = {p for p in named if not _inside(p, own)}
            assert not strays, f"{log} names paths outside {own}: {sorted(strays)[:5]}"
    for other in (driver,):
        assert not list(other.rglob("app-*")), "an executor's directory in the driver's"


def _check_checkpoint_in_bucket(checkpoint: str, circuit: Any, *local: Path) -> None:
    """Spark's logs and state of every query, and Tidemark's files, are in the bucket; none of
    the driver's or workers' directories holds an offset or commit log."""
    store = store_at(checkpoint)
    queries = [n for n in store.names(checkpoint) if store.names(join(checkpoint, n, "spark"))]
    assert circuit.tables[0].name in queries and len(queries) >= 2, queries
    for query in queries:
        spark = join(checkpoint, query, "spark")
        assert {"offsets", "commits"} <= set(store.names(spark)), (query, store.names(spark))
    for directory in local:
        found = [p for p in directory.rglob("*") if p.name in ("offsets", "commits", "sink-id")]
        assert not found, f"checkpoint files on a local path: {found[:3]}"


def _alive_workers(state: Path) -> int:
    """The workers the master counts alive (scripts/spark-standalone.sh status)."""
    status = subprocess.run(
        [str(ROOT / "scripts" / "spark-standalone.sh"), "status"], capture_output=True,
        text=True, timeout=60, check=True, env={**os.environ, "SPARK_STANDALONE_DIR": str(state)},
    )
    return int(status.stdout.strip().rsplit("workers=", 1)[1])


# -- the tests -------------------------------------------------------------------------------


@pytest.mark.timeout(1800)
def test_shared_nothing_cluster_gives_local_mode_outputs_s5_s15(
    kafka: Any, standalone_cluster: tuple[str, Path], object_store: Any, tmp_path: Path,
    short_root: Path,
) -> None:
    master, state = standalone_cluster
    inp = f"sn-{uuid.uuid4().hex[:8]}"
    local_program, local = _program(tmp_path, "local", inp)
    cluster_program, cluster = _program(tmp_path, "cluster", inp)
    conf = kafka.conf()
    produced = produce_input(conf, local, rows=300, seed=11)

    driver = short_root / "driver-once"
    checkpoint = object_store.url("ck")
    _run_once(local_program, kafka.bootstrap_servers, str(tmp_path / "checkpoint-local"),
              {"TIDEMARK_SPARK_MASTER": "local[2]", "TIDEMARK_SHUFFLE_PARTITIONS": "2"},
              tmp_path / "local.log")
    _run_once(cluster_program, kafka.bootstrap_servers, checkpoint,
              _driver_environment(driver, master, object_store), tmp_path / "cluster.log")

    local_out, cluster_out = _outputs(conf, local), _outputs(conf, cluster)
    assert cluster_out == local_out
    assert sum(local_out["matched"].values()) > 50, "the join matched rows"
    assert sum(local_out["fills_per_window"].values()) >= 10, "windows closed"
    assert sum(local_out["round_orders"].values()) > 50
    reasons = Counter(json.loads(letter)[0] for table in ("orders", "fills")
                      for letter in local_out[f"dlq:{table}"])
    assert reasons["late"] >= 2 and reasons["malformed"] >= 2, reasons
    # Both equal the reference fed the cluster's recorded steps (the same batches).
    batches, _ = offset_log(join(checkpoint, "orders", "spark"))
    assert len(batches) >= 5, "several steps: rows went late across them"
    checked = _check(cluster, produced, batches, cluster_out, conf, [])
    print({"records_checked": checked, "steps": len(batches)})

    _check_executor_logs(state, driver, short_root)
    _check_checkpoint_in_bucket(checkpoint, cluster, state, driver)


@pytest.mark.timeout(1800)
def test_a_worker_killed_mid_run_loses_and_doubles_nothing_s15(
    kafka: Any, standalone_cluster: tuple[str, Path], object_store: Any, tmp_path: Path,
    short_root: Path,
) -> None:
    """Runs last in the module: it leaves the cluster one worker short."""
    master, state = standalone_cluster
    inp = f"snk-{uuid.uuid4().hex[:8]}"
    program, circuit = _program(tmp_path, "killed", inp)
    conf = kafka.conf()
    produced = produce_input(conf, circuit, rows=400, seed=13)
    driver = short_root / "driver-killed"
    checkpoint = object_store.url("ck")
    spark_dir = join(checkpoint, "orders", "spark")
    steps: list[dict[str, Any]] = []
    started = time.monotonic()
    run = Run(program, kafka, checkpoint, steps, {}, 40,
              env_extra=_driver_environment(driver, master, object_store))
    try:
        # A few steps in, while tasks run on both workers, the machine of worker-1 dies.
        wait_for("three steps", lambda: len(offset_log(spark_dir)[1]) >= 3, run, 600)
        live = _check_live_workers(state, driver)
        victims = _descendants(int((state / "worker-1.pid").read_text()))
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed_at_step = max(offset_log(spark_dir)[1])
        batches = _read_to_the_end(run, spark_dir, circuit, produced, conf)
        # The windows the last rows close come out of the later query (behind the stage
        # boundary) in the step Spark runs after its watermark moved: read until the outputs
        # are the reference's. A duplicate never goes away, a loss fails after two minutes.
        deadline = time.monotonic() + 120
        while True:
            outputs = _snapshot(run, conf, circuit, spark_dir, batches)
            try:
                checked = _check(circuit, produced, batches, outputs, conf, steps)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)
    finally:
        run.kill()
    seconds = time.monotonic() - started
    assert _alive_workers(state) == 1, "the master counts worker-1 lost"
    after = [b.batch_id for b in batches if b.batch_id > killed_at_step]
    assert len(after) >= 3, f"the run went on after the kill: {after}"
    spark_log = (driver / "spark.log").read_text(errors="replace")
    assert re.search(r"Lost executor \d+", spark_log), "Spark saw the executor go"
    print({"records_checked": checked, "steps": len(batches), "killed_after_step":
           killed_at_step, "processes_killed": len(victims), "live_checked": live,
           "seconds": round(seconds)})
    _check_executor_logs(state, driver, short_root)
    _check_checkpoint_in_bucket(checkpoint, circuit, state, driver)
