"""Which joins Spark runs, and on which operator (SPEC S16, ADR 0017): the placement
predicates the planner reads, apart from :mod:`app.runtime.operators.join_operator`, which
builds Tidemark's own join operator (Spark's INNER stream-stream join is built with the
stateless views, :mod:`app.runtime.operators.view_frame`). Nothing here imports pyspark."""

from __future__ import annotations

from app.circuit.ir import Circuit, Join, Table, TimeStep, View
from app.runtime.operators.native_aggregate_support import is_native, joined_on_window_end

__all__ = ["by_join_operator", "join_problem", "join_time_source"]


def by_join_operator(join: Join) -> bool:
    """The join runs on Tidemark's own operator (ADR 0017): an OUTER or a temporal one, and
    one without a time bound kept per key (OUTER, or of an updating relation's changes:
    ADR 0017's addendum)."""
    return join.kind != "inner" or join.form == "temporal" or join.per_key


def join_problem(circuit: Circuit, view: View) -> tuple[str, str] | None:
    """What keeps a JOIN view off Spark, as (what, fix), or None: Spark's stream-stream join
    runs an INNER interval join of two tables, or of a table with itself under two aliases
    (both sides its rows in its one query), or of views over them, bounded on each table's
    first LATENESS column, a TIMESTAMP (whose watermark frees the join's state), an INNER
    window join of windows on those columns (bounded on ``window_end``), and an INNER join
    without a time bound (whose state is never freed); Tidemark's own operator runs such an
    interval or window join as LEFT, RIGHT or FULL OUTER, bounded on (or windowed on) any
    LATENESS column of each table, a join without a time bound as LEFT, RIGHT or FULL OUTER
    (S16, S18: its padded rows retracted when a match comes), and a temporal join AS OF any
    LATENESS column of the probe table or AS OF its AS PROCTIME() column
    (:mod:`app.runtime.operators.join_operator`). A
    join without a time bound reads no UNION ALL."""
    join = next(op for op in view.operators if isinstance(op, Join))
    fix = (
        "an INNER interval or window join on each table's first LATENESS column, an OUTER "
        "one on any of them, a join without a time bound (INNER or OUTER, of no UNION ALL), "
        "or a temporal join AS OF a LATENESS or AS PROCTIME() column of the probe table "
        "runs on Spark; "
        "the reference evaluator runs the others (tidemark explain shows the plan)"
    )
    if join.as_of is not None:
        problem = _temporal_problem(circuit, view, join)
        return None if problem is None else (problem, fix)
    if join.kind != "inner" and join.form not in ("interval", "window", "regular"):
        return f"a {join.kind.upper()} OUTER {join.form} join", fix
    if join.form == "regular":
        # Spark keeps every row of both sides, as S16 does (an L7 warning).
        try:
            circuit.root_table(join.left.source)
            circuit.root_table(join.right.source)
        except ValueError:
            return "a join over a UNION ALL", fix
        return None
    if join.bound is None:
        return f"a {join.form} join", fix
    aggregated = False
    for side, column in (
        (join.left, join.bound.left_column),
        (join.right, join.bound.right_column),
    ):
        source = next((v for v in circuit.views if v.name == side.source), None)
        if source is not None and not source.is_stateless:
            # The final rows of a native aggregate, bounded on its window's end (Q7 as a
            # join): their window carries Spark's event time (view_frame._joined). One side.
            if aggregated or join.kind != "inner" or not (
                is_native(circuit, source) and joined_on_window_end(view, source)
            ):
                return f"a join bound on {side.qualified(column)}", fix
            aggregated = True
            continue
        table = _on_first_lateness(
            circuit,
            join_time_source(circuit, side.source, column, join.form == "window"),
            any_lateness=by_join_operator(join),
        )
        if table is None:
            return f"a join bound on {side.qualified(column)}", fix
    return None


def _temporal_problem(circuit: Circuit, view: View, join: Join) -> str | None:
    """What keeps a temporal join off Spark (Tidemark's operator runs one AS OF a LATENESS
    column of the probe table, or AS OF a native aggregate's window end), or None."""
    assert join.as_of is not None, view.name
    probe_column = join.as_of.probe_column
    if probe_column is None:
        return None  # AS OF PROCTIME(): each probe row at its own step's batch time
    if join.as_of.version_column is None:
        # AS OF processing time: a probe row's time must be its own step's batch time.
        found = join_time_source(circuit, join.left.source, probe_column)
        if found is None or not circuit.table(found[0]).column(found[1]).processing_time:
            return (f"a temporal join AS OF {join.as_of_shown}, a processing-time "
                    "attribute that is no table's AS PROCTIME() column")
        return None
    aggregate = next(
        (v for v in circuit.views if v.name == join.left.source and not v.is_stateless),
        None,
    )
    if aggregate is not None and not (
        is_native(circuit, aggregate) and joined_on_window_end(view, aggregate)
    ):
        return f"a temporal join AS OF {join.as_of_shown}"
    # The final rows of a native aggregate, AS OF their window's end (seed 004's daily
    # sums): their window is on the table's first LATENESS column.
    timed = probe_time(circuit, join, aggregate is not None)
    probe = _on_first_lateness(circuit, None if timed is None else timed[:2],
                               any_lateness=aggregate is None)
    versions = circuit.root_table(join.right.source)
    if probe is None:
        return f"a temporal join AS OF {join.as_of_shown}"
    if versions.column(join.as_of.version_column).type.name != "TIMESTAMP":
        return f"a temporal join of versions by {join.as_of.version_column}"
    return None


def _on_first_lateness(
    circuit: Circuit, found: tuple[str, str] | None, any_lateness: bool = False
) -> Table | None:
    """The table of ``found`` (table, column) if the column is the table's first LATENESS
    column (with ``any_lateness``, any of its LATENESS columns) and a TIMESTAMP: the
    waterline a join on Spark follows (Spark's watermark follows the first; the join
    operator reads any column's from the probes); else None."""
    if found is None:
        return None
    table = circuit.table(found[0])
    columns = [x.column for x in table.lateness]
    if found[1] not in (columns if any_lateness else columns[:1]):
        return None
    return table if table.column(found[1]).type.name == "TIMESTAMP" else None


def probe_time(
    circuit: Circuit, join: Join, lags: bool
) -> tuple[str, str, tuple[TimeStep, ...]] | None:
    """Where the probe time of a temporal join AS OF a column follows a waterline: the table,
    its column, and the steps from that column's waterline to the probe time's. A column the
    probe side forwards is its own (no steps; with ``lags``, the probe side is an aggregate's
    final rows and the column its window end: the table column its windows are on); a
    table's derived attribute (S10; a stage boundary's ``window_start``, ``window_end -
    span``) follows the LATENESS column it is derived from, through its steps. None: the
    column follows no table column."""
    assert join.as_of is not None and join.as_of.probe_column is not None, join
    found = join_time_source(circuit, join.left.source, join.as_of.probe_column, lags)
    if found is None:
        return None
    table = circuit.table(found[0])
    attr = next((a for a in table.derived_attributes if a.column == found[1]), None)
    if (lags or attr is None or attr.derivation is None
            or attr.source_column not in {x.column for x in table.lateness}):
        return (*found, ())
    return table.name, attr.source_column, attr.derivation.steps


def join_time_source(
    circuit: Circuit, relation: str, column: str, window_end: bool = False
) -> tuple[str, str] | None:
    """The (table, column) a relation's column forwards verbatim, or None; with
    ``window_end``, the (table, column) whose windows the relation's ``window_end`` column
    (forwarded verbatim) ends."""
    while not any(t.name == relation for t in circuit.tables):
        view = circuit.view(relation)
        attr = next((a for a in view.time_attributes if a.column == column), None)
        if attr is None or attr.merged or attr.join is not None:
            return None
        if window_end and attr.kind == "window_end":
            return join_time_source(circuit, attr.table, attr.source_column)
        if attr.kind != "forwarded":
            return None
        relation, column = attr.table, attr.source_column
    return None if window_end else (relation, column)

