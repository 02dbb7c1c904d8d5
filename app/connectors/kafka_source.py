"""The Kafka source's records: a slice of a partition, decoded into Arrow behind the late gate.

One source reads one table's topic; each step reads one :class:`KafkaPartitionSlice` per
partition with data, and this module turns the slice's records into Arrow batches with the
source's columns (:func:`source_schema`): the table's own, then :data:`META_COLUMNS`. The
step's offsets are :mod:`app.connectors.kafka_offsets`'s, the fetch from the broker is
:mod:`app.connectors.kafka_fetch`'s.

A slice carries w(t-1), the waterlines the step started with, and the step's wall clock. The
decoder runs the :class:`LateGate` over them while decoding, so late rows are split from
accepted ones at no extra pass (S5), and appends one ``probe`` row per slice carrying the
per-column maxima of the step's well-formed rows and punctuation and of w(t-1) + L (the
earlier steps' highest value), from which w(t) is computed (S3) and Spark's watermark follows
(ADR 0013). A slice's rows are a pure function of its records and its fields, so a replayed
step decodes every record as before (S15).

Decoding is column-wise: a chunk of up to ``_BATCH_ROWS`` messages is decoded with
numpy (:mod:`app.connectors.avro_columns`), the plain ``ok`` rows pass the gate per column
(:meth:`LateGate.accepts`), and only the others (late, future, bad, punctuation) are classified
one by one, so verdicts and messages are the per-record gate's. ``loadtests/source_speed.py``
measures it; tests/unit/connectors/test_columnar_source.py holds it to the per-record path.
A ``'format' = 'json'`` table (``SourceSpec.format``) is decoded per record by the gate
(:mod:`app.connectors.json_records`), into the same rows, verdicts and Arrow columns. An
``'format' = 'avro-confluent'`` table's values (:mod:`app.connectors.confluent_avro`) take the
columnar path when a chunk's values all carry one schema id whose writer schema is the
table's own record (their bodies are then schemaless Avro of the table's schema), and the
per-record path, with schema resolution, otherwise. A table's metadata columns (``METADATA
FROM 'timestamp'``, ...) are read from the records themselves on both paths
(:mod:`app.connectors.record_metadata`), before the gate, which sees them like value columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from app.connectors.avro_columns import ColumnarDecoder, FieldColumn
from app.connectors.confluent_avro import header_framing
from app.connectors.late_gate import ACCEPTED, WELL_FORMED, GateVerdict, LateGate, SourceSpec
from app.connectors.record_metadata import record_meta
from app.connectors.sink.record import (
    HEADERS,
    KEY,
    LATE_COLUMN,
    LATE_VALUE,
    LATE_WATERLINE,
    MESSAGE,
    REASON,
    SINK_RECORD,
    SRC_OFFSET,
    SRC_PARTITION,
    STEP,
    TIMESTAMP_MS,
    VALUE,
    spark_sql_type,
)

__all__ = [
    "META_COLUMNS",
    "QUERY_META",
    "TABLE_GATE",
    "KafkaPartitionSlice",
    "arrow_schema",
    "arrow_type",
    "decode_slice",
    "kafka_timestamp_ms",
    "source_schema",
    "spark_type",
]

#: The source column of each sink record column a dead letter takes from its row, in the
#: source's column order; the view gate takes ``reason``, ``message`` and the late columns
#: from its own (app/runtime/operators/view_gate.py). Each has its sink column's type.
TABLE_GATE: Mapping[str, str] = {
    REASON: "_kind",  # a dead letter's reason; also ok, probe, punctuation
    MESSAGE: "_message",
    LATE_COLUMN: "_late_column",
    LATE_VALUE: "_late_value",
    LATE_WATERLINE: "_late_waterline",
    KEY: "_key",
    VALUE: "_value",
    HEADERS: "_headers",
    TIMESTAMP_MS: "_timestamp",
    SRC_PARTITION: "_partition",
    SRC_OFFSET: "_offset",
    STEP: "_step",
}

#: Columns the source adds after the table's own (all nullable): those of :data:`TABLE_GATE`,
#: then the probe's count of the slice's accepted rows.
_META_FIELDS: tuple[pa.Field, ...] = (
    *(pa.field(source, SINK_RECORD.field(sink).type) for sink, source in TABLE_GATE.items()),
    pa.field("_accepted", pa.int64()),
)
#: :data:`_META_FIELDS` as (name, Spark SQL type).
META_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (f.name, spark_sql_type(f.type)) for f in _META_FIELDS
)

#: The only columns after the table's own that a query writing its own records reads (ADR
#: 0008; the source option ``narrow``): each row's kind (a probe row carries the slice's
#: maxima to Spark's watermark) and its arrival (ARG_MAX ties). Its source tasks write the
#: dead letters themselves, so the rest never has to reach Spark, whose scan turns every
#: column of every row from Arrow into its own row format (a JVM profile of (b)
#: had that conversion in a fifth of its task threads' samples).
QUERY_META = ("_kind", "_partition", "_offset", "_step")

_BATCH_ROWS = 50_000


def spark_type(kind: str) -> str:
    simple = {
        "bool": "boolean",
        "int32": "int",
        "int64": "bigint",
        "float32": "float",
        "float64": "double",
        "string": "string",
        "date": "date",
        "timestamp": "timestamp",
        "binary": "binary",
    }
    return simple.get(kind, kind)  # decimal(p,s) is spelled the same


def arrow_type(kind: str) -> pa.DataType:
    if kind.startswith("decimal("):
        precision, scale = (int(x) for x in kind[8:-1].split(","))
        return pa.decimal128(precision, scale)
    return {
        "bool": pa.bool_(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "float32": pa.float32(),
        "float64": pa.float64(),
        "string": pa.string(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "binary": pa.binary(),
    }[kind]


def _meta_fields(narrow: bool) -> tuple[pa.Field, ...]:
    return tuple(f for f in _META_FIELDS if not narrow or f.name in QUERY_META)


def source_schema(spec: SourceSpec, narrow: bool = False) -> str:
    """The source's Spark schema: the table's columns, then :data:`META_COLUMNS`, or only
    :data:`QUERY_META` of them when ``narrow``."""
    cols = [f"`{c.name}` {spark_type(c.kind)}" for c in spec.columns]
    cols += [f"`{f.name}` {spark_sql_type(f.type)}" for f in _meta_fields(narrow)]
    return ", ".join(cols)


def arrow_schema(spec: SourceSpec, narrow: bool = False) -> pa.Schema:
    """The source's batches' Arrow schema (:func:`source_schema`'s columns)."""
    fields = [pa.field(c.name, arrow_type(c.kind)) for c in spec.columns]
    return pa.schema([*fields, *_meta_fields(narrow)])


@dataclass
class KafkaPartitionSlice(InputPartition):
    """One Kafka partition's offsets [start, end) of one step, with the step's waterlines."""

    partition: int
    start: int
    end: int
    step: int
    wall_clock_ms: int
    waterlines: dict[str, int | None]

    def __init__(
        self,
        partition: int,
        start: int,
        end: int,
        step: int,
        wall_clock_ms: int,
        waterlines: dict[str, int | None],
    ) -> None:
        self.partition, self.start, self.end = partition, start, end
        self.step, self.wall_clock_ms, self.waterlines = step, wall_clock_ms, waterlines


def decode_slice(
    spec: SourceSpec, part: KafkaPartitionSlice, messages: Iterable[Any], columnar: bool = True
) -> Iterator[pa.RecordBatch]:
    """The rows of ``messages`` (confluent-kafka messages of one slice, in offset order):
    Arrow batches of up to ``_BATCH_ROWS`` rows (punctuation inserts none), then a batch
    with the probe row: the per-column maxima of the slice's ``ok`` and ``late`` rows and
    punctuation, and the number of ``ok`` rows (S3, S4). ``columnar=False`` takes the
    per-record path for every chunk: the reference the tests hold the columnar one to."""
    reader = _SliceReader(spec, part)
    if not columnar:
        reader.decoder = None
    stream = iter(messages)
    while chunk := list(islice(stream, _BATCH_ROWS)):
        batch = reader.read(chunk)
        if batch.num_rows:
            yield batch
    yield reader.probe()


#: ``_kind`` values, in the order of their codes in :meth:`_SliceReader._columnar`.
_KINDS = ("ok", "late", "malformed", "invalid", "future", "punctuation")


class _SliceReader:
    """Turns chunks of one slice's messages into Arrow batches, keeping the probe's figures.

    Two paths give the same rows (tests/unit/connectors/test_columnar_source.py compares
    them): the columnar one decodes a whole chunk with numpy
    (:class:`ColumnarDecoder`), lets :meth:`LateGate.accepts` pass the plain ``ok`` rows per
    column and asks :meth:`LateGate.classify` only about the others (late, bad, punctuation),
    so the verdicts and messages are the gate's own; the per-record one classifies every
    message. The per-record path serves schemas the decoder does not read (decimals, nested
    types), the rare chunk with a value only fastavro's own reading accepts, and every
    ``'format' = 'json'`` table, whose values the gate decodes one by one
    (:mod:`app.connectors.json_records`) into the same rows and so the same Arrow columns."""

    def __init__(self, spec: SourceSpec, part: KafkaPartitionSlice) -> None:
        self.spec, self.part = spec, part
        self.gate = LateGate(spec, part.waterlines, part.wall_clock_ms)
        self.schema = arrow_schema(spec)
        self.names = [c.name for c in spec.columns]
        # The columns decoded from the value; the metadata ones come from each record.
        self.value_names = [c.name for c in spec.value_columns]
        # Each column's probe starts at w(t-1) + L, the highest value of every earlier step,
        # so the probe is the table's all-time maximum and w(t) = probe - L (S3 gives the
        # same w(t) either way). Spark's watermark of a query of several tables is the
        # minimum of its tables' highest probes of the current run (ADR 0013): with the
        # step's maxima alone, a run restarted from a checkpoint would hold a table's part of
        # it at that run's rows (a late row, a step of old rows) below the table's waterline.
        self.maxima: dict[str, int | None] = {}
        for column, amount in spec.lateness:
            previous = part.waterlines.get(column)
            self.maxima[column] = None if previous is None else previous + amount
        self.accepted = 0
        # JSON values take the per-record path: the gate decodes each with json_records.
        # So do tables with a key format: the gate decodes each record's key.
        # So do tables with computed columns: the gate computes them from each decoded row.
        avro = (spec.format in ("avro", "avro-confluent") and spec.key_format is None
                and not spec.computes)
        decoder = ColumnarDecoder(spec.avro_schema) if avro else None
        self.decoder = (
            decoder
            if decoder is not None and decoder.supported and _columnar_kinds(spec, decoder)
            else None
        )

    def _note(self, col: str, value: int | None) -> None:
        current = self.maxima[col]
        if value is not None and (current is None or value > current):
            self.maxima[col] = value

    def read(self, chunk: list[Any]) -> pa.RecordBatch:
        if self.decoder is not None:
            batch = self._columnar(chunk)
            if batch is not None:
                return batch
        return self._per_record(chunk)

    def probe(self) -> pa.RecordBatch:
        probe = GateVerdict("probe", row=dict(self.maxima))
        return _to_batch(self.schema, self.names, [(probe, None)], self.part, self.accepted)

    def _per_record(self, chunk: list[Any]) -> pa.RecordBatch:
        items: list[tuple[GateVerdict, Any]] = []
        metadata = bool(self.gate.metadata)  # a table without metadata columns reads none
        for msg in chunk:
            meta = record_meta(msg) if metadata else None
            verdict = self.gate.classify(msg.value(), msg.headers(), meta)
            if verdict.kind in WELL_FORMED:
                assert verdict.row is not None
                self.accepted += verdict.kind in ACCEPTED
                for col in self.maxima if not self.spec.bounded else ():
                    self._note(col, verdict.row[col])
            elif verdict.kind == "punctuation":
                assert verdict.bounds is not None
                for col, bound in verdict.bounds.items():
                    self._note(col, bound)
                continue
            elif verdict.kind == "skipped":
                continue  # a Debezium tombstone after its delete event: no row, no letter
            items.append((verdict, msg))
        return _to_batch(self.schema, self.names, items, self.part, None, self.spec.ok_payload)

    def _columnar(self, chunk: list[Any]) -> pa.RecordBatch | None:
        """The chunk's batch, or None when a value needs the per-record path (a value the
        decoder refused but fastavro reads as a row, a tombstone that deletes a key, or an
        ``avro-confluent`` chunk whose values are not all bodies of the table's own schema)."""
        from confluent_kafka import Message

        assert self.decoder is not None
        values: list[bytes | None] = list(map(Message.value, chunk))
        confluent = self.gate.confluent
        if confluent is not None and any(map(_names_value_schema, map(Message.headers, chunk))):
            return None  # the gate's classify says why such a value is not read
        bodies = values if confluent is None else confluent.table_bodies(values)
        if bodies is None:
            return None
        decoded = self.decoder.decode(bodies, self.value_names)
        if self.gate.metadata:
            metadata, unreadable = self.gate.metadata.columns(chunk, self.part.partition)
            decoded.fields.update(metadata)
            decoded.clean &= ~unreadable  # the gate's classify names the column
        ok = self.gate.accepts(decoded)
        count = len(chunk)
        codes = np.zeros(count, np.int8)
        dead = np.zeros(count, np.bool_)  # rows without table values (bad input, punctuation)
        messages: list[str | None] = [None] * count
        late_columns: list[str | None] = [None] * count
        late_values: list[Any] = [None] * count
        late_marks: list[Any] = [None] * count
        bounds: list[Mapping[str, int]] = []
        for i in np.flatnonzero(~ok).tolist():
            meta = record_meta(chunk[i]) if self.gate.metadata else None
            verdict = self.gate.classify(values[i], chunk[i].headers(), meta)
            if verdict.row is not None and (not decoded.clean[i] or verdict.kind == "delete"):
                return None
            codes[i] = _KINDS.index(verdict.kind)
            dead[i] = verdict.row is None
            messages[i] = verdict.message or None
            late_columns[i], late_values[i] = verdict.column, verdict.value
            late_marks[i] = verdict.waterline
            if verdict.bounds is not None:
                bounds.append(verdict.bounds)
        well_formed = codes <= 1  # ok or late (S3)
        for col in self.maxima if not self.spec.bounded else ():
            rows = decoded.fields[col].numbers()[well_formed]
            self._note(col, int(rows.max()) if len(rows) else None)
        for found in bounds:
            for col, bound in found.items():
                self._note(col, bound)
        self.accepted += int(np.count_nonzero(codes == 0))
        columns = [
            _table_column(self.schema.field(name).type, decoded.fields[name], dead)
            for name in self.names
        ]
        columns += [
            pa.array(_KINDS, pa.string()).take(pa.array(codes)),
            pa.array(messages, pa.string()),
            pa.array(late_columns, pa.string()),
            pa.array(late_values, pa.int64()),
            pa.array(late_marks, pa.int64()),
            *_payload_columns(
                chunk,
                values,
                None if self.spec.ok_payload else np.flatnonzero(codes != 0),
                self.schema.field("_headers").type,
            ),
            pa.array(np.full(count, self.part.partition, np.int32)),
            pa.array(list(map(Message.offset, chunk)), pa.int64()),
            pa.array(np.full(count, self.part.step, np.int64)),
            pa.nulls(count, pa.int64()),
        ]
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        punctuation = codes == _KINDS.index("punctuation")
        return batch.filter(pa.array(~punctuation)) if punctuation.any() else batch


#: The Avro type a column must have for the columnar path (what record_schema writes).
_AVRO_OF_KIND = {
    "bool": "boolean",
    "int32": "int",
    "int64": "long",
    "float32": "float",
    "float64": "double",
    "string": "string",
    "binary": "bytes",
    "date": "int",
    "timestamp": "long",
}


def _columnar_kinds(spec: SourceSpec, decoder: ColumnarDecoder) -> bool:
    """Every value column is a field whose Avro type the columnar arrays are built for."""
    avro = {name: next(b for b in branches if b != "null") for name, branches in decoder.fields}
    return all(avro.get(c.name) == _AVRO_OF_KIND.get(c.kind) for c in spec.value_columns)


def _table_column(kind: pa.DataType, field: FieldColumn, dead: npt.NDArray[np.bool_]) -> pa.Array:
    """One table column as Arrow, null where the field is null or the row has no values."""
    null = field.null | dead
    if field.array is not None:
        if not dead.any():
            return field.array
        import pyarrow.compute as pc  # lazily: the source's module loads in Spark's planner too

        return pc.if_else(pa.array(dead), pa.scalar(None, field.array.type), field.array)
    values = np.where(null, 0, field.numbers())  # masked slots stay in range for the casts
    if pa.types.is_timestamp(kind):
        return pa.array(values, pa.int64(), mask=null).cast(pa.timestamp("ms")).cast(kind)
    if pa.types.is_date32(kind):
        return pa.array(values.astype(np.int32), pa.int32(), mask=null).cast(pa.date32())
    if pa.types.is_int32(kind):
        return pa.array(values.astype(np.int32), kind, mask=null)
    if pa.types.is_float32(kind):
        with np.errstate(invalid="ignore"):
            return pa.array(values.astype(np.float32), kind, mask=null)
    return pa.array(values, kind, mask=null)


def _payload_columns(
    chunk: list[Any],
    values: list[bytes | None],
    keep: npt.NDArray[np.int64] | None,
    headers: pa.DataType,
) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """The ``_key``, ``_value``, ``_headers`` and ``_timestamp`` columns: of every message,
    or (``keep``: row indices) of those rows only and NULL elsewhere, without a Python object
    per row but the key, value and timestamp."""
    from confluent_kafka import Message

    if keep is None:
        return (
            pa.array(list(map(Message.key, chunk)), pa.binary()),
            pa.array(values, pa.binary()),
            _headers_column(chunk, headers),
            pa.array(list(map(kafka_timestamp_ms, chunk)), pa.int64()),
        )
    rows = keep.tolist()
    picked = [chunk[i] for i in rows]
    where = np.full(len(chunk), -1, np.int64)
    where[keep] = np.arange(len(rows))
    index = pa.array(where, mask=where < 0)
    return (
        pa.array(list(map(Message.key, picked)), pa.binary()).take(index),
        pa.array([values[i] for i in rows], pa.binary()).take(index),
        _headers_column(picked, headers).take(index),
        pa.array(list(map(kafka_timestamp_ms, picked)), pa.int64()).take(index),
    )


def kafka_timestamp_ms(msg: Any) -> int | None:
    """A message's Kafka timestamp (create or log-append time) in epoch ms; None when the
    record has none (a pre-0.10 message format), so its dead letter is stamped when written."""
    kind, stamp = msg.timestamp()
    return int(stamp) if kind != 0 and stamp >= 0 else None


def _names_value_schema(headers: Any) -> bool:
    """Whether a record's headers (a consumed message's: a list of pairs, or None) name its
    value's schema (:func:`header_framing`)."""
    return headers is not None and header_framing(headers, "value") is not None


def _headers_column(chunk: list[Any], kind: pa.DataType) -> pa.Array:
    """Each message's headers as a list of (key, value) structs; an empty list when none."""
    from confluent_kafka import Message

    every: list[Any] = list(map(Message.headers, chunk))
    offsets = np.zeros(len(every) + 1, np.int32)
    keys: list[str] = []
    values: list[bytes | None] = []
    if any(every):
        for i, found in enumerate(every):
            for key, value in found or ():
                keys.append(key)
                values.append(value)
            offsets[i + 1] = len(keys)
    items = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())],
        fields=list(kind.value_type),
    )
    return pa.ListArray.from_arrays(pa.array(offsets), items, type=kind)


def _to_batch(
    schema: pa.Schema,
    names: list[str],
    items: list[tuple[GateVerdict, Any]],
    part: KafkaPartitionSlice,
    accepted: int | None,
    ok_payload: bool = True,
) -> pa.RecordBatch:
    """Arrow columns of the items; the probe (always last) carries ``accepted``."""
    columns: list[pa.Array] = []
    for name in names:
        field = schema.field(name)
        values = [v.row.get(name) if v.row is not None else None for v, _ in items]
        if pa.types.is_timestamp(field.type):
            columns.append(pa.array(values, pa.int64()).cast(pa.timestamp("ms")).cast(field.type))
        elif pa.types.is_date32(field.type):
            columns.append(pa.array(values, pa.int32()).cast(pa.date32()))
        else:
            columns.append(pa.array(values, field.type))
    kinds = [v.kind for v, _ in items]
    columns.append(pa.array(kinds, pa.string()))
    columns.append(pa.array([v.message or None for v, _ in items], pa.string()))
    columns.append(pa.array([v.column for v, _ in items], pa.string()))
    columns.append(pa.array([v.value for v, _ in items], pa.int64()))
    columns.append(pa.array([v.waterline for v, _ in items], pa.int64()))
    # The message of each row whose Kafka payload is kept (see SourceSpec.ok_payload).
    kept = [m if ok_payload or v.kind != "ok" else None for v, m in items]
    columns.append(pa.array([m.key() if m is not None else None for m in kept], pa.binary()))
    columns.append(pa.array([m.value() if m is not None else None for m in kept], pa.binary()))
    columns.append(
        pa.array(
            [
                [{"key": k, "value": v} for k, v in (m.headers() or [])] if m is not None else None
                for m in kept
            ],
            schema.field("_headers").type,
        )
    )
    columns.append(
        pa.array([kafka_timestamp_ms(m) if m is not None else None for m in kept], pa.int64())
    )
    columns.append(pa.array([part.partition] * len(items), pa.int32()))
    columns.append(pa.array([m.offset() if m is not None else None for _, m in items], pa.int64()))
    columns.append(pa.array([part.step] * len(items), pa.int64()))
    probe_column: list[int | None] = [None] * len(items)
    if items:
        probe_column[-1] = accepted
    columns.append(pa.array(probe_column, pa.int64()))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
