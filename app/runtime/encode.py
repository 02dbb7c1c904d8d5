"""Encode a view's rows as Kafka records of SPEC S13, on the executors (``mapInArrow``).

TIMESTAMP columns leave Spark as microseconds and are written as Avro ``timestamp-millis``
longs; DATE as days. The encoding is a pure function of the row and the step's batch time
(``_ptime``, Spark's recorded batch timestamp), so a replayed step writes identical bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.connectors.avro_codec import AvroCodec

__all__ = ["ViewEncoding", "encode_view_rows"]


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
    ) -> None:
        self.view, self.topic, self.format = view, topic, fmt
        self.columns, self.key_columns = list(columns), list(key_columns)
        self.value_schema, self.key_schema = dict(value_schema), key_schema


def _plain_columns(batch: pa.RecordBatch) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if pa.types.is_timestamp(column.type):
            micros = column.cast(pa.timestamp("us")).cast(pa.int64())
            column = pc.floor(pc.divide(micros.cast(pa.float64()), 1000.0)).cast(pa.int64())
        elif pa.types.is_date32(column.type):
            column = column.cast(pa.int32())
        out[name] = column.to_pylist()
    return out


def encode_view_rows(
    batches: Iterator[pa.RecordBatch], enc: ViewEncoding
) -> Iterator[pa.RecordBatch]:
    """Rows of the view (plus ``_ptime``, ``_undo``, ``_ver`` when present) to sink rows."""
    value_codec = AvroCodec(enc.value_schema)
    key_codec = AvroCodec(enc.key_schema) if enc.key_schema else None
    changelog = enc.format == "changelog"
    for batch in batches:
        cols = _plain_columns(batch)
        n = batch.num_rows
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        for i in range(n):
            record = {c: cols[c][i] for c in enc.columns}
            deleted = bool(cols["_delete"][i]) if "_delete" in cols else False
            if changelog:
                record["undo"] = bool(cols["_undo"][i]) if "_undo" in cols else False
                record["ptime"] = cols["_ptime"][i]
                record["ver"] = int(cols["_ver"][i]) if "_ver" in cols else 0
            keys.append(
                key_codec.encode({c: cols[c][i] for c in enc.key_columns}) if key_codec else None
            )
            values.append(
                None if deleted and enc.format == "upsert" else value_codec.encode(record)
            )
        yield pa.RecordBatch.from_pydict(
            {
                "kind": pa.array(["output"] * n, pa.string()),
                "rel": pa.array([enc.view] * n, pa.string()),
                "topic": pa.array([enc.topic] * n, pa.string()),
                "key": pa.array(keys, pa.binary()),
                "value": pa.array(values, pa.binary()),
                "headers": pa.array(
                    [None] * n,
                    pa.list_(
                        pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
                    ),
                ),
                "reason": pa.array([None] * n, pa.string()),
                "message": pa.array([None] * n, pa.string()),
                "src_partition": pa.array([None] * n, pa.int32()),
                "src_offset": pa.array([None] * n, pa.int64()),
                "late_column": pa.array([None] * n, pa.string()),
                "late_value": pa.array([None] * n, pa.int64()),
                "late_waterline": pa.array([None] * n, pa.int64()),
                "step": pa.array([None] * n, pa.int64()),
            }
        )
