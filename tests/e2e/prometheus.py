"""A real Prometheus server for end-to-end tests (Debian's ``prometheus`` binary, never a fake).

:class:`PrometheusServer` writes a config that scrapes the given targets every second on
loopback, starts ``prometheus`` with a private TSDB directory on a free port, waits until it
is ready, answers PromQL through the HTTP API (``/api/v1/query``) and stops it cleanly.
``scripts/install-prometheus.sh`` installs the binary when it is missing.

Use the ``prometheus_server`` fixture (a factory: ``prometheus_server(["127.0.0.1:9108"])``)
after ``from prometheus import prometheus_server  # noqa: F401`` in a test module, or the class
in a ``with`` block.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from app.local_kafka import stop_process

__all__ = ["PrometheusServer", "prometheus_binary", "prometheus_server"]

JOB = "tidemark"


def prometheus_binary() -> str:
    """Path of the prometheus binary; fails the test with the fix when it is missing."""
    path = shutil.which("prometheus")
    if path is None:
        pytest.fail("prometheus is not installed: run scripts/install-prometheus.sh")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrometheusServer:
    """One Prometheus process scraping ``targets`` (``host:port``) every ``scrape_interval``."""

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str],
        rule_files: Sequence[Path] = (),
        scrape_interval: str = "1s",
    ) -> None:
        self.workdir = workdir
        self.targets = list(targets)
        self.rule_files = [Path(p).resolve() for p in rule_files]
        self.scrape_interval = scrape_interval
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path = workdir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _write_config(self) -> Path:
        config = self.workdir / "prometheus.yml"
        rules = "".join(f"  - {json.dumps(str(p))}\n" for p in self.rule_files)
        config.write_text(
            "global:\n"
            f"  scrape_interval: {self.scrape_interval}\n"
            f"  evaluation_interval: {self.scrape_interval}\n"
            + (f"rule_files:\n{rules}" if rules else "")
            + "scrape_configs:\n"
            f"  - job_name: {JOB}\n"
            f"    scrape_interval: {self.scrape_interval}\n"
            f"    scrape_timeout: {self.scrape_interval}\n"
            "    static_configs:\n"
            f"      - targets: {json.dumps(self.targets)}\n"
        )
        return config

    def start(self, timeout_seconds: float = 60) -> PrometheusServer:
        """Start the server and wait until ``/-/ready`` answers 200."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        self.port = _free_port()
        log = self._log_path.open("wb")
        self._process = subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1d",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"prometheus exited {self._process.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus not ready after {timeout_seconds} s:\n{self.log()}")

    def log(self) -> str:
        return self._log_path.read_text(errors="replace") if self._log_path.exists() else ""

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data``; raises on an API error."""
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as response:
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus API error on {path} {params}: {body}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query: the result vector, each item ``{"metric": {...}, "value": [t, "v"]}``."""
        data = self.api("query", query=promql)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def query_range(
        self,
        promql: str,
        start: float,
        end: float,
        step: float,
    ) -> list[dict[str, Any]]:
        """Range query: a matrix, each item ``{"metric": {...}, "values": [[t, "v"], ...]}``."""
        data = self.api("query_range", query=promql, start=str(start), end=str(end), step=str(step))
        return list(data["result"])

    def values(self, promql: str, *labels: str) -> dict[tuple[str, ...], float]:
        """The query's samples keyed by the values of ``labels``."""
        return {
            tuple(item["metric"].get(label, "") for label in labels): float(item["value"][1])
            for item in self.query(promql)
        }

    def wait_for(
        self,
        promql: str,
        until: Callable[[list[dict[str, Any]]], bool] = bool,
        timeout_seconds: float = 60,
        alive: Callable[[], bool] = lambda: True,
    ) -> list[dict[str, Any]]:
        """Poll ``promql`` until ``until(result)`` holds; fails the test with the last result.

        ``alive`` is checked on every poll, so a scraped process that died fails the test at
        once instead of after the timeout.
        """
        deadline = time.monotonic() + timeout_seconds
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            if not alive():
                pytest.fail(f"the scraped process ended while waiting for {promql!r}")
            result = self.query(promql)
            if until(result):
                return result
            time.sleep(0.5)
        pytest.fail(
            f"{promql!r} did not reach the expected value in {timeout_seconds} s: "
            f"{result}\n{self.log()}"
        )

    def wait_for_scrape(self, timeout_seconds: float = 60) -> None:
        """Until every target was scraped successfully once."""
        self.wait_for(
            f'up{{job="{JOB}"}} == 1',
            lambda r: len(r) == len(self.targets),
            timeout_seconds,
        )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s (idempotent)."""
        if self._process is None:
            return
        stop_process(self._process)
        self._process = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def prometheus_server(
    tmp_path: Path,
) -> Iterator[Callable[..., PrometheusServer]]:
    """Factory fixture: ``prometheus_server(targets, rule_files=())`` -> a started server."""
    started: list[PrometheusServer] = []

    def start(targets: Sequence[str], rule_files: Sequence[Path] = ()) -> PrometheusServer:
        server = PrometheusServer(tmp_path / f"prometheus-{len(started)}", targets, rule_files)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()
