"""The Spark runtime's layout (ADR 0024): a planner, the operators and the step protocol, one
folder each, and a planner that decides from the circuit alone, without Spark.

The planner reads what each operator kind supports from its ``*_support`` module, never from
the module that builds its part of a query, so planning (``tidemark explain``, the
placement and support passes, composition) loads neither pyspark nor pandas.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RUNTIME = ROOT / "app" / "runtime"

PLANNER = sorted(
    f"app.runtime.planner.{path.stem}"
    for path in (RUNTIME / "planner").glob("*.py")
    if path.stem != "__init__"
)


def _modules_after_import(modules: list[str]) -> list[str]:
    """The modules loaded by a fresh interpreter that imports ``modules``."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(  # noqa: S603 - this interpreter, fixed code
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def test_the_runtime_is_four_folders_and_process_control() -> None:
    folders = sorted(p.name for p in RUNTIME.iterdir() if p.is_dir() and p.name != "__pycache__")
    modules = sorted(p.stem for p in RUNTIME.glob("*.py"))
    assert folders == ["operators", "planner", "step", "store"]
    assert modules == [
        "__init__", "checkpoint_lease", "checkpoint_lock", "service", "session", "worker_daemon"
    ]


def test_the_planner_loads_no_spark_and_no_operator_that_builds_a_query() -> None:
    assert "app.runtime.planner.support" in PLANNER
    loaded = _modules_after_import(PLANNER)
    assert [m for m in loaded if m.split(".")[0] in ("pyspark", "pandas", "py4j")] == []
    runtime = [m for m in loaded if m.startswith("app.runtime.")]
    builders = [
        m for m in runtime
        if m.startswith("app.runtime.operators.")
        and not m.endswith("_support")
        and m != "app.runtime.operators.arrow_views"  # pyarrow only: its predicates lead it
    ]
    steps = [m for m in runtime if m.startswith("app.runtime.step.")]
    assert builders == []
    assert steps == ["app.runtime.step.view_waterlines"]
