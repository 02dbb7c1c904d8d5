"""The dashboard's key panels, rendered from a real Prometheus scraping a live pipeline.

Grafana is not available on the build machines, so this test does what Grafana would: it runs
``tidemark run pipelines/purchases.sql`` against a real broker fed by a generator of
out-of-order purchases (a few late, a few malformed), lets a real Prometheus scrape it, runs
the PromQL of the shipped dashboard's key panels as range queries and draws them with
matplotlib. It asserts every key panel has data; with ``TIDEMARK_RENDER_DASHBOARD=1`` it
writes the picture to docs/img/dashboard.png (how the one in docs/observability.md was made).
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus import PrometheusServer, prometheus_server  # noqa: F401

from app.local_kafka import LocalKafka

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "helm/tidemark/files/grafana/tidemark-dashboard.json"
SCHEMA = fastavro.parse_schema(json.loads((ROOT / "schemas/purchase.avsc").read_text()))
KEY_PANELS = (
    "Waterline lag per table and column",
    "Input rate per table",
    "Output rate per view",
    "Dead letters by reason",
    "Input lag (records waiting)",
    "Step duration (p50, p99)",
)
OPTIONAL_PANELS = ("State rows per view",)  # purchases.sql has no stateful view yet
RUN_SECONDS = float(os.environ.get("TIDEMARK_RENDER_SECONDS", "75"))


def panel_queries() -> dict[str, list[tuple[str, str]]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return {p["title"]: [(t["expr"], t.get("legendFormat", "")) for t in p["targets"]]
            for p in dashboard["panels"] if p.get("targets")}


def grafana_to_promql(expr: str) -> str:
    expr = expr.replace("$__rate_interval", "10s")
    return re.sub(r"\$\{?(namespace|release|job|table|view)\}?", ".*", expr)


def legend(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt) or str(labels)


def purchase(now_ms: int, rng: random.Random) -> bytes:
    out = io.BytesIO()
    late = rng.random() < 0.03
    date_time = now_ms - (2 * 3_600_000 if late else rng.randint(0, 120_000))
    fastavro.schemaless_writer(out, SCHEMA, {
        "date_time": date_time, "credit_card": rng.randint(1, 50),
        "amount": Decimal(rng.choice(["12.50", "42.00", "99.99", "150.00", "420.00"]))})
    return out.getvalue()


@pytest.fixture
def kafka() -> Iterator[LocalKafka]:
    with LocalKafka() as broker:
        yield broker


def test_part_m_dashboard_key_panels_have_data_from_a_live_pipeline(
    kafka: LocalKafka,
    tmp_path: Path,
    prometheus_server: Callable[..., PrometheusServer],  # noqa: F811
) -> None:
    conf = {"bootstrap.servers": kafka.bootstrap_servers, **kafka.client_config()}
    admin = AdminClient(conf)
    for future in admin.create_topics([NewTopic("purchases", num_partitions=2)]).values():
        future.result(timeout=30)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    service = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "run", "pipelines/purchases.sql",
         "--bootstrap-servers", kafka.bootstrap_servers,
         "--checkpoint", str(tmp_path / "checkpoint"), "--metrics-port", str(port)],
        cwd=ROOT, env={**os.environ, "TIDEMARK_LOG_FORMAT": "json"},
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "tidemark.log").open("wb"),
    )
    stop = threading.Event()

    def generate() -> None:
        producer, rng = Producer(conf), random.Random(7)
        while not stop.is_set():
            now_ms = int(time.time() * 1000)
            burst = 40 if int(time.time()) % 20 < 10 else 15  # uneven load, visible in rates
            for _ in range(burst):
                producer.produce("purchases", value=purchase(now_ms, rng))
            if rng.random() < 0.3:
                producer.produce("purchases", value=b"\xff")  # malformed (S7)
            producer.poll(0)
            stop.wait(0.25)
        producer.flush(30)

    generator = threading.Thread(target=generate, daemon=True)
    try:
        prom = prometheus_server([f"127.0.0.1:{port}"])
        prom.wait_for("tidemark_query_up == 1", timeout_seconds=180,
                      alive=lambda: service.poll() is None)
        started = time.time()
        generator.start()
        time.sleep(RUN_SECONDS)
        stop.set()
        generator.join()
        time.sleep(5)
        end = time.time()
        queries = panel_queries()
        series: dict[str, list[tuple[str, list[tuple[float, float]]]]] = {}
        for title in KEY_PANELS + OPTIONAL_PANELS:
            series[title] = [
                (legend(fmt, item["metric"]),
                 [(float(t), float(v)) for t, v in item["values"] if v not in ("NaN", "+Inf")])
                for expr, fmt in queries[title]
                for item in prom.query_range(grafana_to_promql(expr), started, end, 1.0)
            ]
        empty = [t for t in KEY_PANELS if not any(points for _, points in series[t])]
        assert not empty, f"key panels without data: {empty}"
        publish = os.environ.get("TIDEMARK_RENDER_DASHBOARD") == "1"
        out = ROOT / "docs/img/dashboard.png" if publish else tmp_path / "dashboard.png"
        render(series, queries, out)
        assert out.stat().st_size > 10_000
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=120) == 0
    finally:
        stop.set()
        if service.poll() is None:
            service.kill()
            service.wait(timeout=30)


def render(series: dict[str, list[tuple[str, list[tuple[float, float]]]]],
           queries: dict[str, list[tuple[str, str]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    titles = [t for t in series if any(points for _, points in series[t])]
    units = {"Waterline lag per table and column": "seconds", "Step duration (p50, p99)": "seconds",
             "Input lag (records waiting)": "records", "State rows per view": "rows"}
    cols = 2
    rows = (len(titles) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(13, 3.3 * rows), squeeze=False)
    fig.patch.set_facecolor("#111217")
    for ax, title in zip(axes.flat, titles, strict=False):
        ax.set_facecolor("#181b1f")
        for label, points in series[title]:
            if points:
                xs = [datetime.fromtimestamp(t, tz=UTC) for t, _ in points]
                ax.plot(xs, [v for _, v in points], linewidth=1.4, label=label)
        ax.set_title(title, color="#d8d9da", fontsize=10, loc="left")
        ax.set_ylabel(units.get(title, "per second"), color="#9fa7b3", fontsize=8)
        ax.tick_params(colors="#9fa7b3", labelsize=7)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=UTC))
        ax.grid(color="#2c3235", linewidth=0.6)
        for spine in ax.spines.values():
            spine.set_color("#2c3235")
        ax.legend(fontsize=7, facecolor="#181b1f", edgecolor="#2c3235", labelcolor="#d8d9da",
                  loc="upper left")
        expr = grafana_to_promql(queries[title][0][0]).replace("$", r"\$")
        ax.text(0.0, -0.3, expr if len(expr) < 110 else expr[:107] + "...",
                transform=ax.transAxes, fontsize=6, color="#6e7681", family="monospace")
    for ax in list(axes.flat)[len(titles):]:
        ax.set_visible(False)
    fig.suptitle("Tidemark dashboard, key panels (PromQL of tidemark-dashboard.json against a "
                 "real Prometheus, pipelines/purchases.sql live)", color="#d8d9da", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96), h_pad=2.5)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, facecolor=fig.get_facecolor())
    plt.close(fig)
