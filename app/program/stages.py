"""Stage boundaries (SPEC S19, ADR 0023): where a view is read by a later query through Kafka.

The planner (app/runtime/planner/compose.py) gives every relation a stage; a relation read by a view
of a later stage is a *boundary*. The compiler then writes the boundary's rows to an internal
topic (its own output when it has none, else a twin view's) and gives each later reader a
table over that topic in its place. The table is named ``__in_<relation>``: its columns are
the relation's, and each event-time attribute that is NOT NULL is a LATENESS column of amount
0 whose waterline moves only by the punctuations the upstream query writes after each step
(the relation's waterlines, app/runtime/step/step_sink.py), never by a row's value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.circuit.ir import (
    Aggregate,
    Column,
    ColumnRef,
    Derivation,
    EmitPolicy,
    Lateness,
    Output,
    Position,
    Project,
    StateBound,
    Table,
    TimeAttribute,
    TimeStep,
    View,
    Window,
)
from app.circuit.waterline import WaterlineStep
from app.program.avro_schema import CHANGELOG_FIELDS, record_schema

__all__ = [
    "STAGE_WRITER",
    "Composition",
    "attribute_steps",
    "punctuated_columns",
    "stage_columns",
    "stage_input_name",
    "stage_output",
    "stage_table",
    "stage_writer_name",
    "start_window",
    "table_passthrough",
    "window_span",
]

#: The name prefix of a view that writes a boundary's rows beside it (a twin, a passthrough).
STAGE_WRITER = "__out_"
#: What a boundary's internal topics are named after when no run names them (explain).
DEFAULT_PREFIX = "tidemark.internal"


@dataclass(frozen=True)
class Composition:
    """The stages the planner gave the program's relations, and the prefix of its internal
    topics (one per boundary, ``<prefix>.<relation>``)."""

    stages: Mapping[str, int] = field(default_factory=dict)
    boundaries: frozenset[str] = frozenset()
    prefix: str = DEFAULT_PREFIX
    #: Per table a stage reads a boundary through (:func:`stage_input_name`), the time
    #: attribute that stage's readers window on or bound a join on, when they all use one:
    #: its first LATENESS column (Spark's watermark follows it).
    leads: Mapping[str, str] = field(default_factory=dict)

    def stage(self, name: str) -> int:
        """A relation's stage; a generated relation without a view of its own (a ranking)
        is in its view's (the part of its name before the first ``.``). A boundary the
        planner did not move is in stage 0, as the planner counts it, even when generated
        (the join of a join chain's earlier relations read by a later stage)."""
        if name in self.stages:
            return self.stages[name]
        if name in self.boundaries:
            return 0
        return self.stages.get(name.split(".", 1)[0], 0)

    def topic(self, relation: str) -> str:
        return f"{self.prefix}.{_safe(relation)}"


def _safe(name: str) -> str:
    """A relation's name as a Kafka topic, table and Avro name part (generated views hold
    ``.`` and ``#``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def stage_input_name(relation: str, later: int = 0) -> str:
    """The table a later stage reads ``relation`` through: ``__in_<relation>`` for the stage
    right after the relation's, ``__in<n>_<relation>`` for the one ``n`` stages after that."""
    return f"__in{later or ''}_{_safe(relation)}"


def stage_writer_name(relation: str) -> str:
    """The view that writes ``relation``'s rows to its internal topic when ``relation`` has
    an output of its own (a twin) or is a table (a passthrough)."""
    return f"{STAGE_WRITER}{_safe(relation)}"


def stage_output(composition: Composition, relation: str, columns: Sequence[Column],
                 updating: bool = False) -> Output:
    """The internal topic's binding: Avro rows on one partition, so that the punctuations a
    step ends with follow every row of that step (ADR 0023); ``append`` rows, or for an
    ``updating`` relation its ``changelog`` (S18: its readers see the retractions)."""
    return Output(
        composition.topic(relation),
        "changelog" if updating else "append",
        (),
        None,
        record_schema(_safe(relation), columns, CHANGELOG_FIELDS if updating else ()),
        partitions=1,
        stage_output=True,
    )


def stage_columns(columns: Sequence[Column]) -> tuple[Column, ...]:
    return tuple(Column(c.name, c.type) for c in columns)


def start_window(views: Mapping[str, View], view: View, column: str) -> Window | None:
    """The window whose start a row's ``column`` (a ``window_start`` attribute of ``view``)
    is: found in ``view`` or, forwarded, in the view it reads; None when unknown."""
    for op in view.operators:
        if isinstance(op, Window) and op.kind != "SESSION":
            return op
    # A join's SELECT reads its sides' columns qualified (``c.window_start``): a join
    # output keeps its side's column name.
    read = column if view.join is not None else _read_as(view, column)
    for source in view.sources:
        upstream = views.get(source)
        if upstream is not None and any(
            a.column == read and a.kind == "window_start" for a in upstream.time_attributes
        ):
            return start_window(views, upstream, read)
    return None


def _read_as(view: View, column: str) -> str:
    """The input column ``view`` passes on as its ``column``, through the renames of its
    SELECT lists and GROUP BY (a Top-N's ``window_start AS ws``); ``column`` itself when an
    expression computes it."""
    for op in reversed(view.operators):
        named = (op.outputs if isinstance(op, Project)
                 else op.keys if isinstance(op, Aggregate) else None)
        if named is None:
            continue
        expr = dict(named).get(column)
        if not isinstance(expr, ColumnRef):
            return column
        column = expr.name
    return column


def window_span(views: Mapping[str, View], view: View, column: str) -> int | None:
    """How far below its ``window_end`` a row's ``column`` (a ``window_start`` attribute of
    ``view``) can be: the size of the window that made it (a CUMULATE's largest)."""
    window = start_window(views, view, column)
    return None if window is None else window.size


def stage_table(
    composition: Composition,
    relation: str,
    columns: Sequence[Column],
    event_time: Sequence[TimeAttribute],
    span: int | None,
    position: Position,
    primary_key: tuple[str, ...] = (),
    later: int = 0,
    updating: bool = False,
) -> tuple[Table, tuple[TimeAttribute, ...]]:
    """The table a later stage reads ``relation`` through, and its time attributes;
    ``later``: how many stages after the one right after the relation's (each stage that
    reads a boundary reads it through a table of its own).

    Each of ``event_time`` (the relation's event-time attributes) that is NOT NULL is a
    LATENESS column of amount 0, the one its readers window on or bound a join on first
    (the composition's lead; Spark's watermark follows the first), else ``window_end``
    first, but a ``window_start`` beside a ``window_end`` that is no lead: that one is
    ``window_end - span``, a time attribute derived from it (S10; never above the exact start
    waterline, so nothing it completes can still change). A ``window_start`` that is a lead,
    of this table or of another stage's table of the relation (all read one topic and its
    punctuations, so all list the same LATENESS columns), has its own punctuated waterline,
    S10's exact one (a window Top-N or a window of its readers needs it first). ``span`` is
    the window's size (:func:`window_span`). The
    table of an ``updating`` relation reads its changelog (:attr:`Table.retractions`)."""
    plain = stage_columns(columns)
    types = {c.name: c.type for c in plain}
    timed = [a for a in event_time if a.column in types and not types[a.column].nullable
             and types[a.column].name in ("TIMESTAMP", "BIGINT", "INT")]
    name = stage_input_name(relation, later)
    end_attr = next((a for a in timed if a.kind == "window_end"), None)
    end = None if end_attr is None else end_attr.column
    derived_start = end is not None and span is not None
    lead = composition.leads.get(name)
    # Every stage reads one topic and its punctuations: the tables of all of them list the
    # same LATENESS columns, each in its own order.
    readers = {stage_input_name(relation, n)
               for n in range(max(composition.stages.values(), default=0) + 1)}
    own_starts = {column for table, column in composition.leads.items() if table in readers}
    if any(a.column == lead and _of_window_end(a, end_attr) is not None for a in timed):
        lead = None  # derived from the window end, which stays first
    timed.sort(key=lambda a: (a.column != lead, a.kind != "window_end"))
    attributes: list[TimeAttribute] = []
    lateness: list[Lateness] = []
    for attr in timed:
        if attr.kind == "window_start" and span is None:
            continue  # nothing bounds it (unknown window)
        own = TimeAttribute(attr.column, name, attr.column, "forwarded")
        if attr.kind == "window_start" and derived_start and attr.column not in own_starts:
            assert end is not None and span is not None
            base = TimeAttribute(end, name, end, "forwarded")
            attributes.append(TimeAttribute(attr.column, name, end, "derived",
                                            derivation=Derivation(base, (TimeStep(
                                                "shift", -span),))))
            continue
        of_end = _of_window_end(attr, end_attr)
        if of_end is not None:
            # Derived from the window end beside it (Flink's window_time, window_end - 1 ms):
            # derived from that column again, so it follows the watermark Spark keeps.
            assert end is not None
            base = TimeAttribute(end, name, end, "forwarded")
            attributes.append(TimeAttribute(attr.column, name, end, "derived",
                                            derivation=Derivation(base, of_end)))
            continue
        attributes.append(own)
        lateness.append(Lateness(attr.column, 0))
    topic = composition.topic(relation)
    derived = tuple(a for a in attributes if a.kind == "derived")
    read = (*plain, *CHANGELOG_FIELDS) if updating else plain
    table = Table(
        name,
        read,
        topic,
        "avro",
        record_schema(_safe(relation), read),
        f"{topic}.dlq",
        tuple(lateness),
        None,
        position,
        primary_key=primary_key,
        stage_input=relation,
        derived_attributes=derived,
        retractions=updating,
    )
    return table, tuple(attributes)


def _of_window_end(attr: TimeAttribute, end: TimeAttribute | None) -> tuple[TimeStep, ...] | None:
    """The steps of a derived attribute computed from the relation's window end ``end``
    alone (the same column, or the one it forwards: a Top-N's renamed ``window_end`` of a
    boundary's rows), else None."""
    derivation = attr.derivation
    if attr.kind != "derived" or derivation is None or end is None:
        return None
    source = derivation.source
    if source.derivation is not None:
        return None
    if source.kind == "window_end" and source.column == end.column:
        return derivation.steps
    if (source.table, source.source_column) == (end.table, end.source_column):
        return derivation.steps
    return None


def punctuated_columns(
    views: Mapping[str, View], view: View, table: Table
) -> tuple[tuple[TimeAttribute, tuple[WaterlineStep, ...]], ...]:
    """Each LATENESS column of a boundary's ``table`` as the time attribute of ``view`` whose
    waterline the punctuation carries, with the steps from its source's waterline (a
    ``window_start``'s end in its window, S10)."""
    out = []
    for lateness in table.lateness:
        attr = next(a for a in view.time_attributes if a.column == lateness.column)
        out.append((attr, attribute_steps(views, view, attr)))
    return tuple(out)


def attribute_steps(
    views: Mapping[str, View], view: View, attr: TimeAttribute
) -> tuple[WaterlineStep, ...]:
    """The steps that turn the waterline of ``attr``'s source column into its own: its
    derivation's, and for a ``window_start`` its window's (S10,
    :func:`app.circuit.waterline.window_start_waterline`)."""
    if attr.kind != "window_start":
        return attr.steps
    window = start_window(views, view, attr.column)
    return attr.steps if window is None else (*attr.steps, window)


def table_passthrough(composition: Composition, table: Table) -> View:
    """A table read by a later stage: a view of its rows as they are, written to the
    internal topic (its time attributes forwarded)."""
    columns = stage_columns(table.columns)
    return View(
        stage_writer_name(table.name),
        (table.name,),
        (Project(tuple((c.name, ColumnRef(c.name, c.type)) for c in columns)),),
        columns,
        (),
        tuple(TimeAttribute(x.column, table.name, x.column, "forwarded") for x in table.lateness),
        EmitPolicy(),
        stage_output(composition, table.name, columns),
        StateBound("none"),
        table.position,
    )
