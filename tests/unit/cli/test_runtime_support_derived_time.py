"""Derived time attributes on the Spark runtime (SPEC S10, S11, S14, L7; ADR 0021): the state
operator completes their groups at a threshold on the watermark; the S14 waterline is the
derivation's steps over its base key, in the one function the step sink's driver and the
writing tasks share; the forms Spark cannot follow are refused by name."""

from __future__ import annotations

import pytest

from app.circuit.derived_time import group_completion
from app.circuit.functions import parse_timestamp
from app.circuit.ir import TimeStep
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.operators.aggregate import plan_of
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import check_supported
from app.runtime.planner.waterline_keys import query_waterlines
from app.runtime.step.view_waterlines import view_waterlines

TABLE = """
CREATE TABLE t (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    other TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    k  BIGINT NOT NULL
) WITH ('topic' = 'in');
"""


def ts(text: str) -> int:
    value = parse_timestamp(text)
    assert value is not None
    return value


@pytest.mark.parametrize(("key", "value", "threshold"), [
    # CEIL: the day Jan 2 holds (Jan 1, Jan 2 00:00]: complete once w > Jan 2 00:00.
    ("CEIL(ts TO DAY)", "2024-01-02 00:00:00", "2024-01-02 00:00:00.001"),
    # FLOOR: the day Jan 2 holds [Jan 2, Jan 3): complete once w >= Jan 3.
    ("FLOOR(ts TO DAY)", "2024-01-02 00:00:00", "2024-01-03 00:00:00"),
    ("DATE_TRUNC('MONTH', ts)", "2024-01-01 00:00:00", "2024-02-01 00:00:00"),
    # + 1 hour: the group 10:00 holds 09:00: complete once w > 09:00.
    ("ts + INTERVAL '1' HOUR", "2024-01-02 10:00:00", "2024-01-02 09:00:00.001"),
    ("ts", "2024-01-02 10:00:00", "2024-01-02 10:00:00.001"),
])
def test_s11_the_state_operator_completes_a_time_key_at_its_threshold(
        key: str, value: str, threshold: str) -> None:
    circuit = compile_program("p.sql", TABLE + f"""
CREATE VIEW v WITH ('topic' = 'out', 'format' = 'append') AS
SELECT k, {key} AS tk, COUNT(*) AS n FROM t GROUP BY k, {key} EMIT AFTER WATERMARK;
""")
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    assert plan.placement("v").placement == "state_operator"
    completion = group_completion(circuit, circuit.view("v"))
    assert completion is not None
    operator = plan_of(circuit.view("v"), completion)
    assert (operator.window_key, operator.key_offset) == (1, 1)
    assert completion.threshold(ts(value)) == ts(threshold)


def test_s11_a_window_on_a_shifted_column_of_a_view_completes_at_its_end_less_the_shift() -> None:
    circuit = compile_program("p.sql", TABLE + """
CREATE LOCAL VIEW shifted AS SELECT ts + INTERVAL '1' HOUR AS t2, k FROM t;
CREATE VIEW v WITH ('topic' = 'out', 'format' = 'append') AS
SELECT window_start, window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE shifted, DESCRIPTOR(t2), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end EMIT AFTER WATERMARK;
""")
    check_supported(circuit, physical_plan(circuit))
    completion = group_completion(circuit, circuit.view("v"))
    assert completion is not None
    assert (completion.key_index, completion.offset) == (1, 0)
    assert completion.attribute.steps == (TimeStep("shift", 3_600_000),)
    # The window [10:00, 10:01) of t2 is complete once w(t2) >= 10:01: w(ts) >= 09:01.
    assert completion.threshold(ts("2024-01-02 10:01:00")) == ts("2024-01-02 09:01:00")


def test_s14_view_waterlines_merge_then_derive() -> None:
    """One map for headers and metrics: a merged key is the minimum of its inputs less their
    lags (S17, S16); a derived key the steps over its base, which may be a merged key."""
    waterlines, units = view_waterlines(
        {"a.ts": ts("2024-01-01 10:30:00"), "b.ts": ts("2024-01-01 09:15:00"), "c.ts": None},
        {"a.ts": "ms", "b.ts": "ms", "c.ts": "ms"},
        {"u.ts": (("a.ts", 0), ("b.ts", 0)), "j.ts": (("a.ts", 0), ("c.ts", 0))},
        {"d.day": ("a.ts", (TimeStep("ceil", unit="DAY"),)),
         "m.hour": ("u.ts", (TimeStep("floor", unit="HOUR"),)),
         "n.hour": ("j.ts", (TimeStep("floor", unit="HOUR"),))},
    )
    assert waterlines["u.ts"] == ts("2024-01-01 09:15:00")
    assert waterlines["d.day"] == ts("2024-01-02 00:00:00")
    assert waterlines["m.hour"] == ts("2024-01-01 09:00:00")
    assert waterlines["j.ts"] is None and waterlines["n.hour"] is None  # -inf stays -inf
    assert units["d.day"] == units["m.hour"] == "ms"


def _refused(text: str) -> list[str]:
    circuit = compile_program("p.sql", TABLE + text)
    with pytest.raises(ProgramError) as info:
        check_supported(circuit, physical_plan(circuit))
    return [problem.message for problem in info.value.diagnostics]


def test_l7_a_derived_key_of_another_lateness_column_is_refused_by_name() -> None:
    """Spark keeps one watermark, the state owner's first LATENESS column's."""
    (message,) = _refused("""
CREATE VIEW v WITH ('topic' = 'out') AS
SELECT CEIL(other TO DAY) AS day, COUNT(*) AS n FROM t GROUP BY CEIL(other TO DAY);
""")
    assert message == ("view v: a GROUP BY on a time attribute of t.other (state is freed by "
                       "the waterline of the first LATENESS column of t) is not supported by "
                       "the Spark runtime yet")


def test_s14_s17_a_union_of_a_derived_time_attribute_merges_its_own_key() -> None:
    """A branch's derived attribute of a table column is a key of its own (its steps over
    the column's waterline), and the UNION ALL column the minimum of it and the other
    branch's: w(t2) = min(w(ts) + 1 hour, w(ts))."""
    circuit = compile_program("p.sql", TABLE + """
CREATE LOCAL VIEW both_times AS
SELECT ts + INTERVAL '1' HOUR AS t2, k FROM t UNION ALL SELECT ts, k FROM t;
CREATE VIEW v WITH ('topic' = 'out') AS SELECT t2, k FROM both_times;
""")
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    keys = query_waterlines(circuit, plan.queries[0])
    (stepped, (base, steps)), = keys.derived.items()
    assert base == "ts" and steps == (TimeStep("shift", 3_600_000),)
    assert keys.merged[keys.time_source["v"]] == ((stepped, 0), ("ts", 0))
    waterlines, _ = view_waterlines({"ts": ts("2024-01-01 09:00:00")}, {"ts": "ms"},
                                    keys.merged, keys.derived)
    assert waterlines[stepped] == ts("2024-01-01 10:00:00")
    assert waterlines[keys.time_source["v"]] == ts("2024-01-01 09:00:00")


def test_l7_a_union_of_a_time_attribute_derived_from_a_union_is_refused_by_name() -> None:
    """Steps over a merged waterline, inside another merge, are not followed."""
    messages = _refused("""
CREATE LOCAL VIEW u AS SELECT ts, k FROM t UNION ALL SELECT other AS ts, k FROM t;
CREATE LOCAL VIEW shifted AS SELECT ts + INTERVAL '1' HOUR AS t2, k FROM u;
CREATE LOCAL VIEW both_times AS SELECT t2, k FROM shifted UNION ALL SELECT ts, k FROM t;
CREATE VIEW v WITH ('topic' = 'out') AS SELECT t2, k FROM both_times;
""")
    assert any("the time attribute t2, a UNION ALL or JOIN of derived time attributes" in m
               for m in messages), messages
