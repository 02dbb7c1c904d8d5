"""A real S3-compatible server on this machine, for the tests: S3Proxy over a directory.

``scripts/fetch-s3proxy.sh`` fetches S3Proxy (Apache 2.0) from Maven Central into
``.cache/s3proxy/libs``; this module starts it with its filesystem backend in a temporary
directory on a free loopback port, with signed requests (AWS Signature V4) required. Its
filesystem backend answers ``If-None-Match: *`` atomically (it publishes with ``link(2)``)
and checks ``If-Match`` before it writes (ADR 0025). Never a mock: the tests talk to this
process over HTTP.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from local_process import LocalProcess

ROOT = Path(__file__).resolve().parent.parent
ACCESS_KEY_ID = "tidemark-test"
SECRET_ACCESS_KEY = "tidemark-test-secret"  # noqa: S105 - the test server's own


class LocalS3Proxy(LocalProcess):
    """One S3Proxy process; :attr:`endpoint` is its URL."""

    def __init__(self, start_seconds: float = 60) -> None:
        super().__init__("tidemark-s3proxy-", "s3proxy.log")
        self.start_seconds = start_seconds
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.data_dir = self.work_dir / "data"

    def environment(self) -> dict[str, str]:
        """The ``TIDEMARK_S3_*`` variables of a run against this server."""
        return {
            "TIDEMARK_S3_ENDPOINT": self.endpoint,
            "TIDEMARK_S3_PATH_STYLE": "true",
            "TIDEMARK_S3_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "TIDEMARK_S3_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
        }

    def start(self) -> LocalS3Proxy:
        libs = ROOT / ".cache" / "s3proxy" / "libs"
        if not any(libs.glob("s3proxy-*.jar")):
            raise RuntimeError(f"{libs} has no S3Proxy: run scripts/fetch-s3proxy.sh first")
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("no java on PATH: S3Proxy needs Java 17")
        self.data_dir.mkdir(parents=True)
        properties = self.work_dir / "s3proxy.properties"
        properties.write_text(
            "s3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.endpoint={self.endpoint}\n"
            f"s3proxy.identity={ACCESS_KEY_ID}\n"
            f"s3proxy.credential={SECRET_ACCESS_KEY}\n"
            "jclouds.provider=filesystem\n"
            f"jclouds.filesystem.basedir={self.data_dir}\n"
        )
        command = [
            java, "-Xmx256m", "-XX:TieredStopAtLevel=1",
            "-cp", f"{libs}/*", "org.gaul.s3proxy.Main", "--properties", str(properties),
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
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"S3Proxy exited with {self._process.returncode}:\n{self.tail_log()}"
                )
            try:
                urllib.request.urlopen(self.endpoint, timeout=2)  # noqa: S310 - loopback
                return
            except urllib.error.HTTPError:
                return  # it answers (403: the request was not signed)
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"S3Proxy did not answer within {self.start_seconds:.0f} s:\n"
                           f"{self.tail_log()}")
