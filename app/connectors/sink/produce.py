"""A writing task's sink: :func:`produce_partition` writes one task's sink records to Kafka and
hands back summary rows.

It runs on the executors inside ``mapInArrow`` (and in the source and aggregate tasks that
write themselves). Every row it takes is a sink record (:mod:`app.connectors.sink.record`): a
``topic`` per row (so one task writes every output view and the dead-letter topic), the key
and value bytes, headers, and for dead letters the source coordinates and the late-gate
details from which the S6 headers are built (:mod:`app.connectors.sink.headers`). With a step
marker the records go in one transaction with it (exactly once,
:mod:`app.connectors.sink.transactions`); without one (a broker without transactions) the
producer is idempotent with ``acks=all`` and a replay is byte-identical, so consumers can
de-duplicate. It yields one summary row per (kind, relation, topic, reason)
(:mod:`app.connectors.sink.summary`), plus the first late rows' details for the S6 log.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.connectors.sink.headers import dead_letter_headers
from app.connectors.sink.oversize import fitted_dead_letter
from app.connectors.sink.producers import producer_pool
from app.connectors.sink.record import (
    HEADERS,
    KEY,
    KIND,
    LATE_COLUMN,
    LATE_VALUE,
    LATE_WATERLINE,
    REASON,
    REL,
    SRC_OFFSET,
    SRC_PARTITION,
    STEP,
    TIMESTAMP_MS,
    TOPIC,
    VALUE,
)
from app.connectors.sink.runs import Run, flush, output_runs, produce_record
from app.connectors.sink.summary import SUMMARY_ARROW, count_rows, probe_summary
from app.connectors.sink.transactions import StepMarker, task_partition, write_transaction
from app.errors import SinkError, kafka_reason

__all__ = ["LATE_DETAIL_CAP", "produce_partition"]

#: How many late rows per task carry their full details back to the driver (S6 log).
LATE_DETAIL_CAP = 1000


def produce_partition(
    batches: Iterator[pa.RecordBatch],
    conf: Mapping[str, str],
    tables: Mapping[str, Mapping[str, Any]],
    view_headers: Mapping[str, list[tuple[str, bytes]]],
    marker: StepMarker | None = None,
) -> Iterator[pa.RecordBatch]:
    """Write sink records (:data:`~app.connectors.sink.record.SINK_SCHEMA`) to Kafka; yield
    :data:`~app.connectors.sink.summary.SUMMARY_SCHEMA` rows.

    ``tables``: table -> {"topic": source topic, "units": {column: 'ms'|'integer'}}.
    ``view_headers``: view -> extra headers for its records (S14 ``tidemark.waterline``).
    ``marker``: write in one transaction with a step marker (exactly once, S15); None: an
    idempotent producer (at least once, byte-identical replays).
    Probe rows are not written: each comes back as a summary row of kind ``probe`` (``n``:
    the step, ``detail``: the maxima), so a task that writes a slice's dead letters brings its
    probe in the same pass, on a replay too.
    """
    try:
        yield from _produce_partition(batches, conf, tables, view_headers, marker)
    finally:
        if marker is not None:
            producer_pool().forget_opening(marker.transactional_id(task_partition()))


def _produce_partition(
    batches: Iterator[pa.RecordBatch],
    conf: Mapping[str, str],
    tables: Mapping[str, Mapping[str, Any]],
    view_headers: Mapping[str, list[tuple[str, bytes]]],
    marker: StepMarker | None,
) -> Iterator[pa.RecordBatch]:
    runs: list[Run] = []
    counts: Counter[tuple[str, str, str, str]] = Counter()
    late_details: list[dict[str, Any]] = []
    probes: list[dict[str, Any]] = []
    for batch in batches:
        kind_column = batch.column(KIND)
        if pc.any(pc.equal(kind_column, "probe")).as_py():
            kinds = kind_column.to_pylist()
            probes.extend(_probe_summaries(batch, kinds))
            batch = batch.filter(pc.not_equal(kind_column, "probe"))
            if not batch.num_rows:
                continue
        count_rows(counts, batch)
        keys = batch.column(KEY).to_pylist()
        values = batch.column(VALUE).to_pylist()
        dead_letters = pc.any(pc.equal(batch.column(KIND), "dead_letter")).as_py()
        headers_column = batch.column(HEADERS)
        if not dead_letters and headers_column.null_count == len(batch):
            # Output records only (a view's batch): one run per view and topic, sharing the
            # view's S14 headers, and no Python object per row but its key and value (the
            # per-row lists, tuples and counting were ~0.5-1 us a record).
            runs.extend(output_runs(batch, keys, values, view_headers))
            continue
        rels = batch.column(REL).to_pylist()
        topics = batch.column(TOPIC).to_pylist()
        kinds = batch.column(KIND).to_pylist()
        own = headers_column.to_pylist() if headers_column.null_count < len(batch) else None
        dead = [i for i, kind in enumerate(kinds) if kind == "dead_letter"]
        dead_rows = dict(zip(dead, batch.take(dead).to_pylist(), strict=True)) if dead else {}
        for i, rel in enumerate(rels):
            found = own[i] if own is not None else None
            headers = [(h["key"], h["value"]) for h in found] if found else []
            row = dead_rows.get(i)
            key, value = keys[i], values[i]
            stamp: int | None = None
            if row is not None:
                stamp = row[TIMESTAMP_MS]  # the source record's, kept (SPEC S6)
                own_headers = len(headers)
                headers.extend(dead_letter_headers(row, tables[rel]))
                # The dead-letter topic may take less than the input topic did (oversize.py).
                source = {"table": rel, "partition": row[SRC_PARTITION], "offset": row[SRC_OFFSET]}
                key, value, headers = fitted_dead_letter(
                    conf, topics[i], key, value, headers, own_headers, source
                )
                if row[REASON] == "late" and len(late_details) < LATE_DETAIL_CAP:
                    late_details.append(
                        {
                            "table": rel,
                            "partition": row[SRC_PARTITION],
                            "offset": row[SRC_OFFSET],
                            "column": row[LATE_COLUMN],
                            "value": row[LATE_VALUE],
                            "waterline": row[LATE_WATERLINE],
                        }
                    )
            else:
                headers.extend(view_headers.get(rel, ()))
            runs.append((topics[i], headers, [key], [value], stamp))
    summary = [
        {"kind": k, "rel": r, "topic": t, "reason": reason, "n": n, "detail": None}
        for (k, r, t, reason), n in counts.items()
    ]
    if runs:
        if marker is None:
            write_idempotent(conf, runs)
        else:
            stored = write_transaction(conf, runs, marker, task_partition(), summary)
            if stored is not None:
                # A replayed step: its records are already committed; report what was written.
                replayed = {"kind": "replayed", "rel": None, "topic": None, "reason": None}
                stored.append({**replayed, "n": 1, "detail": None})
                yield pa.RecordBatch.from_pylist([*stored, *probes], schema=SUMMARY_ARROW)
                return
    if late_details:
        summary.append(
            {
                "kind": "late_detail",
                "rel": None,
                "topic": None,
                "reason": None,
                "n": len(late_details),
                "detail": json.dumps(late_details),
            }
        )
    yield pa.RecordBatch.from_pylist([*summary, *probes], schema=SUMMARY_ARROW)


def _probe_summaries(batch: pa.RecordBatch, kinds: list[str]) -> list[dict[str, Any]]:
    at = [i for i, kind in enumerate(kinds) if kind == "probe"]
    rows = batch.take(at).select([REL, VALUE, STEP]).to_pylist()
    return [probe_summary(row[REL], row[STEP], bytes(row[VALUE]).decode()) for row in rows]


def write_idempotent(conf: Mapping[str, str], runs: list[Run]) -> None:
    """The runs' records through the process's idempotent producer, all acknowledged, else a
    :class:`~app.errors.SinkError` naming the topic and what to check."""
    from confluent_kafka import KafkaException

    producer = producer_pool().idempotent(conf)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    try:
        for topic, headers, keys, values, stamp in runs:
            for key, value in zip(keys, values, strict=True):
                produce_record(producer, topic, key, value, headers, on_delivery, stamp)
        remaining = flush(producer)
    except KafkaException as exc:
        raise SinkError(
            f"writing to {_topics(runs)} failed: {kafka_reason(exc)}: check that the brokers at"
            f" {conf.get('bootstrap.servers')} run and accept the records (the topics exist,"
            " message.max.bytes, Tidemark's user may write to them)"
        ) from exc
    if remaining or errors:
        raise SinkError(
            f"Kafka did not acknowledge {remaining} records; errors: {errors[:5]}: check that"
            f" the brokers at {conf.get('bootstrap.servers')} run and that {_topics(runs)} exist"
        )


def _topics(runs: list[Run]) -> str:
    return "topic(s) " + ", ".join(sorted({run[0] for run in runs}))
