"""End-to-end latency at a fixed input rate: ``python -m loadtests.latency`` or
``python -m loadtests.bench --latency``.

One side (Tidemark or the plain Spark peer, loadtests/side.py) runs continuously in its own
process. The generator (loadtests/generator.py) produces the workload's events at a fixed rate
from another process and records when it handed each event to the producer. A consumer in
this process (``read_committed``: Tidemark writes its output in Kafka transactions, S15; the
peer's plain writes are visible to it at once) records when each output record became
visible. Afterwards every output record is attributed to the input event that made it due:

* a stateless view (workload a): the input record itself, found by the output's columns
  (the projection forwards the input columns, so ``(ts, usr, n)`` identifies the event; equal
  tuples are matched in production order);
* an ``EMIT AFTER WATERMARK`` window (workloads b, c): the first event, in production order,
  whose event time moved the table's waterline to or past the window's end
  (``max event time - LATENESS >= window_end``, SPEC S3/S11). The generator knows every event
  time it produced and when, so this needs nothing from the system under test;
* an INNER interval join (workload d, auctions and bids, two input topics): the later-produced
  of the two events the output row pairs (the join writes a match in the step that accepts
  its second row, insert-only). The output's columns identify both: the bid's own columns
  and the auction's, its id being the bid's ``auction`` (the join key); equal pairs are
  matched in the order their second event was produced.

``latency = visible time - produce time of that event``, both wall-clock ms on this machine.
The run is: warm-up (not measured) from the side's first step with input, the measured
period, then a tail during which the rate is kept and the consumer keeps reading. Only
outputs whose due event was produced in the measured period count. An output that should
exist (the workload's filter passes an on-time event, or a window with on-time events
closes, or an on-time auction and an on-time bid the join's key and bound pair) but was
not visible by the end of the tail is *missing*; it enters the percentiles
with ``end of tail - due``, a lower bound, and the result says so (``lower_bound``). Windows
hold many rows that share one due event, so ``dues`` gives the number of distinct due events
behind the percentiles.

The attribution and the statistics are pure functions (tests/unit/loadtests/test_latency.py).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import math
import multiprocessing
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from array import array
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Attribution",
    "JoinRule",
    "Produced",
    "Rule",
    "Sample",
    "Visible",
    "attribute",
    "expected",
    "measure",
    "percentile",
    "rule_for",
    "summarize",
]

ROOT = Path(__file__).resolve().parent.parent
#: A side's ``STEP <input rows>`` announcement (loadtests/side.py).
_STEP = re.compile(r"STEP (\d+)(?:\s|$)")


# ---------------------------------------------------------------------------------------------
# The latency definition, as pure functions.


@dataclass(frozen=True)
class Rule:
    """How output records of one view are attributed to input events.

    ``input_time``/``lateness_ms``: the table's LATENESS column and amount (its waterline).
    Windowed (``window_ms`` set, TUMBLE of that size and ``window_offset_ms``): outputs carry the
    window end in ``output_time``. Stateless: ``match`` pairs (output column, input column)
    identify the input record, and ``filters`` (circuit expressions) say which input records
    reach the output.
    """

    input_time: str
    lateness_ms: int
    window_ms: int | None = None
    window_offset_ms: int = 0
    output_time: str = ""
    match: tuple[tuple[str, str], ...] = ()
    filters: tuple[Any, ...] = ()

    @property
    def windowed(self) -> bool:
        return self.window_ms is not None

    def accepts(self, row: Mapping[str, Any]) -> bool:
        """Whether an (on-time) input row reaches a stateless view's output (its WHERE)."""
        from app.circuit.scalar import evaluate_expr, is_true

        return all(is_true(evaluate_expr(f, row)) for f in self.filters)

    def window_end(self, row: Mapping[str, Any]) -> int:
        """End of the TUMBLE window holding ``row`` (SPEC S9, the runtime's own function)."""
        from app.circuit.windows import tumble_start

        assert self.window_ms is not None
        c = int(row[self.input_time])
        return tumble_start(c, self.window_ms, self.window_offset_ms) + self.window_ms

    def input_key(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(row[i] for _, i in self.match)

    def output_key(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(row[o] for o, _ in self.match)


@dataclass(frozen=True)
class JoinRule:
    """How output records of an INNER interval join (SPEC S16) are attributed to input events.

    A pair is an event of table ``left`` and one of table ``right`` whose ``keys`` columns
    (left column, right column) are equal and whose times are within the bound:
    ``left[left_time] + lower_ms <= right[right_time] <= left[left_time] + upper_ms``.
    ``left_match``/``right_match``: (output column, input column) pairs that identify each
    side's event in an output record; a join key the output carries from one side identifies
    the other side's event too. An output is due at the later-produced event of its pair: the
    join writes a match, insert-only, in the step that accepts its second row.
    """

    left: str
    right: str
    keys: tuple[tuple[str, str], ...]
    left_time: str
    right_time: str
    lower_ms: int
    upper_ms: int
    left_match: tuple[tuple[str, str], ...]
    right_match: tuple[tuple[str, str], ...]

    def join_key(self, p: Produced) -> tuple[Any, ...]:
        """The event's join key values (the same for a left and a right event that pair)."""
        side = 0 if p.table == self.left else 1
        return tuple(p.row[k[side]] for k in self.keys)

    def within(self, left: Mapping[str, Any], right: Mapping[str, Any]) -> bool:
        t = int(left[self.left_time])
        return t + self.lower_ms <= int(right[self.right_time]) <= t + self.upper_ms

    def input_key(self, left: Mapping[str, Any], right: Mapping[str, Any]) -> tuple[Any, ...]:
        """The pair's identity: its left event's matched columns, then its right event's."""
        return (tuple(left[i] for _, i in self.left_match),) + (
            tuple(right[i] for _, i in self.right_match),
        )

    def output_key(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return (tuple(row[o] for o, _ in self.left_match),) + (
            tuple(row[o] for o, _ in self.right_match),
        )


@dataclass(frozen=True, slots=True)
class Produced:
    """One input event: when the generator handed it to the producer, its row, whether
    the generator made it late on purpose (past LATENESS, so Tidemark routes it away), and
    the table it was produced for (a join's rule tells its inputs apart by it)."""

    produce_ms: float
    row: Mapping[str, Any]
    late: bool = False
    table: str = ""


@dataclass(frozen=True, slots=True)
class Visible:
    """One output record and when the consumer got it."""

    visible_ms: float
    row: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Sample:
    """An output record attributed to its due event. ``key``: the window end (windowed), the
    matched input columns (stateless) or the pair's identity (join, :meth:`JoinRule.output_key`)."""

    key: Hashable
    due_ms: float
    visible_ms: float

    @property
    def latency_ms(self) -> float:
        return self.visible_ms - self.due_ms


@dataclass(frozen=True)
class Attribution:
    """``unmatched``: stateless or join outputs with no produced event (pair) left to match
    (duplicates, or input from before the run). ``early``: window outputs visible before any
    event made them due, which SPEC S12 forbids; neither enters the samples."""

    samples: list[Sample]
    unmatched: int
    early: int


class _Crossings:
    """Each rise of the waterline, in production order: (waterline, produce time of the event
    that raised it). Both lists ascend, so the first event that took the waterline to a
    window's end or past it is found by bisection."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.marks: list[int] = []
        self.times: list[float] = []

    def add(self, p: Produced) -> None:
        mark = int(p.row[self.rule.input_time]) - self.rule.lateness_ms
        if not self.marks or mark > self.marks[-1]:
            self.marks.append(mark)
            self.times.append(p.produce_ms)

    def due(self, window_end: int) -> float | None:
        k = bisect.bisect_left(self.marks, window_end)
        return self.times[k] if k < len(self.times) else None


def _pairs(
    produced: Iterable[Produced], rule: JoinRule
) -> Iterator[tuple[tuple[Any, ...], float, bool]]:
    """Every pair the join matches among ``produced`` (in production order), as (identity,
    produce time of its later-produced event, both events on time), in the order of that
    produce time. Events of other tables are skipped."""
    # (table, join key) -> (row, produce time, late) of each event so far: a new event pairs
    # with the other table's events of its key that came before it.
    seen: dict[tuple[str, tuple[Any, ...]], list[tuple[Mapping[str, Any], float, bool]]] = {}
    for p in produced:
        if p.table == rule.left:
            other = rule.right
        elif p.table == rule.right:
            other = rule.left
        else:
            continue
        key = rule.join_key(p)
        for row, _, late in seen.get((other, key), ()):
            left, right = (p.row, row) if other == rule.right else (row, p.row)
            if rule.within(left, right):
                yield rule.input_key(left, right), p.produce_ms, not (late or p.late)
        seen.setdefault((p.table, key), []).append((p.row, p.produce_ms, p.late))


def _in_order(
    keyed: Iterable[tuple[tuple[Any, ...], float]],
    outputs: Iterable[Visible],
    output_key: Callable[[Mapping[str, Any]], tuple[Any, ...]],
) -> Attribution:
    """Each output matched to the first due time of its key not matched yet (``keyed`` in
    due order): equal keys are matched in production order; outputs left over are
    ``unmatched``."""
    # Keys are nearly all unique: one float per key, a queue only for repeated keys.
    first: dict[tuple[Any, ...], float] = {}
    more: dict[tuple[Any, ...], collections.deque[float]] = {}
    for key, at in keyed:
        if key in first:
            more.setdefault(key, collections.deque()).append(at)
        else:
            first[key] = at
    samples: list[Sample] = []
    unmatched = 0
    for out in outputs:
        key = output_key(out.row)
        if key in first:
            due = first.pop(key)
            queue = more.get(key)
            if queue:
                first[key] = queue.popleft()
            samples.append(Sample(key, due, out.visible_ms))
        else:
            unmatched += 1
    return Attribution(samples, unmatched, 0)


def attribute(
    produced: Iterable[Produced], outputs: Iterable[Visible], rule: Rule | JoinRule
) -> Attribution:
    """Attribute each output record to the produce time of the event that made it due.
    ``produced`` in production order; each argument is read once (a run's events and outputs
    can be millions: pass generators). A join's outputs are matched to every pair the input
    holds, the late events' included (a side may accept an event the generator made late)."""
    if isinstance(rule, JoinRule):
        pairs = ((key, due) for key, due, _ in _pairs(produced, rule))
        return _in_order(pairs, outputs, rule.output_key)
    samples: list[Sample] = []
    early = 0
    if rule.windowed:
        crossings = _Crossings(rule)
        for p in produced:
            crossings.add(p)
        for out in outputs:
            end = int(out.row[rule.output_time])
            due = crossings.due(end)
            if due is None or out.visible_ms < due:
                early += 1
                continue
            samples.append(Sample(end, due, out.visible_ms))
        return Attribution(samples, 0, early)
    keyed = ((rule.input_key(p.row), p.produce_ms) for p in produced)
    return _in_order(keyed, outputs, rule.output_key)


def expected(produced: Iterable[Produced], rule: Rule | JoinRule) -> list[tuple[Hashable, float]]:
    """(key, due time) of every output that must become visible, from the on-time events
    only (an event the generator made late may be dropped by either side): stateless, one per
    event the view's filter passes; windowed, one per window holding an on-time event, once an
    event has closed it (a window's row count is not checked here: compare the sides' rows);
    a join, one per pair of two on-time events, due at the later-produced of them."""
    if isinstance(rule, JoinRule):
        return [(key, due) for key, due, on_time in _pairs(produced, rule) if on_time]
    if not rule.windowed:
        return [
            (rule.input_key(p.row), p.produce_ms)
            for p in produced
            if not p.late and rule.accepts(p.row)
        ]
    crossings = _Crossings(rule)
    ends: set[int] = set()
    for p in produced:
        crossings.add(p)
        if not p.late:
            ends.add(rule.window_end(p.row))
    out: list[tuple[Hashable, float]] = []
    for end in sorted(ends):
        due = crossings.due(end)
        if due is not None:
            out.append((end, due))
    return out


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in (0, 1]) of ascending values: a value that occurred."""
    if not sorted_values:
        raise ValueError("no values")
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def step_lengths(step_log: Iterable[Mapping[str, Any]], start_ms: float, end_ms: float) -> Any:
    """p50/p90/max of the steps (``ms``, as the side's step log has them) that started in
    ``[start_ms, end_ms)``: the step length is what the latency at a given rate follows (a
    window is written two to three steps after its due event), so a slow run shows here."""
    steps = [s for s in step_log if start_ms <= float(s["start_ms"]) < end_ms]
    lengths = sorted(float(s["ms"]) for s in steps)
    if not lengths:
        return None
    # Where a median step's time goes, by Spark's phases (addBatch is the sink's jobs; the
    # rest is the driver's between them), to compare the two sides' fixed parts per step.
    phases: dict[str, list[float]] = collections.defaultdict(list)
    for step in steps:
        for phase, ms in (step.get("phases_ms") or {}).items():
            phases[phase].append(float(ms))
    return {
        "n": len(lengths),
        "p50_ms": percentile(lengths, 0.50),
        "p90_ms": percentile(lengths, 0.90),
        "max_ms": lengths[-1],
        "phases_p50_ms": {k: percentile(sorted(v), 0.50) for k, v in sorted(phases.items())},
    }


def slowest_dues(
    samples: Iterable[Sample],
    step_log: Iterable[Mapping[str, Any]],
    start_ms: float,
    end_ms: float,
    count: int = 3,
) -> list[dict[str, Any]]:
    """Where the slowest outputs' latency went: for the ``count`` due events produced in
    ``[start_ms, end_ms)`` whose last output became visible latest after them, the wait from
    the event to the start of the next step (the one that can read it), the lengths of the
    steps that started and ended before the output was visible, and the time from the end of
    the last of them to visible (the consumer's own delay, or part of a step still running).
    A p99 made of one long step reads differently from one made of several ordinary ones
    Each entry is a different episode: a due event read by the same step as a
    slower one (neighbouring records of a stateless view) is skipped."""
    latest: dict[float, float] = {}
    for s in samples:
        if start_ms <= s.due_ms < end_ms:
            latest[s.due_ms] = max(latest.get(s.due_ms, s.visible_ms), s.visible_ms)
    steps = sorted((float(s["start_ms"]), float(s["ms"])) for s in step_log)
    out: list[dict[str, Any]] = []
    seen: set[float | None] = set()
    for due, visible in sorted(latest.items(), key=lambda kv: kv[0] - kv[1]):
        if len(out) == count:
            break
        after = [(at, ms) for at, ms in steps if due <= at < visible]
        episode = after[0][0] if after else None
        if episode in seen:
            continue
        seen.add(episode)
        done = [(at, ms) for at, ms in after if at + ms <= visible]
        last = done[-1][0] + done[-1][1] if done else after[0][0] if after else due
        out.append(
            {
                "latency_ms": round(visible - due, 1),
                "wait_ms": round(after[0][0] - due, 1) if after else None,
                "steps_ms": [round(ms) for _, ms in done],
                "then_ms": round(visible - last, 1),
            }
        )
    return out


def summarize(
    attribution: Attribution,
    due: Sequence[tuple[Hashable, float]],
    start_ms: float,
    end_ms: float,
    observed_until_ms: float,
) -> dict[str, Any]:
    """p50/p99/max over the outputs whose due event was produced in ``[start_ms, end_ms)``.

    Outputs in ``due`` (see :func:`expected`) that never became visible count as missing, with
    the lower bound ``observed_until_ms - due``; ``lower_bound`` is then true. Latencies in ms.
    """
    inside = [s for s in attribution.samples if start_ms <= s.due_ms < end_ms]
    seen = collections.Counter(s.key for s in inside)
    missing: list[float] = []
    for key, at in due:
        if not start_ms <= at < end_ms:
            continue
        if seen[key] > 0:
            seen[key] -= 1
            continue
        missing.append(observed_until_ms - at)
    values = sorted([s.latency_ms for s in inside] + missing)
    result: dict[str, Any] = {
        "count": len(inside),
        "dues": len({s.due_ms for s in inside}),
        "missing": len(missing),
        "unmatched": attribution.unmatched,
        "early": attribution.early,
        "lower_bound": bool(missing),
        "p50_ms": None,
        "p99_ms": None,
        "max_ms": None,
    }
    if values:
        result.update(
            p50_ms=round(percentile(values, 0.50), 1),
            p99_ms=round(percentile(values, 0.99), 1),
            max_ms=round(values[-1], 1),
        )
    return result


def rule_for(circuit: Any) -> Rule | JoinRule:
    """The attribution rule of the program's one output view, from its compiled circuit:
    LATENESS, window and join from the IR, so the probe follows the program, not a copy of it."""
    from app.circuit.ir import ColumnRef, Filter, Join, Project, Window

    views = [v for v in circuit.views if v.output is not None]
    if len(views) != 1:
        raise ValueError(f"the latency probe needs exactly one output view, found {len(views)}")
    view = views[0]
    joins = [op for op in view.operators if isinstance(op, Join)]
    if joins:
        return _join_rule(circuit, view, joins[0])
    table = circuit.root_table(view.name)
    if len(table.lateness) != 1:
        raise ValueError(f"table {table.name} needs exactly one LATENESS column")
    lateness = table.lateness[0]
    windows = [op for op in view.operators if isinstance(op, Window)]
    if windows:
        window = windows[0]
        if window.kind != "TUMBLE" or len(windows) > 1 or not view.emit.after_watermark:
            raise ValueError(
                f"view {view.name}: the probe attributes one TUMBLE ... EMIT AFTER WATERMARK"
            )
        ends = [a.column for a in view.time_attributes if a.kind == "window_end"]
        if not ends:
            raise ValueError(f"view {view.name} does not output its window_end")
        return Rule(
            lateness.column,
            lateness.amount,
            window_ms=window.size,
            window_offset_ms=window.offset,
            output_time=ends[0],
        )
    match: list[tuple[str, str]] = []
    filters: list[Any] = []
    for op in view.operators:
        if isinstance(op, Filter):
            filters.append(op.predicate)
        elif isinstance(op, Project) and all(isinstance(e, ColumnRef) for _, e in op.outputs):
            match = [(name, e.name) for name, e in op.outputs]
        else:
            raise ValueError(
                f"view {view.name}: the probe attributes a stateless view only when it "
                "filters and forwards input columns"
            )
    return Rule(lateness.column, lateness.amount, match=tuple(match), filters=tuple(filters))


def _join_rule(circuit: Any, view: Any, join: Any) -> JoinRule:
    """The rule of a view that is an INNER interval join of two tables, its keys and bound
    between columns, and a projection of the joined columns (the shape of workload d)."""
    from app.circuit.ir import ColumnRef, Project

    tables = {t.name for t in circuit.tables}
    rest = view.operators[1:]
    if (
        join.kind != "inner"
        or join.form != "interval"
        or join.bound is None
        or join.residual is not None
        or join.left.source == join.right.source
        or not {join.left.source, join.right.source} <= tables
        or not all(isinstance(k, ColumnRef) for pair in join.keys for k in pair)
        or len(rest) != 1
        or not isinstance(rest[0], Project)
        or not all(isinstance(e, ColumnRef) for _, e in rest[0].outputs)
    ):
        raise ValueError(
            f"view {view.name}: the probe attributes an INNER interval join of two tables, "
            "on key columns and the bound alone, that forwards joined columns"
        )
    sides = (join.left, join.right)

    def column(side: Any, name: str) -> str | None:
        prefix = f"{side.alias}."
        return name[len(prefix) :] if name.startswith(prefix) else None

    keys: list[tuple[str, str]] = []
    for lk, rk in join.keys:
        left, right = column(join.left, lk.name), column(join.right, rk.name)
        if left is None or right is None:
            raise ValueError(f"view {view.name}: a join key is not one column of each side")
        keys.append((left, right))
    matches: tuple[list[tuple[str, str]], list[tuple[str, str]]] = ([], [])
    forwarded = [(out, e.name) for out, e in rest[0].outputs if isinstance(e, ColumnRef)]
    for out, ref in forwarded:
        for side, match in zip(sides, matches, strict=True):
            if (name := column(side, ref)) is not None:
                match.append((out, name))
    # A key forwarded from one side is the other side's key column as well.
    for key in keys:
        for own in (0, 1):
            other = 1 - own
            if key[own] in {i for _, i in matches[own]}:
                continue
            matches[own].extend((out, key[own]) for out, i in matches[other] if i == key[other])
    for side, match in zip(sides, matches, strict=True):
        if not match:
            raise ValueError(f"view {view.name} outputs no column of {side.source}")
    return JoinRule(
        join.left.source,
        join.right.source,
        tuple(keys),
        join.bound.left_column,
        join.bound.right_column,
        join.bound.lower,
        join.bound.upper,
        tuple(matches[0]),
        tuple(matches[1]),
    )


# ---------------------------------------------------------------------------------------------
# One measured run against a real broker and a running side.


#: Events encoded beyond warm-up, measured period and tail: the side's first step with input
#: (where warm-up starts) comes 10-25 s after the first event.
_ENCODED_SLACK_S = 90


def _encoded_file(work: Path, workload: str, count: int) -> Path:
    """Where the first ``count`` encoded events of ``workload`` are or go: any earlier file of
    at least that many serves (the events are a deterministic sequence), so the sides of one
    command share one."""
    for path in sorted(work.glob(f"events-{workload}-*.bin")):
        if int(path.stem.rsplit("-", 1)[1]) >= count:
            return path
    return work / f"events-{workload}-{count}.bin"


def _generate(
    bootstrap: str,
    topics: tuple[str, ...],
    workload: str,
    rate: float,
    events_path: str,
    count: int,
    ready: Any,
    go: Any,
    stop: Any,
    times_path: str,
) -> None:
    """The generator process: encodes ``count`` events to ``events_path`` unless there,
    sets ``ready``, and once ``go`` is set produces them at ``rate``/s until ``stop`` is set;
    produce times to a file (the events themselves are regenerated from the seed afterwards).
    Encoding while the side starts spares the measured period what encoding as it produced
    cost (0.5 of the two cores at 44,600 events/s, measured). ``topics``: the workload's
    input topics in the order of its tables; with two (d) the events go to both in
    production order, ``rate`` counting both."""
    from loadtests.bench import input_schema, pair_shape_of, shape_of
    from loadtests.generator import (
        encode_events,
        encode_pair,
        encoded_events,
        encoded_pair,
        produce,
        produce_pair,
    )

    path = Path(events_path)
    times = array("d")
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if len(topics) == 1:
        shape = shape_of(workload, input_schema(workload))
        if not path.exists():
            encode_events(shape, count, path)
        ready.set()
        go.wait()
        produce(
            conf,
            topics[0],
            shape,
            2**40,
            rate,
            times=times,
            stop=stop.is_set,
            values=encoded_events(path),
        )
    else:
        pair = pair_shape_of(workload)
        if not path.exists():
            encode_pair(pair, count, path)
        ready.set()
        go.wait()
        produce_pair(
            conf,
            (topics[0], topics[1]),
            pair,
            2**40,
            rate,
            times=times,
            stop=stop.is_set,
            values=encoded_pair(path),
        )
    with open(times_path, "wb") as f:
        times.tofile(f)
    if not stop.is_set():
        raise SystemExit(
            f"the generator ran out of its {len(times)} encoded events before the run ended "
            f"(the side took more than {_ENCODED_SLACK_S} s to its first step with input?)"
        )


class _Probe:
    """Reads the output topic from the start (``read_committed``) in a thread, keeping each
    value with the wall-clock ms at which ``consume`` handed it over; decoding waits until
    the run is over so it cannot delay the clock."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"latency-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
                "log_level": 3,
            }
        )
        partitions = self.consumer.list_topics(topic, timeout=30).topics[topic].partitions
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        self.records: list[tuple[float, bytes]] = []
        self.last_poll_ms = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self.consumer.consume(10_000, 0.05)
            now = time.time() * 1000
            self.last_poll_ms = now
            for m in batch:
                if m.error() is None and m.value() is not None:
                    self.records.append((now, m.value()))

    def stop(self) -> float:
        """Stop reading; returns the last moment outputs were looked for (wall-clock ms)."""
        self._stop.set()
        self._thread.join()
        self.consumer.close()
        return self.last_poll_ms


class _Side:
    """A side (loadtests/side.py) running continuously in its own process. Its stdout says
    ``READY`` once the query started and ``STEP <input rows>`` after each step; stderr (Spark's
    log) goes to ``log_path``."""

    def __init__(self, spec: dict[str, Any], log_path: Path) -> None:
        self.name, self.log_path = spec["side"], log_path
        with log_path.open("w") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "loadtests.side", json.dumps(spec)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.first_input = threading.Event()
        self.first_input_ms = 0.0
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("READY"):
                self.ready.set()
            elif (step := _STEP.search(line)) is not None and int(step.group(1)) > 0:
                # Searched, not parsed from the start: another thread's log line may share it.
                if not self.first_input.is_set():
                    self.first_input_ms = time.time() * 1000
                    self.first_input.set()

    def wait_for(self, event: threading.Event, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not event.wait(0.5):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(
                    f"{self.name}: {what} (rc {self.proc.returncode}); {self._log()}"
                )

    def stop(self) -> dict[str, Any]:
        """SIGTERM (the side finishes its step in flight), then its RESULT line."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._pump.join(10)
        line = next((x for x in self.lines if x.startswith("RESULT ")), None)
        if self.proc.returncode != 0 or line is None:
            raise RuntimeError(f"{self.name} failed (rc {self.proc.returncode}); {self._log()}")
        result: dict[str, Any] = json.loads(line[7:])
        return result

    def _log(self) -> str:
        last = self.log_path.read_text(errors="replace").splitlines()[-30:]
        return f"see {self.log_path}:\n" + "\n".join(last)


def _decoder(workload: str, side: str, circuit: Any) -> Any:
    from app.connectors.avro_codec import AvroCodec
    from loadtests.workloads import WORKLOADS

    if side == "peer":
        return AvroCodec(json.loads(WORKLOADS[workload].peer_out_schema))
    view = next(v for v in circuit.views if v.output is not None)
    return AvroCodec(view.output.value_schema)


def _sleep_until(wall_ms: float) -> None:
    time.sleep(max(0.0, wall_ms / 1000 - time.time()))


def continuous_spec(
    side: str,
    workload: str,
    bootstrap: str,
    topics: tuple[str, str],
    master: str,
    run_dir: Path,
    trigger_ms: int,
    timeout_s: float,
    inputs: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``loadtests.side`` spec of a side running as a continuous service (not ``--once``)
    from ``topics[0]`` to ``topics[1]``: what the latency probe and ``loadtests.idle_cpu`` run.
    ``inputs``: a workload of several inputs (d), the topic of each program format field
    (:attr:`Workload.inputs <loadtests.workloads.Workload.inputs>`); ``topics[0]`` is then the
    first of them."""
    spec: dict[str, Any] = {
        "side": side,
        "workload": workload,
        "bootstrap": bootstrap,
        "topic": topics[0],
        "out": topics[1],
        "master": master,
        "shuffle_partitions": 2,
        "max_records_per_step": 200_000,
        "work_dir": str(run_dir),
        "once": False,
        "trigger_ms": trigger_ms,
        "timeout": timeout_s,
    }
    if inputs is not None:
        spec["topics"] = dict(inputs)
    return spec


def input_topics(workload: str, topic: str) -> dict[str, str]:
    """The topic of each input of ``workload`` (its program's format fields): ``topic`` for
    one input, ``<topic>.<field>`` each for several, as ``loadtests.bench`` names them."""
    from loadtests.workloads import WORKLOADS

    names = WORKLOADS[workload].inputs
    return {names[0]: topic} if len(names) == 1 else {n: f"{topic}.{n}" for n in names}


def _events(
    workload: str, circuit: Any, inputs: Mapping[str, str], times: Sequence[float]
) -> Iterator[Produced]:
    """The events the generator produced (their produce ``times``), regenerated from the
    seed (deterministic) rather than held: a run can produce millions. Each carries the name
    of the table its topic feeds (``inputs``: as :func:`input_topics`)."""
    from loadtests.bench import input_schema, pair_shape_of, shape_of
    from loadtests.generator import pair_timeline, timeline
    from loadtests.workloads import WORKLOADS

    table_of = {t.topic: t.name for t in circuit.tables}
    names = [table_of[inputs[n]] for n in WORKLOADS[workload].inputs]
    if len(names) == 1:
        shape = shape_of(workload, input_schema(workload))
        for i, row, late in timeline(shape, len(times)):
            yield Produced(times[i], row, late, names[0])
    else:
        for i, side, row, late in pair_timeline(pair_shape_of(workload), len(times)):
            yield Produced(times[i], row, late, names[side])


def measure(
    bootstrap: str,
    workload: str,
    side: str,
    master: str,
    partitions: int,
    rate: float,
    work: Path,
    warmup_s: float = 30,
    measure_s: float = 120,
    tail_s: float = 60,
    trigger_ms: int = 0,
) -> dict[str, Any]:
    """One latency run of one side at ``rate`` events/s; the result dict of the bench JSON.

    ``trigger_ms``: the query's trigger interval, 0 (both sides' default) for steps back to
    back.

    The side starts first (Spark start-up is not measured); the generator starts once the
    side's query runs. Warm-up: ``warmup_s`` from the side's first step with input (its Python
    workers and JVM code paths warm, the start-up backlog drained); then ``measure_s``
    measured; then ``tail_s`` at the same rate, so outputs due in the measured period can still
    become visible. CPU seconds per million events: the side's process tree, measured period
    only (steady state, no start-up). A workload of two inputs (d) reads a topic each, of
    ``partitions`` partitions; ``rate`` counts the events of both."""
    from app.program.compile import compile_program
    from loadtests.bench import TreeCpu, create_topic
    from loadtests.workloads import WORKLOADS

    w = WORKLOADS[workload]
    topic = f"latency.{workload}.{uuid.uuid4().hex[:6]}"
    out_topic = f"{topic}.{side}.out"
    inputs = input_topics(workload, topic)
    for name in (*inputs.values(), out_topic):
        create_topic(bootstrap, name, partitions)
    run_dir = Path(tempfile.mkdtemp(dir=work, prefix=f"latency-{side}-"))
    program = run_dir / "rule.sql"
    program.write_text(w.program.format(out=out_topic, **inputs))
    circuit = compile_program(program)
    rule = rule_for(circuit)
    spec = continuous_spec(
        side,
        workload,
        bootstrap,
        (next(iter(inputs.values())), out_topic),
        master,
        run_dir,
        trigger_ms,
        1800 + warmup_s + measure_s + tail_s,
        inputs if len(inputs) > 1 else None,
    )
    the_side = _Side(spec, run_dir / "side.log")
    times_path = run_dir / "produce_ms.bin"
    ctx = multiprocessing.get_context("spawn")
    ready, go, stop = ctx.Event(), ctx.Event(), ctx.Event()
    count = int(rate * (warmup_s + measure_s + tail_s + _ENCODED_SLACK_S))
    events_path = _encoded_file(work, workload, count)
    gen = ctx.Process(
        target=_generate,
        args=(
            bootstrap,
            tuple(inputs[n] for n in w.inputs),
            workload,
            rate,
            str(events_path),
            count,
            ready,
            go,
            stop,
            str(times_path),
        ),
    )
    probe: _Probe | None = None
    try:
        gen.start()  # encodes its events while the side starts
        the_side.wait_for(the_side.ready, "did not start", 900)
        while not ready.wait(5):
            if not gen.is_alive():
                raise RuntimeError(f"the generator failed (exit code {gen.exitcode})")
        cpu = TreeCpu(the_side.proc.pid)
        probe = _Probe(bootstrap, out_topic)
        go.set()
        the_side.wait_for(the_side.first_input, "ran no step with input", 900)
        start = the_side.first_input_ms + warmup_s * 1000
        end = start + measure_s * 1000
        _sleep_until(start)
        cpu_start = cpu.total()
        _sleep_until(end)
        cpu_s = cpu.total() - cpu_start
        _sleep_until(end + tail_s * 1000)
        stop.set()
        gen.join(300)
        time.sleep(1.0)  # what was in flight at the last produce
        records = probe.records
        observed_until = probe.stop()
        probe = None
        cpu.stop()
        if gen.exitcode != 0:
            raise RuntimeError(f"the generator failed (exit code {gen.exitcode})")
    except BaseException:
        the_side.proc.kill()
        raise
    finally:
        if gen.is_alive():
            gen.kill()
        if probe is not None:
            probe.stop()
    state = the_side.stop()
    times = array("d")
    with open(times_path, "rb") as f:
        times.frombytes(f.read())
    decode = _decoder(workload, side, circuit).decode
    outputs = (Visible(at, decode(value)) for at, value in records)
    attribution = attribute(_events(workload, circuit, inputs, times), outputs, rule)
    due = expected(_events(workload, circuit, inputs, times), rule)
    result = summarize(attribution, due, start, end, observed_until)
    in_window = sum(1 for t in times if start <= t < end)
    result.update(
        side=side,
        master=master,
        partitions=partitions,
        rate_target=round(rate, 1),
        rate_achieved=round(in_window / measure_s, 1),
        events=len(times),
        outputs=len(records),
        warmup_s=warmup_s,
        measure_s=measure_s,
        tail_s=tail_s,
        trigger_ms=trigger_ms,
        cold_start_s=round((the_side.first_input_ms - times[0]) / 1000, 1) if times else None,
        cpu_s_per_m=round(cpu_s / in_window * 1e6, 1) if in_window else None,
        state=state.get("state"),
        steps=state.get("steps"),
        step_ms=step_lengths(state.get("step_log") or [], start, end),
        slowest=slowest_dues(attribution.samples, state.get("step_log") or [], start, end),
    )
    return result


def main() -> None:
    from loadtests.bench import broker
    from loadtests.workloads import WORKLOADS

    parser = argparse.ArgumentParser(
        description="Produce-to-visible latency of each side at a fixed input rate"
    )
    parser.add_argument("--workload", choices=sorted(WORKLOADS), required=True)
    parser.add_argument(
        "--rate", type=float, required=True, help="input events/s (of all its inputs together)"
    )
    parser.add_argument("--sides", nargs="+", default=["tidemark", "peer"])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--warmup-seconds", type=float, default=30)
    parser.add_argument("--measure-seconds", type=float, default=120)
    parser.add_argument("--tail-seconds", type=float, default=60)
    parser.add_argument(
        "--trigger-ms",
        type=int,
        default=0,
        help="trigger interval of both sides' queries (default 0: back to back, their default)",
    )
    args = parser.parse_args()
    if "peer" in args.sides:
        subprocess.run(["bash", str(ROOT / "scripts" / "fetch-spark-peer.sh")], check=True)
    bootstrap, local = broker()
    try:
        with tempfile.TemporaryDirectory(prefix="latency-") as tmp:
            for side in args.sides:
                r = measure(
                    bootstrap,
                    args.workload,
                    side,
                    args.master,
                    args.partitions,
                    args.rate,
                    Path(tmp),
                    args.warmup_seconds,
                    args.measure_seconds,
                    args.tail_seconds,
                    args.trigger_ms,
                )
                print(json.dumps(r), flush=True)
    finally:
        if local is not None:
            local.cleanup()


if __name__ == "__main__":
    main()
