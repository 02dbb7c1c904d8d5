"""OVER aggregates, step by step: which rows a frame reads, when a row is written, and
what is kept (docs/semantics.md, OVER aggregates; SPEC S5, S10, S11, S12).

One :class:`OverPartition` per partition (equal PARTITION BY values) of one
:class:`~app.circuit.ir.Over`. Rows arrive with their time ``t`` (the ORDER BY column), an
arrival sequence ``seq`` (any comparable value that grows with arrival) and the evaluated
arguments of each aggregate; a row waits until the waterline ``w`` of its time column
passes it (``w > t``), then :meth:`OverPartition.release` writes it with its aggregates'
values over its frame:

- RANGE ``p`` PRECEDING: every row of the partition with time in ``[t - p, t]``, its peers
  (rows of equal time) included, so peers get equal values;
- ROWS ``n`` PRECEDING: the row and its ``n`` predecessors in (time, seq) order;
- UNBOUNDED PRECEDING: every earlier row (RANGE: and every peer).

Once ``w > t`` no row at or below ``t`` can still be accepted (S5: a later row is at or
above ``w``), so a written value never changes and peers are all in hand. A future row is
at or above ``w``, so a frame can only read rows at or above ``w - p`` (RANGE), the last
``n`` written rows (ROWS), or, UNBOUNDED, the running aggregates of every written row: the
rest is freed (S11), and a partition with nothing left is dropped.

The aggregates are :mod:`app.circuit.aggregates`' accumulators. The reference evaluator and
the Spark runtime's OVER operator (app/runtime/operators/over_operator.py) both run this module, the
latter over a state document (:meth:`OverPartition.to_doc`) whose values it encodes.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.circuit.aggregates import Accumulator, accumulator_for
from app.circuit.ir import Over

__all__ = ["Held", "OverPartition", "frame_values"]


@dataclass
class Held:
    """One row a partition holds: its time, arrival, aggregate arguments (one tuple per
    aggregate) and ``payload``, what is written with its values (opaque here)."""

    time: int
    seq: Any
    args: tuple[tuple[Any, ...], ...]
    payload: Any = None

    @property
    def order(self) -> tuple[int, Any]:
        return (self.time, self.seq)


@dataclass
class OverPartition:
    """The rows of one partition a future frame can read (``written``, in (time, seq)
    order, payloads dropped), the rows waiting for the waterline (``waiting``), and, for an
    UNBOUNDED frame, the running accumulators of every written row (``running``)."""

    written: list[Held] = field(default_factory=list)
    waiting: list[Held] = field(default_factory=list)
    running: list[Accumulator] | None = None

    def add(self, row: Held) -> None:
        """Hold an accepted row until the waterline passes its time."""
        self.waiting.append(row)

    @property
    def empty(self) -> bool:
        """Nothing a future frame can read and nothing waiting: the partition can be
        dropped (an UNBOUNDED frame's running aggregates are never dropped)."""
        return not self.written and not self.waiting and self.running is None

    @property
    def rows_held(self) -> int:
        """S11: the rows held (the running aggregates count as one)."""
        return len(self.written) + len(self.waiting) + (self.running is not None)

    def release(self, over: Over, waterline: int | None) -> list[tuple[Any, tuple[Any, ...]]]:
        """The rows the waterline now passes (``t < w``), in (time, seq) order, each as
        (payload, its aggregates' values); then frees what no future frame can read."""
        if waterline is None:
            return []
        ready = sorted((r for r in self.waiting if r.time < waterline), key=lambda r: r.order)
        self.waiting = [r for r in self.waiting if r.time >= waterline]
        if over.preceding is None:
            return self._running(over, ready)
        out = self._sliding(over, ready)
        pool = self.written + ready
        if over.frame == "rows":
            self.written = pool[len(pool) - over.preceding:] if over.preceding else []
        else:
            floor = waterline - over.preceding
            self.written = [r for r in pool if r.time >= floor]
        for row in self.written:
            row.payload = None
        return out

    def _sliding(self, over: Over, ready: list[Held]) -> list[tuple[Any, tuple[Any, ...]]]:
        pool = self.written + ready
        times = [r.time for r in pool]
        out = []
        for index in range(len(self.written), len(pool)):
            row = pool[index]
            assert over.preceding is not None
            if over.frame == "rows":
                frame = pool[max(0, index - over.preceding):index + 1]
            else:
                low = bisect.bisect_left(times, row.time - over.preceding)
                high = bisect.bisect_right(times, row.time)
                frame = pool[low:high]
            out.append((row.payload, frame_values(over, frame)))
        return out

    def _running(self, over: Over, ready: list[Held]) -> list[tuple[Any, tuple[Any, ...]]]:
        if not ready:
            return []
        if self.running is None:
            self.running = [accumulator_for(call) for _, call in over.aggregates]
        out: list[tuple[Any, tuple[Any, ...]]] = []
        index = 0
        while index < len(ready):
            # RANGE: a row's peers are in its frame, so they are added before any is written.
            end = index + 1
            if over.frame == "range":
                while end < len(ready) and ready[end].time == ready[index].time:
                    end += 1
            for row in ready[index:end]:
                _add(self.running, row)
            values = tuple(a.result() for a in self.running)
            out.extend((row.payload, values) for row in ready[index:end])
            index = end
        return out

    def to_doc(self, encode: Callable[[int, Any], Any]) -> dict[str, Any]:
        """The partition as JSON values; ``encode(aggregate index, value)`` encodes one
        argument value (the first argument of that aggregate)."""
        return {
            "written": [_held_doc(r, encode) for r in self.written],
            "waiting": [_held_doc(r, encode) for r in self.waiting],
            "running": None if self.running is None else [
                [[encode(i, v), n] for v, n in a.snapshot()]
                for i, a in enumerate(self.running)
            ],
        }

    @classmethod
    def from_doc(cls, over: Over, doc: dict[str, Any],
                 decode: Callable[[int, Any], Any]) -> OverPartition:
        """The partition :meth:`to_doc` wrote; ``decode`` is ``encode``'s inverse."""
        part = cls([_held(r, decode) for r in doc["written"]],
                   [_held(r, decode) for r in doc["waiting"]])
        if doc["running"] is not None:
            part.running = []
            for i, (_, call) in enumerate(over.aggregates):
                accumulator = accumulator_for(call)
                accumulator.restore([(decode(i, v), n) for v, n in doc["running"][i]])
                part.running.append(accumulator)
        return part


def frame_values(over: Over, frame: Sequence[Held]) -> tuple[Any, ...]:
    """Each aggregate's value over the rows of one frame."""
    accumulators = [accumulator_for(call) for _, call in over.aggregates]
    for row in frame:
        _add(accumulators, row)
    return tuple(a.result() for a in accumulators)


def _add(accumulators: Sequence[Accumulator], row: Held) -> None:
    for accumulator, args in zip(accumulators, row.args, strict=True):
        accumulator.add(args, 0)


def _held_doc(row: Held, encode: Callable[[int, Any], Any]) -> list[Any]:
    args = [[encode(i, v) for v in a] for i, a in enumerate(row.args)]
    return [row.time, row.seq, args, row.payload]


def _held(doc: list[Any], decode: Callable[[int, Any], Any]) -> Held:
    time, seq, args, payload = doc
    return Held(time, seq, tuple(tuple(decode(i, v) for v in a) for i, a in enumerate(args)),
                payload)
