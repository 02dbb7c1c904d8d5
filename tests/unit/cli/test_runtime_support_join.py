"""JOIN (SPEC S16) runs on the reference evaluator only: the Spark runtime refuses it, and
every view that reads it, by name before Spark starts (L7: never mis-executed)."""

from __future__ import annotations

import pytest

from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.physical import physical_plan
from app.runtime.plan import check_supported, refused_by_spark

PROGRAM = """
CREATE TABLE a (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL)
    WITH ('topic' = 'a');
CREATE TABLE b (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL)
    WITH ('topic' = 'b');
CREATE VIEW pairs WITH ('topic' = 'pairs') AS
SELECT a.ts, a.k, b.ts AS b_ts FROM a JOIN b
    ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts + INTERVAL '1' MINUTE;
CREATE VIEW counts WITH ('topic' = 'counts') AS
SELECT window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE pairs, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_end
EMIT AFTER WATERMARK;
"""

REASON = "joins run in the reference evaluator only"


def test_s16_join_is_refused_by_name_l7() -> None:
    circuit = compile_program("p.sql", PROGRAM)
    plan = physical_plan(circuit)  # planning a join program does not fail
    with pytest.raises(ProgramError) as info:
        check_supported(circuit, plan)
    messages = [d.message for d in info.value.diagnostics]
    assert messages == [
        "view pairs: JOIN is not supported by the Spark runtime yet",
        "view counts: reading the JOIN view pairs is not supported by the Spark runtime yet",
    ]
    assert all(d.fix and REASON in d.fix for d in info.value.diagnostics)
    assert [(d.position.line, d.position.column) for d in info.value.diagnostics] == [
        (6, 13), (9, 13)]
    assert len(refused_by_spark(circuit, plan)) == 2
