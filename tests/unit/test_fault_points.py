"""The test-only fault hook (app/fault_points.py): a no-op unless named, fires once, at the
named batch only, writes its reached file, pauses until released or waits to be killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import fault_points
from app.fault_points import fault_point

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("TIDEMARK_FAULT_POINT", "TIDEMARK_FAULT_DIR", "TIDEMARK_FAULT_PAUSE"):
        monkeypatch.delenv(name, raising=False)
    fault_points._configured.cache_clear()
    fault_points._fired.clear()
    yield
    fault_points._configured.cache_clear()
    fault_points._fired.clear()


def _configure(monkeypatch: pytest.MonkeyPatch, point: str, directory: Path) -> None:
    monkeypatch.setenv("TIDEMARK_FAULT_POINT", point)
    monkeypatch.setenv("TIDEMARK_FAULT_DIR", str(directory))
    monkeypatch.setenv("TIDEMARK_FAULT_PAUSE", "1")


def test_unset_is_a_no_op(tmp_path: Path) -> None:
    for name in fault_points.POINTS:
        fault_point(name, 3)
    assert fault_points._configured() is None


def test_an_unknown_name_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _configure(monkeypatch, "after_lunch", tmp_path)
    with pytest.raises(ValueError, match="after_lunch"):
        fault_point("after_marker")


def test_pauses_at_the_named_point_and_batch_until_released(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _configure(monkeypatch, "after_flush@4", tmp_path)
    fault_point("after_flush", 3)  # an earlier batch
    fault_point("after_commit", 4)  # another point
    assert not list(tmp_path.iterdir())
    done = threading.Event()

    def reach() -> None:
        fault_point("after_flush", 5)  # batch 4 never reached the point: the first later one
        done.set()

    threading.Thread(target=reach, daemon=True).start()
    reached = tmp_path / f"reached-after_flush-{os.getpid()}"
    deadline = time.monotonic() + 10
    while not reached.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reached.read_text() == "after_flush 5\n"
    assert not done.wait(0.3), "it waits for the release file"
    (tmp_path / "release").touch()
    assert done.wait(10)
    reached.unlink()
    fault_point("after_flush", 4)  # at most once per process
    assert not reached.exists()


def test_without_pause_it_waits_to_be_killed(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TIDEMARK_FAULT_POINT": "between_jobs",
        "TIDEMARK_FAULT_DIR": str(tmp_path),
    }
    env.pop("TIDEMARK_FAULT_PAUSE", None)
    code = (
        "from app.fault_points import fault_point\n"
        "fault_point('between_jobs', 1)\n"
        "print('past-the-point')\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE
    )
    try:
        reached = tmp_path / f"reached-between_jobs-{process.pid}"
        deadline = time.monotonic() + 30
        while not reached.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reached.exists()
        (tmp_path / "release").touch()  # ignored without TIDEMARK_FAULT_PAUSE
        time.sleep(1.5)
        assert process.poll() is None, "it stays stopped until killed"
    finally:
        process.send_signal(signal.SIGKILL)
        out, _ = process.communicate(10)
    assert b"past-the-point" not in out
