"""A query of several tables (ADR 0013): the S17 waterline of its views, and telling its
sources' progress apart (``--once``, the input-lag probe)."""

from __future__ import annotations

import json

from app.circuit.waterline import merged_waterline
from app.observability.listener import parse_end_offsets
from app.program.compile import compile_program
from app.runtime.planner.waterline_keys import waterline_inputs
from app.runtime.service import _past_target

PROGRAM = """
CREATE TABLE a (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL)
    WITH ('topic' = 'a');
CREATE TABLE b (t2 TIMESTAMP NOT NULL LATENESS INTERVAL '2' MINUTE, k BIGINT NOT NULL)
    WITH ('topic' = 'b');
CREATE VIEW both WITH ('topic' = 'both') AS
SELECT ts, k FROM a UNION ALL SELECT t2 AS ts, k FROM b WHERE k > 0;
CREATE VIEW over WITH ('topic' = 'over') AS SELECT k, ts FROM both WHERE k < 10;
CREATE VIEW windows WITH ('topic' = 'windows') AS
SELECT window_end, k FROM TABLE(TUMBLE(TABLE both, DESCRIPTOR(ts), INTERVAL '1' MINUTE));
CREATE VIEW only_a WITH ('topic' = 'only_a') AS SELECT ts, k FROM a;
CREATE VIEW untimed WITH ('topic' = 'untimed') AS SELECT k FROM both;
"""


def test_the_merged_waterline_is_the_minimum_and_minus_infinity_while_any_is_s17() -> None:
    assert merged_waterline([5, 3, 9]) == 3
    assert merged_waterline([5, None]) is None
    assert merged_waterline([None, None]) is None
    assert merged_waterline([]) is None


def test_a_view_over_a_union_takes_every_branch_table_waterline_s14_s17() -> None:
    circuit = compile_program("p.sql", PROGRAM)
    both = (("a.ts", 0), ("b.t2", 0))
    assert waterline_inputs(circuit, circuit.view("both")) == both
    assert waterline_inputs(circuit, circuit.view("over")) == both
    assert waterline_inputs(circuit, circuit.view("windows")) == both
    assert waterline_inputs(circuit, circuit.view("only_a")) == (("a.ts", 0),)
    assert waterline_inputs(circuit, circuit.view("untimed")) == ()


def test_a_join_column_is_held_back_by_the_other_side_less_the_bound_s16() -> None:
    circuit = compile_program(
        "p.sql",
        PROGRAM
        + """
CREATE VIEW pairs WITH ('topic' = 'pairs') AS
SELECT x.ts, y.t2 FROM a AS x JOIN b AS y
    ON x.k = y.k AND y.t2 BETWEEN x.ts - INTERVAL '1' SECOND AND x.ts + INTERVAL '2' SECOND;
""",
    )
    # w(x.ts) = min(w(a.ts), w(b.t2) - 2 s)
    assert waterline_inputs(circuit, circuit.view("pairs")) == (("a.ts", 0), ("b.t2", 2000))


def _progress(*ends: dict[str, object]) -> dict[str, object]:
    return {"sources": [{"endOffset": json.dumps(end)} for end in ends]}


def test_once_is_done_only_when_every_source_reached_its_own_topic_target() -> None:
    target = {"a": {0: 10, 1: 4}, "b": {0: 7}}
    done = _progress(
        {"topic": "b", "partitions": {"0": 7}, "step": 2},
        {"topic": "a", "partitions": {"0": 10, "1": 4}, "step": 3},
    )
    assert _past_target(done, target)
    # b's source stopped short although a's offsets would cover b's target.
    short = _progress(
        {"topic": "a", "partitions": {"0": 10, "1": 4}, "step": 3},
        {"topic": "b", "partitions": {"0": 6}, "step": 2},
    )
    assert not _past_target(short, target)
    # A checkpoint from before offsets named their topic: its one source, its one topic.
    assert _past_target(_progress({"partitions": {"0": 3}, "step": 1}), {"a": {0: 3}})


def test_the_lag_probe_reads_each_source_topic_from_its_offsets() -> None:
    named = json.dumps({"topic": "b", "partitions": {"0": 7}, "step": 2})
    assert parse_end_offsets(named, "a") == {"b": {"0": 7}}
    unnamed = json.dumps({"partitions": {"0": 7}, "step": 2})
    assert parse_end_offsets(unnamed, "a") == {"a": {"0": 7}}
