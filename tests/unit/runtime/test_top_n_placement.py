"""Window Top-N on Spark (ADR 0020): which shape runs each view, and what is refused by name
before Spark starts (the reference evaluator runs every form)."""

from __future__ import annotations

import pytest

from app.circuit.ir import Circuit
from app.program.compile import compile_text
from app.runtime.planner.physical import explain_physical_text, physical_plan
from app.runtime.planner.support import refused_by_spark

TABLE = """
CREATE TABLE bid (
    ts    TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    item  VARCHAR NOT NULL,
    price BIGINT NOT NULL,
    d     DOUBLE
) WITH ('topic' = 'bids');
"""


def _top_n(fn: str = "ROW_NUMBER", order: str = "price DESC",
           source: str = "TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' MINUTES))",
           select: str = "*") -> Circuit:
    return compile_text("t.sql", TABLE + f"""
CREATE VIEW top WITH ('topic' = 'top') AS
SELECT {select} FROM (
  SELECT *, {fn}() OVER (PARTITION BY window_start, window_end ORDER BY {order}) AS rn
  FROM {source})
WHERE rn <= 2;
""")


SUMS = ("(SELECT window_start, window_end, item, {call} AS total FROM TABLE(TUMBLE(TABLE bid, "
        "DESCRIPTOR(ts), INTERVAL '10' MINUTES)) GROUP BY window_start, window_end, item)")


def test_adr_0020_over_window_rows_spark_holds_the_best_rows_per_window() -> None:
    circuit = _top_n()
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    placed = plan.placement("top")
    assert (placed.placement, placed.top_n, placed.state) == ("native", "held", "window")
    assert plan.query_of("top").state_operators == ("top",)
    assert "the best rows per window and partition (ADR 0020;" in explain_physical_text(plan)


@pytest.mark.parametrize(("fn", "order"), [("RANK", "price DESC"),
                                           ("ROW_NUMBER", "price DESC, item")])
def test_adr_0020_rank_or_keys_both_ways_hold_every_row_of_the_window(fn: str,
                                                                      order: str) -> None:
    """RANK's ties are unbounded in number, and keys in both directions order no struct:
    Spark holds every row of the window, freed with it, and ranks them once it completes
    (the reference's rule), as Flink does."""
    from app.runtime.operators.top_n_support import bounded_best

    circuit = _top_n(fn, order)
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    placed = plan.placement("top")
    assert (placed.placement, placed.top_n, placed.state) == ("native", "held", "window")
    top_n = circuit.view("top").top_n
    assert top_n is not None and not bounded_best(top_n)
    assert bounded_best(_top_n().view("top").top_n)  # type: ignore[arg-type]


@pytest.mark.parametrize("fn", ["ROW_NUMBER", "RANK"])
def test_adr_0020_over_a_native_aggregate_each_steps_final_rows_are_ranked(fn: str) -> None:
    circuit = _top_n(fn, "total DESC, item", SUMS.format(call="SUM(price)"))
    plan = physical_plan(circuit)
    assert refused_by_spark(circuit, plan) == ()
    (aggregate,) = [v.name for v in circuit.views if v.name != "top"]
    placed = plan.placement("top")
    assert (placed.placement, placed.top_n, placed.state) == ("native", "per_step", "none")
    # The aggregate holds the only state, in the Top-N's branch.
    assert plan.placement(aggregate).placement == "native"
    assert plan.query_of("top").state_operators == (aggregate,)


@pytest.mark.parametrize(
    ("circuit", "reason"),
    [
        (_top_n(source="TABLE(CUMULATE(TABLE bid, DESCRIPTOR(ts), INTERVAL '5' MINUTES, "
                "INTERVAL '10' MINUTES))"), "over a CUMULATE window's rows"),
        # SUM of a DOUBLE runs on the Python state operator, whose rows no view reads.
        (_top_n(order="total DESC", source=SUMS.format(call="SUM(d)")),
         "an EMIT AFTER WATERMARK aggregate Spark runs natively"),
    ],
)
def test_adr_0020_forms_spark_cannot_run_are_refused_by_name(circuit: Circuit,
                                                             reason: str) -> None:
    (refused,) = refused_by_spark(circuit, physical_plan(circuit))
    assert "view top: this window Top-N (" in refused and reason in refused, refused


def test_adr_0020_a_view_over_a_top_n_view_is_refused_by_name() -> None:
    circuit = compile_text("t.sql", TABLE + """
CREATE LOCAL VIEW top AS
SELECT * FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) AS rn
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' MINUTES)))
WHERE rn <= 2;
CREATE VIEW cheap WITH ('topic' = 'cheap') AS SELECT item FROM top WHERE price < 5;
""")
    (refused,) = refused_by_spark(circuit, physical_plan(circuit))
    assert "view cheap: a view over a window Top-N view" in refused
