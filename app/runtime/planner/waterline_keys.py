"""Which waterline each output view's S14 header follows, named as keys of the query's map.

A query's step sink keeps one waterline map: per table its LATENESS columns (the column
name for a query of one table, ``"<table>.<column>"`` for a query of several), per view
LATENESS column ``"<view>.<column>"`` (L2). An output view's S14 waterline is one key of
that map, or the minimum of several keys less their lags (a UNION ALL's, S17, or a JOIN's,
S16: kept in ``merged``), or a key's waterline turned by a derived time attribute's steps
(S10: kept in ``derived``). A stage boundary's punctuation (ADR 0023) names one such key
per LATENESS column of the table that reads it. All of it follows from the circuit and the
physical plan's query alone; the step sink and the writing tasks evaluate the keys each
step (:mod:`app.runtime.step.view_waterlines`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from app.circuit.ir import Circuit, SqlType, Table, TimeAttribute, View
from app.circuit.processing_time import attribute_is_processing_time
from app.circuit.waterline import WaterlineStep
from app.errors import TidemarkError
from app.program.stages import attribute_steps, punctuated_columns
from app.runtime.planner.physical import QueryPlan
from app.runtime.step.view_waterlines import DerivedInput, MergedInput

__all__ = [
    "QueryWaterlines",
    "StagePunctuation",
    "TimeUnit",
    "WaterlineInput",
    "query_waterlines",
    "table_units",
    "time_unit",
    "waterline_inputs",
    "waterline_key",
]

TimeUnit = Literal["ms", "integer"]
#: A waterline the S14 waterline of a view follows: a key of the query's waterline map and
#: how far below it (``w - lag``, in the column's unit).
WaterlineInput = MergedInput


def waterline_key(view: str, column: str) -> str:
    """The key of a view column's waterline in the table's waterline files (L2)."""
    return f"{view}.{column}"


def time_unit(t: SqlType) -> TimeUnit:
    """'ms' for TIMESTAMP waterlines, 'integer' for INT/BIGINT ones."""
    return "ms" if t.name == "TIMESTAMP" else "integer"


def table_units(table: Table) -> dict[str, Any]:
    """The table's topic, the unit of each of its LATENESS columns' waterlines, and whether
    its dead letters carry Kafka Connect's headers too (what the sink's S6 headers need)."""
    return {
        "topic": table.topic,
        "units": {x.column: time_unit(table.column(x.column).type) for x in table.lateness},
        "connect_headers": table.dead_letter_connect_headers,
    }


@dataclass(frozen=True)
class StagePunctuation:
    """What a query writes to a stage boundary's internal topic after each step (ADR 0023):
    per column, the waterline key of the bound its reader's table moves to."""

    view: str
    topic: str
    columns: tuple[tuple[str, str], ...]  # (column, waterline key)


@dataclass(frozen=True)
class QueryWaterlines:
    """The waterline keys of one query's output views (see the module docstring)."""

    #: Output view -> the waterline key of its S14 header (None: it has none).
    time_source: dict[str, str | None]
    #: A UNION ALL or JOIN time attribute's key -> the keys (and lags) whose minimum is its
    #: waterline (S16, S17).
    merged: dict[str, tuple[WaterlineInput, ...]]
    #: A derived time attribute's key -> the key whose waterline its steps turn into its own.
    derived: dict[str, DerivedInput]
    #: Per stage boundary the query writes: its internal topic and its punctuation's keys.
    punctuations: tuple[StagePunctuation, ...]


def query_waterlines(circuit: Circuit, query: QueryPlan) -> QueryWaterlines:
    """The waterline keys of every output view of ``query``, in the circuit's order."""
    table = circuit.table(query.tables[0])
    several = len(query.tables) > 1
    time_source: dict[str, str | None] = {}
    merged: dict[str, tuple[WaterlineInput, ...]] = {}
    derived: dict[str, DerivedInput] = {}
    punctuations: list[StagePunctuation] = []
    for entry in query.views:
        view = circuit.view(entry.view)
        if view.output is None:
            continue
        time_source[view.name] = _s14_key(circuit, view, table, several, merged, derived)
        steps = _first_time_steps(circuit, view, table, several)
        base = time_source[view.name]
        if steps and base is not None:
            first = _s14_attribute(circuit, view)
            assert first is not None, view.name
            key = f"{view.name}.{first.column}"
            derived[key] = (base, steps)
            time_source[view.name] = key
        if view.output.stage_output:
            punctuations.append(
                _stage_punctuation(circuit, view, table, several, merged, derived)
            )
    return QueryWaterlines(time_source, merged, derived, tuple(punctuations))


def _s14_key(
    circuit: Circuit,
    view: View,
    table: Table,
    several: bool,
    merged: dict[str, tuple[WaterlineInput, ...]],
    derived: dict[str, DerivedInput],
) -> str | None:
    """The key of the waterline an output view's S14 header carries before any steps of a
    derived attribute; a key of its own in ``merged`` when it is a minimum of several (of
    which a table's derived attribute is a key of its own in ``derived``)."""
    if not several and circuit.union_upstream(view.name) is None:
        return _time_key(circuit, view, table)
    keys = _in_query_map(waterline_inputs(circuit, view, derived, several), several)
    if len(keys) > 1 or any(lag for _, lag in keys):
        first = _s14_attribute(circuit, view)
        assert first is not None, view.name
        key = f"{view.name}.{first.column}"
        merged[key] = keys
        return key
    return keys[0][0] if keys else None


def _in_query_map(
    keys: tuple[WaterlineInput, ...], several: bool
) -> tuple[WaterlineInput, ...]:
    """``keys`` (``"<table>.<column>"``) as the query's map names them, each once: a query
    of one table names its own columns alone."""
    if not several:
        keys = tuple((key.split(".", 1)[1], lag) for key, lag in keys)
    return tuple(dict.fromkeys(keys))


def waterline_inputs(
    circuit: Circuit,
    view: View,
    derived: dict[str, DerivedInput] | None = None,
    several: bool = True,
) -> tuple[WaterlineInput, ...]:
    """S14 of a view over several relations: the table waterlines whose minimum (each less
    its lag) is the waterline of the view's first time attribute: several through a UNION
    ALL (S17) or a JOIN (its own side's, and the other side's less the bound, S16); none
    without an event-time attribute (a processing-time one publishes no waterline). A
    table's derived attribute among them (a stage boundary's ``window_start``) is a key of
    its own, added to ``derived`` (named as a query of ``several`` tables names keys)."""
    first = _s14_attribute(circuit, view)
    if first is None:
        return ()
    return _attribute_inputs(circuit, first, {} if derived is None else derived, several)


def _s14_attribute(circuit: Circuit, view: View) -> TimeAttribute | None:
    """The time attribute a view's S14 waterline follows: its first event-time one (a
    processing-time attribute publishes no waterline); None without one."""
    return next(
        (a for a in view.time_attributes if not attribute_is_processing_time(circuit, a)), None
    )


def _attribute_inputs(
    circuit: Circuit,
    attribute: TimeAttribute,
    derived: dict[str, DerivedInput],
    several: bool,
) -> tuple[WaterlineInput, ...]:
    if attribute.merged:
        return tuple(
            key
            for branch in attribute.merged
            for key in _attribute_inputs(circuit, branch, derived, several)
        )
    if attribute.join is not None:
        held = attribute.join
        other = _attribute_inputs(circuit, held.other, derived, several)
        return (
            *_attribute_inputs(circuit, held.own, derived, several),
            *((key, lag + held.lag) for key, lag in other),
        )
    owner, column = attribute.table, attribute.source_column
    if any(t.name == owner for t in circuit.tables):
        key = f"{owner}.{column}"
        if not attribute.steps:
            return ((key, 0),)
        # S10: its own key, the steps of its source column's waterline.
        stepped = f"{key}{attribute.steps!r}"
        cut = 0 if several else len(owner) + 1  # a query of one table names its columns
        derived[stepped[cut:]] = (key[cut:], attribute.steps)
        return ((stepped, 0),)
    upstream = next(a for a in circuit.view(owner).time_attributes if a.column == column)
    if upstream == attribute:
        raise TidemarkError(f"view {owner}: time attribute {column} has no waterline source")
    return _attribute_inputs(circuit, upstream, derived, several)


def _time_key(circuit: Circuit, view: View, table: Table) -> str | None:
    """S14: the waterline key of the view's first time attribute (a table LATENESS column, or
    ``"<view>.<column>"`` for a view's own LATENESS), as the reference evaluator picks it."""
    found = _time_attribute_key(circuit, view, table)
    return None if found is None else found[0]


def _time_attribute_key(
    circuit: Circuit, view: View, table: Table
) -> tuple[str, TimeAttribute] | None:
    """:func:`_time_key` and the time attribute it is the key of."""
    for attr in view.time_attributes:
        if attribute_is_processing_time(circuit, attr):
            continue  # S14: a processing-time attribute publishes no waterline
        if attr.table == table.name:
            return attr.source_column, attr
        owner = circuit.view(attr.table) if attr.table in {v.name for v in circuit.views} else None
        if owner is not None and any(x.column == attr.source_column for x in owner.lateness):
            return waterline_key(owner.name, attr.source_column), attr
    return None


def _stage_punctuation(
    circuit: Circuit,
    view: View,
    table: Table,
    several: bool,
    merged: dict[str, tuple[WaterlineInput, ...]],
    derived: dict[str, DerivedInput],
) -> StagePunctuation:
    """The bounds a stage boundary ``view``'s punctuation carries: per LATENESS column of the
    tables that read it, the waterline of ``view``'s time attribute of that column in the
    query's map (a key of its own in ``merged`` or ``derived`` where it needs one)."""
    assert view.output is not None
    # Each stage that reads the boundary has a table of its own over the one topic, all
    # with the same LATENESS columns, each its lead first (app/program/stages.py).
    views = {v.name: v for v in circuit.views}
    punctuated = {attr.column: (attr, steps)
                  for reader in circuit.tables if reader.topic == view.output.topic
                  for attr, steps in punctuated_columns(views, view, reader)}
    columns = []
    for attr, steps in punctuated.values():
        found = None if several else _time_attribute_key(circuit, replace(
            view, time_attributes=(attr,)), table)
        if found is not None:
            key = found[0]
        else:
            keys = _in_query_map(_attribute_inputs(circuit, attr, derived, several), several)
            key = f"{view.name}.{attr.column}"
            if len(keys) == 1 and not keys[0][1]:
                key = keys[0][0]
            else:
                merged[key] = keys
        if steps:
            stepped = f"{view.name}.{attr.column}"
            derived[stepped] = (key, steps)
            key = stepped
        columns.append((attr.column, key))
    return StagePunctuation(view.name, view.output.topic, tuple(columns))


def _first_time_steps(
    circuit: Circuit, view: View, table: Table, several: bool
) -> tuple[WaterlineStep, ...]:
    """The steps of the time attribute whose waterline is the view's S14 waterline (the one
    :func:`_time_key` or :func:`waterline_inputs` picks): a derived attribute's, a
    ``window_start``'s window (S10); empty when it is its source column's."""
    if several or circuit.union_upstream(view.name) is not None:
        attr = _s14_attribute(circuit, view)
    else:
        found = _time_attribute_key(circuit, view, table)
        attr = None if found is None else found[1]
    if attr is None:
        return ()
    return attribute_steps({v.name: v for v in circuit.views}, view, attr)

