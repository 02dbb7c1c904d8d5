"""A real Confluent-compatible schema registry on this machine, for the tests.

No Docker engine runs here and no registry server is packaged for PyPI or Debian, so
``scripts/fetch-schema-registry.sh`` builds Apicurio Registry (its in-memory storage) from
Maven Central into ``.cache/schema-registry/app``, and this module starts it on a free
loopback port. Its ``ccompat`` API speaks the Confluent Schema Registry protocol, which
is what confluent-kafka's ``SchemaRegistryClient`` and Tidemark's ``avro-confluent`` tables
talk. Never a mock: the tests talk to this process over HTTP.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: Where the Confluent-compatible API of the registry is, under its base address.
CCOMPAT_PATH = "/apis/ccompat/v6"


def registry_jar() -> Path:
    """The registry's Quarkus application, where ``scripts/fetch-schema-registry.sh`` put it
    (its ``lib`` directory beside it)."""
    return ROOT / ".cache" / "schema-registry" / "app" / "schema-registry.jar"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalSchemaRegistry:
    """One registry process; :attr:`url` is its Confluent-compatible base URL. With ``tls``
    (a certificate for 127.0.0.1 and its PKCS#8 key, PEM files; ``ca`` the CA that signed it)
    it is served over HTTPS alone (Quarkus's ``quarkus.http.ssl.*`` settings)."""

    def __init__(
        self,
        start_seconds: float = 120,
        tls: tuple[Path, Path] | None = None,
        ca: Path | None = None,
    ) -> None:
        self.start_seconds = start_seconds
        self.port = _free_port()
        self.tls, self.ca = tls, ca
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}{CCOMPAT_PATH}"
        self.work_dir = Path(tempfile.mkdtemp(prefix="tidemark-schema-registry-"))
        self.log_file = self.work_dir / "registry.log"
        self._process: subprocess.Popen[Any] | None = None

    def start(self) -> LocalSchemaRegistry:
        """Start the registry and wait until its API answers; RuntimeError (with the end of
        its log) when it does not within ``start_seconds``."""
        jar = registry_jar()
        if not jar.is_file():
            raise RuntimeError(
                f"{jar} is missing: run scripts/fetch-schema-registry.sh (make setup) first"
            )
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("no java on PATH: the schema registry needs Java 17")
        if self.tls is None:
            ports = [f"-Dquarkus.http.port={self.port}"]
        else:
            certificate, key = self.tls
            ports = [
                f"-Dquarkus.http.port={_free_port()}",
                f"-Dquarkus.http.ssl-port={self.port}",
                f"-Dquarkus.http.ssl.certificate.file={certificate}",
                f"-Dquarkus.http.ssl.certificate.key-file={key}",
                "-Dquarkus.http.insecure-requests=disabled",
            ]
        command = [
            java,
            "-Xmx384m",
            "-XX:TieredStopAtLevel=1",
            *ports,
            "-Dquarkus.http.host=127.0.0.1",
            "-Dquarkus.log.level=WARN",
            "-jar",
            str(jar),
        ]
        with self.log_file.open("wb") as log:
            self._process = subprocess.Popen(  # noqa: S603 - our own command line
                command, cwd=self.work_dir, stdout=log, stderr=subprocess.STDOUT
            )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.start_seconds
        probe = f"{self.url}/subjects"
        context = ssl.create_default_context(cafile=self.ca) if self.tls is not None else None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"the schema registry exited with {self._process.returncode}:\n"
                    f"{self.tail_log()}"
                )
            try:
                with urllib.request.urlopen(  # noqa: S310 - our own URL
                    probe, timeout=2, context=context
                ) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(
            f"the schema registry did not answer {probe} within {self.start_seconds:.0f} s:\n"
            f"{self.tail_log()}"
        )

    def tail_log(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def cleanup(self) -> None:
        self.stop()
        if not os.environ.get("TIDEMARK_KEEP_TEST_LOGS"):
            shutil.rmtree(self.work_dir, ignore_errors=True)
