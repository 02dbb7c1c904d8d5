"""The processor of the join and OVER operators unpickles without pandas, numpy or the Spark
plan (docs/adr/0024-runtime-layout.md): Spark's driver runs its pre-init in a fresh Python
process each time a query starts, and every module the pickle names is imported there
before the query's first step can be planned."""

from __future__ import annotations

import subprocess
import sys
from functools import partial

from pyspark import cloudpickle

from app.runtime.operators.join_slots import JoinOperatorSpec
from app.runtime.operators.join_slots import step_slot as join_step
from app.runtime.operators.over_slots import OverOperatorSpec
from app.runtime.operators.over_slots import step_slot as over_step
from app.runtime.operators.slot_operator import _Slot

#: What a fresh driver-side worker imports, then what unpickling the processor added.
_CHILD = """
import pickle, sys
import pyspark.sql.streaming.transform_with_state_driver_worker
before = set(sys.modules)
pickle.loads(sys.stdin.buffer.read())
print(" ".join(sorted(set(sys.modules) - before)))
"""


def _imported_by_unpickling(processor: object) -> set[str]:
    found = subprocess.run([sys.executable, "-c", _CHILD], input=cloudpickle.dumps(processor),
                           capture_output=True, check=True)
    return set(found.stdout.decode().split())


def _heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in ("pandas", "numpy", "pyarrow", "structlog")
            or m.startswith(("app.connectors", "app.runtime.step", "app.runtime.planner",
                             "app.runtime.operators.view_frame",
                             "app.runtime.operators.join_operator",
                             "app.runtime.operators.over_operator"))}


def test_the_join_operators_processor_unpickles_without_pandas_or_the_plan() -> None:
    spec = JoinOperatorSpec("full", "interval", -2, 3, 1, 0)
    imported = _imported_by_unpickling(_Slot(partial(join_step, spec), ["lrow", "rrow"]))
    assert "app.runtime.operators.join_slots" in imported
    assert _heavy(imported) == set()


def test_the_over_operators_processor_unpickles_without_pandas_or_the_plan() -> None:
    from app.program.compile import compile_program

    circuit = compile_program("t.sql", text="""
CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND, k VARCHAR, n INT)
WITH ('topic' = 't');
CREATE VIEW v WITH ('topic' = 'v') AS
SELECT ts, k, SUM(n) OVER (PARTITION BY k ORDER BY ts
                           RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW) AS s
FROM t;
""")
    over = circuit.view("v").over
    assert over is not None
    imported = _imported_by_unpickling(
        _Slot(partial(over_step, OverOperatorSpec.of(over, 1000)), ["row", "res"]))
    assert "app.runtime.operators.over_slots" in imported
    assert _heavy(imported) == set()
