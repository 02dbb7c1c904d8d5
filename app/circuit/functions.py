"""The one catalog of scalar functions and operators (SPEC L3): types, Python, Spark SQL.

Every :class:`~app.circuit.ir.Call` in a circuit names an entry of :data:`FUNCTIONS`. Each entry
carries the three things every part of Tidemark needs to agree on:

* a **type rule** (argument types -> result :class:`SqlType`, or a :class:`FunctionTypeError`
  whose text says what is wrong and how to fix it), used by the compiler (SPEC L7);
* a **pure-Python implementation** with SQL NULL semantics, used by the reference evaluator,
  the oracle of every runtime test;
* a **Spark SQL rendering** (:func:`to_spark_sql`), used by the Spark runtime.

The Python and Spark halves must give identical results, so the choices below are written
down once here and in ``docs/language.md``:

* Values: TIMESTAMP = epoch milliseconds (``int``, UTC), DATE = days since epoch (``int``),
  DECIMAL = :class:`decimal.Decimal`, REAL/DOUBLE = ``float``, intervals = BIGINT ms.
* The Spark session time zone must be UTC (the runtime sets ``spark.sql.session.timeZone``);
  EXTRACT, DATE_TRUNC and string<->TIMESTAMP casts depend on it.
* Spark 4 runs with ANSI mode on; renderings use ``try_*`` functions and ``TRY_CAST`` so that
  overflow, bad strings and division by zero give NULL in both halves instead of failing a
  micro-batch (SPEC S7: bad data never stops the service).
* ``/`` on two integers is integer division truncating toward zero (SQL standard, Feldera,
  Flink), rendered with Spark's ``DIV``; ``%`` takes the sign of the dividend (Java/Spark).
  Division or modulo by zero is NULL (a literal zero divisor is not a compile error).
* DECIMAL result types follow Spark's rules (``allowPrecisionLoss``), and results are rounded
  HALF_UP to the result scale; operands are cast explicitly so Spark sees the same types.
* REAL/DOUBLE arithmetic is done in DOUBLE.
* CAST DOUBLE/DECIMAL -> INT/BIGINT truncates toward zero; out of range or NaN is NULL.
  CAST to DECIMAL rounds HALF_UP; overflow is NULL. CAST of a malformed string is NULL.
* String functions count characters (code points) and SUBSTRING is 1-based with Spark's
  treatment of 0 and negative positions (0 acts as 1, negative counts from the end).
* ``||``/CONCAT, LIKE, IN, comparison and arithmetic are NULL-strict; AND/OR are three-valued;
  COALESCE, NULLIF, IF, IS [NOT] NULL and CASE are not strict. GREATEST/LEAST are NULL when any
  argument is (Flink; Spark's skip NULLs, so the rendering tests for them).
* Numbers are ordered as Spark orders them: NaN = NaN, NaN above every other number,
  -0.0 = 0.0. Integer overflow (also of unary minus and MIN / -1) is NULL; ``%`` of an
  infinity is NaN; TIMESTAMP_MILLIS outside years 1..9999 is NULL.
* A LIKE backslash escapes only ``%``, ``_`` and itself (Spark fails any other pattern): a
  literal one is a compile error, one from a column gives NULL.
* REPLACE with an empty search string returns the string; POSITION counts characters, 0 when
  absent, 1 for ''; SPLIT_PART is Spark's (negative counts from the end, out of range '',
  empty delimiter does not split) but part 0 is NULL, not an error.
* Regular expressions (REGEXP_REPLACE, REGEXP_EXTRACT) are literal patterns of a subset on
  which java.util.regex and Python's ``re`` agree (:func:`parse_regex`), checked when
  compiling (SPEC L7). Both run with DOTALL, ``$`` is the end of the text, classes are ASCII,
  and on the Java side no match starts inside a surrogate pair. Replacements use Java's
  syntax (``$n``, ``\\$``) with Java's rule for multi-digit groups. REGEXP_EXTRACT is Flink's:
  group 0 by default, NULL without a match; a group that took no part gives '' (Spark's
  regexp_extract cannot tell it from an empty group; Flink gives NULL).
* TIMESTAMPDIFF is Flink's: whole units from t1 to t2, SECOND..DAY by milliseconds truncated
  toward zero, MONTH/YEAR by the calendar (a month after Jan 31 ends on Feb 28/29); unlike
  Flink it is antisymmetric for backward spans. INT overflow is NULL.
* DATE_FORMAT takes a literal pattern of the Java letters that DateTimeFormatter (Spark) and
  SimpleDateFormat (Flink) format alike (:data:`_DATE_LETTERS`), English names, proleptic
  Gregorian calendar.
* JSON_VALUE is the SQL standard's with NULL ON EMPTY / NULL ON ERROR: the scalar at a literal
  ``$.name[index]`` path as VARCHAR (numbers as Jackson prints them: integers exact, others
  as a DOUBLE); NULL for missing, null, object or array values and for text that is not strict
  JSON (a duplicate key or lone surrogate included). Only the first JSON value is read.

Nothing here imports pyspark (STYLE habit 1): Spark SQL is produced as text.
"""

from __future__ import annotations

import calendar
import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Context, Decimal, InvalidOperation, localcontext
from typing import Any

from app.circuit.ir import Call, Case, Cast, ColumnRef, Expr, Literal_, SqlType
from app.circuit.processing_time import BATCH_TIME_COLUMN, NOW

__all__ = [
    "FUNCTIONS",
    "FunctionTypeError",
    "Regex",
    "ScalarFunction",
    "TIMESTAMPDIFF_UNITS",
    "TIME_UNITS_MS",
    "timestamp_ceil",
    "timestamp_floor",
    "aggregate_type",
    "apply",
    "can_cast",
    "cast_value",
    "check_literals",
    "common_type",
    "evaluate",
    "format_timestamp",
    "is_numeric",
    "parse_date",
    "parse_date_format",
    "parse_json_path",
    "parse_regex",
    "parse_replacement",
    "parse_timestamp",
    "result_type",
    "spark_type",
    "to_spark_sql",
]

MAX_PRECISION = 38
_MIN_ADJUSTED_SCALE = 6
_INT_RANGE = {"INT": (-(2**31), 2**31 - 1), "BIGINT": (-(2**63), 2**63 - 1)}
_NUMERIC_ORDER = ("INT", "BIGINT", "DECIMAL", "REAL", "DOUBLE")
_MS_PER_DAY = 86_400_000
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: The TIMESTAMP range: 0001-01-01 00:00:00.000 to 9999-12-31 23:59:59.999 (epoch ms).
_MIN_TIMESTAMP_MS = -62_135_596_800_000
_MAX_TIMESTAMP_MS = 253_402_300_799_999

#: Units accepted by INTERVAL literals and DATE_TRUNC/FLOOR(ts TO unit), in milliseconds.
TIME_UNITS_MS: Mapping[str, int] = {
    "MILLISECOND": 1,
    "SECOND": 1000,
    "MINUTE": 60_000,
    "HOUR": 3_600_000,
    "DAY": _MS_PER_DAY,
}


class FunctionTypeError(Exception):
    """A call whose argument types a function does not accept (an SPEC L7 error)."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


# ---------------------------------------------------------------------------------------------
# Types


def _t(name: str, nullable: bool = True, precision: int | None = None,
       scale: int | None = None) -> SqlType:
    return SqlType(name, nullable, precision, scale)  # type: ignore[arg-type]


def is_numeric(t: SqlType) -> bool:
    return t.name in _NUMERIC_ORDER


def _is_integer(t: SqlType) -> bool:
    return t.name in ("INT", "BIGINT")


def _is_float(t: SqlType) -> bool:
    return t.name in ("REAL", "DOUBLE")


def _as_decimal(t: SqlType) -> SqlType:
    """The DECIMAL an operand takes part in decimal arithmetic as (Spark's widening)."""
    if t.name == "DECIMAL":
        return t
    if t.name == "INT":
        return _t("DECIMAL", t.nullable, 10, 0)
    return _t("DECIMAL", t.nullable, 19, 0)


def _adjust(precision: int, scale: int, nullable: bool) -> SqlType:
    """Spark's ``DecimalType.adjustPrecisionScale`` (allowPrecisionLoss = true)."""
    if precision <= MAX_PRECISION:
        return _t("DECIMAL", nullable, precision, scale)
    int_digits = precision - scale
    min_scale = min(scale, _MIN_ADJUSTED_SCALE)
    return _t("DECIMAL", nullable, MAX_PRECISION, max(MAX_PRECISION - int_digits, min_scale))


def common_type(a: SqlType, b: SqlType) -> SqlType | None:
    """The type two values are compared or unified in (CASE, COALESCE, IN), or None."""
    nullable = a.nullable or b.nullable
    if a.name == b.name and a.name != "DECIMAL":
        return a.with_nullable(nullable)
    if is_numeric(a) and is_numeric(b):
        if _is_float(a) or _is_float(b):
            return _t("DOUBLE", nullable)
        if a.name == "DECIMAL" or b.name == "DECIMAL":
            da, db = _as_decimal(a), _as_decimal(b)
            assert da.scale is not None and db.scale is not None
            assert da.precision is not None and db.precision is not None
            scale = max(da.scale, db.scale)
            ints = max(da.precision - da.scale, db.precision - db.scale)
            return _t("DECIMAL", nullable, min(MAX_PRECISION, ints + scale), scale)
        return _t("BIGINT", nullable)
    return None


def spark_type(t: SqlType) -> str:
    """The Spark SQL type name a column of this type has in the runtime."""
    return {
        "BOOLEAN": "BOOLEAN", "INT": "INT", "BIGINT": "BIGINT", "REAL": "FLOAT",
        "DOUBLE": "DOUBLE", "VARCHAR": "STRING", "DATE": "DATE", "TIMESTAMP": "TIMESTAMP",
        "VARBINARY": "BINARY",
    }.get(t.name) or f"DECIMAL({t.precision},{t.scale})"


# ---------------------------------------------------------------------------------------------
# Value helpers shared by casts and functions


_TS_RE = re.compile(
    r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|[+-]\d{2}:?\d{2})?\s*$"
)


def parse_timestamp(text: str) -> int | None:
    """A TIMESTAMP string ('2024-01-01 10:00:00[.fff][Z|+hh:mm]', 'T' allowed) to epoch ms.

    Digits below the millisecond are truncated; an unparseable string gives None.
    """
    m = _TS_RE.match(text)
    if not m:
        return None
    year, month, day, hour, minute, second, frac, zone = m.groups()
    try:
        stamp = dt.datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0),
                            int(second or 0), tzinfo=dt.UTC)
    except ValueError:
        return None
    ms = (frac or "").ljust(3, "0")[:3]
    offset_ms = 0
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset_ms = sign * (int(digits[:2]) * 3_600_000 + int(digits[2:]) * 60_000)
    delta = stamp - _EPOCH
    return (delta.days * _MS_PER_DAY + delta.seconds * 1000 + int(ms)) - offset_ms


def parse_date(text: str) -> int | None:
    """A DATE string ('2024-01-31') to days since epoch; None when malformed."""
    m = re.match(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*$", text)
    if not m:
        return None
    try:
        return (dt.date(int(m[1]), int(m[2]), int(m[3])) - dt.date(1970, 1, 1)).days
    except ValueError:
        return None


def _ts_datetime(ms: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(milliseconds=ms)


def format_timestamp(ms: int) -> str:
    """Spark's rendering of a TIMESTAMP as a string: trailing fraction zeros dropped."""
    stamp = _ts_datetime(ms)
    text = stamp.strftime("%Y-%m-%d %H:%M:%S")
    frac = ms % 1000
    return f"{text}.{frac:03d}".rstrip("0") if frac else text


def _format_date(days: int) -> str:
    return (dt.date(1970, 1, 1) + dt.timedelta(days=days)).isoformat()


def _format_double(x: float) -> str:
    """Java's Double.toString (what Spark prints): plain between 1e-3 and 1e7, else 1.5E10."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        return repr(x)
    number = Decimal(repr(x))
    digits = "".join(map(str, number.as_tuple().digits)).rstrip("0") or "0"
    sign = "-" if x < 0 else ""
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{number.adjusted()}"


def _quantize(value: Decimal, t: SqlType) -> Decimal | None:
    """Round HALF_UP to the type's scale; None when the precision overflows (Spark: NULL)."""
    assert t.precision is not None and t.scale is not None
    with localcontext(Context(prec=100)):
        try:
            q = value.quantize(Decimal(1).scaleb(-t.scale), rounding=ROUND_HALF_UP)
        except InvalidOperation:
            return None
    if q.is_nan() or len(q.as_tuple().digits) > t.precision and q != 0:
        digits = q.as_tuple()
        int_digits = len(digits.digits) + int(digits.exponent)
        if int_digits > t.precision - t.scale:
            return None
    if q.adjusted() + 1 > t.precision - t.scale and q != 0:
        return None
    return q


def _int_in_range(value: int, t: SqlType) -> int | None:
    low, high = _INT_RANGE[t.name]
    return value if low <= value <= high else None


def _to_float(value: Any) -> float:
    return float(value)


# ---------------------------------------------------------------------------------------------
# CAST


_CASTS: dict[str, set[str]] = {
    "BOOLEAN": {"BOOLEAN", "INT", "BIGINT", "VARCHAR"},
    "INT": {*_NUMERIC_ORDER, "VARCHAR", "BOOLEAN"},
    "BIGINT": {*_NUMERIC_ORDER, "VARCHAR", "BOOLEAN"},
    "DECIMAL": {*_NUMERIC_ORDER, "VARCHAR"},
    "REAL": {*_NUMERIC_ORDER, "VARCHAR"},
    "DOUBLE": {*_NUMERIC_ORDER, "VARCHAR"},
    "VARCHAR": {*_NUMERIC_ORDER, "VARCHAR", "BOOLEAN", "DATE", "TIMESTAMP", "VARBINARY"},
    "DATE": {"DATE", "TIMESTAMP", "VARCHAR"},
    "TIMESTAMP": {"DATE", "TIMESTAMP", "VARCHAR"},
    "VARBINARY": {"VARBINARY", "VARCHAR"},
}


def can_cast(source: SqlType, target: SqlType) -> bool:
    """Whether ``CAST(x AS target)`` is allowed for x of type ``source`` (else an L7 error)."""
    return target.name in _CASTS[source.name]


def cast_value(value: Any, source: SqlType, target: SqlType) -> Any:
    """CAST with the semantics documented in the module docstring; NULL stays NULL."""
    if value is None:
        return None
    s, t = source.name, target.name
    if t == "VARCHAR":
        if s == "VARCHAR":
            return value
        if s == "BOOLEAN":
            return "true" if value else "false"
        if s == "TIMESTAMP":
            return format_timestamp(value)
        if s == "DATE":
            return _format_date(value)
        if s == "DECIMAL":
            return format(value, "f")
        if s in ("REAL", "DOUBLE"):
            return _format_double(value)
        if s == "VARBINARY":
            return bytes(value).decode("utf-8", errors="replace")
        return str(value)
    if s == "VARCHAR":
        return _cast_from_string(value, target)
    if t in ("INT", "BIGINT"):
        if s == "BOOLEAN":
            return 1 if value else 0
        if isinstance(value, float):
            if math.isnan(value) or math.isinf(value):
                return None
            return _int_in_range(math.trunc(value), target)
        return _int_in_range(int(value), target)  # int() truncates Decimal toward zero
    if t == "DECIMAL":
        if isinstance(value, float):
            if math.isnan(value) or math.isinf(value):
                return None
            value = Decimal(repr(value))
        return _quantize(Decimal(value), target)
    if t in ("REAL", "DOUBLE"):
        return float(value)
    if t == "BOOLEAN":
        return value != 0
    if t == "DATE":
        return value // _MS_PER_DAY if s == "TIMESTAMP" else value
    if t == "TIMESTAMP":
        return value * _MS_PER_DAY if s == "DATE" else value
    return value


def _cast_from_string(text: str, target: SqlType) -> Any:
    t = target.name
    stripped = text.strip()
    if t in ("INT", "BIGINT"):
        if not re.fullmatch(r"[+-]?\d+", stripped):
            return None
        return _int_in_range(int(stripped), target)
    if t == "DECIMAL":
        try:
            number = Decimal(stripped)
        except InvalidOperation:
            return None
        if not number.is_finite():
            return None
        return _quantize(number, target)
    if t in ("REAL", "DOUBLE"):
        try:
            return float(stripped)
        except ValueError:
            return None
    if t == "BOOLEAN":
        lowered = stripped.lower()
        if lowered in ("true", "t", "yes", "y", "1"):
            return True
        if lowered in ("false", "f", "no", "n", "0"):
            return False
        return None
    if t == "TIMESTAMP":
        return parse_timestamp(text)
    if t == "DATE":
        return parse_date(text)
    if t == "VARBINARY":
        return text.encode("utf-8")
    return text


# ---------------------------------------------------------------------------------------------
# The catalog


TypeRule = Callable[[Sequence[SqlType]], SqlType]
Impl = Callable[[Sequence[Any], Sequence[SqlType], SqlType], Any]
SparkRule = Callable[[Sequence[str], Sequence[SqlType], SqlType], str]
#: A rendering that needs the argument expressions (their literal values), not only their text.
SparkCallRule = Callable[[Sequence[str], Sequence[Expr], SqlType], str]
#: A compile-time check of the arguments that must be literals (FunctionTypeError if not).
LiteralRule = Callable[[Sequence[Expr]], None]


@dataclass(frozen=True)
class ScalarFunction:
    """One entry of the catalog. ``strict``: any NULL argument makes the result NULL without
    calling ``impl`` (SQL's usual rule); non-strict functions see the NULLs themselves.
    ``literals`` checks, when compiling, the arguments that must be literals; ``spark_call``
    replaces ``spark`` for a rendering that reads those literals."""

    name: str
    min_args: int
    max_args: int | None
    type_rule: TypeRule
    impl: Impl
    spark: SparkRule | None
    strict: bool = True
    doc: str = ""
    literals: LiteralRule | None = None
    spark_call: SparkCallRule | None = None


FUNCTIONS: dict[str, ScalarFunction] = {}


def _register(name: str, min_args: int, max_args: int | None, type_rule: TypeRule, impl: Impl,
              spark: SparkRule | None, *, strict: bool = True, doc: str = "",
              literals: LiteralRule | None = None,
              spark_call: SparkCallRule | None = None) -> None:
    assert (spark is None) != (spark_call is None)
    FUNCTIONS[name] = ScalarFunction(name, min_args, max_args, type_rule, impl, spark, strict,
                                     doc, literals, spark_call)


def _nullable(types: Sequence[SqlType]) -> bool:
    return any(t.nullable for t in types)


def _fmt_types(types: Sequence[SqlType]) -> str:
    return ", ".join(t.name if t.name != "DECIMAL" else str(t.with_nullable(True))
                     for t in types)


# --- arithmetic ------------------------------------------------------------------------------


def _arith_type(op: str) -> TypeRule:
    def rule(types: Sequence[SqlType]) -> SqlType:
        nullable = _nullable(types)
        if len(types) == 1:
            (a,) = types
            if not is_numeric(a):
                raise FunctionTypeError(f"cannot apply unary {op} to {a.name}")
            return a
        a, b = types
        if op in ("+", "-") and a.name == "TIMESTAMP" and b.name == "BIGINT":
            return _t("TIMESTAMP", nullable)
        if op == "+" and a.name == "BIGINT" and b.name == "TIMESTAMP":
            return _t("TIMESTAMP", nullable)
        if not (is_numeric(a) and is_numeric(b)):
            fix = None
            if "TIMESTAMP" in (a.name, b.name):
                fix = "add or subtract an INTERVAL, e.g. date_time + INTERVAL '1' HOUR"
            elif "VARCHAR" in (a.name, b.name):
                fix = "CAST the VARCHAR operand to a numeric type"
            raise FunctionTypeError(f"cannot apply {op} to {a.name} and {b.name}", fix)
        if _is_float(a) or _is_float(b):
            return _t("DOUBLE", nullable)
        if a.name == "DECIMAL" or b.name == "DECIMAL":
            da, db = _as_decimal(a), _as_decimal(b)
            p1, s1, p2, s2 = da.precision, da.scale, db.precision, db.scale
            assert p1 is not None and s1 is not None and p2 is not None and s2 is not None
            if op in ("+", "-"):
                scale = max(s1, s2)
                return _adjust(max(p1 - s1, p2 - s2) + scale + 1, scale, nullable)
            if op == "*":
                return _adjust(p1 + p2 + 1, s1 + s2, nullable)
            if op == "/":
                scale = max(_MIN_ADJUSTED_SCALE, s1 + p2 + 1)
                return _adjust(p1 - s1 + s2 + scale, scale, True)
            scale = max(s1, s2)
            return _adjust(min(p1 - s1, p2 - s2) + scale, scale, True)
        result = _t("BIGINT" if "BIGINT" in (a.name, b.name) else "INT", nullable)
        return result.with_nullable(True) if op in ("/", "%") else result
    return rule


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _trunc_mod(a: int, b: int) -> int:
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


def _arith_impl(op: str) -> Impl:
    def impl(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
        if len(args) == 1:
            return _int_in_range(-args[0], result) if _is_integer(result) else -args[0]
        a, b = args
        if result.name == "TIMESTAMP":
            return a + b if op == "+" else a - b
        if result.name == "DOUBLE":
            x, y = _to_float(a), _to_float(b)
            if op in ("/", "%") and y == 0:
                return None
            if op == "+":
                return x + y
            if op == "-":
                return x - y
            if op == "*":
                return x * y
            if op == "/":
                return x / y
            if math.isinf(x) or math.isnan(x) or math.isnan(y):
                return math.nan
            return math.fmod(x, y)
        if result.name == "DECIMAL":
            dx, dy = Decimal(a), Decimal(b)
            with localcontext(Context(prec=100)):
                if op in ("/", "%") and dy == 0:
                    return None
                if op == "+":
                    exact = dx + dy
                elif op == "-":
                    exact = dx - dy
                elif op == "*":
                    exact = dx * dy
                elif op == "/":
                    exact = dx / dy
                else:
                    exact = dx % dy  # Decimal % takes the dividend's sign, like Spark
            return _quantize(exact, result)
        if op in ("/", "%") and b == 0:
            return None
        if op == "+":
            value = a + b
        elif op == "-":
            value = a - b
        elif op == "*":
            value = a * b
        elif op == "/":
            value = _trunc_div(a, b)
        else:
            value = _trunc_mod(a, b)
        return _int_in_range(value, result)
    return impl


def _cast_text(sql: str, source: SqlType, target: SqlType) -> str:
    if source.name == target.name and (source.name != "DECIMAL" or (
            source.precision, source.scale) == (target.precision, target.scale)):
        return sql
    return f"CAST({sql} AS {spark_type(target)})"


def _arith_spark(op: str) -> SparkRule:
    try_fn = {"+": "try_add", "-": "try_subtract", "*": "try_multiply", "/": "try_divide",
              "%": "try_mod"}[op]

    def spark(args: Sequence[str], types: Sequence[SqlType], result: SqlType) -> str:
        if len(args) == 1:
            if _is_integer(result):
                return f"try_subtract(0, {args[0]})"
            return f"(- {args[0]})"
        a, b = args
        ta, tb = types
        if result.name == "TIMESTAMP":
            ts, ms = (a, b) if ta.name == "TIMESTAMP" else (b, a)
            return f"TIMESTAMP_MILLIS(unix_millis({ts}) {op} {ms})"
        if result.name == "DOUBLE":
            x = _cast_text(a, ta, _t("DOUBLE"))
            y = _cast_text(b, tb, _t("DOUBLE"))
            if op == "/":
                return f"({x} / NULLIF({y}, 0D))"
            if op == "%":
                return f"({x} % NULLIF({y}, 0D))"
            return f"({x} {op} {y})"
        if result.name == "DECIMAL":
            x = _cast_text(a, ta, _as_decimal(ta))
            y = _cast_text(b, tb, _as_decimal(tb))
            if op == "%":
                return f"CAST(({x} % NULLIF({y}, 0)) AS {spark_type(result)})"
            return f"CAST({try_fn}({x}, {y}) AS {spark_type(result)})"
        x, y = _cast_text(a, ta, result), _cast_text(b, tb, result)
        if op == "/":
            if result.name == "INT":
                return f"TRY_CAST(({x} DIV NULLIF({y}, 0)) AS INT)"
            return (f"(CASE WHEN {y} = -1 THEN try_subtract(0L, {x}) "
                    f"ELSE {x} DIV NULLIF({y}, 0) END)")
        if op == "%":
            return f"({x} % NULLIF({y}, 0))"
        return f"{try_fn}({x}, {y})"
    return spark


for _op in ("+", "-", "*", "/", "%"):
    _register(_op, 1 if _op == "-" else 2, 2, _arith_type(_op), _arith_impl(_op),
              _arith_spark(_op), doc=f"arithmetic {_op}")


# --- comparison ------------------------------------------------------------------------------


def _comparison_type(op: str) -> TypeRule:
    def rule(types: Sequence[SqlType]) -> SqlType:
        a, b = types
        if common_type(a, b) is None:
            fix = None
            if {a.name, b.name} == {"TIMESTAMP", "VARCHAR"}:
                fix = "write the constant as TIMESTAMP '2024-01-01 00:00:00'"
            elif "VARCHAR" in (a.name, b.name):
                fix = "CAST one side so both have the same type"
            raise FunctionTypeError(f"cannot compare {a.name} with {b.name} using {op}", fix)
        if a.name in ("VARBINARY",) and op not in ("=", "<>"):
            raise FunctionTypeError(f"cannot order VARBINARY values with {op}")
        return _t("BOOLEAN", _nullable(types))
    return rule


def _compare_values(a: Any, b: Any) -> int:
    """Spark's order: NaN equals NaN and is greater than every other number; -0.0 = 0.0."""
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
        if math.isnan(a) or math.isnan(b):
            return int(math.isnan(a)) - int(math.isnan(b))
    return int(a > b) - int(a < b)


_COMPARE: dict[str, Callable[[int], bool]] = {
    "=": lambda c: c == 0, "<>": lambda c: c != 0, "<": lambda c: c < 0,
    "<=": lambda c: c <= 0, ">": lambda c: c > 0, ">=": lambda c: c >= 0,
}


def _comparison_impl(op: str) -> Impl:
    test = _COMPARE[op]

    def impl(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
        return test(_compare_values(args[0], args[1]))
    return impl


def _comparison_spark(op: str) -> SparkRule:
    def spark(args: Sequence[str], types: Sequence[SqlType], result: SqlType) -> str:
        common = common_type(types[0], types[1])
        assert common is not None
        a = _cast_text(args[0], types[0], common) if is_numeric(common) else args[0]
        b = _cast_text(args[1], types[1], common) if is_numeric(common) else args[1]
        return f"({a} {op} {b})"
    return spark


for _op in ("=", "<>", "<", "<=", ">", ">="):
    _register(_op, 2, 2, _comparison_type(_op), _comparison_impl(_op), _comparison_spark(_op),
              doc=f"comparison {_op}")


# --- boolean logic ---------------------------------------------------------------------------


def _boolean_type(name: str) -> TypeRule:
    def rule(types: Sequence[SqlType]) -> SqlType:
        for t in types:
            if t.name != "BOOLEAN":
                raise FunctionTypeError(f"{name} needs BOOLEAN operands, not {t.name}",
                                        "compare the value, e.g. x <> 0")
        return _t("BOOLEAN", _nullable(types))
    return rule


def _and(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    if any(a is False for a in args):
        return False
    return None if any(a is None for a in args) else True


def _or(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    if any(a is True for a in args):
        return True
    return None if any(a is None for a in args) else False


_register("AND", 2, None, _boolean_type("AND"), _and,
          lambda a, t, r: "(" + " AND ".join(a) + ")", strict=False, doc="three-valued AND")
_register("OR", 2, None, _boolean_type("OR"), _or,
          lambda a, t, r: "(" + " OR ".join(a) + ")", strict=False, doc="three-valued OR")
_register("NOT", 1, 1, _boolean_type("NOT"), lambda a, t, r: not a[0],
          lambda a, t, r: f"(NOT {a[0]})", doc="NOT")
_register("IS NULL", 1, 1, lambda t: _t("BOOLEAN", False), lambda a, t, r: a[0] is None,
          lambda a, t, r: f"({a[0]} IS NULL)", strict=False)
_register("IS NOT NULL", 1, 1, lambda t: _t("BOOLEAN", False),
          lambda a, t, r: a[0] is not None, lambda a, t, r: f"({a[0]} IS NOT NULL)",
          strict=False)


# --- LIKE, IN, CASE-like ---------------------------------------------------------------------


def _like_regex(pattern: str) -> re.Pattern[str]:
    """SQL LIKE to a regex: % any run, _ one character, backslash escapes (Spark default)."""
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _like_type(types: Sequence[SqlType]) -> SqlType:
    for t in types:
        if t.name != "VARCHAR":
            raise FunctionTypeError(f"LIKE needs VARCHAR operands, not {t.name}",
                                    "CAST the operand AS VARCHAR")
    return _t("BOOLEAN", _nullable(types))


_LIKE_VALID = re.compile(r"(?:[^\\]|\\[_%\\])*", re.DOTALL)


def _like(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    if _LIKE_VALID.fullmatch(args[1]) is None:
        return None
    return _like_regex(args[1]).fullmatch(args[0]) is not None


def _like_spark(args: Sequence[str], types: Sequence[SqlType], result: SqlType) -> str:
    valid = _spark_literal("^(?:[^\\\\]|\\\\[_%\\\\])*\\z", _t("VARCHAR"))
    return f"(CASE WHEN {args[1]} RLIKE {valid} THEN {args[0]} LIKE {args[1]} END)"


def _check_like(args: Sequence[Expr]) -> None:
    pattern = args[1]
    if isinstance(pattern, Literal_) and isinstance(pattern.value, str) and (
            _LIKE_VALID.fullmatch(pattern.value) is None):
        raise FunctionTypeError(f"bad LIKE pattern '{pattern.value}': a backslash escapes only "
                                "%, _ or a backslash", "write \\\\ for a backslash")


_register("LIKE", 2, 2, _like_type, _like, _like_spark, literals=_check_like,
          doc="LIKE: % any run, _ one character; a pattern with another backslash escape "
              "is NULL")


def _in_type(types: Sequence[SqlType]) -> SqlType:
    first = types[0]
    for t in types[1:]:
        if common_type(first, t) is None:
            raise FunctionTypeError(f"IN list value of type {t.name} cannot be compared "
                                    f"with {first.name}")
    return _t("BOOLEAN", _nullable(types))


def _in(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    if args[0] is None:
        return None
    saw_null = False
    for candidate in args[1:]:
        if candidate is None:
            saw_null = True
        elif _compare_values(args[0], candidate) == 0:
            return True
    return None if saw_null else False


def _in_spark(args: Sequence[str], types: Sequence[SqlType], result: SqlType) -> str:
    common = types[0]
    for t in types[1:]:
        common = common_type(common, t) or common
    if is_numeric(common):
        rendered = [_cast_text(a, t, common) for a, t in zip(args, types, strict=True)]
    else:
        rendered = list(args)
    return f"({rendered[0]} IN ({', '.join(rendered[1:])}))"


_register("IN", 2, None, _in_type, _in, _in_spark, strict=False,
          doc="x IN (v1, ...): NULL when x is NULL or no match and a NULL in the list")


def _unify(name: str, types: Sequence[SqlType]) -> SqlType:
    result = types[0]
    for t in types[1:]:
        unified = common_type(result, t)
        if unified is None:
            raise FunctionTypeError(f"{name} arguments have incompatible types "
                                    f"{result.name} and {t.name}", "CAST them to one type")
        result = unified
    return result


def _coalesce_type(types: Sequence[SqlType]) -> SqlType:
    return _unify("COALESCE", types).with_nullable(all(t.nullable for t in types))


def _coalesce(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    for arg, t in zip(args, types, strict=True):
        if arg is not None:
            return cast_value(arg, t, result) if is_numeric(result) else arg
    return None


def _unified_spark(fn: str) -> SparkRule:
    def spark(args: Sequence[str], types: Sequence[SqlType], result: SqlType) -> str:
        target = result
        rendered = [_cast_text(a, t, target) if is_numeric(target) else a
                    for a, t in zip(args, types, strict=True)]
        return f"{fn}({', '.join(rendered)})"
    return spark


_register("COALESCE", 1, None, _coalesce_type, _coalesce, _unified_spark("coalesce"),
          strict=False)


def _nullif_type(types: Sequence[SqlType]) -> SqlType:
    _unify("NULLIF", types)
    return types[0].with_nullable(True)


def _nullif(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    a, b = args
    if a is None or b is None:
        return a
    return None if _compare_values(a, b) == 0 else a


def _nullif_spark(args: Sequence[str], types: Sequence[SqlType], result: SqlType) -> str:
    a, b = args
    common = common_type(types[0], types[1])
    assert common is not None
    if is_numeric(common) and types[0] != types[1]:
        return (f"CASE WHEN {_cast_text(a, types[0], common)} = {_cast_text(b, types[1], common)}"
                f" THEN NULL ELSE {a} END")
    return f"nullif({a}, {b})"


_register("NULLIF", 2, 2, _nullif_type, _nullif, _nullif_spark, strict=False)


# --- numeric functions -----------------------------------------------------------------------


def _numeric_arg(name: str, t: SqlType) -> None:
    if not is_numeric(t):
        raise FunctionTypeError(f"{name} needs a numeric argument, not {t.name}",
                                _numeric_fix(name, t))


def _numeric_fix(name: str, t: SqlType) -> str:
    """How to give ``name`` a number instead of a value of type ``t``."""
    if t.name in ("TIMESTAMP", "DATE"):
        return f"give {name} a number: UNIX_MILLIS(ts) is a TIMESTAMP's epoch milliseconds"
    if t.name == "VARCHAR":
        return f"give {name} a number: CAST(s AS DECIMAL(10, 2)) reads one from text"
    return f"give {name} a numeric column (INT, BIGINT, DECIMAL, REAL or DOUBLE)"


def _abs_type(types: Sequence[SqlType]) -> SqlType:
    _numeric_arg("ABS", types[0])
    return types[0]


def _abs(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    value = abs(args[0])
    return _int_in_range(value, result) if _is_integer(result) else value


def _abs_spark(args: Sequence[str], types: Sequence[SqlType], result: SqlType) -> str:
    if _is_integer(result):
        return f"CASE WHEN {args[0]} < 0 THEN try_subtract(0, {args[0]}) ELSE {args[0]} END"
    return f"abs({args[0]})"


_register("ABS", 1, 1, _abs_type, _abs, _abs_spark)


def _floor_ceil_type(name: str) -> TypeRule:
    def rule(types: Sequence[SqlType]) -> SqlType:
        t = types[0]
        _numeric_arg(name, t)
        if t.name == "DECIMAL":
            assert t.precision is not None and t.scale is not None
            return _t("DECIMAL", t.nullable, min(MAX_PRECISION, t.precision - t.scale + 1), 0)
        if t.name == "REAL":
            return _t("DOUBLE", t.nullable)
        return t
    return rule


def _floor_ceil_impl(up: bool) -> Impl:
    def impl(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
        value = args[0]
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            if math.isnan(value) or math.isinf(value):
                return value
            return float(math.ceil(value) if up else math.floor(value))
        return _quantize(Decimal(value).to_integral_value(
            rounding="ROUND_CEILING" if up else ROUND_FLOOR), result)
    return impl


def _floor_ceil_spark(fn: str) -> SparkRule:
    def spark(args: Sequence[str], types: Sequence[SqlType], result: SqlType) -> str:
        if _is_integer(types[0]):
            return args[0]
        if result.name == "DOUBLE":
            x = _cast_text(args[0], types[0], _t("DOUBLE"))
            # Spark's FLOOR(DOUBLE) is BIGINT; SQL keeps DOUBLE. Beyond 2**53 every double is
            # already integral, so the round trip through BIGINT is exact where it matters.
            return (f"CASE WHEN abs({x}) >= 9007199254740992D OR isnan({x}) THEN {x} "
                    f"ELSE CAST({fn}({x}) AS DOUBLE) END")
        return f"CAST({fn}({args[0]}) AS {spark_type(result)})"
    return spark


_register("FLOOR", 1, 1, _floor_ceil_type("FLOOR"), _floor_ceil_impl(False),
          _floor_ceil_spark("floor"), doc="FLOOR(x); FLOOR(ts TO unit) is DATE_TRUNC")
_register("CEIL", 1, 1, _floor_ceil_type("CEIL"), _floor_ceil_impl(True),
          _floor_ceil_spark("ceil"))


def _round_type(types: Sequence[SqlType]) -> SqlType:
    t = types[0]
    _numeric_arg("ROUND", t)
    if len(types) == 2 and not _is_integer(types[1]):
        raise FunctionTypeError("ROUND's second argument must be an integer")
    if t.name == "DECIMAL":
        # The digits are a literal (the compiler checks); the type is refined by the compiler
        # through round_decimal_type, here the conservative same-type answer.
        return t
    if t.name == "REAL":
        return _t("DOUBLE", t.nullable)
    return t


def round_decimal_type(t: SqlType, digits: int) -> SqlType:
    """ROUND(DECIMAL(p,s), d) for a literal d >= 0: DECIMAL(p - s + min(s,d) + 1, min(s,d))."""
    assert t.precision is not None and t.scale is not None
    scale = min(t.scale, max(digits, 0))
    return _t("DECIMAL", t.nullable, min(MAX_PRECISION, t.precision - t.scale + scale + 1),
              scale)


def _round(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    value = args[0]
    digits = args[1] if len(args) > 1 else 0
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return value
        with localcontext(Context(prec=400)):  # every double has at most 309 integer digits
            rounded = Decimal(repr(value)).quantize(Decimal(1).scaleb(-digits),
                                                   rounding=ROUND_HALF_UP)
        return float(rounded)
    with localcontext(Context(prec=100)):
        rounded = Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return _quantize(rounded, result)


def _round_spark(args: Sequence[str], types: Sequence[SqlType], result: SqlType) -> str:
    digits = args[1] if len(args) > 1 else "0"
    if _is_integer(types[0]):
        return args[0]
    if result.name == "DOUBLE":
        return f"round({_cast_text(args[0], types[0], _t('DOUBLE'))}, {digits})"
    return f"CAST(round({args[0]}, {digits}) AS {spark_type(result)})"


_register("ROUND", 1, 2, _round_type, _round, _round_spark,
          doc="ROUND(x [, d]) HALF_UP; d must be an integer literal")


# --- string functions ------------------------------------------------------------------------


def _string_type(name: str, result: str | None = None) -> TypeRule:
    def rule(types: Sequence[SqlType]) -> SqlType:
        if types[0].name != "VARCHAR":
            raise FunctionTypeError(f"{name} needs a VARCHAR argument, not {types[0].name}",
                                    "CAST the argument AS VARCHAR")
        return _t(result or "VARCHAR", _nullable(types))
    return rule


_register("UPPER", 1, 1, _string_type("UPPER"), lambda a, t, r: a[0].upper(),
          lambda a, t, r: f"upper({a[0]})")
_register("LOWER", 1, 1, _string_type("LOWER"), lambda a, t, r: a[0].lower(),
          lambda a, t, r: f"lower({a[0]})")
_register("TRIM", 1, 1, _string_type("TRIM"), lambda a, t, r: a[0].strip(" "),
          lambda a, t, r: f"trim({a[0]})", doc="removes leading and trailing spaces")
_register("CHAR_LENGTH", 1, 1, _string_type("CHAR_LENGTH", "INT"), lambda a, t, r: len(a[0]),
          lambda a, t, r: f"char_length({a[0]})", doc="characters, also LENGTH")


def _substring_type(types: Sequence[SqlType]) -> SqlType:
    _string_type("SUBSTRING")(types[:1])
    for t in types[1:]:
        if not _is_integer(t):
            raise FunctionTypeError(f"SUBSTRING positions must be integers, not {t.name}")
    return _t("VARCHAR", _nullable(types))


def _substring(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    text: str = args[0]
    pos: int = args[1]
    length: int = args[2] if len(args) > 2 else 2**31 - 1
    n = len(text)
    start = pos - 1 if pos > 0 else (n + pos if pos < 0 else 0)
    end = start + length
    start = max(start, 0)
    if start >= end:
        return ""
    return text[start:min(end, n)]


_register("SUBSTRING", 2, 3, _substring_type, _substring,
          lambda a, t, r: f"substring({', '.join(a)})",
          doc="1-based; position 0 acts as 1, a negative position counts from the end")


def _concat_type(types: Sequence[SqlType]) -> SqlType:
    for t in types:
        if t.name != "VARCHAR":
            raise FunctionTypeError(f"|| and CONCAT need VARCHAR operands, not {t.name}",
                                    "CAST the operand AS VARCHAR")
    return _t("VARCHAR", _nullable(types))


_register("CONCAT", 1, None, _concat_type, lambda a, t, r: "".join(a),
          lambda a, t, r: f"concat({', '.join(a)})", doc="NULL if any argument is NULL")


# --- time functions --------------------------------------------------------------------------


_FIELDS = ("YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND")


def _field_type(name: str) -> TypeRule:
    def rule(types: Sequence[SqlType]) -> SqlType:
        t = types[0]
        if t.name not in ("TIMESTAMP", "DATE") or (
                t.name == "DATE" and name in ("HOUR", "MINUTE", "SECOND")):
            raise FunctionTypeError(f"cannot EXTRACT {name} from {t.name}")
        return _t("BIGINT", t.nullable)
    return rule


def _field_impl(name: str) -> Impl:
    def impl(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
        ms = args[0] * _MS_PER_DAY if types[0].name == "DATE" else args[0]
        stamp = _ts_datetime(ms)
        return int(getattr(stamp, name.lower()))
    return impl


for _field in _FIELDS:
    _register(_field, 1, 1, _field_type(_field), _field_impl(_field),
              (lambda fn: lambda a, t, r: f"CAST({fn}({a[0]}) AS BIGINT)")(_field.lower()),
              doc=f"EXTRACT({_field} FROM x), UTC")

_TRUNC_UNITS = ("SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR")


def _trunc_type(types: Sequence[SqlType]) -> SqlType:
    unit, t = types
    if unit.name != "VARCHAR" or t.name != "TIMESTAMP":
        raise FunctionTypeError(f"DATE_TRUNC needs ('unit', TIMESTAMP), not ({unit.name}, "
                                f"{t.name})")
    return _t("TIMESTAMP", t.nullable)


def _trunc(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    unit = str(args[0]).upper()
    ms: int = args[1]
    if unit in TIME_UNITS_MS:
        size = TIME_UNITS_MS[unit]
        return ms - ms % size
    stamp = _ts_datetime(ms)
    first = stamp.replace(month=1 if unit == "YEAR" else stamp.month, day=1, hour=0, minute=0,
                          second=0, microsecond=0)
    delta = first - _EPOCH
    return delta.days * _MS_PER_DAY + delta.seconds * 1000


_register("DATE_TRUNC", 2, 2, _trunc_type, _trunc,
          lambda a, t, r: f"date_trunc({a[0]}, {a[1]})",
          doc=f"DATE_TRUNC('unit', ts) and FLOOR(ts TO unit); units {', '.join(_TRUNC_UNITS)}")


def _ceil_type(types: Sequence[SqlType]) -> SqlType:
    unit, t = types
    if unit.name != "VARCHAR" or t.name != "TIMESTAMP":
        raise FunctionTypeError(f"CEIL(ts TO unit) needs a TIMESTAMP, not {t.name}")
    return _t("TIMESTAMP", t.nullable)


def _ceil(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    """The least instant at or after ``ts`` on a ``unit`` boundary (Calcite's CEIL(ts TO
    unit)): ``ts`` itself when already on one, else the next boundary."""
    unit = str(args[0]).upper()
    ms: int = args[1]
    floor: int = _trunc(args, types, result)
    if floor == ms:
        return ms
    if unit in TIME_UNITS_MS:
        following_ms = floor + TIME_UNITS_MS[unit]
        return following_ms if following_ms <= _MAX_TIMESTAMP_MS else None
    stamp = _ts_datetime(floor)
    if stamp.year == 9999 and (unit == "YEAR" or stamp.month == 12):
        return None  # past the TIMESTAMP range
    if unit == "YEAR":
        following = stamp.replace(year=stamp.year + 1)
    else:
        following = stamp.replace(year=stamp.year + stamp.month // 12,
                                  month=stamp.month % 12 + 1)
    delta = following - _EPOCH
    return delta.days * _MS_PER_DAY + delta.seconds * 1000


def _ceil_spark(args: Sequence[str], types: Sequence[SqlType], result: SqlType) -> str:
    unit, ts = args
    word = unit.strip("'").upper()
    following = f"date_trunc({unit}, {ts}) + INTERVAL 1 {word}"
    return (f"(CASE WHEN date_trunc({unit}, {ts}) = {ts} THEN {ts} "
            f"WHEN {following} <= TIMESTAMP_MILLIS({_MAX_TIMESTAMP_MS}L) THEN {following} END)")


def timestamp_floor(ms: int, unit: str) -> int:
    """FLOOR(ts TO unit) of epoch milliseconds (DATE_TRUNC's implementation)."""
    result: int = _trunc((unit, ms), (), _t("TIMESTAMP"))
    return result


def timestamp_ceil(ms: int, unit: str) -> int | None:
    """CEIL(ts TO unit) of epoch milliseconds; None past the TIMESTAMP range."""
    result: int | None = _ceil((unit, ms), (), _t("TIMESTAMP"))
    return result


_register("DATE_CEIL", 2, 2, _ceil_type, _ceil, _ceil_spark,
          doc=f"CEIL(ts TO unit); units {', '.join(_TRUNC_UNITS)}")


def _ts_millis_type(types: Sequence[SqlType]) -> SqlType:
    if not _is_integer(types[0]):
        fix = ("it is already a TIMESTAMP" if types[0].name == "TIMESTAMP" else
               "give TIMESTAMP_MILLIS an INT or BIGINT of epoch milliseconds (CAST(x AS "
               "BIGINT) truncates a number to one)")
        raise FunctionTypeError(f"TIMESTAMP_MILLIS needs an integer (epoch milliseconds), not "
                                f"{types[0].name}", fix)
    return _t("TIMESTAMP", types[0].nullable)


def _unix_millis_type(types: Sequence[SqlType]) -> SqlType:
    if types[0].name != "TIMESTAMP":
        fix = {"DATE": "write UNIX_MILLIS(CAST(d AS TIMESTAMP)) (midnight UTC of the date)",
               "VARCHAR": "write UNIX_MILLIS(CAST(s AS TIMESTAMP)) to read a time from text"
               }.get(types[0].name, "give UNIX_MILLIS a TIMESTAMP; TIMESTAMP_MILLIS(ms) is the "
                                    "TIMESTAMP of epoch milliseconds")
        raise FunctionTypeError(f"UNIX_MILLIS needs a TIMESTAMP, not {types[0].name}", fix)
    return _t("BIGINT", types[0].nullable)


def _ts_millis(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    return int(args[0]) if _MIN_TIMESTAMP_MS <= args[0] <= _MAX_TIMESTAMP_MS else None


_register("TIMESTAMP_MILLIS", 1, 1, _ts_millis_type, _ts_millis,
          lambda a, t, r: f"(CASE WHEN {a[0]} BETWEEN {_MIN_TIMESTAMP_MS}L AND "
                          f"{_MAX_TIMESTAMP_MS}L THEN TIMESTAMP_MILLIS({a[0]}) END)",
          doc="epoch ms to TIMESTAMP; NULL outside years 1 to 9999")
_register("UNIX_MILLIS", 1, 1, _unix_millis_type, lambda a, t, r: int(a[0]),
          lambda a, t, r: f"unix_millis({a[0]})", doc="TIMESTAMP to epoch ms")


# --- conditional and ordering functions ------------------------------------------------------


def _if_type(types: Sequence[SqlType]) -> SqlType:
    if types[0].name != "BOOLEAN":
        raise FunctionTypeError(f"IF needs a BOOLEAN condition, not {types[0].name}",
                                "compare the value, e.g. IF(x <> 0, a, b)")
    return _unify("IF", types[1:]).with_nullable(types[1].nullable or types[2].nullable)


def _if(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    # A NULL condition is not TRUE, so it picks the ELSE value (as CASE WHEN does).
    index = 1 if args[0] is True else 2
    return _coerce(args[index], types[index], result)


def _if_spark(args: Sequence[str], types: Sequence[SqlType], result: SqlType) -> str:
    then = _cast_text(args[1], types[1], result) if is_numeric(result) else args[1]
    else_ = _cast_text(args[2], types[2], result) if is_numeric(result) else args[2]
    return f"(CASE WHEN {args[0]} THEN {then} ELSE {else_} END)"


_register("IF", 3, 3, _if_type, _if, _if_spark, strict=False,
          doc="IF(cond, a, b): b when cond is FALSE or NULL")


def _extremum_type(name: str) -> TypeRule:
    def rule(types: Sequence[SqlType]) -> SqlType:
        for t in types:
            if t.name == "VARBINARY":
                raise FunctionTypeError(f"{name} cannot order VARBINARY values",
                                        "CAST the values AS VARCHAR")
        return _unify(name, types)
    return rule


def _extremum_impl(sign: int) -> Impl:
    def impl(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
        values = [_coerce(a, t, result) for a, t in zip(args, types, strict=True)]
        best = values[0]
        for value in values[1:]:
            # Strictly better only: the first of equal values wins (Spark keeps it, and
            # -0.0 = 0.0 makes the choice visible).
            if _compare_values(value, best) * sign > 0:
                best = value
        return best
    return impl


def _strict_spark(fn: str, args: Sequence[str], types: Sequence[SqlType],
                  result: SqlType) -> str:
    """Spark's greatest/least skip NULLs; SQL's (Flink's) are NULL when any argument is."""
    any_null = " OR ".join(f"{a} IS NULL" for a in args)
    return f"(CASE WHEN {any_null} THEN NULL ELSE {_unified_spark(fn)(args, types, result)} END)"


_register("GREATEST", 2, None, _extremum_type("GREATEST"), _extremum_impl(1),
          lambda a, t, r: _strict_spark("greatest", a, t, r),
          doc="GREATEST(a, b, ...): NULL if any argument is NULL (Flink); NaN is the greatest")
_register("LEAST", 2, None, _extremum_type("LEAST"), _extremum_impl(-1),
          lambda a, t, r: _strict_spark("least", a, t, r),
          doc="LEAST(a, b, ...): NULL if any argument is NULL (Flink); NaN is the greatest")


# --- more string functions -------------------------------------------------------------------


def _strings_type(name: str, count: int, result: str = "VARCHAR") -> TypeRule:
    """A rule for a function whose first ``count`` arguments are VARCHAR."""
    def rule(types: Sequence[SqlType]) -> SqlType:
        for t in types[:count]:
            if t.name != "VARCHAR":
                raise FunctionTypeError(f"{name} needs VARCHAR arguments, not {t.name}",
                                        "CAST the argument AS VARCHAR")
        return _t(result, _nullable(types))
    return rule


def _replace(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    text, search, replacement = args
    return text if search == "" else text.replace(search, replacement)


_register("REPLACE", 3, 3, _strings_type("REPLACE", 3), _replace,
          lambda a, t, r: f"replace({a[0]}, {a[1]}, {a[2]})",
          doc="REPLACE(s, from, to): every occurrence; an empty from leaves s unchanged")


def _position_type(types: Sequence[SqlType]) -> SqlType:
    _strings_type("POSITION", 2)(types)
    return _t("INT", _nullable(types))


_register("POSITION", 2, 2, _position_type, lambda a, t, r: a[1].find(a[0]) + 1,
          lambda a, t, r: f"locate({a[0]}, {a[1]})",
          doc="POSITION(sub IN s), also STRPOS(s, sub): 1-based characters, 0 if absent, 1 for ''")


def _split_part_type(types: Sequence[SqlType]) -> SqlType:
    _strings_type("SPLIT_PART", 2)(types)
    if types[2].name != "INT":
        raise FunctionTypeError(f"SPLIT_PART's part number must be an INT, not {types[2].name}",
                                "CAST the part number AS INT")
    return _t("VARCHAR", True)


def _split_part(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    text, delimiter, n = args
    if n == 0:
        return None
    parts = text.split(delimiter) if delimiter else [text]
    index = n - 1 if n > 0 else len(parts) + n
    return parts[index] if 0 <= index < len(parts) else ""


def _check_split_part(args: Sequence[Expr]) -> None:
    n = args[2]
    if isinstance(n, Literal_) and n.value == 0:
        raise FunctionTypeError("SPLIT_PART's part number 0 is not a part: parts are "
                                "numbered from 1", "write 1 for the first part, -1 for the last")


_register("SPLIT_PART", 3, 3, _split_part_type, _split_part,
          lambda a, t, r: f"(CASE WHEN {a[2]} = 0 THEN NULL ELSE split_part({a[0]}, {a[1]}, "
                          f"{a[2]}) END)", literals=_check_split_part,
          doc="SPLIT_PART(s, delimiter, n): 1-based, negative n counts from the end, out of "
              "range is '', n = 0 is NULL, an empty delimiter does not split")


# --- regular expressions (a subset on which java.util.regex and Python's re agree) -----------


_REGEX_PUNCTUATION = frozenset("\\.^$|?*+()[]{}-/!\"#%&',:;<=>@_`~ ")
_REGEX_SIMPLE_ESCAPES = frozenset("dDwWsStnrf")
_REGEX_FIX = ("supported: literal characters, ., [...] classes, ^, $, * + ? {n,m} (also lazy "
              "with ?), (...), (?:...), (?=...), (?!...), |, \\d \\D \\w \\W \\s \\S \\t \\n "
              "\\r \\f \\xhh \\uhhhh and a backslash before punctuation")


@dataclass(frozen=True)
class Regex:
    """A regular expression of the supported subset, as each engine must be given it."""

    python: re.Pattern[str]
    java: str
    groups: int


def _regex_error(pattern: str, what: str) -> FunctionTypeError:
    return FunctionTypeError(f"unsupported regular expression '{pattern}': {what}", _REGEX_FIX)


def _regex_escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
    """The escape at ``pattern[i]`` (a backslash) and the index after it."""
    if i + 1 >= len(pattern):
        raise _regex_error(pattern, "it ends with a lone backslash")
    ch = pattern[i + 1]
    if ch in _REGEX_SIMPLE_ESCAPES or ch in _REGEX_PUNCTUATION:
        return pattern[i:i + 2], i + 2
    if ch == "x" and re.fullmatch(r"[0-9A-Fa-f]{2}", pattern[i + 2:i + 4]):
        return pattern[i:i + 4], i + 4
    if ch == "u" and re.fullmatch(r"[0-9A-Fa-f]{4}", pattern[i + 2:i + 6]):
        if 0xD800 <= int(pattern[i + 2:i + 6], 16) <= 0xDFFF:
            raise _regex_error(pattern, "a \\u escape of a surrogate")
        return pattern[i:i + 6], i + 6
    if ch == "b" and not in_class:
        raise _regex_error(pattern, "\\b (word boundaries differ between the engines)")
    raise _regex_error(pattern, f"the escape \\{ch}")


def _regex_class(pattern: str, i: int) -> tuple[str, int]:
    """The character class starting at ``pattern[i]`` ('[') and the index after it."""
    j = i + 1
    if pattern.startswith("^", j):
        j += 1
    if pattern.startswith("]", j):
        raise _regex_error(pattern, "a ] first in a character class (write \\])")
    while j < len(pattern):
        ch = pattern[j]
        if ch == "]":
            return pattern[i:j + 1], j + 1
        if ch == "\\":
            _, j = _regex_escape(pattern, j, in_class=True)
            continue
        if ch == "[":
            raise _regex_error(pattern, "a [ inside a character class (write \\[)")
        if pattern[j:j + 2] in ("&&", "--", "||", "~~"):
            raise _regex_error(pattern, f"{pattern[j:j + 2]} inside a character class")
        j += 1
    raise _regex_error(pattern, "an unclosed character class")


def _regex_translate(pattern: str) -> tuple[str, str, int]:
    """(Python pattern, Java pattern, number of groups); FunctionTypeError outside the subset.

    Both engines run with DOTALL (``.`` matches line ends too: Java's ``.`` otherwise stops at
    \\r and \\u2028 where Python's does not), ``$`` becomes the end of the text (``\\Z`` /
    ``\\z``: otherwise each engine matches before a different set of final line ends), and
    Python's classes are ASCII ones like Java's (``\\d`` is [0-9]).
    """
    python: list[str] = []
    java: list[str] = []
    groups = 0
    repeatable = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            text, i = _regex_escape(pattern, i, in_class=False)
            python.append(text)
            java.append(text)
            repeatable = True
            continue
        if ch == "[":
            text, i = _regex_class(pattern, i)
            python.append(text)
            java.append(text)
            repeatable = True
            continue
        if ch in "*+?{":
            quantifier = re.match(r"[*+?]|\{(\d{1,4})(,(\d{0,4}))?\}", pattern[i:])
            if quantifier is None:
                raise _regex_error(pattern, "a { that is not a repetition {n}, {n,} or {n,m} "
                                   "(write \\{)")
            if not repeatable:
                raise _regex_error(pattern, f"{quantifier[0]} repeats nothing")
            low, high = quantifier[1], quantifier[3]
            if high and int(high) < int(low):
                raise _regex_error(pattern, f"{quantifier[0]} has its bounds reversed")
            text = quantifier[0]
            i += len(text)
            if pattern.startswith("?", i):
                text += "?"
                i += 1
            if i < len(pattern) and pattern[i] in "*+?{":
                raise _regex_error(pattern, f"{pattern[i]} after the repetition {text}")
            python.append(text)
            java.append(text)
            repeatable = False
            continue
        if ch == "(":
            if pattern.startswith("(?", i):
                if not pattern.startswith(("(?:", "(?=", "(?!"), i):
                    raise _regex_error(pattern, f"the group {pattern[i:i + 4]}... (only (...), "
                                       "(?:...), (?=...) and (?!...))")
                text = pattern[i:i + 3]
            else:
                groups += 1
                text = "("
            python.append(text)
            java.append(text)
            i += len(text)
            repeatable = False
            continue
        if ch in "}]":
            raise _regex_error(pattern, f"an unmatched {ch} (write \\{ch})")
        if ch == "$":
            python.append("\\Z")
            java.append("\\z")
            repeatable = False
        else:
            python.append(ch)
            java.append(ch)
            repeatable = ch not in "^|"
        i += 1
    # Java steps over an empty match by one UTF-16 unit, so a match could start between the
    # two halves of a character beyond U+FFFF (an emoji): no match starts at a low surrogate.
    return "".join(python), "(?s)(?![\\uDC00-\\uDFFF])(?:" + "".join(java) + ")", groups


_REGEX_CACHE: dict[str, Regex] = {}


def parse_regex(pattern: str) -> Regex:
    """The :class:`Regex` of a pattern of the supported subset (FunctionTypeError if not)."""
    cached = _REGEX_CACHE.get(pattern)
    if cached is not None:
        return cached
    python, java, groups = _regex_translate(pattern)
    try:
        compiled = re.compile(python, re.ASCII | re.DOTALL)
    except re.error as exc:
        raise _regex_error(pattern, str(exc)) from exc
    regex = Regex(compiled, java, groups)
    if len(_REGEX_CACHE) < 1024:
        _REGEX_CACHE[pattern] = regex
    return regex


def parse_replacement(text: str, groups: int) -> tuple[str | int, ...]:
    """A REGEXP_REPLACE replacement in Java's syntax, as literal texts and group numbers.

    ``$n`` is group n (as Java reads it: the first digit always, more digits while they name
    an existing group), ``\\x`` is the character x; anything else is literal.
    """
    parts: list[str | int] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text):
                raise FunctionTypeError(f"the replacement '{text}' ends with a lone backslash",
                                        "write \\\\ for a backslash")
            literal.append(text[i + 1])
            i += 2
            continue
        if ch != "$":
            literal.append(ch)
            i += 1
            continue
        if i + 1 >= len(text) or text[i + 1] not in "0123456789":
            raise FunctionTypeError(f"the replacement '{text}' has a $ not followed by a group "
                                    "number", "write $1 for group 1, \\$ for a dollar sign")
        group = int(text[i + 1])
        i += 2
        if group > groups:
            raise FunctionTypeError(f"the replacement '{text}' refers to group {group}, but "
                                    f"the pattern has {groups}",
                                    "refer to groups that the pattern has, $0 for the match")
        while i < len(text) and text[i] in "0123456789" and group * 10 + int(text[i]) <= groups:
            group = group * 10 + int(text[i])
            i += 1
        if literal:
            parts.append("".join(literal))
            literal = []
        parts.append(group)
    if literal:
        parts.append("".join(literal))
    return tuple(parts)


def _regexp_replace(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    regex = parse_regex(args[1])
    parts = parse_replacement(args[2], regex.groups)

    def expand(match: re.Match[str]) -> str:
        # A group that took no part in the match is empty (Java's appendReplacement).
        return "".join(p if isinstance(p, str) else match.group(p) or "" for p in parts)

    return regex.python.sub(expand, args[0])


def _regexp_extract(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    regex = parse_regex(args[1])
    match = regex.python.search(args[0])
    if match is None:
        return None
    return match.group(args[2] if len(args) > 2 else 0) or ""


def _literal_value(call: Sequence[Expr], index: int) -> Any:
    arg = call[index]
    assert isinstance(arg, Literal_)
    return arg.value


def _regexp_replace_spark(args: Sequence[str], exprs: Sequence[Expr], result: SqlType) -> str:
    java = parse_regex(_literal_value(exprs, 1)).java
    return f"regexp_replace({args[0]}, {_spark_literal(java, _t('VARCHAR'))}, {args[2]})"


def _regexp_extract_spark(args: Sequence[str], exprs: Sequence[Expr], result: SqlType) -> str:
    pattern = _spark_literal(parse_regex(_literal_value(exprs, 1)).java, _t("VARCHAR"))
    group = args[2] if len(args) > 2 else "0"
    return f"(CASE WHEN {args[0]} RLIKE {pattern} THEN regexp_extract({args[0]}, {pattern}, " \
           f"{group}) END)"


def _regexp_extract_type(types: Sequence[SqlType]) -> SqlType:
    _strings_type("REGEXP_EXTRACT", 2)(types)
    if len(types) > 2 and types[2].name != "INT":
        raise FunctionTypeError(f"REGEXP_EXTRACT's group must be an integer, not "
                                f"{types[2].name}", "write the group number, e.g. 1")
    return _t("VARCHAR", True)




def _literal_text(name: str, what: str, example: str, args: Sequence[Expr],
                  index: int) -> str:
    arg = args[index]
    if not isinstance(arg, Literal_) or not isinstance(arg.value, str):
        raise FunctionTypeError(f"{name}'s {what} must be a string literal (both engines must "
                                "read it alike, so it is checked when compiling)",
                                f"write it as a literal, e.g. {example}")
    return arg.value


def _check_regexp_replace(args: Sequence[Expr]) -> None:
    regex = parse_regex(_literal_text("REGEXP_REPLACE", "pattern",
                                      "REGEXP_REPLACE(s, '[0-9]+', '#')", args, 1))
    parse_replacement(_literal_text("REGEXP_REPLACE", "replacement",
                                    "REGEXP_REPLACE(s, '(a)(b)', '$2$1')", args, 2),
                      regex.groups)


def _check_regexp_extract(args: Sequence[Expr]) -> None:
    regex = parse_regex(_literal_text("REGEXP_EXTRACT", "pattern",
                                      "REGEXP_EXTRACT(s, 'id=([0-9]+)', 1)", args, 1))
    if len(args) > 2:
        group = args[2]
        if not isinstance(group, Literal_) or not isinstance(group.value, int) or not (
                0 <= group.value <= regex.groups):
            raise FunctionTypeError(f"REGEXP_EXTRACT's group must be an integer literal from 0 "
                                    f"to {regex.groups} (the pattern's groups)",
                                    "write 0 for the whole match, 1 for the first group")


_register("REGEXP_REPLACE", 3, 3, _strings_type("REGEXP_REPLACE", 3), _regexp_replace, None,
          literals=_check_regexp_replace, spark_call=_regexp_replace_spark,
          doc="REGEXP_REPLACE(s, 'pattern', 'replacement'): every match; literal pattern and "
              "replacement ($1, \\$) of the supported subset")
_register("REGEXP_EXTRACT", 2, 3, _regexp_extract_type, _regexp_extract, None,
          literals=_check_regexp_extract, spark_call=_regexp_extract_spark,
          doc="REGEXP_EXTRACT(s, 'pattern' [, group]): group 0 (the match) by default; NULL "
              "without a match, '' for a group that took no part")


# --- more time functions ---------------------------------------------------------------------

#: Units of TIMESTAMPDIFF (Flink's list).
TIMESTAMPDIFF_UNITS = ("SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR")


def _timestampdiff_type(types: Sequence[SqlType]) -> SqlType:
    unit, start, end = types
    if unit.name != "VARCHAR":
        raise FunctionTypeError("TIMESTAMPDIFF needs a unit first, e.g. TIMESTAMPDIFF(HOUR, a, b)")
    for t in (start, end):
        if t.name not in ("TIMESTAMP", "DATE"):
            fix = ("write TIMESTAMP '2024-01-01 00:00:00' or CAST(x AS TIMESTAMP)"
                   if t.name == "VARCHAR" else "use TIMESTAMP or DATE values")
            raise FunctionTypeError(f"TIMESTAMPDIFF needs TIMESTAMP or DATE arguments, not "
                                    f"{t.name}", fix)
    return _t("INT", True)


def _epoch_ms(value: int, t: SqlType) -> int:
    return value * _MS_PER_DAY if t.name == "DATE" else value


def _whole_months(start: int, end: int) -> int:
    """Whole months from ``start`` to ``end`` (epoch ms), Flink's calendar rule: a month after
    Jan 31 is Feb 28/29, the last day of the month; negative when ``end`` is earlier."""
    if end < start:
        return -_whole_months(end, start)
    first, last = _ts_datetime(start), _ts_datetime(end)
    months = (last.year - first.year) * 12 + last.month - first.month
    days_in_month = calendar.monthrange(last.year, last.month)[1]
    if (min(first.day, days_in_month), start % _MS_PER_DAY) > (last.day, end % _MS_PER_DAY):
        months -= 1
    return months


def _timestampdiff(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    unit = args[0]
    start, end = _epoch_ms(args[1], types[1]), _epoch_ms(args[2], types[2])
    if unit in TIME_UNITS_MS:
        return _int_in_range(_trunc_div(end - start, TIME_UNITS_MS[unit]), result)
    months = _whole_months(start, end)
    return _int_in_range(months if unit == "MONTH" else _trunc_div(months, 12), result)


def _ms_text(sql: str, t: SqlType) -> str:
    return f"(unix_date({sql}) * {_MS_PER_DAY}L)" if t.name == "DATE" else f"unix_millis({sql})"


def _timestampdiff_spark(args: Sequence[str], exprs: Sequence[Expr], result: SqlType) -> str:
    unit = _literal_value(exprs, 0)
    start, end = _ms_text(args[1], exprs[1].type), _ms_text(args[2], exprs[2].type)
    if unit in TIME_UNITS_MS:
        return f"TRY_CAST(({end} - {start}) DIV {TIME_UNITS_MS[unit]}L AS INT)"
    low, high = f"least({start}, {end})", f"greatest({start}, {end})"
    first, last = f"TIMESTAMP_MILLIS({low})", f"TIMESTAMP_MILLIS({high})"
    months = (f"((year({last}) - year({first})) * 12 + month({last}) - month({first}) - "
              f"CASE WHEN least(day({first}), day(last_day({last}))) > day({last}) OR "
              f"(least(day({first}), day(last_day({last}))) = day({last}) AND "
              f"pmod({low}, {_MS_PER_DAY}L) > pmod({high}, {_MS_PER_DAY}L)) THEN 1 ELSE 0 END)")
    signed = (f"(CASE WHEN {start} IS NULL OR {end} IS NULL THEN NULL "
              f"WHEN {end} < {start} THEN -{months} ELSE {months} END)")
    return signed if unit == "MONTH" else f"({signed} DIV 12)"


def _check_timestampdiff(args: Sequence[Expr]) -> None:
    unit = args[0]
    if not isinstance(unit, Literal_) or unit.value not in TIMESTAMPDIFF_UNITS:
        raise FunctionTypeError("unsupported TIMESTAMPDIFF unit",
                                "use " + ", ".join(TIMESTAMPDIFF_UNITS))


_register("TIMESTAMPDIFF", 3, 3, _timestampdiff_type, _timestampdiff, None,
          literals=_check_timestampdiff, spark_call=_timestampdiff_spark,
          doc="TIMESTAMPDIFF(unit, t1, t2): whole units from t1 to t2 (Flink); MONTH/YEAR by "
              "the calendar, a month after Jan 31 ending Feb 28/29; overflow is NULL")

_MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August",
                "September", "October", "November", "December")
_DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
#: DATE_FORMAT's pattern letters and the counts of each that format alike in Java's
#: DateTimeFormatter (Spark), SimpleDateFormat (Flink) and here.
_DATE_LETTERS: Mapping[str, tuple[int, ...]] = {
    "y": (1, 2, 4), "M": (1, 2, 3, 4), "d": (1, 2), "H": (1, 2), "h": (1, 2), "m": (1, 2),
    "s": (1, 2), "S": (3,), "a": (1,), "E": (3, 4),
}
_DATE_FIX = ("use yyyy yy y, MM M MMM MMMM, dd d, HH H, hh h, mm m, ss s, SSS, a, EEE EEEE "
             "and quote other letters: 'T'")

DatePart = tuple[str, int] | str


def parse_date_format(pattern: str) -> tuple[DatePart, ...]:
    """A DATE_FORMAT pattern as (letter, count) fields and literal texts (FunctionTypeError
    outside the supported subset)."""
    parts: list[DatePart] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":
            if pattern.startswith("''", i):
                parts.append("'")
                i += 2
                continue
            end = i + 1
            text: list[str] = []
            while True:
                if end >= len(pattern):
                    raise FunctionTypeError(f"DATE_FORMAT pattern '{pattern}' has an unclosed "
                                            "quote", "close quoted text with ', write '' for "
                                            "a quote")
                if pattern.startswith("''", end):
                    text.append("'")
                    end += 2
                elif pattern[end] == "'":
                    break
                else:
                    text.append(pattern[end])
                    end += 1
            parts.append("".join(text))
            i = end + 1
            continue
        if "A" <= ch <= "Z" or "a" <= ch <= "z":
            count = len(pattern[i:]) - len(pattern[i:].lstrip(ch))
            if count not in _DATE_LETTERS.get(ch, ()):
                what = (f"{ch * count} is not supported" if ch in _DATE_LETTERS
                        else f"the pattern letter {ch} is not supported")
                raise FunctionTypeError(f"DATE_FORMAT pattern '{pattern}': {what}", _DATE_FIX)
            parts.append((ch, count))
            i += count
            continue
        if ch in "[]{}#":
            raise FunctionTypeError(f"DATE_FORMAT pattern '{pattern}': {ch} is reserved",
                                    f"quote it: '{ch}'")
        parts.append(ch)
        i += 1
    return tuple(parts)


def _date_field(letter: str, count: int, stamp: dt.datetime) -> str:
    if letter == "y":
        return (str(stamp.year) if count == 1 else f"{stamp.year % 100:02d}" if count == 2
                else f"{stamp.year:04d}")
    if letter == "M":
        return (_MONTH_NAMES[stamp.month - 1][:3] if count == 3
                else _MONTH_NAMES[stamp.month - 1] if count == 4
                else f"{stamp.month:0{count}d}")
    if letter == "E":
        name = _DAY_NAMES[stamp.weekday()]
        return name[:3] if count == 3 else name
    if letter == "a":
        return "AM" if stamp.hour < 12 else "PM"
    if letter == "S":
        return f"{stamp.microsecond // 1000:03d}"
    value = {"d": stamp.day, "H": stamp.hour, "h": (stamp.hour + 11) % 12 + 1,
             "m": stamp.minute, "s": stamp.second}[letter]
    return f"{value:0{count}d}"


def _date_format_type(types: Sequence[SqlType]) -> SqlType:
    if types[0].name not in ("TIMESTAMP", "DATE"):
        raise FunctionTypeError(f"DATE_FORMAT needs a TIMESTAMP or DATE, not {types[0].name}",
                                "CAST the argument AS TIMESTAMP")
    if types[1].name != "VARCHAR":
        raise FunctionTypeError("DATE_FORMAT's pattern must be a string, e.g. 'yyyy-MM-dd'")
    return _t("VARCHAR", _nullable(types))


def _date_format(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    stamp = _ts_datetime(_epoch_ms(args[0], types[0]))
    return "".join(p if isinstance(p, str) else _date_field(p[0], p[1], stamp)
                   for p in parse_date_format(args[1]))


def _check_date_format(args: Sequence[Expr]) -> None:
    parse_date_format(_literal_text("DATE_FORMAT", "pattern", "DATE_FORMAT(ts, 'yyyy-MM-dd')",
                                    args, 1))


_register("DATE_FORMAT", 2, 2, _date_format_type, _date_format,
          lambda a, t, r: f"date_format({a[0]}, {a[1]})", literals=_check_date_format,
          doc="DATE_FORMAT(ts, 'pattern'): a literal pattern of Java letters (the subset in "
              "_DATE_LETTERS), English names, UTC")


# --- JSON ------------------------------------------------------------------------------------

_JSON_PATH = re.compile(r"\$((?:\.[A-Za-z_][A-Za-z0-9_]*|\[(?:0|[1-9][0-9]{0,8})\])+)")
_JSON_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
_JSON_WHITESPACE = " \t\n\r"


def parse_json_path(path: str) -> tuple[str | int, ...]:
    """A JSON_VALUE path ('$.a.b[0]') as member names and array indexes (FunctionTypeError
    outside the supported subset)."""
    if _JSON_PATH.fullmatch(path) is None:
        raise FunctionTypeError(f"unsupported JSON path '{path}'",
                                "write $ then .name and [index] steps, e.g. '$.user.tags[0]'; "
                                "names are letters, digits and _")
    return tuple(m[1] if m[1] is not None else int(m[2])
                 for m in _JSON_STEP.finditer(path[1:]))


class _MalformedJson(ValueError):
    pass


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise _MalformedJson("duplicate key")
    return dict(pairs)


def _json_constant(name: str) -> Any:
    raise _MalformedJson(f"{name} is not JSON")


_JSON_DECODER = json.JSONDecoder(object_pairs_hook=_json_object, parse_constant=_json_constant)


def _has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    return False


def _json_value(args: Sequence[Any], types: Sequence[SqlType], result: SqlType) -> Any:
    text: str = args[0]
    steps = parse_json_path(args[1])
    start = len(text) - len(text.lstrip(_JSON_WHITESPACE))
    try:
        # The first JSON value of the text; what follows it is not read (Jackson's way).
        value, _ = _JSON_DECODER.raw_decode(text, start)
    except ValueError:
        return None
    if _has_surrogate(value):
        return None
    for step in steps:
        if isinstance(step, str) and isinstance(value, dict) and step in value:
            value = value[step]
        elif isinstance(step, int) and isinstance(value, list) and step < len(value):
            value = value[step]
        else:
            return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _format_double(value)
    return value if isinstance(value, str) else None


def _json_value_type(types: Sequence[SqlType]) -> SqlType:
    _strings_type("JSON_VALUE", 2)(types)
    return _t("VARCHAR", True)


def _json_value_spark(args: Sequence[str], exprs: Sequence[Expr], result: SqlType) -> str:
    document, path = args
    parsed = f"try_parse_json({document})"
    kind = f"schema_of_variant(try_variant_get({parsed}, {path}))"
    value = f"get_json_object({document}, {path})"
    # try_parse_json is the validity check (strict JSON, no duplicate keys, no lone
    # surrogates); the variant's type tells scalars from objects and arrays (get_json_object
    # returns both as text); get_json_object gives numbers as Jackson prints them, an
    # overflowing one quoted ("Infinity"), hence the unquoting.
    return (f"(CASE WHEN {parsed} IS NULL THEN NULL "
            f"WHEN {kind} RLIKE '^(OBJECT|ARRAY|VOID)' THEN NULL "
            f"WHEN {kind} = 'DOUBLE' THEN replace({value}, '\"', '') "
            f"ELSE {value} END)")


def _check_json_value(args: Sequence[Expr]) -> None:
    parse_json_path(_literal_text("JSON_VALUE", "path", "JSON_VALUE(doc, '$.user.id')",
                                  args, 1))


_register("JSON_VALUE", 2, 2, _json_value_type, _json_value, None,
          literals=_check_json_value, spark_call=_json_value_spark,
          doc="JSON_VALUE(json, '$.path'): the scalar at the path as VARCHAR; NULL when "
              "missing, null, an object or array, or the JSON is malformed")


def check_literals(fn: str, args: Sequence[Expr]) -> None:
    """SPEC L7: the arguments that must be literals are, and lie in the subset on which the
    Python and Spark halves agree (a pattern, format, path or unit); FunctionTypeError if not.
    Called by the compiler after :func:`result_type`."""
    entry = FUNCTIONS.get(fn)
    if entry is not None and entry.literals is not None:
        entry.literals(args)


# ---------------------------------------------------------------------------------------------
# Aggregates (types only: the evaluation lives with the operators that hold state)

AGGREGATES = ("COUNT", "SUM", "MIN", "MAX", "AVG", "ARG_MAX", "ARG_MIN")


def aggregate_type(fn: str, arg_types: Sequence[SqlType], distinct: bool = False) -> SqlType:
    """Result type of an aggregate of SPEC L3 (Spark's rules, so both halves agree).

    COUNT is BIGINT NOT NULL; SUM of integers BIGINT, of DECIMAL(p,s) DECIMAL(min(38,p+10),s);
    AVG of integers/floats DOUBLE, of DECIMAL(p,s) DECIMAL(min(38,p+4), min(38,s+4));
    MIN/MAX the argument's type; ARG_MAX/ARG_MIN(value, by) the value's type. All but COUNT
    are nullable (a group whose values are all NULL).
    """
    del distinct
    if fn == "COUNT":
        return _t("BIGINT", False)
    if fn in ("ARG_MAX", "ARG_MIN"):
        if len(arg_types) != 2:
            raise FunctionTypeError(f"{fn} takes 2 arguments (value, by), not {len(arg_types)}")
        if arg_types[1].name in ("VARBINARY", "BOOLEAN"):
            raise FunctionTypeError(f"{fn} cannot order by {arg_types[1].name}")
        return arg_types[0].with_nullable(True)
    if len(arg_types) != 1:
        raise FunctionTypeError(f"{fn} takes 1 argument, not {len(arg_types)}",
                                f"write {fn}(x)")
    t = arg_types[0]
    if fn in ("MIN", "MAX"):
        if t.name in ("VARBINARY",):
            raise FunctionTypeError(f"{fn} cannot order {t.name} values")
        return t.with_nullable(True)
    if not is_numeric(t):
        raise FunctionTypeError(f"{fn} needs a numeric argument, not {t.name}",
                                _numeric_fix(fn, t) + "; COUNT(x) counts values of any type")
    if fn == "SUM":
        if _is_integer(t):
            return _t("BIGINT")
        if t.name == "DECIMAL":
            assert t.precision is not None
            return _t("DECIMAL", True, min(MAX_PRECISION, t.precision + 10), t.scale)
        return _t("DOUBLE")
    if fn == "AVG":
        if t.name == "DECIMAL":
            assert t.precision is not None and t.scale is not None
            return _t("DECIMAL", True, min(MAX_PRECISION, t.precision + 4),
                      min(MAX_PRECISION, t.scale + 4))
        return _t("DOUBLE")
    raise FunctionTypeError(f"unknown aggregate {fn}")


# ---------------------------------------------------------------------------------------------
# Entry points


def result_type(fn: str, arg_types: Sequence[SqlType]) -> SqlType:
    """The result type of ``fn(args)``; :class:`FunctionTypeError` on bad arity or types."""
    entry = FUNCTIONS.get(fn)
    if entry is None:
        raise FunctionTypeError(f"unknown function {fn}")
    n = len(arg_types)
    if n < entry.min_args or (entry.max_args is not None and n > entry.max_args):
        expected = (str(entry.min_args) if entry.max_args == entry.min_args
                    else f"{entry.min_args} or more" if entry.max_args is None
                    else f"{entry.min_args} to {entry.max_args}")
        plural = "" if expected == "1" else "s"
        raise FunctionTypeError(f"{fn} takes {expected} argument{plural}, not {n}",
                                f"call {fn} with {expected} argument{plural} (docs/language.md, "
                                "Expressions and functions)")
    return entry.type_rule(arg_types)


def apply(call: Call, args: Sequence[Any]) -> Any:
    """Evaluate ``call`` on already evaluated argument values (Python semantics)."""
    entry = FUNCTIONS[call.fn]
    if entry.strict and any(a is None for a in args):
        return None
    types = [arg_type(a) for a in call.args]
    return entry.impl(args, types, call.type)


def arg_type(expr: Expr) -> SqlType:
    return expr.type


def evaluate(expr: Expr, row: Mapping[str, Any]) -> Any:
    """Evaluate an IR expression over one row (column name -> value), SQL NULL semantics."""
    if isinstance(expr, ColumnRef):
        return row[expr.name]
    if isinstance(expr, Literal_):
        return expr.value
    if isinstance(expr, Cast):
        return cast_value(evaluate(expr.expr, row), expr.expr.type, expr.type)
    if isinstance(expr, Case):
        for condition, value in expr.whens:
            if evaluate(condition, row) is True:
                return _coerce(evaluate(value, row), value.type, expr.type)
        if expr.else_ is None:
            return None
        return _coerce(evaluate(expr.else_, row), expr.else_.type, expr.type)
    if expr.fn == NOW:
        return row[BATCH_TIME_COLUMN]  # processing time: the evaluating step's batch time
    if expr.fn == "AND":
        # Short-circuit is safe: every function here is total (errors become NULL).
        return _and([evaluate(a, row) for a in expr.args], [], expr.type)
    return apply(expr, [evaluate(a, row) for a in expr.args])


def _coerce(value: Any, source: SqlType, target: SqlType) -> Any:
    if value is None or source.name == target.name and source.scale == target.scale:
        return value
    return cast_value(value, source, target)


# ---------------------------------------------------------------------------------------------
# Spark SQL rendering


def _quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _spark_literal(value: Any, t: SqlType) -> str:
    if value is None:
        return f"CAST(NULL AS {spark_type(t)})"
    name = t.name
    if name == "BOOLEAN":
        return "TRUE" if value else "FALSE"
    if name == "INT":
        return str(int(value))
    if name == "BIGINT":
        return f"{int(value)}L"
    if name == "DECIMAL":
        return f"CAST('{format(value, 'f')}' AS {spark_type(t)})"
    if name in ("REAL", "DOUBLE"):
        if math.isnan(value) or math.isinf(value):
            return f"double('{_format_double(value)}')"
        return f"{value!r}D"
    if name == "VARCHAR":
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
    if name == "TIMESTAMP":
        return f"TIMESTAMP_MILLIS({int(value)}L)"
    if name == "DATE":
        return f"DATE_FROM_UNIX_DATE({int(value)})"
    if name == "VARBINARY":
        return f"X'{bytes(value).hex()}'"
    raise ValueError(f"no Spark literal for {t}")


def _spark_cast(expr: Cast) -> str:
    inner = to_spark_sql(expr.expr)
    source, target = expr.expr.type, expr.type
    if source.name == target.name and source.scale == target.scale and (
            source.precision == target.precision):
        return inner
    if target.name == "TIMESTAMP" and source.name == "VARCHAR":
        return f"TIMESTAMP_MILLIS(unix_millis(TRY_CAST({inner} AS TIMESTAMP)))"
    if target.name == "VARCHAR" and source.name == "TIMESTAMP":
        return f"CAST({inner} AS STRING)"
    return f"TRY_CAST({inner} AS {spark_type(target)})"


def to_spark_sql(expr: Expr) -> str:
    """Spark SQL text computing ``expr`` with exactly the Python semantics of this module.

    Column names are back-quoted; TIMESTAMP literals render as ``TIMESTAMP_MILLIS(<ms>L)``,
    DECIMAL literals as ``CAST('<v>' AS DECIMAL(p,s))``. Needs a UTC session time zone.
    """
    if isinstance(expr, ColumnRef):
        return _quote_ident(expr.name)
    if isinstance(expr, Literal_):
        return _spark_literal(expr.value, expr.type)
    if isinstance(expr, Cast):
        return _spark_cast(expr)
    if isinstance(expr, Case):
        parts = ["CASE"]
        for condition, value in expr.whens:
            parts.append(f"WHEN {to_spark_sql(condition)} THEN "
                         f"{_spark_coerce(value, expr.type)}")
        if expr.else_ is not None:
            parts.append(f"ELSE {_spark_coerce(expr.else_, expr.type)}")
        parts.append("END")
        return "(" + " ".join(parts) + ")"
    if expr.fn == NOW:
        # The batch time the row carries: inside the streaming query and in the step sink
        # alike, never Spark's current_timestamp() of a job outside the query.
        return _quote_ident(BATCH_TIME_COLUMN)
    entry = FUNCTIONS[expr.fn]
    args = [to_spark_sql(a) for a in expr.args]
    if entry.spark_call is not None:
        return entry.spark_call(args, expr.args, expr.type)
    assert entry.spark is not None
    return entry.spark(args, [a.type for a in expr.args], expr.type)


def _spark_coerce(expr: Expr, target: SqlType) -> str:
    text = to_spark_sql(expr)
    if expr.type.name == target.name and expr.type.scale == target.scale and (
            expr.type.precision == target.precision):
        return text
    return f"CAST({text} AS {spark_type(target)})"
