"""What the Python state operator runs (ADR 0003): the facts about an aggregate view the
planner and the service read, apart from :mod:`app.runtime.operators.aggregate`, which builds
the operator. Nothing here imports pyspark."""

from __future__ import annotations

from collections.abc import Sequence

from app.circuit.ir import Aggregate, ColumnRef, View, Window

__all__ = ["polls_every_step", "processing_window", "window_end_key", "window_key_index"]


def window_key_index(view: View) -> int | None:
    """The index of the GROUP BY key an aggregate view's group reads its window end from
    (S11), or None: the operator then never completes a group."""
    aggregate = next(op for op in view.operators if isinstance(op, Aggregate))
    return window_end_key(view, aggregate)[0]


def window_end_key(view: View, aggregate: Aggregate) -> tuple[int | None, int, bool]:
    """The key a group's window end is read from (S11): ``window_end`` if grouped by (a
    CUMULATE's windows of one start differ in their ends only), else ``window_start``, whose
    window ends ``size`` later."""
    size = next((op.size for op in view.operators if isinstance(op, Window)), 0)
    for wanted in ("window_end", "window_start"):
        for index, (_, expr) in enumerate(aggregate.keys):
            if isinstance(expr, ColumnRef) and expr.name == wanted and size:
                return index, size, wanted == "window_start"
    return None, 0, False


def polls_every_step(views: Sequence[View]) -> bool:
    """Whether the aggregate operator over ``views`` runs on processing-time timeouts: some
    view has EMIT ... AFTER DELAY, or a window on a processing-time attribute. Spark then runs
    a step every trigger interval, with or without input (the service's ``--once`` waits for
    one such step, see its ``_caught_up``), which writes held changes and closes
    processing-time windows when no input comes."""
    return any(
        (v.emit.delay_ms is not None or processing_window(v)) and not v.is_stateless
        for v in views
    )


def processing_window(view: View) -> bool:
    """The view windows a processing-time attribute (``AS PROCTIME()``)."""
    return any(isinstance(op, Window) and op.processing_time for op in view.operators)

