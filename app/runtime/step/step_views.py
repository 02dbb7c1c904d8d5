"""Stateless output views computed at the end of each step, over the step's accepted rows.

Why: inside the streaming query a stateless view's rows crossed between the JVM and
Python four times per step: out of the source, into and out of the encoder, and into the
producer after the step's waterline was known (the S14 header needs it, so nothing can be
written before every slice's probe is in). A view that keeps no state and has no LATENESS of
its own anywhere on its way from the table (no gate of its own, no probe) gives the same rows
whether Spark computes it in the streaming query or over the step's accepted rows in
``foreachBatch``. Computed there, after the probes, its rows are encoded and produced in one
Python pass: out of the source and into the producer, twice in all.

The accepted rows reach the step sink as the ``row`` struct of the table's gate branch
(:func:`app.runtime.step.sink_rows.gate_rows` with ``carry``), with the step's batch time
``_ptime`` taken inside the streaming query, so a replayed step encodes the same bytes (S15).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from app.circuit.ir import Table, View
from app.circuit.processing_time import view_reads_now
from app.connectors.sink import SUMMARY_SCHEMA
from app.runtime.operators.view_frame import batch_time, table_columns, view_frame
from app.runtime.step.encode import ViewEncoding, encode_view_rows

__all__ = ["carried_columns", "produce_step_views"]

Produce = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def carried_columns(table: Table, views: Sequence[View]) -> list[Column]:
    """What an accepted row carries to the step sink for ``views``: the table's columns
    (``AS PROCTIME()`` ones taken in the query) and the step's batch time where a changelog
    writes it or a view reads it (NOW()): Spark fixes it per micro-batch in its offset log,
    and a job of the step sink, outside the query, has only the wall clock."""
    formats = [v.output.format for v in views if v.output is not None]
    reads = any(view_reads_now(v) for v in views)
    return [*table_columns(table), batch_time(formats, processing_time=reads)]


def produce_step_views(
    batch: DataFrame, table: Table, views: Sequence[View], produce: Produce
) -> list[DataFrame]:
    """The summary rows (SUMMARY_SCHEMA) of encoding and producing every output view of
    ``views`` over the step's accepted rows in ``batch`` (kind ``row``)."""
    if not views:
        return []
    frames = {table.name: batch.filter(F.col("kind") == "row").select("row.*")}
    out = []
    for view in views:
        frames[view.name] = view_frame(view, frames)
        if view.output is not None:
            write = partial(_encode_and_produce, enc=ViewEncoding.for_view(view), produce=produce)
            out.append(frames[view.name].mapInArrow(write, SUMMARY_SCHEMA))
    return out


def _encode_and_produce(
    batches: Iterator[pa.RecordBatch], enc: ViewEncoding, produce: Produce
) -> Iterator[pa.RecordBatch]:
    return produce(encode_view_rows(batches, enc))
