"""The LateGate: classify each Kafka record of a step before any view sees it.

SPEC S2/S4/S5/S7 in one pure function over one record, so the Kafka source, the tests and the
reference comparison share it. A record is exactly one of:

- ``punctuation``: null value with a ``tidemark.bound`` header (S4): no row, moves waterlines;
- ``delete``: of a table keyed by its Kafka key (``SourceSpec.deletes``), a null value without
  that header (a tombstone, S16): the deletion of its key at its time, a row of its metadata
  columns only, which a temporal join reads (it ends the key's last version), and of a
  changelog table the view of its latest row per key (ADR 0030); gated like
  a row (its key and times must be there, and it may be future or late); of a
  ``'format' = 'debezium-json'`` table also a delete event (``op`` ``d``,
  :mod:`app.connectors.debezium_records`), its key and times read from ``before``;
- ``skipped``: of a ``debezium-json`` table, a tombstone whose key or time the record does
  not give (the table's key or time is read from the events): the compaction marker that
  follows the delete event of its key, which already deleted it, so it changes nothing and
  is no dead letter (ADR 0028);
- ``malformed``: cannot be decoded with the table's schema (S7): garbage bytes, a record written
  with another schema (bytes left over or missing), a value of another Avro type; for a
  ``'format' = 'json'`` table, a value that is not UTF-8 JSON text of an object
  (:mod:`app.connectors.json_records`); for ``'format' = 'avro-confluent'``, a value that is
  not Confluent-framed (:mod:`app.connectors.confluent_avro`);
- ``invalid``: NULL in a NOT NULL column -- decoded, or written by a producer whose schema has
  the column nullable (the bytes fit the table's schema with every column made nullable) -- or
  a value outside its column's SQL type (an INT beyond 32 bits, a TIMESTAMP outside years
  1-9999, a DECIMAL with too many digits), which Spark could not hold (S7); for a JSON table
  also a field of the wrong JSON type or form for its column; for an avro-confluent table also
  a schema id the registry does not know or a writer schema that does not resolve to the
  table's; for a metadata column (``METADATA FROM 'key'``, app/connectors/record_metadata.py)
  a record without its value (a null key, no such header, no timestamp) when the column is
  NOT NULL, or a VARCHAR key or header that is not UTF-8 text;
- ``future``: a TIMESTAMP LATENESS value more than ``max_future_ms`` ahead of the step's wall
  clock (S7; the wall clock is recorded in the step's offsets, so a replay judges alike);
- ``late``: some LATENESS column below its waterline w(t-1) (S5; equal is on time; the test
  is :func:`app.circuit.waterline.is_late`, per column :func:`~app.circuit.waterline.late_mask`);
  never a row of a boundary's changelog (:attr:`SourceSpec.changes`, S18);
- ``ok``: an accepted row.

Only ``ok``, ``delete`` and ``late`` rows and punctuation move a waterline (S3: D(t) is every
well-formed row of the step); the gate reports their per-column maxima as the step's probe.
``ok`` and ``delete`` rows are accepted (:data:`ACCEPTED`); every other kind but punctuation
is a dead letter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from app.circuit.computed_columns import computed_values, expr_from_json, null_message
from app.circuit.ir import Column, Computed, SqlType
from app.circuit.metadata import CHANGELOG_FORMATS, REGISTRY_FORMATS
from app.circuit.waterline import is_late, late_mask
from app.connectors.avro_codec import AvroCodec
from app.connectors.confluent_avro import (
    ConfluentAvroRecords,
    ConfluentRecordError,
    header_framing,
)
from app.connectors.confluent_json import ConfluentJsonRecords
from app.connectors.confluent_protobuf import ConfluentProtobufRecords
from app.connectors.debezium_records import ENVELOPE, DebeziumAvroRecords, DebeziumJsonRecords
from app.connectors.json_records import JsonRecordError, JsonRecords
from app.connectors.record_key import RAW_KINDS, KeyDecoder, KeyRecordError, raw_decode
from app.connectors.record_metadata import MetadataError, RecordMeta, RecordMetadata
from app.errors import SerializationError

if TYPE_CHECKING:
    from app.connectors.avro_columns import DecodedColumns

__all__ = [
    "ACCEPTED",
    "BOUND_HEADER",
    "WELL_FORMED",
    "GateVerdict",
    "LateGate",
    "SourceColumn",
    "SourceSpec",
]

BOUND_HEADER = "tidemark.bound"
#: The verdicts whose records are accepted: a row, or the deletion of a key (a tombstone of a
#: table keyed by its Kafka key). The others, punctuation and probes aside, are dead letters.
ACCEPTED = ("ok", "delete")
#: The verdicts whose times move the waterlines (S3: every well-formed row of the step).
WELL_FORMED = ("ok", "delete", "late")

_INT32 = (-(2**31), 2**31 - 1)
#: Spark's TIMESTAMP and DATE range (0001-01-01 .. 9999-12-31), in epoch ms and days.
_TIMESTAMP_MS = (-62_135_596_800_000, 253_402_300_799_999)
_DATE_DAYS = (-719_162, 2_932_896)
_INT_RANGES = {"int32": _INT32, "timestamp": _TIMESTAMP_MS, "date": _DATE_DAYS}
_INT64 = (-(2**63), 2**63 - 1)


def nullable_schema(schema: Mapping[str, Any], only: Sequence[str] | None = None) -> dict[str, Any]:
    """The record schema with non-null fields (all, or ``only`` these) made ``["null", T]``: how
    a producer that declares a NOT NULL column nullable writes it (its nulls are ``invalid``)."""
    fields = []
    for f in schema.get("fields", ()):
        kind = f["type"]
        if (only is None or f["name"] in only) and not (isinstance(kind, list) and "null" in kind):
            kind = ["null", *(kind if isinstance(kind, list) else [kind])]
        fields.append({**f, "type": kind})
    return {**schema, "fields": fields}


def _out_of_range(kind: str, value: Any) -> str | None:
    """Why ``value`` cannot be held by a column of ``kind`` (None when it can)."""
    if kind == "int32" and not _INT32[0] <= value <= _INT32[1]:
        return "outside the 32-bit range of INT"
    if kind == "timestamp" and not _TIMESTAMP_MS[0] <= value <= _TIMESTAMP_MS[1]:
        return "outside the TIMESTAMP range (years 1 to 9999)"
    if kind == "date" and not _DATE_DAYS[0] <= value <= _DATE_DAYS[1]:
        return "outside the DATE range (years 1 to 9999)"
    if kind.startswith("decimal(") and isinstance(value, Decimal):
        precision, scale = (int(x) for x in kind[8:-1].split(","))
        if not value.is_finite():
            return "not a finite DECIMAL"
        digits = value.as_tuple()
        exponent = int(digits.exponent)
        if -exponent > scale or len(digits.digits) + exponent + scale > precision:
            return f"more digits than DECIMAL({precision}, {scale}) holds"
    return None


def _above(values: npt.NDArray[Any], bound: int) -> npt.NDArray[np.bool_]:
    """``values > bound`` for int64 values and any Python int bound (no overflow)."""
    if bound >= _INT64[1]:
        return np.zeros(len(values), np.bool_)
    if bound < _INT64[0]:
        return np.ones(len(values), np.bool_)
    result: npt.NDArray[np.bool_] = values > bound
    return result


@dataclass(frozen=True)
class SourceColumn:
    """A table column as the connector sees it: name, Arrow kind, nullability."""

    name: str
    kind: str  # bool|int32|int64|float32|float64|decimal(p,s)|string|date|timestamp|binary
    nullable: bool
    #: The metadata key of a column read from the Kafka record, not its value
    #: (app/circuit/metadata.py); None for a value column.
    metadata: str | None = None
    #: Of a computed column (app/circuit/computed_columns.py): its expression as
    #: ``expr_to_json`` writes it, and as written; None for every other column.
    computed: Mapping[str, Any] | None = None
    computed_text: str | None = None


@dataclass(frozen=True)
class SourceSpec:
    """What the Kafka source needs of a table; built by the runtime from the circuit IR."""

    table: str
    topic: str
    columns: tuple[SourceColumn, ...]
    avro_schema: Mapping[str, Any]
    lateness: tuple[tuple[str, int], ...]  # (column, amount in the column's unit)
    max_future_ms: int | None
    dead_letter_topic: str
    #: Whether accepted rows keep their Kafka key, value and headers. Only a view's LATENESS
    #: gate needs them (it writes an accepted row back as a dead letter, L2); without one,
    #: the source leaves them out and Spark does not carry the raw bytes of every row.
    ok_payload: bool = True
    #: How record values are encoded (SPEC L1): ``avro`` (schemaless, ``avro_schema``),
    #: ``json`` (one object per value, app/connectors/json_records.py) or ``avro-confluent``
    #: (schema-registry framing, app/connectors/confluent_avro.py).
    format: str = "avro"
    #: The schema registry client's settings of an ``avro-confluent`` table (``url``,
    #: optionally ``basic.auth.user.info``); None for the other formats.
    registry: Mapping[str, str] | None = None
    #: A tombstone (null value without a ``tidemark.bound`` header) deletes its key: the
    #: table's PRIMARY KEY is its Kafka key (``Table.deletes_by_tombstone``, S16).
    deletes: bool = False
    #: A stage boundary's table (ADR 0023): its waterlines move by punctuation only, the
    #: upstream view's waterlines, never by its rows' values (which may lie above them).
    bounded: bool = False
    #: A stage boundary's table of an updating view's changelog (``Table.retractions``): its
    #: rows are changes, which are never late at their reader (S18, S19: a late row is
    #: routed once, by the table it arrived in). A change held back by EMIT AFTER DELAY may
    #: come after the boundary's waterline has passed its time; it is accepted all the same.
    changes: bool = False
    #: The table's ``'key.format'`` (app/connectors/record_key.py), its key's fields in
    #: order and the key's Avro schema; None: keys are read only as ``METADATA FROM 'key'``.
    key_format: str | None = None
    key_fields: tuple[str, ...] = ()
    key_schema: Mapping[str, Any] | None = None
    #: The table's PRIMARY KEY: the columns a ``debezium-json`` delete event must give.
    primary_key: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "topic": self.topic,
            "columns": [[c.name, c.kind, c.nullable, c.metadata]
                        + ([c.computed, c.computed_text] if c.computed is not None else [])
                        for c in self.columns],
            "avro_schema": self.avro_schema,
            "lateness": [list(x) for x in self.lateness],
            "max_future_ms": self.max_future_ms,
            "dead_letter_topic": self.dead_letter_topic,
            "ok_payload": self.ok_payload,
            "format": self.format,
            "registry": dict(self.registry) if self.registry is not None else None,
            "deletes": self.deletes,
            "bounded": self.bounded,
            "changes": self.changes,
            "key_format": self.key_format,
            "key_fields": list(self.key_fields),
            "key_schema": self.key_schema,
            "primary_key": list(self.primary_key),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SourceSpec:
        return cls(
            table=data["table"],
            topic=data["topic"],
            columns=tuple(
                SourceColumn(c[0], c[1], bool(c[2]), c[3] if len(c) > 3 else None,
                             c[4] if len(c) > 4 else None, c[5] if len(c) > 5 else None)
                for c in data["columns"]
            ),
            avro_schema=data["avro_schema"],
            lateness=tuple((c, int(a)) for c, a in data["lateness"]),
            max_future_ms=data["max_future_ms"],
            dead_letter_topic=data["dead_letter_topic"],
            ok_payload=bool(data.get("ok_payload", True)),
            format=str(data.get("format", "avro")),
            registry=data.get("registry"),
            deletes=bool(data.get("deletes", False)),
            bounded=bool(data.get("bounded", False)),
            changes=bool(data.get("changes", False)),
            key_format=data.get("key_format"),
            key_fields=tuple(data.get("key_fields", ())),
            key_schema=data.get("key_schema"),
            primary_key=tuple(data.get("primary_key", ())),
        )

    @property
    def value_columns(self) -> tuple[SourceColumn, ...]:
        """The columns decoded from the record's value (not its metadata, not computed), in
        table order."""
        return tuple(c for c in self.columns if c.metadata is None and c.computed is None)

    @property
    def computes(self) -> bool:
        """Some column is computed from the others (app/circuit/computed_columns.py)."""
        return any(c.computed is not None for c in self.columns)


@dataclass(frozen=True)
class GateVerdict:
    kind: str  # ok|delete|late|malformed|invalid|future|punctuation|skipped
    row: dict[str, Any] | None = None
    message: str = ""
    column: str | None = None
    value: Any = None
    waterline: Any = None
    bounds: Mapping[str, int] | None = None  # punctuation: column -> bound


def parse_bound(text: str) -> int:
    """A ``tidemark.bound`` value: epoch milliseconds or ISO-8601 (UTC when no offset)."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        from datetime import UTC

        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


class LateGate:
    """Classifies the records of one step with the waterlines the step started with."""

    def __init__(
        self, spec: SourceSpec, waterlines: Mapping[str, int | None], wall_clock_ms: int
    ) -> None:
        self.spec = spec
        self.waterlines = dict(waterlines)
        self.wall_clock_ms = wall_clock_ms
        self._required = [c.name for c in spec.columns if not c.nullable]
        key: KeyDecoder | None = None
        if spec.key_format is not None:
            if spec.key_schema is None:
                raise ValueError(f"table {spec.table}: a key format needs its key schema")
            kinds = {c.name: c.kind for c in spec.columns}
            key = KeyDecoder(spec.table, spec.key_format,
                             [(n, kinds[n]) for n in spec.key_fields], spec.key_schema,
                             spec.registry)
        changelog = spec.format in CHANGELOG_FORMATS
        self._metadata = RecordMetadata(
            [(c.name, c.kind, c.metadata) for c in spec.columns
             if c.metadata is not None and not (changelog and c.metadata in ENVELOPE)], key
        )
        value_required = [c.name for c in spec.value_columns if not c.nullable]
        times = [c for c, _ in spec.lateness]
        #: What a deletion must have: its key and its times.
        self._deletion_required = [*spec.primary_key, *(c for c in times
                                                        if c not in spec.primary_key)]
        self._debezium: DebeziumJsonRecords | DebeziumAvroRecords | None = None
        self._json: JsonRecords | ConfluentJsonRecords | None = None
        self._confluent: ConfluentAvroRecords | None = None
        self._protobuf: ConfluentProtobufRecords | None = None
        #: A ``'format' = 'raw'`` table's one value column and the raw type it is read as.
        self._raw: tuple[str, str] | None = None
        self._nullable_codecs: list[AvroCodec] = []
        if spec.format == "json":
            self._json = JsonRecords(spec.table, [(c.name, c.kind) for c in spec.value_columns])
        elif changelog:
            values = {c.name for c in spec.value_columns}
            event_columns = (
                spec.table,
                [(c.name, c.kind) for c in spec.value_columns],
                [(c.name, c.kind, c.metadata) for c in spec.columns
                 if c.metadata is not None and c.metadata in ENVELOPE],
                [c for c in self._deletion_required if c in values],
            )
            if spec.format == "debezium-avro-confluent":
                if spec.registry is None:
                    raise ValueError(f"table {spec.table}: {spec.format} values need a registry")
                self._debezium = DebeziumAvroRecords(*event_columns, spec.avro_schema,
                                                     spec.registry)
            else:
                self._debezium = DebeziumJsonRecords(*event_columns)
        elif spec.format == "json-registry":
            if spec.registry is None:
                raise ValueError(f"table {spec.table}: json-registry values need a registry")
            self._json = ConfluentJsonRecords(
                spec.table, spec.topic, [(c.name, c.kind) for c in spec.value_columns],
                spec.registry,
            )
        elif spec.format == "protobuf-confluent":
            if spec.registry is None:
                raise ValueError(f"table {spec.table}: protobuf-confluent values need a registry")
            self._protobuf = ConfluentProtobufRecords(
                spec.table, [(c.name, c.kind) for c in spec.value_columns], spec.registry
            )
        elif spec.format == "avro-confluent":
            if spec.registry is None:
                raise ValueError(f"table {spec.table}: avro-confluent values need a registry")
            self._confluent = ConfluentAvroRecords(spec.table, spec.avro_schema, spec.registry)
        elif spec.format == "raw":
            (column,) = spec.value_columns
            self._raw = (column.name, RAW_KINDS[column.kind])
        elif spec.format == "avro":
            self.codec = AvroCodec(spec.avro_schema)
            # Writers that made every NOT NULL column nullable, or just one of them.
            self._nullable_codecs = [AvroCodec(nullable_schema(spec.avro_schema))] + (
                [AvroCodec(nullable_schema(spec.avro_schema, [n])) for n in value_required]
                if len(value_required) > 1
                else []
            )
        else:
            raise ValueError(f"table {spec.table}: the source reads no {spec.format!r} values")
        #: Whether values carry a registry's schema id (read from their prefix only).
        self._registry_values = spec.format in REGISTRY_FORMATS
        self._ranged = [
            (c.name, c.kind)
            for c in spec.columns
            if c.kind in ("int32", "timestamp", "date") or c.kind.startswith("decimal(")
        ]
        self._timestamp_cols = {c.name for c in spec.columns if c.kind == "timestamp"}
        self._future_cols = [c for c, _ in spec.lateness if c in self._timestamp_cols]
        self._value_required = value_required
        self._computed = [
            Column(c.name, SqlType("VARCHAR"), computed=Computed(expr_from_json(c.computed),
                                                                 c.computed_text or ""))
            for c in spec.columns
            if c.computed is not None
        ]
        self._computed_text = {c.name: c.computed.written for c in self._computed
                               if c.computed is not None}
        # A Debezium tombstone deletes its key only when the record itself gives the key
        # and the times (ADR 0018's table); else the delete event before it did.
        record_columns = {c.name for c in spec.columns if c.metadata is not None} - {
            c.name for c in spec.columns if c.metadata in ENVELOPE}
        self._tombstones_delete = spec.deletes and (
            not changelog or all(c in record_columns for c in times))

    @property
    def confluent(self) -> ConfluentAvroRecords | None:
        """The decoder of an ``avro-confluent`` table's values (None for other formats)."""
        return self._confluent

    @property
    def metadata(self) -> RecordMetadata:
        """The reader of the table's metadata columns (false when it has none)."""
        return self._metadata

    def classify(
        self,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
        record: RecordMeta | None = None,
    ) -> GateVerdict:
        """The verdict on one record: its value, headers and (for metadata columns) the
        record's key, timestamp, partition and offset (None: all NULL)."""
        kind = "ok"
        if value is None:
            bound = any(key.startswith(BOUND_HEADER) for key, _ in headers or ())
            if self._tombstones_delete and not bound:
                return self._deletion(headers, record)
            if self._debezium is not None and not bound:
                return GateVerdict(
                    "skipped", None, "a tombstone of a Debezium topic whose key or time only "
                    "its change events give: the delete event before it deleted its key")
            return self._punctuation(headers)
        if self._registry_values and (framing := header_framing(headers, "value")):
            return GateVerdict("malformed", None, framing)
        if self._debezium is not None:
            try:
                event = self._debezium.decode(value)
            except JsonRecordError as exc:
                return GateVerdict(exc.reason, None, exc.message)
            kind, row = event.kind, event.row
        elif self._json is not None:
            try:
                row = self._json.decode(value)
            except JsonRecordError as exc:
                return GateVerdict(exc.reason, None, exc.message)
        elif self._raw is not None:
            try:
                row = {self._raw[0]: raw_decode(self._raw[1], value, "value")}
            except KeyRecordError as exc:
                return GateVerdict(exc.reason, None, exc.message)
        elif self._confluent is not None or self._protobuf is not None:
            try:
                row = (self._confluent or self._protobuf).decode(value)  # type: ignore[union-attr]
            except ConfluentRecordError as exc:
                return GateVerdict(exc.reason, None, exc.message)
        else:
            try:
                row = self.codec.decode(value)
            except SerializationError as exc:
                return self._undecodable(value, exc)
        if self._metadata:
            try:
                row.update(self._metadata.row(record, headers))
            except MetadataError as exc:
                return GateVerdict("invalid", None, str(exc))
            except KeyRecordError as exc:
                return GateVerdict(exc.reason, None, exc.message)
        if self._computed:
            row.update(computed_values(self._computed, row, self.waterlines))
        if kind == "delete":
            missing = self._missing(row, self._deletion_required, "delete event")
        else:
            missing = self._missing(row, self._required, "record")
        return missing if missing is not None else self._timed(kind, row)

    def _missing(
        self, row: Mapping[str, Any], required: Sequence[str], what: str
    ) -> GateVerdict | None:
        """``invalid`` for the first of ``required`` that ``row`` has no value of (a NOT NULL
        column), naming what the record lacks; None when it has them all."""
        for name in required:
            if row.get(name) is None and name in self._computed_text:
                return GateVerdict("invalid", None,
                                   null_message(name, self._computed_text[name]))
            if row.get(name) is None:
                lacks = self._metadata.missing(name)
                if lacks is None and self._debezium is not None:
                    lacks = self._debezium.missing(name) or (
                        f"no before.{name}" if what == "delete event" else None)
                return GateVerdict(
                    "invalid",
                    None,
                    f"column {name} is NOT NULL but the {what} has "
                    + (lacks if lacks is not None else "null"),
                )
        return None

    def _deletion(
        self, headers: Sequence[tuple[str, bytes | None]] | None, record: RecordMeta | None
    ) -> GateVerdict:
        """A tombstone of a table keyed by its Kafka key: the deletion of its key at its
        time, a row of the metadata columns (the value columns NULL), gated like a row."""
        row: dict[str, Any] = {c.name: None for c in self.spec.columns}
        try:
            row.update(self._metadata.row(record, headers))
        except MetadataError as exc:
            return GateVerdict("invalid", None, str(exc))
        except KeyRecordError as exc:
            return GateVerdict(exc.reason, None, exc.message)
        if self._computed:
            row.update(computed_values(self._computed, row, self.waterlines))
        metadata = {c.name: c.metadata for c in self.spec.columns}
        for name, _ in self.spec.lateness:
            if metadata[name] is None:
                return GateVerdict(
                    "invalid",
                    None,
                    f"a tombstone deletes its key at its time, but {name} is read from the "
                    f"value, which a tombstone does not have: declare {name} METADATA FROM "
                    "'timestamp' (the record's timestamp), or send a row instead",
                )
        keys = [c.name for c in self.spec.columns if c.metadata == "key"]
        required = [*keys, *(c for c, _ in self.spec.lateness)]
        missing = self._missing(row, required, "tombstone")
        return missing if missing is not None else self._timed("delete", row)

    def _timed(self, kind: str, row: dict[str, Any]) -> GateVerdict:
        """The verdict on a decoded row or deletion: ``kind``, unless a value is out of its
        column's range (invalid), a time is too far ahead (future) or late."""
        for name, kind_of in self._ranged:
            problem = None if row.get(name) is None else _out_of_range(kind_of, row[name])
            if problem is not None:
                return GateVerdict("invalid", None, f"column {name} = {row[name]} is {problem}")
        if self.spec.max_future_ms is not None:
            limit = self.wall_clock_ms + self.spec.max_future_ms
            for name in self._future_cols:
                if row[name] > limit:
                    return GateVerdict(
                        "future",
                        row,
                        f"{name} = {row[name]} ms is more than {self.spec.max_future_ms} ms "
                        f"ahead of the wall clock {self.wall_clock_ms} ms",
                        column=name,
                        value=row[name],
                    )
        for name, _ in self.spec.lateness if not self.spec.changes else ():
            mark = self.waterlines.get(name)
            if is_late(row[name], mark):
                return GateVerdict(
                    "late",
                    row,
                    f"{name} = {row[name]} is below the waterline {mark}",
                    column=name,
                    value=row[name],
                    waterline=mark,
                )
        return GateVerdict(kind, row)

    def accepts(self, decoded: DecodedColumns) -> npt.NDArray[np.bool_]:
        """Which rows of a decoded chunk :meth:`classify` would call ``ok``, for the columnar
        path: decoded exactly, no NULL in a NOT NULL column, every value in its
        column's range, not in the future, not late. The same checks as ``classify``, made
        per column; a row it does not accept goes through ``classify`` for its verdict and
        message, so this may only ever be stricter, never looser."""
        ok = decoded.clean.copy()
        fields = decoded.fields
        for name in self._required:
            ok &= ~fields[name].null
        for name, kind in self._ranged:
            if kind not in _INT_RANGES:
                raise ValueError(f"column {name} ({kind}) has no columnar range check")
            low, high = _INT_RANGES[kind]
            column = fields[name]
            values = column.numbers()
            ok &= column.null | ((values >= low) & (values <= high))
        if self.spec.max_future_ms is not None:
            limit = self.wall_clock_ms + self.spec.max_future_ms
            for name in self._future_cols:
                ok &= ~_above(fields[name].numbers(), limit)
        for name, _ in self.spec.lateness if not self.spec.changes else ():
            ok &= ~late_mask(fields[name].numbers(), self.waterlines.get(name))
        return ok

    def _undecodable(self, value: bytes, exc: SerializationError) -> GateVerdict:
        """Malformed, unless the bytes are a record whose writer made a NOT NULL column
        nullable and sent a null there (then invalid, naming the column)."""
        for codec in self._nullable_codecs:
            try:
                loose = codec.decode(value)
            except SerializationError:
                loose = None
            if loose is not None:
                nulls = [name for name in self._value_required if loose.get(name) is None]
                if nulls:
                    return GateVerdict(
                        "invalid",
                        None,
                        f"column {', '.join(nulls)} is NOT NULL but the record has null "
                        "(written with a schema where it is nullable)",
                    )
        return GateVerdict(
            "malformed",
            message=f"not a record of table {self.spec.table}'s Avro schema: {exc}",
        )

    def _punctuation(self, headers: Sequence[tuple[str, bytes | None]] | None) -> GateVerdict:
        bounds: dict[str, int] = {}
        lateness_cols = [c for c, _ in self.spec.lateness]
        for key, raw in headers or ():
            if raw is None or not key.startswith(BOUND_HEADER):
                continue
            try:
                bound = parse_bound(raw.decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                return GateVerdict("malformed", message=f"bad {key} header {raw!r}: {exc}")
            if key == BOUND_HEADER:
                for col in lateness_cols:
                    bounds.setdefault(col, bound)
            else:
                col = key[len(BOUND_HEADER) + 1 :]
                if col not in lateness_cols:
                    return GateVerdict(
                        "malformed",
                        message=f"{key}: {col} is not a LATENESS column of "
                        f"{self.spec.table} (it has {', '.join(lateness_cols) or 'none'})",
                    )
                bounds[col] = bound
        if not bounds:
            return GateVerdict("malformed", message=f"empty value without a {BOUND_HEADER} header")
        return GateVerdict("punctuation", bounds=bounds)
