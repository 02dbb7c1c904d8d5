"""OVER aggregates by an operator of Tidemark's own (docs/semantics.md, ADR 0019).

Spark has no streaming OVER aggregation. The rows entering a view's
:class:`~app.circuit.ir.Over` (after its WHERE) go to one ``transformWithStateInPandas``
(:mod:`app.runtime.operators.slot_operator`: no time mode, grouped by a slot, a hash of the
PARTITION BY values, so a partition's rows are all in one slot), with the probes of the
table whose LATENESS column the ORDER BY column forwards copied to every slot: each slot
computes that column's waterline w(t) by S3 itself, in every step that reads the table.
A slot's call (:func:`app.runtime.operators.over_slots.step_slot`, plain Python that the
driver's pre-init of ``transformWithStateInPandas`` imports cheaply) then holds the step's
rows in their partitions, in arrival order (Kafka partition and offset, after the rows of
earlier steps), and writes every row ``w`` now passes with its aggregates' values:
:class:`app.circuit.over.OverPartition`, the reference evaluator's own rule, over the slot's
state document
``{"w": ..., "step": n, "parts": {partition: ...}}``.

On the wire a row is ``k`` (its PARTITION BY values as JSON), ``t`` (its ORDER BY value,
epoch ms for a TIMESTAMP), ``row`` (its columns as Spark's ``to_json``) and ``vals`` (each
aggregate's argument, :func:`~app.runtime.operators.slot_operator.value_sql`); a written row comes
back as ``row`` and ``res`` (the aggregates' values as JSON, exact: decimals and doubles as
text), read back by ``from_json`` and cast to each aggregate's SQL type.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from app.circuit.functions import to_spark_sql
from app.circuit.ir import Circuit, Over, SqlType, View
from app.runtime.operators.join_support import join_time_source
from app.runtime.operators.over_slots import OverOperatorSpec, step_slot
from app.runtime.operators.slot_operator import (
    keyed_slot,
    probe_wire,
    run_slots,
    value_sql,
    wire_row,
)
from app.runtime.operators.view_frame import ms_sql
from app.runtime.planner.waterline_keys import time_unit

__all__ = ["over_rows", "view_over_rows"]

_OUT = StructType([StructField("row", StringType()), StructField("res", StringType())])


def view_over_rows(
    circuit: Circuit, view: View, sources: Mapping[str, DataFrame], rows: DataFrame
) -> DataFrame:
    """The rows of a view's OVER aggregates by Tidemark's OVER operator (ADR 0019), over the
    rows entering its Over and the probes of the table whose LATENESS column its ORDER BY
    column forwards (ADR 0001: their column holds the step's maximum)."""
    over = view.over
    assert over is not None, view.name
    found = join_time_source(circuit, view.source, over.order_column)
    assert found is not None, (view.name, "refused by check_supported")
    table = circuit.table(found[0])
    read = next(x for x in table.lateness if x.column == found[1])
    kind = table.column(read.column).type
    time = ms_sql(read.column) if time_unit(kind) == "ms" else f"cast(`{read.column}` as bigint)"
    probes = sources[table.name].filter(F.col("_kind") == "probe").select(
        F.expr(time).alias("t")
    )
    relation = (
        table if view.source == table.name else circuit.view(view.source)
    )
    columns = [c.name for c in relation.columns]
    spec = OverOperatorSpec.of(over, read.amount)
    return over_rows(over, rows, columns, probes, spec, kind)



def over_rows(
    over: Over,
    rows: DataFrame,
    columns: list[str],
    probes: DataFrame,
    spec: OverOperatorSpec,
    time_type: SqlType,
) -> DataFrame:
    """The rows of ``rows`` (the Over's input: ``columns``, with ``_partition`` and
    ``_offset``) each with the Over's columns added, written once the waterline passes
    them; ``probes`` are the probes of the ORDER BY column's table (one column ``t``, its
    step maximum)."""
    partition = [F.expr(to_spark_sql(e)) for e in over.partition]
    key = (
        F.to_json(F.struct(*[p.alias(f"k{i}") for i, p in enumerate(partition)]))
        if partition
        else F.lit("{}")  # one partition
    )
    args = [
        value_sql(f"_a{i}", call.args[0].type).alias(f"a{i}")
        for i, (_, call) in enumerate(over.aggregates)
        if call.args
    ]
    with_args = rows.select(
        "*",
        *[F.expr(to_spark_sql(call.args[0])).alias(f"_a{i}")
          for i, (_, call) in enumerate(over.aggregates) if call.args],
    )
    order = f"`{over.order_column}`"
    time = F.expr(f"unix_millis({order})" if time_type.name == "TIMESTAMP" else order)
    row = F.to_json(F.struct(*[F.col(f"`{c}`") for c in columns]))
    vals = F.to_json(F.struct(*args)) if args else F.lit(None).cast("string")
    wire = with_args.select(*wire_row(keyed_slot(key), "O", key, time, row, vals))
    written = run_slots([wire, probe_wire(probes, "T")], partial(step_slot, spec), _OUT)
    schema = StructType([rows.schema[c] for c in columns])
    results = StructType([
        StructField(name, _result_wire(call.type)) for name, call in over.aggregates
    ])
    parsed = written.select(
        F.from_json("row", schema).alias("_r"), F.from_json("res", results).alias("_v")
    )
    return parsed.select(
        *[F.col("_r").getField(c).alias(c) for c in columns],
        *[_result(F.col("_v").getField(name), call.type).alias(name)
          for name, call in over.aggregates],
    )


def _result_wire(kind: SqlType) -> DataType:
    """How an aggregate's value comes back in ``res`` (:func:`encode_value`)."""
    if kind.name in ("INT", "BIGINT", "TIMESTAMP"):
        return LongType()
    if kind.name == "DATE":
        return IntegerType()
    return StringType()


def _result(value: Column, kind: SqlType) -> Column:
    """An aggregate's value from ``res`` as its SQL type."""
    name = kind.name
    if name == "TIMESTAMP":
        return F.timestamp_millis(value)
    if name == "DATE":
        return F.date_from_unix_date(value)
    if name == "DECIMAL":
        return value.cast(f"decimal({kind.precision},{kind.scale})")
    if name == "VARBINARY":
        return F.unbase64(value)
    spark = {"INT": "int", "BIGINT": "bigint", "REAL": "float", "DOUBLE": "double",
             "BOOLEAN": "boolean", "VARCHAR": "string"}[name]
    return value.cast(spark)
