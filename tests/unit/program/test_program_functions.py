"""The function catalog (app/circuit/functions.py): SQL NULL semantics, the documented choices
for integer division, casts and strings, and the Spark SQL each call renders to (SPEC L3, S8:
the reference evaluator and Spark must agree, so both halves are pinned here)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from app.circuit import functions as fn
from app.circuit.ir import Call, Case, Cast, ColumnRef, Expr, Literal_, SqlType

INT = SqlType("INT")
BIGINT = SqlType("BIGINT")
DOUBLE = SqlType("DOUBLE")
VARCHAR = SqlType("VARCHAR")
BOOLEAN = SqlType("BOOLEAN")
TIMESTAMP = SqlType("TIMESTAMP")
DEC = SqlType("DECIMAL", True, 10, 2)


def lit(value: Any, t: SqlType) -> Literal_:
    return Literal_(value, t)


def call(name: str, *args: Expr) -> Call:
    return Call(name, args, fn.result_type(name, [a.type for a in args]))


def ev(expr: Expr, **row: Any) -> Any:
    return fn.evaluate(expr, row)


@pytest.mark.parametrize(("a", "b", "expected"), [
    (True, True, True), (True, False, False), (True, None, None), (False, None, False),
    (None, None, None), (False, False, False)])
def test_s8_and_is_three_valued(a: Any, b: Any, expected: Any) -> None:
    assert ev(call("AND", lit(a, BOOLEAN), lit(b, BOOLEAN))) is expected


@pytest.mark.parametrize(("a", "b", "expected"), [
    (True, None, True), (False, None, None), (False, False, False), (None, None, None)])
def test_s8_or_is_three_valued(a: Any, b: Any, expected: Any) -> None:
    assert ev(call("OR", lit(a, BOOLEAN), lit(b, BOOLEAN))) is expected


@pytest.mark.parametrize("name", ["+", "-", "*", "/", "%", "=", "<", ">="])
def test_s8_operators_are_null_strict(name: str) -> None:
    assert ev(call(name, lit(None, INT), lit(3, INT))) is None


@pytest.mark.parametrize(("a", "b", "quotient", "remainder"), [
    (7, 2, 3, 1), (-7, 2, -3, -1), (7, -2, -3, 1), (-7, -2, 3, -1)])
def test_integer_division_truncates_toward_zero(a: int, b: int, quotient: int,
                                                remainder: int) -> None:
    assert ev(call("/", lit(a, INT), lit(b, INT))) == quotient
    assert ev(call("%", lit(a, INT), lit(b, INT))) == remainder


def test_division_by_zero_is_null() -> None:
    assert ev(call("/", lit(1, INT), lit(0, INT))) is None
    assert ev(call("/", lit(1.0, DOUBLE), lit(0.0, DOUBLE))) is None
    assert ev(call("/", lit(Decimal("1.00"), DEC), lit(0, INT))) is None


def test_integer_overflow_is_null() -> None:
    assert ev(call("+", lit(2**31 - 1, SqlType("INT", False)), lit(1, INT))) is None
    assert ev(call("*", lit(2**62, BIGINT), lit(4, INT))) is None


def test_decimal_arithmetic_types_and_rounding() -> None:
    times = call("*", ColumnRef("amount", DEC), lit(100, SqlType("INT", False)))
    assert times.type == SqlType("DECIMAL", True, 21, 2)
    assert ev(times, amount=Decimal("123.45")) == Decimal("12345.00")
    divided = call("/", ColumnRef("amount", DEC), lit(3, SqlType("INT", False)))
    assert divided.type == SqlType("DECIMAL", True, 21, 13)
    assert ev(divided, amount=Decimal("2.00")) == Decimal("0.6666666666667")  # HALF_UP
    plus = call("+", ColumnRef("amount", DEC), lit(Decimal("0.005"), SqlType("DECIMAL", False,
                                                                             4, 3)))
    assert plus.type == SqlType("DECIMAL", True, 12, 3)


def test_mixed_decimal_and_double_is_double() -> None:
    mixed = call("+", ColumnRef("amount", DEC), lit(0.5, DOUBLE))
    assert mixed.type.name == "DOUBLE"
    assert ev(mixed, amount=Decimal("1.25")) == 1.75


@pytest.mark.parametrize(("value", "source", "target", "expected"), [
    (3.9, DOUBLE, BIGINT, 3), (-3.9, DOUBLE, BIGINT, -3), (1e30, DOUBLE, BIGINT, None),
    (float("nan"), DOUBLE, INT, None), (Decimal("-2.50"), DEC, INT, -2),
    (Decimal("2.345"), SqlType("DECIMAL", True, 10, 3), DEC, Decimal("2.35")),
    (Decimal("-2.345"), SqlType("DECIMAL", True, 10, 3), DEC, Decimal("-2.35")),
    (" 42 ", VARCHAR, INT, 42), ("4x", VARCHAR, INT, None), ("99999999999", VARCHAR, INT, None),
    ("1.5", VARCHAR, DOUBLE, 1.5), ("TRUE", VARCHAR, BOOLEAN, True), ("maybe", VARCHAR, BOOLEAN,
                                                                        None),
    ("2024-01-01 10:00:00", VARCHAR, TIMESTAMP, 1_704_103_200_000),
    ("2024-01-01T10:00:00.123Z", VARCHAR, TIMESTAMP, 1_704_103_200_123),
    ("2024-01-01 11:00:00+01:00", VARCHAR, TIMESTAMP, 1_704_103_200_000),
    ("not a time", VARCHAR, TIMESTAMP, None),
    (1_704_103_200_500, TIMESTAMP, VARCHAR, "2024-01-01 10:00:00.5"),
    (1_704_103_200_000, TIMESTAMP, VARCHAR, "2024-01-01 10:00:00"),
    (1_704_103_200_000, TIMESTAMP, SqlType("DATE"), 19723),
    (True, BOOLEAN, VARCHAR, "true"), (Decimal("1.50"), DEC, VARCHAR, "1.50"),
    (1e10, DOUBLE, VARCHAR, "1.0E10"), (0.25, DOUBLE, VARCHAR, "0.25"),
    (None, DOUBLE, BIGINT, None),
])
def test_cast_semantics(value: Any, source: SqlType, target: SqlType, expected: Any) -> None:
    assert fn.cast_value(value, source, target) == expected


def test_cast_matrix_rejects_timestamp_to_number() -> None:
    assert not fn.can_cast(TIMESTAMP, BIGINT)
    assert fn.can_cast(VARCHAR, TIMESTAMP)


@pytest.mark.parametrize(("text", "pattern", "expected"), [
    ("abc", "a%", True), ("abc", "_b_", True), ("abc", "b%", False), ("a%c", "a\\%c", True),
    ("abc", "a\\%c", False), ("a.c", "a.c", True), ("abc", "a.c", False)])
def test_like(text: str, pattern: str, expected: bool) -> None:
    assert ev(call("LIKE", lit(text, VARCHAR), lit(pattern, VARCHAR))) is expected


def test_in_list_null_semantics() -> None:
    assert ev(call("IN", lit(1, INT), lit(1, INT), lit(None, INT))) is True
    assert ev(call("IN", lit(2, INT), lit(1, INT), lit(None, INT))) is None
    assert ev(call("IN", lit(2, INT), lit(1, INT), lit(3, INT))) is False
    assert ev(call("IN", lit(None, INT), lit(1, INT))) is None


def test_coalesce_nullif_is_null() -> None:
    assert ev(call("COALESCE", lit(None, VARCHAR), lit("x", VARCHAR))) == "x"
    assert ev(call("NULLIF", lit(3, INT), lit(3, INT))) is None
    assert ev(call("NULLIF", lit(3, INT), lit(4, INT))) == 3
    assert ev(call("IS NULL", lit(None, INT))) is True
    assert ev(call("IS NOT NULL", lit(None, INT))) is False


@pytest.mark.parametrize(("pos", "length", "expected"), [
    (1, 2, "ab"), (2, None, "bcde"), (0, 2, "ab"), (-2, None, "de"), (-2, 1, "d"),
    (10, 2, ""), (2, -1, "")])
def test_substring_is_one_based_like_spark(pos: int, length: int | None, expected: str) -> None:
    args: list[Expr] = [lit("abcde", VARCHAR), lit(pos, INT)]
    if length is not None:
        args.append(lit(length, INT))
    assert ev(call("SUBSTRING", *args)) == expected


def test_string_functions() -> None:
    assert ev(call("UPPER", lit("aß", VARCHAR))) == "ASS"
    assert ev(call("TRIM", lit("  a b  ", VARCHAR))) == "a b"
    assert ev(call("CHAR_LENGTH", lit("héllo", VARCHAR))) == 5
    assert ev(call("CONCAT", lit("a", VARCHAR), lit(None, VARCHAR))) is None
    assert ev(call("CONCAT", lit("a", VARCHAR), lit("b", VARCHAR))) == "ab"


def test_numeric_functions() -> None:
    assert ev(call("ABS", lit(-3, INT))) == 3
    assert ev(call("FLOOR", lit(-1.5, DOUBLE))) == -2.0
    assert ev(call("CEIL", lit(Decimal("1.01"), DEC))) == Decimal("2")
    assert ev(call("ROUND", lit(2.5, DOUBLE), lit(0, INT))) == 3.0
    assert ev(call("ROUND", lit(-2.5, DOUBLE), lit(0, INT))) == -3.0
    rounded = Call("ROUND", (lit(Decimal("1.235"), SqlType("DECIMAL", True, 10, 3)),
                             lit(2, INT)),
                   fn.round_decimal_type(SqlType("DECIMAL", True, 10, 3), 2))
    assert rounded.type == SqlType("DECIMAL", True, 10, 2)
    assert ev(rounded) == Decimal("1.24")


def test_time_functions_are_utc() -> None:
    ts = lit(1_704_103_200_123 + 45 * 60_000, TIMESTAMP)  # 2024-01-01 10:45:00.123
    assert ev(call("HOUR", ts)) == 10
    assert ev(call("MINUTE", ts)) == 45
    assert ev(call("YEAR", ts)) == 2024
    assert ev(call("DATE_TRUNC", lit("HOUR", VARCHAR), ts)) == 1_704_103_200_000
    assert ev(call("DATE_TRUNC", lit("MONTH", VARCHAR), ts)) == 1_704_067_200_000
    later = call("+", ts, lit(3_600_000, BIGINT))
    assert later.type.name == "TIMESTAMP"
    assert ev(later) == 1_704_103_200_123 + 45 * 60_000 + 3_600_000


def test_l7_type_rules_reject_with_a_fix() -> None:
    with pytest.raises(fn.FunctionTypeError) as info:
        fn.result_type("+", [TIMESTAMP, VARCHAR])
    assert "cannot apply + to TIMESTAMP and VARCHAR" in info.value.message
    with pytest.raises(fn.FunctionTypeError, match="takes 1 argument, not 2"):
        fn.result_type("UPPER", [VARCHAR, VARCHAR])
    with pytest.raises(fn.FunctionTypeError, match="cannot compare TIMESTAMP with VARCHAR"):
        fn.result_type("=", [TIMESTAMP, VARCHAR])


def test_aggregate_types_follow_spark() -> None:
    assert fn.aggregate_type("COUNT", []) == SqlType("BIGINT", nullable=False)
    assert fn.aggregate_type("SUM", [INT]) == BIGINT
    assert fn.aggregate_type("SUM", [DEC]) == SqlType("DECIMAL", True, 20, 2)
    assert fn.aggregate_type("AVG", [DEC]) == SqlType("DECIMAL", True, 14, 6)
    assert fn.aggregate_type("AVG", [INT]) == DOUBLE
    assert fn.aggregate_type("ARG_MAX", [VARCHAR.with_nullable(False), TIMESTAMP]) == VARCHAR


# -- Spark SQL renderings -----------------------------------------------------------------------


def test_spark_literals() -> None:
    assert fn.to_spark_sql(lit(1_704_103_200_000, TIMESTAMP)) == \
        "TIMESTAMP_MILLIS(1704103200000L)"
    assert fn.to_spark_sql(lit(Decimal("1.50"), DEC)) == "CAST('1.50' AS DECIMAL(10,2))"
    assert fn.to_spark_sql(lit("it's", VARCHAR)) == "'it\\'s'"
    assert fn.to_spark_sql(lit(None, INT)) == "CAST(NULL AS INT)"
    assert fn.to_spark_sql(lit(True, BOOLEAN)) == "TRUE"
    assert fn.to_spark_sql(lit(19723, SqlType("DATE"))) == "DATE_FROM_UNIX_DATE(19723)"


def test_spark_columns_are_back_quoted() -> None:
    assert fn.to_spark_sql(ColumnRef("weird`name", INT)) == "`weird``name`"


def test_spark_integer_division_uses_div_and_null_for_zero() -> None:
    expr = call("/", ColumnRef("a", INT), ColumnRef("b", INT))
    assert fn.to_spark_sql(expr) == "TRY_CAST((`a` DIV NULLIF(`b`, 0)) AS INT)"
    wide = call("/", ColumnRef("a", BIGINT), ColumnRef("b", BIGINT))
    assert fn.to_spark_sql(wide) == (
        "(CASE WHEN `b` = -1 THEN try_subtract(0L, `a`) ELSE `a` DIV NULLIF(`b`, 0) END)")
    assert fn.to_spark_sql(call("%", ColumnRef("a", BIGINT), ColumnRef("b", INT))) == \
        "(`a` % NULLIF(CAST(`b` AS BIGINT), 0))"
    assert fn.to_spark_sql(call("+", ColumnRef("a", INT), ColumnRef("b", INT))) == \
        "try_add(`a`, `b`)"


def test_spark_decimal_arithmetic_is_cast_to_the_result_type() -> None:
    expr = call("*", ColumnRef("amount", DEC), lit(100, SqlType("INT", False)))
    assert fn.to_spark_sql(Cast(expr, BIGINT)) == (
        "TRY_CAST(CAST(try_multiply(`amount`, CAST(100 AS DECIMAL(10,0))) AS DECIMAL(21,2))"
        " AS BIGINT)")


def test_spark_timestamp_arithmetic_and_casts() -> None:
    later = call("+", ColumnRef("ts", TIMESTAMP), lit(60_000, BIGINT))
    assert fn.to_spark_sql(later) == "TIMESTAMP_MILLIS(unix_millis(`ts`) + 60000L)"
    parsed = Cast(ColumnRef("s", VARCHAR), TIMESTAMP)
    assert fn.to_spark_sql(parsed) == "TIMESTAMP_MILLIS(unix_millis(TRY_CAST(`s` AS TIMESTAMP)))"
    assert fn.to_spark_sql(call("HOUR", ColumnRef("ts", TIMESTAMP))) == \
        "CAST(hour(`ts`) AS BIGINT)"
    assert fn.to_spark_sql(call("DATE_TRUNC", lit("HOUR", VARCHAR), ColumnRef("ts", TIMESTAMP))) \
        == "date_trunc('HOUR', `ts`)"


def test_spark_boolean_case_like_in() -> None:
    a, b = ColumnRef("a", BOOLEAN), ColumnRef("b", BOOLEAN)
    assert fn.to_spark_sql(call("AND", a, call("NOT", b))) == "(`a` AND (NOT `b`))"
    case = Case(((a, lit(1, INT)),), lit(2, BIGINT), BIGINT)
    assert fn.to_spark_sql(case) == "(CASE WHEN `a` THEN CAST(1 AS BIGINT) ELSE 2L END)"
    assert fn.to_spark_sql(call("LIKE", ColumnRef("s", VARCHAR), lit("a%", VARCHAR))) == (
        "(CASE WHEN 'a%' RLIKE '^(?:[^\\\\\\\\]|\\\\\\\\[_%\\\\\\\\])*\\\\z' "
        "THEN `s` LIKE 'a%' END)")
    assert fn.to_spark_sql(call("IN", ColumnRef("x", INT), lit(1, INT), lit(2, BIGINT))) == \
        "(CAST(`x` AS BIGINT) IN (CAST(1 AS BIGINT), 2L))"
    assert fn.to_spark_sql(call("IS NULL", ColumnRef("x", INT))) == "(`x` IS NULL)"


def test_every_catalog_function_renders_to_spark() -> None:
    samples: dict[str, list[Expr]] = {
        "ABS": [ColumnRef("d", DOUBLE)], "FLOOR": [ColumnRef("d", DOUBLE)],
        "CEIL": [ColumnRef("m", DEC)], "ROUND": [ColumnRef("d", DOUBLE), lit(1, INT)],
        "UPPER": [ColumnRef("s", VARCHAR)], "LOWER": [ColumnRef("s", VARCHAR)],
        "TRIM": [ColumnRef("s", VARCHAR)], "CHAR_LENGTH": [ColumnRef("s", VARCHAR)],
        "SUBSTRING": [ColumnRef("s", VARCHAR), lit(1, INT), lit(2, INT)],
        "CONCAT": [ColumnRef("s", VARCHAR), lit("x", VARCHAR)],
        "COALESCE": [ColumnRef("i", INT), lit(0, BIGINT)],
        "NULLIF": [ColumnRef("i", INT), lit(0, INT)],
        "TIMESTAMP_MILLIS": [ColumnRef("i", BIGINT)], "UNIX_MILLIS": [ColumnRef("t", TIMESTAMP)],
    }
    for name, args in samples.items():
        text = fn.to_spark_sql(call(name, *args))
        assert text and "None" not in text, name
    assert "pyspark" not in open(fn.__file__, encoding="utf-8").read().replace(
        "Nothing here imports pyspark", "")
