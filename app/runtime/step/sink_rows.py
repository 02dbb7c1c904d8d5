"""Dead-letter and probe rows as sink records (app/connectors/sink/record.py), for every gate.

Both the table's LateGate (in the source) and a view's LATENESS gate
(app/runtime/operators/view_gate.py) route late rows to the table's dead-letter topic and report
their step maxima as probe rows; one place builds those rows so the two gates cannot drift apart.

Both kinds come out of **one** branch of the gate's rows (everything but the accepted ones):
Spark runs each branch of the plan's union as its own scan of the Python source, so a branch
for dead letters and another for probes read every slice twice.

A source task that writes its own slice's dead letters (ADR 0007) builds the same rows over
Arrow (:func:`arrow_dead_letters`, :func:`arrow_probes`), from the same column map
(:data:`TABLE_GATE`, the source's). Rows are built by column name, every column the kind does
not set NULL, in the sink record's order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from app.connectors.kafka_source import TABLE_GATE
from app.connectors.late_gate import ACCEPTED
from app.connectors.sink import probe_summary
from app.connectors.sink.record import (
    KIND,
    LATE_COLUMN,
    LATE_VALUE,
    LATE_WATERLINE,
    MESSAGE,
    REASON,
    REL,
    SINK_COLUMNS,
    SINK_STRUCT,
    STEP,
    TOPIC,
    VALUE,
    check_columns,
    sink_batch,
)
from app.runtime.step.encode import circuit_units

__all__ = ["TABLE_GATE", "arrow_dead_letters", "arrow_probes", "gate_rows"]


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
    """The rows of ``frame`` whose ``kind`` column is not accepted (``ok``, or a key's
    ``delete``) nor NULL, as sink rows:

    * ``probe`` rows: one row per probe, a JSON object of the step maxima (``maxima``: key
      and Spark SQL of each waterline column, as epoch ms or integers) and the accepted-row
      count (``accepted``);
    * every other kind: dead letters of ``table`` (SPEC S6), with the original key, value and
      headers, the source coordinates, the ``reason`` and ``message``, and the late-gate
      details from the ``late`` columns (column, value, waterline).

    With ``carry`` (the columns a per-step view reads, see app/runtime/step/step_views.py), the
    ``ok`` rows come along too, as kind ``row`` with every other sink column NULL and a last
    column ``row``: the struct of ``carry`` (NULL in the other rows)."""
    late_column, late_value, late_waterline = late
    fields = ", ".join([*(f"'{key}', {sql}" for key, sql in maxima), f"'_accepted', {accepted}"])
    dead_letter: dict[str, Column] = {
        KIND: F.lit("dead_letter"),
        REL: F.lit(table),
        TOPIC: F.lit(topic),
        **{name: F.col(source) for name, source in TABLE_GATE.items()},
        REASON: reason,
        MESSAGE: F.col(message),
        LATE_COLUMN: F.col(late_column),
        LATE_VALUE: F.col(late_value),
        LATE_WATERLINE: F.col(late_waterline),
    }
    probe: dict[str, Column] = {
        KIND: F.lit("probe"),
        REL: F.lit(table),
        VALUE: F.expr(f"cast(to_json(named_struct({fields})) as binary)"),
        STEP: F.col(TABLE_GATE[STEP]),
    }
    row: dict[str, Column] = {KIND: F.lit("row")}
    for given in (dead_letter, probe, row):
        check_columns(given)
    is_probe = F.col(kind) == "probe"
    is_ok = F.col(kind) == "ok"
    columns = []
    for name in SINK_COLUMNS:
        null = F.lit(None).cast(SINK_STRUCT[name].dataType)
        value = F.when(is_probe, probe.get(name, null)).otherwise(dead_letter.get(name, null))
        if carry:
            value = F.when(is_ok, row.get(name, null)).otherwise(value)
        columns.append(value.alias(name))
    not_accepted = ~F.col(kind).isin(*ACCEPTED)
    if not carry:
        return frame.filter(not_accepted).select(*columns)
    return frame.filter(is_ok | not_accepted).select(
        *columns, F.when(is_ok, F.struct(*carry)).alias("row")
    )


def arrow_dead_letters(batch: pa.RecordBatch, table: str, topic: str) -> pa.RecordBatch:
    """The dead letters :func:`gate_rows` gives for the table's gate over one source batch,
    in Python (a source task writing its own slice's, ADR 0007)."""
    kinds = batch.column(TABLE_GATE[REASON])
    dead = batch.filter(pc.invert(pc.is_in(kinds, pa.array([*ACCEPTED, "probe"]))))
    n = dead.num_rows
    columns = {
        KIND: ["dead_letter"] * n,
        REL: [table] * n,
        TOPIC: [topic] * n,
        **{name: dead.column(source) for name, source in TABLE_GATE.items()},
    }
    return sink_batch(n, columns)


def arrow_probes(batch: pa.RecordBatch, table: str, maxima: Sequence[str]) -> list[dict[str, Any]]:
    """The probe rows :func:`gate_rows` gives for the table's gate over one source batch, as
    the SUMMARY rows ``produce_partition`` makes of them; ``maxima``: the waterline columns,
    sent in the circuit's units (TIMESTAMP as epoch ms), as :func:`gate_rows`' SQL does."""
    probes = batch.filter(pc.equal(batch.column(TABLE_GATE[REASON]), "probe"))
    values = {c: circuit_units(probes.column(c)).to_pylist() for c in maxima}
    steps = probes.column(TABLE_GATE[STEP]).to_pylist()
    accepted = probes.column("_accepted").to_pylist()
    out = []
    for i, step in enumerate(steps):
        # to_json leaves out NULL fields
        detail = {c: values[c][i] for c in maxima if values[c][i] is not None}
        detail["_accepted"] = accepted[i]
        out.append(probe_summary(table, step, json.dumps(detail, separators=(",", ":"))))
    return out
