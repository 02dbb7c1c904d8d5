"""Table columns read from the Kafka record instead of its value (``METADATA FROM '...'``).

A table column declared ``name type METADATA FROM 'key'`` (or ``METADATA`` alone, the column's
own name being the key, as in Flink SQL) takes its value from the record that carries the row:

=================  ======================  ================================================
key                column types            value
=================  ======================  ================================================
``timestamp``      TIMESTAMP               the record's timestamp (ms; producer's CreateTime
                                           or the broker's LogAppendTime, as the topic says)
``partition``      INT, BIGINT             the partition the record was read from
``offset``         BIGINT                  the record's offset in that partition
``key``            VARBINARY, VARCHAR      the record's key (VARCHAR: UTF-8 text)
``headers.<h>``    VARBINARY, VARCHAR      the value of the record's header ``<h>`` (the last
                                           one if several carry that name; VARCHAR: UTF-8)
=================  ======================  ================================================

A null key, an absent header or a record without a timestamp gives NULL; a NOT NULL metadata
column with NULL, or a VARCHAR key or header that is not UTF-8 text, makes the record an
``invalid`` dead letter, as a value column would (S7). Past the gate a metadata column is an
ordinary column: it can carry LATENESS (the Kafka timestamp as event time) and the reference
evaluator reads it from its rows like any other.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["HEADER_PREFIX", "METADATA_TYPES", "metadata_types"]

HEADER_PREFIX = "headers."

#: The column types each metadata key may be declared with (SQL type names).
METADATA_TYPES: Mapping[str, tuple[str, ...]] = {
    "timestamp": ("TIMESTAMP",),
    "partition": ("INT", "BIGINT"),
    "offset": ("BIGINT",),
    "key": ("VARBINARY", "VARCHAR"),
    HEADER_PREFIX + "<name>": ("VARBINARY", "VARCHAR"),
}


def metadata_types(key: str) -> tuple[str, ...] | None:
    """The SQL types a column of metadata ``key`` may have; None for an unknown key."""
    if key.startswith(HEADER_PREFIX):
        return METADATA_TYPES[HEADER_PREFIX + "<name>"] if len(key) > len(HEADER_PREFIX) else None
    return METADATA_TYPES.get(key)
