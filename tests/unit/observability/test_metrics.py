"""TidemarkMetrics: every metric of SPEC part M, read back through its registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from app.observability.metrics import METRIC_NAMES, TidemarkMetrics


def sample(m: TidemarkMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_s3_timestamp_waterline_is_exported_in_seconds_with_wall_clock_lag() -> None:
    m = TidemarkMetrics()
    m.set_waterline("purchase", "date_time", 1_700_000_000_500, "ms", now_ms=1_700_000_060_000)
    labels = {"table": "purchase", "column": "date_time"}
    assert sample(m, "tidemark_waterline_seconds", **labels) == pytest.approx(1_700_000_000.5)
    assert sample(m, "tidemark_waterline_lag_seconds", **labels) == pytest.approx(59.5)


def test_s3_integer_waterline_is_exported_as_is_without_lag() -> None:
    m = TidemarkMetrics()
    m.set_waterline("bid", "seq", 41, "integer", now_ms=1_700_000_000_000)
    assert sample(m, "tidemark_waterline_seconds", table="bid", column="seq") == 41
    assert sample(m, "tidemark_waterline_lag_seconds", table="bid", column="seq") is None


def test_s3_initial_minus_infinity_waterline_leaves_the_series_absent() -> None:
    m = TidemarkMetrics()
    m.set_waterline("purchase", "date_time", None, "ms", now_ms=1)
    assert sample(m, "tidemark_waterline_seconds", table="purchase", column="date_time") is None


def test_s6_dead_letters_are_counted_per_table_and_reason() -> None:
    m = TidemarkMetrics()
    m.declare_table("purchase", "purchases")
    assert sample(m, "tidemark_dead_letter_records_total", table="purchase", reason="late") == 0
    m.add_dead_letters("purchase", "late", 3)
    m.add_dead_letters("purchase", "late", 2)
    m.add_dead_letters("purchase", "malformed", 1)
    dead = "tidemark_dead_letter_records_total"
    assert sample(m, dead, table="purchase", reason="late") == 5
    assert sample(m, dead, table="purchase", reason="malformed") == 1
    assert sample(m, dead, table="purchase", reason="future") == 0


def test_s1_input_and_output_records_are_counted_per_topic() -> None:
    m = TidemarkMetrics()
    m.declare_output("large_purchase", "purchases.large")
    assert sample(m, "tidemark_output_records_total",
                  view="large_purchase", topic="purchases.large") == 0
    m.add_input("purchase", "purchases", 100)
    m.add_input("purchase", "purchases", 20)
    m.add_output("large_purchase", "purchases.large", 7)
    assert sample(m, "tidemark_input_records_total", table="purchase", topic="purchases") == 120
    assert sample(m, "tidemark_output_records_total",
                  view="large_purchase", topic="purchases.large") == 7


def test_s14_output_waterline_is_exported_in_seconds() -> None:
    m = TidemarkMetrics()
    m.set_output_waterline("per_minute", 120_000)
    m.set_output_waterline("unknown_yet", None)
    assert sample(m, "tidemark_output_waterline_seconds", view="per_minute") == 120
    assert sample(m, "tidemark_output_waterline_seconds", view="unknown_yet") is None


def test_s11_state_rows_and_bytes_are_gauges_per_view() -> None:
    m = TidemarkMetrics()
    m.set_state("per_minute", 10, 4096)
    m.set_state("per_minute", 4, 2048)
    assert sample(m, "tidemark_state_rows", view="per_minute") == 4
    assert sample(m, "tidemark_state_bytes", view="per_minute") == 2048


def test_step_duration_histogram_counts_and_sums_steps() -> None:
    m = TidemarkMetrics()
    for seconds in (0.08, 0.09, 6.0):
        m.observe_step(seconds)
    assert sample(m, "tidemark_step_duration_seconds_count") == 3
    assert sample(m, "tidemark_step_duration_seconds_sum") == pytest.approx(6.17)
    assert sample(m, "tidemark_step_duration_seconds_bucket", le="0.1") == 2
    assert sample(m, "tidemark_step_duration_seconds_bucket", le="+Inf") == 3


def test_input_lag_partition_label_is_the_partition_number() -> None:
    m = TidemarkMetrics()
    m.set_input_lag("purchases", 1, 250)
    assert sample(m, "tidemark_input_lag_records", topic="purchases", partition="1") == 250


def test_build_info_and_query_up() -> None:
    m = TidemarkMetrics()
    m.set_build_info("0.1.0", "pipelines/purchases.sql")
    m.set_query_up("purchase", True)
    m.set_query_up("bid", True)
    m.set_query_up("bid", False)
    assert sample(m, "tidemark_build_info",
                  version="0.1.0", program="pipelines/purchases.sql") == 1
    assert sample(m, "tidemark_query_up", query="purchase") == 1
    assert sample(m, "tidemark_query_up", query="bid") == 0


def test_each_object_has_its_own_registry_unless_given_one() -> None:
    a, b = TidemarkMetrics(), TidemarkMetrics()
    a.add_input("t", "t", 1)
    assert b.registry.get_sample_value(
        "tidemark_input_records_total", {"table": "t", "topic": "t"}) is None
    shared = CollectorRegistry()
    assert TidemarkMetrics(shared).registry is shared


def test_metric_names_lists_exactly_the_registered_families() -> None:
    m = TidemarkMetrics()
    families = {f.name for f in m.registry.collect()}
    # prometheus-client reports counters without their _total suffix.
    exported = {n + "_total" if n + "_total" in METRIC_NAMES else n for n in families}
    assert exported == METRIC_NAMES
