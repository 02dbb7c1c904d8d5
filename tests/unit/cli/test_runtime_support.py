"""What the Spark runtime cannot run yet is refused by name before Spark starts (L7: never
mis-executed)."""

from __future__ import annotations

import pytest

from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.physical import explain_physical_text, physical_plan
from app.runtime.planner.support import check_supported

TABLE = """
CREATE TABLE t (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    k  BIGINT NOT NULL
) WITH ('topic' = 'in'{extra});
"""


def test_json_tables_run_and_their_source_decodes_json_l1() -> None:
    from app.connectors.late_gate import SourceSpec
    from app.runtime.operators.source import source_spec

    circuit = compile_program("p.sql", TABLE.format(extra=", 'format' = 'json'"))
    check_supported(circuit, physical_plan(circuit))
    spec = source_spec(circuit.table("t"))
    assert spec.format == "json"
    assert SourceSpec.from_json(spec.to_json()) == spec


def test_avro_confluent_tables_run_and_their_source_reads_the_registry_l1() -> None:
    from app.connectors.late_gate import SourceSpec
    from app.runtime.operators.source import source_spec

    circuit = compile_program(
        "p.sql",
        TABLE.format(
            extra=", 'format' = 'avro-confluent', 'schema-registry.url' = 'http://127.0.0.1:8081'"
        ),
    )
    check_supported(circuit, physical_plan(circuit))
    spec = source_spec(circuit.table("t"))
    assert (spec.format, spec.registry) == ("avro-confluent", {"url": "http://127.0.0.1:8081"})
    assert SourceSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize(
    "emit",
    [
        "EMIT STREAM AFTER DELAY INTERVAL '1' MINUTE",
        "EMIT AFTER DELAY INTERVAL '2' SECOND",
        "EMIT STREAM AFTER WATERMARK AND AFTER DELAY INTERVAL '1' MINUTE",
    ],
)
def test_emit_after_delay_runs_on_spark_s12(emit: str) -> None:
    """AFTER DELAY runs on processing-time timeouts (app/runtime/operators/aggregate.py): not
    refused."""
    text = TABLE.format(extra="") + f"""
CREATE VIEW v WITH ('topic' = 'out') AS
SELECT window_start, window_end, k, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, k
{emit};
"""
    circuit = compile_program("p.sql", text)
    check_supported(circuit, physical_plan(circuit))
    assert circuit.view("v").emit.delay_ms is not None


def test_reading_an_aggregate_view_is_still_refused_by_name_l7() -> None:
    text = TABLE.format(extra="") + """
CREATE VIEW counts AS
SELECT window_end, k, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_end, k
EMIT AFTER WATERMARK;

CREATE VIEW v WITH ('topic' = 'out') AS
SELECT n, COUNT(*) AS m FROM counts GROUP BY n;
"""
    with pytest.raises(ProgramError, match="reading the aggregate view counts this way is not"):
        circuit = compile_program("p.sql", text)
        check_supported(circuit, physical_plan(circuit))


CASCADE = TABLE.format(extra="") + """
CREATE LOCAL VIEW per_minute AS
SELECT window_end AS minute_end, k, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, k {having}
EMIT AFTER WATERMARK;

CREATE VIEW per_hour WITH ('topic' = 'out', 'format' = 'append') AS
SELECT window_start, k, SUM(n) AS n, MAX(n) AS busiest
FROM TABLE(TUMBLE(TABLE per_minute, DESCRIPTOR(minute_end), INTERVAL '1' HOUR))
GROUP BY window_start, window_end, k
EMIT AFTER WATERMARK;
"""


def test_a_cascade_of_windows_runs_natively_s18() -> None:
    circuit = compile_program("p.sql", CASCADE.format(having=""))
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    assert [(v.view, v.placement) for v in plan.queries[0].views] == [
        ("per_minute", "native"), ("per_hour", "native")]


def test_a_cascade_over_a_having_view_is_refused_with_the_rule_l7() -> None:
    circuit = compile_program("p.sql", CASCADE.format(having="HAVING COUNT(*) > 1"))
    with pytest.raises(ProgramError, match="reading the aggregate view per_minute this way") as e:
        check_supported(circuit, physical_plan(circuit))
    assert "no HAVING" in str(e.value)


def test_avro_program_is_supported() -> None:
    circuit = compile_program("p.sql", TABLE.format(extra=""))
    check_supported(circuit, physical_plan(circuit))


TWO_TABLES = """
CREATE TABLE a (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND, k BIGINT)
WITH ('topic' = 'a');
CREATE TABLE b (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND, k BIGINT)
WITH ('topic' = 'b');
CREATE VIEW j WITH ('topic' = 'j', 'format' = 'append') AS
SELECT a.ts, a.k, r.ts AS rts FROM a JOIN {right} AS r ON a.k = r.k;
"""


def test_a_join_without_a_time_bound_runs_with_unbounded_state_s16_l7() -> None:
    circuit = compile_program("p.sql", TWO_TABLES.format(right="b"))
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    (query,) = plan.queries
    assert query.tables == ("a", "b")
    assert [(v.view, v.state) for v in query.views] == [("j", "unbounded")]
    assert "unbounded: a join without a time bound" in explain_physical_text(plan)


def test_a_table_joined_with_itself_without_a_bound_runs_with_unbounded_state_s16_l7() -> None:
    circuit = compile_program("p.sql", TWO_TABLES.format(right="a"))
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    query = plan.query_of("j")
    assert query.tables == ("a",)
    assert [(v.view, v.state) for v in query.views] == [("j", "unbounded")]
