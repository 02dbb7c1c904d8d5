"""The physical plan: what runs where, decided once from the circuit IR.

An ordered tuple of small pure passes (:data:`PASSES`, in the way of sqlglot's optimizer
rules) turns a :class:`~app.circuit.ir.Circuit` into a frozen :class:`PhysicalPlan`:

1. :func:`group_queries`: one Spark query per connected part of the circuit (the relations
   linked by the views that read them), so every relation a view reads is in its query;
2. :func:`place_views`: where each view is computed: ``source_task`` (over Arrow in the
   Kafka source's own tasks, ADR 0007), ``step_sink`` (over the step's accepted rows at the
   end of the step, ADR 0005), ``jvm`` (Spark SQL in the streaming query), ``native``
   (Spark's own windowed aggregation, ADR 0004) or ``state_operator`` (the Python state
   operator, ADR 0003); and whether the view gates its rows with its own LATENESS (L2);
3. :func:`free_state`: the waterline that frees each stateful view's state (S11): the first
   LATENESS column of the nearest relation upstream with LATENESS, which is also what feeds
   the query's Spark watermark;
4. :func:`choose_step_shape`: which of the two step shapes the query's steps take (ADR 0011)
   and whether any row enters the JVM (ADR 0009).

``tidemark explain --physical`` prints the plan (text and JSON); the runtime builds each
query from it (:mod:`app.runtime.operators.query`) and decides nothing again. Every query runs in
Spark's micro-batch mode; ``trigger`` is where a low-latency placement would be recorded
(ADR 0010).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from app.circuit.ir import Circuit, Join, View
from app.circuit.processing_time import processing_time_columns
from app.runtime.operators.aggregate_support import processing_window
from app.runtime.operators.arrow_views import slice_computable
from app.runtime.operators.join_support import by_join_operator, join_time_source
from app.runtime.operators.native_aggregate_support import is_native, union_time_tables
from app.runtime.operators.top_n_support import spark_shape

__all__ = [
    "PASSES",
    "PhysicalPlan",
    "QueryPlan",
    "ViewPlacement",
    "choose_step_shape",
    "explain_physical_json",
    "explain_physical_text",
    "first_lateness",
    "free_state",
    "group_queries",
    "per_step_views",
    "physical_plan",
    "place_views",
    "watermark_owner",
    "watermarked_tables",
]

Placement = Literal["source_task", "step_sink", "jvm", "native", "state_operator"]
#: Where a step's records are written once w(t) is known (ADR 0011): by the query's own
#: tasks (``query_writes``), or by the step sink's second job over the step's cached rows
#: (``step_sink``).
StepShape = Literal["query_writes", "step_sink"]
#: Of a ``query_writes`` query, whose tasks write: the source's (every output is computed in
#: them, ADR 0007) or the aggregate's last stage (ADR 0008).
WritingStage = Literal["source", "aggregate"]
#: Of a ``step_sink`` query, how its two jobs read the step's rows: ``cached`` by Spark, or
#: ``reread`` from the step's slices (the query is its gate rows alone, a pure function of
#: the slices; its first job writes the dead letters, ADR 0011).
StepBatch = Literal["cached", "reread"]

PLACEMENT_TEXT: Mapping[str, str] = {
    "source_task": "in the Kafka source's tasks, over Arrow (ADR 0007)",
    "step_sink": "at the end of the step, over its accepted rows (ADR 0005)",
    "jvm": "in the streaming query, Spark SQL",
    "native": "Spark's own windowed aggregation (ADR 0004)",
    "state_operator": "the Python state operator (ADR 0003)",
}
SHAPE_TEXT: Mapping[str, str] = {
    "query_writes": "the query's own tasks write its records and dead letters (ADR 0011)",
    "step_sink": "the step sink's two jobs over the step's rows: probes, then writes (ADR 0011)",
}
BATCH_TEXT: Mapping[str, str] = {
    "cached": "Spark caches the step's rows for the two jobs",
    "reread": "the second job reads the step's slices again; the first writes the dead "
    "letters (ADR 0011)",
}
STAGE_TEXT: Mapping[str, str] = {
    "source": "the source's tasks, in a second pass over the step's slices (ADR 0007)",
    "aggregate": "the aggregate's last stage, once the probes are in (ADR 0008)",
}


@dataclass(frozen=True)
class ViewPlacement:
    """One view of a query: where it is computed and what frees its state."""

    view: str
    source: str
    placement: Placement
    output: bool
    #: The view gates its own rows (its own LATENESS, SPEC L2).
    gate: bool
    #: What state the view holds (S11, S16): none, per window, unbounded (no time key), a
    #: join's rows of each side in Spark's join, or in Tidemark's join operator (ADR 0017),
    #: or an OVER view's rows in Tidemark's OVER operator (ADR 0019).
    state: Literal["none", "window", "unbounded", "join", "join_operator", "over_operator"] = (
        "none"
    )
    #: The relation whose waterline frees this view's state (S11); None without state.
    state_owner: str | None = None
    #: ``"<relation>.<column>"``: that waterline; None without state or without LATENESS.
    state_freed_by: str | None = None
    #: The views whose stateful operator Spark runs in this view's branch of the query (its
    #: joins and native aggregations, itself and those it reads through other views), in the
    #: order Spark lists them: a view before its inputs, a join's left side before its right.
    operators: tuple[str, ...] = ()
    #: Of a window Top-N view (ADR 0020): ranked per step over an aggregate's final rows,
    #: or held per window in Spark's state over a window function's rows; None otherwise.
    top_n: Literal["per_step", "held"] | None = None


@dataclass(frozen=True)
class QueryPlan:
    """One Spark streaming query: its tables, its views in circuit order, its step shape."""

    name: str
    tables: tuple[str, ...]
    views: tuple[ViewPlacement, ...] = ()
    shape: StepShape = "step_sink"
    #: Of a ``query_writes`` query, the stage whose tasks write; None for ``step_sink``.
    writing_stage: WritingStage | None = None
    #: Of a ``step_sink`` query, how its jobs read the step's rows; None for ``query_writes``.
    batch: StepBatch | None = "cached"
    #: Some row of the query is computed on in the JVM (else the JVM only coordinates).
    rows_in_jvm: bool = True
    #: The query reads its source once (one branch), so one job can do a step (ADR 0008).
    scans_once: bool = False
    #: ``"<relation>.<column>"`` of the Spark watermark the query's state follows, if any.
    watermark: str | None = None
    trigger: Literal["micro-batch"] = "micro-batch"

    def placed(self, *placements: Placement) -> tuple[str, ...]:
        """The views computed at one of ``placements``, in circuit order."""
        return tuple(v.view for v in self.views if v.placement in placements)

    @property
    def state_operators(self) -> tuple[str | None, ...]:
        """The view each stateful operator holds state for, in the order Spark lists them in
        ``progress.stateOperators`` (the order of the query's branches): per output view, the
        operators of its branch (a relation read by two output views is computed, and holds
        its state, twice); then the shared Python operator, reported under the first view it
        serves."""
        outputs = [v for v in self.views if v.output]
        operators = [o for v in outputs if v.placement in ("native", "jvm") for o in v.operators]
        shared = [v.view for v in outputs if v.placement == "state_operator"]
        return (*operators, *shared[:1])


@dataclass(frozen=True)
class PhysicalPlan:
    """The queries of a program, in the order of their first table."""

    program: str
    queries: tuple[QueryPlan, ...]

    @property
    def rows_in_jvm(self) -> bool:
        """Some query computes over rows in the JVM (the session's JVM options, ADR 0009)."""
        return any(q.rows_in_jvm for q in self.queries)

    def query_of(self, relation: str) -> QueryPlan:
        """The query that holds ``relation`` (a table or a view)."""
        for query in self.queries:
            if relation in query.tables or any(v.view == relation for v in query.views):
                return query
        raise KeyError(relation)

    def placement(self, view: str) -> ViewPlacement:
        return next(v for v in self.query_of(view).views if v.view == view)


Pass = Callable[[Circuit, PhysicalPlan], PhysicalPlan]


def _is_join(view: View) -> bool:
    return any(isinstance(op, Join) for op in view.operators)


def _inputs(view: View) -> tuple[str, ...]:
    """The relations a view reads (every branch of a UNION ALL)."""
    return view.sources


def group_queries(circuit: Circuit, plan: PhysicalPlan) -> PhysicalPlan:
    """One query per connected part of the circuit: relations linked by a view that reads
    them share a query (union-find over the views' inputs)."""
    parent: dict[str, str] = {}

    def find(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    for table in circuit.tables:
        find(table.name)
    for view in circuit.views:
        for source in _inputs(view):
            parent[find(source)] = find(view.name)
    queries: dict[str, list[str]] = {}
    for table in circuit.tables:
        queries.setdefault(find(table.name), []).append(table.name)
    views: dict[str, list[ViewPlacement]] = {}
    for view in circuit.views:
        views.setdefault(find(view.name), []).append(
            ViewPlacement(
                view.name,
                _input_text(view),
                "jvm",
                view.output is not None,
                bool(view.lateness),
            )
        )
    return replace(
        plan,
        queries=tuple(
            QueryPlan(f"tidemark-{tables[0]}", tuple(tables), tuple(views.get(root, ())))
            for root, tables in queries.items()
        ),
    )


def place_views(circuit: Circuit, plan: PhysicalPlan) -> PhysicalPlan:
    """Each view's placement. Aggregates: ``native`` when Spark computes them exactly
    (:func:`~app.runtime.operators.native_aggregate_support.is_native`), else
    ``state_operator``. Stateless views with no LATENESS on their way from the table are
    step views (:func:`per_step_views`), computed at the end of the step
    (``step_sink``; :func:`choose_step_shape` may move them into the source's tasks). Every
    other stateless view is ``jvm``."""
    queries = []
    for query in plan.queries:
        views = [circuit.view(v.view) for v in query.views]
        # A stateless view on a UNION ALL is computed in the streaming query (its rows come
        # from several sources), never as a step view.
        unions = {v.name for v in views if circuit.union_upstream(v.name) is not None}
        # The step views and the query-writes shapes read one table's slices (ADR 0011): a
        # query of several tables computes every stateless view in the query.
        step_views = (
            {v.name for v in per_step_views(circuit, [v for v in views if v.name not in unions])}
            if len(query.tables) == 1
            else set()
        )
        placed = []
        for view, entry in zip(views, query.views, strict=True):
            where: Placement
            if view.name in unions and view.is_stateless:
                where = "jvm"
            elif view.top_n is not None:
                where = "native"  # Spark SQL in the query (ADR 0020)
                entry = replace(entry, top_n=spark_shape(circuit, view))
            elif not view.is_stateless:
                where = "native" if is_native(circuit, view) else "state_operator"
            elif view.name in step_views:
                where = "step_sink"
            else:
                where = "jvm"
            placed.append(replace(entry, placement=where))
        queries.append(replace(query, views=tuple(placed)))
    return replace(plan, queries=tuple(queries))


def per_step_views(circuit: Circuit, views: Sequence[View]) -> tuple[View, ...]:
    """The views of one table the step sink computes: stateless (OVER aggregates are not:
    their operator holds rows), with no LATENESS on them or
    on any view they read, in the circuit's order (a view comes after the views it reads);
    none when none of them is an output view (then the query carries no rows for them)."""
    tables = {t.name for t in circuit.tables}
    chosen: dict[str, View] = {}
    for view in views:
        if (
            view.is_stateless
            and view.over is None
            and not view.lateness
            and (view.source in tables or view.source in chosen)
        ):
            chosen[view.name] = view
    if all(view.output is None for view in chosen.values()):
        return ()
    return tuple(chosen.values())



def _input_text(view: View) -> str:
    """``a JOIN b``, ``a LEFT OUTER JOIN b``, ``a JOIN b FOR SYSTEM_TIME AS OF x.t``,
    ``a UNION ALL b``: what the view reads."""
    join = view.join
    if join is None:
        return " UNION ALL ".join(view.sources)
    kind = "" if join.kind == "inner" else f"{join.kind.upper()} OUTER "
    text = f" {kind}JOIN ".join(view.sources)
    if join.as_of is not None:
        text += f" FOR SYSTEM_TIME AS OF {join.as_of_shown}"
    return text


def _branch_operators(
    circuit: Circuit, name: str, placement: Mapping[str, Placement]
) -> tuple[str, ...]:
    """The views whose stateful operator Spark runs in ``name``'s branch, in the order of
    ``progress.stateOperators`` (Spark collects them from its plan, a node before its
    children): the view itself if a join or a native aggregation, then each input's (a
    join's left, then its right; a UNION ALL's branches in order)."""
    if any(t.name == name for t in circuit.tables):
        return ()
    view = circuit.view(name)
    # A Top-N over an aggregate's final rows ranks them per step, without state (ADR 0020).
    ranks_per_step = view.top_n is not None and not any(t.name == view.source
                                                        for t in circuit.tables)
    stateful = (_is_join(view) or view.over is not None
                or placement.get(name) == "native" and not ranks_per_step)
    here = (name,) if stateful else ()
    return here + tuple(
        o for source in view.sources for o in _branch_operators(circuit, source, placement)
    )


def _join_tables(circuit: Circuit, view: View) -> list[str]:
    """The tables a join's sides read (through single-input views)."""
    tables = []
    for source in view.sources:
        try:
            tables.append(circuit.root_table(source).name)
        except ValueError:
            continue  # a side over a UNION ALL: refused on Spark
    return tables


def watermark_owner(circuit: Circuit, relation: str) -> str:
    """The relation whose waterline frees the state of ``relation``'s input rows: the nearest
    view with its own LATENESS upstream of it (L2), else its table."""
    tables = {t.name for t in circuit.tables}
    current = circuit.view(relation).source
    while current not in tables:
        view = circuit.view(current)
        if view.lateness or len(view.sources) > 1:
            return view.name  # a UNION ALL's own merged waterline (S17)
        current = view.source
    return current


def first_lateness(circuit: Circuit, relation: str) -> str | None:
    """The first LATENESS column of a table or view, whose waterline frees state (S11)."""
    tables = {t.name: t for t in circuit.tables}
    if relation not in tables and len(circuit.view(relation).sources) > 1:
        # A UNION ALL's merged waterline (S17): the first of its time attributes.
        attributes = circuit.view(relation).time_attributes
        return attributes[0].column if attributes else None
    lateness = (tables[relation] if relation in tables else circuit.view(relation)).lateness
    return lateness[0].column if lateness else None


def watermarked_tables(circuit: Circuit, query: QueryPlan) -> tuple[str, ...]:
    """The query's tables that carry Spark's watermark (whose minimum is the query's): each
    table that owns an aggregate's state, the tables of a join's time bound (the watermark
    frees the join's state, S16), and the tables of a native aggregate over a UNION ALL;
    never a table without LATENESS (the support pass refuses state of one that needs a
    watermark; an aggregate that never frees a group, or frees it by the step's batch time,
    runs without one)."""
    found = [v.state_owner for v in query.views if v.state_owner in query.tables]
    for entry in query.views:
        view = circuit.view(entry.view)
        join = view.join
        if join is not None and join.bound is not None and not by_join_operator(join):
            # Tidemark's join operator reads each table's waterline from its probes.
            for side, column in (
                (join.left, join.bound.left_column),
                (join.right, join.bound.right_column),
            ):
                time = join_time_source(circuit, side.source, column, join.form == "window")
                if time is not None:
                    found.append(time[0])
        if entry.placement == "native":
            found.extend(union_time_tables(circuit, view) or ())
    return tuple(t for t in query.tables if t in found and circuit.table(t).lateness)



#: ``state_freed_by`` of a window on a processing-time attribute.
FREED_BY_BATCH_TIME = "batch time"


def free_state(circuit: Circuit, plan: PhysicalPlan) -> PhysicalPlan:
    """The waterline that frees each stateful view's state, and the query's watermark."""
    queries = []
    for query in plan.queries:
        placed = []
        owners = []
        #: Table watermarks of the query's joins and native UNION ALL aggregates, whose
        #: minimum is Spark's watermark.
        joins: list[str] = []
        placement = {v.view: v.placement for v in query.views}
        for entry in query.views:
            view = circuit.view(entry.view)
            entry = replace(entry, operators=_branch_operators(circuit, view.name, placement))
            if _is_join(view):
                if view.join is not None and view.join.as_of is not None and (
                        view.join.as_of.processing_time):
                    # Its probe rows go in their own step; a version stays per key.
                    placed.append(replace(entry, state="join_operator",
                                          state_freed_by=FREED_BY_BATCH_TIME))
                    continue
                if view.state.kind == "unbounded":
                    # A join without a time bound keeps every row (S16, an L7 warning).
                    placed.append(replace(entry, state="unbounded"))
                    continue
                # Each side's rows, freed by the query's watermark (S16, ADR 0013).
                sides = list(
                    dict.fromkeys(
                        f"{t}.{first_lateness(circuit, t)}" for t in _join_tables(circuit, view)
                    )
                )
                if view.join is not None and by_join_operator(view.join):
                    # Tidemark's join operator frees by each side's own waterline (ADR 0017).
                    placed.append(
                        replace(entry, state="join_operator", state_freed_by=", ".join(sides))
                    )
                    continue
                joins.extend(sides)
                placed.append(replace(entry, state="join", state_freed_by=", ".join(sides)))
                continue
            if view.over is not None:
                # Tidemark's OVER operator frees by its ORDER BY column's waterline (ADR 0019).
                freed_by = f"{view.source}.{view.over.order_column}"
                placed.append(replace(entry, state="over_operator", state_freed_by=freed_by))
                continue
            if view.is_stateless or entry.top_n == "per_step":
                placed.append(entry)
                continue
            owner = watermark_owner(circuit, entry.view)
            column = first_lateness(circuit, owner)
            freed = None if column is None else f"{owner}.{column}"
            merged = union_time_tables(circuit, view) if entry.placement == "native" else None
            if merged:
                # Spark's watermark over a UNION ALL's tables is the minimum of theirs: the
                # union column's waterline (S17, ADR 0013).
                joins.extend(f"{t}.{first_lateness(circuit, t)}" for t in merged)
            else:
                owners.append(freed)
            kind = circuit.view(entry.view).state.kind
            if processing_window(view):
                freed = FREED_BY_BATCH_TIME  # a processing-time window (ADR 0022)
            placed.append(
                replace(
                    entry,
                    state=kind,
                    state_owner=owner,
                    state_freed_by=freed if kind == "window" else None,
                )
            )
        watermark = next((o for o in owners if o is not None), None)
        if joins:
            # Spark's watermark of a query of several tables is the minimum of theirs.
            inputs = sorted(set(joins) | ({watermark} if watermark else set()))
            watermark = inputs[0] if len(inputs) == 1 else f"min({', '.join(inputs)})"
        queries.append(replace(query, views=tuple(placed), watermark=watermark))
    return replace(plan, queries=tuple(queries))


def choose_step_shape(circuit: Circuit, plan: PhysicalPlan) -> PhysicalPlan:
    """Which of the two step shapes each query takes (ADR 0011). With no view gate, no
    ``AS PROCTIME()`` column (the source's tasks know no batch time) and step
    views the source's tasks can all compute over Arrow
    (:func:`~app.runtime.operators.arrow_views.slice_computable`), the query writes its own records
    (``query_writes``): from the aggregate's last stage when its outputs are native
    aggregates (at least one) and step views (ADR 0008), from the source's tasks when every
    output is a step view (ADR 0007); in both, the step views move to ``source_task``. Every
    other query writes through the step sink (``step_sink``), over its rows cached, or read
    again from the step's slices when it has no branch of Spark's own (no gate, no
    JVM-computed output, no aggregate). A query of several tables (a UNION ALL's) always
    takes the cached ``step_sink`` shape: the other shapes read one table's slices."""
    queries = []
    for query in plan.queries:
        outputs = [v for v in query.views if v.output]
        gates = any(v.gate for v in query.views)
        step_views = [circuit.view(v.view) for v in query.views if v.placement == "step_sink"]
        # The source's tasks know no batch time: a table's AS PROCTIME() column is taken
        # inside the query (view_frame.table_columns).
        proctime = any(
            processing_time_columns(circuit.table(t)) for t in query.tables
        )
        in_source = (
            not gates and not proctime and (not step_views or slice_computable(step_views))
        )
        native = any(v.placement == "native" for v in outputs)
        branches = (
            int(gates)
            + sum(1 for v in outputs if v.placement in ("native", "jvm"))
            + int(any(v.placement == "state_operator" for v in outputs))
        )
        stage: WritingStage | None = None
        if len(query.tables) > 1:
            pass  # the step sink's cached shape: one job per step reads every source
        elif in_source and native and all(v.placement in ("native", "step_sink") for v in outputs):
            stage = "aggregate"
        elif in_source and outputs and all(v.placement == "step_sink" for v in outputs):
            stage = "source"
        views = query.views
        if stage is not None:
            views = tuple(
                replace(v, placement="source_task") if v.placement == "step_sink" else v
                for v in views
            )
        queries.append(
            replace(
                query,
                views=views,
                shape="step_sink" if stage is None else "query_writes",
                writing_stage=stage,
                batch=(
                    None
                    if stage is not None
                    else "reread"
                    if branches == 0 and len(query.tables) == 1
                    else "cached"
                ),
                rows_in_jvm=stage != "source",
                scans_once=stage == "aggregate" and branches == 1,
            )
        )
    return replace(plan, queries=tuple(queries))


#: The passes, in order; each reads the circuit and the plan so far and returns a new plan.
PASSES: tuple[Pass, ...] = (group_queries, place_views, free_state, choose_step_shape)


def physical_plan(circuit: Circuit) -> PhysicalPlan:
    """Run :data:`PASSES` over ``circuit``."""
    plan = PhysicalPlan(circuit.program, ())
    for step in PASSES:
        plan = step(circuit, plan)
    return plan


def explain_physical_json(plan: PhysicalPlan) -> dict[str, Any]:
    return {
        "program": plan.program,
        "rows_in_jvm": plan.rows_in_jvm,
        "queries": [
            {
                "name": q.name,
                "tables": list(q.tables),
                "trigger": q.trigger,
                "step_shape": q.shape,
                "writing_stage": q.writing_stage,
                "batch": q.batch,
                "rows_in_jvm": q.rows_in_jvm,
                "scans_once": q.scans_once,
                "watermark": q.watermark,
                "views": [
                    {
                        "name": v.view,
                        "source": v.source,
                        "placement": v.placement,
                        "output": v.output,
                        "gate": v.gate,
                        "state": v.state,
                        "state_owner": v.state_owner,
                        "state_freed_by": v.state_freed_by,
                    }
                    for v in q.views
                ],
                "state_operators": list(q.state_operators),
            }
            for q in plan.queries
        ],
    }


def _unbounded_state_text(views: tuple[ViewPlacement, ...]) -> str:
    """The watermark line of a query without one: no view holds state, the state the views
    hold is freed by the step's batch time (windows on a processing-time attribute of a
    table without LATENESS), or not bounded by any waterline (an aggregate over a table
    without LATENESS, or over an updating view's boundary)."""
    stateful = [v for v in views if v.state != "none"]
    if not stateful:
        return "(none: the query holds no state)"
    timed = [v.view for v in stateful if v.state_freed_by == FREED_BY_BATCH_TIME]
    unbounded = [v.view for v in stateful if v.state_freed_by != FREED_BY_BATCH_TIME]
    parts = []
    if timed:
        parts.append(f"the state of {', '.join(timed)} is freed by the step's batch time")
    if unbounded:
        parts.append(f"the state of {', '.join(unbounded)} is not bounded by a waterline")
    return f"(none: {'; '.join(parts)})"


def explain_physical_text(plan: PhysicalPlan, refused: tuple[str, ...] = ()) -> str:
    """The plan for people; ``refused``: why the Spark runtime would not run the program."""
    lines = [f"program {plan.program} (physical plan, docs/architecture.md)", ""]
    for q in plan.queries:
        lines.append(f"query {q.name}")
        lines.append(f"  tables:       {', '.join(q.tables)}")
        lines.append(f"  trigger:      {q.trigger}")
        lines.append(f"  step:         {q.shape}: {SHAPE_TEXT[q.shape]}")
        if q.writing_stage is not None:
            lines.append(f"  writers:      {STAGE_TEXT[q.writing_stage]}")
        if q.batch is not None:
            lines.append(f"  batch:        {q.batch}: {BATCH_TEXT[q.batch]}")
        lines.append(f"  rows in JVM:  {'yes' if q.rows_in_jvm else 'no (the JVM coordinates)'}")
        none = (
            "(none: Tidemark's join operator follows each table's waterline)"
            if any(v.state == "join_operator" for v in q.views)
            else "(none: Tidemark's OVER operator follows its table's waterline)"
            if any(v.state == "over_operator" for v in q.views)
            else _unbounded_state_text(q.views)
        )
        lines.append(f"  watermark:    {q.watermark or none}")
        for v in q.views:
            role = "" if v.output else " (local)"
            gate = ", gates its own LATENESS" if v.gate else ""
            lines.append(f"  view {v.view} <- {v.source}{role}: {v.placement}{gate}")
            computed = PLACEMENT_TEXT[v.placement]
            if v.top_n == "per_step":
                computed = ("in the streaming query: each step's final rows of its input, "
                            "ranked per partition (ADR 0020)")
            elif v.top_n == "held" and v.source.startswith("__in_"):
                computed = ("Spark's own aggregation holds each window's rows read through "
                            "the boundary until the window is complete, then ranks them "
                            "(ADR 0020)")
            elif v.top_n == "held":
                computed = ("Spark's own windowed aggregation, the best rows per window and "
                            "partition (ADR 0020; every row of the window for RANK or ORDER "
                            "BY keys in both directions)")
            if v.state == "join_operator" or (v.state == "unbounded"
                                              and " OUTER JOIN " in v.source):
                computed = "in the streaming query, Tidemark's join operator (ADR 0017)"
            elif v.state == "over_operator":
                computed = "in the streaming query, Tidemark's OVER operator (ADR 0019)"
            lines.append(f"    computed:   {computed}")
            if v.state == "window":
                freed = (
                    "the step's batch time"
                    if v.state_freed_by == FREED_BY_BATCH_TIME
                    else f"w({v.state_freed_by})"
                )
                lines.append(
                    f"    state:      a window's groups, freed once {freed} passes the "
                    "window's end"
                )
            elif v.state == "join_operator" and v.state_freed_by == FREED_BY_BATCH_TIME:
                lines.append(
                    "    state:      per key, the latest version of the versioned table; each "
                    "probe row is written in the step it arrives in (processing time; "
                    "Tidemark's join operator, ADR 0017)"
                )
            elif v.state == "join_operator" and " FOR SYSTEM_TIME AS OF " in v.source:
                lines.append(
                    "    state:      the probe rows, each written and freed once the versioned "
                    "table's waterline passes its time, and per key the versions a lookup can "
                    f"still find (Tidemark's join operator, ADR 0017; waterlines of "
                    f"{v.state_freed_by})"
                )
            elif v.state == "join_operator":
                lines.append(
                    "    state:      each side's rows (Tidemark's join operator, ADR 0017), a "
                    f"row freed once the other side's waterline (of {v.state_freed_by}) passes "
                    "its bound, then written with NULLs if it never matched"
                )
            elif v.state == "over_operator":
                lines.append(
                    "    state:      per partition, the rows waiting for w("
                    f"{v.state_freed_by}) to pass their time and the rows a frame can still "
                    "read (Tidemark's OVER operator, ADR 0019)"
                )
            elif v.state == "join":
                watermark = (
                    f"the minimum of w({v.state_freed_by})"
                    if v.state_freed_by is not None and ", " in v.state_freed_by
                    else f"w({v.state_freed_by})"
                )
                lines.append(
                    "    state:      each side's rows (Spark's stream-stream join), freed once "
                    f"the query's watermark, {watermark}, passes their bound"
                )
            elif v.state == "unbounded":
                what = "a join without a time bound" if " JOIN " in v.source else (
                    "GROUP BY without a time key")
                lines.append(
                    f"    state:      unbounded: {what} is never freed (see the warnings of "
                    "tidemark explain)"
                )
        lines.append("")
    if refused:
        lines.append("the Spark runtime does not run this program yet")
        lines.extend(f"  {reason}" for reason in refused)
    else:
        lines.append("runs on Spark: yes")
    return "\n".join(lines) + "\n"
