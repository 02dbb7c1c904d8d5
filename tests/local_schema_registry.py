"""A real Confluent-compatible schema registry on this machine, for the tests.

No Docker engine runs here and no registry server is packaged for PyPI or Debian, so
``scripts/fetch-schema-registry.sh`` builds Apicurio Registry (its in-memory storage) from
Maven Central into ``.cache/schema-registry/app``, and this module starts it on a free
loopback port. Its ``ccompat`` API speaks the Confluent Schema Registry protocol, which
is what confluent-kafka's ``SchemaRegistryClient`` and Tidemark's ``avro-confluent`` tables
talk. Never a mock: the tests talk to this process over HTTP.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

from local_process import LocalProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
#: Where the Confluent-compatible API of the registry is, under its base address.
CCOMPAT_PATH = "/apis/ccompat/v6"


def registry_jar() -> Path:
    """The registry's Quarkus application, where ``scripts/fetch-schema-registry.sh`` put it
    (its ``lib`` directory beside it)."""
    return ROOT / ".cache" / "schema-registry" / "app" / "schema-registry.jar"


class LocalSchemaRegistry(LocalProcess):
    """One registry process; :attr:`url` is its Confluent-compatible base URL. With ``tls``
    (a certificate for 127.0.0.1 and its PKCS#8 key, PEM files; ``ca`` the CA that signed it)
    it is served over HTTPS alone (Quarkus's ``quarkus.http.ssl.*`` settings)."""

    def __init__(
        self,
        start_seconds: float = 120,
        tls: tuple[Path, Path] | None = None,
        ca: Path | None = None,
    ) -> None:
        super().__init__("tidemark-schema-registry-", "registry.log")
        self.start_seconds = start_seconds
        self.tls, self.ca = tls, ca
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}{CCOMPAT_PATH}"

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
                f"-Dquarkus.http.port={free_port()}",
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
