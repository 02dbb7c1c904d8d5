"""Rows per CPU second of the source's decode of one slice, ``'avro-confluent'`` beside
``'avro'``: ``python -m loadtests.confluent_decode_speed [--rows 100000] [--repeat 3]``.

The same records of one table (a TIMESTAMP LATENESS column, a BIGINT, a DOUBLE, a nullable
VARCHAR) are decoded by ``decode_slice`` four ways: plain Avro on the per-record path
(``columnar=False``, the reference path) and on the default columnar path; Confluent-framed
Avro (written by confluent-kafka's ``AvroSerializer`` with the registry) whose writer schema
is the table's own record, which takes the columnar path over the bodies; and framed Avro of a
producer one field ahead of the table, which takes the per-record path with fastavro's schema
resolution. The registry is ``SCHEMA_REGISTRY_URL``,
else the tests' local one (scripts/fetch-schema-registry.sh), started for the run; it is asked
once per schema id, so the figure is the per-record cost. Arrow is held to one CPU thread; the
best of ``--repeat`` runs is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "purchase",
    "namespace": "tidemark",
    "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "card", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}

#: The field a producer has added that the table does not read.
EXTRA: dict[str, Any] = {"name": "channel", "type": "string", "default": "web"}


def _spec(fmt: str, registry: str | None) -> Any:
    from app.connectors.late_gate import SourceColumn, SourceSpec

    return SourceSpec(
        table="purchase",
        topic="purchases",
        columns=(
            SourceColumn("ts", "timestamp", False),
            SourceColumn("card", "int64", False),
            SourceColumn("amount", "float64", False),
            SourceColumn("note", "string", True),
        ),
        avro_schema=SCHEMA,
        lateness=(("ts", 60_000),),
        max_future_ms=None,
        dead_letter_topic="purchases.dlq",
        format=fmt,
        registry={"url": registry} if registry else None,
    )


def _rows(count: int) -> list[dict[str, Any]]:
    base = 1_764_150_000_000
    return [
        {
            "ts": base + i * 10,
            "card": 1_000 + i % 997,
            "amount": float(i % 500) + 0.25,
            "note": None if i % 3 else f"note {i % 50}",
        }
        for i in range(count)
    ]


def _time(spec: Any, values: list[bytes], columnar: bool, repeat: int) -> float:
    """Best rows per CPU second of decoding ``values`` as one slice."""
    from confluent_kafka import Message

    from app.connectors.kafka_source import KafkaPartitionSlice, decode_slice

    msgs = [
        Message(topic="purchases", partition=0, offset=i, key=None, value=v)
        for i, v in enumerate(values)
    ]
    best = 0.0
    for _ in range(repeat):
        part = KafkaPartitionSlice(0, 0, len(msgs), 1, 1_764_150_000_000, {"ts": None})
        started = time.process_time()
        batches = list(decode_slice(spec, part, msgs, columnar=columnar))
        spent = time.process_time() - started
        accepted = sum(b.num_rows for b in batches) - 1  # the probe row
        assert accepted == len(values), accepted
        best = max(best, len(values) / spent)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import pyarrow as pa
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from app.connectors.avro_codec import AvroCodec

    pa.set_cpu_count(1)
    local = None
    url = os.environ.get("SCHEMA_REGISTRY_URL")
    if not url:
        sys.path.insert(0, str(ROOT / "tests"))
        from local_schema_registry import LocalSchemaRegistry

        local = LocalSchemaRegistry().start()
        url = local.url
    try:
        rows = _rows(args.rows)
        codec = AvroCodec(SCHEMA)
        plain = [codec.encode(r) for r in rows]
        serializer = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(SCHEMA))
        context = SerializationContext(f"bench-{time.time_ns()}", MessageField.VALUE)
        framed = [bytes(serializer(r, context) or b"") for r in rows]
        # A producer one field ahead of the table: its values need schema resolution.
        ahead = {**SCHEMA, "fields": [*SCHEMA["fields"], EXTRA]}
        evolved = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(ahead))
        resolved = [bytes(evolved({**r, "channel": "web"}, context) or b"") for r in rows]
        confluent = _spec("avro-confluent", url)
        results = {
            "avro per-record": _time(_spec("avro", None), plain, False, args.repeat),
            "avro columnar": _time(_spec("avro", None), plain, True, args.repeat),
            "confluent own": _time(confluent, framed, True, args.repeat),
            "confluent ahead": _time(confluent, resolved, True, args.repeat),
        }
    finally:
        if local is not None:
            local.cleanup()
    for name, rate in results.items():
        print(f"{name:16} {rate:12,.0f} rows/cpu-s")
    for name in ("confluent own", "confluent ahead"):
        print(f"{name} / avro columnar: {results[name] / results['avro columnar']:.2f}")


if __name__ == "__main__":
    main()
