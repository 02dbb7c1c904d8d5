"""SPEC part M through a real Prometheus: what TidemarkMetrics serves is what Prometheus stores.

A real ``prometheus`` (Debian's binary) scrapes a MetricsServer every second; the checks go
through Prometheus' HTTP query API, so they prove the names, labels, units and exposition
format end to end, that every query of the shipped Grafana dashboard returns data, and that
the shipped alert rules load and evaluate without errors.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from prometheus import PrometheusServer, prometheus_server  # noqa: F401

from app.observability.metrics import TidemarkMetrics
from app.observability.server import MetricsServer

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "helm/tidemark/files/grafana/tidemark-dashboard.json"
RULES = ROOT / "helm/tidemark/files/prometheus/tidemark-rules.yaml"

WATERLINE_MS = 1_763_600_000_000  # 2025-11-20T00:53:20Z


@pytest.fixture
def served() -> Iterator[tuple[TidemarkMetrics, MetricsServer, Callable[[], None]]]:
    """Known values, plus a thread that keeps counters and the histogram moving (for rate())."""
    m = TidemarkMetrics()
    m.set_build_info("0.1.0", "pipelines/purchases.sql")
    m.declare_table("purchase", "purchases")
    m.declare_output("large_purchase", "purchases.large")
    m.set_waterline("purchase", "date_time", WATERLINE_MS, "ms", now_ms=WATERLINE_MS + 90_000)
    m.set_waterline("bid", "seq", 41, "integer", now_ms=0)
    m.set_output_waterline("large_purchase", WATERLINE_MS)
    m.set_state("per_minute", 12, 4096)
    m.set_input_lag("purchases", 0, 250)
    m.set_input_lag("purchases", 1, 50)
    m.set_query_up("tidemark-purchase", True)
    m.set_query_up("tidemark-bid", False)
    m.add_dead_letters("purchase", "late", 7)
    stop = threading.Event()

    def keep_moving() -> None:
        while not stop.is_set():
            m.add_input("purchase", "purchases", 10)
            m.add_output("large_purchase", "purchases.large", 2)
            m.add_dead_letters("purchase", "malformed", 1)
            m.observe_step(0.2)
            stop.wait(0.25)

    mover = threading.Thread(target=keep_moving, daemon=True)
    with MetricsServer(m.registry, lambda: (True, "ok"), port=0, host="127.0.0.1") as server:
        mover.start()
        yield m, server, stop.set
        stop.set()
        mover.join()


def test_part_m_values_reach_prometheus_with_their_names_labels_and_units(
    served: tuple[TidemarkMetrics, MetricsServer, Callable[[], None]],
    prometheus_server: Callable[..., PrometheusServer],  # noqa: F811
) -> None:
    _, server, _ = served
    prom = prometheus_server([f"127.0.0.1:{server.port}"])
    prom.wait_for_scrape()

    assert prom.values("tidemark_waterline_seconds", "table", "column") == {
        ("purchase", "date_time"): WATERLINE_MS / 1000, ("bid", "seq"): 41.0}
    assert prom.values("tidemark_waterline_lag_seconds", "table", "column") == {
        ("purchase", "date_time"): 90.0}
    assert prom.values("tidemark_output_waterline_seconds", "view") == {
        ("large_purchase",): WATERLINE_MS / 1000}
    assert prom.values("tidemark_state_rows", "view") == {("per_minute",): 12.0}
    assert prom.values("tidemark_state_bytes", "view") == {("per_minute",): 4096.0}
    assert prom.values("tidemark_input_lag_records", "topic", "partition") == {
        ("purchases", "0"): 250.0, ("purchases", "1"): 50.0}
    assert prom.values("tidemark_query_up", "query") == {
        ("tidemark-purchase",): 1.0, ("tidemark-bid",): 0.0}
    assert prom.values("tidemark_build_info", "version", "program") == {
        ("0.1.0", "pipelines/purchases.sql"): 1.0}
    dead = prom.values("tidemark_dead_letter_records_total", "table", "reason")
    assert dead[("purchase", "late")] == 7.0
    assert dead[("purchase", "invalid")] == 0.0 and dead[("purchase", "future")] == 0.0
    assert dead[("purchase", "malformed")] >= 1.0
    prom.wait_for("rate(tidemark_input_records_total[5s]) > 0")
    prom.wait_for("histogram_quantile(0.5, rate(tidemark_step_duration_seconds_bucket[5s]))",
                  lambda r: bool(r) and 0.1 < float(r[0]["value"][1]) <= 0.25)


def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


def grafana_to_promql(expr: str) -> str:
    """What Grafana sends for an expression with every variable at All (rate window 10 s):
    ``.*`` also matches the namespace and release labels a static scrape has not."""
    expr = expr.replace("$__rate_interval", "10s")
    return re.sub(r"\$\{?(namespace|release|job|table|view)\}?", ".*", expr)


def test_part_m_every_dashboard_query_returns_data_from_a_real_prometheus(
    served: tuple[TidemarkMetrics, MetricsServer, Callable[[], None]],
    prometheus_server: Callable[..., PrometheusServer],  # noqa: F811
) -> None:
    _, server, _ = served
    prom = prometheus_server([f"127.0.0.1:{server.port}"])
    prom.wait_for_scrape()
    time.sleep(4)  # a few scrapes, so rate() over 10 s has two samples
    empty = []
    for title, expr in dashboard_queries():
        if not prom.query(grafana_to_promql(expr)):
            empty.append(f"{title}: {expr}")
    assert not empty, "dashboard queries without data:\n" + "\n".join(empty)


def test_alert_rules_load_and_evaluate_in_a_real_prometheus_and_query_down_goes_pending(
    served: tuple[TidemarkMetrics, MetricsServer, Callable[[], None]],
    prometheus_server: Callable[..., PrometheusServer],  # noqa: F811
) -> None:
    _, server, _ = served
    prom = prometheus_server([f"127.0.0.1:{server.port}"], rule_files=[RULES])
    prom.wait_for_scrape()
    deadline = time.monotonic() + 30
    rules: list[dict[str, object]] = []
    while time.monotonic() < deadline:
        groups = prom.api("rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if rules and all(r.get("lastEvaluation", "").startswith("20") for r in rules):
            break
        time.sleep(0.5)
    declared = [
        rule["alert"]
        for group in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
    ]
    assert sorted(str(r["name"]) for r in rules) == sorted(declared)
    assert {r["name"]: r["health"] for r in rules} == {r["name"]: "ok" for r in rules}
    alerts = prom.wait_for('ALERTS{alertname="TidemarkQueryDown"}', timeout_seconds=30)
    assert [(a["metric"]["query"], a["metric"]["alertstate"]) for a in alerts] == [
        ("tidemark-bid", "pending")]
