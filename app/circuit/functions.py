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
  COALESCE, NULLIF, IS [NOT] NULL and CASE are not strict.

Nothing here imports pyspark (STYLE habit 1): Spark SQL is produced as text.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Context, Decimal, InvalidOperation, localcontext
from typing import Any

from app.circuit.ir import Call, Case, Cast, ColumnRef, Expr, Literal_, SqlType

__all__ = [
    "FUNCTIONS",
    "FunctionTypeError",
    "ScalarFunction",
    "TIME_UNITS_MS",
    "aggregate_type",
    "apply",
    "can_cast",
    "cast_value",
    "common_type",
    "evaluate",
    "format_timestamp",
    "is_numeric",
    "parse_date",
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


@dataclass(frozen=True)
class ScalarFunction:
    """One entry of the catalog. ``strict``: any NULL argument makes the result NULL without
    calling ``impl`` (SQL's usual rule); non-strict functions see the NULLs themselves."""

    name: str
    min_args: int
    max_args: int | None
    type_rule: TypeRule
    impl: Impl
    spark: SparkRule
    strict: bool = True
    doc: str = ""


FUNCTIONS: dict[str, ScalarFunction] = {}


def _register(name: str, min_args: int, max_args: int | None, type_rule: TypeRule, impl: Impl,
              spark: SparkRule, *, strict: bool = True, doc: str = "") -> None:
    FUNCTIONS[name] = ScalarFunction(name, min_args, max_args, type_rule, impl, spark, strict,
                                     doc)


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
            return -args[0]
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
            return f"CAST(({x} DIV NULLIF({y}, 0)) AS {spark_type(result)})"
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
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
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


_register("LIKE", 2, 2, _like_type,
          lambda a, t, r: _like_regex(a[1]).fullmatch(a[0]) is not None,
          lambda a, t, r: f"({a[0]} LIKE {a[1]})")


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
        raise FunctionTypeError(f"{name} needs a numeric argument, not {t.name}")


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


def _ts_millis_type(types: Sequence[SqlType]) -> SqlType:
    if not _is_integer(types[0]):
        raise FunctionTypeError("TIMESTAMP_MILLIS needs an integer (epoch milliseconds)")
    return _t("TIMESTAMP", types[0].nullable)


def _unix_millis_type(types: Sequence[SqlType]) -> SqlType:
    if types[0].name != "TIMESTAMP":
        raise FunctionTypeError("UNIX_MILLIS needs a TIMESTAMP")
    return _t("BIGINT", types[0].nullable)


_register("TIMESTAMP_MILLIS", 1, 1, _ts_millis_type, lambda a, t, r: int(a[0]),
          lambda a, t, r: f"TIMESTAMP_MILLIS({a[0]})", doc="epoch ms to TIMESTAMP")
_register("UNIX_MILLIS", 1, 1, _unix_millis_type, lambda a, t, r: int(a[0]),
          lambda a, t, r: f"unix_millis({a[0]})", doc="TIMESTAMP to epoch ms")


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
        raise FunctionTypeError(f"{fn} takes 1 argument, not {len(arg_types)}")
    t = arg_types[0]
    if fn in ("MIN", "MAX"):
        if t.name in ("VARBINARY",):
            raise FunctionTypeError(f"{fn} cannot order {t.name} values")
        return t.with_nullable(True)
    if not is_numeric(t):
        raise FunctionTypeError(f"{fn} needs a numeric argument, not {t.name}")
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
        raise FunctionTypeError(f"{fn} takes {expected} argument{plural}, not {n}")
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
    entry = FUNCTIONS[expr.fn]
    args = [to_spark_sql(a) for a in expr.args]
    return entry.spark(args, [a.type for a in expr.args], expr.type)


def _spark_coerce(expr: Expr, target: SqlType) -> str:
    text = to_spark_sql(expr)
    if expr.type.name == target.name and expr.type.scale == target.scale and (
            expr.type.precision == target.precision):
        return text
    return f"CAST({text} AS {spark_type(target)})"
