"""What Spark's own (JVM) streaming aggregation runs (ADR 0004, 0014): the placement
predicates the planner reads, apart from :mod:`app.runtime.operators.native_aggregate`, which
builds such a view's part of the query. Nothing here imports pyspark.

A view runs natively when it is a windowed EMIT AFTER WATERMARK view whose aggregates Spark
computes exactly as the reference evaluator does (:func:`is_native`): over a table's first
LATENESS column (a TIMESTAMP), over a UNION ALL of such columns (:func:`union_time_tables`,
ADR 0013), or over the window end of another native view (a cascade,
:func:`cascade_time_column`).
"""

from __future__ import annotations

from app.circuit.functions import arg_type
from app.circuit.ir import AggCall, Aggregate, Circuit, ColumnRef, Filter, Project, View, Window
from app.circuit.processing_time import now_after_aggregate
from app.runtime.operators.aggregate_support import window_end_key

__all__ = [
    "cascade_depth",
    "cascade_time_column",
    "is_native",
    "joined_on_window_end",
    "native_shape",
    "renamed_outputs",
    "session_windowed",
    "union_time_tables",
]


_INTEGERS = ("INT", "BIGINT")


_FLOATS = ("REAL", "DOUBLE")


def _native_call(call: AggCall) -> bool:
    """Whether Spark can compute this aggregate exactly as the reference evaluator does."""
    if call.distinct:
        return False
    kinds = [arg_type(a).name for a in call.args]
    fn = call.fn.upper()
    if fn == "COUNT":
        return True
    if fn in ("SUM", "AVG"):
        return kinds[0] in _INTEGERS
    if fn in ("MIN", "MAX"):
        return kinds[0] not in _FLOATS
    if fn in ("ARG_MAX", "ARG_MIN"):
        return kinds[1] not in _FLOATS
    return False


def is_native(circuit: Circuit, view: View) -> bool:
    """Whether Spark's own aggregation computes ``view``: a windowed EMIT AFTER WATERMARK view
    (:func:`native_shape`) that is an output, or a local view whose every reader is native
    (a cascade: its final rows feed the readers' aggregation in the same query)."""
    if not native_shape(circuit, view):
        return False
    if view.output is not None:
        return True
    readers = [v for v in circuit.views if view.name in v.sources]
    # A window Top-N ranks its final rows in the step that writes them (ADR 0020).
    return bool(readers) and all(
        is_native(circuit, r) or joined_on_window_end(r, view) or r.top_n is not None
        for r in readers
    )


def joined_on_window_end(reader: View, view: View) -> bool:
    """Whether ``reader`` is an INNER interval join with ``view`` as one side, bounded on the
    column of ``view``'s rows that is its window's end (the paper's NEXMark Q7 as a join),
    or a temporal join AS OF that column of ``view`` (seed 004's daily sums at the day's
    closing rate): the join reads ``view``'s final rows (:func:`native_rows`), whose window
    carries Spark's event time."""
    join = reader.join
    end = cascade_time_column(view)
    if join is not None and join.as_of is not None:
        return end is not None and (join.left.source, join.as_of.probe_column) == (
            view.name,
            end,
        )
    if join is None or join.form != "interval" or join.kind != "inner" or join.bound is None:
        return False
    return end is not None and any(
        side.source == view.name and column == end
        for side, column in (
            (join.left, join.bound.left_column),
            (join.right, join.bound.right_column),
        )
    )


def native_shape(circuit: Circuit, view: View) -> bool:
    """A windowed EMIT AFTER WATERMARK view with only WHERE between the window and the GROUP
    BY and only exactly computable aggregates, whose window is on its table's watermarked
    TIMESTAMP column, read straight from the table (no view LATENESS on the way); or on a
    UNION ALL's column merged from such columns (:func:`union_time_tables`, S17); or on the
    window end of a native view it reads (:func:`cascade_time_column`, SPEC S18). Not with
    NOW() in HAVING or the SELECT list: that is the batch time of a group's last change,
    which the state operator keeps and Spark's aggregation does not (ADR 0022)."""
    if view.is_stateless or view.lateness or now_after_aggregate(view):
        return False
    if not view.emit.after_watermark or view.emit.delay_ms is not None:
        return False
    if len(view.sources) != 1:
        return False
    if circuit.updating(view.source):
        return False  # Spark's aggregation cannot take a retraction back (S18)
    aggregate = next(op for op in view.operators if isinstance(op, Aggregate))
    before = view.operators[: view.operators.index(aggregate)]
    windows = [op for op in before if isinstance(op, Window)]
    if len(windows) != 1 or not all(isinstance(op, Window | Filter) for op in before):
        return False
    # ARG_MAX/ARG_MIN break ties by arrival: a cascaded row carries no arrival, and the
    # arrival coordinates of a union's rows are per table.
    by_arrival = any(call.fn.upper() in ("ARG_MAX", "ARG_MIN") for _, call in aggregate.aggregates)
    if windows[0].kind == "CUMULATE":
        return False  # Spark's window() has one size: the state operator runs CUMULATE
    if windows[0].kind == "SESSION" and not any(t.name == view.source for t in circuit.tables):
        return False  # Spark's session_window over a table's own rows only
    if any(t.name == view.source for t in circuit.tables):
        table = circuit.table(view.source)
        if not table.lateness or windows[0].time_column != table.lateness[0].column:
            return False
        if table.column(windows[0].time_column).type.name != "TIMESTAMP":
            return False
    elif circuit.view(view.source).union is not None:
        if by_arrival or union_time_tables(circuit, view) is None:
            return False
    else:
        source = circuit.view(view.source)
        if by_arrival or not native_shape(circuit, source) or session_windowed(source):
            return False
        if cascade_time_column(source) != windows[0].time_column:
            return False
    if window_end_key(view, aggregate)[0] is None:
        return False
    return all(_native_call(call) for _, call in aggregate.aggregates)


def session_windowed(view: View) -> bool:
    """The view aggregates SESSION windows (known only once closed, SPEC L4)."""
    return any(isinstance(op, Window) and op.kind == "SESSION" for op in view.operators)


#: Aggregates whose native result is the row value a reader sees, without the finisher.
_ROW_FUNCTIONS = ("COUNT", "SUM", "MIN", "MAX")


def cascade_time_column(view: View) -> str | None:
    """The column of ``view``'s rows that is its window's end, when the view's final rows can
    feed another native aggregation (a cascade): no HAVING, a SELECT list of plain column
    references, COUNT, SUM of integers, MIN and MAX. None otherwise."""
    aggregate = next(op for op in view.operators if isinstance(op, Aggregate))
    if any(call.fn.upper() not in _ROW_FUNCTIONS for _, call in aggregate.aggregates):
        return None
    current = renamed_outputs(view, aggregate)
    if current is None:
        return None
    ends = [
        name
        for name, source in current.items()
        if any(
            key == source and isinstance(expr, ColumnRef) and expr.name == "window_end"
            for key, expr in aggregate.keys
        )
    ]
    return ends[0] if ends else None


def renamed_outputs(view: View, aggregate: Aggregate) -> dict[str, str] | None:
    """Output column -> the key or aggregate it is, when every operator after the aggregate
    only renames (no HAVING, no expression); None otherwise."""
    current = {name: name for name, _ in (*aggregate.keys, *aggregate.aggregates)}
    for op in view.operators[view.operators.index(aggregate) + 1 :]:
        if not isinstance(op, Project):
            return None
        renamed: dict[str, str] = {}
        for name, expr in op.outputs:
            if not isinstance(expr, ColumnRef) or expr.name not in current:
                return None
            renamed[name] = current[expr.name]
        current = renamed
    return current


def cascade_depth(circuit: Circuit, view: View) -> int:
    """How many native aggregations lie before ``view``'s own: 0 over a table or a UNION
    ALL."""
    depth = 0
    while not any(t.name == view.source for t in circuit.tables):
        view = circuit.view(view.source)
        if view.union is not None:
            break
        depth += 1
    return depth


def union_time_tables(circuit: Circuit, view: View) -> tuple[str, ...] | None:
    """Of an aggregate view reading a UNION ALL: the tables whose Spark watermarks' minimum is
    the waterline of its window's time column (S17), when that union column is every branch
    table's first LATENESS column, a TIMESTAMP, forwarded verbatim (so the query's watermark,
    the minimum of its tables', is that waterline exactly, ADR 0013); None otherwise."""
    if len(view.sources) != 1 or any(t.name == view.source for t in circuit.tables):
        return None
    union = circuit.view(view.source)
    if union.union is None or union.lateness:
        return None
    window = next(op for op in view.operators if isinstance(op, Window))
    attribute = next((a for a in union.time_attributes if a.column == window.time_column), None)
    if attribute is None or attribute.kind != "forwarded" or not attribute.merged:
        return None
    tables: list[str] = []
    for branch in attribute.merged:
        if branch.kind != "forwarded" or branch.merged or branch.join is not None:
            return None
        table = next((t for t in circuit.tables if t.name == branch.table), None)
        if table is None or not table.lateness:
            return None
        first = table.lateness[0].column
        if branch.source_column != first or table.column(first).type.name != "TIMESTAMP":
            return None
        tables.append(table.name)
    return tuple(dict.fromkeys(tables))

