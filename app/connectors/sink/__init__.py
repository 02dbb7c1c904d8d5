"""The Kafka sink: writes one step's output changes and dead letters, exactly once (SPEC S15).

Its modules, each for one thing:

* :mod:`~app.connectors.sink.record`: the sink record, the shape of every row a writer hands
  the sink (an Arrow schema; Spark's schema derived from it);
* :mod:`~app.connectors.sink.produce`: :func:`produce_partition`, one writing task's sink;
* :mod:`~app.connectors.sink.runs`: records handed to a producer in row order;
* :mod:`~app.connectors.sink.headers`: the S6 dead-letter and S14 waterline headers;
* :mod:`~app.connectors.sink.summary`: the summary rows a task hands back, and their encoding
  as step-marker metadata;
* :mod:`~app.connectors.sink.fingerprint`: the step fingerprint a marker carries (what the
  step read, the plan it ran), and the error of a replay it refuses;
* :mod:`~app.connectors.sink.transactions`: a task's records and step marker in one Kafka
  transaction (S15), retried while the broker may recover;
* :mod:`~app.connectors.sink.producers`: the process's Kafka clients and their lifecycle
  (:class:`ProducerPool`).

What escapes the sink is a :class:`~app.errors.SinkError`, never the Kafka client's own
exception.
"""

from __future__ import annotations

from app.connectors.sink.headers import format_time_value, view_headers
from app.connectors.sink.produce import LATE_DETAIL_CAP, produce_partition
from app.connectors.sink.producers import ProducerPool, producer_pool
from app.connectors.sink.summary import SUMMARY_SCHEMA, probe_summary
from app.connectors.sink.transactions import StepMarker, open_early, task_partition

__all__ = [
    "LATE_DETAIL_CAP",
    "SUMMARY_SCHEMA",
    "ProducerPool",
    "StepMarker",
    "format_time_value",
    "open_early",
    "probe_summary",
    "produce_partition",
    "producer_pool",
    "task_partition",
    "view_headers",
]
