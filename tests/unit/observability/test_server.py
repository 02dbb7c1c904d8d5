"""/metrics, /healthz and /readyz over real HTTP on a free port."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from app.observability.metrics import TidemarkMetrics
from app.observability.server import BrokerReachability, MetricsServer, Readiness


def get(port: int, path: str, accept: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if accept:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


def test_metrics_endpoint_serves_the_registry_in_prometheus_text_format() -> None:
    m = TidemarkMetrics()
    m.set_waterline("purchase", "date_time", 3_600_000, "ms", now_ms=3_660_000)
    m.add_dead_letters("purchase", "late", 2)
    with MetricsServer(m.registry, lambda: (True, "ok"), port=0, host="127.0.0.1") as server:
        assert server.port > 0
        status, content_type, body = get(server.port, "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body) for s in family.samples
    }
    assert samples[("tidemark_waterline_seconds",
                    (("column", "date_time"), ("table", "purchase")))] == 3600
    assert samples[("tidemark_waterline_lag_seconds",
                    (("column", "date_time"), ("table", "purchase")))] == 60
    assert samples[("tidemark_dead_letter_records_total",
                    (("reason", "late"), ("table", "purchase")))] == 2


def test_metrics_endpoint_speaks_openmetrics_when_asked() -> None:
    m = TidemarkMetrics()
    with MetricsServer(m.registry, lambda: (True, "ok"), port=0, host="127.0.0.1") as server:
        status, content_type, body = get(
            server.port, "/metrics", accept="application/openmetrics-text; version=1.0.0")
    assert status == 200 and content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith("# EOF")


def test_healthz_answers_while_the_process_serves_even_when_not_ready() -> None:
    with MetricsServer(TidemarkMetrics().registry, lambda: (False, "starting"),
                       port=0, host="127.0.0.1") as server:
        assert get(server.port, "/healthz")[0] == 200
        status, _, body = get(server.port, "/readyz")
    assert (status, body.strip()) == (503, "starting")


def test_readyz_follows_the_query_and_the_broker() -> None:
    state = {"running": False, "broker": (True, "broker reachable")}
    readiness = Readiness(lambda: bool(state["running"]), lambda: state["broker"])  # type: ignore[arg-type,return-value]
    with MetricsServer(TidemarkMetrics().registry, readiness, port=0, host="127.0.0.1") as server:
        assert get(server.port, "/readyz")[:3:2] == (503, "streaming query not running\n")
        state["running"] = True
        assert get(server.port, "/readyz")[:3:2] == (200, "broker reachable\n")
        state["broker"] = (False, "broker unreachable: timed out")
        assert get(server.port, "/readyz")[:3:2] == (503, "broker unreachable: timed out\n")


def test_readyz_is_503_when_the_check_itself_fails() -> None:
    def broken() -> tuple[bool, str]:
        raise RuntimeError("listener gone")

    with MetricsServer(TidemarkMetrics().registry, broken, port=0, host="127.0.0.1") as server:
        status, _, body = get(server.port, "/readyz")
        assert get(server.port, "/nope")[0] == 404
    assert status == 503 and "listener gone" in body


def test_stop_releases_the_port() -> None:
    server = MetricsServer(TidemarkMetrics().registry, lambda: (True, "ok"),
                           port=0, host="127.0.0.1").start()
    port = server.port
    server.stop()
    server.stop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_broker_reachability_reports_an_unreachable_broker_within_its_timeout() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    probe = BrokerReachability(
        {"bootstrap.servers": f"127.0.0.1:{port}"}, timeout_seconds=1.0, cache_seconds=60)
    started = time.monotonic()
    reachable, reason = probe()
    assert not reachable and reason.startswith("broker unreachable")
    assert time.monotonic() - started < 5
    started = time.monotonic()
    assert probe() == (reachable, reason)  # cached: no second timeout
    assert time.monotonic() - started < 0.5


def test_healthz_answers_what_the_liveness_check_says() -> None:
    state = {"alive": (True, "ok")}
    with MetricsServer(TidemarkMetrics().registry, lambda: (True, "ok"), port=0,
                       host="127.0.0.1", liveness=lambda: state["alive"]) as server:
        assert get(server.port, "/healthz")[::2] == (200, "ok\n")
        state["alive"] = (False, "query q: no step finished for 600 s while 3 records wait")
        assert get(server.port, "/healthz")[::2] == (
            503, "query q: no step finished for 600 s while 3 records wait\n")
