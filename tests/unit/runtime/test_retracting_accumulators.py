"""SPEC S18: the state operator's accumulators over an updating relation's changes agree
with the reference evaluator's (app/circuit/aggregates.py), whatever the inserts and
retractions: COUNT, SUM and AVG take the weighted value back, MIN, MAX and the DISTINCT forms
keep the multiset of values. Each retraction takes back a value inserted before (a changelog
retracts only rows it wrote)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.circuit.aggregates import accumulator_for
from app.circuit.ir import AggCall, ColumnRef, SqlType
from app.runtime.operators.aggregate import _RetractingAcc

_TYPES = {"BIGINT": SqlType("BIGINT"), "DOUBLE": SqlType("DOUBLE")}
#: (function, DISTINCT, argument type, result type) of each call checked.
_CALLS = [
    ("COUNT", False, None, "BIGINT"),
    ("COUNT", False, "BIGINT", "BIGINT"),
    ("COUNT", True, "BIGINT", "BIGINT"),
    ("SUM", False, "BIGINT", "BIGINT"),
    ("SUM", False, "DOUBLE", "DOUBLE"),
    ("AVG", False, "BIGINT", "DOUBLE"),
    ("AVG", False, "DOUBLE", "DOUBLE"),
    ("MIN", False, "BIGINT", "BIGINT"),
    ("MAX", False, "DOUBLE", "DOUBLE"),
]


def _call(fn: str, distinct: bool, arg: str | None, result: str) -> AggCall:
    args = () if arg is None else (ColumnRef("x", _TYPES[arg]),)
    return AggCall(fn, args, distinct, _TYPES[result])


def _changes(values: list[int | None], retract: list[bool]) -> list[tuple[int | None, int]]:
    """Every value inserted; after each, maybe the retraction of an earlier one still in."""
    held: list[int | None] = []
    out: list[tuple[int | None, int]] = []
    for value, back in zip(values, retract, strict=False):
        out.append((value, 1))
        held.append(value)
        if back and held:
            out.append((held.pop(0), -1))
    return out


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=12),
    retract=st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_s18_retracting_accumulators_agree_with_the_reference(
    values: list[int | None], retract: list[bool]
) -> None:
    changes = _changes(values, retract)
    for fn, distinct, arg, result in _CALLS:
        call = _call(fn, distinct, arg, result)
        spark, oracle = _RetractingAcc(call), accumulator_for(call)
        for i, (value, weight) in enumerate(changes):
            typed: Any = value if value is None or arg != "DOUBLE" else value / 4
            args = () if arg is None else (typed,)
            spark.add(args, (0, 0, i), weight)
            oracle.add(args, i, weight)
            assert spark.result() == oracle.result(), (fn, distinct, arg, changes[: i + 1])


def test_s18_min_falls_back_to_the_next_value_when_its_last_copy_is_retracted() -> None:
    acc = _RetractingAcc(_call("MIN", False, "BIGINT", "BIGINT"))
    for value, weight in [(1, 1), (1, 1), (2, 1), (1, -1)]:
        acc.add((value,), (0, 0, 0), weight)
    assert acc.result() == 1
    acc.add((1,), (0, 0, 0), -1)
    assert acc.result() == 2
    acc.add((2,), (0, 0, 0), -1)
    assert acc.result() is None


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=10),
    retract=st.lists(st.booleans(), min_size=10, max_size=10),
    order=st.randoms(use_true_random=False),
)
def test_s16_s18_a_steps_changes_in_any_order_give_the_same_result(
    values: list[int | None], retract: list[bool], order: Any
) -> None:
    """A regular join of updating views writes a pair's retraction and its insertion in one
    step in any order (Spark's join has none; the reference's may retract a pair before the
    insertion it takes back, semantics.md): a value's count may go below zero within the
    step, and the result once all of the step's changes are in is that of the changes in
    the order a changelog writes them."""
    changes = _changes(values, retract)
    shuffled = list(changes)
    order.shuffle(shuffled)
    for fn, distinct, arg, result in _CALLS:
        call = _call(fn, distinct, arg, result)
        in_order, spark, oracle = accumulator_for(call), _RetractingAcc(call), accumulator_for(call)
        for i, (value, weight) in enumerate(changes):
            in_order.add(() if arg is None else (value,), i, weight)
        for i, (value, weight) in enumerate(shuffled):
            args = () if arg is None else (value,)
            spark.add(args, (0, 0, i), weight)
            oracle.add(args, i, weight)
        assert spark.result() == oracle.result() == in_order.result(), (fn, distinct, shuffled)
