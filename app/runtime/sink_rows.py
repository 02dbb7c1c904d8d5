"""Dead-letter and probe rows in the sink's shape (SINK_SCHEMA), for every gate.

Both the table's LateGate (in the source) and a view's LATENESS gate (app/runtime/view_gate.py)
route late rows to the table's dead-letter topic and report their step maxima as probe rows;
one place builds those rows so the two gates cannot drift apart.

Both kinds come out of **one** branch of the gate's rows (everything but the accepted ones):
Spark runs each branch of the plan's union as its own scan of the Python source, so a branch
for dead letters and another for probes read every slice twice.

A source task that writes its own slice's dead letters (ADR 0007) builds the same rows over
Arrow (:func:`arrow_dead_letters`, :func:`arrow_probes`), from the same column map
(:data:`TABLE_GATE`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from app.connectors.kafka_sink import SINK_COLUMNS, SINK_TYPES, probe_summary
from app.runtime.encode import circuit_units

__all__ = ["TABLE_GATE", "arrow_dead_letters", "arrow_probes", "gate_rows"]

#: The table gate's (the source's) column of each dead-letter sink column; the view gate
#: takes ``reason``, ``message`` and the late columns from its own (app/runtime/view_gate.py).
TABLE_GATE: Mapping[str, str] = {
    "key": "_key",
    "value": "_value",
    "headers": "_headers",
    "reason": "_kind",
    "message": "_message",
    "src_partition": "_partition",
    "src_offset": "_offset",
    "late_column": "_late_column",
    "late_value": "_late_value",
    "late_waterline": "_late_waterline",
    "step": "_step",
}

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
        F.col(TABLE_GATE["key"]),
        F.col(TABLE_GATE["value"]),
        F.col(TABLE_GATE["headers"]),
        reason,
        F.col(message),
        F.col(TABLE_GATE["src_partition"]),
        F.col(TABLE_GATE["src_offset"]),
        F.col(late_column),
        F.col(late_value),
        F.col(late_waterline),
        F.col(TABLE_GATE["step"]),
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


def arrow_dead_letters(batch: pa.RecordBatch, table: str, topic: str) -> pa.RecordBatch:
    """The dead letters :func:`gate_rows` gives for the table's gate over one source batch,
    in Python (a source task writing its own slice's, ADR 0007)."""
    kinds = batch.column(TABLE_GATE["reason"])
    dead = batch.filter(pc.invert(pc.is_in(kinds, pa.array(["ok", "probe"]))))
    n = dead.num_rows
    columns = {
        "kind": pa.array(["dead_letter"] * n, pa.string()),
        "rel": pa.array([table] * n, pa.string()),
        "topic": pa.array([topic] * n, pa.string()),
        **{name: dead.column(source) for name, source in TABLE_GATE.items()},
    }
    return pa.RecordBatch.from_arrays([columns[c] for c in SINK_COLUMNS], SINK_COLUMNS)


def arrow_probes(batch: pa.RecordBatch, table: str, maxima: Sequence[str]) -> list[dict[str, Any]]:
    """The probe rows :func:`gate_rows` gives for the table's gate over one source batch, as
    the SUMMARY rows ``produce_partition`` makes of them; ``maxima``: the waterline columns,
    sent in the circuit's units (TIMESTAMP as epoch ms), as :func:`gate_rows`' SQL does."""
    probes = batch.filter(pc.equal(batch.column(TABLE_GATE["reason"]), "probe"))
    values = {c: circuit_units(probes.column(c)).to_pylist() for c in maxima}
    steps = probes.column(TABLE_GATE["step"]).to_pylist()
    accepted = probes.column("_accepted").to_pylist()
    out = []
    for i, step in enumerate(steps):
        # to_json leaves out NULL fields
        detail = {c: values[c][i] for c in maxima if values[c][i] is not None}
        detail["_accepted"] = accepted[i]
        out.append(probe_summary(table, step, json.dumps(detail, separators=(",", ":"))))
    return out
