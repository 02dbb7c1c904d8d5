"""Decode the values of a ``'format' = 'json'`` table: one JSON object per Kafka record value.

:class:`JsonRecords` turns one value into the row the Avro path's codec would give for the
same table (the Python values of docs/language.md's type table: TIMESTAMP as epoch ms, DATE as
days since epoch, DECIMAL as an exact :class:`~decimal.Decimal`, VARBINARY as bytes), so the
:class:`~app.connectors.late_gate.LateGate` applies the same NOT NULL, range, ``max_future``
and late checks after it, and the source builds the same Arrow columns from the row.

The conventions (docs/language.md, "JSON values"): columns by name (case-sensitive, extra
fields ignored); a missing field or JSON null is NULL; BOOLEAN ``true``/``false``; INT and
BIGINT JSON integers; REAL and DOUBLE JSON numbers; DECIMAL(p,s) a JSON number or a string,
read exactly (never through a float); VARCHAR a string; DATE ``'YYYY-MM-DD'``; TIMESTAMP an
ISO-8601 string read as ``CAST(... AS TIMESTAMP)`` reads it (UTC when no zone is given) or
epoch milliseconds as a JSON integer; VARBINARY a base64 string.

A value that is not UTF-8 JSON text of an object raises :class:`JsonRecordError` with reason
``malformed``; a field that does not fit its column raises it with reason ``invalid``, naming
the column and what was expected. Decoding is a pure function of the bytes (S15).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from app.circuit.functions import parse_date, parse_timestamp

__all__ = ["JsonRecordError", "JsonRecords", "shown", "sql_type_name"]

_INT64 = (-(2**63), 2**63 - 1)
#: A DECIMAL given as a JSON string: an optionally signed decimal number, nothing else (no
#: spaces, underscores, NaN or Infinity, which :class:`~decimal.Decimal` itself would take).
_DECIMAL_TEXT = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_SHOWN_CHARS = 60


class JsonRecordError(ValueError):
    """A value that is no row of the table: ``reason`` is ``malformed`` or ``invalid``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


class _Mismatch(Exception):
    """A field value of the wrong JSON type or form for its column."""


class _Problem(Exception):
    """A field value of the right form that its column cannot hold (the text says why)."""


def sql_type_name(kind: str) -> str:
    """The SQL name of a source column kind (``decimal(10,2)`` -> ``DECIMAL(10,2)``)."""
    if kind.startswith("decimal("):
        return kind.upper()
    return {
        "bool": "BOOLEAN",
        "int32": "INT",
        "int64": "BIGINT",
        "float32": "REAL",
        "float64": "DOUBLE",
        "string": "VARCHAR",
        "date": "DATE",
        "timestamp": "TIMESTAMP",
        "binary": "VARBINARY",
    }[kind]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def shown(value: Any) -> str:
    """A field value as the JSON text a producer wrote, shortened for a header."""
    if value is None or isinstance(value, bool):
        text = json.dumps(value)
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=not _is_unicode(value))
    elif isinstance(value, int | Decimal):
        text = str(value)
    elif isinstance(value, list):
        text = "an array"
    elif isinstance(value, dict):
        text = "an object"
    else:
        text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _boolean(value: Any) -> bool:
    if value is True or value is False:
        return bool(value)
    raise _Mismatch


def _integer(value: Any) -> int:
    if type(value) is not int:  # bool is an int subclass and is refused here
        raise _Mismatch
    return value


def _bigint(value: Any) -> int:
    number = _integer(value)
    if not _INT64[0] <= number <= _INT64[1]:
        raise _Problem("outside the 64-bit range of BIGINT")
    return number


def _double(value: Any) -> float:
    if type(value) is not int and not isinstance(value, Decimal):
        raise _Mismatch
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise _Problem("outside the range of DOUBLE")
    return number


def _real(value: Any) -> float:
    number = _double(value)
    try:
        single: float = struct.unpack("<f", struct.pack("<f", number))[0]
    except OverflowError:
        raise _Problem("outside the range of REAL") from None
    return single


def _decimal(scale: int) -> Callable[[Any], Decimal]:
    unit = Decimal(1).scaleb(-scale)

    def read(value: Any) -> Decimal:
        if type(value) is int:
            number = Decimal(value)
        elif isinstance(value, Decimal):
            number = value
        elif isinstance(value, str) and _DECIMAL_TEXT.fullmatch(value):
            try:
                number = Decimal(value)
            except InvalidOperation:
                # An exponent beyond Decimal's (1e9999999999999999999): a field no DECIMAL
                # holds is an invalid record, never an exception out of the decoder (S7).
                raise _Problem("outside the range of DECIMAL") from None
        else:
            raise _Mismatch
        if number.as_tuple().exponent == -scale:
            return number
        # At the column's scale when that is exact (12.5 and 12.500 are 12.50); otherwise
        # unchanged, and the gate names the digits DECIMAL(p,s) cannot hold.
        with localcontext() as ctx:
            ctx.prec = 80
            try:
                scaled = number.quantize(unit)
            except InvalidOperation:
                return number
        return scaled if scaled == number else number

    return read


def _is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode: JSON's ``\\ud800`` escapes can make a lone
    surrogate, which no Arrow string or UTF-8 header can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _Mismatch
    if not _is_unicode(value):
        raise _Problem("not valid Unicode text (a lone surrogate)")
    return value


def _date(value: Any) -> int:
    days = parse_date(value) if isinstance(value, str) else None
    if days is None:
        raise _Mismatch
    return days


def _timestamp(value: Any) -> int:
    if type(value) is int:
        return value
    ms = parse_timestamp(value) if isinstance(value, str) else None
    if ms is None:
        raise _Mismatch
    return ms


def _binary(value: Any) -> bytes:
    if not isinstance(value, str):
        raise _Mismatch
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _Mismatch from None


def _reader(kind: str) -> tuple[Callable[[Any], Any], str]:
    """The converter of a column kind and what its message says was expected."""
    if kind.startswith("decimal("):
        precision, scale = (int(x) for x in kind[8:-1].split(","))
        return _decimal(scale), f"a DECIMAL({precision},{scale}) number or string"
    return {
        "bool": (_boolean, "a BOOLEAN (true or false)"),
        "int32": (_integer, "an INT (a JSON integer)"),
        "int64": (_bigint, "a BIGINT (a JSON integer)"),
        "float32": (_real, "a REAL number"),
        "float64": (_double, "a DOUBLE number"),
        "string": (_string, "a VARCHAR string"),
        "date": (_date, "a DATE string 'YYYY-MM-DD'"),
        "timestamp": (
            _timestamp,
            "a TIMESTAMP ISO-8601 string or epoch milliseconds (a JSON integer)",
        ),
        "binary": (_binary, "a VARBINARY base64 string"),
    }[kind]


class JsonRecords:
    """Decodes the JSON values of one table's records into rows (see the module doc)."""

    def __init__(self, table: str, columns: Sequence[tuple[str, str]]) -> None:
        """``columns``: the table's (name, kind) pairs, kinds as in ``SourceColumn``."""
        self.table = table
        self._readers = [(name, *_reader(kind)) for name, kind in columns]
        self._parser = json.JSONDecoder(parse_float=Decimal, parse_constant=_reject_constant)

    def decode(self, value: bytes) -> dict[str, Any]:
        """The row of one record value; raises :class:`JsonRecordError` when there is none."""
        found = self.parse(value)
        if not isinstance(found, dict):
            raise self._malformed(f"the value is {shown(found)}, not a JSON object")
        return self.row(found)

    def parse(self, value: bytes) -> Any:
        """The JSON value of one record value (numbers with a fraction as exact
        :class:`~decimal.Decimal`); raises :class:`JsonRecordError` (``malformed``) when the
        bytes are no UTF-8 JSON text."""
        try:
            return self._parser.decode(value.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise self._malformed(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except (ValueError, RecursionError) as exc:
            raise self._malformed(str(exc) or type(exc).__name__) from None
        except InvalidOperation:
            # A number of an exponent beyond Decimal's (1e9999999999999999999), anywhere in
            # the text, which this decoder cannot read (as an integer of more digits than
            # Python reads): a malformed record, never an exception out of the decoder (S7).
            raise self._malformed("a number's exponent is out of range") from None

    def row(self, found: Mapping[str, Any], only: Collection[str] | None = None,
            where: str = "") -> dict[str, Any]:
        """The row of a parsed JSON object: each column's field read by its column's
        conventions (``only``: these columns, the others NULL); raises
        :class:`JsonRecordError` (``invalid``) for a field its column cannot hold, naming
        the column (``where``: the object it is a field of, as in ``after.amount``)."""
        row: dict[str, Any] = {}
        for name, read, expected in self._readers:
            field = found.get(name)
            if field is None or (only is not None and name not in only):
                row[name] = None
                continue
            try:
                row[name] = read(field)
            except _Mismatch:
                raise JsonRecordError(
                    "invalid", f"column {name}: expected {expected}, got {shown(field)}"
                    + (f" (in {where})" if where else "")
                ) from None
            except _Problem as problem:
                raise JsonRecordError(
                    "invalid", f"column {name} = {shown(field)} is {problem}"
                    + (f" (in {where})" if where else "")
                ) from None
        return row

    def _malformed(self, detail: str) -> JsonRecordError:
        return JsonRecordError("malformed", f"not a JSON record of table {self.table}: {detail}")
