"""SPEC L3 aggregates: NULL handling, result types, DISTINCT, ARG_MAX/ARG_MIN ties, retraction."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from app.circuit.aggregates import accumulator_for
from app.circuit.ir import AggCall, ColumnRef, SqlType

INT = SqlType("INT")
BIGINT = SqlType("BIGINT")
DOUBLE = SqlType("DOUBLE")
DEC = SqlType("DECIMAL", True, 10, 2)


def run(fn: str, rows: list[tuple[Any, ...]], result: SqlType, distinct: bool = False,
        arity: int = 1) -> Any:
    args = tuple(ColumnRef(f"a{i}", INT) for i in range(arity))
    acc = accumulator_for(AggCall(fn, args, distinct, result))
    for seq, row in enumerate(rows):
        acc.add(row, seq)
    return acc.result()


def test_l3_count_star_counts_rows_and_count_x_counts_non_null() -> None:
    rows = [(1,), (None,), (1,)]
    assert run("COUNT", rows, BIGINT, arity=0) == 3
    assert run("COUNT", rows, BIGINT) == 2
    assert run("COUNT", rows, BIGINT, distinct=True) == 1


def test_l3_sum_min_max_avg_ignore_nulls_and_are_null_without_input() -> None:
    for fn in ("SUM", "MIN", "MAX", "AVG"):
        assert run(fn, [(None,), (None,)], DOUBLE) is None
        assert run(fn, [], DOUBLE) is None
    assert run("SUM", [(1,), (None,), (2,)], BIGINT) == 3
    assert run("MIN", [(5,), (None,), (2,)], INT) == 2
    assert run("MAX", [(5,), (None,), (2,)], INT) == 5


def test_l3_avg_of_integers_is_double() -> None:
    result = run("AVG", [(1,), (2,)], DOUBLE)
    assert result == 1.5 and isinstance(result, float)


def test_l3_avg_of_decimal_is_decimal_rounded_half_up_to_the_result_scale() -> None:
    avg_type = SqlType("DECIMAL", True, 14, 6)  # AVG(DECIMAL(10, 2)): scale + 4
    assert run("AVG", [(Decimal("1.00"),), (Decimal("1.00"),), (Decimal("2.00"),)],
               avg_type) == Decimal("1.333333")
    assert run("AVG", [(Decimal("0.00"),), (Decimal("0.01"),), (Decimal("0.01"),)],
               SqlType("DECIMAL", True, 10, 2)) == Decimal("0.01")


def test_l3_sum_of_integers_is_exact_and_null_outside_bigint() -> None:
    """Integer overflow is NULL (docs/language.md): only the exact total counts, so a sum that
    passes BIGINT's limits on the way but ends inside them is that total."""
    top, bottom = 2**63 - 1, -(2**63)
    assert run("SUM", [(top,), (top,), (-top,), (-5,)], BIGINT) == top - 5
    assert run("SUM", [(bottom,), (5,), (-5,)], BIGINT) == bottom
    assert run("SUM", [(top,), (1,)], BIGINT) is None
    assert run("SUM", [(bottom,), (-1,)], BIGINT) is None
    assert run("AVG", [(top,), (1,)], DOUBLE) == 2**62


def test_l3_sum_of_decimal_is_exact() -> None:
    rows = [(Decimal("0.10"),)] * 3
    assert run("SUM", rows, SqlType("DECIMAL", True, 20, 2)) == Decimal("0.30")


def test_l3_sum_of_doubles_does_not_depend_on_input_order() -> None:
    rows = [(0.1,), (1e16,), (-1e16,), (0.2,)]
    assert run("SUM", rows, DOUBLE) == run("SUM", list(reversed(rows)), DOUBLE)


def test_l3_distinct_sum_and_avg() -> None:
    rows = [(2,), (2,), (4,), (None,)]
    assert run("SUM", rows, BIGINT, distinct=True) == 6
    assert run("AVG", rows, DOUBLE, distinct=True) == 3.0


@pytest.mark.parametrize(("fn", "expected"), [("ARG_MAX", "first"), ("ARG_MIN", "low")])
def test_l3_arg_max_and_arg_min_ties_go_to_the_earliest_row(fn: str, expected: str) -> None:
    rows = [("low", 1), ("first", 9), ("ignored", None), ("second", 9), ("late-low", 1)]
    assert run(fn, rows, SqlType("VARCHAR"), arity=2) == expected


def test_l3_retraction_undoes_an_insertion() -> None:
    call = AggCall("MAX", (ColumnRef("a", INT),), False, INT)
    acc = accumulator_for(call)
    acc.add((5,), 1)
    acc.add((9,), 2)
    acc.add((9,), 3, -1)
    assert acc.result() == 5
    arg = accumulator_for(AggCall("ARG_MAX", (ColumnRef("v", INT), ColumnRef("b", INT)),
                                  False, INT))
    arg.add((1, 5), 1)
    arg.add((2, 5), 2)
    arg.add((1, 5), 3, -1)
    assert arg.result() == 2


def test_l3_unknown_aggregate_is_named() -> None:
    with pytest.raises(NotImplementedError, match="MEDIAN"):
        accumulator_for(AggCall("MEDIAN", (), False, INT))
