"""Debezium change events as Kafka Connect's AvroConverter writes them (the envelope schema of
a PostgreSQL connector's ``fx.public.rates`` table), produced with confluent-kafka's own
AvroSerializer, for the ``'format' = 'debezium-avro-confluent'`` tests."""

from __future__ import annotations

import json
from typing import Any

DECIMAL = {
    "type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
    "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
    "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal",
}
ENVELOPE: dict[str, Any] = {
    "type": "record",
    "name": "Envelope",
    "namespace": "fx.public.rates",
    "fields": [
        {"name": "before", "default": None, "type": ["null", {
            "type": "record", "name": "Value", "connect.name": "fx.public.rates.Value",
            "fields": [{"name": "currency", "type": "string"},
                       {"name": "rate", "type": DECIMAL}],
        }]},
        {"name": "after", "default": None, "type": ["null", "Value"]},
        {"name": "source", "type": {
            "type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
            "connect.name": "io.debezium.connector.postgresql.Source",
            "fields": [
                {"name": "version", "type": "string"},
                {"name": "connector", "type": "string"},
                {"name": "name", "type": "string"},
                {"name": "ts_ms", "type": "long"},
                {"name": "snapshot", "default": "false", "type": [
                    {"type": "string", "connect.name": "io.debezium.data.Enum"}, "null"]},
                {"name": "db", "type": "string"},
                {"name": "schema", "type": "string"},
                {"name": "table", "type": "string"},
                {"name": "lsn", "default": None, "type": ["null", "long"]},
            ],
        }},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "default": None, "type": ["null", "long"]},
    ],
    "connect.name": "fx.public.rates.Envelope",
}


def avro_events(url: str, topic: str) -> Any:
    """``event(op, source_ts_ms, currency, before_rate, after_rate)``: the framed value of one
    change event, registered under ``<topic>-value`` by AvroSerializer."""
    from decimal import Decimal

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(ENVELOPE))
    context = SerializationContext(topic, MessageField.VALUE)

    def event(op: str, ts_ms: int, currency: str, before: str | None,
              after: str | None) -> bytes:
        def image(rate: str | None) -> dict[str, Any] | None:
            return None if rate is None else {"currency": currency, "rate": Decimal(rate)}

        return bytes(serializer({
            "before": image(before), "after": image(after), "op": op, "ts_ms": ts_ms + 150,
            "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "fx",
                       "ts_ms": ts_ms, "snapshot": "true" if op == "r" else "false",
                       "db": "fx", "schema": "public", "table": "rates", "lsn": None},
        }, context) or b"")

    return event
