"""Which window Top-N views Spark runs, and in which shape (ADR 0020): what the planner reads,
apart from :mod:`app.runtime.operators.top_n`, which builds them (its docstring describes the
shapes). Nothing here imports pyspark."""

from __future__ import annotations

from typing import Literal

from app.circuit.ir import Circuit, Filter, Operator, Table, TopN, View, Window
from app.runtime.operators.native_aggregate_support import cascade_time_column, native_shape

__all__ = [
    "Shape",
    "bounded_best",
    "ranks_stage_rows",
    "spark_problem",
    "spark_shape",
    "split_top_n",
]

Shape = Literal["per_step", "held"]


def split_top_n(view: View) -> tuple[list[Operator], TopN, list[Operator]]:
    top_n = view.top_n
    assert top_n is not None, view.name
    index = view.operators.index(top_n)
    return list(view.operators[:index]), top_n, list(view.operators[index + 1 :])


def bounded_best(top_n: TopN) -> bool:
    """A window's best rows are a bounded buffer, Spark's ``max_by``/``min_by(row, order,
    N)``: ROW_NUMBER with every ORDER BY key in one direction. Otherwise (RANK's ties, keys
    in both directions) every row of the window is held until it completes."""
    return top_n.function == "ROW_NUMBER" and len({key.descending for key in top_n.order}) == 1


def ranks_stage_rows(circuit: Circuit, view: View) -> bool:
    """The Top-N ``view`` ranks a stage boundary's rows as they are (an aggregate's final
    rows, ADR 0023), not the windows of a table's rows (a table's own, or its passthrough
    read by a later query), which it windows itself."""
    pre, _, _ = split_top_n(view)
    table = next((t for t in circuit.tables if t.name == view.source), None)
    return (table is not None and table.stage_input is not None
            and not any(isinstance(op, Window) for op in pre))


def spark_shape(circuit: Circuit, view: View) -> Shape | None:
    """How Spark runs the Top-N ``view`` (see the module docstring), or None if it cannot."""
    return None if spark_problem(circuit, view) else (
        "held" if any(t.name == view.source for t in circuit.tables) else "per_step"
    )


def spark_problem(circuit: Circuit, view: View) -> str | None:
    """Why Spark cannot run the Top-N ``view``, or None: the fix's text for the support check."""
    pre, top_n, _ = split_top_n(view)
    if view.lateness:
        return "LATENESS on a Top-N view: declare it on its input"
    if any(t.name == view.source for t in circuit.tables):
        table = circuit.table(view.source)
        windows = [op for op in pre if isinstance(op, Window)]
        if ranks_stage_rows(circuit, view):
            return _stage_problem(table, pre, top_n)
        if not (len(windows) == 1 and all(isinstance(op, Window | Filter) for op in pre)):
            return "rank the rows of one window function in FROM"
        window = windows[0]
        if window.kind not in ("TUMBLE", "HOP"):
            return (f"over a {window.kind} window's rows: rank a TUMBLE or HOP window's rows, "
                    "or the final rows of an EMIT AFTER WATERMARK aggregate")
        if (not table.lateness or window.time_column != table.lateness[0].column
                or table.column(window.time_column).type.name != "TIMESTAMP"):
            return (f"window on {table.name}'s first LATENESS column, a TIMESTAMP, whose "
                    "waterline frees the held rows")
        return None
    source = circuit.view(view.source)
    if any(isinstance(op, Window) for op in pre):
        # A window of the final rows spans steps: its rows are held, as a table's are.
        return (f"over a window of {source.name}'s final rows: the planner reads them "
                "through a stage boundary, where the window's rows are held")
    if not native_shape(circuit, source) or cascade_time_column(source) is None:
        return ("rank the rows of a window function in FROM, or of an EMIT AFTER WATERMARK "
                "aggregate Spark runs natively (COUNT, SUM, MIN or MAX of a TUMBLE or HOP on "
                "a table's first LATENESS column, plain columns in its SELECT)")
    return None


def _stage_problem(table: Table, pre: list[Operator], top_n: TopN) -> str | None:
    """Why Spark cannot rank the rows of the stage boundary's ``table`` as they are (ADR
    0023), or None: they are held by their window's end, the column Spark's watermark
    follows."""
    if not all(isinstance(op, Filter) for op in pre):
        return "rank the rows of the stage boundary's table as they are"
    first = table.lateness[0].column if table.lateness else None
    if (first is None or top_n.window_end != first
            or table.column(first).type.name != "TIMESTAMP"):
        return (f"PARTITION BY the window end {first} of {table.stage_input}'s rows, a "
                "TIMESTAMP, whose waterline completes a window")
    return None

