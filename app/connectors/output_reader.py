"""Read an output view's Kafka records back as a consumer does, whatever the view's encoding.

Keys and values become the records of the view's key and value schemas in circuit values
(TIMESTAMP epoch ms, DATE days, DECIMAL exact), as the reference evaluator gives them: Avro
(schemaless, or framed by a schema registry serializer, whose schema id is not checked) with
:class:`~app.connectors.avro_codec.AvroCodec`, JSON with the JSON table decoder
(:func:`~app.connectors.json_encoder.json_decoder`), Debezium change events as their row with
``undo`` and ``ptime`` (app/connectors/debezium_encoder.py), registry Protobuf with the
``protobuf-confluent`` table decoder (the output's registry), a raw value as Kafka's Java
deserializers read it (the one value column). A null key or value (a
tombstone) is None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from app.circuit.ir import Output
from app.connectors.avro_codec import AvroCodec
from app.connectors.confluent_avro import unframe
from app.connectors.json_encoder import json_decoder
from app.connectors.record_key import KeyReader, raw_decode, raw_type

__all__ = ["OutputReader"]

Decode = Callable[[bytes], dict[str, Any]]


def _decoder(name: str, schema: Mapping[str, Any], encoding: str,
             registry: Mapping[str, str] | None = None) -> Decode:
    if encoding == "protobuf-confluent":
        from app.connectors.confluent_protobuf import ConfluentProtobufRecords, column_kinds

        if registry is None:
            raise ValueError(f"{name}: Protobuf records are read with their schema registry")
        return ConfluentProtobufRecords(name, column_kinds(schema), registry).decode
    if encoding == "json":
        return json_decoder(name, schema).decode
    if encoding == "debezium-json":
        from app.connectors.debezium_encoder import DebeziumJsonDecoder

        return DebeziumJsonDecoder(name, schema).decode
    if encoding == "raw":
        field, kind = schema["fields"][0]["name"], raw_type(schema)
        return lambda data: {field: raw_decode(kind, data, "value")}
    if encoding == "json-registry":
        document = json_decoder(name, schema).decode
        return lambda data: document(unframe(data)[1])
    codec = AvroCodec(schema)
    if encoding == "avro-confluent":
        return lambda data: codec.decode(unframe(data)[1])
    return codec.decode


class OutputReader:
    """Decodes the keys and values one output view writes."""

    def __init__(self, view: str, output: Output) -> None:
        self.output = output
        registry = output.schema_registry
        self._value = _decoder(view, output.value_schema, output.encoding, registry)
        self._key = (
            None
            if output.key_schema is None
            else KeyReader(output.key_format, output.key_schema, output.key_columns,
                           output.key_fields).read
            if output.key_format is not None
            else _decoder(f"{view}_key", output.key_schema,
                          "json" if output.encoding == "debezium-json" else output.encoding,
                          registry)
        )

    def value(self, data: bytes | None) -> dict[str, Any] | None:
        return None if data is None else self._value(data)

    def key(self, data: bytes | None) -> dict[str, Any] | None:
        if data is None or self._key is None:
            return None
        return self._key(data)
