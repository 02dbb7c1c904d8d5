"""``tidemark dead-letters``: its options in --help, and a bad option as one error line with
exit code 2 before any Kafka client is made (the broker address given cannot answer)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
UNREACHABLE = "127.0.0.1:1"


def _tidemark(*args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "dead-letters", *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
        env={**clean, "COLUMNS": "200"},
    )


def test_each_subcommand_shows_its_connection_options_with_variables_and_defaults() -> None:
    for command in ("summary", "show", "replay"):
        result = _tidemark(command, "--help")
        assert result.returncode == 0, result.stderr
        for words in ("--topic", "--reason", "--from-offset", "--to-offset", "--since",
                      "--until", "TIDEMARK_BOOTSTRAP_SERVERS", "127.0.0.1:9092",
                      "TIDEMARK_CONFIG"):
            assert words in result.stdout, (command, words)
    show = _tidemark("show", "--help").stdout
    assert "--schema-registry-url" in show and "TIDEMARK_SCHEMA_REGISTRY_URL" in show
    replay = _tidemark("replay", "--help").stdout
    assert "--to " in replay and "--force" in replay and "--progress-every" in replay
    assert "--include-replayed" in replay
    assert "late|malformed|invalid|future" in replay


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["summary", "--since", "yesterday"], "--since 'yesterday' is not a time"),
        (["show", "--from-offset", "9", "--to-offset", "2"], "--to-offset 2 is below"),
        (["show", "--limit", "0"], "--limit 0"),
        (["replay", "--to", "t.dlq", "--progress-every", "0"], "--progress-every 0"),
        (["replay", "--to", "t.dlq"], "cannot write to the dead-letter topic or its ledger"),
        (["replay", "--to", "t.dlq.replays"], "cannot write to the dead-letter topic"),
    ],
)
def test_a_bad_option_is_one_error_line_and_exit_2(args: list[str], words: str) -> None:
    result = _tidemark(*args[:1], "--topic", "t.dlq", "--bootstrap-servers", UNREACHABLE,
                       *args[1:])
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("tidemark: ")]
    assert len(lines) == 1 and lines[0].startswith("tidemark: error: ")
    assert words in lines[0]


def test_an_unknown_reason_is_refused_by_the_option_itself() -> None:
    result = _tidemark("show", "--topic", "t.dlq", "--reason", "dropped")
    assert result.returncode == 2 and "dropped" in result.stderr
