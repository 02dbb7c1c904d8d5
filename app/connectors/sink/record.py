"""The sink record: the shape of every row a step hands the Kafka sink, defined here only.

A step writes output records, dead letters and probes through one sink
(:func:`app.connectors.sink.produce.produce_partition`), so every writer builds rows of one
shape: :data:`SINK_RECORD`, an Arrow schema (names, types, nullability, in order). Everything
else is derived from it: the Spark schema that ``mapInArrow`` and ``applyInPandasWithState``
declare (:data:`SINK_SCHEMA`, :data:`SINK_STRUCT`), the column names, and the batches
(:func:`sink_batch`); the source's columns a dead letter is made of take their types from it
too (:data:`app.connectors.kafka_source.TABLE_GATE`). A column added here reaches every writer
and Spark's schema; a writer that sets a column by a name not here fails.

Columns:

* ``kind``: ``output`` (a view's record), ``dead_letter``, ``probe`` (a slice's step maxima,
  never written), or ``row`` (an accepted row a step view reads, never written);
* ``rel``: the view or table; ``topic``: where the record goes;
* ``key``, ``value``: the record's bytes (a probe's ``value`` is its JSON);
* ``headers``: the record's own headers (a dead letter's original ones), before the sink adds
  the S6 or S14 headers;
* ``record_timestamp_ms``: the record's Kafka timestamp (epoch ms): a dead letter's is its source
  record's, which it keeps (SPEC S6); NULL lets the producer stamp the time of writing;
* ``reason`` .. ``late_waterline``: a dead letter's S6 details (source coordinates, the late
  gate's column, value and waterline), from which the sink builds its headers;
* ``step``: the step of a dead letter or probe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, from_arrow_type
from pyspark.sql.types import StructType

__all__ = [
    "HEADERS",
    "HEADERS_TYPE",
    "KEY",
    "KIND",
    "LATE_COLUMN",
    "LATE_VALUE",
    "LATE_WATERLINE",
    "MESSAGE",
    "REASON",
    "REL",
    "SINK_COLUMNS",
    "SINK_RECORD",
    "SINK_SCHEMA",
    "SINK_STRUCT",
    "SRC_OFFSET",
    "SRC_PARTITION",
    "STEP",
    "TIMESTAMP_MS",
    "TOPIC",
    "VALUE",
    "check_columns",
    "sink_batch",
    "spark_ddl",
    "spark_sql_type",
]

KIND = "kind"
REL = "rel"
TOPIC = "topic"
KEY = "key"
VALUE = "value"
HEADERS = "headers"
TIMESTAMP_MS = "record_timestamp_ms"
REASON = "reason"
MESSAGE = "message"
SRC_PARTITION = "src_partition"
SRC_OFFSET = "src_offset"
LATE_COLUMN = "late_column"
LATE_VALUE = "late_value"
LATE_WATERLINE = "late_waterline"
STEP = "step"

#: Kafka headers as Spark carries them: a list of (key, value) structs.
HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

#: The one definition of a sink row; every column nullable (each kind sets only its own).
SINK_RECORD = pa.schema(
    [
        pa.field(KIND, pa.string()),
        pa.field(REL, pa.string()),
        pa.field(TOPIC, pa.string()),
        pa.field(KEY, pa.binary()),
        pa.field(VALUE, pa.binary()),
        pa.field(HEADERS, HEADERS_TYPE),
        pa.field(TIMESTAMP_MS, pa.int64()),
        pa.field(REASON, pa.string()),
        pa.field(MESSAGE, pa.string()),
        pa.field(SRC_PARTITION, pa.int32()),
        pa.field(SRC_OFFSET, pa.int64()),
        pa.field(LATE_COLUMN, pa.string()),
        pa.field(LATE_VALUE, pa.int64()),
        pa.field(LATE_WATERLINE, pa.int64()),
        pa.field(STEP, pa.int64()),
    ]
)


def spark_sql_type(kind: pa.DataType) -> str:
    """An Arrow type as Spark SQL spells it in a DDL schema (Spark's own Arrow mapping)."""
    return from_arrow_type(kind).simpleString()


def spark_ddl(struct: StructType) -> str:
    """A Spark schema as the DDL string ``mapInArrow`` and friends take: ``name type, ...``."""
    return ", ".join(
        f"{f.name} {f.dataType.simpleString()}{'' if f.nullable else ' NOT NULL'}"
        for f in struct.fields
    )


#: The column names, in order.
SINK_COLUMNS: tuple[str, ...] = tuple(SINK_RECORD.names)
#: :data:`SINK_RECORD` as a Spark schema, by Spark's own Arrow-to-Spark type mapping.
SINK_STRUCT: StructType = from_arrow_schema(SINK_RECORD)
#: :data:`SINK_STRUCT` as a DDL string, as the writers' Spark operators declare their output.
SINK_SCHEMA: str = spark_ddl(SINK_STRUCT)


def check_columns(names: Iterable[str]) -> None:
    """Fail on a name that is not a sink record column (a writer out of step with the shape)."""
    unknown = set(names) - set(SINK_COLUMNS)
    if unknown:
        raise KeyError(f"not sink record columns: {sorted(unknown)}")


def sink_batch(n: int, columns: Mapping[str, pa.Array | Sequence[Any]]) -> pa.RecordBatch:
    """``n`` sink rows with the given columns (Arrow arrays, or values of the column's type)
    and NULL in every other, in :data:`SINK_RECORD`'s order and types."""
    check_columns(columns)
    nulls = [None] * n
    arrays = []
    for field in SINK_RECORD:
        given = columns.get(field.name, nulls)
        arrays.append(given if isinstance(given, pa.Array) else pa.array(given, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=SINK_RECORD)
