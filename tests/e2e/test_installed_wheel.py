"""The package as a user installs it: the wheel, in a fresh virtual environment, no extras.

Every other test runs in the development environment, which also has the ``dev`` extra; a
module that only an extra provides would pass there and fail for every user and in the
image (which installs the package exactly so). Here the wheel is built from this checkout,
installed into a new venv with its own dependencies only, and then

- every module of ``app`` is imported by that venv's interpreter, from outside the source
  tree, so the installed copy is the one imported;
- that venv's ``tidemark run --once`` runs a program end to end against the broker fixture.
  The driver is that venv's interpreter, and Spark starts its Python workers with the
  driver's interpreter (app/runtime/session.py), so the workers use the venv too.

Building the venv takes about a minute on 2 cores once pip's cache holds the wheels
(``--no-compile``, as in the image: compiling pyspark's bytecode took two more).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program

# Slow (about 75 s, CI's budget): `pytest -m slow tests/e2e/test_installed_wheel.py`; CI's
# unit test_runtime_dependencies checks the runtime closure the wheel declares.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BASE_MS = 1_700_000_000_000

IMPORT_EVERY_MODULE = """
import importlib, importlib.util, pkgutil, sys
import app
names = [m.name for m in pkgutil.walk_packages(app.__path__, "app.")]
for name in names:
    importlib.import_module(name)
extras = [n for n in ("pytest", "hypothesis", "mypy", "ruff") if importlib.util.find_spec(n)]
print(len(names), app.__file__, ",".join(extras) or "-")
"""

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    sensor  BIGINT NOT NULL,
    value   DOUBLE
) WITH ('topic' = '{topic}', 'dead_letter' = '{dlq}');

CREATE VIEW hot WITH ('topic' = '{out}', 'format' = 'append') AS
SELECT ts, sensor, value FROM reading WHERE value > 50;
"""


def _clean_env(venv: Path) -> dict[str, str]:
    """The environment a user's shell would have: the venv first on PATH, the development
    environment nowhere (no PYTHONPATH, no VIRTUAL_ENV, no .venv/bin)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    dev_bin = str(ROOT / ".venv" / "bin")
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != dev_bin]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with the wheel of this checkout and its runtime dependencies only."""
    work = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(work / "dist"),
         str(ROOT)], capture_output=True, text=True, timeout=600,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    wheels = sorted((work / "dist").glob("tidemark-*.whl"))
    assert len(wheels) == 1, wheels
    venv = work / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--no-compile",
         "--disable-pip-version-check", str(wheels[0])],
        capture_output=True, text=True, timeout=1200, env=_clean_env(venv),
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return venv


def test_every_module_imports_with_only_the_runtime_dependencies(installed: Path) -> None:
    result = subprocess.run(
        [str(installed / "bin" / "python"), "-c", IMPORT_EVERY_MODULE],
        cwd=installed, env=_clean_env(installed), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    count, location, extras = result.stdout.split()
    assert int(count) >= 40
    assert location.startswith(str(installed)), location
    assert extras == "-", f"the venv has development packages: {extras}"


def test_the_installed_command_runs_a_program_once(
    installed: Path, kafka: Any, unique_topic: Callable[[str], str], tmp_path: Path
) -> None:
    names = {k: unique_topic(k) for k in ("in", "dlq", "hot")}
    kafka.create_topic(names["in"])
    program = tmp_path / "readings.sql"
    program.write_text(PROGRAM.format(topic=names["in"], dlq=names["dlq"], out=names["hot"]))
    circuit = compile_program(program)
    codec = AvroCodec(circuit.table("reading").avro_schema)
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    for i in range(30):
        producer.produce(names["in"], value=codec.encode(
            {"ts": BASE_MS + i * 1000, "sensor": i, "value": float(i * 3)}))
    producer.produce(names["in"], value=b"\x02 not avro")
    assert producer.flush(30) == 0

    env = _clean_env(installed) | {"TIDEMARK_METRICS_PORT": "0"}
    result = subprocess.run(
        [str(installed / "bin" / "tidemark"), "run", str(program), "--once",
         "--bootstrap-servers", kafka.bootstrap_servers, "--checkpoint", str(tmp_path / "cp")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    hot = read_topic(kafka.conf(), names["hot"])
    assert len(hot) == sum(1 for i in range(30) if i * 3 > 50)
    assert len(read_topic(kafka.conf(), names["dlq"])) == 1
