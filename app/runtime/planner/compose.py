"""Composition: which views run in a later query than the views they read (SPEC S19, ADR 0023).

One function decides whether and how a program runs on Spark, for ``tidemark run`` and
``tidemark explain`` alike (:func:`compose`). It starts with every relation in stage 0 (one
query per table, ADR 0002 and 0013) and asks the support pass
(:func:`~app.runtime.planner.support.refusals`) what one query cannot run. A refused view that reads
a relation of its own stage moves one stage on, with every view that reads it; the relations it now
reads from an earlier stage become stage boundaries, and the program is compiled again with them
(app/program/stages.py). It stops when nothing is refused, or when a refused view reads only earlier
stages: no boundary can help it, and its refusal is the program's; unless its query also reads
tables it does not read (an aggregate beside a join of other relations): then it moves on again, to
a query of its own. Each round moves at least one view, and none past as many stages as there are
views, so it ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from app.circuit.derived_time import group_completion
from app.circuit.ir import Aggregate, Circuit, ColumnRef, Diagnostic, View, Window
from app.errors import ProgramError
from app.program.compile import compile_text
from app.program.stages import DEFAULT_PREFIX, Composition, stage_input_name
from app.runtime.planner.physical import PhysicalPlan, physical_plan
from app.runtime.planner.support import refusals
from app.runtime.store import join, store_at

__all__ = ["PREFIX_FILE", "Composed", "compose", "read_stage_prefix", "stage_text"]

#: Where a checkpoint keeps the prefix of its internal topics.
PREFIX_FILE = "stage-prefix"


@dataclass(frozen=True)
class Composed:
    """The circuit Spark runs (the program's, with its stage boundaries), its physical plan,
    each relation's stage, and what stays refused (empty: the program runs)."""

    circuit: Circuit
    physical: PhysicalPlan
    composition: Composition
    refused: tuple[Diagnostic, ...]

    @property
    def boundaries(self) -> frozenset[str]:
        return self.composition.boundaries


def _original(circuit: Circuit, name: str) -> str:
    """The program's relation a view of the composed circuit computes (a twin computes its
    boundary's rows under another name)."""
    for table in circuit.tables:
        if table.stage_input is not None and table.name == name:
            return table.stage_input
    for view in circuit.views:
        if view.name == name and view.output is not None and view.output.stage_output:
            stage_of = [t.stage_input for t in circuit.tables
                        if t.stage_input is not None and t.topic == view.output.topic]
            return stage_of[0] if stage_of else name
    return name


def _carried(program: Circuit, circuit: Circuit) -> Circuit:
    """``circuit`` with the program's tables and outputs as given (``tidemark run`` completes
    their schema registry settings before planning): only boundaries differ."""
    tables = {t.name: t for t in program.tables}
    outputs = {v.name: v.output for v in program.views if v.output is not None}
    return replace(
        circuit,
        tables=tuple(tables.get(t.name, t) for t in circuit.tables),
        views=tuple(
            replace(v, output=outputs[v.name]) if v.name in outputs else v
            for v in circuit.views
        ),
    )


def _as_written(circuit: Circuit, problem: Diagnostic) -> Diagnostic:
    """A refusal in the program's names: a boundary's table by the relation it reads."""
    message, fix = problem.message, problem.fix
    for table in circuit.tables:
        if table.stage_input is not None:
            message = message.replace(table.name, table.stage_input)
            fix = fix.replace(table.name, table.stage_input) if fix is not None else None
    return replace(problem, message=message, fix=fix)


def _upstream_of(program: Circuit, name: str, readers: set[str]) -> bool:
    """Whether one of ``readers`` reads ``name``, directly or through other views."""
    for reader in readers:
        pending = list(program.view(reader).sources)
        while pending:
            source = pending.pop()
            if source == name:
                return True
            if source in {v.name for v in program.views}:
                pending.extend(program.view(source).sources)
    return False


def _tables_read(circuit: Circuit, view: str) -> set[str]:
    """The tables ``view`` reads, directly or through other views."""
    tables = {t.name for t in circuit.tables}
    read: set[str] = set()
    pending = [view]
    while pending:
        name = pending.pop()
        if name in tables:
            read.add(name)
        else:
            pending.extend(circuit.view(name).sources)
    return read


def _crowded(circuit: Circuit, physical: PhysicalPlan, view: str) -> bool:
    """Whether ``view``'s query reads a table ``view`` does not read: moved a stage on, it
    reads its boundaries through tables of its own, in a query of its own."""
    return not set(physical.query_of(view).tables) <= _tables_read(circuit, view)


def _crowding_readers(circuit: Circuit, physical: PhysicalPlan, view: str) -> set[str]:
    """The views of ``view``'s query that read ``view`` and a table it does not read (a join
    of it with another table): they bring that table into its query, so they move a stage
    on, not ``view``, which its query then reads alone."""
    own = _tables_read(circuit, view)
    return {
        _original(circuit, v.view)
        for v in physical.query_of(view).views
        if view in circuit.view(v.view).sources and not _tables_read(circuit, v.view) <= own
    }


def _leads(
    program: Circuit, stages: Mapping[str, int], boundaries: frozenset[str]
) -> dict[str, str]:
    """Per table a stage reads a boundary through, when the views of that stage that read
    it all window on, bound a join on, rank by the window end of, or group by a time key of
    one of its columns: that column, the table's first LATENESS column, which Spark's
    watermark follows."""
    used: dict[str, set[str]] = {}
    for view in program.views:
        join = view.join
        for relation in set(view.sources) & boundaries:
            later = stages.get(view.name, 0) - stages.get(relation, 0) - 1
            found = used.setdefault(stage_input_name(relation, later), set())
            found.update(op.time_column for op in view.operators if isinstance(op, Window))
            top_n = view.top_n
            if top_n is not None and not any(isinstance(op, Window) for op in view.operators):
                found.add(top_n.window_end)  # a Top-N of the rows as they are
            keyed = _time_key_column(program, view)
            if keyed is not None:
                found.add(keyed)
            if join is not None and join.bound is not None:
                found.update(column for side, column in (
                    (join.left, join.bound.left_column), (join.right, join.bound.right_column)
                ) if side.source == relation)
    return {table: columns.pop() for table, columns in used.items() if len(columns) == 1}


def _time_key_column(program: Circuit, view: View) -> str | None:
    """The column of ``view``'s input that its GROUP BY time key is (or is derived from:
    ``CEIL(c TO DAY)``), when that key, not a window, completes its groups (ADR 0021)."""
    completion = group_completion(program, view)
    if completion is None or completion.attribute.kind in ("window_start", "window_end"):
        return None
    derivation = completion.attribute.derivation
    if derivation is not None:
        return derivation.source.column
    aggregate = next(op for op in view.operators if isinstance(op, Aggregate))
    key = aggregate.keys[completion.key_index][1]
    return key.name if isinstance(key, ColumnRef) else None


def _boundaries(program: Circuit, stages: Mapping[str, int]) -> frozenset[str]:
    """The relations a view of a later stage reads."""
    return frozenset(
        source
        for view in program.views
        for source in view.sources
        if stages.get(source, 0) < stages.get(view.name, 0)
    )


def compose(program: Circuit, prefix: str = DEFAULT_PREFIX) -> Composed:
    """The stages ``program`` runs in on Spark, and what stays refused (see the module)."""
    stages: dict[str, int] = {}
    composition = Composition(prefix=prefix)
    circuit = program
    # Each round moves a view one stage on; no view needs more stages than there are views.
    for _ in range(len(program.views) * (len(program.views) + 1) + 1):
        physical = physical_plan(circuit)
        found = refusals(circuit, physical)
        if not found:
            return Composed(circuit, physical, composition, ())
        moved: set[str] = set()
        for refused, _problem in found:
            if refused is None:
                continue
            name = _original(circuit, refused)
            if name not in {v.name for v in program.views}:
                continue
            stage = stages.get(name, 0)
            crowding = _crowding_readers(circuit, physical, refused)
            if crowding:
                moved.update(crowding)
            elif any(stages.get(source, 0) >= stage for source in program.view(name).sources) or (
                stage < len(program.views) and _crowded(circuit, physical, refused)
            ):
                moved.add(name)
        # A refused view read by another refused view waits: moving the reader may take it
        # out of the query that refused it (a join's inputs, an aggregate beside a join).
        moved = {name for name in moved if not _upstream_of(program, name, moved - {name})}
        if not moved or not program.text or any(name is None for name, _ in found):
            # Refused: the program's own plan, with the refusals that no boundary lifts.
            kept = tuple(_as_written(circuit, p) for _, p in found)
            return Composed(program, physical_plan(program), Composition(prefix=prefix), kept)
        for name in moved:
            stages[name] = stages.get(name, 0) + 1
        for reader in program.views:  # in dependency order: a reader is never before its input
            floor = max((stages.get(s, 0) for s in reader.sources), default=0)
            if floor > stages.get(reader.name, 0):
                stages[reader.name] = floor
        boundaries = _boundaries(program, stages)
        composition = Composition(stages, boundaries, prefix,
                                  _leads(program, stages, boundaries))
        try:
            circuit = _carried(program, compile_text(program.program, program.text,
                                                     composition))
        except ProgramError:
            # A view that cannot read its input through a boundary: the refusals stand.
            kept = tuple(_as_written(circuit, p) for _, p in found)
            return Composed(program, physical_plan(program), Composition(prefix=prefix), kept)
    raise AssertionError("composition did not settle")  # each round moves a view: unreachable


def read_stage_prefix(checkpoint: str | Path) -> str:
    """The prefix of a checkpoint's internal topics, or the default for one that has none."""
    path = join(str(checkpoint), PREFIX_FILE)
    text = store_at(path).read_text(path)
    return text.strip() if text is not None else DEFAULT_PREFIX


def stage_text(composed: Composed) -> str:
    """``explain --physical``'s lines on the stage boundaries (ADR 0023), empty without."""
    if not composed.boundaries or composed.refused:
        return ""
    lines = ["", "stage boundaries (ADR 0023): each written to an internal topic and read by a",
             "later query, whose waterline follows the punctuations written after each step"]
    for table in composed.circuit.tables:
        if table.stage_input is not None:
            readers = [v.name for v in composed.circuit.views if table.name in v.sources]
            lines.append(f"  {table.stage_input} -> {table.topic} -> {', '.join(readers)}")
    return "\n".join(lines) + "\n"
