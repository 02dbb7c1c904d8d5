"""A dead letter larger than its topic takes is cut to fit, never a step that fails forever.

A record is bad input whatever its size (S7), but the dead-letter topic may take less than
the input topic (its ``max.message.bytes``; 1 MiB by the broker's default). The broker refuses
a record batch above that, the step's transaction cannot commit, and every retry and restart
of the step would fail the same way. So before a dead letter is produced its size is compared
with its topic's limit (read once per process and topic with DescribeConfigs), and a record
that does not fit keeps its S6 headers and as much of its value as fits, with headers that say
so: ``tidemark.error.truncated`` (what was cut: ``value``, then ``headers`` and ``key`` when
cutting the value is not enough), ``tidemark.error.original.size`` (the original value's size
in bytes) and ``tidemark.error.original.sha256`` (its SHA-256, hex), so the original can be
found and told apart in the input topic (``tidemark.source.*``) while retention keeps it.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from typing import Any

import structlog

__all__ = [
    "BROKER_DEFAULT_MAX_MESSAGE_BYTES",
    "CHECKED_FROM_BYTES",
    "TRUNCATED_HEADER",
    "fit_dead_letter",
    "fitted_dead_letter",
    "record_size",
    "topic_max_message_bytes",
]

log = structlog.get_logger("tidemark.sink")

#: The broker's default ``message.max.bytes``, the limit of a topic that does not set its own.
BROKER_DEFAULT_MAX_MESSAGE_BYTES = 1048588

TRUNCATED_HEADER = "tidemark.error.truncated"
ORIGINAL_SIZE_HEADER = "tidemark.error.original.size"
ORIGINAL_SHA256_HEADER = "tidemark.error.original.sha256"

#: A record batch's header (v2) plus the most a record's own fields (length, attributes,
#: timestamp and offset deltas, the key's, value's and header count's varints) take.
_BATCH_OVERHEAD = 61 + 5 + 1 + 10 + 5 + 5 + 5 + 5
#: Kept free below the limit: a batch's compression or framing may differ from the estimate.
_MARGIN = 512
#: Dead letters smaller than this are written without looking their topic's limit up (a
#: topic limit below it is not guarded): most are, and the lookup costs a round trip per
#: worker process.
CHECKED_FROM_BYTES = 64 * 1024

Headers = list[tuple[str, bytes]]

_limits: dict[tuple[str, str], int] = {}
_limits_lock = threading.Lock()


def record_size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """An upper bound of the bytes one record takes as a record batch of its own."""
    fields = sum(len(k.encode()) + len(v or b"") + 10 for k, v in headers)
    return _BATCH_OVERHEAD + len(key or b"") + len(value or b"") + fields


def topic_max_message_bytes(conf: Mapping[str, str], topic: str, timeout: float = 10) -> int:
    """The topic's ``max.message.bytes``, read once per process (the broker's default when
    it cannot be read: no DescribeConfigs right, say)."""
    cache_key = (str(conf.get("bootstrap.servers")), topic)
    with _limits_lock:
        found = _limits.get(cache_key)
    if found is not None:
        return found
    from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

    limit = BROKER_DEFAULT_MAX_MESSAGE_BYTES
    try:
        admin = AdminClient({**conf, "log_level": 3})
        described = admin.describe_configs(
            [ConfigResource("topic", topic)], request_timeout=timeout
        )
        entry = next(iter(described.values())).result(timeout).get("max.message.bytes")
        if entry is not None and entry.value is not None:
            limit = int(entry.value)
    except Exception as exc:  # noqa: BLE001 - no right to describe is no reason to stop
        log.info("topic.limit_unknown", topic=topic, assumed=limit, reason=str(exc)[:200])
    with _limits_lock:
        _limits[cache_key] = limit
    return limit


def fit_dead_letter(
    key: bytes | None, value: bytes | None, headers: Headers, original: int, limit: int
) -> tuple[bytes | None, bytes | None, Headers]:
    """The dead letter as written: unchanged when it fits ``limit`` (bytes of a record batch),
    else cut to fit as the module says. ``headers`` are the record's own headers followed by
    the S6 headers, of which the last ``len(headers) - original`` are S6's."""
    budget = limit - _MARGIN
    if record_size(key, value, headers) <= budget:
        return key, value, headers
    data = value or b""
    cut: list[str] = ["value"]
    marks = [
        (ORIGINAL_SIZE_HEADER, str(len(data)).encode()),
        (ORIGINAL_SHA256_HEADER, hashlib.sha256(data).hexdigest().encode()),
    ]

    def marked(kept: Headers) -> Headers:
        return [*kept, (TRUNCATED_HEADER, ",".join(cut).encode()), *marks]

    room = budget - record_size(key, b"", marked(headers))
    if room < 0 and original > 0:
        cut.append("headers")  # the record's own headers go; S6's stay
        headers = headers[original:]
        room = budget - record_size(key, b"", marked(headers))
    if room < 0 and key:
        cut.append("key")
        key = key[: max(0, len(key) + room)]
        room = budget - record_size(key, b"", marked(headers))
    kept_value = data[: max(0, room)]
    return key, kept_value, marked(headers)


def fitted_dead_letter(
    conf: Mapping[str, str],
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: Headers,
    original: int,
    source: Mapping[str, Any],
) -> tuple[bytes | None, bytes | None, Headers]:
    """The dead letter to write to ``topic``: :func:`fit_dead_letter` with the topic's limit,
    logged (one line per cut dead letter: they are rare, and each one matters)."""
    size = record_size(key, value, headers)
    if size <= CHECKED_FROM_BYTES:
        return key, value, headers
    limit = topic_max_message_bytes(conf, topic)
    fitted = fit_dead_letter(key, value, headers, original, limit)
    if fitted[1] is not value or fitted[0] is not key:
        log.warning(
            "dead_letter.truncated",
            topic=topic,
            limit_bytes=limit,
            original_bytes=size,
            written_bytes=record_size(*fitted),
            **source,
        )
    return fitted
