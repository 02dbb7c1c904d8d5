"""The rules of one slot of the join operator (SPEC S16, ADR 0017), in plain Python: what
:mod:`app.runtime.operators.join_operator` runs in each slot's call, over the step's rows in
arrival order (a table's rows by Kafka partition and offset, as the reference evaluator takes
them). The processor Spark unpickles names this module, so it imports nothing of the Spark
plan (the driver runs the processor's pre-init in a fresh Python process each time a query
starts).

- OUTER interval join (:func:`_interval_step`; a window join is one on ``window_end``
  with a bound of 0, whose floor is one more than the waterline, S10): matches each row with
  the other side's rows (each pair also passing the conditions that read both sides, which
  the reference evaluator's own functions evaluate here over the pair's values, so both
  agree by construction)
  it holds of the same key within the bound, and writes each pair at once (insert-only, as
  the INNER join); holds the row (a NULL key matches nothing, and is held like any other
  until it is done), unless its time is NULL (within no bound: written padded at once on an
  outer side); writes each held row the other side's floor now passes (a left row at ``x``
  once ``w_right > x + upper``, a right row at ``y`` once ``w_left > y - lower``) padded
  with NULLs if it is on an outer side and never matched, and frees it.
- Temporal join (:func:`_temporal_step`): stores each versioned row as the version of its
  key at its time (a later row of the key at the same time replaces it; a deletion, the
  tombstone of a table keyed by its Kafka key, is a version without a row); holds each probe
  row (a NULL time is valid for no version: LEFT writes it padded at once); writes every
  held probe row below the versions' waterline with the version of its key with the
  greatest time at or below its own (LEFT: padded without one; INNER: dropped), and frees
  it; then frees per key every version older than the latest one at or below the lesser of
  both waterlines (no lookup can find it again), and a key whose one version left is a
  deletion. AS OF processing time, every row's time is the step's batch time ``T`` and
  both floors are ``T + 1``: a probe row is written in its own step, after the step's
  versions, and one version per key stays. The residual is checked after the operator,
  over the joined columns
  (:func:`app.runtime.operators.join_operator.operator_joined`).
- OUTER join without a time bound (:func:`_regular_step`; SPEC S16, S18): keeps each
  side's rows per key as a Z-set (row JSON -> weight, beside each row the pair
  conditions' values; a row whose weight sums to 0 leaves; a NULL key, or a row failing
  its side's conditions, is a key of its own that nothing matches), and writes for each
  key the step touched its content after the step less its content before, retractions
  first, by the reference evaluator's own rules (app/circuit/regular_join.py). A row's
  ``w`` is its weight (-1: a retraction of an updating input). No probes: no waterline
  frees a row or proves it unmatched.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.circuit.ir import Expr, TimeStep
from app.circuit.regular_join import Pair as ContentPair
from app.circuit.regular_join import add_weight, key_changes, key_content
from app.circuit.scalar import evaluate_expr, is_true
from app.circuit.waterline import derived_waterline
from app.runtime.operators.slot_operator import advance_waterlines, decode_values, is_set

__all__ = ["JoinOperatorSpec", "Pair", "step_slot"]

#: A slot's output: each side's columns as JSON, None for NULLs (of an OUTER join without
#: a time bound, also whether the row is a retraction).
Pair = tuple[str | None, str | None] | tuple[str | None, str | None, bool]
#: The key of a regular join's rows that match nothing (a NULL key, or failing its side's
#: conditions): no key's JSON is empty.
_UNMATCHED = ""


@dataclass(frozen=True)
class JoinOperatorSpec:
    """What a slot's call needs: the join's kind and form, an interval join's bound
    ``x + lower <= y <= x + upper`` (ms; 0 for a temporal join), and each side's table
    LATENESS (ms), by which its probes give w(t)."""

    kind: str  # inner | left | right | full
    form: str  # interval | window | temporal | regular
    lower: int
    upper: int
    left_lateness: int
    right_lateness: int
    #: The probe side is a native aggregate's final rows, which Spark writes a step after
    #: the step whose waterline completes their window (its watermark lags one batch).
    probe_lags: bool = False
    #: Of a temporal join AS OF a derived time attribute of the probe table (a boundary's
    #: window_start): the steps from its LATENESS column's waterline to the probes' floor.
    probe_steps: tuple[TimeStep, ...] = ()
    #: A temporal join AS OF processing time (S13): every row's time is the step's batch
    #: time T (no probes), and every version at or below T has come: both floors are T + 1.
    processing_time: bool = False
    #: Of an OUTER interval or window join, the conditions that read both sides (None:
    #: none), checked on each pair, and the SQL type of each column they read, by which a
    #: row's values are decoded (:func:`app.runtime.operators.slot_operator.decode_values`).
    pair: Expr | None = None
    pair_types: tuple[tuple[str, str], ...] = ()


def step_slot(
    spec: JoinOperatorSpec, doc: dict[str, Any] | None, rows: list[dict[str, Any]]
) -> tuple[list[Pair], dict[str, Any]]:
    """One step of one slot: its output pairs and its new state, from its state before the
    step and the step's wire rows: ``side`` (L, R, or P for a probe), ``k`` (the keys as
    JSON, None if any is NULL), ``t`` (the bound or AS OF column in ms; a probe's: its
    table's step maximum), ``tbl`` (a probe's table: L or R), ``pt`` and ``of`` (arrival:
    Kafka partition and offset), ``row`` (the side's columns as JSON) and ``vals`` (the
    columns the pair conditions read, :func:`~app.runtime.operators.slot_operator.decode_values`;
    None without any)."""
    if spec.form == "regular":
        doc = doc or {"rows": {"L": {}, "R": {}}, "vals": {"L": {}, "R": {}}}
        return _regular_step(spec, doc, rows), doc
    doc = doc or {"w": {"L": None, "R": None}, "held": {"L": [], "R": []}, "versions": {}}
    started = doc["w"]["L"]
    advance_waterlines(doc["w"], rows, {"L": spec.left_lateness, "R": spec.right_lateness})
    arrivals = [
        (r["side"], r["k"], int(r["t"]) if is_set(r["t"]) else None, r["row"], r.get("vals"))
        for r in sorted(
            (r for r in rows if r["side"] != "P"),
            key=lambda r: (r["side"], int(r["pt"]), int(r["of"])),
        )
    ]
    if spec.form != "temporal":
        return _interval_step(spec, doc, arrivals), doc
    if spec.processing_time:
        times = [a[2] for a in arrivals if a[2] is not None]
        if times:
            doc["w"]["L"] = doc["w"]["R"] = max(times) + 1
        return _temporal_step(spec, doc, arrivals, doc["w"]["L"]), doc
    # The least time a future probe row can have: at or above w(L), or, of a lagging
    # aggregate, above the w(L) this step started with.
    probe_floor = derived_waterline(spec.probe_steps,
                                    started if spec.probe_lags else doc["w"]["L"])
    return _temporal_step(spec, doc, arrivals, probe_floor), doc


#: One arrival of a step: side, key, time, row and the pair conditions' values.
Arrival = tuple[str, Any, Any, str, Any]


def _interval_step(
    spec: JoinOperatorSpec, doc: dict[str, Any], arrivals: list[Arrival]
) -> list[Pair]:
    """An OUTER interval join's step (module docstring); updates ``doc``."""
    # side -> [key, time, row, matched] (and, with pair conditions, the row's values)
    held: dict[str, list[list[Any]]] = doc["held"]
    # Each side's held rows by key (the same lists: marking one matched marks it in both).
    by_key: dict[str, dict[str, list[list[Any]]]] = {"L": {}, "R": {}}
    for side in ("L", "R"):
        for mine in held[side]:
            if mine[0] is not None:
                by_key[side].setdefault(mine[0], []).append(mine)
    out: list[Pair] = []
    for side, key, time, row, vals in arrivals:
        other = "R" if side == "L" else "L"
        mine = [key, time, row, False]
        if spec.pair is not None:
            mine.append(vals)
        if time is None:
            # A NULL time is within no bound: nothing can ever match it.
            if _outer(spec, side):
                out.append(_padded(side, row))
            continue
        for candidate in by_key[other].get(key, []) if key is not None else []:
            x, y = (time, candidate[1]) if side == "L" else (candidate[1], time)
            if x + spec.lower <= y <= x + spec.upper and _pair_passes(spec, mine, candidate):
                out.append((row, candidate[2]) if side == "L" else (candidate[2], row))
                mine[3] = candidate[3] = True
        held[side].append(mine)
        if key is not None:
            by_key[side].setdefault(key, []).append(mine)
    for side in ("L", "R"):
        floor = doc["w"]["R" if side == "L" else "L"]
        if floor is None:
            continue
        if spec.form == "window":
            floor += 1  # a future row's window_end is above the waterline (S10)
        kept = []
        for mine in held[side]:
            edge = mine[1] + spec.upper if side == "L" else mine[1] - spec.lower
            if floor > edge:
                if _outer(spec, side) and not mine[3]:
                    out.append(_padded(side, mine[2]))
            else:
                kept.append(mine)
        held[side] = kept
    return out


def _temporal_step(
    spec: JoinOperatorSpec,
    doc: dict[str, Any],
    arrivals: list[Arrival],
    probe_floor: int | None,
) -> list[Pair]:
    """A temporal join's step (module docstring; the reference evaluator's
    ``_TemporalRuntime``); updates ``doc``. ``held["L"]``: [key, time, row] in arrival
    order; ``versions``: key -> [[time, row], ...], a deletion's row None."""
    held: list[list[Any]] = doc["held"]["L"]
    versions: dict[str, list[list[Any]]] = doc["versions"]
    out: list[Pair] = []
    for side, key, time, row, _ in arrivals:
        if side == "R":
            if key is not None and time is not None:
                # A version with a NULL key or time can never be found.
                kept = [v for v in versions.get(key, []) if v[0] != time]
                versions[key] = [*kept, [time, row]]
        elif time is None:
            # A NULL time is valid for no version.
            if spec.kind == "left":
                out.append((row, None))
        else:
            held.append([key, time, row])
    floor = doc["w"]["R"]
    if floor is not None:
        kept = []
        for key, time, row in held:
            if time >= floor:
                kept.append([key, time, row])
                continue
            found = [v for v in versions.get(key, []) if v[0] <= time] if key is not None else []
            version = max(found, key=lambda v: v[0])[1] if found else None
            if version is not None:
                out.append((row, version))
            elif spec.kind == "left":
                out.append((row, None))
        doc["held"]["L"] = kept
        if probe_floor is not None:
            least = min(floor, probe_floor)
            for key, times in list(versions.items()):
                below = [v[0] for v in times if v[0] <= least]
                if below:
                    latest = max(below)
                    left = [v for v in times if v[0] >= latest]
                    if len(left) == 1 and left[0][1] is None:
                        del versions[key]
                    else:
                        versions[key] = left
    return out


def _regular_step(
    spec: JoinOperatorSpec, doc: dict[str, Any], rows: list[dict[str, Any]]
) -> list[Pair]:
    """An OUTER join without a time bound's step (module docstring); updates ``doc``:
    ``rows[side][key]`` is the side's Z-set of the key (row JSON -> weight), ``vals[side]``
    each held row's pair-condition values (a row's key follows from its values, so one
    entry per row serves every key)."""
    held: dict[str, dict[str, dict[str, int]]] = doc["rows"]
    values: dict[str, dict[str, Any]] = doc["vals"]
    before: dict[str, Counter[ContentPair[str, str]]] = {}
    for r in rows:
        side, row = r["side"], r["row"]
        key = r["k"] if is_set(r["k"]) else _UNMATCHED
        if key not in before:
            before[key] = _regular_content(spec, doc, key)
        weights = held[side].setdefault(key, {})
        add_weight(weights, row, int(r["w"]))
        if row not in weights:
            values[side].pop(row, None)
        elif spec.pair is not None:
            values[side].setdefault(row, r["vals"] if is_set(r.get("vals")) else None)
        if not weights:
            del held[side][key]
    changes = key_changes((was, _regular_content(spec, doc, key)) for key, was in before.items())
    return [(left, right, weight < 0) for (left, right), weight in changes]


def _regular_content(
    spec: JoinOperatorSpec, doc: dict[str, Any], key: str
) -> Counter[ContentPair[str, str]]:
    """The joined rows of one key (app/circuit/regular_join.py), as pair -> weight."""
    values = doc["vals"]
    matches: Callable[[str, str], bool] = (
        (lambda _l, _r: False) if key == _UNMATCHED
        else lambda l_row, r_row: _values_pass(
            spec, values["L"].get(l_row), values["R"].get(r_row))
    )
    return key_content(spec.kind, doc["rows"]["L"].get(key, {}),
                       doc["rows"]["R"].get(key, {}), matches)


def _pair_passes(spec: JoinOperatorSpec, mine: list[Any], candidate: list[Any]) -> bool:
    """Whether two held entries pass the join's conditions of both sides (SQL truth)."""
    return _values_pass(spec, mine[4] if spec.pair is not None else None,
                        candidate[4] if spec.pair is not None else None)


def _values_pass(spec: JoinOperatorSpec, mine: str | None, other: str | None) -> bool:
    """Whether two rows' ``vals`` pass the join's conditions of both sides (SQL truth)."""
    if spec.pair is None:
        return True
    types = dict(spec.pair_types)
    # Spark's to_json leaves a NULL field out of a row's values: every column read is NULL
    # until the row's own side gives it.
    values: dict[str, Any] = dict.fromkeys(types)
    values.update(decode_values(mine, types))
    values.update(decode_values(other, types))
    return is_true(evaluate_expr(spec.pair, values))


def _outer(spec: JoinOperatorSpec, side: str) -> bool:
    return spec.kind == "full" or (spec.kind == "left") == (side == "L")


def _padded(side: str, row: str) -> Pair:
    return (row, None) if side == "L" else (None, row)
