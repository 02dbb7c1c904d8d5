"""The reference evaluator: the oracle every runtime is compared against (ARCHITECTURE).

It runs a :class:`~app.circuit.ir.Circuit` step by step (SPEC S1) over explicit step inputs,
in plain Python, favouring obviousness over speed. Per step, in this order:

1. **Late gate per table** (S2-S7): NOT NULL violations are dead letters ``invalid``; rows
   too far ahead of the wall clock (``max_future``) are ``future``; the other rows form D(t)
   and move the waterlines (S3, late rows included, punctuations too); a row is ``late``
   (S5) on the first LATENESS column where it is below the waterline. Both rules are
   :mod:`app.circuit.waterline`'s, shared with the Spark runtime. Only accepted rows go on.
2. **Views in dependency order** (S8): each view turns its input's delta (a Z-set: rows with
   weight +1/-1) into its own delta through its operators in IR order. Aggregate views keep
   per-group accumulators; a view with its own LATENESS (L2, decoding case) runs a late gate on
   its rows. Readers of an ``EMIT AFTER WATERMARK`` aggregate get only its final rows, in the
   step that completes each group (S18). A UNION ALL view's delta is its branches' rows in
   arrival order; its time columns' waterline is the minimum of the branches' (S17). A JOIN
   view holds each side's rows until the other side's waterline passes their bound, emits
   each match when its second row arrives and an outer row once it is proven unmatched
   (S16); a temporal join holds its probe rows until the versioned table's waterline
   passes their time, then writes each with the version valid at it; a table keyed by its
   Kafka key, or a changelog table, also takes :class:`Deletion` records (tombstones, delete
   events), which end their key's last version for temporal joins; the view of a changelog
   table's latest row per key (ADR 0030) reads them too, as rows whose ``DELETION_COLUMN``
   is true; they reach no other view.
3. **Completeness, emission, state** (S11-S14): after all rows of the step are applied, each
   output view writes its records per its :class:`~app.circuit.ir.EmitPolicy` and format, and
   groups that are complete and fully written are freed.

The step-level choices SPEC leaves open are in docs/semantics.md; the Spark runtime must make
the same ones, since tests compare its records with :func:`evaluate`'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.circuit.aggregates import Accumulator, accumulator_for
from app.circuit.computed_columns import computed_values, null_message
from app.circuit.derived_time import monotone_steps
from app.circuit.ir import (
    DELETION_COLUMN,
    Aggregate,
    Circuit,
    Filter,
    Join,
    Operator,
    Over,
    Project,
    Table,
    TopN,
    UnionAll,
    View,
    Window,
)
from app.circuit.over import Held, OverPartition
from app.circuit.processing_time import (
    BATCH_TIME_COLUMN,
    attribute_is_processing_time,
    processing_time_columns,
    view_reads_now,
)
from app.circuit.ranking import ranked
from app.circuit.regular_join import Pair, add_weight, key_changes, key_content
from app.circuit.scalar import evaluate_expr, is_true
from app.circuit.waterline import (
    Waterlines,
    WaterlineStep,
    attribute_waterline,
    derived_waterline,
)
from app.circuit.windows import sessions, window_bounds

__all__ = [
    "DeadLetter",
    "Deletion",
    "OutputRecord",
    "Punctuation",
    "Reference",
    "StepInput",
    "StepResult",
    "evaluate",
]

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Punctuation:
    """SPEC S4: moves waterlines like a row with ``c = bound`` would, inserting no row.

    ``bound`` is in the column's unit (epoch ms for TIMESTAMP); ``column`` None targets every
    LATENESS column of the table.
    """

    bound: int
    column: str | None = None


@dataclass(frozen=True)
class Deletion:
    """The deletion of a key at its time (``Table.deletes_keys``): a tombstone of a table
    keyed by its Kafka key, whose ``row`` holds the record's metadata columns (the key, the
    timestamp, ...), or a delete event of a changelog table, whose ``row`` holds its key and
    time columns; the other columns are NULL. Gated like a row (S5, S7)."""

    row: Row


@dataclass(frozen=True)
class StepInput:
    """One step (S1): per table, the decoded rows (and :class:`Deletion` records) in arrival
    order, plus the step's clocks.

    ``batch_time_ms`` is the step's recorded batch time (changelog ``ptime``, AFTER DELAY,
    processing time: ``AS PROCTIME()`` columns, NOW() and windows on them);
    ``wall_clock_ms`` feeds the ``max_future`` guard of S7 (None: the guard is not applied).
    """

    rows: Mapping[str, Sequence[Row | Deletion]]
    batch_time_ms: int = 0
    wall_clock_ms: int | None = None
    punctuations: Mapping[str, Sequence[Punctuation]] = field(default_factory=dict)


@dataclass(frozen=True)
class DeadLetter:
    """A row kept out of every view (S6/S7): ``reason`` is 'late', 'invalid' or 'future'.

    For late rows ``column``/``value``/``waterline`` name the first late column in declaration
    order, its value and ``w_c(t-1)``.
    """

    table: str
    row: Row
    reason: str
    message: str
    column: str | None = None
    value: Any = None
    waterline: Any = None


@dataclass(frozen=True)
class OutputRecord:
    """One record written to an output view's topic (S13).

    ``key`` is None for append without a declared ``'key'``; ``value`` None is an upsert
    tombstone; changelog values carry ``undo``/``ptime``/``ver``. ``waterline`` is the view's
    S14 waterline after the step.
    """

    view: str
    topic: str
    key: Mapping[str, Any] | None
    value: Mapping[str, Any] | None
    waterline: int | None


@dataclass(frozen=True)
class StepResult:
    """Everything observable after one step.

    ``waterlines``: table (and view with its own LATENESS) -> column -> w(t), None = -inf.
    ``view_waterlines``: output view -> S14 waterline. ``outputs``: output views only.
    ``state_rows``: view -> groups held after the step (S11; 0 for stateless views).
    """

    waterlines: Mapping[str, Mapping[str, int | None]]
    view_waterlines: Mapping[str, int | None]
    dead_letters: tuple[DeadLetter, ...]
    outputs: Mapping[str, tuple[OutputRecord, ...]]
    state_rows: Mapping[str, int]


# ---------------------------------------------------------------------------------------------
# Time sources: which waterline closes which column (S10/S11/S14).


@dataclass(frozen=True)
class _TimeSource:
    """Column ``owner.column``'s waterline bounds this column; ``kind`` says how (S10)."""

    owner: str
    column: str
    kind: str  # 'forwarded' | 'window_start' | 'window_end' | 'derived'
    #: Of a derived column, a window start, or a window on one: the steps from
    #: ``owner.column``'s waterline to this column's, a window start's ending with its
    #: :class:`Window` (:func:`app.circuit.waterline.derived_waterline`).
    steps: tuple[WaterlineStep, ...] = ()
    #: Of a SESSION's ``window_end`` (or a column that carries one on): a session closes
    #: once the waterline passes its end, so a later one may end at the waterline itself.
    session: bool = False


def _project_sources(
    sources: Mapping[str, _TimeSource], outputs: Iterable[tuple[str, Any]]
) -> dict[str, _TimeSource]:
    """S10: the time sources of a projection's outputs: a column read verbatim keeps its
    source; a monotone expression of one time column is a derived one (app/circuit/
    derived_time.py); any other expression has none."""
    projected: dict[str, _TimeSource] = {}
    for name, expr in outputs:
        found = monotone_steps(expr)
        if found is None or found[0].name not in sources:
            continue
        source = sources[found[0].name]
        if found[1]:
            source = _TimeSource(
                source.owner, source.column, "derived", (*source.steps, *found[1])
            )
        projected[name] = source
    return projected


@dataclass
class _Change:
    """One element of a Z-set delta: a row with weight, plus where it came from.

    ``origin`` is the table row a stateless chain derived it from (for view-lateness dead
    letters, which carry the original row); ``seq`` orders rows for ARG_MAX/ARG_MIN ties.
    """

    row: dict[str, Any]
    weight: int
    seq: int
    origin: Row | None = None
    #: A :class:`Deletion` of the row's key (only temporal joins read one).
    deleted: bool = False


# ---------------------------------------------------------------------------------------------
# Views.


def _sort_key(key: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    """Group order within a step: by the key tuple, None first (S12)."""
    return tuple((value is not None, value) for value in key)


@dataclass
class _Group:
    """One GROUP BY group of an aggregate view and its emission bookkeeping."""

    key: tuple[Any, ...]
    accumulators: list[Accumulator]
    rows: int = 0
    current: dict[str, Any] | None = None  # final projected row, None = no row (S8)
    current_key: dict[str, Any] | None = None
    emitted: dict[str, Any] | None = None  # last value written (None: none or deleted)
    emitted_key: dict[str, Any] | None = None
    ver: int = 0
    pending_since_ms: int | None = None
    finalized: bool = False
    released: bool = False  # final row handed to readers (S18)


@dataclass
class _Held:
    """A row one side of a join keeps: the side's columns by qualified name, its bound time
    (None: no bound, or a NULL time), whether it has matched a row of the other side, and
    its weight (-1: a retraction an INNER join without a time bound holds beside the row it
    retracts, S18)."""

    row: dict[str, Any]
    time: int | None
    matched: bool = False
    weight: int = 1


def _arrivals(
    join: Join, deltas: Mapping[str, Sequence[_Change]], deleted: Sequence[_Change] = ()
) -> list[tuple[str, _Change]]:
    """The step's rows of both sides of ``join`` as (``"left"``/``"right"``, change), in
    arrival order (a left row before a right one of the same sequence number), with
    ``deleted``, the right side's deletions, among the right side's rows. Only a join
    without a time bound reads updating relations (the compiler's rule, S18), on
    :class:`_RegularRuntime`: a retraction reaching any other is a ValueError."""
    arrivals = sorted(
        [(c.seq, 0, "left", c) for c in deltas.get(join.left.source, ())]
        + [(c.seq, 1, "right", c) for c in [*deltas.get(join.right.source, ()), *deleted]],
        key=lambda item: (item[0], item[1]),
    )
    takes_changes = join.per_key
    for _, _, _, change in arrivals:
        if change.weight < 0 and not takes_changes:
            raise ValueError(
                f"a retraction reached the {join.form} join of {join.left.source} and "
                f"{join.right.source}; the compiler joins updating relations only in an "
                "join without a time bound"
            )
    return [(side, change) for _, _, side, change in arrivals]


class _JoinRuntime:
    """SPEC S16 for one :class:`~app.circuit.ir.Join`, step by step.

    Rows of both sides are taken in arrival order; each is matched against the rows the other
    side holds (so a pair is emitted when its second row arrives, once), then held. After the
    step's rows, a held row whose partners could only be rows below the other side's
    waterline is done: emitted padded with NULLs if it is on an outer side and never
    matched, then freed. Future rows of a side have time >= its waterline ``w`` (a
    TUMBLE, HOP or CUMULATE ``window_end`` > ``w``; a SESSION's >= ``w``:
    :func:`_source_floor`), so a left row at ``x`` is done once that floor exceeds
    ``x + upper``, a right row at ``y`` once the left floor exceeds ``y - lower``. It reads
    insert-only rows only (a join of an updating relation's changes is
    :class:`_RegularRuntime`'s).
    """

    def __init__(
        self, join: Join, relation_sources: Mapping[str, Mapping[str, _TimeSource]]
    ) -> None:
        self.join = join
        self.held: dict[str, list[_Held]] = {"left": [], "right": []}
        self.time_sources: dict[str, _TimeSource | None] = {"left": None, "right": None}
        if join.bound is not None:
            self.time_sources = {
                "left": relation_sources.get(join.left.source, {}).get(join.bound.left_column),
                "right": relation_sources.get(join.right.source, {}).get(join.bound.right_column),
            }

    def rows_held(self) -> int:
        return len(self.held["left"]) + len(self.held["right"])

    def _side_row(self, side: str, row: Row, weight: int) -> _Held:
        spec = self.join.left if side == "left" else self.join.right
        qualified = {spec.qualified(c): row.get(c) for c in spec.columns}
        time = None
        if self.join.bound is not None:
            column = self.join.bound.left_column if side == "left" else self.join.bound.right_column
            time = row.get(column)
        return _Held(qualified, time, weight=weight)

    def _matches(self, left: _Held, right: _Held) -> bool:
        for left_key, right_key in self.join.keys:
            value = evaluate_expr(left_key, left.row)
            if value is None or value != evaluate_expr(right_key, right.row):
                return False
        bound = self.join.bound
        if bound is not None:
            if left.time is None or right.time is None:
                return False
            if not left.time + bound.lower <= right.time <= left.time + bound.upper:
                return False
        residual = self.join.residual
        return residual is None or is_true(evaluate_expr(residual, {**left.row, **right.row}))

    def _padded(self, side: str, held: _Held) -> dict[str, Any]:
        other = self.join.right if side == "left" else self.join.left
        return {**held.row, **{other.qualified(c): None for c in other.columns}} if (
            side == "left") else {**{other.qualified(c): None for c in other.columns}, **held.row}

    def _outer(self, side: str) -> bool:
        return self.join.kind == "full" or self.join.kind == side

    def apply(
        self,
        deltas: Mapping[str, Sequence[_Change]],
        waterlines: _AllWaterlines,
        deletions: Mapping[str, Sequence[_Change]],
    ) -> list[tuple[dict[str, Any], int]]:
        """The joined rows of this step with their weights: matches in arrival order, then
        rows proven unmatched (left side first, each in arrival order). Deletions reach no
        interval or window join (a table stays insert-only for them)."""
        out: list[tuple[dict[str, Any], int]] = []
        for side, change in _arrivals(self.join, deltas):
            held = self._side_row(side, change.row, change.weight)
            other = "right" if side == "left" else "left"
            for candidate in self.held[other]:
                left, right = (held, candidate) if side == "left" else (candidate, held)
                if self._matches(left, right):
                    out.append(({**left.row, **right.row}, left.weight * right.weight))
                    held.matched = candidate.matched = True
            if self.join.bound is not None and held.time is None:
                # A NULL time is within no bound: nothing can ever match it.
                if self._outer(side) and not held.matched:
                    out.append((self._padded(side, held), 1))
                continue
            self.held[side].append(held)
        for side in ("left", "right"):
            kept: list[_Held] = []
            for held in self.held[side]:
                if not self._done(side, held, waterlines):
                    kept.append(held)
                elif self._outer(side) and not held.matched:
                    out.append((self._padded(side, held), 1))
            self.held[side] = kept
        return out

    def _floor(self, side: str, waterlines: _AllWaterlines) -> int | None:
        """The least time a future row of ``side`` can have at the bound column."""
        return _source_floor(self.time_sources[side], waterlines)

    def _done(self, side: str, held: _Held, waterlines: _AllWaterlines) -> bool:
        bound = self.join.bound
        if bound is None or held.time is None:
            return False
        other = "right" if side == "left" else "left"
        floor = self._floor(other, waterlines)
        if floor is None:
            return False
        if side == "left":
            return floor > held.time + bound.upper
        return floor > held.time - bound.lower


class _RegularRuntime:
    """SPEC S16, S18 for a :class:`~app.circuit.ir.Join` without a time bound that is OUTER
    or reads an updating relation (``per_key``), step by step: each side's rows per key as
    a Z-set, and per step the touched keys' content after less before
    (app/circuit/regular_join.py). A row is a tuple of its side's values in column order; a
    NULL key is a key of its own side alone."""

    def __init__(self, join: Join) -> None:
        self.join = join
        #: side -> key -> row -> weight (no zero weights, no empty key).
        self.held: dict[str, dict[Hashable, dict[tuple[Any, ...], int]]] = {
            "left": {}, "right": {}}

    def rows_held(self) -> int:
        return sum(len(rows) for side in self.held.values() for rows in side.values())

    def _key(self, side: str, row: Mapping[str, Any]) -> Hashable:
        spec = self.join.left if side == "left" else self.join.right
        scope = {spec.qualified(c): row.get(c) for c in spec.columns}
        values = tuple(evaluate_expr(pair[0 if side == "left" else 1], scope)
                       for pair in self.join.keys)
        # A NULL key matches nothing: its rows share a key the other side never has.
        return (side,) if any(v is None for v in values) else ("key", values)

    def _scope(self, side: str, row: tuple[Any, ...] | None) -> dict[str, Any]:
        spec = self.join.left if side == "left" else self.join.right
        values = row if row is not None else (None,) * len(spec.columns)
        return {spec.qualified(c): v for c, v in zip(spec.columns, values, strict=True)}

    def _matches(self, left: tuple[Any, ...], right: tuple[Any, ...]) -> bool:
        residual = self.join.residual
        return residual is None or is_true(evaluate_expr(
            residual, {**self._scope("left", left), **self._scope("right", right)}))

    def _content(self, key: Hashable) -> Counter[Pair[tuple[Any, ...], tuple[Any, ...]]]:
        return key_content(self.join.kind, self.held["left"].get(key, {}),
                           self.held["right"].get(key, {}), self._matches)

    def apply(
        self,
        deltas: Mapping[str, Sequence[_Change]],
        waterlines: _AllWaterlines,
        deletions: Mapping[str, Sequence[_Change]],
    ) -> list[tuple[dict[str, Any], int]]:
        """The step's changes of the joined rows: for each key the step touched (in the
        order of its first row), content after the step less before; retractions first."""
        before: dict[Hashable, Counter[Pair[tuple[Any, ...], tuple[Any, ...]]]] = {}
        for side, change in _arrivals(self.join, deltas):
            spec = self.join.left if side == "left" else self.join.right
            key = self._key(side, change.row)
            if key not in before:
                before[key] = self._content(key)
            rows = self.held[side].setdefault(key, {})
            add_weight(rows, tuple(change.row.get(c) for c in spec.columns), change.weight)
            if not rows:
                del self.held[side][key]
        changes = key_changes((was, self._content(key)) for key, was in before.items())
        return [({**self._scope("left", left), **self._scope("right", right)}, weight)
                for (left, right), weight in changes]


class _TemporalRuntime:
    """SPEC S16's temporal join (``right FOR SYSTEM_TIME AS OF left.t``, Flink's event-time
    temporal join) for one :class:`~app.circuit.ir.Join` with ``as_of``, step by step.

    Rows of the versioned side (``right``, a table with a PRIMARY KEY) are versions of their
    key at their time; a later row of a key at a time it already has replaces that version.
    A :class:`Deletion` (a tombstone, of a table keyed by its Kafka key) is a version with no
    row: a probe row it is valid for has no version. Probe rows (``left``) are held
    until the versions' waterline floor exceeds their time (no version at or below it can
    still come, S5), then matched with the version of their key with the greatest time at
    or below theirs and written once (insert-only), in arrival order; LEFT writes a row
    without one with NULLs, INNER drops it. Future lookups are at a held probe's time
    (above the versions' floor) or a future probe's (at or above the probe floor), so per
    key only the latest version at or below the lesser floor, and every later one, is kept.

    AS OF processing time (``version_column`` None, S13) a version's time is its step's
    batch time ``T`` and the versions' floor is ``T + 1`` (every later row has a larger
    one): a probe row, at ``T``, is written in its own step with the latest version of its
    key after the step's versions, and one version per key is kept.
    """

    def __init__(
        self, join: Join, relation_sources: Mapping[str, Mapping[str, _TimeSource]]
    ) -> None:
        assert join.as_of is not None
        self.join = join
        self.as_of = join.as_of
        probe_column = join.as_of.probe_column
        self.probe_source = (
            None if probe_column is None
            else relation_sources.get(join.left.source, {}).get(probe_column)
        )
        version_column = join.as_of.version_column
        self.version_source = (
            None if version_column is None
            else relation_sources.get(join.right.source, {}).get(version_column)
        )
        #: (time, probe row by qualified name), arrival order.
        self.held: list[tuple[int, dict[str, Any]]] = []
        #: key -> version time -> the version's row by qualified name (None: deleted)
        self.versions: dict[tuple[Any, ...], dict[int, dict[str, Any] | None]] = {}

    def rows_held(self) -> int:
        return len(self.held) + sum(len(times) for times in self.versions.values())

    def apply(
        self,
        deltas: Mapping[str, Sequence[_Change]],
        waterlines: _AllWaterlines,
        deletions: Mapping[str, Sequence[_Change]],
    ) -> list[dict[str, Any]]:
        """The joined rows of this step: every held probe row the versions' waterline now
        passes, in arrival order (rows of this step included, after all of its versions)."""
        join = self.join
        out: list[dict[str, Any]] = []
        batch_time = waterlines.batch_time_ms
        version_column = self.as_of.version_column
        for side, change in _arrivals(join, deltas, deletions.get(join.right.source, ())):
            spec = join.left if side == "left" else join.right
            row = {spec.qualified(c): change.row.get(c) for c in spec.columns}
            if side == "right":
                key = tuple(evaluate_expr(right, row) for _, right in join.keys)
                # AS OF processing time, a version's time is its step's batch time.
                time = batch_time if version_column is None else change.row.get(version_column)
                if time is not None:
                    self.versions.setdefault(key, {})[time] = None if change.deleted else row
            elif (at := self._probe_time(change, batch_time)) is None:
                # A NULL time is valid for no version: nothing can ever match it.
                if join.kind == "left":
                    out.append(self._padded(row))
            else:
                self.held.append((at, row))
        if version_column is None:
            # Every version at or below the step's batch time has come (S13).
            floor = None if batch_time is None else batch_time + 1
        else:
            floor = _source_floor(self.version_source, waterlines)
        if floor is not None:
            kept: list[tuple[int, dict[str, Any]]] = []
            for at, row in self.held:
                if at < floor:
                    joined = self._joined(at, row)
                    if joined is not None:
                        out.append(joined)
                else:
                    kept.append((at, row))
            self.held = kept
        probe_floor = (batch_time if self.as_of.probe_column is None
                       else _source_floor(self.probe_source, waterlines))
        self._free(floor, probe_floor)
        return out

    def _probe_time(self, change: _Change, batch_time: int | None) -> int | None:
        """A probe row's time: its AS OF column's, or, AS OF PROCTIME(), its step's."""
        column = self.as_of.probe_column
        return batch_time if column is None else change.row.get(column)

    def _joined(self, time: int, probe: dict[str, Any]) -> dict[str, Any] | None:
        """The probe row with its version, padded (LEFT) or None (INNER) without one."""
        join = self.join
        key = tuple(evaluate_expr(left, probe) for left, _ in join.keys)
        if all(value is not None for value in key):
            times = [t for t in self.versions.get(key, {}) if t <= time]
            version = self.versions[key][max(times)] if times else None
            if version is not None:
                joined = {**probe, **version}
                if join.residual is None or is_true(evaluate_expr(join.residual, joined)):
                    return joined
        return self._padded(probe) if join.kind == "left" else None

    def _padded(self, probe: dict[str, Any]) -> dict[str, Any]:
        return {**probe, **{self.join.right.qualified(c): None for c in self.join.right.columns}}

    def _free(self, version_floor: int | None, probe_floor: int | None) -> None:
        """Per key, drop the versions below the latest one at or below the least time a
        lookup can still have (None: -infinity, nothing is dropped); a key whose only
        version left is a deletion is dropped whole (no lookup finds a version of it)."""
        if version_floor is None or probe_floor is None:
            return
        least = min(version_floor, probe_floor)
        for key, times in list(self.versions.items()):
            below = [t for t in times if t <= least]
            latest = max(below, default=None)
            for t in below:
                if t != latest:
                    del times[t]
            if latest is not None and len(times) == 1 and times[latest] is None:
                del self.versions[key]


class _OverRuntime:
    """OVER aggregates (docs/semantics.md) for one :class:`~app.circuit.ir.Over`, step by
    step: each row is held in its partition (:class:`~app.circuit.over.OverPartition`)
    until the waterline of its time column passes it, then written once with its values;
    a step's rows are written in (time, arrival) order."""

    def __init__(self, over: Over) -> None:
        self.over = over
        self.source: _TimeSource | None = None  # the ORDER BY column's waterline
        self.parts: dict[tuple[Any, ...], OverPartition] = {}

    def rows_held(self) -> int:
        return sum(part.rows_held for part in self.parts.values())

    def apply(
        self, rows: Sequence[tuple[dict[str, Any], int]], waterlines: _AllWaterlines
    ) -> list[dict[str, Any]]:
        """Hold the step's ``rows`` (each with its arrival), then write every row the
        waterline now passes, with the Over's columns added."""
        over = self.over
        for row, seq in rows:
            key = tuple(evaluate_expr(expr, row) for expr in over.partition)
            args = tuple(
                tuple(evaluate_expr(arg, row) for arg in call.args) for _, call in over.aggregates
            )
            held = Held(row[over.order_column], seq, args, row)
            self.parts.setdefault(key, OverPartition()).add(held)
        source = self.source
        waterline = None if source is None else waterlines.get(source.owner, source.column)
        out: list[tuple[int, int, dict[str, Any]]] = []
        names = [name for name, _ in over.aggregates]
        for key in list(self.parts):
            part = self.parts[key]
            for row, values in part.release(over, waterline):
                written = {**row, **dict(zip(names, values, strict=True))}
                out.append((row[over.order_column], len(out), written))
            if part.empty:
                del self.parts[key]
        return [row for _, _, row in sorted(out, key=lambda item: item[:2])]


def _source_floor(source: _TimeSource | None, waterlines: _AllWaterlines) -> int | None:
    """The least time a future row can have at ``source``'s column (None: -infinity):
    its waterline, or one more for the ``window_end`` of a TUMBLE, HOP or CUMULATE, whose
    window is written once the waterline reaches its end (S5, S10). A SESSION is written
    once the waterline passes its end, so the next one may end at the waterline."""
    if source is None:
        return None
    waterline = waterlines.of(source)
    if waterline is None:
        return None
    return waterline + 1 if source.kind == "window_end" and not source.session else waterline


class _ViewRuntime:
    """One view: its operators split around the Aggregate, its groups and its own gate."""

    def __init__(
        self, view: View, relation_sources: Mapping[str, Mapping[str, _TimeSource]]
    ) -> None:
        self.view = view
        self.union = view.union
        #: Of a UNION ALL: union column -> each branch's time source at it (S17).
        self.merged: dict[str, list[_TimeSource]] = {}
        self.aggregate: Aggregate | None = None
        self.top_n: TopN | None = None
        #: Of a window Top-N: per partition, its best rows so far (at most ``limit``, or
        #: ``limit`` and the rows tied with the last for RANK), until its window completes.
        self.partitions: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self.top_n_source: _TimeSource | None = None  # its window end's waterline
        self.pre: list[Operator] = []
        self.post: list[Operator] = []
        join = view.join
        self.join: _JoinRuntime | _TemporalRuntime | _RegularRuntime | None = None
        over = view.over
        self.over = None if over is None else _OverRuntime(over)
        if join is not None and join.as_of is not None:
            self.join = _TemporalRuntime(join, relation_sources)
        elif join is not None and join.per_key:
            self.join = _RegularRuntime(join)
        elif join is not None:
            self.join = _JoinRuntime(join, relation_sources)
        #: Of a JOIN: output column -> (own side's source, other side's source, lag) (S16).
        self.held: dict[str, tuple[_TimeSource, _TimeSource, int]] = {}
        past_over = False  # the operators after an Over are its ``post``
        for op in view.operators:
            if isinstance(op, Join):
                continue
            if isinstance(op, Aggregate):
                self.aggregate = op
            elif isinstance(op, TopN):
                self.top_n = op
            elif isinstance(op, Over):
                past_over = True
            elif self.aggregate is None and self.top_n is None and not past_over:
                self.pre.append(op)
            else:
                self.post.append(op)
        self.groups: dict[tuple[Any, ...], _Group] = {}
        #: Of an updating aggregate (S18): the step's changes as its readers see them, each
        #: group's last written row retracted (-1) and its new one inserted (+1), in the order
        #: the view writes them; taken by :meth:`take_changes`.
        self.changes: list[tuple[dict[str, Any], int]] = []
        #: A SESSION window's (docs/semantics.md): per group of the window (the GROUP BY
        #: keys other than its columns), the rows not yet in a closed session, as (time,
        #: arrival, row after WHERE); a closed session's rows go to ``groups`` at once.
        self.session = next(
            (op for op in self.pre if isinstance(op, Window) and op.kind == "SESSION"), None
        )
        self.pending: dict[tuple[Any, ...], list[tuple[int, int, dict[str, Any]]]] = {}
        self.session_source: _TimeSource | None = None  # its time column's waterline
        self.gate = (
            Waterlines([(vl.column, vl.amount) for vl in view.lateness]) if view.lateness else None
        )
        self.started = False
        self.completion: tuple[int, _TimeSource] | None = None  # (key index, window source)
        #: Processing time (NOW()): the batch time of the step being evaluated, which the
        #: view's expressions read from the row's batch-time column.
        self.reads_now = view_reads_now(view)
        self.batch_time_ms = 0
        if self.union is not None:
            self.sources = self._analyse_union(self.union, relation_sources)
        elif join is not None:
            self.sources = self._analyse_join(join, relation_sources)
        else:
            self.sources = self._analyse(
                self.view.operators, relation_sources.get(view.source, {})
            )

    def _analyse_union(
        self, union: UnionAll, relation_sources: Mapping[str, Mapping[str, _TimeSource]]
    ) -> dict[str, _TimeSource]:
        """S17: a union column is a time attribute as the compiler decided (every branch has
        one there); its waterline is the minimum of the branches' sources, read through the
        union view's own name (see :class:`_AllWaterlines`)."""
        per_branch = [
            self._analyse(branch.operators, relation_sources.get(branch.source, {}))
            for branch in union.branches
        ]
        sources: dict[str, _TimeSource] = {}
        for attr in self.view.time_attributes:
            found = [branch.get(attr.column) for branch in per_branch]
            if any(source is None for source in found):
                continue
            self.merged[attr.column] = [source for source in found if source is not None]
            sources[attr.column] = _TimeSource(
                self.view.name, attr.column, attr.kind,
                session=any(source.session for source in found if source is not None),
            )
        return sources

    def _analyse_join(
        self, join: Join, relation_sources: Mapping[str, Mapping[str, _TimeSource]]
    ) -> dict[str, _TimeSource]:
        """S16: a join output column is a time attribute as the compiler decided; its
        waterline is its own side's, held back by the other side's (see
        :class:`~app.circuit.ir.JoinTime`), read through the join view's own name."""
        sources: dict[str, _TimeSource] = {}
        for attr in self.view.time_attributes:
            held = attr.join
            if held is None:
                continue
            own_side, other_side = (
                (join.left, join.right) if held.side == "left" else (join.right, join.left)
            )
            own = relation_sources.get(own_side.source, {}).get(held.own.column)
            other = relation_sources.get(other_side.source, {}).get(held.other.column)
            if own is None or other is None:
                continue
            window = own.steps[-1] if own.steps else None
            if attr.kind == "window_start" and join.as_of is None and isinstance(window, Window):
                # S10: a window join's match found later is of a window ending after the
                # bound of both sides, so its start is at least that window's start
                # waterline over the bound: the window's step comes after the hold-back.
                own = replace(own, kind="window_end", steps=own.steps[:-1])
                self.held[attr.column] = (own, other, held.lag)
                sources[attr.column] = _TimeSource(
                    self.view.name, attr.column, attr.kind, (window,)
                )
                continue
            self.held[attr.column] = (own, other, held.lag)
            sources[attr.column] = _TimeSource(self.view.name, attr.column, attr.kind,
                                               session=own.session)
        return sources

    def state_rows(self) -> int:
        """S11/S16: the groups (and a SESSION window's rows not yet in a closed session),
        or a join's rows, held after the step."""
        if self.join is not None:
            return self.join.rows_held()
        if self.top_n is not None:
            return sum(len(rows) for rows in self.partitions.values())
        if self.over is not None:
            return self.over.rows_held()
        return len(self.groups) + sum(len(rows) for rows in self.pending.values())

    def _analyse(
        self, operators: Sequence[Operator], input_sources: Mapping[str, _TimeSource]
    ) -> dict[str, _TimeSource]:
        """Follow time attributes through the operators (S10); find the window key (S11)."""
        sources = dict(input_sources)
        for op in operators:
            if isinstance(op, Window):
                base = sources.get(op.time_column)
                if op.kind == "SESSION":
                    self.session_source = base
                if base is not None:
                    # S10: w(window_end) = w(c); w(window_start) is the smallest start of a
                    # window a row at or above w(c) can still fall in.
                    sources["window_start"] = _TimeSource(
                        base.owner, base.column, "window_start", (*base.steps, op)
                    )
                    sources["window_end"] = _TimeSource(
                        base.owner, base.column, "window_end", base.steps,
                        session=op.kind == "SESSION",
                    )
                    if op.kind == "SESSION":
                        # A session open long ago may still close: its start is no bound.
                        del sources["window_start"]
                else:
                    sources.pop("window_start", None)
                    sources.pop("window_end", None)
            elif isinstance(op, Project):
                sources = _project_sources(sources, op.outputs)
            elif isinstance(op, Over) and self.over is not None:
                # Rows are written once w(order column) passes them: below the waterlines
                # of any other time column, which so stops being a time attribute (S10).
                self.over.source = sources.get(op.order_column)
                sources = {k: v for k, v in sources.items() if k == op.order_column}
            elif isinstance(op, Aggregate):
                keyed = _project_sources(sources, op.keys)
                # A window_end key first: a CUMULATE's windows of one start differ in it
                # only; then window_start; then any other time attribute key (S11).
                for wanted in ("window_end", "window_start", None):
                    for index, (name, _) in enumerate(op.keys):
                        found = keyed.get(name)
                        if found is None or self.completion is not None:
                            continue
                        if found.kind == wanted or (
                            wanted is None and found.kind not in ("window_end", "window_start")
                        ):
                            self.completion = (index, found)
                sources = keyed
            elif isinstance(op, TopN):
                # Rows are written once their window is complete: only the window columns
                # keep a waterline (a row time of a written row may be below it).
                self.top_n_source = sources.get(op.window_end)
                sources = {
                    name: found
                    for name, found in sources.items()
                    if found.kind in ("window_start", "window_end")
                }
        for vl in self.view.lateness:
            sources[vl.column] = _TimeSource(self.view.name, vl.column, "forwarded")
        return sources

    # -- rows --------------------------------------------------------------------------------

    def _scope(self, row: Mapping[str, Any]) -> Mapping[str, Any]:
        """What the view's expressions read of ``row``: with NOW() in the view, the row and
        the step's batch time."""
        return {**row, BATCH_TIME_COLUMN: self.batch_time_ms} if self.reads_now else row

    def _stateless(self, ops: Sequence[Operator], row: dict[str, Any]) -> list[dict[str, Any]]:
        rows = [row]
        for op in ops:
            if isinstance(op, Filter):
                rows = [r for r in rows if is_true(evaluate_expr(op.predicate, self._scope(r)))]
            elif isinstance(op, Project):
                rows = [
                    {name: evaluate_expr(expr, scope) for name, expr in op.outputs}
                    for r in rows
                    for scope in (self._scope(r),)
                ]
            elif isinstance(op, Window) and op.kind == "SESSION":
                continue  # a session is known only once closed (_closed_sessions)
            elif isinstance(op, Window):
                expanded: list[dict[str, Any]] = []
                for r in rows:
                    c = r.get(op.time_column)
                    if c is None:
                        continue  # a NULL time is in no window
                    for start, end in window_bounds(op.kind, c, op.size, op.slide, op.offset):
                        expanded.append({**r, "window_start": start, "window_end": end})
                rows = expanded
            else:
                raise TypeError(f"operator {type(op).__name__} cannot run row by row")
        return rows

    def _joined(
        self,
        deltas: Mapping[str, Sequence[_Change]],
        waterlines: _AllWaterlines,
        deletions: Mapping[str, Sequence[_Change]],
    ) -> list[tuple[dict[str, Any], int]]:
        """The join's rows of this step with their weights (a temporal join's are
        insertions: it reads insert-only probe rows)."""
        join = self.join
        assert join is not None
        if isinstance(join, _TemporalRuntime):
            return [(row, 1) for row in join.apply(deltas, waterlines, deletions)]
        return join.apply(deltas, waterlines, deletions)

    def _shape(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row as the view's declared columns, in declared order (S13 values)."""
        names = [c.name for c in self.view.columns]
        if names and all(n in row for n in names):
            return {n: row[n] for n in names}
        return row

    def apply(
        self,
        deltas: Mapping[str, Sequence[_Change]],
        next_seq: _Sequence,
        waterlines: _AllWaterlines | None = None,
        deletions: Mapping[str, Sequence[_Change]] | None = None,
    ) -> list[_Change]:
        """This step's delta of the view's relation from its inputs' deltas (S8); a
        temporal join also reads its versioned table's ``deletions``."""
        if self.join is not None:
            assert waterlines is not None, "a join needs the step's waterlines (S16)"
            return [
                _Change(self._shape(row), weight, next_seq())
                for joined, weight in self._joined(deltas, waterlines, deletions or {})
                for row in self._stateless(self.pre, joined)
            ]
        if self.union is not None:
            # S17: every branch's rows, in arrival order (a row's seq is fixed where it was
            # accepted or released); a stable sort keeps branch order for one row read by
            # two branches.
            merged = [
                _Change(self._shape(row), change.weight, change.seq, change.origin)
                for branch in self.union.branches
                for change in deltas.get(branch.source, ())
                for row in self._stateless(branch.operators, dict(change.row))
            ]
            return sorted(merged, key=lambda change: change.seq)
        delta = deltas.get(self.view.source, ())
        if self.view.reads_deletions:
            # A changelog table's latest row per key (ADR 0030): its rows and deletions in
            # arrival order, each saying which it is.
            delta = sorted(
                (
                    _Change({**change.row, DELETION_COLUMN: change.deleted}, 1, change.seq,
                            change.origin)
                    for change in [*delta, *(deletions or {}).get(self.view.source, ())]
                ),
                key=lambda change: change.seq,
            )
        if self.top_n is not None:
            assert waterlines is not None, "a window Top-N needs the step's waterlines"
            return self._apply_top_n(self.top_n, delta, waterlines, next_seq)
        if self.over is not None:
            assert waterlines is not None, "OVER aggregates need the step's waterlines"
            held = [
                (row, change.seq)
                for change in delta
                for row in self._stateless(self.pre, dict(change.row))
                if change.weight > 0  # the compiler reads insert-only relations only
            ]
            return [
                _Change(self._shape(final), 1, next_seq())
                for row in self.over.apply(held, waterlines)
                for final in self._stateless(self.post, row)
            ]
        if self.aggregate is None:
            out = [
                _Change(self._shape(row), change.weight, change.seq, change.origin)
                for change in delta
                for row in self._stateless(self.pre, dict(change.row))
            ]
            return out
        rows = [
            (row, change.seq, change.weight)
            for change in delta
            for row in self._stateless(self.pre, dict(change.row))
        ]
        if self.session is not None:
            assert waterlines is not None, "a SESSION window needs the step's waterlines"
            rows = self._closed_sessions(self.session, self.aggregate, rows, waterlines)
        return self._apply_aggregate(self.aggregate, rows, next_seq)

    def _apply_top_n(
        self,
        top_n: TopN,
        delta: Sequence[_Change],
        waterlines: _AllWaterlines,
        next_seq: _Sequence,
    ) -> list[_Change]:
        """Hold each partition's best rows; write the ranked rows of every partition whose
        window this step completes (``w(window_end) >= window_end``, S11), partitions in
        key order, each best first, and free them (S12: once, final)."""
        for change in delta:
            if change.weight < 0:
                raise ValueError("a retraction reached a window Top-N; the compiler only "
                                 "ranks insert-only relations")
            for row in self._stateless(self.pre, dict(change.row)):
                key = tuple(evaluate_expr(expr, row) for expr in top_n.partition)
                held = self.partitions.setdefault(key, [])
                held.append(row)
                held[:] = [dict(kept) for _, kept in ranked(top_n, held)]
        source = self.top_n_source
        waterline = None if source is None else waterlines.get(source.owner, source.column)
        out: list[_Change] = []
        for key in sorted(self.partitions, key=_sort_key):
            rows = self.partitions[key]
            end = rows[0].get(top_n.window_end) if rows else None
            if waterline is None or end is None or waterline < end:
                continue
            del self.partitions[key]
            for rank, best in ranked(top_n, rows):
                numbered = {**best, top_n.rank_column: rank}
                for result in self._stateless(self.post, numbered):
                    out.append(_Change(self._shape(result), 1, next_seq()))
        return out

    def _closed_sessions(
        self,
        window: Window,
        aggregate: Aggregate,
        rows: Sequence[tuple[dict[str, Any], int, int]],
        waterlines: _AllWaterlines,
    ) -> list[tuple[dict[str, Any], int, int]]:
        """The rows of every session the waterline of the window's time column closes this
        step (``w > last + gap``: a future row is at or above w, too far to join it), with
        its ``window_start``/``window_end``; the others wait in ``pending``. The sessions of
        a group are its rows' times split where two neighbours are more than ``gap`` apart."""
        others = [expr for name, expr in aggregate.keys if name not in ("window_start",
                                                                      "window_end")]
        for row, seq, weight in rows:
            if weight < 0:
                raise ValueError(f"view {self.view.name}: a SESSION window reads insert-only rows")
            group = tuple(evaluate_expr(expr, row) for expr in others)
            self.pending.setdefault(group, []).append((row[window.time_column], seq, row))
        source = self.session_source
        waterline = None if source is None else waterlines.of(source)
        closed: list[tuple[dict[str, Any], int, int]] = []
        if waterline is None:
            return closed
        for group in sorted(self.pending, key=_sort_key):
            held = sorted(self.pending[group], key=lambda item: (item[0], item[1]))
            kept: list[tuple[int, int, dict[str, Any]]] = []
            index = 0
            for start, end, count in sessions([t for t, _, _ in held], window.size):
                members = held[index:index + count]
                index += count
                if waterline > end:
                    closed.extend(
                        ({**row, "window_start": start, "window_end": end}, seq, 1)
                        for _, seq, row in sorted(members, key=lambda item: item[1])
                    )
                else:
                    kept.extend(members)
            if kept:
                self.pending[group] = kept
            else:
                del self.pending[group]
        return closed

    def _apply_aggregate(
        self,
        aggregate: Aggregate,
        rows: Sequence[tuple[dict[str, Any], int, int]],
        next_seq: _Sequence,
    ) -> list[_Change]:
        """Apply the step's rows (each after the operators before the aggregate, with its
        arrival and weight) to their groups; the groups' changes."""
        touched: set[tuple[Any, ...]] = set()
        if not self.started and not aggregate.keys:
            touched.add(())  # a global aggregate has its one row from the start (SQL)
        self.started = True
        before: dict[tuple[Any, ...], dict[str, Any] | None] = {}
        for row, seq, weight in rows:
            row = dict(self._scope(row))
            key = tuple(evaluate_expr(expr, row) for _, expr in aggregate.keys)
            group = self.groups.get(key)
            if group is None:
                group = _Group(key, [accumulator_for(call) for _, call in aggregate.aggregates])
                self.groups[key] = group
            if key not in before:
                before[key] = group.current
            group.rows += weight
            for (_, call), accumulator in zip(
                aggregate.aggregates, group.accumulators, strict=True
            ):
                args = tuple(evaluate_expr(arg, row) for arg in call.args)
                accumulator.add(args, seq, weight)
            touched.add(key)
        out: list[_Change] = []
        for key in sorted(touched, key=_sort_key):
            group = self.groups.get(key)
            if group is None:
                group = _Group(key, [accumulator_for(call) for _, call in aggregate.aggregates])
                self.groups[key] = group
            old = before.get(key, group.current)
            self._recompute(aggregate, group)
            if group.current != old:
                if old is not None:
                    out.append(_Change(dict(old), -1, next_seq()))
                if group.current is not None:
                    out.append(_Change(dict(group.current), 1, next_seq()))
        return out

    def _recompute(self, aggregate: Aggregate, group: _Group) -> None:
        if group.rows <= 0 and aggregate.keys:
            group.current, group.current_key = None, None  # an empty group has no row
            return
        names = [name for name, _ in aggregate.keys]
        row: dict[str, Any] = dict(zip(names, group.key, strict=True))
        for (name, _), accumulator in zip(aggregate.aggregates, group.accumulators, strict=True):
            row[name] = accumulator.result()
        finals = self._stateless(self.post, row)
        if not finals:
            group.current, group.current_key = None, None  # fails HAVING
            return
        group.current = self._shape(finals[0])
        group.current_key = self._key_of({**row, **finals[0]})

    def _key_of(self, row: Mapping[str, Any]) -> dict[str, Any] | None:
        output = self.view.output
        columns = output.key_columns if output is not None else self.view.key
        if not columns:
            return None
        return {name: row.get(name) for name in columns}

    # -- completeness and emission (S11-S13) --------------------------------------------------

    def window_end(self, group: _Group) -> int | None:
        """S11: the group is complete once its key column's waterline reaches this: its
        ``window_end``, or, for any other time attribute key of value ``d`` (a
        ``window_start`` too, whose waterline is S10's), ``d + 1`` (no accepted row is below
        the waterline, so none has ``d`` once ``w > d``)."""
        if self.completion is None:
            return None
        index, source = self.completion
        value = group.key[index]
        if value is None:
            return None
        if source.kind == "window_end":
            return int(value)
        return int(value) + 1

    def complete(self, group: _Group, waterlines: _AllWaterlines) -> bool:
        """S11: the group's window is closed once ``w(t) >= window_end``; a SESSION
        window's groups hold closed sessions only."""
        if self.session is not None:
            return True
        end = self.window_end(group)
        if end is None or self.completion is None:
            return False
        waterline = waterlines.of(self.completion[1])
        return waterline is not None and waterline >= end

    def released(self, waterlines: _AllWaterlines, next_seq: _Sequence) -> list[_Change]:
        """S18: what readers of an AFTER WATERMARK view see in this step.

        Each group's final row once, in the step whose waterline completes it (the step the
        view's own output writes it), in key order; never a provisional value or a
        retraction. The waterlines are already the step's: every table is gated, and every
        view this one reads is evaluated, before this view's rows are applied.
        """
        out: list[_Change] = []
        for key in sorted(self.groups, key=_sort_key):
            group = self.groups[key]
            if group.released or not self.complete(group, waterlines):
                continue
            group.released = True
            if group.current is not None:
                out.append(_Change(dict(group.current), 1, next_seq()))
        return out

    def emit(
        self, waterlines: _AllWaterlines, batch_time_ms: int, view_waterline: int | None
    ) -> list[OutputRecord]:
        """Write this step's records per EmitPolicy and format, then free closed groups."""
        records: list[OutputRecord] = []
        # A local view that writes nothing still moves its groups on when it updates:
        # its readers see those changes (S18).
        emitting = self.view.output is not None or not self.view.emit.after_watermark
        for key in sorted(self.groups, key=_sort_key):
            group = self.groups[key]
            complete = self.complete(group, waterlines)
            if emitting:
                records.extend(
                    self._group_records(group, complete, batch_time_ms, view_waterline)
                )
            held = group.pending_since_ms is not None and not group.finalized
            if held:
                continue
            if complete or (group.rows <= 0 and group.current is None and group.emitted is None):
                del self.groups[key]
        return records

    def _group_records(
        self, group: _Group, complete: bool, batch_time_ms: int, waterline: int | None
    ) -> list[OutputRecord]:
        emit = self.view.emit
        if group.finalized:
            return []
        if emit.after_watermark and emit.delay_ms is None:
            if not complete:
                return []
            group.finalized = True
            if group.current is None:
                return []
            return self._records(group, batch_time_ms, waterline)
        changed = group.current != group.emitted
        if emit.delay_ms is not None:
            if changed and group.pending_since_ms is None:
                group.pending_since_ms = batch_time_ms
            due = (
                group.pending_since_ms is not None
                and batch_time_ms >= group.pending_since_ms + emit.delay_ms
            )
            final = emit.after_watermark and complete
            if final:
                group.finalized = True
            if not (due or final):
                return []
            group.pending_since_ms = None
        if not changed:
            return []
        return self._records(group, batch_time_ms, waterline)

    def _records(
        self, group: _Group, batch_time_ms: int, waterline: int | None
    ) -> list[OutputRecord]:
        """Records taking the group from ``emitted`` to ``current`` (S13 encodings), and the
        same step as readers see it (:attr:`changes`)."""
        if group.emitted is not None:
            self.changes.append((dict(group.emitted), -1))
        if group.current is not None:
            self.changes.append((dict(group.current), 1))
        output = self.view.output
        records: list[OutputRecord] = []
        if output is None:
            group.emitted, group.emitted_key = group.current, group.current_key
            return records
        fmt = output.format

        def record(key: Mapping[str, Any] | None, value: Mapping[str, Any] | None) -> None:
            records.append(OutputRecord(self.view.name, output.topic, key, value, waterline))

        if fmt == "changelog":
            if group.emitted is not None:
                undo = self._changelog(group, group.emitted, True, batch_time_ms)
                record(group.emitted_key, undo)
            if group.current is not None:
                new = self._changelog(group, group.current, False, batch_time_ms)
                record(group.current_key, new)
        elif fmt == "upsert":
            if group.current is not None:
                record(group.current_key, dict(group.current))
            elif group.emitted is not None:
                record(group.emitted_key, None)
        elif group.current is not None:  # append: the view's declared 'key', else null
            record(group.current_key, dict(group.current))
        group.emitted, group.emitted_key = group.current, group.current_key
        return records

    def take_changes(self, next_seq: _Sequence) -> list[_Change]:
        """S18: what readers of an updating aggregate see in this step: every change
        :meth:`emit` wrote, a retraction before the insertion that replaces it."""
        taken = [_Change(row, weight, next_seq()) for row, weight in self.changes]
        self.changes = []
        return taken

    def _changelog(
        self, group: _Group, row: Mapping[str, Any], undo: bool, batch_time_ms: int
    ) -> dict[str, Any]:
        value = {**row, "undo": undo, "ptime": batch_time_ms, "ver": group.ver}
        group.ver += 1
        return value

    def stateless_records(
        self, delta: Sequence[_Change], batch_time_ms: int, waterline: int | None
    ) -> list[OutputRecord]:
        """S12 for a view without aggregate: each accepted row that passes is one record."""
        output = self.view.output
        assert output is not None
        records = []
        for change in delta:
            key = self._key_of(change.row)
            value: dict[str, Any] | None = dict(change.row)
            if output.format == "changelog":
                value = {**change.row, "undo": change.weight < 0, "ptime": batch_time_ms, "ver": 0}
            elif output.format == "upsert" and change.weight < 0:
                value = None
            elif output.format == "append":
                if change.weight < 0:
                    continue  # the compiler only allows append for insert-only views (L6)
            records.append(OutputRecord(self.view.name, output.topic, key, value, waterline))
        return records


class _Sequence:
    """Arrival sequence numbers: steps in order, rows in order (ARG_MAX/ARG_MIN ties)."""

    def __init__(self) -> None:
        self.value = 0

    def __call__(self) -> int:
        self.value += 1
        return self.value


class _AllWaterlines:
    """All waterlines: tables' LATENESS columns, views' own LATENESS columns, UNION ALL
    columns, whose waterline is the minimum of their branches' (S17), and JOIN output
    columns, held back by the other side (S16; None = -infinity)."""

    def __init__(self, gates: Mapping[str, Waterlines]) -> None:
        self.gates = gates
        self.merged: dict[tuple[str, str], list[_TimeSource]] = {}
        self.held: dict[tuple[str, str], tuple[_TimeSource, _TimeSource, int]] = {}
        #: The tables' ``AS PROCTIME()`` columns, whose waterline is the current step's
        #: batch time (every later row has a larger one); None before the first step.
        self.processing: set[tuple[str, str]] = set()
        self.batch_time_ms: int | None = None

    def get(self, owner: str, column: str) -> int | None:
        if (owner, column) in self.processing:
            return self.batch_time_ms
        held = self.held.get((owner, column))
        if held is not None:
            # S16: min(w(own), w(other) - lag); -infinity while either is.
            own_source, other_source, lag = held
            own = self.of(own_source)
            other = self.of(other_source)
            return None if own is None or other is None else min(own, other - lag)
        inputs = self.merged.get((owner, column))
        if inputs is not None:
            values = [self.of(source) for source in inputs]
            present = [value for value in values if value is not None]
            return min(present) if present and len(present) == len(values) else None
        gate = self.gates.get(owner)
        return None if gate is None else gate.values.get(column)

    def of(self, source: _TimeSource) -> int | None:
        """The waterline of the column ``source`` describes: its owner column's, through the
        steps of a derived column (S10)."""
        return derived_waterline(source.steps, self.get(source.owner, source.column))


# ---------------------------------------------------------------------------------------------
# The evaluator.


def _table_gate(table: Table) -> Waterlines:
    order = {col.name: index for index, col in enumerate(table.columns)}
    columns = sorted(((lt.column, lt.amount) for lt in table.lateness), key=lambda c: order[c[0]])
    return Waterlines(columns)


class Reference:
    """Incremental evaluation of one circuit, one :meth:`step` at a time (like Beam's
    TestStream: feed a step of rows, then assert on the :class:`StepResult`)."""

    def __init__(self, circuit: Circuit) -> None:
        self.circuit = circuit
        self.gates: dict[str, Waterlines] = {t.name: _table_gate(t) for t in circuit.tables}
        self.waterlines = _AllWaterlines(self.gates)
        self.next_seq = _Sequence()
        sources: dict[str, dict[str, _TimeSource]] = {
            t.name: {
                name: _TimeSource(t.name, name, "forwarded")
                for name in [*(lt.column for lt in t.lateness), *processing_time_columns(t)]
            }
            for t in circuit.tables
        }
        for table in circuit.tables:
            self.waterlines.processing.update(
                (table.name, name) for name in processing_time_columns(table)
            )
        self.views: dict[str, _ViewRuntime] = {}
        for view in circuit.views:
            runtime = _ViewRuntime(view, sources)
            self.views[view.name] = runtime
            # The time attributes its readers see (S10): none of a view that holds its changes.
            sources[view.name] = {} if view.holds_changes else runtime.sources
            for column, merged in runtime.merged.items():
                self.waterlines.merged[(view.name, column)] = merged
            for column, held in runtime.held.items():
                self.waterlines.held[(view.name, column)] = held
            if runtime.gate is not None:
                self.gates[view.name] = runtime.gate

    def step(self, step: StepInput) -> StepResult:
        """Run one step (S1): gate every table, update every view, emit, free state."""
        self._check(step)
        self.waterlines.batch_time_ms = step.batch_time_ms
        for runtime in self.views.values():
            runtime.batch_time_ms = step.batch_time_ms
        dead: list[DeadLetter] = []
        deltas: dict[str, list[_Change]] = {}
        deletions: dict[str, list[_Change]] = {}
        emitted: dict[str, list[OutputRecord]] = {}
        for table in self.circuit.tables:
            accepted = self._gate_table(table, step, dead)
            deltas[table.name] = [c for c in accepted if not c.deleted]
            deletions[table.name] = [c for c in accepted if c.deleted]
        for view in self.circuit.views:
            runtime = self.views[view.name]
            delta = runtime.apply(deltas, self.next_seq, self.waterlines, deletions)
            if runtime.gate is not None:
                delta = self._gate_view(runtime, runtime.gate, delta, dead)
            if runtime.aggregate is not None and view.emit.after_watermark:
                delta = runtime.released(self.waterlines, self.next_seq)
            elif runtime.aggregate is not None:
                # S18: an updating aggregate writes its step now, so that its readers see
                # the changes it writes, retractions included.
                emitted[view.name] = runtime.emit(self.waterlines, step.batch_time_ms,
                                                  self._view_waterline(runtime))
                delta = runtime.take_changes(self.next_seq)
            deltas[view.name] = delta

        outputs: dict[str, tuple[OutputRecord, ...]] = {}
        view_waterlines: dict[str, int | None] = {}
        for view in self.circuit.views:
            runtime = self.views[view.name]
            waterline = self._view_waterline(runtime)
            if view.output is not None:
                view_waterlines[view.name] = waterline
            if runtime.aggregate is None:
                if view.output is not None:
                    outputs[view.name] = tuple(
                        runtime.stateless_records(deltas[view.name], step.batch_time_ms, waterline)
                    )
            else:
                records = emitted.get(view.name)
                if records is None:
                    records = runtime.emit(self.waterlines, step.batch_time_ms, waterline)
                if view.output is not None:
                    outputs[view.name] = tuple(records)
        return StepResult(
            waterlines={name: dict(gate.values) for name, gate in self.gates.items()},
            view_waterlines=view_waterlines,
            dead_letters=tuple(dead),
            outputs=outputs,
            state_rows={name: rt.state_rows() for name, rt in self.views.items()},
        )

    def _check(self, step: StepInput) -> None:
        """A step naming an unknown table or column is a mistake in the test, never ignored."""
        tables = {t.name: t for t in self.circuit.tables}
        for name in [*step.rows, *step.punctuations]:
            if name not in tables:
                raise ValueError(f"step names table {name!r}, not in the program {sorted(tables)}")
        for name, marks in step.punctuations.items():
            columns = {lt.column for lt in tables[name].lateness}
            for mark in marks:
                if mark.column is not None and mark.column not in columns:
                    raise ValueError(
                        f"punctuation targets {name}.{mark.column}, which has no LATENESS"
                    )

    def _gate_table(self, table: Table, step: StepInput, dead: list[DeadLetter]) -> list[_Change]:
        """S2/S5/S7 for one table, in the contract's order: invalid, future, late. The
        accepted rows and deletions (``deleted``), in arrival order."""
        gate = self.gates[table.name]
        future_columns = [
            lt.column for lt in table.lateness if table.column(lt.column).type.name == "TIMESTAMP"
        ]
        # A deletion has its key and times (from the record); its value columns are NULL.
        deletion_required = [*table.primary_key, *(lt.column for lt in table.lateness)]
        well_formed: list[tuple[Row, dict[str, Any], bool]] = []
        for given in step.rows.get(table.name, ()):
            deleted = isinstance(given, Deletion)
            original = given.row if isinstance(given, Deletion) else given
            if deleted and not table.deletes_keys:
                raise ValueError(
                    f"a deletion of table {table.name}, whose PRIMARY KEY is not its Kafka key "
                    "and whose records are no change events"
                )
            row: dict[str, Any] = {
                col.name: step.batch_time_ms if col.processing_time else original.get(col.name)
                for col in table.columns
                if col.computed is None
            }
            row.update(computed_values(table.columns, row, gate.values))
            row = {col.name: row[col.name] for col in table.columns}
            required = (
                deletion_required
                if deleted
                else [c.name for c in table.columns if not c.type.nullable]
            )
            missing = next((name for name in required if row[name] is None), None)
            if missing is not None:
                computed = table.column(missing).computed
                dead.append(
                    DeadLetter(
                        table.name, original, "invalid",
                        f"column {missing} is NOT NULL but the record has no value for it"
                        if computed is None else null_message(missing, computed.written),
                        column=missing,
                    )
                )
                continue
            if table.max_future_ms is not None and step.wall_clock_ms is not None:
                limit: int = step.wall_clock_ms + table.max_future_ms
                ahead = next((c for c in future_columns if row[c] > limit), None)
                if ahead is not None:
                    dead.append(
                        DeadLetter(
                            table.name, original, "future",
                            f"column {ahead} = {row[ahead]} is more than max_future "
                            f"({table.max_future_ms} ms) ahead of the wall clock "
                            f"{step.wall_clock_ms}",
                            column=ahead, value=row[ahead],
                        )
                    )
                    continue
            well_formed.append((original, row, deleted))
        accepted: list[_Change] = []
        for original, row, deleted in well_formed:
            late = gate.late_column(row)
            if late is None:
                accepted.append(_Change(row, 1, self.next_seq(), original, deleted))
            else:
                dead.append(
                    DeadLetter(
                        table.name, original, "late",
                        f"column {late} = {row[late]} is below the waterline "
                        f"{gate.values[late]} of table {table.name}",
                        column=late, value=row[late], waterline=gate.values[late],
                    )
                )
        gate.advance(
            (row for _, row, _ in well_formed),
            ((mark.column, mark.bound) for mark in step.punctuations.get(table.name, ())),
        )
        return accepted

    def _gate_view(
        self, runtime: _ViewRuntime, gate: Waterlines, delta: list[_Change], dead: list[DeadLetter]
    ) -> list[_Change]:
        """L2 decoding case: a view's own LATENESS gates the view's rows like S3/S5 do."""
        table = self.circuit.root_table(runtime.view.name).name
        accepted = []
        for change in delta:
            late = gate.late_column(change.row) if change.weight > 0 else None
            if late is None:
                accepted.append(change)
                continue
            dead.append(
                DeadLetter(
                    table, change.origin if change.origin is not None else change.row, "late",
                    f"column {runtime.view.name}.{late} = {change.row[late]} is below the "
                    f"waterline {gate.values[late]} of view {runtime.view.name}",
                    column=f"{runtime.view.name}.{late}", value=change.row[late],
                    waterline=gate.values[late],
                )
            )
        gate.advance(change.row for change in delta if change.weight > 0)
        return accepted

    def _view_waterline(self, runtime: _ViewRuntime) -> int | None:
        """S14: the waterline of the view's first event-time attribute's source column (a
        processing-time attribute publishes none: docs/semantics.md)."""
        attributes = [
            a
            for a in runtime.view.time_attributes
            if not attribute_is_processing_time(self.circuit, a)
        ]
        if not attributes:
            return None
        attribute = attributes[0]
        source = runtime.sources.get(attribute.column)
        if source is not None:
            return self.waterlines.of(source)
        return attribute_waterline(
            attribute, self.waterlines.get(attribute.table, attribute.source_column)
        )


def evaluate(circuit: Circuit, steps: Sequence[StepInput]) -> list[StepResult]:
    """Run ``steps`` through a fresh :class:`Reference`; one result per step."""
    reference = Reference(circuit)
    return [reference.step(step) for step in steps]
