"""Every function of the catalog gives on Spark what the reference evaluator gives (SPEC L3, S8).

app/circuit/functions.py holds, per function, a Python implementation (the oracle of every
runtime test) and a Spark SQL rendering (what the runtime runs). Here both run over one table of
edge-case rows (NULLs, empty strings, unicode, negative numbers and zeros, NaN and infinities,
integer limits, month ends, leap days, timestamps before the epoch and at the ends of the
calendar, malformed JSON): each call once with ``functions.evaluate`` per row and once as the
Spark SQL of ``to_spark_sql`` over a DataFrame of the same rows, compared value by value. One
Spark query computes every call; when Spark fails it, each call runs alone to name the ones
that fail (a failing call would stop a micro-batch, SPEC S7).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

import pytest

from app.circuit import functions as fn
from app.circuit.explain import expr_text
from app.circuit.ir import Call, ColumnRef, Expr, Literal_, SqlType

pytestmark = pytest.mark.e2e

INT = SqlType("INT")
BIGINT = SqlType("BIGINT")
DOUBLE = SqlType("DOUBLE")
VARCHAR = SqlType("VARCHAR")
BOOLEAN = SqlType("BOOLEAN")
TIMESTAMP = SqlType("TIMESTAMP")
DATE = SqlType("DATE")
DEC = SqlType("DECIMAL", True, 10, 2)
DEC3 = SqlType("DECIMAL", True, 5, 3)

COLUMNS: dict[str, SqlType] = {
    "i": INT, "j": INT, "b": BIGINT, "d": DOUBLE, "e": DOUBLE, "m": DEC, "p": DEC3,
    "s": VARCHAR, "u": VARCHAR, "ts": TIMESTAMP, "tt": TIMESTAMP, "dt": DATE, "f": BOOLEAN,
    "g": BOOLEAN, "js": VARCHAR,
}


def ms(text: str) -> int:
    value = fn.parse_timestamp(text)
    assert value is not None, text
    return value


def days(text: str) -> int:
    value = fn.parse_date(text)
    assert value is not None, text
    return value


I32, I64 = 2**31 - 1, 2**63 - 1
NAN, INF = float("nan"), float("inf")

#: i, j, b, d, e, m, p, s, u, ts, tt, dt, f, g, js
_ROWS: list[tuple[Any, ...]] = [
    (7, 2, 10, 1.5, 2.5, Decimal("123.45"), Decimal("1.005"), "abc", "b",
     ms("2024-01-31 10:00:00"), ms("2024-02-29 09:00:00"), days("2024-02-29"), True, False,
     '{"a": 1, "b": [true, {"c": "x"}], "n": null}'),
    (-7, -2, -5, -2.5, 0.5, Decimal("-0.01"), Decimal("-2.345"), "", "",
     ms("2024-01-31 10:00:00"), ms("2024-02-29 11:00:00"), days("2000-02-29"), False, True,
     '{"a": 1.50, "b": [1e2, -0], "c": "[1,2]"}'),
    (0, 0, 0, 0.0, -0.0, Decimal("0.00"), Decimal("0.000"), "héllo wörld", "ö",
     ms("2023-01-31 00:00:00"), ms("2023-02-28 00:00:00"), 0, None, None,
     '{"a": "caf\\u00e9 \\ud83d\\ude00", "b": [], "d": {"e": 12345678901234567890}}'),
    (None, 3, None, None, 1.0, None, None, None, "a", None, ms("2024-01-01 00:00:00"), None,
     True, None, None),
    (I32, 1, I64, NAN, NAN, Decimal("99999999.99"), Decimal("99.999"), "😀x😀", "😀",
     ms("2024-01-31 00:00:00"), ms("2024-02-28 23:59:59.999"), days("9999-12-31"), True, True,
     '{"a": 1} trailing'),
    (-(2**31), -1, -(2**63), INF, -INF, Decimal("-99999999.99"), Decimal("-99.999"),
     "  pad  ", " ", ms("2024-02-01 10:00:00"), ms("2024-01-01 09:00:00"), days("0001-01-01"),
     False, False, '{"a": 1, "a": 2}'),
    (2, 7, 1_704_103_200_000, -INF, 3.0, Decimal("2.50"), Decimal("-0.500"), "a,b,,c,", ",",
     ms("1969-12-31 23:59:59.999"), ms("1970-01-01 00:00:00"), -1, False, None,
     '{"a": NaN}'),
    (3, None, -1_704_103_200_000, 1e300, 1e-300, Decimal("-2.50"), Decimal("0.001"), "ΣΑΣ",
     "σ", ms("0001-01-01 00:00:00"), ms("9999-12-31 23:59:59.999"), days("2024-01-31"), None,
     True, '{"a": "\\ud800"}'),
    (-3, 5, 86_400_000, 0.1, -0.1, Decimal("1.00"), Decimal("1.000"), "straße", "SS",
     ms("2020-02-29 12:00:00"), ms("2021-02-28 12:00:00"), days("2023-03-01"), True, False,
     '{"a": {"b": 1}}'),
    (1, -7, -86_400_000, -1e-7, 1e7, Decimal("0.50"), Decimal("0.500"), "line\nbreak\r\n",
     "\n", ms("2024-03-31 00:00:00"), ms("2024-04-30 00:00:00"), days("1969-12-31"), False,
     True, '{"a": 1E400, "b": [0.1, 1.0000000000000000000001]}'),
    (100, 7, 3_600_000, 1234567.0, 12345678.9, Decimal("-123.45"), Decimal("12.345"), "it's",
     "'", ms("2024-05-31 23:00:00"), ms("2024-06-30 22:00:00"), days("2024-12-31"), None, False,
     '{"a": "line\nbreak"}'),
    (-100, 100, 1, -0.5, 0.5, Decimal("5.55"), Decimal("5.555"), "back\\slash $1", "\\",
     ms("2024-12-31 23:59:59.999"), ms("2025-01-01 00:00:00"), days("2025-01-01"), True, None,
     "{'a': 1}"),
    (42, -42, -1, 2.5, -2.5, Decimal("-5.55"), Decimal("-5.555"), "aaa", "aa",
     ms("2024-06-15 12:34:56.789"), ms("2024-06-15 12:34:56.789"), days("2024-06-15"), False,
     False, ""),
    (5, 2, 123, 3.7, -3.7, Decimal("0.05"), Decimal("0.005"), "abc123def45", "1",
     ms("2000-01-01 00:00:00"), ms("1999-12-31 23:59:59"), days("2000-01-01"), True, True,
     '[{"a": 1}]'),
    (-5, -3, -123, -3.7, 3.7, Decimal("-0.05"), Decimal("-0.005"), "a.b.c", ".",
     ms("2024-07-04 05:06:07.008"), ms("2023-07-04 05:06:07.009"), days("1970-01-02"), None,
     None, '  {"a" : {"x": [10, 20, 30]}, "b": "\\"q\\""}  '),
    (9, 9, 9, 9.0, 9.0, Decimal("9.00"), Decimal("9.000"), "İ", "i", ms("2024-01-01 00:00:00"),
     ms("2024-01-01 00:00:00.001"), days("2024-02-28"), True, False, '{"a": 01}'),
    (11, -11, 999_999_999_999, 0.3, 0.7, Decimal("10.10"), Decimal("10.100"), "12:34", ":",
     ms("2024-11-05 13:07:09.120"), ms("1999-02-28 01:02:03.004"), days("2024-11-05"), False,
     True, '{"a": true, "b": false, "c": -12.5e-3}'),
    (12, 4, -999, -0.0, 0.0, Decimal("-0.00"), Decimal("0.010"), "a😀b😀c", "😀",
     ms("2024-02-29 23:59:59.999"), ms("2025-02-28 23:59:59.998"), days("2024-02-29"), True,
     None, '\ufeff{"a": 1}'),
    (-12, -4, 2**53 + 1, 1e16, -1e-3, Decimal("12.34"), Decimal("-1.234"), "Ab\tC",
     "\t", ms("1900-03-01 00:00:00"), ms("1900-02-28 00:00:00"), days("1900-02-28"), False,
     False, '{"\\u0061": "k\\"q", "b": [1, 2], "c": "\\"Infinity\\""}'),
]
ROWS: list[dict[str, Any]] = [dict(zip(COLUMNS, row, strict=True)) for row in _ROWS]


def col(name: str) -> ColumnRef:
    return ColumnRef(name, COLUMNS[name])


def lit(value: Any, t: SqlType) -> Literal_:
    return Literal_(value, t.with_nullable(value is None))


def text(value: str) -> Literal_:
    return lit(value, VARCHAR)


def call(name: str, *args: Expr) -> Call:
    result = fn.result_type(name, [a.type for a in args])
    fn.check_literals(name, args)
    return Call(name, args, result)


def rounded(value: Expr, digits: int) -> Call:
    digits_lit = lit(digits, INT)
    if value.type.name == "DECIMAL":
        return Call("ROUND", (value, digits_lit), fn.round_decimal_type(value.type, digits))
    return call("ROUND", value, digits_lit)


_NUMERIC = ["i", "b", "d", "m", "p"]
_PAIRS = [("i", "j"), ("i", "b"), ("b", "b"), ("d", "e"), ("i", "d"), ("m", "p"), ("m", "i"),
          ("m", "d"), ("p", "b")]


def _cases() -> dict[str, list[Expr]]:  # noqa: C901 - one list per catalog function
    cases: dict[str, list[Expr]] = {}
    for op in ("+", "-", "*", "/", "%"):
        cases[op] = [call(op, col(a), col(b)) for a, b in _PAIRS]
        cases[op].append(call(op, col("i"), lit(0, INT)))
    cases["-"] += [call("-", col(c)) for c in ("i", "d", "m")]
    cases["+"].append(call("+", col("ts"), lit(3_600_000, BIGINT)))
    cases["-"].append(call("-", col("ts"), lit(86_400_001, BIGINT)))
    comparable = [*_PAIRS, ("s", "u"), ("ts", "tt"), ("f", "g"), ("dt", "dt")]
    for op in ("=", "<>", "<", "<=", ">", ">="):
        cases[op] = [call(op, col(a), col(b)) for a, b in comparable]
        cases[op].append(call(op, col("d"), lit(NAN, DOUBLE)))
    cases["AND"] = [call("AND", col("f"), col("g")), call("AND", col("f"), col("g"), lit(True,
                                                                                        BOOLEAN))]
    cases["OR"] = [call("OR", col("f"), col("g")), call("OR", col("g"), lit(None, BOOLEAN))]
    cases["NOT"] = [call("NOT", col("f"))]
    cases["IS NULL"] = [call("IS NULL", col(c)) for c in ("i", "s", "ts", "d")]
    cases["IS NOT NULL"] = [call("IS NOT NULL", col(c)) for c in ("f", "m")]
    cases["LIKE"] = [call("LIKE", col("s"), text(p)) for p in
                     ("a%", "%b%", "_", "", "%", "a\\%c", "%\\_%", "%ö%", "%😀", "a.c", "%\n%")]
    cases["LIKE"].append(call("LIKE", col("s"), col("u")))
    cases["IN"] = [call("IN", col("i"), lit(7, INT), lit(0, BIGINT)),
                   call("IN", col("i"), lit(7, INT), lit(None, INT)),
                   call("IN", col("d"), lit(NAN, DOUBLE), lit(1.5, DOUBLE)),
                   call("IN", col("s"), text("abc"), text("")),
                   call("IN", col("m"), lit(Decimal("0.05"), DEC3), lit(2, INT))]
    cases["COALESCE"] = [call("COALESCE", col("i"), col("j")), call("COALESCE", col("i"),
                                                                     col("d")),
                         call("COALESCE", col("s"), text("none")),
                         call("COALESCE", col("m"), col("p"), lit(0, INT))]
    cases["NULLIF"] = [call("NULLIF", col("i"), col("j")), call("NULLIF", col("m"), col("p")),
                       call("NULLIF", col("d"), col("e")), call("NULLIF", col("s"), text(""))]
    cases["ABS"] = [call("ABS", col(c)) for c in _NUMERIC]
    cases["FLOOR"] = [call("FLOOR", col(c)) for c in _NUMERIC]
    cases["CEIL"] = [call("CEIL", col(c)) for c in _NUMERIC]
    cases["ROUND"] = [rounded(col(c), n) for c in _NUMERIC for n in (0, 1, 2)]
    cases["UPPER"] = [call("UPPER", col("s"))]
    cases["LOWER"] = [call("LOWER", col("s")), call("LOWER", col("u"))]
    cases["TRIM"] = [call("TRIM", col("s")), call("TRIM", col("u"))]
    cases["CHAR_LENGTH"] = [call("CHAR_LENGTH", col("s"))]
    cases["SUBSTRING"] = [call("SUBSTRING", col("s"), col("j")),
                          call("SUBSTRING", col("s"), col("i"), col("j")),
                          call("SUBSTRING", col("s"), lit(2, INT), lit(3, INT)),
                          call("SUBSTRING", col("s"), lit(-3, INT))]
    cases["CONCAT"] = [call("CONCAT", col("s"), col("u")),
                       call("CONCAT", col("s"), text("-"), col("u"))]
    for field in ("YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND"):
        cases[field] = [call(field, col("ts")), call(field, col("tt"))]
        if field in ("YEAR", "MONTH", "DAY"):
            cases[field].append(call(field, col("dt")))
    cases["DATE_TRUNC"] = [call("DATE_TRUNC", text(unit), col(c))
                           for unit in ("SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR")
                           for c in ("ts", "tt")]
    cases["DATE_CEIL"] = [call("DATE_CEIL", text(unit), col(c))
                          for unit in ("SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR")
                          for c in ("ts", "tt")]
    cases["TIMESTAMP_MILLIS"] = [call("TIMESTAMP_MILLIS", col("b")),
                                 call("TIMESTAMP_MILLIS", col("i"))]
    cases["UNIX_MILLIS"] = [call("UNIX_MILLIS", col("ts")), call("UNIX_MILLIS", col("tt"))]
    cases["IF"] = [call("IF", col("f"), col("i"), col("j")),
                   call("IF", col("f"), col("i"), col("d")),
                   call("IF", col("g"), col("m"), col("p")),
                   call("IF", col("f"), col("s"), lit(None, VARCHAR)),
                   call("IF", call(">", col("ts"), col("tt")), col("ts"), col("tt"))]
    cases["GREATEST"] = [call("GREATEST", col(a), col(b)) for a, b in _PAIRS]
    cases["GREATEST"] += [call("GREATEST", col("s"), col("u"), text("m")),
                          call("GREATEST", col("ts"), col("tt")),
                          call("GREATEST", col("f"), col("g")),
                          call("GREATEST", col("dt"), lit(0, DATE))]
    cases["LEAST"] = [call("LEAST", col(a), col(b)) for a, b in _PAIRS]
    cases["LEAST"] += [call("LEAST", col("s"), col("u")), call("LEAST", col("ts"), col("tt"))]
    cases["REPLACE"] = [call("REPLACE", col("s"), col("u"), text("<>")),
                        call("REPLACE", col("s"), text("a"), text("")),
                        call("REPLACE", col("s"), text(""), text("x")),
                        call("REPLACE", col("s"), text("😀"), col("u"))]
    cases["POSITION"] = [call("POSITION", col("u"), col("s")),
                         call("POSITION", text(""), col("s")),
                         call("POSITION", text("b"), col("s"))]
    cases["SPLIT_PART"] = [call("SPLIT_PART", col("s"), col("u"), n)
                           for n in (lit(1, INT), lit(2, INT), lit(-1, INT), lit(-3, INT),
                                     lit(100, INT), lit(-(2**31), INT))]
    cases["SPLIT_PART"] += [call("SPLIT_PART", col("s"), text(","), col("j")),
                            call("SPLIT_PART", col("s"), text(""), col("j"))]
    patterns = ["[0-9]+", "(a)(b)?", "^a", "c$", ".", "\\d{2,3}", "x*", "(?:ab|a)c", "[^a-z]",
                "\\s+", "é", "😀", "\\.", "a.b", "(\\w+)\\s(\\w+)", "(?=b)", "[a-c]+?",
                "k$|\\n", "\\x41|\\u00df", "(ß)|(s)", "^$", "Σ(?!Α)"]
    cases["REGEXP_REPLACE"] = [call("REGEXP_REPLACE", col("s"), text(p), text("<$0>"))
                               for p in patterns]
    cases["REGEXP_REPLACE"] += [
        call("REGEXP_REPLACE", col("s"), text("(a)(b)?"), text("[$2|$1|\\$|\\\\]")),
        call("REGEXP_REPLACE", col("s"), text("(\\w+)\\s(\\w+)"), text("$2 $1$10")),
        call("REGEXP_REPLACE", col("s"), text(""), text("-"))]
    cases["REGEXP_EXTRACT"] = [call("REGEXP_EXTRACT", col("s"), text(p)) for p in patterns]
    cases["REGEXP_EXTRACT"] += [
        call("REGEXP_EXTRACT", col("s"), text("(a)(b)?"), lit(2, INT)),
        call("REGEXP_EXTRACT", col("s"), text("([a-z]+)([0-9]*)"), lit(2, INT)),
        call("REGEXP_EXTRACT", col("s"), text("(ß)|(s)"), lit(1, INT))]
    cases["TIMESTAMPDIFF"] = [call("TIMESTAMPDIFF", text(unit), col(a), col(b))
                              for unit in fn.TIMESTAMPDIFF_UNITS
                              for a, b in (("ts", "tt"), ("tt", "ts"), ("dt", "ts"))]
    formats = ["yyyy-MM-dd HH:mm:ss.SSS", "y yy M MMM MMMM d", "EEE EEEE a h hh H m s",
               "yyyy-MM-dd'T'HH:mm:ss'Z'", "'it''s' dd/MM ''yy''", "HH:mm, d. MMMM y"]
    cases["DATE_FORMAT"] = [call("DATE_FORMAT", col(c), text(f)) for c in ("ts", "tt", "dt")
                            for f in formats]
    paths = ["$.a", "$.b[0]", "$.b[1].c", "$.b[1]", "$.n", "$.c", "$.d.e", "$[0].a", "$.a.x[2]",
             "$.b", "$.missing", "$.b[5]"]
    cases["JSON_VALUE"] = [call("JSON_VALUE", col("js"), text(p)) for p in paths]
    cases["JSON_VALUE"].append(call("JSON_VALUE", col("s"), text("$.a")))
    return cases


CASES = _cases()


def _python(expr: Expr) -> list[Any]:
    values: list[Any] = []
    for row in ROWS:
        try:
            values.append(fn.evaluate(expr, row))
        except Exception as exc:  # noqa: BLE001 - reported as a disagreement
            values.append(f"<Python failed: {type(exc).__name__}: {exc}>")
    return values


def _spark_text(expr: Expr) -> str:
    sql = fn.to_spark_sql(expr)
    if expr.type.name == "TIMESTAMP":
        return f"unix_millis({sql})"
    if expr.type.name == "DATE":
        return f"unix_date({sql})"
    return sql


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, float) and isinstance(actual, float):
        return (math.isnan(expected) and math.isnan(actual)) or expected == actual
    return type(expected) is type(actual) and expected == actual


def _table(spark: Any) -> Any:
    from pyspark.sql import types as st

    spark_types = {"INT": st.IntegerType(), "BIGINT": st.LongType(),
                   "DOUBLE": st.DoubleType(), "VARCHAR": st.StringType(),
                   "BOOLEAN": st.BooleanType(), "TIMESTAMP": st.LongType(),
                   "DATE": st.IntegerType()}
    fields = [st.StructField("_row", st.IntegerType(), False)]
    for name, t in COLUMNS.items():
        spark_type = (st.DecimalType(t.precision or 10, t.scale or 0) if t.name == "DECIMAL"
                      else spark_types[t.name])
        fields.append(st.StructField(name, spark_type, True))
    rows = [(n, *row) for n, row in enumerate(_ROWS)]
    frame = spark.createDataFrame(rows, st.StructType(fields))
    columns = ["_row"]
    for name, t in COLUMNS.items():
        columns.append(f"TIMESTAMP_MILLIS({name}) AS {name}" if t.name == "TIMESTAMP"
                       else f"DATE_FROM_UNIX_DATE({name}) AS {name}" if t.name == "DATE"
                       else name)
    return frame.selectExpr(*columns)


def _spark_columns(table: Any, exprs: Sequence[Expr]) -> list[list[Any]]:
    selected = ["_row"] + [f"{_spark_text(e)} AS _c{i}" for i, e in enumerate(exprs)]
    rows = sorted(table.selectExpr(*selected).collect(), key=lambda r: r["_row"])
    return [[row[f"_c{i}"] for row in rows] for i in range(len(exprs))]


def _all_calls() -> Iterator[tuple[str, Expr]]:
    for name, exprs in CASES.items():
        for expr in exprs:
            yield name, expr


def test_s8_every_catalog_function_has_agreement_cases() -> None:
    assert set(CASES) == set(fn.FUNCTIONS)


def test_s8_spark_renderings_equal_the_reference_evaluator(spark: Any) -> None:
    table = _table(spark).cache()
    calls = list(_all_calls())
    exprs = [expr for _, expr in calls]
    try:
        columns = _spark_columns(table, exprs)
    except Exception:  # noqa: BLE001 - find which calls Spark cannot run, one by one
        columns = []
        for expr in exprs:
            try:
                columns.append(_spark_columns(table, [expr])[0])
            except Exception as exc:  # noqa: BLE001 - reported below as a disagreement
                columns.append([f"<Spark failed: {str(exc).splitlines()[0][:160]}>"] * len(ROWS))
    mismatches: list[str] = []
    for (name, expr), actual in zip(calls, columns, strict=True):
        expected = _python(expr)
        for row, (want, got) in enumerate(zip(expected, actual, strict=True)):
            if not _same(want, got):
                inputs = {k: v for k, v in ROWS[row].items() if k in _names(expr)}
                mismatches.append(f"{name}: {expr_text(expr)} on row {row} {inputs}: "
                                  f"Python {want!r}, Spark {got!r}")
    assert not mismatches, f"{len(mismatches)} disagreements:\n" + "\n".join(mismatches[:400])


def _names(expr: Expr) -> set[str]:
    if isinstance(expr, ColumnRef):
        return {expr.name}
    if isinstance(expr, Call):
        return set().union(*(_names(a) for a in expr.args)) if expr.args else set()
    return set()
