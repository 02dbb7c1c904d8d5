"""A server process the tests start on this machine (a schema registry, an S3-compatible
store): a free loopback port, a work directory with its log, and a stop that never leaves
the process behind."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalProcess:
    """One process, its work directory (``prefix``) and its log file (``log_name`` in it);
    subclasses start it into :attr:`_process`."""

    def __init__(self, prefix: str, log_name: str) -> None:
        self.port = free_port()
        self.work_dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.log_file = self.work_dir / log_name
        self._process: subprocess.Popen[Any] | None = None

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
