"""Dead-letter and probe rows in the sink's shape (SINK_SCHEMA), for every gate.

Both the table's LateGate (in the source) and a view's LATENESS gate (app/runtime/view_gate.py)
route late rows to the table's dead-letter topic and report their step maxima as probe rows;
one place builds those rows so the two gates cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

__all__ = ["dead_letter_rows", "probe_rows"]

_HEADERS = "array<struct<key:string,value:binary>>"


def dead_letter_rows(
    frame: DataFrame,
    table: str,
    topic: str,
    *,
    reason: Column,
    message: str,
    late: tuple[str, str, str],
) -> DataFrame:
    """The rows of ``frame`` as dead letters of ``table`` (SPEC S6): original key, value and
    headers, the source coordinates, and the late-gate details from the ``late`` columns
    (column, value, waterline)."""
    late_column, late_value, late_waterline = late
    return frame.select(
        F.lit("dead_letter").alias("kind"),
        F.lit(table).alias("rel"),
        F.lit(topic).alias("topic"),
        F.col("_key").alias("key"),
        F.col("_value").alias("value"),
        F.col("_headers").alias("headers"),
        reason.alias("reason"),
        F.col(message).alias("message"),
        F.col("_partition").alias("src_partition"),
        F.col("_offset").alias("src_offset"),
        F.col(late_column).alias("late_column"),
        F.col(late_value).alias("late_value"),
        F.col(late_waterline).alias("late_waterline"),
        F.col("_step").alias("step"),
    )


def probe_rows(
    frame: DataFrame, table: str, maxima: Sequence[tuple[str, str]], accepted: str
) -> DataFrame:
    """One row per probe of ``frame``: a JSON object of the step maxima (``maxima``: key and
    Spark SQL of each waterline column, as epoch ms or integers) and the accepted-row count."""
    fields = ", ".join([*(f"'{key}', {sql}" for key, sql in maxima), f"'_accepted', {accepted}"])
    return frame.select(
        F.lit("probe").alias("kind"),
        F.lit(table).alias("rel"),
        F.lit(None).cast("string").alias("topic"),
        F.lit(None).cast("binary").alias("key"),
        F.expr(f"cast(to_json(named_struct({fields})) as binary)").alias("value"),
        F.lit(None).cast(_HEADERS).alias("headers"),
        *[
            F.lit(None).cast(t).alias(n)
            for n, t in (
                ("reason", "string"),
                ("message", "string"),
                ("src_partition", "int"),
                ("src_offset", "bigint"),
                ("late_column", "string"),
                ("late_value", "bigint"),
                ("late_waterline", "bigint"),
            )
        ],
        F.col("_step").alias("step"),
    )
