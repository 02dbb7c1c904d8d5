"""Dead-letter and probe rows in the sink's shape (SINK_SCHEMA), for every gate.

Both the table's LateGate (in the source) and a view's LATENESS gate (app/runtime/view_gate.py)
route late rows to the table's dead-letter topic and report their step maxima as probe rows;
one place builds those rows so the two gates cannot drift apart.

Both kinds come out of **one** branch of the gate's rows (everything but the accepted ones):
Spark runs each branch of the plan's union as its own scan of the Python source, so a branch
for dead letters and another for probes read every slice twice (issue 7).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from app.connectors.kafka_sink import SINK_COLUMNS, SINK_TYPES

__all__ = ["gate_rows"]

_HEADERS = "array<struct<key:string,value:binary>>"


def gate_rows(
    frame: DataFrame,
    kind: str,
    table: str,
    topic: str,
    *,
    reason: Column,
    message: str,
    late: tuple[str, str, str],
    maxima: Sequence[tuple[str, str]],
    accepted: str,
    carry: Sequence[Column] = (),
) -> DataFrame:
    """The rows of ``frame`` whose ``kind`` column is neither ``ok`` nor NULL, as sink rows:

    * ``probe`` rows: one row per probe, a JSON object of the step maxima (``maxima``: key
      and Spark SQL of each waterline column, as epoch ms or integers) and the accepted-row
      count (``accepted``);
    * every other kind: dead letters of ``table`` (SPEC S6), with the original key, value and
      headers, the source coordinates, the ``reason`` and ``message``, and the late-gate
      details from the ``late`` columns (column, value, waterline).

    With ``carry`` (the columns a per-step view reads, see app/runtime/step_views.py), the
    ``ok`` rows come along too, as kind ``row`` with every other sink column NULL and a last
    column ``row``: the struct of ``carry`` (NULL in the other rows)."""
    late_column, late_value, late_waterline = late
    fields = ", ".join([*(f"'{key}', {sql}" for key, sql in maxima), f"'_accepted', {accepted}"])

    def null(t: str) -> Column:
        return F.lit(None).cast(t)

    dead_letter = (
        F.lit("dead_letter"),
        F.lit(table),
        F.lit(topic),
        F.col("_key"),
        F.col("_value"),
        F.col("_headers"),
        reason,
        F.col(message),
        F.col("_partition"),
        F.col("_offset"),
        F.col(late_column),
        F.col(late_value),
        F.col(late_waterline),
        F.col("_step"),
    )
    probe = (
        F.lit("probe"),
        F.lit(table),
        null("string"),
        null("binary"),
        F.expr(f"cast(to_json(named_struct({fields})) as binary)"),
        null(_HEADERS),
        null("string"),
        null("string"),
        null("int"),
        null("bigint"),
        null("string"),
        null("bigint"),
        null("bigint"),
        F.col("_step"),
    )
    is_probe = F.col(kind) == "probe"
    is_ok = F.col(kind) == "ok"
    row = (F.lit("row"), *(null(t) for t in SINK_TYPES[1:]))
    columns = []
    for name, d, p, r in zip(SINK_COLUMNS, dead_letter, probe, row, strict=True):
        value = F.when(is_probe, p).otherwise(d)
        columns.append((F.when(is_ok, r).otherwise(value) if carry else value).alias(name))
    if not carry:
        return frame.filter(F.col(kind) != "ok").select(*columns)
    return frame.filter(F.col(kind).isNotNull()).select(
        *columns, F.when(is_ok, F.struct(*carry)).alias("row")
    )
