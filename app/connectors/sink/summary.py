"""What a writing task hands back instead of its records: one summary row per (kind, relation,
topic, reason) with its count, so the driver counts without touching the records again.

The same counts are the step marker's metadata (:func:`encode_marker`), after the step's
fingerprint (:mod:`app.connectors.sink.fingerprint`): a replayed step finds them with its
marker and reports what was written before (SPEC S15). Probes come back as summary rows too
(:func:`probe_summary`), and the first late rows' details for the S6 log.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections import Counter
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema

from app.connectors.sink.record import KIND, REASON, REL, TOPIC, spark_ddl

__all__ = [
    "SUMMARY_ARROW",
    "SUMMARY_SCHEMA",
    "count_rows",
    "decode_marker",
    "decode_summary",
    "encode_marker",
    "encode_summary",
    "probe_summary",
]

#: The one definition of a summary row; ``n`` is a count (a probe's: its step).
SUMMARY_ARROW = pa.schema(
    [
        ("kind", pa.string()),
        ("rel", pa.string()),
        ("topic", pa.string()),
        ("reason", pa.string()),
        ("n", pa.int64()),
        ("detail", pa.string()),
    ]
)
#: :data:`SUMMARY_ARROW` as the DDL string the writers' Spark operators declare.
SUMMARY_SCHEMA: str = spark_ddl(from_arrow_schema(SUMMARY_ARROW))

#: Brokers cap offset-commit metadata at 4096 bytes by default (offset.metadata.max.bytes).
METADATA_LIMIT = 4000

#: How a marker's metadata starts when it carries the step's fingerprint: ``f1:<hex>:``
#: then the counts. A marker written before fingerprints starts with ``[`` or ``z:``.
_FINGERPRINTED = "f1:"

_COUNTED = [KIND, REL, TOPIC, REASON]


def probe_summary(rel: str, step: int, detail: str) -> dict[str, Any]:
    """A probe as the SUMMARY row the step sink reads: ``n`` the step, ``detail`` the JSON of
    the step maxima and the accepted-row count."""
    return {"kind": "probe", "rel": rel, "topic": None, "reason": None, "n": step, "detail": detail}


def count_rows(counts: Counter[tuple[str, str, str, str]], batch: pa.RecordBatch) -> None:
    """Add the batch's rows to ``counts`` by (kind, rel, topic, reason), grouped by Arrow
    rather than a tuple per row; a missing reason counts as ``""``."""
    table = pa.Table.from_batches([batch.select(_COUNTED)])
    grouped = table.group_by(_COUNTED, use_threads=False).aggregate([([], "count_all")])
    columns = [grouped.column(name).to_pylist() for name in (*_COUNTED, "count_all")]
    for kind, rel, topic, reason, n in zip(*columns, strict=True):
        counts[(kind, rel, topic, reason or "")] += n


def encode_marker(summary: list[dict[str, Any]], fingerprint: str | None) -> str:
    """A step marker's metadata: the step's ``fingerprint`` (fixed-size hex), when there is
    one, then the task's counts (:func:`encode_summary`), within the broker's limit."""
    if fingerprint is None:
        return encode_summary(summary)
    if not fingerprint or fingerprint.strip("0123456789abcdef"):
        raise ValueError(f"a step fingerprint is lower-case hex, not {fingerprint!r}")
    head = f"{_FINGERPRINTED}{fingerprint}:"
    return head + encode_summary(summary, METADATA_LIMIT - len(head))


def decode_marker(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """The fingerprint (None in a marker written before fingerprints) and the counts that
    :func:`encode_marker` stored."""
    if text.startswith(_FINGERPRINTED):
        fingerprint, _, counts = text[len(_FINGERPRINTED) :].partition(":")
        return fingerprint, decode_summary(counts)
    return None, decode_summary(text)


def encode_summary(summary: list[dict[str, Any]], limit: int = METADATA_LIMIT) -> str:
    """The task's counts as step-marker metadata, at most ``limit`` characters.

    Rows become ``[kind, rel, topic, reason, n]`` lists, zlib-compressed when long (topic names
    repeat), so a task writing to a hundred topics still fits. Past the limit only the counts
    per kind are kept: a replay then reports coarser counts, never different records."""
    rows = [[r["kind"], r["rel"], r["topic"], r["reason"], r["n"]] for r in summary]
    text = json.dumps(rows, separators=(",", ":"))
    if len(text) > 1000:
        text = "z:" + base64.b64encode(zlib.compress(text.encode(), 9)).decode()
    if len(text) <= limit:
        return text
    totals: dict[str, int] = {}
    for row in summary:
        totals[row["kind"]] = totals.get(row["kind"], 0) + int(row["n"])
    return json.dumps([[kind, None, None, None, n] for kind, n in totals.items()])


def decode_summary(text: str) -> list[dict[str, Any]]:
    """The summary rows :func:`encode_summary` stored."""
    if text.startswith("z:"):
        text = zlib.decompress(base64.b64decode(text[2:])).decode()
    rows = json.loads(text or "[]")
    return [
        {"kind": k, "rel": r, "topic": t, "reason": reason, "n": n, "detail": None}
        for k, r, t, reason, n in rows
    ]
