"""Every Prometheus metric of Tidemark (SPEC part M), defined here and only here.

The Spark runtime computes waterlines and counts in the *driver* process after each step (the
``foreachBatch`` function and the :class:`~app.observability.listener.TidemarkQueryListener`
both run there), so one :class:`TidemarkMetrics` object owned by the driver is the single place
every number goes through. Names follow STYLE habit 6: ``tidemark_<thing>_<unit>``, base units
(seconds, bytes), ``_total`` on counters, labels of low cardinality only (table, column, view,
topic, partition, reason; never a key or an offset).

Renaming a metric means updating the shipped Grafana dashboard
(``helm/tidemark/files/grafana/``) and alert rules (``helm/tidemark/files/prometheus/``) in
the same change; ``tests/unit/observability/test_metric_names.py`` fails otherwise.
"""

from __future__ import annotations

from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = [
    "DEAD_LETTER_REASONS",
    "METRIC_NAMES",
    "STEP_DURATION_BUCKETS_SECONDS",
    "TidemarkMetrics",
    "WaterlineUnit",
]

WaterlineUnit = Literal["ms", "integer"]
"""The unit of a LATENESS column's values: epoch milliseconds (TIMESTAMP) or plain integers."""

DEAD_LETTER_REASONS: tuple[str, ...] = ("late", "malformed", "invalid", "future")
"""The values of the ``tidemark.error.reason`` header (SPEC S6, S7), pre-created per table."""

STEP_DURATION_BUCKETS_SECONDS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)
"""Step (micro-batch) durations: ~85 ms is the fixed cost measured per step (ARCHITECTURE),
the first step takes several seconds (Python workers starting), a stuck one minutes."""

METRIC_NAMES: frozenset[str] = frozenset({
    "tidemark_build_info",
    "tidemark_waterline_seconds",
    "tidemark_waterline_lag_seconds",
    "tidemark_input_records_total",
    "tidemark_dead_letter_records_total",
    "tidemark_output_records_total",
    "tidemark_output_waterline_seconds",
    "tidemark_state_rows",
    "tidemark_state_bytes",
    "tidemark_step_duration_seconds",
    "tidemark_input_lag_records",
    "tidemark_input_skipped_offsets_total",
    "tidemark_query_up",
})
"""The exported family names; dashboards and alert rules may use only these (and the
``_bucket``/``_sum``/``_count`` series of the histogram)."""


class TidemarkMetrics:
    """The metrics of one Tidemark process, registered in one :class:`CollectorRegistry`.

    A fresh registry per object (the default) keeps tests independent and lets one process
    serve exactly its own metrics; pass ``prometheus_client.REGISTRY`` to add the process and
    platform collectors' series as well.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._build_info = Gauge(
            "tidemark_build_info",
            "Always 1; the labels name the running version and program file.",
            ["version", "program"], registry=r,
        )
        self._waterline = Gauge(
            "tidemark_waterline_seconds",
            "Waterline of a LATENESS column (SPEC S3): epoch seconds for TIMESTAMP columns, "
            "the column's own value for integer columns. Absent until the first row or bound.",
            ["table", "column"], registry=r,
        )
        self._waterline_lag = Gauge(
            "tidemark_waterline_lag_seconds",
            "Wall clock minus waterline at the end of the last step, TIMESTAMP columns only.",
            ["table", "column"], registry=r,
        )
        self._input = Counter(
            "tidemark_input_records_total",
            "Records read from a table's topic, well-formed or not (SPEC S1, S2).",
            ["table", "topic"], registry=r,
        )
        self._dead_letters = Counter(
            "tidemark_dead_letter_records_total",
            "Records written to a table's dead-letter topic, by reason (SPEC S6, S7).",
            ["table", "reason"], registry=r,
        )
        self._output = Counter(
            "tidemark_output_records_total",
            "Records written to an output view's topic, tombstones and retractions included.",
            ["view", "topic"], registry=r,
        )
        self._output_waterline = Gauge(
            "tidemark_output_waterline_seconds",
            "Output waterline of a view in epoch seconds (SPEC S14): its output is final "
            "below this time.",
            ["view"], registry=r,
        )
        self._state_rows = Gauge(
            "tidemark_state_rows",
            "Rows in the state store of a view's stateful operators (SPEC S11).",
            ["view"], registry=r,
        )
        self._state_bytes = Gauge(
            "tidemark_state_bytes",
            "Memory used by the state store of a view's stateful operators.",
            ["view"], registry=r,
        )
        self._step_duration = Histogram(
            "tidemark_step_duration_seconds",
            "Wall time of one step (Spark micro-batch trigger execution, SPEC S1).",
            buckets=STEP_DURATION_BUCKETS_SECONDS, registry=r,
        )
        self._input_lag = Gauge(
            "tidemark_input_lag_records",
            "Records in a topic partition not yet processed: end offset minus processed offset.",
            ["topic", "partition"], registry=r,
        )
        self._skipped = Counter(
            "tidemark_input_skipped_offsets_total",
            "Input offsets deleted (retention) before a step read them and skipped, with "
            "TIDEMARK_FAIL_ON_DATA_LOSS=false (records lost to the program).",
            ["topic"], registry=r,
        )
        self._query_up = Gauge(
            "tidemark_query_up",
            "1 while the streaming query of a program part runs, 0 once it terminated.",
            ["query"], registry=r,
        )

    def set_build_info(self, version: str, program: str) -> None:
        """Publish the running version and program (the gauge is 1; the labels carry data)."""
        self._build_info.labels(version=version, program=program).set(1)

    def set_waterline(
        self, table: str, column: str, value: int | None, unit: WaterlineUnit, now_ms: int,
    ) -> None:
        """Publish the waterline ``w_c(t)`` of a LATENESS column after a step (SPEC S3).

        ``value`` is in the column's unit; ``None`` is the initial ``-infinity`` and leaves the
        series absent rather than exporting an infinity no panel can draw. For TIMESTAMP
        columns (``unit='ms'``) the lag is the wall clock ``now_ms`` minus the waterline, which
        is what an operator watches: a lag that grows while input flows means the producers'
        event times stopped moving or the service fell behind.
        """
        if value is None:
            return
        if unit == "ms":
            self._waterline.labels(table=table, column=column).set(value / 1000.0)
            self._waterline_lag.labels(table=table, column=column).set((now_ms - value) / 1000.0)
        else:
            self._waterline.labels(table=table, column=column).set(value)

    def add_input(self, table: str, topic: str, n: int) -> None:
        """Count the records a step read from a table's topic (SPEC S1)."""
        self._input.labels(table=table, topic=topic).inc(n)

    def add_dead_letters(self, table: str, reason: str, n: int) -> None:
        """Count the records a step sent to the dead-letter topic with ``reason`` (SPEC S6/S7).

        The late counter of the issue is the ``reason="late"`` series.
        """
        self._dead_letters.labels(table=table, reason=reason).inc(n)

    def declare_table(self, table: str, topic: str) -> None:
        """Create a table's counters at zero, so ``rate()`` sees the first increase.

        Prometheus cannot compute a rate across a series' first appearance: without this the
        first late row of a run would not show in a dead-letter rate panel or alert.
        """
        self._input.labels(table=table, topic=topic)
        self._skipped.labels(topic=topic)
        for reason in DEAD_LETTER_REASONS:
            self._dead_letters.labels(table=table, reason=reason)

    def declare_output(self, view: str, topic: str) -> None:
        """Create an output view's counter at zero (see :meth:`declare_table`)."""
        self._output.labels(view=view, topic=topic)

    def add_output(self, view: str, topic: str, n: int) -> None:
        """Count the records a step wrote to an output view's topic."""
        self._output.labels(view=view, topic=topic).inc(n)

    def set_output_waterline(self, view: str, value_ms: int | None) -> None:
        """Publish the output waterline of a view (SPEC S14); ``None`` leaves it absent."""
        if value_ms is None:
            return
        self._output_waterline.labels(view=view).set(value_ms / 1000.0)

    def set_state(self, view: str, rows: int, bytes_: int) -> None:
        """Publish the state size of a view's stateful operators (SPEC S11: bounded state)."""
        self._state_rows.labels(view=view).set(rows)
        self._state_bytes.labels(view=view).set(bytes_)

    def observe_step(self, seconds: float) -> None:
        """Record the duration of one step (SPEC S1)."""
        self._step_duration.observe(seconds)

    def set_input_lag(self, topic: str, partition: int, records: int) -> None:
        """Publish how many records of a partition wait: end offset minus processed offset."""
        self._input_lag.labels(topic=topic, partition=str(partition)).set(records)

    def add_skipped_offsets(self, topic: str, n: int) -> None:
        """Count input offsets a step skipped because the topic no longer held them (the log
        names the partitions and offsets)."""
        self._skipped.labels(topic=topic).inc(n)

    def set_query_up(self, query: str, up: bool) -> None:
        """Mark a streaming query running (1) or terminated (0); readiness and alerts use it."""
        self._query_up.labels(query=query).set(1 if up else 0)
