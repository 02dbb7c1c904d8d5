"""Records for ``tidemark demo --program``: plausible input for any table, from its columns.

Each table's records are encoded as its ``'format'`` says (``avro``: schemaless Avro of the
table's schema; ``json``: one JSON object, :mod:`app.connectors.json_encoder`). A column gets
a value of its type:

- TIMESTAMP: the event time, which follows the demo's clock; a table's LATENESS column lags
  it by up to its lateness (at most :data:`JITTER_MS`), so records arrive out of order but in
  time; a VARCHAR whose name says ``time`` or ``date`` carries the event time as text
  (``'2026-11-26 10:00:00'``, what ``CAST(... AS TIMESTAMP)`` reads); DATE the event's day.
- INT and BIGINT: small numbers (1 to :data:`KEYS`), so GROUP BY keys repeat and join keys
  match; DECIMAL(p,s) an amount between 1.00 and 300.00 that fits it; REAL, DOUBLE a number
  below 100; BOOLEAN either; VARBINARY four random bytes.
- VARCHAR: one of a few words (colours for a column named ``color``/``colour``, tickers for
  ``ticker``/``symbol``, otherwise ``<column>-<n>``).
- A nullable column is NULL in one record of :data:`NULL_SHARE`'s inverse.

A ``late_fraction`` of the records are sent with every event time two to three hours (and at
least their lateness) behind the clock: late once the waterline has moved. One record in 200
is malformed (bytes no decoder reads). Metadata columns are read from the Kafka record, so
they get no value here. A ``'debezium-json'`` table's record is the create event of its row
(``after``), made in the database at the demo's clock (``source.ts_ms``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from app.circuit.functions import format_timestamp
from app.circuit.ir import Circuit, Column, Table
from app.circuit.metadata import CHANGELOG_FORMATS
from app.connectors.avro_codec import AvroCodec
from app.connectors.json_encoder import JsonEncoder
from app.errors import ConfigError

__all__ = ["TableInputs", "table_inputs"]

HOUR_MS = 3_600_000
#: The largest out-of-order lag of an event time within its lateness.
JITTER_MS = 30 * 60_000
#: INT and BIGINT values are 1 .. KEYS.
KEYS = 20
NULL_SHARE = 0.05
MALFORMED_SHARE = 0.005
_COLORS = ("red", "green", "blue", "amber")
_TICKERS = ("ORCL", "YHOO", "MSFT", "IBM")
_MALFORMED = {"avro": b"\x00not-avro", "json": b"{not json"}


def _words(column: str) -> tuple[str, ...]:
    name = column.lower()
    if name in ("color", "colour"):
        return _COLORS
    if name in ("ticker", "symbol"):
        return _TICKERS
    return tuple(f"{column}-{n}" for n in range(1, 5))


def _is_time_text(column: Column) -> bool:
    name = column.name.lower()
    return column.type.name == "VARCHAR" and ("time" in name or "date" in name)


class TableInputs:
    """Encoded records of one table (see the module doc)."""

    def __init__(self, table: Table, rng: random.Random, late_fraction: float) -> None:
        if table.format == "raw":
            raise ConfigError(
                f"table {table.name} reads raw values, which the demo does not generate: run "
                "the program with tidemark run, or demo a program whose tables are 'avro' or "
                "'json'"
            )
        if table.format not in _MALFORMED and table.format not in CHANGELOG_FORMATS:
            raise ConfigError(
                f"table {table.name} reads '{table.format}' records, which need a schema "
                "registry the demo does not start: run the program with tidemark run, or "
                "demo a program whose tables are 'avro' or 'json'"
            )
        self.table, self.random, self.late_fraction = table, rng, late_fraction
        schema = table.avro_schema
        codec: Any = AvroCodec(schema) if table.format == "avro" else JsonEncoder(schema)
        self._encode: Callable[[dict[str, Any]], bytes] = codec.encode
        lateness = {lt.column: lt.amount for lt in table.lateness}
        self._columns = [
            (c, lateness.get(c.name)) for c in table.columns if getattr(c, "metadata", None) is None
        ]
        self.sent = self.late_sent = self.malformed_sent = 0

    def record(self, clock_ms: int) -> bytes:
        """One record value at the demo's event-time clock ``clock_ms``."""
        r = self.random
        self.sent += 1
        if r.random() < MALFORMED_SHARE:
            self.malformed_sent += 1
            return _MALFORMED.get(self.table.format, _MALFORMED["json"])
        late = r.random() < self.late_fraction
        self.late_sent += late
        value = self._encode(self.row(clock_ms, late))
        if self.table.format in CHANGELOG_FORMATS:  # a Debezium create event, at clock_ms
            value = b'{"op": "c", "source": {"ts_ms": %d}, "after": %s}' % (clock_ms, value)
        return value

    def row(self, clock_ms: int, late: bool = False) -> dict[str, Any]:
        """The values of one record's columns (circuit values: TIMESTAMP epoch ms)."""
        r = self.random
        behind = 2 * HOUR_MS + r.randrange(HOUR_MS)
        row: dict[str, Any] = {}
        for column, lateness in self._columns:
            if late:
                event = clock_ms - behind - (lateness or 0)
            elif lateness:
                event = clock_ms - r.randrange(min(lateness, JITTER_MS) + 1)
            else:
                event = clock_ms
            if column.type.nullable and lateness is None and r.random() < NULL_SHARE:
                row[column.name] = None
            else:
                row[column.name] = self.value(column, event)
        return row

    def value(self, column: Column, event_ms: int) -> Any:
        """A value of ``column``'s type for an event at ``event_ms`` (see the module doc)."""
        r, kind = self.random, column.type
        if kind.name == "TIMESTAMP":
            return event_ms
        if _is_time_text(column):
            return format_timestamp(event_ms)
        if kind.name == "DATE":
            return event_ms // 86_400_000
        if kind.name in ("INT", "BIGINT"):
            return r.randrange(1, KEYS + 1)
        if kind.name == "DECIMAL":
            scale, digits = kind.scale or 0, (kind.precision or 10) - (kind.scale or 0)
            amount = Decimal(r.randrange(100, 30_000)).scaleb(-2)
            if amount >= Decimal(10) ** digits:
                amount = Decimal(r.randrange(10**digits))
            return amount.quantize(Decimal(1).scaleb(-scale))
        if kind.name in ("REAL", "DOUBLE"):
            return round(r.uniform(0, 100), 2)
        if kind.name == "BOOLEAN":
            return r.random() < 0.5
        if kind.name == "VARBINARY":
            return r.randbytes(4)
        return r.choice(_words(column.name))


def table_inputs(
    circuit: Circuit, seed: int, late_fraction: float
) -> dict[str, TableInputs]:
    """Each table's record maker, by table name."""
    rng = random.Random(seed)
    return {t.name: TableInputs(t, rng, late_fraction) for t in circuit.tables}

