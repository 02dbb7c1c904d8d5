"""SELECT DISTINCT on Spark through the real broker (SPEC L3, S11, S12): the GROUP BY of its
columns with no aggregate. ``visitors`` (docs/language.md's example, EMIT AFTER WATERMARK)
is Spark's own aggregation; ``pages`` (default EMIT, upsert) the state operator. clicks has
LATENESS 0:

    step  clicks                                        w(ts)     visitors writes
    1     10:00:05 ann, 10:00:20 bob, 10:00:30 ann      10:00:30  -
    2     10:01:10 ann                                  10:01:10  (10:00, ann), (10:00, bob)
    3     10:02:00 cid                                  10:02:00  (10:01, ann)

Each minute's users once, when the minute is final; ann's second click of 10:00 adds no row.
Both views equal the reference evaluator record for record.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from table_steps import (
    clock_ms,
    frozen,
    keyed_oracle,
    keyed_written,
    new_values_per_step,
    oracle_written,
    run_steps,
    written,
)

from app.circuit.reference import evaluate
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import refused_by_spark

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE clicks (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    usr  VARCHAR   NOT NULL,
    page VARCHAR   NOT NULL
) WITH ('topic' = '{clicks}', 'dead_letter' = '{clicks_dlq}');

CREATE VIEW visitors WITH ('topic' = '{visitors}', 'format' = 'append') AS
SELECT DISTINCT window_start, window_end, usr
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
EMIT AFTER WATERMARK;

CREATE VIEW pages WITH ('topic' = '{pages}') AS
SELECT DISTINCT window_end, page
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE));
"""


def _click(clock: str, usr: str, page: str = "home") -> dict[str, Any]:
    return {"ts": clock_ms(clock), "usr": usr, "page": page}


def test_l3_select_distinct_writes_each_distinct_row_once_per_window_s11(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {n: unique_topic(n) for n in ("clicks", "clicks_dlq", "visitors", "pages")}
    kafka.create_topic(topics["clicks"], partitions=2)
    path = tmp_path / "distinct.sql"
    path.write_text(PROGRAM.format(**topics), encoding="utf-8")
    circuit = compile_program(path)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    assert plan.placement("visitors").placement == "native"
    assert plan.placement("pages").placement == "state_operator"
    steps: list[dict[str, list[Any]]] = [
        {"clicks": [_click("10:00:05", "ann"), _click("10:00:20", "bob", "cart"),
                    _click("10:00:30", "ann")]},
        {"clicks": [_click("10:01:10", "ann", "news")]},
        {"clicks": [_click("10:02:00", "cid")]},
    ]
    seen, new_rows = new_values_per_step(kafka, circuit, "visitors", topics["visitors"])
    _, inputs = run_steps(kafka, tmp_path, circuit, topics, steps, after_step=new_rows)

    def visitor(minute: str, usr: str) -> Any:
        start = clock_ms(minute)
        return frozen({"window_start": start, "window_end": start + 60_000, "usr": usr})

    assert seen == [
        Counter(),
        Counter([visitor("10:00", "ann"), visitor("10:00", "bob")]),
        Counter([visitor("10:01", "ann")]),
    ]
    oracle = evaluate(circuit, inputs)
    assert written(kafka, circuit, "visitors", topics["visitors"]) == oracle_written(
        oracle, "visitors"
    )
    assert keyed_written(kafka, circuit, "pages", topics["pages"]) == keyed_oracle(
        oracle, "pages"
    )
