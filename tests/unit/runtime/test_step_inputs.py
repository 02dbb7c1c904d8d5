"""What a step's fingerprint hashes, read without Spark (app/runtime/step/step_inputs.py, S15):
the step's input ranges from an offset log laid out as Spark 4 writes it (a version line, a
metadata line, a line per source), and the query's digest, which a comment or a moved
statement does not change and a changed view does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from app.connectors.sink.fingerprint import SourceRanges
from app.errors import StateError
from app.program.compile import compile_program
from app.runtime.operators.query import TablePlan
from app.runtime.operators.source import source_spec
from app.runtime.planner.physical import physical_plan
from app.runtime.step.step_inputs import (
    plan_digest,
    query_digest,
    spark_checkpoint,
    step_input_ranges,
)

METADATA = {"batchWatermarkMs": 0, "batchTimestampMs": 1795688748537, "conf": {}}


def _offsets(checkpoint: Path, batch_id: int, *sources: dict[str, Any] | None) -> None:
    lines = ["v1", json.dumps(METADATA)]
    lines += ["-" if s is None else json.dumps(s) for s in sources]
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch_id)).write_text("\n".join(lines))


def _end(topic: str, step: int, partitions: dict[str, int], **extra: Any) -> dict[str, Any]:
    return {"topic": topic, "partitions": partitions, "step": step, "wall_clock_ms": 5, **extra}


def test_the_query_checkpoint_is_beside_its_first_tables_state_directory() -> None:
    assert spark_checkpoint("/ck/purchase/tidemark") == "/ck/purchase/spark"
    assert spark_checkpoint("s3a://b/ck/purchase/tidemark") == "s3a://b/ck/purchase/spark"


def test_ranges_run_from_the_batch_before_to_this_batch_per_source_s1(tmp_path: Path) -> None:
    _offsets(tmp_path, 6, _end("a", 3, {"0": 10, "1": 20}), _end("b", 2, {"0": 5}))
    _offsets(tmp_path, 7, _end("a", 4, {"0": 15, "1": 20}), _end("b", 3, {"0": 9}))
    assert step_input_ranges(tmp_path, 7, {}) == [
        SourceRanges("a", ((0, 10, 15),)),  # partition 1 read nothing
        SourceRanges("b", ((0, 5, 9),)),
    ]


def test_the_first_batch_starts_at_the_tables_initial_offset(tmp_path: Path) -> None:
    state = tmp_path / "purchase" / "tidemark"
    state.mkdir(parents=True)
    initial = {"topic": "a", "partitions": {"0": 4, "1": 0}, "step": 0, "wall_clock_ms": 0}
    (state / "initial-offset.json").write_text(json.dumps(initial))
    _offsets(tmp_path, 0, _end("a", 1, {"0": 10, "1": 3}))
    assert step_input_ranges(tmp_path, 0, {"a": str(state)}) == [
        SourceRanges("a", ((0, 4, 10), (1, 0, 3)))
    ]


def test_skipped_offsets_and_sources_without_offsets(tmp_path: Path) -> None:
    _offsets(tmp_path, 2, _end("a", 1, {"0": 10}), None)
    _offsets(tmp_path, 3, _end("a", 2, {"0": 30}, **{"from": {"0": 25}}), None)
    assert step_input_ranges(tmp_path, 3, {}) == [SourceRanges("a", ((0, 25, 30),))]


def test_a_step_without_data_reads_nothing(tmp_path: Path) -> None:
    _offsets(tmp_path, 4, _end("a", 2, {"0": 10}))
    _offsets(tmp_path, 5, _end("a", 2, {"0": 10}))
    assert step_input_ranges(tmp_path, 5, {}) == [SourceRanges("a", ())]


def test_a_missing_or_unknown_offset_log_entry_is_a_state_error(tmp_path: Path) -> None:
    with pytest.raises(StateError, match=r"no entry .*offsets/3"):
        step_input_ranges(tmp_path, 3, {})
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "3").write_text('{"not": "a log"}')
    with pytest.raises(StateError, match="not of the layout"):
        step_input_ranges(tmp_path, 3, {})


PROGRAM = """
CREATE TABLE t (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    k   BIGINT    NOT NULL
) WITH ('topic' = 'in');
CREATE VIEW f WITH ('topic' = 'f', 'format' = 'append') AS SELECT ts, k FROM t WHERE k > {k};
CREATE VIEW c WITH ('topic' = 'c') AS
SELECT window_start, window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end;
"""


def _plan(text: str) -> TablePlan:
    circuit = compile_program("p.sql", text)
    query = physical_plan(circuit).queries[0]
    table = circuit.table(query.tables[0])
    views = tuple(v for v in circuit.views if v.output is not None)
    frame = cast(Any, None)  # the query's DataFrame: not part of the digest
    return TablePlan(
        (table,), ("/ck/t/tidemark",), frame, views, {}, (), (source_spec(table),), query
    )


def test_the_query_digest_follows_the_plan_not_the_programs_layout_s15() -> None:
    digest = query_digest(_plan(PROGRAM.format(k=5)))
    assert digest == query_digest(_plan(PROGRAM.format(k=5)))
    moved = "-- a comment moves every statement down\n\n" + PROGRAM.format(k=5)
    assert query_digest(_plan(moved)) == digest
    assert query_digest(_plan(PROGRAM.format(k=6))) != digest


def test_the_plan_digest_is_the_one_recorded_with_the_checkpoint_s15(tmp_path: Path) -> None:
    """``tidemark run`` records the program's plan before any query starts (ADR 0015); a
    checkpoint without the record fingerprints the query's own plan."""
    plan = _plan(PROGRAM.format(k=5))
    state = tmp_path / "ck" / "t" / "tidemark"
    state.mkdir(parents=True)
    plan = TablePlan(
        plan.tables, (str(state),), plan.frame, plan.output_views, {}, (), plan.sources,
        plan.query,
    )  # fmt: skip
    assert plan_digest(plan) == query_digest(plan)
    record = {"digest": "c" * 64, "recorded_by": "0.1.0", "document": {}}
    (tmp_path / "ck" / "tidemark-plan.json").write_text(json.dumps(record))
    assert plan_digest(plan) == "c" * 64
