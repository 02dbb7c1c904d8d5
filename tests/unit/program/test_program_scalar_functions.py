"""The string, regex, conditional, time and JSON functions of the catalog (SPEC L3, L7, S8).

Their Python halves with SQL NULL semantics and the documented choices (Flink's TIMESTAMPDIFF,
the regex, date-pattern and JSON-path subsets on which Java and Python agree), their type
errors with fixes, and what the compiler refuses, named as the program writes it, at its line
and column. tests/property/test_functions_vs_spark.py runs every function on Spark as well.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from app.circuit import functions as fn
from app.circuit.ir import Call, Circuit, Expr, Literal_, Project, SqlType
from app.errors import ProgramError
from app.program.compile import compile_program

INT = SqlType("INT")
BIGINT = SqlType("BIGINT")
DOUBLE = SqlType("DOUBLE")
VARCHAR = SqlType("VARCHAR")
BOOLEAN = SqlType("BOOLEAN")
TIMESTAMP = SqlType("TIMESTAMP")
DATE = SqlType("DATE")


def lit(value: Any, t: SqlType) -> Literal_:
    return Literal_(value, t)


def s(value: str | None) -> Literal_:
    return Literal_(value, VARCHAR)


def ts(text: str) -> Literal_:
    return Literal_(fn.parse_timestamp(text), TIMESTAMP)


def call(name: str, *args: Expr) -> Call:
    result = fn.result_type(name, [a.type for a in args])
    fn.check_literals(name, args)
    return Call(name, args, result)


def ev(name: str, *args: Expr) -> Any:
    return fn.evaluate(call(name, *args), {})


def ev_unchecked(name: str, *args: Expr) -> Any:
    """Evaluate without the compile-time literal checks (a value that only a column gives)."""
    return fn.evaluate(Call(name, args, fn.result_type(name, [a.type for a in args])), {})


# -- NULL semantics ---------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "args"), [
    ("REPLACE", [s(None), s("a"), s("b")]), ("REPLACE", [s("abc"), s(None), s("b")]),
    ("POSITION", [s(None), s("abc")]), ("SPLIT_PART", [s("a,b"), s(None), lit(1, INT)]),
    ("SPLIT_PART", [s("a,b"), s(","), lit(None, INT)]),
    ("REGEXP_REPLACE", [s(None), s("a"), s("b")]), ("REGEXP_EXTRACT", [s(None), s("a")]),
    ("GREATEST", [lit(1, INT), lit(None, INT), lit(3, INT)]),
    ("LEAST", [lit(None, INT), lit(1, INT)]),
    ("TIMESTAMPDIFF", [s("DAY"), lit(None, TIMESTAMP), ts("2024-01-01 00:00:00")]),
    ("DATE_FORMAT", [lit(None, TIMESTAMP), s("yyyy")]), ("JSON_VALUE", [s(None), s("$.a")]),
])
def test_s8_new_functions_are_null_strict(name: str, args: list[Expr]) -> None:
    assert ev(name, *args) is None


def test_s8_if_takes_the_else_branch_on_a_null_condition() -> None:
    assert ev("IF", lit(True, BOOLEAN), lit(1, INT), lit(2, INT)) == 1
    assert ev("IF", lit(None, BOOLEAN), lit(1, INT), lit(2, INT)) == 2
    assert ev("IF", lit(False, BOOLEAN), lit(1, INT), lit(None, INT)) is None
    widened = call("IF", lit(True, BOOLEAN), lit(1, INT), lit(2.5, DOUBLE))
    assert widened.type.name == "DOUBLE"
    assert fn.evaluate(widened, {}) == 1.0 and isinstance(fn.evaluate(widened, {}), float)


# -- strings ----------------------------------------------------------------------------------


def test_replace_position_and_split_part() -> None:
    assert ev("REPLACE", s("aaa"), s("aa"), s("b")) == "ba"
    assert ev("REPLACE", s("abc"), s(""), s("x")) == "abc"  # an empty search changes nothing
    assert ev("REPLACE", s("a😀b"), s("😀"), s("")) == "ab"
    assert ev("POSITION", s("b"), s("abc")) == 2
    assert ev("POSITION", s("x"), s("abc")) == 0
    assert ev("POSITION", s(""), s("abc")) == 1
    assert ev("POSITION", s("c"), s("😀bc")) == 3  # characters, not bytes or UTF-16 units
    parts = [("a,b,,c,", ",", n) for n in (1, 3, 5, 6, -1, -5, -6)]
    assert [ev("SPLIT_PART", s(t), s(d), lit(n, INT)) for t, d, n in parts] == \
        ["a", "", "", "", "", "a", ""]
    assert ev("SPLIT_PART", s("a,b"), s(""), lit(1, INT)) == "a,b"
    assert ev_unchecked("SPLIT_PART", s("a,b"), s(","), lit(0, INT)) is None


# -- regular expressions ----------------------------------------------------------------------


def test_regexp_replace_uses_java_replacement_syntax() -> None:
    assert ev("REGEXP_REPLACE", s("ab ab"), s("(a)(b)"), s("$2$1")) == "ba ba"
    assert ev("REGEXP_REPLACE", s("a.b"), s("\\."), s("\\$\\\\")) == "a$\\b"
    assert ev("REGEXP_REPLACE", s("x1"), s("([a-z])([0-9])"), s("$10")) == "x0"  # $1 then 0
    assert ev("REGEXP_REPLACE", s("ac"), s("(a)(b)?"), s("[$2]")) == "[]c"
    assert ev("REGEXP_REPLACE", s("abc"), s("x*"), s("-")) == "-a-b-c-"
    assert ev("REGEXP_REPLACE", s("a\nb"), s("a.b"), s("X")) == "X"  # . matches line ends
    assert ev("REGEXP_REPLACE", s("ab\n"), s("b$"), s("X")) == "ab\n"  # $ is the very end
    assert ev("REGEXP_REPLACE", s("٣3"), s("\\d"), s("#")) == "٣#"  # \d is [0-9]


def test_regexp_extract_is_flinks_group_zero_by_default() -> None:
    assert ev("REGEXP_EXTRACT", s("id=42;"), s("id=([0-9]+)")) == "id=42"
    assert ev("REGEXP_EXTRACT", s("id=42;"), s("id=([0-9]+)"), lit(1, INT)) == "42"
    assert ev("REGEXP_EXTRACT", s("none"), s("id=([0-9]+)"), lit(1, INT)) is None
    assert ev("REGEXP_EXTRACT", s("ac"), s("a(b)?c"), lit(1, INT)) == ""


@pytest.mark.parametrize(("pattern", "why"), [
    ("\\bword", "\\b"), ("(?<name>a)", "group"), ("(?i)a", "group"), ("a{,3}", "{"),
    ("[a&&b]", "&&"), ("[[a]]", "["), ("\\p{Alpha}", "\\p"), ("a++", "after the repetition"),
    ("*a", "repeats nothing"), ("(a", "missing ), unterminated subpattern"), ("a}", "}"),
    ("\\1", "\\1"), ("[]a]", "]"), ("\\ud83d", "surrogate"), ("a\\", "lone backslash"),
])
def test_l7_regex_outside_the_subset_is_refused(pattern: str, why: str) -> None:
    with pytest.raises(fn.FunctionTypeError) as info:
        fn.parse_regex(pattern)
    assert why in info.value.message
    assert info.value.fix is not None and "supported:" in info.value.fix


def test_l7_regex_subset_translates_for_java() -> None:
    regex = fn.parse_regex("^(a|b)+?c$")
    assert regex.groups == 1
    assert regex.java == "(?s)(?![\\uDC00-\\uDFFF])(?:^(a|b)+?c\\z)"
    assert regex.python.pattern == "^(a|b)+?c\\Z"


@pytest.mark.parametrize(("replacement", "message"), [
    ("$2", "refers to group 2, but the pattern has 1"), ("${x}", "not followed by a group"),
    ("a$", "not followed by a group"), ("a\\", "lone backslash")])
def test_l7_regexp_replacement_is_checked(replacement: str, message: str) -> None:
    with pytest.raises(fn.FunctionTypeError, match=message.replace("$", "\\$")):
        call("REGEXP_REPLACE", s("x"), s("(a)"), s(replacement))


# -- TIMESTAMPDIFF ----------------------------------------------------------------------------


@pytest.mark.parametrize(("unit", "start", "end", "expected"), [
    ("SECOND", "2024-01-01 00:00:00", "2024-01-01 00:00:01.999", 1),
    ("SECOND", "2024-01-01 00:00:01.999", "2024-01-01 00:00:00", -1),  # toward zero
    ("MINUTE", "1969-12-31 23:59:00", "1970-01-01 00:00:59", 1),
    ("DAY", "1997-04-25 10:00:00", "1997-04-28 10:00:00", 3),
    ("DAY", "1997-04-27 10:00:20", "1997-04-25 10:00:00", -2),  # Flink's documented example
    ("MONTH", "2024-01-31 00:00:00", "2024-02-29 00:00:00", 1),  # a month after Jan 31
    ("MONTH", "2023-01-31 00:00:00", "2023-02-28 00:00:00", 1),
    ("MONTH", "2024-01-31 00:00:00", "2024-02-28 00:00:00", 0),  # Feb 28 is not the last day
    ("MONTH", "2024-01-31 10:00:00", "2024-02-29 09:00:00", 0),  # the time of day counts
    ("MONTH", "2024-02-01 10:00:00", "2024-01-01 09:00:00", -1),  # the same span, backwards
    ("MONTH", "2024-03-15 00:00:00", "2024-03-14 23:59:59", 0),
    ("YEAR", "2020-02-29 12:00:00", "2021-02-28 12:00:00", 1),
    ("YEAR", "2021-02-28 12:00:00", "2020-02-29 12:00:01", 0),
    ("YEAR", "0001-01-01 00:00:00", "9999-12-31 23:59:59.999", 9998),
    ("SECOND", "0001-01-01 00:00:00", "9999-12-31 23:59:59.999", None),  # INT overflow
])
def test_timestampdiff_counts_whole_units_like_flink(unit: str, start: str, end: str,
                                                     expected: int | None) -> None:
    assert ev("TIMESTAMPDIFF", s(unit), ts(start), ts(end)) == expected


def test_timestampdiff_takes_dates_as_midnight() -> None:
    start, end = fn.parse_date("1997-04-25"), fn.parse_date("1997-04-28")
    assert ev("TIMESTAMPDIFF", s("DAY"), lit(start, DATE), lit(end, DATE)) == 3
    assert ev("TIMESTAMPDIFF", s("HOUR"), lit(start, DATE), ts("1997-04-25 05:30:00")) == 5


# -- DATE_FORMAT ------------------------------------------------------------------------------


@pytest.mark.parametrize(("pattern", "expected"), [
    ("yyyy-MM-dd HH:mm:ss.SSS", "2024-02-29 15:04:05.007"),
    ("y yy M MMM MMMM d", "2024 24 2 Feb February 29"),
    ("EEE EEEE a h hh H", "Thu Thursday PM 3 03 15"),
    ("yyyy-MM-dd'T'HH:mm:ss'Z'", "2024-02-29T15:04:05Z"),
    ("'it''s' ''", "it's '"),
])
def test_date_format_uses_java_pattern_letters(pattern: str, expected: str) -> None:
    assert ev("DATE_FORMAT", ts("2024-02-29 15:04:05.007"), s(pattern)) == expected


def test_date_format_of_early_years_and_dates() -> None:
    assert ev("DATE_FORMAT", ts("0001-01-01 00:00:00"), s("yyyy y yy h a")) == "0001 1 01 12 AM"
    assert ev("DATE_FORMAT", lit(fn.parse_date("2024-01-31"), DATE), s("dd.MM.yyyy HH")) == \
        "31.01.2024 00"


@pytest.mark.parametrize(("pattern", "message"), [
    ("YYYY", "pattern letter Y"), ("yyy", "yyy is not supported"), ("S", "S is not supported"),
    ("MMMMM", "MMMMM"), ("[yyyy]", "[ is reserved"), ("'open", "unclosed quote"),
    ("yyyy-MM-dd z", "pattern letter z"),
])
def test_l7_date_format_outside_the_subset_is_refused(pattern: str, message: str) -> None:
    with pytest.raises(fn.FunctionTypeError, match=message.replace("[", "\\[")) as info:
        call("DATE_FORMAT", ts("2024-01-01 00:00:00"), s(pattern))
    assert info.value.fix


# -- JSON_VALUE -------------------------------------------------------------------------------

DOC = ('{"a": "x", "n": 12, "f": 1.50, "e": 1e2, "t": true, "z": null, "o": {"p": [1, {"q": '
       '"deep"}]}, "big": 12345678901234567890, "inf": 1E400}')


@pytest.mark.parametrize(("path", "expected"), [
    ("$.a", "x"), ("$.n", "12"), ("$.f", "1.5"), ("$.e", "100.0"), ("$.t", "true"),
    ("$.z", None), ("$.o", None), ("$.o.p", None), ("$.o.p[0]", "1"), ("$.o.p[1].q", "deep"),
    ("$.o.p[2]", None), ("$.missing", None), ("$.a.b", None), ("$[0]", None),
    ("$.big", "12345678901234567890"), ("$.inf", "Infinity"),
])
def test_json_value_gives_the_scalar_at_the_path(path: str, expected: str | None) -> None:
    assert ev("JSON_VALUE", s(DOC), s(path)) == expected


@pytest.mark.parametrize("document", [
    "", "{", '{"a": 1,', "{'a': 1}", '{"a": NaN}', '{"a": 01}', '{"a": 1, "a": 2}',
    '{"a": "\\ud800"}', '{"a": "line\nbreak"}', "\ufeff{\"a\": 1}",
])
def test_json_value_of_malformed_json_is_null(document: str) -> None:
    assert ev("JSON_VALUE", s(document), s("$.a")) is None


def test_json_value_reads_the_first_value_only() -> None:
    assert ev("JSON_VALUE", s('  {"a": 1} and more'), s("$.a")) == "1"


@pytest.mark.parametrize("path", ["$", "a", "$.a[*]", "$..a", "$['a']", "$.a-b", "$[01]",
                                  "lax $.a"])
def test_l7_json_path_outside_the_subset_is_refused(path: str) -> None:
    with pytest.raises(fn.FunctionTypeError, match="unsupported JSON path"):
        call("JSON_VALUE", s("{}"), s(path))


# -- type rules -------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "types", "message", "fix"), [
    ("REPLACE", [INT, VARCHAR, VARCHAR], "REPLACE needs VARCHAR arguments, not INT", "CAST"),
    ("IF", [INT, INT, INT], "IF needs a BOOLEAN condition, not INT", "IF(x <> 0, a, b)"),
    ("IF", [BOOLEAN, VARCHAR, INT], "incompatible types VARCHAR and INT", "CAST them"),
    ("GREATEST", [TIMESTAMP, INT], "incompatible types TIMESTAMP and INT", "CAST them"),
    ("SPLIT_PART", [VARCHAR, VARCHAR, BIGINT], "must be an INT, not BIGINT", "AS INT"),
    ("TIMESTAMPDIFF", [VARCHAR, VARCHAR, TIMESTAMP], "TIMESTAMP or DATE arguments, not VARCHAR",
     "TIMESTAMP '2024-01-01 00:00:00'"),
    ("DATE_FORMAT", [BIGINT, VARCHAR], "a TIMESTAMP or DATE, not BIGINT", "AS TIMESTAMP"),
    ("JSON_VALUE", [INT, VARCHAR], "JSON_VALUE needs VARCHAR arguments, not INT", "CAST"),
    ("POSITION", [VARCHAR, INT], "POSITION needs VARCHAR arguments, not INT", "CAST"),
])
def test_l7_new_type_rules_reject_with_a_fix(name: str, types: list[SqlType], message: str,
                                             fix: str) -> None:
    with pytest.raises(fn.FunctionTypeError) as info:
        fn.result_type(name, types)
    assert message in info.value.message
    assert info.value.fix is not None and fix in info.value.fix


# -- existing functions, as Spark computes them -----------------------------------------------


def test_s8_nan_equals_nan_and_is_the_greatest_number_like_spark() -> None:
    nan = lit(float("nan"), DOUBLE)
    assert ev("=", nan, nan) is True
    assert ev("=", nan, lit(1.0, DOUBLE)) is False
    assert ev(">", nan, lit(float("inf"), DOUBLE)) is True
    assert ev("IN", lit(2.0, DOUBLE), nan, lit(1.0, DOUBLE)) is False
    assert math.isnan(ev("GREATEST", lit(1.0, DOUBLE), nan))
    assert ev("LEAST", lit(1.0, DOUBLE), nan) == 1.0
    assert str(ev("-", lit(-0.0, DOUBLE))) == "0.0"


def test_s8_overflow_and_edge_values_give_what_spark_gives() -> None:
    assert ev("-", lit(-(2**31), INT)) is None  # Spark: try_subtract, not an error
    assert str(ev("%", lit(float("inf"), DOUBLE), lit(3.0, DOUBLE))) == "nan"
    assert ev("ROUND", lit(1e300, DOUBLE), lit(2, INT)) == 1e300
    assert ev("TIMESTAMP_MILLIS", lit(2**62, BIGINT)) is None  # beyond year 9999
    # \b is no LIKE escape: Spark fails such a pattern, so both halves give NULL.
    assert ev_unchecked("LIKE", s("a\\b"), s("a\\b")) is None


# -- the compiler: literals, and errors naming the SQL as written ---------------------------

TABLE = """CREATE TABLE t (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND,
    "Ts" TIMESTAMP, s VARCHAR, n INT, js VARCHAR
) WITH ('topic' = 't');
"""


def compile_select(select: str) -> Circuit:
    return compile_program("p.sql", TABLE + f"CREATE VIEW v AS SELECT {select} FROM t;\n")


def rejected(select: str) -> tuple[int, str, str | None]:
    """(column, message, fix) of the error of a SELECT list on line 5."""
    with pytest.raises(ProgramError) as info:
        compile_select(select)
    first = info.value.diagnostics[0]
    assert first.position.line == 5, str(first)
    return first.position.column, first.message, first.fix


SELECT_AT = len("CREATE VIEW v AS SELECT ") + 1


def test_l3_new_functions_compile_from_sql() -> None:
    circuit = compile_select(
        "REPLACE(s, 'a', 'b') AS r, POSITION('a' IN s) AS p1, STRPOS(s, 'a') AS p2, "
        "REGEXP_REPLACE(s, '([0-9]+)', '<$1>') AS rr, REGEXP_EXTRACT(s, 'x(y)?', 1) AS re, "
        "IF(n > 1, n, NULL) AS i, GREATEST(n, 2, 3) AS g, LEAST(ts, \"Ts\") AS l, "
        "TIMESTAMPDIFF(MONTH, ts, \"Ts\") AS d1, TIMESTAMPDIFF(minutes, \"Ts\", ts) AS d2, "
        "DATE_FORMAT(ts, 'yyyy-MM-dd') AS f, SPLIT_PART(s, ',', -1) AS sp, "
        "JSON_VALUE(js, '$.user.id') AS j")
    view = circuit.view("v")
    project = view.operators[-1]
    assert isinstance(project, Project)
    calls = dict(project.outputs)
    assert [str(c.type) for c in view.columns] == [
        "VARCHAR", "INT", "INT", "VARCHAR", "VARCHAR", "INT", "INT", "TIMESTAMP", "INT", "INT",
        "VARCHAR NOT NULL", "VARCHAR", "VARCHAR"]
    d1, d2 = calls["d1"], calls["d2"]
    assert isinstance(d1, Call) and isinstance(d2, Call)
    # The quoted third argument of TIMESTAMPDIFF is the column "Ts", read from the text.
    assert [getattr(a, "name", getattr(a, "value", None)) for a in d1.args] == \
        ["MONTH", "ts", "Ts"]
    assert [getattr(a, "name", getattr(a, "value", None)) for a in d2.args] == \
        ["MINUTE", "Ts", "ts"]
    assert isinstance(calls["p1"], Call) and calls["p1"].fn == "POSITION"


@pytest.mark.parametrize(("select", "written"), [
    ("CURRENT_DATE AS x", "CURRENT_DATE"), ("LOCALTIME AS x", "LOCALTIME"),
    ("CURRENT_ROW_TIMESTAMP() AS x", "CURRENT_ROW_TIMESTAMP"),
])
def test_l7_clock_functions_other_than_batch_time_are_refused_by_name(
        select: str, written: str) -> None:
    column, message, fix = rejected(select)
    assert column == SELECT_AT
    assert message.startswith(f"unsupported function {written}:")
    assert fix is not None and "NOW()" in fix


@pytest.mark.parametrize(("select", "column", "message"), [
    ("sqrt(n) AS x", 0, "unsupported function SQRT"),
    ("lpad(s, 3, 'x') AS x", 0, "unsupported function LPAD"),
    ("upper(initcap(s)) AS x", 6, "unsupported function INITCAP"),
    ("LOCATE('a', s, 2) AS x", 0, "unsupported: LOCATE with a position argument"),
    ("regexp_replace(s, 'a', 'b', 2) AS x", 0,
     "unsupported: REGEXP_REPLACE with a position argument"),
    ("count_if(n > 1) AS x", 0, "unsupported aggregate function COUNT_IF"),
    ("approx_distinct(n) AS x", 0, "unsupported aggregate function APPROX_DISTINCT"),
    ("TIMESTAMPDIFF(WEEK, ts, ts) AS x", 14, "unsupported TIMESTAMPDIFF unit WEEK"),
    ("TIMESTAMPDIFF(DAY, ts) AS x", 0, "TIMESTAMPDIFF takes 3 arguments"),
])
def test_l7_unsupported_functions_are_named_as_written(select: str, column: int,
                                                       message: str) -> None:
    at, text, fix = rejected(select)
    assert (at, text) == (SELECT_AT + column, text) and message in text
    assert fix
    for leaked in ("CURRENTTIMESTAMP", "REGEXPREPLACE", "STRPOSITION", "COUNTIF", "APPROXDIST"):
        assert leaked not in text


@pytest.mark.parametrize(("select", "column", "message", "fix"), [
    ("REGEXP_REPLACE(s, s, 'x') AS x", 0, "REGEXP_REPLACE's pattern must be a string literal",
     "REGEXP_REPLACE(s, '[0-9]+', '#')"),
    ("REGEXP_REPLACE(s, 'a', s) AS x", 0, "replacement must be a string literal", "$2$1"),
    ("upper(REGEXP_EXTRACT(s, '\\bx', 1)) AS x", 6, "unsupported regular expression '\\bx'",
     "supported:"),
    ("REGEXP_EXTRACT(s, '(a)', 2) AS x", 0, "group must be an integer literal from 0 to 1",
     "whole match"),
    ("REGEXP_EXTRACT(s, '(a)', n) AS x", 0, "group must be an integer literal", "whole match"),
    ("DATE_FORMAT(ts, s) AS x", 0, "DATE_FORMAT's pattern must be a string literal",
     "'yyyy-MM-dd'"),
    ("DATE_FORMAT(ts, 'YYYY-ww') AS x", 0, "pattern letter Y", "quote other letters"),
    ("JSON_VALUE(js, s) AS x", 0, "JSON_VALUE's path must be a string literal", "'$.user.id'"),
    ("JSON_VALUE(js, '$.items[*]') AS x", 0, "unsupported JSON path '$.items[*]'", "[index]"),
    ("SPLIT_PART(s, ',', 0) AS x", 0, "part number 0 is not a part", "-1 for the last"),
    ("s LIKE 'a\\x' AS x", 0, "bad LIKE pattern", "for a backslash"),
])
def test_l7_literal_arguments_are_checked_when_compiling(select: str, column: int,
                                                         message: str, fix: str) -> None:
    at, text, found_fix = rejected(select)
    assert at == SELECT_AT + column
    assert message in text
    assert found_fix is not None and fix in found_fix
