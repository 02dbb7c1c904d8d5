"""The HTTP endpoint of a Tidemark process: /metrics, /healthz and /readyz.

Kubernetes restarts a pod whose liveness probe fails and takes a pod out of service while its
readiness probe fails, so the two answer different questions: ``/healthz`` is 200 as long as
this process answers HTTP and its steps have not stalled (a liveness check decides, e.g.
:class:`~app.observability.listener.StepStall`); ``/readyz`` is 200 only while the streaming
queries run and the broker answers (a :class:`Readiness` decides). ``/metrics`` serves the
:class:`~app.observability.metrics.TidemarkMetrics` registry in the Prometheus text format
(or OpenMetrics when the scraper asks for it).

The server runs in a daemon thread so it never keeps a finishing process alive, and answers
each request in its own thread so a slow readiness check cannot block a scrape.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from app.errors import ConfigError
from app.observability.logging import get_logger

__all__ = ["BrokerReachability", "MetricsServer", "Readiness", "ReadinessCheck"]

ReadinessCheck = Callable[[], tuple[bool, str]]
"""Answers (ready, reason); the reason is shown in the body of a 503."""

_log = get_logger("tidemark.server")


class BrokerReachability:
    """Whether the Kafka broker answers a metadata request, cached for a few seconds.

    Kubernetes probes every few seconds; caching keeps the probe from adding broker load and
    bounds the answer time to ``timeout_seconds`` at most once per ``cache_seconds``. The
    admin client is created on first use (constructors do no I/O, STYLE habit 5).
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        timeout_seconds: float = 2.0,
        cache_seconds: float = 5.0,
    ) -> None:
        self._config = dict(kafka_config)
        self._timeout = timeout_seconds
        self._cache = cache_seconds
        self._lock = threading.Lock()
        self._admin: Any = None
        self._checked_at = float("-inf")
        self._answer: tuple[bool, str] = (False, "broker not checked yet")

    def __call__(self) -> tuple[bool, str]:
        """(reachable, reason), refreshed when the cached answer is older than the cache."""
        with self._lock:
            now = time.monotonic()
            if now - self._checked_at >= self._cache:
                self._answer = self._check()
                self._checked_at = now
            return self._answer

    def _check(self) -> tuple[bool, str]:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        try:
            if self._admin is None:
                self._admin = AdminClient(self._config)
            metadata = self._admin.list_topics(timeout=self._timeout)
        except KafkaException as exc:
            return False, f"broker unreachable: {exc.args[0] if exc.args else exc}"
        if not metadata.brokers:
            return False, "broker unreachable: no brokers in metadata"
        return True, "broker reachable"


class Readiness:
    """Ready when the streaming queries run and the broker is reachable (Kubernetes readiness).

    Both parts are callables so the runtime can pass what it has: typically
    ``TidemarkQueryListener.queries_running`` and a :class:`BrokerReachability`.
    """

    def __init__(self, queries_running: Callable[[], bool], broker: ReadinessCheck) -> None:
        self._queries_running = queries_running
        self._broker = broker

    def __call__(self) -> tuple[bool, str]:
        """(ready, reason): the first failing condition names itself."""
        if not self._queries_running():
            return False, "streaming query not running"
        return self._broker()


class MetricsServer:
    """Serves /metrics, /healthz and /readyz on ``host:port`` from a daemon thread.

    ``port=0`` binds a free port; :attr:`port` tells which once :meth:`start` returned.
    ``liveness`` answers ``/healthz`` (none: 200 while the process serves).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        readiness: ReadinessCheck,
        port: int = 9108,
        host: str = "0.0.0.0",  # noqa: S104 - a pod's probes and scrapes come from outside
        liveness: ReadinessCheck | None = None,
    ) -> None:
        self._registry = registry
        self._readiness = readiness
        self._liveness = liveness
        self._host = host
        self._requested_port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the chosen one when started with port 0)."""
        if self._server is None:
            raise RuntimeError("MetricsServer.port is known only after start()")
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        """Bind and serve in a daemon thread; returns self so ``MetricsServer(...).start()``."""
        handler = _handler_class(self._registry, self._readiness, self._liveness)
        try:
            self._server = ThreadingHTTPServer((self._host, self._requested_port), handler)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {self._host}:{self._requested_port}"
                f" ({exc.strerror or type(exc).__name__}): give a free port with --metrics-port"
                " (TIDEMARK_METRICS_PORT), or 0 for any free port"
            ) from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="tidemark-metrics", daemon=True,
        )
        self._thread.start()
        _log.info("metrics_server_started", host=self._host, port=self.port)
        return self

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _check(check: ReadinessCheck) -> tuple[bool, str]:
    try:
        return check()
    except Exception as exc:  # noqa: BLE001 - a failing check answers "no", with the reason
        return False, f"check failed: {exc}"


def _handler_class(
    registry: CollectorRegistry, readiness: ReadinessCheck, liveness: ReadinessCheck | None,
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "tidemark"

        def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                self._reply(200, encoder(registry), content_type)
            elif path == "/healthz":
                alive, reason = _check(liveness) if liveness is not None else (True, "ok")
                self._reply(200 if alive else 503, f"{reason}\n".encode())
            elif path == "/readyz":
                ready, reason = _check(readiness)
                self._reply(200 if ready else 503, f"{reason}\n".encode())
            else:
                self._reply(404, b"not found: try /metrics, /healthz or /readyz\n")

        def _reply(
            self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            # Scrapes and probes every few seconds would drown the log; failures are visible
            # through the probes themselves.
            pass

    return Handler
