"""Which views the step sink computes (ADR 0005): stateless ones with no LATENESS on their way
from the table. A view gate writes dead letters and probes the step's waterline needs, and
aggregates keep state, so those stay in the streaming query."""

from __future__ import annotations

from app.program.compile import compile_program
from app.runtime.planner.physical import per_step_views

PROGRAM = """
CREATE TABLE raw (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    dt     VARCHAR NOT NULL,
    amount BIGINT NOT NULL
) WITH ('topic' = 'raw');

CREATE LOCAL VIEW positive AS SELECT ts, dt, amount FROM raw WHERE amount > 0;

CREATE VIEW big WITH ('topic' = 'big', 'format' = 'append') AS
SELECT ts, amount FROM positive WHERE amount > 100;

CREATE VIEW per_minute WITH ('topic' = 'per_minute') AS
SELECT window_start, window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE positive, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end;

CREATE LOCAL VIEW decoded AS SELECT CAST(dt AS TIMESTAMP) AS dt, amount FROM raw;

LATENESS decoded.dt INTERVAL 1 HOUR;

CREATE VIEW decoded_big WITH ('topic' = 'decoded_big', 'format' = 'append') AS
SELECT dt, amount FROM decoded WHERE amount > 100;
"""


def test_stateless_views_without_lateness_on_their_way_are_computed_per_step() -> None:
    circuit = compile_program("p.sql", PROGRAM)
    chosen = [v.name for v in per_step_views(circuit, circuit.views)]
    # positive is read by big (per step) and by per_minute (in the query: it keeps state);
    # decoded has LATENESS of its own and decoded_big reads it, so both stay in the query.
    assert chosen == ["positive", "big"]
