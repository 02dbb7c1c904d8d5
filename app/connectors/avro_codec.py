"""Avro encode/decode with fastavro, with TIMESTAMP and DATE kept as plain integers.

fastavro builds ``datetime`` objects for ``timestamp-millis`` at a third of the speed of reading
longs (ARCHITECTURE.md), and the circuit IR works in epoch milliseconds anyway, so the codec
strips the ``timestamp-millis``/``date`` logical types from the schema it hands fastavro: the
bytes on the wire are identical, only the Python values differ. Decimals keep their logical
type so they come back as :class:`decimal.Decimal`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from typing import Any

import fastavro

from app.errors import SerializationError

__all__ = ["INTEGER_LOGICAL", "AvroCodec", "raw_schema"]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
#: The logical types whose values are plain ints or longs on the wire: read as those.
INTEGER_LOGICAL = frozenset({"timestamp-millis", "timestamp-micros", "date", "time-millis",
                             "time-micros", "local-timestamp-millis", "local-timestamp-micros"})


def raw_schema(schema: Any) -> Any:
    """The schema with integer-valued logical types removed (same wire format)."""
    if isinstance(schema, list):
        return [raw_schema(s) for s in schema]
    if isinstance(schema, dict):
        if schema.get("logicalType") in INTEGER_LOGICAL:
            return schema["type"]
        out = dict(schema)
        if "fields" in out:
            out["fields"] = [{**f, "type": raw_schema(f["type"])} for f in out["fields"]]
        if "items" in out:
            out["items"] = raw_schema(out["items"])
        return out
    return schema


def _framing_hint(data: bytes) -> str:
    """For a value that is no schemaless Avro of the schema: a hint when it starts like a
    Confluent-framed record (magic byte 0 and a plausible schema id), else nothing."""
    from app.connectors.confluent_avro import framed_schema_id

    schema_id = framed_schema_id(data)
    if schema_id is None:
        return ""
    return (
        f" (it starts like a Confluent-framed record of schema id {schema_id}: if its "
        "producer uses a schema registry, declare the table 'format' = 'avro-confluent')"
    )


class AvroCodec:
    """Schemaless Avro (the value bytes only, as the 'avro' format of SPEC L1)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = dict(schema)
        self._parsed = fastavro.parse_schema(raw_schema(self.schema))

    def decode(self, data: bytes) -> dict[str, Any]:
        """Decode one value; raises SerializationError when the bytes do not fit the schema,
        including trailing bytes (a record written with a longer schema)."""
        buffer = io.BytesIO(data)
        try:
            record = fastavro.schemaless_reader(buffer, self._parsed, None)
        except Exception as exc:  # fastavro raises many types on garbage input
            # fastavro names its reader object ("<_io.BytesIO object at 0x7f...>"): without the
            # address the message, a dead-letter header, is the same on every replay (S13).
            detail = _ADDRESS.sub("", str(exc))
            raise SerializationError(
                f"cannot decode Avro: {type(exc).__name__}: {detail}{_framing_hint(data)}"
            ) from exc
        if buffer.tell() != len(data):
            raise SerializationError(
                f"{len(data) - buffer.tell()} bytes left after decoding the record: "
                f"written with another schema?{_framing_hint(data)}"
            )
        if not isinstance(record, dict):
            raise SerializationError("the Avro value is not a record")
        return record

    def encode(self, record: Mapping[str, Any]) -> bytes:
        buffer = io.BytesIO()
        try:
            fastavro.schemaless_writer(buffer, self._parsed, dict(record))
        except Exception as exc:
            raise SerializationError(f"cannot encode Avro: {type(exc).__name__}: {exc}") from exc
        return buffer.getvalue()
