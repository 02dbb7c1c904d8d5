"""``tidemark demo`` as a newcomer sees it: Tidemark's lines only on the console, Spark's in a
file, no traceback, and what the product is for (final windows beside the filter view's rows,
a dead letter's headers decoded), with the summary's counts adding up.

It runs the installed command as a subprocess, the way ``make demo`` does, on a real broker
and local Spark, and reads its combined stdout and stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TIDEMARK = ROOT / ".venv" / "bin" / "tidemark"

#: Lines that must not reach the console: Spark's log4j2 lines ("26/11/26 00:14:42 WARN
#: Utils: ..."), its banners, the JVM's start-up warning, Python tracebacks (the pyspark
#: daemon's BrokenPipeError) and librdkafka's own log lines ("%3|...|FAIL|rdkafka#...").
FORBIDDEN = {
    "a Spark log4j line": re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|ERROR|INFO) "),
    "a WARN line": re.compile(r" WARN "),
    "a Spark banner": re.compile(r"log4j profile|Setting default log level|setLogLevel"),
    "the JVM's start-up warning": re.compile(r"WARNING: Using incubator modules"),
    "a traceback": re.compile(r"Traceback|BrokenPipeError"),
    "a librdkafka line": re.compile(r"%\d\|\d+\.\d+\||rdkafka|Connection refused"),
}


def console_problems(output: str) -> list[str]:
    """What in the demo's console output says something other than Tidemark speaks."""
    problems = []
    for line in output.splitlines():
        for what, pattern in FORBIDDEN.items():
            if pattern.search(line):
                problems.append(f"{what}: {line}")
    return problems


def product_shown(output: str) -> list[str]:
    """What of the product the demo's console output fails to show."""
    missing = []
    expected = {
        "the filter view's rows": r"purchases\.large: the filter view[\s\S]*?"
        r"│ \d{4}-\d\d-\d\d \d\d:\d\d:\d\d │ +\d+ │ +\d+\.\d\d │",
        "final window rows": r"purchases\.per_10m: 10-minute windows[\s\S]*?"
        r"│ \d{4}-\d\d-\d\d \d\d:\d0-\d\d:\d0 +│ +\d+ │ +\d+\.\d\d │ +\d+\.\d\d │",
        "a dead letter's reason": r"│ tidemark\.error\.reason +│ late ",
        "its late column": r"│ tidemark\.late\.column +│ date_time ",
        "its value": r"│ tidemark\.late\.value +│ \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",
        "its waterline": r"│ tidemark\.late\.waterline +│ \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",
        "its source offset": r"│ tidemark\.source\.offset +│ \d+ ",
        "the summary": r"Tidemark demo summary",
    }
    for what, pattern in expected.items():
        if not re.search(pattern, output):
            missing.append(what)
    checks = re.findall(r"^\s+(ok |FAIL) (.+)$", output, re.MULTILINE)
    if len(checks) != 4 or any(status != "ok " for status, _ in checks):
        missing.append(f"four summary checks, all ok: {checks}")
    return missing


# In the slow suite (CI's budget); CI runs the demo in tests/e2e/test_demo_program.py.
# Run: `pytest -m slow -k demo_console_shows`.
@pytest.mark.slow
def test_the_demo_console_shows_tidemark_lines_and_the_product_only(tmp_path: Path) -> None:
    assert TIDEMARK.is_file(), "the project's venv: make setup"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDEMARK_SPARK", "PYSPARK"))}
    env.update(NO_COLOR="1", TERM="dumb")
    started = time.monotonic()
    done = subprocess.run(
        [str(TIDEMARK), "demo", "--duration-seconds", "20"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=420,
        check=False,
    )
    output = done.stdout
    seconds = time.monotonic() - started
    assert done.returncode == 0, output
    assert console_problems(output) == [], output
    assert product_shown(output) == [], output
    # Spark's lines went to the file the demo named at start, not away.
    log_file = tmp_path / "var" / "demo" / "spark.log"
    assert f"Spark's own logs go to {Path('var/demo/spark.log')}" in output
    assert re.search(r" WARN ", log_file.read_text()), "Spark's WARN lines are in the file"
    assert "incubator modules" in (tmp_path / "var" / "demo" / "spark.out").read_text()
    print(f"demo ran {seconds:.0f}s")


def test_the_checks_catch_what_the_console_used_to_show() -> None:
    """The assertions above fail on the console of a demo that let Spark and librdkafka
    print (lines as they were printed before Spark's logs went to a file)."""
    noisy = """\
starting Spark (local[2]) and the streaming query...
WARNING: Using incubator modules: jdk.incubator.vector
Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties
26/11/26 00:14:42 WARN Utils: Your hostname, vm, resolves to a loopback address: 127.0.0.1
26/11/26 00:15:40 WARN ProcessingTimeExecutor: Current batch is falling behind.
%3|1795652164.507|FAIL|rdkafka#producer-3| [thrd:127.0.0.1:54699/bootstrap]: Connect \
to ipv4#127.0.0.1:54699 failed: Connection refused (after 0ms in state CONNECT)
Traceback (most recent call last):
  File ".../pyspark/daemon.py", line 95, in worker
BrokenPipeError: [Errno 32] Broken pipe
  ok  records in = produced
"""
    problems = console_problems(noisy)
    for what in FORBIDDEN:
        assert any(p.startswith(what) for p in problems), what
    assert "final window rows" in product_shown(noisy)
    assert "a dead letter's reason" in product_shown(noisy)
