"""The Kafka sink: writes one step's output changes and dead letters, reports what it wrote.

Every row reaching the sink has the :data:`SINK_SCHEMA` shape: a ``topic`` per row (so one
query writes every output view and the dead-letter topic), the key and value bytes, headers,
and for dead letters the source coordinates and the late-gate details from which the SPEC S6
headers are built here. :func:`produce_partition` runs on the executors inside ``mapInArrow``;
it flushes before returning and fails the task on any delivery error, so a step is only
committed once all its records are acknowledged (``acks=all``, idempotent producer).
It yields one summary row per (kind, relation, topic, reason) so the driver can count without
touching the records again, plus the first late rows' details for the S6 log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

__all__ = [
    "LATE_DETAIL_CAP",
    "SINK_SCHEMA",
    "SUMMARY_SCHEMA",
    "format_time_value",
    "produce_partition",
]

SINK_SCHEMA = (
    "kind string, rel string, topic string, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>, reason string, message string, "
    "src_partition int, src_offset bigint, late_column string, late_value bigint, "
    "late_waterline bigint, step bigint"
)
SUMMARY_SCHEMA = "kind string, rel string, topic string, reason string, n bigint, detail string"

#: How many late rows per task carry their full details back to the driver (S6 log).
LATE_DETAIL_CAP = 1000

_PRODUCERS: dict[str, Any] = {}


def format_time_value(value: int | None, unit: str) -> str:
    """A waterline or time value as a header: ISO-8601 UTC for TIMESTAMP (unit 'ms')."""
    if value is None:
        return "-infinity"
    if unit == "ms":
        moment = datetime.fromtimestamp(value / 1000, tz=UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value % 1000:03d}Z"
    return str(value)


def _producer(conf: Mapping[str, str]) -> Any:
    from confluent_kafka import Producer

    key = json.dumps(conf, sort_keys=True)
    producer = _PRODUCERS.get(key)
    if producer is None:
        producer = Producer(
            {
                **conf,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "batch.num.messages": 10000,
                "message.max.bytes": 10485760,
                "log_level": 3,
            }
        )
        _PRODUCERS[key] = producer
    return producer


def produce_partition(
    batches: Iterator[pa.RecordBatch],
    conf: Mapping[str, str],
    tables: Mapping[str, Mapping[str, Any]],
    view_headers: Mapping[str, list[tuple[str, bytes]]],
) -> Iterator[pa.RecordBatch]:
    """Write rows of :data:`SINK_SCHEMA` to Kafka; yield :data:`SUMMARY_SCHEMA` rows.

    ``tables``: table -> {"topic": source topic, "units": {column: 'ms'|'integer'}}.
    ``view_headers``: view -> extra headers for its records (S14 ``tidemark.waterline``).
    """
    producer = _producer(conf)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    counts: dict[tuple[str, str, str, str], int] = {}
    late_details: list[dict[str, Any]] = []
    for batch in batches:
        for row in batch.to_pylist():
            kind, rel, topic = row["kind"], row["rel"], row["topic"]
            headers = [(h["key"], h["value"]) for h in row["headers"] or ()]
            reason = row["reason"] or ""
            if kind == "dead_letter":
                headers.extend(_dead_letter_headers(row, tables[rel]))
                if reason == "late" and len(late_details) < LATE_DETAIL_CAP:
                    late_details.append(
                        {
                            "table": rel,
                            "partition": row["src_partition"],
                            "offset": row["src_offset"],
                            "column": row["late_column"],
                            "value": row["late_value"],
                            "waterline": row["late_waterline"],
                        }
                    )
            else:
                headers.extend(view_headers.get(rel, ()))
            _produce(producer, topic, row["key"], row["value"], headers, on_delivery)
            counts[(kind, rel, topic, reason)] = counts.get((kind, rel, topic, reason), 0) + 1
    remaining = producer.flush(120)
    if remaining or errors:
        raise RuntimeError(f"Kafka did not acknowledge {remaining} records; errors: {errors[:5]}")
    summary = [
        {"kind": k, "rel": r, "topic": t, "reason": reason, "n": n, "detail": None}
        for (k, r, t, reason), n in counts.items()
    ]
    if late_details:
        summary.append(
            {
                "kind": "late_detail",
                "rel": None,
                "topic": None,
                "reason": None,
                "n": len(late_details),
                "detail": json.dumps(late_details),
            }
        )
    yield pa.RecordBatch.from_pylist(
        summary,
        schema=pa.schema(
            [
                ("kind", pa.string()),
                ("rel", pa.string()),
                ("topic", pa.string()),
                ("reason", pa.string()),
                ("n", pa.int64()),
                ("detail", pa.string()),
            ]
        ),
    )


def _produce(
    producer: Any,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]],
    on_delivery: Any,
) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.1)  # the local queue is full: let deliveries drain


def _dead_letter_headers(
    row: Mapping[str, Any], table: Mapping[str, Any]
) -> list[tuple[str, bytes]]:
    """SPEC S6 headers; original key, value and headers are kept unchanged for replay."""
    out = [
        ("tidemark.error.reason", row["reason"].encode()),
        ("tidemark.error.message", (row["message"] or "").encode()),
        ("tidemark.source.topic", str(table["topic"]).encode()),
        ("tidemark.source.partition", str(row["src_partition"]).encode()),
        ("tidemark.source.offset", str(row["src_offset"]).encode()),
        ("tidemark.table", str(row["rel"]).encode()),
    ]
    if row["reason"] == "late":
        unit = table["units"].get(row["late_column"], "integer")
        out += [
            ("tidemark.late.column", str(row["late_column"]).encode()),
            ("tidemark.late.value", format_time_value(row["late_value"], unit).encode()),
            ("tidemark.late.waterline", format_time_value(row["late_waterline"], unit).encode()),
        ]
    return out
