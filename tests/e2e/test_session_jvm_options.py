"""A service whose JVM holds no rows compiles with C1 alone; one that aggregates keeps both
compilers (``COORDINATOR_JAVA_OPTIONS`` in app/runtime/session.py).

Each case starts a fresh JVM in a child process (the shared session's JVM is started once, with
its options fixed) through ``Service.open_session``, with a ``spark-defaults.conf`` like the
chart's, and reads the options the JVM was started with from the JVM itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.runtime.session import COORDINATOR_JAVA_OPTIONS

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

TABLE = """
CREATE TABLE clicks (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr  VARCHAR   NOT NULL,
    n    INT       NOT NULL
) WITH ('topic' = 'in');
"""

#: A filter view: computed in the source's tasks (ADR 0007), no row enters the JVM.
FILTER = TABLE + """
CREATE VIEW big WITH ('topic' = 'out', 'format' = 'append') AS
SELECT ts, usr, n FROM clicks WHERE n > 500;
"""

#: A windowed aggregate: Spark's own aggregation, in the JVM.
AGGREGATE = TABLE + """
CREATE VIEW per_minute WITH ('topic' = 'out') AS
SELECT window_start, window_end, usr, COUNT(*) AS c, SUM(n) AS s
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr
EMIT AFTER WATERMARK;
"""

CHILD = """
import json, sys
from pathlib import Path
from app.config import Settings
from app.program.compile import compile_program
from app.runtime.service import Service

settings = Settings(bootstrap_servers="unused:9092", checkpoint=Path(sys.argv[2]),
                    spark_master="local[1]", shuffle_partitions=1, spark_log="console")
service = Service(compile_program(Path(sys.argv[1])), settings)
spark = service.open_session()
bean = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print(json.dumps(list(bean.getInputArguments())))
service.shutdown()
"""


def _jvm_options(name: str, text: str, tmp_path: Path) -> list[str]:
    program = tmp_path / f"{name}.sql"
    program.write_text(text)
    conf = tmp_path / "spark-conf"
    conf.mkdir(exist_ok=True)
    (conf / "spark-defaults.conf").write_text(
        "spark.driver.extraJavaOptions  -XX:+ExitOnOutOfMemoryError\n"
    )
    env = {**os.environ, "SPARK_CONF_DIR": str(conf), "PYTHONPATH": str(ROOT)}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(program), str(tmp_path / f"ck-{name}")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    options: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return options


def test_a_coordinating_jvm_compiles_with_c1_alone(tmp_path: Path) -> None:
    options = _jvm_options("filter", FILTER, tmp_path)
    assert COORDINATOR_JAVA_OPTIONS in options
    # The operator's options (the chart's spark-defaults) come after ours, so theirs win.
    assert "-XX:+ExitOnOutOfMemoryError" in options
    assert options.index(COORDINATOR_JAVA_OPTIONS) < options.index("-XX:+ExitOnOutOfMemoryError")


def test_a_jvm_that_aggregates_keeps_both_compilers(tmp_path: Path) -> None:
    options = _jvm_options("aggregate", AGGREGATE, tmp_path)
    assert not any(o.startswith("-XX:TieredStopAtLevel") for o in options)
    assert "-XX:+ExitOnOutOfMemoryError" in options
