"""Aggregate views on Spark: per-group state in Spark's state store, emitted per EMIT (S11-S13).

Spark allows one ``applyInPandasWithState`` per query, so all aggregate views of a table share
one operator: rows of every view are projected to ``(_view, _key, _args)`` (the GROUP BY key and
the aggregate arguments as JSON), grouped by ``(_view, _key)``, and the operator writes each
view's records already encoded for Kafka (S13), with ``ptime`` = the step's batch time. Its
state (one small pickled record per group: compact accumulators, the last emitted row and the
changelog version) lives in Spark's state store, the RocksDB provider, so it is checkpointed
with the offsets and partitioned by key across executors.

Completeness (S11) rides on Spark's event-time timeout: a windowed group sets its timeout to
``window_end - 1``, which fires once the watermark (= the table's waterline, which the source's
probe rows feed into ``withWatermark``) reaches ``window_end``. Spark evaluates timeouts with
the watermark the step started with, so a final row is written in the step right after the one
that completed its window (S12 allows this); its state is removed right then.

``EMIT [STREAM] AFTER DELAY`` needs processing-time timers, and Spark takes one timeout kind per
operator, so a table with an AFTER DELAY view runs its operator with ``ProcessingTimeTimeout``
instead (:func:`_process_polled`): a group with a held change times out in the first step whose
batch time is ``>=`` the change's batch time + d (S12), and windowed groups of every view of
that table, which have no event-time timer in this mode, are called again every step and read
Spark's watermark until their window is complete (S11). That costs one Python call per live
windowed group per step, only on such tables; and Spark then runs a step every trigger interval
even without input (the no-data steps that write held changes when no input comes). A window
on a processing-time attribute (``AS PROCTIME()``) runs the same way: its group times out in
the first step whose batch time reaches the window's end, input or not, and is complete then.

HAVING and the SELECT list after the aggregate are evaluated with the same scalar functions as
the reference evaluator (:mod:`app.circuit.functions`), and SUM/AVG go through the same result
functions, so the two agree by construction on everything but the arithmetic of the state. NOW()
there is the batch time of the step of the group's last change (the step whose rows the group
took, kept in its state), as the reference evaluator recomputes a group in that step only:
a row written later (final, held, or a timed-out call) keeps it (ADR 0022).
"""

from __future__ import annotations

import base64
import json
import pickle
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from app.circuit.aggregates import average_result, held_value, hold, sum_result
from app.circuit.derived_time import GroupCompletion
from app.circuit.functions import arg_type, evaluate, to_spark_sql
from app.circuit.ir import (
    HELD,
    LATEST,
    RETRACTION_COLUMN,
    AggCall,
    Aggregate,
    Filter,
    Operator,
    Project,
    SqlType,
    TimeStep,
    View,
)
from app.circuit.processing_time import BATCH_TIME_COLUMN, now_after_aggregate
from app.circuit.waterline import completion_threshold
from app.connectors.sink.record import (
    KEY,
    KIND,
    REL,
    SINK_COLUMNS,
    SINK_SCHEMA,
    TOPIC,
    VALUE,
)
from app.runtime.operators.aggregate_support import (
    polls_every_step,
    processing_window,
    window_end_key,
)
from app.runtime.operators.view_frame import hidden_watermark
from app.runtime.step.encode import ViewEncoding, encode_record

__all__ = ["aggregate_branch", "plan_of"]

_SEQ = ("_step", "_partition", "_offset")
#: A row's Z-set weight: -1 for a retraction of an updating relation's row (S18), else +1.
_WEIGHT = "_weight"


# --- compact accumulators (tables only insert, S2; an updating view retracts, S18) -------------


class _Acc:
    """One aggregate call's running state; picklable, small, exact."""

    def __init__(self, call: AggCall) -> None:
        self.fn = call.fn.upper()
        self.distinct = call.distinct
        self.type = call.type
        self.count = 0
        self.total: Any = None
        self.best: Any = None  # MIN/MAX value, or ARG (by, seq, value)
        self.values: set[Any] | None = set() if call.distinct else None
        #: HELD's Z-set of whole rows -> (count, arrival), and the field it returns.
        self.held: dict[tuple[Any, ...], tuple[int, Any]] = {}
        self.index = 0

    def add(self, args: tuple[Any, ...], seq: tuple[int, int, int], weight: int = 1) -> None:
        """One inserted row's arguments (``weight`` is always 1: see :class:`_RetractingAcc`
        for the rows of an updating relation)."""
        if self.fn == HELD:
            self.index = int(args[0])
            hold(self.held, tuple(args[1:]), seq, weight)
            return
        if self.fn == "COUNT" and not args:
            self.count += 1
            return
        if self.fn == LATEST:
            # The latest row per key (ADR 0030): a tie goes to the later arrival.
            value, by = args
            if by is not None and (self.best is None or (by, seq) >= self.best[:2]):
                self.best = (by, seq, value)
            return
        if self.fn in ("ARG_MAX", "ARG_MIN"):
            value, by = args
            if by is None:
                return
            if self.best is None:
                self.best = (by, seq, value)
                return
            best_by, best_seq, _ = self.best
            better = by > best_by if self.fn == "ARG_MAX" else by < best_by
            if better or (by == best_by and seq < best_seq):
                self.best = (by, seq, value)
            return
        value = args[0]
        if value is None:
            return
        if self.values is not None:
            self.values.add(value)
            return
        self._fold(value)

    def _fold(self, value: Any) -> None:
        self.count += 1
        if self.fn in ("SUM", "AVG"):
            exact = Fraction(value) if isinstance(value, float) else value
            self.total = exact if self.total is None else self.total + exact
        elif self.fn in ("MIN", "MAX"):
            if self.best is None or (value > self.best if self.fn == "MAX" else value < self.best):
                self.best = value

    def result(self) -> Any:
        if self.values is not None:  # DISTINCT: fold the distinct values afresh
            folded = _Acc.__new__(_Acc)
            folded.__dict__.update(self.__dict__, values=None, count=0, total=None, best=None)
            for value in self.values:
                folded._fold(value)
            return folded.result()
        if self.fn == "COUNT":
            return self.count
        if self.fn == HELD:
            return sum_result(held_value(self.held, self.index), self.type)
        if self.fn in ("MIN", "MAX"):
            return self.best
        if self.fn in ("ARG_MAX", "ARG_MIN", LATEST):
            return None if self.best is None else sum_result(self.best[2], self.type)
        if self.count == 0 or self.total is None:  # None: the native INT sum's try_sum overflowed
            return None
        total = float(self.total) if isinstance(self.total, Fraction) else self.total
        if self.fn == "SUM":
            return sum_result(total, self.type)
        return average_result(total, self.count, self.type)


class _RetractingAcc(_Acc):
    """One aggregate call's state over an updating relation's changes (S18): a retraction
    (``weight`` -1) takes an earlier insertion back. COUNT, SUM and AVG add the weighted
    value (SUM and AVG are NULL once no non-null value is left); MIN, MAX and the DISTINCT
    forms keep the multiset of values, as the reference's accumulators
    (:mod:`app.circuit.aggregates`) do. ARG_MAX/ARG_MIN are refused by the compiler."""

    def __init__(self, call: AggCall) -> None:
        super().__init__(call)
        assert self.fn not in ("ARG_MAX", "ARG_MIN"), "refused over updating rows"
        self.values = None
        self.multiset: Counter[Any] = Counter()

    def add(self, args: tuple[Any, ...], seq: tuple[int, int, int], weight: int = 1) -> None:
        if self.fn == HELD:
            super().add(args, seq, weight)
            return
        if self.fn == "COUNT" and not args:
            self.count += weight
            return
        value = args[0]
        if value is None:
            return
        if self.distinct or self.fn in ("MIN", "MAX"):
            # A Z-set, as the reference's: a step's retraction may come before the
            # insertion it takes back (a regular join's pairs), so a count may be negative
            # until the step's rows are in; only positive counts are read.
            self.multiset[value] += weight
            if self.multiset[value] == 0:
                del self.multiset[value]
            return
        self.count += weight
        exact = (Fraction(value) if isinstance(value, float) else value) * weight
        self.total = exact if self.total is None else self.total + exact

    def result(self) -> Any:
        if self.fn == HELD:
            return super().result()
        held = [value for value, count in self.multiset.items() if count > 0]
        if not self.distinct and self.fn in ("MIN", "MAX"):
            if not held:
                return None
            return max(held) if self.fn == "MAX" else min(held)
        if not self.distinct:
            return super().result()
        folded = _Acc.__new__(_Acc)  # the distinct values, folded afresh
        folded.__dict__.update(self.__dict__, values=None, count=0, total=None, best=None)
        for value in held:
            folded._fold(value)
        return folded.result()


@dataclass
class _Group:
    accumulators: list[_Acc]
    emitted: dict[str, Any] | None = None
    version: int = 0
    window_end: int | None = None
    #: AFTER DELAY: batch time of the step of the first change not written yet (None: none).
    pending_since: int | None = None
    #: Of a view over an updating relation: its rows' weights summed (S18; a keyed group
    #: with none left has no row, and is freed once its last row is taken back).
    rows: int = 0
    #: Batch time of the step of the last rows the group took: NOW() after the aggregate.
    changed_at: int | None = None


# --- the operator ---------------------------------------------------------------------------


def _to_python(value: Any, kind: str) -> Any:
    """A pandas cell as the circuit's value: NaN/NaT/None -> None, numpy -> Python."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if value is pd.NaT:
        return None
    if kind in ("INT", "BIGINT", "TIMESTAMP", "DATE"):
        return int(value)
    if kind in ("REAL", "DOUBLE"):
        return float(value)
    if kind == "BOOLEAN":
        return bool(value)
    if kind == "DECIMAL":
        return value if isinstance(value, Decimal) else Decimal(str(value))
    if kind == "VARBINARY":
        return bytes(value)
    return value


@dataclass(frozen=True)
class _Plan:
    """What the per-group function needs of one view (pickled to the executors)."""

    view: View
    aggregate: Aggregate
    post: tuple[Operator, ...]
    key_kinds: tuple[str, ...]
    arg_kinds: tuple[tuple[str, ...], ...]
    #: The key whose value completes a group (S11), or None: the group is complete once the
    #: watermark (its table's first LATENESS column's waterline) reaches
    #: ``completion_threshold(steps, value + key_offset)``: a window_end's value itself, a
    #: window_start's plus the size, any other time attribute's plus 1, each through the
    #: steps of a derived time attribute.
    window_key: int | None
    key_offset: int
    steps: tuple[TimeStep, ...]
    encoding: ViewEncoding
    #: The window is on a processing-time attribute: complete once the step's batch time,
    #: not Spark's watermark, reaches its end.
    processing_time: bool = False
    #: The view reads an updating relation's changes (S18): its rows carry their weight.
    retracting: bool = False
    #: HAVING or the SELECT list reads NOW(): the group's ``changed_at``.
    reads_now: bool = False

    def output_columns(self) -> list[str]:
        return [c.name for c in self.view.columns]


def plan_of(view: View, completion: GroupCompletion | None = None) -> _Plan:
    """What finishing and encoding a group of an aggregate output view needs (both the shared
    operator and Spark's native aggregation, :mod:`app.runtime.operators.native_aggregate`, use it).
    ``completion``: the view's (:func:`app.circuit.derived_time.group_completion`); without
    it, a key of the view's own window."""
    aggregate = next(op for op in view.operators if isinstance(op, Aggregate))
    position = view.operators.index(aggregate)
    window_key, size, key_is_start = window_end_key(view, aggregate)
    offset = size if key_is_start else 0
    steps: tuple[TimeStep, ...] = ()
    if completion is not None:
        window_key, offset = completion.key_index, completion.offset
        steps = completion.attribute.steps
    return _Plan(
        view,
        aggregate,
        tuple(view.operators[position + 1 :]),
        tuple(_type_of(e).name for _, e in aggregate.keys),
        tuple(tuple(_type_of(a).name for a in call.args) for _, call in aggregate.aggregates),
        window_key,
        offset,
        steps,
        ViewEncoding.for_view(view),
        processing_window(view),
        reads_now=now_after_aggregate(view),
    )


def _finish(plan: _Plan, key: tuple[Any, ...], group: _Group) -> dict[str, Any] | None:
    """The group's output row after HAVING and the SELECT list, or None if HAVING fails or,
    over an updating relation, every row of a keyed group has been taken back (S18)."""
    if _emptied(plan, group):
        return None
    row: dict[str, Any] = {name: key[i] for i, (name, _) in enumerate(plan.aggregate.keys)}
    for (name, _), acc in zip(plan.aggregate.aggregates, group.accumulators, strict=True):
        row[name] = acc.result()
    for op in plan.post:
        scope = {**row, BATCH_TIME_COLUMN: group.changed_at} if plan.reads_now else row
        if isinstance(op, Filter):
            if evaluate(op.predicate, scope) is not True:
                return None
        elif isinstance(op, Project):
            row = {name: evaluate(expr, scope) for name, expr in op.outputs}
    return {name: row.get(name) for name in plan.output_columns()}


def _emptied(plan: _Plan, group: _Group) -> bool:
    """Over an updating relation, a keyed group none of whose rows is left (S18); a global
    aggregate has its one row whatever it reads (SQL)."""
    return plan.retracting and group.rows <= 0 and bool(plan.aggregate.keys)


def _emit_rows(
    plan: _Plan, group: _Group, current: dict[str, Any] | None, final: bool
) -> list[dict[str, Any]]:
    """S12: the records of one group in one step, in version order.

    EMIT decides *when* a group writes; the format alone decides *how* (S13, as the reference
    evaluator does): changelog writes retraction/insertion pairs with ``ver`` whatever the EMIT
    clause, upsert writes the new value or a tombstone, even under EMIT STREAM."""
    emit = plan.view.emit
    out: list[dict[str, Any]] = []
    if emit.after_watermark:
        if final and current is not None:
            out.append({**current, "_undo": False, "_ver": 0, "_delete": False})
        return out
    if final or current == group.emitted:
        return out
    return _change_rows(plan, group, current)


def _change_rows(
    plan: _Plan, group: _Group, current: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The records taking the group from its last written row to ``current``, per format."""
    out: list[dict[str, Any]] = []
    if plan.encoding.format == "changelog":
        if group.emitted is not None:
            out.append({**group.emitted, "_undo": True, "_ver": group.version, "_delete": False})
            group.version += 1
        if current is not None:
            out.append({**current, "_undo": False, "_ver": group.version, "_delete": False})
            group.version += 1
    elif current is None:
        assert group.emitted is not None
        out.append({**group.emitted, "_undo": False, "_ver": 0, "_delete": True})
    else:
        out.append({**current, "_undo": False, "_ver": 0, "_delete": False})
    group.emitted = current
    return out


def _json_value(value: Any, kind: str) -> Any:
    if value is not None and kind == "VARBINARY":
        value = base64.b64decode(value)
    return _to_python(value, kind)


def _decode_values(text: str, kinds: Sequence[str]) -> tuple[Any, ...]:
    """The JSON the Spark side built (see :func:`_json_of`) back to circuit values."""
    data = json.loads(text)
    return tuple(_json_value(data.get(str(i)), kind) for i, kind in enumerate(kinds))


def _process(
    plans: Sequence[_Plan], key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    plan = plans[int(key[0])]
    group_key = _decode_values(str(key[1]), plan.key_kinds)
    if state.hasTimedOut:
        group: _Group = pickle.loads(state.get[0])  # noqa: S301 - our own state
        rows = _emit_rows(plan, group, _finish(plan, group_key, group), final=True)
        state.remove()
        yield _sink_frame(plan, rows, state.getCurrentProcessingTimeMs())
        return
    group = _load_group(plan, group_key, state)
    _fold(plan, group, frames, state.getCurrentProcessingTimeMs())
    rows = _emit_rows(plan, group, _finish(plan, group_key, group), final=False)
    if _emptied(plan, group) and group.emitted is None:
        state.remove()  # S18: every row taken back, and its row retracted
    else:
        state.update((pickle.dumps(group),))
        if group.window_end is not None:
            state.setTimeoutTimestamp(group.window_end - 1)
    yield _sink_frame(plan, rows, state.getCurrentProcessingTimeMs())


def _load_group(plan: _Plan, group_key: tuple[Any, ...], state: GroupState) -> _Group:
    """The group's state, or a new group (its window end read from its key)."""
    if state.exists:
        return pickle.loads(state.get[0])  # type: ignore[no-any-return]  # noqa: S301 - ours
    kind = _RetractingAcc if plan.retracting else _Acc
    group = _Group([kind(call) for _, call in plan.aggregate.aggregates])
    if plan.window_key is not None and group_key[plan.window_key] is not None:
        bound = int(group_key[plan.window_key]) + plan.key_offset
        group.window_end = completion_threshold(plan.steps, bound)
    return group


def _fold(plan: _Plan, group: _Group, frames: Iterator[pd.DataFrame], now: int) -> None:
    """Add the step's rows of the group to its accumulators, each with its weight (S18:
    -1 takes back a row of an updating relation); ``now``, the step's batch time, is the
    group's last change."""
    group.changed_at = int(now)
    for frame in frames:
        rows_args = frame["_args"].tolist()
        seqs = zip(*(frame[c].tolist() for c in _SEQ), strict=True)
        weights = frame[_WEIGHT].tolist() if plan.retracting else [1] * len(rows_args)
        for args_text, seq, weight in zip(rows_args, seqs, weights, strict=True):
            args = json.loads(args_text)
            order = (int(seq[0]), int(seq[1]), int(seq[2]))
            if plan.retracting:
                group.rows += int(weight)
            for i, acc in enumerate(group.accumulators):
                values = args.get(str(i), {})
                kinds = plan.arg_kinds[i]
                acc.add(
                    tuple(_json_value(values.get(str(j)), kinds[j]) for j in range(len(kinds))),
                    order,
                    int(weight),
                )


def _process_polled(
    plans: Sequence[_Plan], key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    """The operator under ``ProcessingTimeTimeout`` (a table with an AFTER DELAY view).

    Called with the group's rows, or with none when its timeout fired (a held change is due, or
    a windowed group polls Spark's watermark). Every call decides what :mod:`app.circuit.reference`
    decides for the group in that step, with ``now`` = the step's batch time and completeness
    from the watermark the step started with (as the event-time path: a final row comes one step
    after the step that completed the window). The state is always written back or removed: a
    call that does neither would leave the previous timeout in the state store."""
    plan = plans[int(key[0])]
    group_key = _decode_values(str(key[1]), plan.key_kinds)
    now = state.getCurrentProcessingTimeMs()
    group = _load_group(plan, group_key, state)
    if not state.hasTimedOut:
        _fold(plan, group, frames, now)
    complete = group.window_end is not None and _waterline(plan, state) >= group.window_end
    rows = _polled_rows(plan, group, _finish(plan, group_key, group), complete, now)
    emptied = _emptied(plan, group) and group.emitted is None  # S18: all taken back
    if (complete or emptied) and group.pending_since is None:
        state.remove()  # S11: complete and nothing left to write
    else:
        state.update((pickle.dumps(group),))
        wake = _next_call(plan, group, complete, now)
        if wake is not None:
            state.setTimeoutDuration(wake - now)
    yield _sink_frame(plan, rows, now)


def _waterline(plan: _Plan, state: GroupState) -> int:
    """S11: the waterline that completes a windowed group: the step's batch time for a
    window on a processing-time attribute, which needs no watermark (its table may have no
    LATENESS column, ADR 0022), else Spark's watermark the step started with."""
    if plan.processing_time:
        return int(state.getCurrentProcessingTimeMs())
    return int(state.getCurrentWatermarkMs())


def _polled_rows(
    plan: _Plan, group: _Group, current: dict[str, Any] | None, complete: bool, now: int
) -> list[dict[str, Any]]:
    """S12 for one group in one step, every EMIT form, as the reference's ``_group_records``.

    AFTER DELAY d: a change with nothing held starts the hold at ``now``; the coalesced change
    (last written row -> current) is written in the first step with ``now >= since + d``, or,
    with AFTER WATERMARK too, in the step that sees the window complete, after which the group
    is removed. Without AFTER DELAY the records are the event-time path's."""
    emit = plan.view.emit
    if emit.delay_ms is None:
        if emit.after_watermark:
            return _emit_rows(plan, group, current, final=complete)
        return _emit_rows(plan, group, current, final=False)
    changed = current != group.emitted
    if changed and group.pending_since is None:
        group.pending_since = now
    due = group.pending_since is not None and now >= group.pending_since + emit.delay_ms
    if not (due or (emit.after_watermark and complete)):
        return []
    group.pending_since = None
    return _change_rows(plan, group, current) if changed else []


def _next_call(plan: _Plan, group: _Group, complete: bool, now: int) -> int | None:
    """The earliest batch time at which the group must be called again without rows.

    Spark times a group out in the first step whose batch time is *strictly* above its timeout
    (``now + duration``), and the duration must be positive: so the timeout is one ms before
    the time wanted, and at least ``now + 1``. A change due at ``now + 1`` therefore comes out
    one step later than the oracle would write it only if Spark ran two steps 1 ms apart, which
    a step's own run time rules out."""
    wanted: list[int] = []
    if group.pending_since is not None:
        assert plan.view.emit.delay_ms is not None
        wanted.append(group.pending_since + plan.view.emit.delay_ms)
    if group.window_end is not None and not complete:
        # A processing-time window is complete in the first step whose batch time reaches its
        # end, which Spark runs without input (no-data steps); poll the watermark otherwise.
        wanted.append(group.window_end if plan.processing_time else now + 1)
    if not wanted:
        return None
    return max(min(wanted) - 1, now + 1)


def _sink_frame(plan: _Plan, rows: list[dict[str, Any]], ptime_ms: int) -> pd.DataFrame:
    """The group's records encoded for Kafka, as sink records (every column a Python object,
    those an output record does not set None), in the sink record's column order."""
    enc = plan.encoding
    keys, values = [], []
    for row in rows:
        key, value = encode_record(enc, row, ptime_ms)
        keys.append(key)
        values.append(value)
    n = len(rows)
    given = {
        KIND: ["output"] * n,
        REL: [enc.view] * n,
        TOPIC: [enc.topic] * n,
        KEY: keys,
        VALUE: values,
    }
    return pd.DataFrame(
        {name: pd.Series(given.get(name, [None] * n), dtype=object) for name in SINK_COLUMNS}
    )


def _json_fields(exprs: Sequence[Any]) -> str:
    """``'0', e0, '1', e1, ...`` for ``named_struct``, in the circuit's representation:
    TIMESTAMP as epoch ms, DATE as days, DECIMAL as exact text (JSON numbers would be floats)."""
    parts = []
    for i, expr in enumerate(exprs):
        t = _type_of(expr)
        sql = to_spark_sql(expr)
        if t.name == "TIMESTAMP":
            sql = f"unix_millis({sql})"
        elif t.name == "DATE":
            sql = f"unix_date({sql})"
        elif t.name == "DECIMAL":
            sql = f"cast({sql} as string)"
        parts.append(f"'{i}', {sql}")
    return ", ".join(parts)


def _json_of(exprs: Sequence[Any]) -> str:
    fields = _json_fields(exprs)
    return f"to_json(named_struct({fields}))" if fields else "'{}'"


def aggregate_branch(
    inputs: Sequence[tuple[View, DataFrame]],
    event_time: str | None,
    completions: Mapping[str, GroupCompletion | None],
) -> DataFrame:
    """The Kafka records (sink records) of every aggregate output view of one table.

    ``event_time`` is the table column carrying Spark's watermark: it stays in the projection
    (or rides along hidden, app/runtime/operators/view_frame.py) because Spark's event-time timeout
    needs the watermarked column in its input; None for a table without LATENESS, whose
    aggregates never complete a group by event time: no timeout, or processing-time ones
    (AFTER DELAY, windows on a processing-time attribute). ``completions``: per view, the key that
    completes its groups. A view whose rows carry :data:`RETRACTION_COLUMN` reads an
    updating relation's changes (S18): each row goes in with its weight, -1 when it
    retracts."""
    plans: list[_Plan] = []
    projected: DataFrame | None = None
    weighted = any(RETRACTION_COLUMN in df.columns for _, df in inputs)
    for index, (view, df) in enumerate(inputs):
        retracting = RETRACTION_COLUMN in df.columns
        plan = replace(plan_of(view, completions.get(view.name)), retracting=retracting)
        aggregate = plan.aggregate
        plans.append(plan)
        nested = [
            f"'{i}', named_struct({_json_fields(call.args)})"
            for i, (_, call) in enumerate(aggregate.aggregates)
            if call.args
        ]
        args_sql = f"to_json(named_struct({', '.join(nested)}))" if nested else "'{}'"
        weight = (F.when(F.col(RETRACTION_COLUMN), -1).otherwise(1) if retracting
                  else F.lit(1))
        frame = df.select(
            F.lit(index).alias("_view"),
            F.expr(_json_of([e for _, e in aggregate.keys])).alias("_key"),
            F.expr(args_sql).alias("_args_raw"),
            *[F.col(c) for c in _SEQ],
            *([weight.alias(_WEIGHT)] if weighted else []),
            *([_event_time_column(df, event_time)] if event_time is not None else []),
        )
        projected = frame if projected is None else projected.unionByName(frame)
    assert projected is not None
    polled = polls_every_step([view for view, _ in inputs])
    if polled:
        timeout = GroupStateTimeout.ProcessingTimeTimeout
    elif any(p.window_key is not None for p in plans):
        timeout = GroupStateTimeout.EventTimeTimeout
    else:
        timeout = GroupStateTimeout.NoTimeout
    assert event_time is not None or timeout != GroupStateTimeout.EventTimeTimeout, "support.py"
    frozen = tuple(plans)
    process = _process_polled if polled else _process

    def run(
        key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        return process(frozen, key, frames, state)

    return (
        projected.withColumnRenamed("_args_raw", "_args")
        .groupBy("_view", "_key")
        .applyInPandasWithState(run, SINK_SCHEMA, "acc binary", "append", timeout)
    )


def _event_time_column(df: DataFrame, event_time: str) -> Any:
    """The watermarked column as the stateful operator sees it, one millisecond later.

    With an event-time timeout Spark drops input rows whose event time is ``<=`` its late-event
    watermark, but S5 keeps a row *equal* to the waterline (found by the differential tests:
    such rows vanished from every window). The late gate has already removed every row below
    the waterline, so the operator must drop nothing: shifting the column by 1 ms (keeping its
    watermark metadata, which the timeout needs) turns Spark's ``<=`` into S5's ``<``. Timeouts
    use the query's watermark, not this column, so S11 is unchanged."""
    hidden = hidden_watermark(event_time)
    # A view that computes a derived time attribute from it carries it under another name.
    source = hidden if hidden in df.columns else event_time
    field = df.schema[source]
    if field.dataType.typeName() != "timestamp":
        return F.col(f"`{source}`").alias(event_time, metadata=dict(field.metadata))
    shifted = F.col(f"`{source}`") + F.expr("INTERVAL 1 MILLISECOND")
    return shifted.alias(event_time, metadata=dict(field.metadata))


def _type_of(expr: Any) -> SqlType:
    return arg_type(expr)
