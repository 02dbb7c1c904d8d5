"""Logs go to whatever stderr is when a line is written, so a caller that swaps stderr for a
while and closes its stream (a test runner invoking a command in-process) leaves the
process's loggers working."""

from __future__ import annotations

import io
import sys

import pytest
import structlog

from app.observability.logging import configure_logging


def test_a_closed_temporary_stderr_does_not_break_later_logging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    temporary = io.StringIO()
    monkeypatch.setattr(sys, "stderr", temporary)
    configure_logging("json", "INFO")
    structlog.get_logger("t").info("during")
    assert "during" in temporary.getvalue()
    temporary.close()
    later = io.StringIO()
    monkeypatch.setattr(sys, "stderr", later)
    structlog.get_logger("t").warning("after")  # raised ValueError on the closed stream
    assert "after" in later.getvalue()
