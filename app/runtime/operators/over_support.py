"""Which OVER aggregates Spark runs (ADR 0019): the predicate the planner reads, apart from
:mod:`app.runtime.operators.over_operator`, which builds Tidemark's OVER operator. Nothing
here imports pyspark."""

from __future__ import annotations

from app.circuit.ir import Circuit, View, Window
from app.runtime.operators.join_support import join_time_source

__all__ = ["over_problem"]


def over_problem(circuit: Circuit, view: View) -> tuple[str, str] | None:
    """What keeps an OVER view off Spark, as (what, fix), or None: Tidemark's OVER operator
    runs one over a table, or over stateless views of one table, ordered by a LATENESS
    column of the table forwarded verbatim (ADR 0019)."""
    over = view.over
    assert over is not None, view.name
    fix = (
        "OVER aggregates over a table, or over views that filter or rename its columns, "
        "ordered by a LATENESS column of the table, run on Spark; the reference evaluator "
        "runs the others"
    )
    relation = view.source
    while relation not in {t.name for t in circuit.tables}:
        source = circuit.view(relation)
        if not source.is_stateless or source.join is not None or source.over is not None:
            return f"OVER aggregates over the view {relation}", fix
        if len(source.sources) > 1 or any(isinstance(op, Window) for op in source.operators):
            return f"OVER aggregates over the view {relation}", fix
        relation = source.source
    if join_time_source(circuit, view.source, over.order_column) is None:
        return f"OVER aggregates ordered by {over.order_column}", fix
    return None

