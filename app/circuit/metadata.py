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

A changelog table (``'format' = 'debezium-json'``, :data:`CHANGELOG_FORMATS`) also takes the
metadata of the Debezium change event that carries each row, under Flink's names (its
Kafka connector's ``value.`` prefix on the format's keys), read from the event's envelope
(app/connectors/debezium_records.py): ``value.source.timestamp`` (``source.ts_ms``, when the
change was made in the database), ``value.ingestion-timestamp`` (``ts_ms``, when Debezium
read it), ``value.source.database``, ``value.source.schema`` and ``value.source.table``.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "CHANGELOG_FORMATS",
    "CHANGELOG_METADATA_TYPES",
    "HEADER_PREFIX",
    "METADATA_TYPES",
    "REGISTRY_FORMATS",
    "metadata_types",
]

HEADER_PREFIX = "headers."
#: The value formats whose records are change events of a keyed table (inserts, updates and
#: deletes by key; docs/language.md, Debezium topics), not rows.
CHANGELOG_FORMATS = ("debezium-json", "debezium-avro-confluent")
#: The value formats framed for a schema registry (a table's 'schema-registry.url'): each
#: value's schema is named by the id in its prefix.
REGISTRY_FORMATS = ("avro-confluent", "json-registry", "protobuf-confluent",
                    "debezium-avro-confluent")

#: The metadata keys of a change event's envelope, and the types a column of each may have.
CHANGELOG_METADATA_TYPES: Mapping[str, tuple[str, ...]] = {
    "value.source.timestamp": ("TIMESTAMP",),
    "value.ingestion-timestamp": ("TIMESTAMP",),
    "value.source.database": ("VARCHAR",),
    "value.source.schema": ("VARCHAR",),
    "value.source.table": ("VARCHAR",),
}

#: The column types each metadata key may be declared with (SQL type names).
METADATA_TYPES: Mapping[str, tuple[str, ...]] = {
    "timestamp": ("TIMESTAMP",),
    "partition": ("INT", "BIGINT"),
    "offset": ("BIGINT",),
    "key": ("VARBINARY", "VARCHAR"),
    HEADER_PREFIX + "<name>": ("VARBINARY", "VARCHAR"),
}


def metadata_types(key: str, changelog: bool = False) -> tuple[str, ...] | None:
    """The SQL types a column of metadata ``key`` may have; None for an unknown key (a change
    event's keys are known only to a ``changelog`` table)."""
    if changelog and key in CHANGELOG_METADATA_TYPES:
        return CHANGELOG_METADATA_TYPES[key]
    if key.startswith(HEADER_PREFIX):
        return METADATA_TYPES[HEADER_PREFIX + "<name>"] if len(key) > len(HEADER_PREFIX) else None
    return METADATA_TYPES.get(key)
