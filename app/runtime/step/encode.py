"""Encode a view's rows as Kafka records of SPEC S13, on the executors (``mapInArrow``).

TIMESTAMP columns leave Spark as microseconds and are written as Avro ``timestamp-millis``
longs; DATE as days. The encoding is a pure function of the row and the step's batch time
(``_ptime``, Spark's recorded batch timestamp), so a replayed step writes identical bytes. An
``avro-confluent`` output's keys and values are framed (magic byte 0 and the schema id that
``tidemark run`` registered at start) by both encoders, :func:`encode_record` (which every
operator that encodes a row at a time calls) and the column-wise one. A ``json`` output's
keys and values are JSON objects (:mod:`app.connectors.json_encoder`), written a row at a
time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.circuit.ir import RETRACTION_COLUMN, View
from app.connectors.avro_codec import AvroCodec
from app.connectors.avro_column_encoder import ColumnarEncoder, ColumnValues
from app.connectors.confluent_avro import frame
from app.connectors.confluent_json import JsonRegistryWriter
from app.connectors.confluent_protobuf import ProtobufRegistryWriter
from app.connectors.debezium_encoder import DebeziumJsonEncoder
from app.connectors.json_encoder import JsonEncoder
from app.connectors.record_key import KeyEncoder, raw_encode, raw_type
from app.connectors.sink.record import KEY, KIND, REL, TOPIC, VALUE, sink_batch

__all__ = ["ViewEncoding", "circuit_units", "encode_record", "encode_view_rows", "output_batch"]


class ViewEncoding:
    """Everything an executor needs to encode one output view (picklable, no Spark)."""

    def __init__(
        self,
        view: str,
        topic: str,
        fmt: str,
        columns: Sequence[str],
        key_columns: Sequence[str],
        value_schema: Mapping[str, Any],
        key_schema: Mapping[str, Any] | None,
        schema_ids: tuple[int | None, int | None] = (None, None),
        encoding: str = "avro",
        key_format: str | None = None,
        registry: Mapping[str, str] | None = None,
        subjects: tuple[str | None, str | None] = (None, None),
        key_fields: Sequence[str] = (),
    ) -> None:
        self.view, self.topic, self.format = view, topic, fmt
        #: ``avro``, ``avro-confluent`` or ``json`` (the view's ``'encoding'``).
        self.encoding = encoding
        self.columns, self.key_columns = list(columns), list(key_columns)
        self.value_schema, self.key_schema = dict(value_schema), key_schema
        #: The registered (key, value) schema ids of an ``avro-confluent`` output, whose
        #: records are framed with them; None: schemaless.
        self.schema_ids = schema_ids
        #: A ``json-registry`` or ``protobuf-confluent`` output's registry client settings
        #: and (key, value) subjects: confluent-kafka's JSONSerializer or ProtobufSerializer
        #: writes its records with the registered ids.
        self.registry = None if registry is None else dict(registry)
        self.subjects = subjects
        self._registry_writers: tuple[_Writer, _Writer | None] | None = None
        self._codecs: tuple[AvroCodec, AvroCodec | None] | None = None
        self._json: tuple[JsonEncoder, JsonEncoder | None] | None = None
        self._debezium: DebeziumJsonEncoder | None = None
        self._columnar: tuple[ColumnarEncoder, ColumnarEncoder | None] | None = None
        #: A declared key format's writer (app/connectors/record_key.py), its record's
        #: fields named ``key_fields`` where given; None: the key is the record of the key
        #: columns in the value's encoding.
        self.key_writer = (
            KeyEncoder(key_format, key_schema, key_columns, schema_ids[0], key_fields)
            if key_format is not None and key_schema is not None
            else None
        )
        #: A ``raw`` output's value: its one field and the raw type it is written as.
        self.raw_value = (
            (self.value_schema["fields"][0]["name"], raw_type(self.value_schema))
            if encoding == "raw"
            else None
        )

    @classmethod
    def for_view(cls, view: View) -> ViewEncoding:
        """The encoding of an output view (SPEC S13), from its IR."""
        out = view.output
        if out is None:
            raise ValueError(f"view {view.name} has no output topic")
        return cls(
            view.name,
            out.topic,
            out.format,
            [c.name for c in view.columns],
            out.key_columns,
            out.value_schema,
            out.key_schema,
            _schema_ids(out),
            out.encoding,
            out.key_format,
            out.schema_registry if out.encoding in _SERIALIZED else None,
            (out.key_subject, out.value_subject),
            out.key_fields,
        )

    @property
    def value_codec(self) -> AvroCodec:
        return self._codec_pair()[0]

    @property
    def key_codec(self) -> AvroCodec | None:
        return self._codec_pair()[1]

    def _codec_pair(self) -> tuple[AvroCodec, AvroCodec | None]:
        # Built lazily on the executor: parsed fastavro schemas are not worth pickling.
        if self._codecs is None:
            self._codecs = (
                AvroCodec(self.value_schema),
                AvroCodec(self.key_schema) if self.key_schema else None,
            )
        return self._codecs

    def json_encoders(self) -> tuple[JsonEncoder, JsonEncoder | None]:
        """The JSON writers of the value and key schemas (a ``json`` output)."""
        if self._json is None:
            self._json = (
                JsonEncoder(self.value_schema),
                JsonEncoder(self.key_schema) if self.key_schema else None,
            )
        return self._json

    def debezium_encoder(self) -> DebeziumJsonEncoder:
        """The change-event writer of the values of a ``debezium-json`` output."""
        if self._debezium is None:
            self._debezium = DebeziumJsonEncoder(self.value_schema)
        return self._debezium

    def registry_writers(self) -> tuple[_Writer, _Writer | None]:
        """The writers of the value and key of a ``json-registry`` or ``protobuf-confluent``
        output (the key's when its key is the record of the key columns)."""
        if self._registry_writers is None:
            if self.registry is None or self.schema_ids[1] is None or self.subjects[1] is None:
                raise ValueError(f"output {self.topic}: its schemas are not registered")
            writer = (ProtobufRegistryWriter if self.encoding == "protobuf-confluent"
                      else JsonRegistryWriter)
            value = writer(
                self.value_schema, self.registry, self.topic, "value", self.schema_ids[1],
                self.subjects[1],
            )
            key = None
            if self.key_schema is not None and self.key_writer is None:
                assert self.schema_ids[0] is not None and self.subjects[0] is not None
                key = writer(
                    self.key_schema, self.registry, self.topic, "key", self.schema_ids[0],
                    self.subjects[0],
                )
            self._registry_writers = (value, key)
        return self._registry_writers

    def columnar(self) -> tuple[ColumnarEncoder, ColumnarEncoder | None] | None:
        """Column-wise encoders of the value and key schemas, or None when either schema has
        a field type they do not write or the output is JSON (then rows are encoded one by
        one)."""
        if (
            self.encoding in ("json", "debezium-json", "raw", *_SERIALIZED)
            or self.key_writer is not None
            or not self._fields_filled()
        ):
            return None
        if self._columnar is None:
            self._columnar = (
                ColumnarEncoder(self.value_schema),
                ColumnarEncoder(self.key_schema) if self.key_schema else None,
            )
        value, key = self._columnar
        if not value.supported or (key is not None and not key.supported):
            return None
        return self._columnar

    def _fields_filled(self) -> bool:
        """Whether a column fills every field of the schemas; a registered schema written
        with (``use.latest.version``) may have fields that take their defaults, which only
        the per-record encoder writes."""
        values = {*self.columns, *(("undo", "ptime", "ver") if self.format == "changelog" else ())}
        if any(f["name"] not in values for f in self.value_schema.get("fields", ())):
            return False
        keys = set(self.key_columns)
        return self.key_schema is None or all(
            f["name"] in keys for f in self.key_schema.get("fields", ())
        )

    def __getstate__(self) -> dict[str, Any]:
        return {
            **self.__dict__, "_codecs": None, "_json": None, "_columnar": None,
            "_registry_writers": None, "_debezium": None,
        }


#: Encodings whose records confluent-kafka's serializers write (registered ids, subjects).
_SERIALIZED = ("json-registry", "protobuf-confluent")
_Writer = JsonRegistryWriter | ProtobufRegistryWriter


def _schema_ids(out: Any) -> tuple[int | None, int | None]:
    """An output's (key, value) schema ids to frame with; a registry output must have them."""
    registered = ("avro-confluent", *_SERIALIZED)
    value_framed = out.encoding in registered
    key_framed = (out.key_format or out.encoding) in registered and out.key_schema is not None
    if (value_framed and out.value_schema_id is None) or (key_framed and out.key_schema_id is None):
        raise ValueError(f"output {out.topic}: its schemas are not registered")
    return (
        out.key_schema_id if key_framed else None,
        out.value_schema_id if value_framed else None,
    )


def _framed(data: pa.Array, schema_id: int | None) -> pa.Array:
    """Encoded keys or values framed with ``schema_id`` (None: unchanged); NULL stays NULL."""
    if schema_id is None:
        return data
    header = pa.scalar(frame(schema_id, b""), pa.binary())
    return pc.binary_join_element_wise(header, data.cast(pa.binary()), pa.scalar(b"", pa.binary()))


def circuit_units(column: pa.Array) -> pa.Array:
    """A column in the circuit's units, as both encoding paths write it: TIMESTAMP as epoch
    ms (floored), DATE as days; anything else unchanged."""
    if pa.types.is_timestamp(column.type):
        micros = column.cast(pa.timestamp("us")).cast(pa.int64())
        return pc.floor(pc.divide(micros.cast(pa.float64()), 1000.0)).cast(pa.int64())
    if pa.types.is_date32(column.type):
        return column.cast(pa.int32())
    return column


def _plain_columns(batch: pa.RecordBatch) -> dict[str, list[Any]]:
    return {
        name: circuit_units(column).to_pylist()
        for name, column in zip(batch.schema.names, batch.columns, strict=True)
    }


def encode_record(
    enc: ViewEncoding, row: Mapping[str, Any], ptime_ms: int | None
) -> tuple[bytes | None, bytes | None]:
    """One row (circuit values, plus ``_undo``/``_ver``/``_delete``) as Kafka key and value."""
    record = {c: row[c] for c in enc.columns}
    if enc.format == "changelog":
        record["undo"] = bool(row.get(RETRACTION_COLUMN) or False)
        record["ptime"] = ptime_ms
        record["ver"] = int(row.get("_ver") or 0)
    if enc.encoding in ("json", "debezium-json"):
        return _json_record(enc, row, record, ptime_ms)
    if enc.encoding in _SERIALIZED:
        return _registry_record(enc, row, record)
    if enc.raw_value is not None:
        return _raw_record(enc, row, record)
    key_id, value_id = enc.schema_ids
    if enc.key_writer is not None:
        key = enc.key_writer.encode(row)
    else:
        key = (
            enc.key_codec.encode({c: row[c] for c in enc.key_columns})
            if enc.key_codec is not None
            else None
        )
        if key is not None and key_id is not None:
            key = frame(key_id, key)
    if row.get("_delete") and enc.format == "upsert":
        return key, None
    value = enc.value_codec.encode(record)
    return key, value if value_id is None else frame(value_id, value)


def _json_record(
    enc: ViewEncoding, row: Mapping[str, Any], record: Mapping[str, Any], ptime_ms: int | None
) -> tuple[bytes | None, bytes | None]:
    """A ``json`` record, or a ``debezium-json`` one: its key the same JSON object, its
    value the change event of the record."""
    value_encoder, key_encoder = enc.json_encoders()
    if enc.key_writer is not None:
        key = enc.key_writer.encode(row)
    else:
        key = (
            key_encoder.encode({c: row[c] for c in enc.key_columns})
            if key_encoder is not None
            else None
        )
    if row.get("_delete") and enc.format == "upsert":
        return key, None
    if enc.encoding == "debezium-json":
        return key, enc.debezium_encoder().encode(record, ptime_ms)
    return key, value_encoder.encode(record)


def _registry_record(
    enc: ViewEncoding, row: Mapping[str, Any], record: Mapping[str, Any]
) -> tuple[bytes | None, bytes | None]:
    value_writer, key_writer = enc.registry_writers()
    if enc.key_writer is not None:
        key = enc.key_writer.encode(row)
    else:
        key = (
            key_writer.encode({c: row[c] for c in enc.key_columns})
            if key_writer is not None
            else None
        )
    if row.get("_delete") and enc.format == "upsert":
        return key, None
    return key, value_writer.encode(record)


def _raw_record(
    enc: ViewEncoding, row: Mapping[str, Any], record: Mapping[str, Any]
) -> tuple[bytes | None, bytes | None]:
    """A ``raw`` record: its value the one value column's bytes, as Kafka's Java serializers
    write them, a NULL a null value (as Flink's ``'raw'`` writes it); its key of a declared
    key format (a raw value has no record key of its own encoding)."""
    assert enc.raw_value is not None
    key = enc.key_writer.encode(row) if enc.key_writer is not None else None
    if row.get("_delete") and enc.format == "upsert":
        return key, None
    name, kind = enc.raw_value
    value = record[name]
    return key, None if value is None else raw_encode(kind, value)


def encode_view_rows(
    batches: Iterator[pa.RecordBatch], enc: ViewEncoding
) -> Iterator[pa.RecordBatch]:
    """A stateless view's rows (plus the step's ``_ptime``) to sink rows: column-wise when
    the schemas allow, else one row at a time; the bytes are the same."""
    encoders = enc.columnar()
    for batch in batches:
        if encoders is not None:
            yield _encode_columns(batch, enc, *encoders)
            continue
        cols = _plain_columns(batch)
        n = batch.num_rows
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        for i in range(n):
            row = {c: v[i] for c, v in cols.items()}
            key, value = encode_record(enc, row, row.get("_ptime"))
            keys.append(key)
            values.append(value)
        yield output_batch(enc, keys, values)


def _column_values(column: pa.Array) -> ColumnValues:
    """A view column as the columnar encoder takes it, in :func:`circuit_units`."""
    null = np.asarray(column.is_null().to_numpy(zero_copy_only=False), np.bool_)
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_string(kind):
        return ColumnValues(null, array=column)
    filled = circuit_units(column).fill_null(False if pa.types.is_boolean(kind) else 0)
    return ColumnValues(null, numbers=filled.to_numpy(zero_copy_only=False))


def _encode_columns(
    batch: pa.RecordBatch,
    enc: ViewEncoding,
    value_encoder: ColumnarEncoder,
    key_encoder: ColumnarEncoder | None,
) -> pa.RecordBatch:
    n = batch.num_rows
    columns = {c: _column_values(batch.column(c)) for c in enc.columns}
    if enc.format == "changelog":
        none = np.zeros(n, np.bool_)
        # A stateless view of an updating relation's changes carries each row's (S18).
        columns["undo"] = (_column_values(batch.column(RETRACTION_COLUMN))
                           if RETRACTION_COLUMN in batch.schema.names
                           else ColumnValues(none, numbers=np.zeros(n, np.bool_)))
        columns["ptime"] = _column_values(batch.column("_ptime"))
        columns["ver"] = ColumnValues(none, numbers=np.zeros(n, np.int64))
    values = _framed(value_encoder.encode(columns, n), enc.schema_ids[1])
    keys = (
        _framed(key_encoder.encode({c: columns[c] for c in enc.key_columns}, n), enc.schema_ids[0])
        if key_encoder is not None
        else pa.nulls(n, pa.binary())
    )
    return output_batch(enc, keys, values)


def output_batch(
    enc: ViewEncoding,
    keys: Sequence[bytes | None] | pa.Array,
    values: Sequence[bytes | None] | pa.Array,
) -> pa.RecordBatch:
    """A view's encoded records as sink records: the one place they are built for output
    records, whichever operator produced them; every other column NULL."""
    n = len(keys)
    return sink_batch(
        n,
        {
            KIND: ["output"] * n,
            REL: [enc.view] * n,
            TOPIC: [enc.topic] * n,
            KEY: keys,
            VALUE: values,
        },
    )
