"""The Spark-support pass: what one query of the physical plan cannot run, each refusal named
with its fix (never mis-run).

It runs after the placement passes (:mod:`app.runtime.planner.physical`), over the circuit
and the plan together: :func:`refusals` lists, per view, what keeps it off Spark, in the
order the checks below run, then per query what its tables and state owners refuse.
:func:`~app.runtime.planner.compose.compose` moves a refused view to a later stage where
that helps (ADR 0023); ``tidemark run`` fails on what remains (:func:`check_supported`)
before Spark starts, and ``tidemark explain --physical`` prints it
(:func:`refused_by_spark`). What an operator kind runs is its own module's
(``app/runtime/operators/*_support.py``); this pass holds the checks that span kinds: time
sources, processing time, the query's one watermark.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.circuit.derived_time import group_completion, input_attributes
from app.circuit.ir import Circuit, Diagnostic, TimeAttribute, View, Window
from app.circuit.processing_time import attribute_is_processing_time, view_reads_now
from app.errors import ProgramError
from app.runtime.operators.aggregate_support import window_key_index
from app.runtime.operators.join_support import join_problem
from app.runtime.operators.native_aggregate_support import session_windowed, union_time_tables
from app.runtime.operators.over_support import over_problem
from app.runtime.operators.top_n_support import spark_problem as top_n_problem
from app.runtime.planner.physical import (
    FREED_BY_BATCH_TIME,
    PhysicalPlan,
    ViewPlacement,
    first_lateness,
    watermarked_tables,
)

__all__ = ["check_supported", "refusals", "refused_by_spark"]

#: A refused view's name (None: a table's problem, which no stage boundary changes) and why.
Refusal = tuple[str | None, Diagnostic]
#: What keeps a view off Spark and the fix, as the checks below find it.
Problem = tuple[str, str]


def check_supported(circuit: Circuit, physical: PhysicalPlan) -> None:
    """Fail before Spark starts on what this runtime cannot run yet (named, never mis-run)."""
    problems = [problem for _, problem in refusals(circuit, physical)]
    if problems:
        raise ProgramError(problems)


def refused_by_spark(circuit: Circuit, physical: PhysicalPlan) -> tuple[str, ...]:
    """What :func:`check_supported` would refuse, as text (for ``explain --physical``)."""
    return tuple(str(problem) for _, problem in refusals(circuit, physical))


def refusals(circuit: Circuit, physical: PhysicalPlan) -> list[Refusal]:
    """What one query of the plan cannot run: per refused view its name (None: a table's
    problem, which no stage boundary changes) and why, with the fix."""
    problems = _table_problems(circuit)
    for view in circuit.views:
        problems.extend(
            (view.name, _diagnostic(view, what, fix))
            for what, fix in _view_problems(circuit, physical, view)
        )
    _query_problems(circuit, physical, problems)
    return problems


def _diagnostic(view: View, what: str, fix: str) -> Diagnostic:
    return Diagnostic(
        "error",
        view.position,
        f"view {view.name}: {what} is not supported by the Spark runtime yet",
        fix,
    )


def _table_problems(circuit: Circuit) -> list[Refusal]:
    """The tables whose records the source cannot decode."""
    return [
        (
            None,
            Diagnostic(
                "error",
                table.position,
                f"table {table.name}: format '{table.format}' is not read by the Spark runtime "
                "yet (its records would be decoded as plain Avro)",
                "produce schemaless Avro or JSON values and declare 'format' = 'avro' or "
                "'json'",
            ),
        )
        for table in circuit.tables
        if table.format not in ("avro", "avro-confluent", "json", "json-registry",
                                "protobuf-confluent", "raw", "debezium-json",
                                "debezium-avro-confluent")
    ]


def _view_problems(circuit: Circuit, physical: PhysicalPlan, view: View) -> list[Problem]:
    """What keeps ``view`` off Spark, in the order of the checks: a check that settles the
    view (a Top-N, an OVER, ...) ends the list."""
    found = _nested_derived(circuit, view)
    settled = _read_problems(circuit, physical, view)
    if settled is not None:
        return found + settled
    found += _join_problems(circuit, view)
    native = physical.placement(view.name).placement == "native"
    several = len(physical.query_of(view.name).tables) > 1
    if several and view.lateness:
        found.append((
            "LATENESS on a view of a query of several tables (a UNION ALL's)",
            "declare LATENESS on the tables",
        ))
    if session_windowed(view) and not native:
        return [*found, (
            "this SESSION window aggregate",
            "Spark's session_window runs a SESSION over a table's first LATENESS column "
            "(a TIMESTAMP) with COUNT, SUM, MIN or MAX, its rows read by no other "
            "view's window; the reference evaluator runs the others",
        )]
    found += _watermark_problems(circuit, physical, view, native, several)
    if circuit.union_upstream(view.name) is not None:
        return found
    return found + _aggregate_problems(circuit, physical, view, native)


def _nested_derived(circuit: Circuit, view: View) -> list[Problem]:
    """The step sink merges table waterlines less lags (S16, S17), each turned by the steps
    of a table's derived attribute (a stage boundary's ``window_start``), not steps over a
    merged waterline."""
    tables = {t.name for t in circuit.tables}
    nested = next((a for a in view.time_attributes if _derived_inside(a, tables)), None)
    if nested is None:
        return []
    return [(
        f"the time attribute {nested.column}, a UNION ALL or JOIN of derived time "
        "attributes",
        "derive the time attribute after the UNION ALL or JOIN; the reference "
        "evaluator runs it (tidemark explain shows the plan)",
    )]


def _read_problems(
    circuit: Circuit, physical: PhysicalPlan, view: View
) -> list[Problem] | None:
    """The checks that settle a view by what it is or reads: processing time, a Top-N, a
    reader of a Top-N or OVER view, an OVER, a UNION ALL of an aggregate. None: go on."""
    problem = _processing_time_problem(circuit, view)
    if problem is not None:
        return [problem]
    if view.top_n is not None:
        ranking = top_n_problem(circuit, view)
        if ranking is None and len(physical.query_of(view.name).tables) == 1:
            return []
        return [(
            f"this window Top-N ({view.top_n.function}() OVER ... <= {view.top_n.limit})",
            ranking or "rank the rows of one table's query",
        )]
    tables = {t.name for t in circuit.tables}
    # S18: an aggregate's changes reach its readers through its changelog, which only a
    # stage boundary carries (ADR 0023).
    updating = next((s for s in view.sources if s not in tables
                     and not circuit.view(s).is_stateless and circuit.updating(s)), None)
    if updating is not None:
        return [(
            f"reading the changes of the updating view {updating} in its own query",
            f"read {updating} in a later query, through a stage boundary",
        )]
    if any(circuit.view(s).top_n is not None for s in view.sources if s not in tables):
        return [(
            "a view over a window Top-N view",
            "write the Top-N's own SELECT list and WHERE in its view; the reference "
            "evaluator runs it (tidemark explain shows the plan)",
        )]
    overs = {v.name for v in circuit.views if v.over is not None}
    read = next((s for s in view.sources if s in overs), None)
    if read is not None:
        return [(
            f"reading the OVER view {read}",
            f"compute these columns in {read}'s own SELECT; the reference evaluator runs "
            "the others",
        )]
    if view.over is not None:
        problem = over_problem(circuit, view)
        return [] if problem is None else [problem]
    return _union_problem(circuit, view)


def _union_problem(circuit: Circuit, view: View) -> list[Problem] | None:
    """A branch's pipeline runs over its source's rows in the query; an aggregate's rows
    exist only past its state operator, so the union reads them through a stage boundary
    (ADR 0023)."""
    if view.union is None:
        return None
    tables = {t.name for t in circuit.tables}
    held = next((b.source for b in view.union.branches
                 if b.source not in tables
                 and not circuit.view(b.source).is_stateless), None)
    if held is None:
        return None
    return [(
        f"a UNION ALL branch over the aggregate view {held} in its query",
        "the planner reads it through a stage boundary (docs/language.md)",
    )]


def _join_problems(circuit: Circuit, view: View) -> list[Problem]:
    """A JOIN view's own problem, or an aggregate's over a JOIN view."""
    join = circuit.join_upstream(view.name)
    if join == view.name:
        problem = join_problem(circuit, view)
        return [] if problem is None else [problem]
    if join is not None and not view.is_stateless:
        return [(
            f"an aggregate over the JOIN view {join}",
            "the reference evaluator runs it (tidemark explain shows the plan)",
        )]
    return []


def _watermark_problems(
    circuit: Circuit, physical: PhysicalPlan, view: View, native: bool, several: bool
) -> list[Problem]:
    """Spark's one watermark per query is the minimum of every watermarked table's: an
    aggregate runs only where that minimum is the waterline that frees its state."""
    found: list[Problem] = []
    query = physical.query_of(view.name)
    merged = union_time_tables(circuit, view) if native else None
    alone = (
        native
        and merged is None
        and watermarked_tables(circuit, query) == _root_tables(circuit, view)
    )
    if several and view.reads_deletions:
        # Its table cannot move on through a boundary: the boundary would drop deletions.
        table = view.source
        found.append((
            f"the latest row per key of changelog table {table} (ADR 0030) in the query of "
            f"a temporal join that reads the versions of {table} (a query of several tables)",
            f"read {table}'s latest rows and its versions in two programs, each with its "
            "own CREATE TABLE of the topic",
        ))
    elif several and not view.is_stateless and merged is None and not alone:
        # A native aggregate of one table runs where no other table carries a watermark
        # (its readers are Tidemark's join operators, ADR 0017).
        found.append((
            "this aggregate in a query of several tables (over a UNION ALL, or beside one)",
            "a windowed EMIT AFTER WATERMARK view with COUNT, SUM, MIN or MAX over a UNION "
            "ALL of tables, windowed on each table's first LATENESS column, runs on Spark "
            "(docs/semantics.md)",
        ))
    if merged is not None:
        watermarked = watermarked_tables(circuit, query)
        if set(watermarked) != set(merged):
            found.append((
                f"an aggregate over a UNION ALL of {', '.join(merged)} in a query whose "
                f"watermark also follows {', '.join(sorted(set(watermarked) - set(merged)))}",
                "aggregate a UNION ALL of every table the query's joins read, or give the "
                "other tables' views a program of their own",
            ))
    return found


def _root_tables(circuit: Circuit, view: View) -> tuple[str, ...]:
    """The one table ``view`` reads through a chain of one-input views, or none when a
    UNION ALL or JOIN is on the way (a cascade over a union reads several)."""
    try:
        return (circuit.root_table(view.name).name,)
    except ValueError:
        return ()


def _aggregate_problems(
    circuit: Circuit, physical: PhysicalPlan, view: View, native: bool
) -> list[Problem]:
    """What keeps an aggregate of one table off Spark: LATENESS on it, reading another
    aggregate outside a native cascade, and the state operator's own limits."""
    found: list[Problem] = []
    table = circuit.root_table(view.name)
    if view.lateness and not view.is_stateless:
        found.append(("LATENESS on an aggregate view's column", "declare it on its input"))
    if (
        view.source != table.name
        and not circuit.view(view.source).is_stateless
        and not native
    ):
        found.append((
            f"reading the aggregate view {view.source} this way",
            "a windowed EMIT AFTER WATERMARK view with COUNT, SUM, MIN or MAX over the "
            "window end of another such view (no HAVING, plain columns in its SELECT) "
            "runs on Spark (docs/semantics.md, cascades)",
        ))
    if view.is_stateless or native:
        return found
    return found + _state_operator_problems(circuit, physical, view)


def _state_operator_problems(
    circuit: Circuit, physical: PhysicalPlan, view: View
) -> list[Problem]:
    """The Python state operator frees a group's state by the waterline Spark's watermark
    follows (its owner's first LATENESS column): its windows and time keys must follow it."""
    found: list[Problem] = []
    owner = physical.placement(view.name).state_owner
    assert owner is not None, view.name
    first = first_lateness(circuit, owner)
    inputs = input_attributes(circuit, view.source)
    for op in view.operators:
        if not isinstance(op, Window) or op.time_column == first or op.processing_time:
            continue
        attr = inputs.get(op.time_column)
        if attr is None or not attr.steps or not _follows(attr, owner, first):
            found.append((
                f"a window on {op.time_column} (state is freed by the waterline "
                f"of the first LATENESS column of {owner})",
                f"window on the first LATENESS column of {owner}, or on a derived "
                "time attribute of it (e.g. its + INTERVAL)",
            ))
    completion = group_completion(circuit, view)
    # A derived key, or any time attribute key without a window: the state operator
    # completes its groups by the threshold on the watermark (ADR 0021).
    by_threshold = completion is not None and (
        bool(completion.attribute.steps)
        or completion.attribute.kind not in ("window_start", "window_end")
    )
    if by_threshold and completion is not None and not _follows(
        completion.attribute, owner, first
    ):
        found.append((
            f"a GROUP BY on a time attribute of {completion.attribute.table}."
            f"{completion.attribute.source_column} (state is freed by the waterline of "
            f"the first LATENESS column of {owner})",
            f"group by the first LATENESS column of {owner}, or a derived time "
            "attribute of it (e.g. CEIL(c TO DAY))",
        ))
    if view.state.kind == "window" and not by_threshold and window_key_index(view) is None:
        # The state operator reads a group's window end from the view's own window.
        found.append((
            f"an aggregate by the window bounds of {view.source}'s rows (its window "
            "computed in another view)",
            "window in the aggregate's own query: FROM TABLE(TUMBLE(TABLE t, ...)), "
            "HOP or CUMULATE, GROUP BY window_start, window_end",
        ))
    return found


def _query_problems(
    circuit: Circuit, physical: PhysicalPlan, problems: list[Refusal]
) -> None:
    """Per query, appended to ``problems``: state a watermark frees over a table without
    LATENESS (unless the view that holds it is refused already), and aggregates freed by
    different waterlines."""
    for query in physical.queries:
        # Spark's state follows a watermark, which a table without LATENESS does not have.
        stateful = {v.state_owner for v in query.views
                    if v.state_owner is not None and not _not_freed_by_watermark(circuit, v)}
        for name in query.tables:
            holder = next((v.view for v in query.views if v.state_owner == name),
                          query.views[0].view if query.views else None)
            if holder is None:
                continue
            named = any(refused == holder for refused, _ in problems)
            if name in stateful and not circuit.table(name).lateness and not named:
                view = circuit.view(holder)
                problems.append((view.name, _diagnostic(
                    view,
                    f"state over table {name}, which has no LATENESS column",
                    f"declare LATENESS on the event-time column of {name} (NOT NULL "
                    "TIMESTAMP ... LATENESS INTERVAL ...); the reference evaluator runs it",
                )))
        # A native aggregate over a UNION ALL follows the query's watermark (checked above).
        owners = _state_owners(circuit, query.views)
        if len(owners) > 1:
            # Spark keeps one watermark per query: the views freed by another waterline than
            # the first stateful view's are refused here, so the planner moves them to a
            # later query (ADR 0023), which reads what they read through a boundary.
            counted = [v for v in query.views if v.state_owner in owners]
            kept = counted[0].state_owner
            for placed in counted:
                if placed.state_owner == kept:
                    continue
                view = circuit.view(placed.view)
                problems.append((view.name, _diagnostic(
                    view,
                    f"aggregate views of {', '.join(query.tables)} freed by different "
                    f"waterlines ({', '.join(owners)})",
                    "aggregate over one time source per table",
                )))


def _not_freed_by_watermark(circuit: Circuit, placed: ViewPlacement) -> bool:
    """An aggregate on the state operator whose state no watermark frees, so that runs
    without one: its groups are never complete (no time key: the count of counts over a
    boundary of an aggregate without time attributes, S18), or complete once the step's
    batch time reaches their window's end (a window on a processing-time attribute, ADR
    0022). Their timeouts, if any, are processing-time ones (AFTER DELAY included), which
    read the step's batch time only."""
    view = circuit.view(placed.view)
    return placed.placement == "state_operator" and (
        view.state.kind == "unbounded" or placed.state_freed_by == FREED_BY_BATCH_TIME
    )


def _state_owners(circuit: Circuit, views: Sequence[ViewPlacement]) -> list[str]:
    """The relations whose waterlines free the state of ``views``, but a native aggregate
    over a UNION ALL's (it follows the query's watermark)."""
    return sorted(
        {
            v.state_owner
            for v in views
            if v.state_owner is not None
            and not (v.placement == "native" and _over_union(circuit, v.view))
        }
    )


def _derived_inside(attribute: TimeAttribute, tables: set[str]) -> bool:
    """Whether a UNION ALL or JOIN time attribute has an input (at any depth) derived from
    another view's time attribute (one derived from a table's column is a key of its own)."""
    inputs = list(attribute.merged)
    if attribute.join is not None:
        inputs += [attribute.join.own, attribute.join.other]
    return any(
        (bool(a.steps) and a.table not in tables) or _derived_inside(a, tables) for a in inputs
    )


def _follows(attribute: TimeAttribute, owner: str, first: str | None) -> bool:
    """Whether ``attribute``'s waterline is (a function of) ``owner``'s first LATENESS
    column's, the one Spark's watermark follows: not a UNION ALL's or a JOIN's."""
    return (
        (attribute.table, attribute.source_column) == (owner, first)
        and not attribute.merged
        and attribute.join is None
    )


def _processing_time_problem(circuit: Circuit, view: View) -> Problem | None:
    """What keeps a view that uses processing time off Spark, as (what, fix), or None.
    NOW() after an aggregate runs: the state operator keeps each group's last change's
    batch time (ADR 0022)."""
    # A temporal join AS OF processing time writes each row in the step it arrives in.
    in_step = view.join is not None and view.join.as_of is not None and (
        view.join.as_of.processing_time)
    several = (view.join is not None and not in_step) or view.union is not None
    attributes = [a for a in view.time_attributes if attribute_is_processing_time(circuit, a)]
    if several and (attributes or view_reads_now(view)):
        what = "a JOIN" if view.join is not None else "a UNION ALL"
        return (
            f"processing time (a PROCTIME() column or NOW()) in {what}",
            "forward event-time columns through the join or union and use processing time "
            "in a view that reads it; the reference evaluator runs it",
        )
    return None


def _over_union(circuit: Circuit, view: str) -> bool:
    return union_time_tables(circuit, circuit.view(view)) is not None
