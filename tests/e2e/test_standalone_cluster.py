"""Scale-out: the same program on a Spark standalone cluster (a master and
two workers, each its own JVM, started from the pyspark wheel by scripts/spark-standalone.sh)
writes the same outputs and dead letters as in local mode.

Each mode runs the real CLI, ``tidemark run --once``, in its own process, twice: once over a
first step of purchases, once over a second step holding rows below the waterline the first
step left (SPEC S3, S5, S6). Both modes read the same input topic and write to their own output
topics; the test compares the append view's rows, the windowed view's final value per key
(S9, S12 upsert) and the dead letters, as a read_committed consumer sees them. The workers'
work directories show the executors ran there.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Producer

from app.connectors.topic_reader import read_topic

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = fastavro.parse_schema(json.loads((ROOT / "schemas" / "purchase.avsc").read_text()))
T0 = 1_763_600_000_000 - 1_763_600_000_000 % 60_000  # a minute boundary
PROGRAM = """
CREATE TABLE purchase (
    date_time   TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    credit_card BIGINT NOT NULL,
    amount      DECIMAL(10, 2)
) WITH ('topic' = '{topic}', 'format' = 'avro', 'dead_letter' = '{out}.dlq');

CREATE VIEW large_purchase WITH ('topic' = '{out}.large', 'format' = 'append') AS
SELECT date_time, credit_card, amount FROM purchase WHERE amount >= 100;

CREATE VIEW per_minute WITH ('topic' = '{out}.per_minute') AS
SELECT window_start, window_end, COUNT(*) AS purchases, SUM(amount) AS total
FROM TABLE(TUMBLE(TABLE purchase, DESCRIPTOR(date_time), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end;
"""


def _avro(date_time_ms: int, card: int, amount: str) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, SCHEMA, {
        "date_time": date_time_ms, "credit_card": card, "amount": Decimal(amount)})
    return out.getvalue()


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(master URL, state dir) of a master and two workers; stopped after the module."""
    state = tmp_path_factory.mktemp("spark-standalone")
    env = {**os.environ, "SPARK_STANDALONE_DIR": str(state)}
    script = str(ROOT / "scripts" / "spark-standalone.sh")
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True,
                             timeout=180)
    assert started.returncode == 0, started.stderr
    try:
        yield started.stdout.strip().splitlines()[-1], state
    finally:
        subprocess.run([script, "stop"], env=env, capture_output=True, timeout=60, check=False)


def _run_once(program: Path, bootstrap: str, checkpoint: Path, master: str, log: Path) -> None:
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "TIDEMARK_LOG_FORMAT": "json",
        # Executors on the workers connect back to the driver: keep everything on loopback.
        "SPARK_LOCAL_IP": "127.0.0.1",
        # One state partition per worker core: fewer Python tasks per step, same results.
        "TIDEMARK_SHUFFLE_PARTITIONS": "2",
    }
    with log.open("ab") as stderr:
        result = subprocess.run(
            [sys.executable, "-m", "app.cli", "run", str(program),
             "--bootstrap-servers", bootstrap, "--checkpoint", str(checkpoint),
             "--spark-master", master, "--metrics-port", "0", "--once"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr, timeout=600,
        )
    assert result.returncode == 0, log.read_text()[-4000:]


def _outputs(conf: dict[str, str], out: str) -> dict[str, Any]:
    """The Avro bytes each mode wrote: append rows, final upsert value per key, dead letters."""
    large = sorted(m.value() for m in read_topic(conf, f"{out}.large"))
    final: dict[bytes, bytes | None] = {}
    for msg in read_topic(conf, f"{out}.per_minute"):
        final[msg.key()] = msg.value()  # upsert: the last record per key is the group's value
    dead = sorted((m.key() or b"", m.value()) for m in read_topic(conf, f"{out}.dlq"))
    return {"large": large, "per_minute": final, "dead": dead}


@pytest.mark.timeout(1800)
def test_standalone_cluster_gives_local_mode_outputs_s3_s5_s9(
    kafka: Any, standalone_cluster: tuple[str, Path], tmp_path: Path
) -> None:
    master, state = standalone_cluster
    topic = f"purchases-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    conf = kafka.conf()
    producer = Producer({**conf, "log_level": 3})

    def send(rows: list[tuple[int, int, str]]) -> None:
        for date_time, card, amount in rows:
            producer.produce(topic, key=str(card).encode(), value=_avro(date_time, card, amount),
                             partition=card % 2)
        assert producer.flush(30) == 0

    # Step 1: ten minutes in order, the waterline ends at T0 + 10 min - 1 min (S3).
    step1 = [(T0 + i * 6_000, i, "150.00" if i % 5 == 0 else "12.50") for i in range(100)]
    # Step 2: five rows far below that waterline (late, S5) and twenty newer rows.
    step2 = [(T0 + 60_000 + i * 1_000, 1000 + i, "120.00") for i in range(5)] + [
        (T0 + 600_000 + i * 3_000, 2000 + i, "101.00" if i % 2 else "7.25") for i in range(20)]

    modes = {"local": "local[2]", "cluster": master}
    outs = {mode: f"{topic}.{mode}" for mode in modes}
    programs = {}
    for mode in modes:
        programs[mode] = tmp_path / f"{mode}.sql"
        programs[mode].write_text(PROGRAM.format(topic=topic, out=outs[mode]))

    for step in (step1, step2):
        send(step)
        for mode, url in modes.items():
            _run_once(programs[mode], kafka.bootstrap_servers, tmp_path / f"checkpoint-{mode}",
                      url, tmp_path / f"{mode}.log")

    local = _outputs(conf, outs["local"])
    cluster = _outputs(conf, outs["cluster"])
    assert len(local["large"]) == 20 + 10, "step 1's 20 large rows and step 2's 10 on-time ones"
    assert len(local["dead"]) == 5, "the five rows below the waterline, dead-lettered once"
    assert len(local["per_minute"]) >= 10
    assert cluster == local

    # The executors ran on the workers: each worker has an executor directory of a finished app.
    for worker in ("worker-1", "worker-2"):
        executor_dirs = [p for p in (state / worker).glob("app-*/*") if p.is_dir()]
        assert executor_dirs, f"no executor ran on {worker}"
