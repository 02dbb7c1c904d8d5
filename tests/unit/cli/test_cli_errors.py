"""What a user gets wrong reaches them as one ``tidemark: error:`` line and exit code 2, with
the setting or file to fix, never a traceback (the errors of Kafka, Spark, the file system and
pydantic are translated where Tidemark calls them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TIDEMARK = [sys.executable, "-m", "app.cli"]
ROOT = Path(__file__).resolve().parents[3]

PROGRAM = (
    "CREATE TABLE t (\n  ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,\n  n BIGINT\n)"
    " WITH ('topic' = 'cli-errors-in');\n"
    "CREATE VIEW v WITH ('topic' = 'cli-errors-out', 'format' = 'append') AS\n"
    "SELECT ts, n FROM t WHERE n > 1;\n"
)


def _tidemark(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}
    return subprocess.run(
        [*TIDEMARK, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        env={**clean, **env},
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("tidemark: ")]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith("tidemark: error: "), result.stderr
    return errors[0]


def _program(tmp_path: Path, text: str = PROGRAM) -> Path:
    program = tmp_path / "p.sql"
    program.write_text(text)
    return program


def test_a_checkpoint_that_cannot_be_a_directory_names_the_setting(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = _tidemark(
        "run", str(_program(tmp_path)), "--checkpoint", str(blocker / "ck"),
        "--bootstrap-servers", "127.0.0.1:1", "--metrics-port", "0",
    )
    line = _one_error_line(result)
    assert f"checkpoint directory {blocker / 'ck'} is not writable" in line
    assert "--checkpoint" in line and "TIDEMARK_CHECKPOINT" in line


def test_a_missing_schema_file_is_a_program_error(tmp_path: Path) -> None:
    program = _program(tmp_path, PROGRAM.replace(
        "'topic' = 'cli-errors-in'", "'topic' = 'cli-errors-in', 'schema' = 'nowhere.avsc'"
    ))
    result = _tidemark("explain", str(program))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "schema file nowhere.avsc not found" in result.stderr
    assert "the program was rejected (1 error(s))" in result.stderr


def test_a_malformed_config_file_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "tidemark.yaml"
    config.write_text("checkpoint: [unclosed\nspark_master: local[1]\n")
    result = _tidemark("run", str(_program(tmp_path)), "--config", str(config))
    line = _one_error_line(result)
    assert f"config file {config} is not valid YAML" in line


def test_an_invalid_setting_names_its_variable(tmp_path: Path) -> None:
    result = _tidemark(
        "run", str(_program(tmp_path)), TIDEMARK_MAX_RECORDS_PER_STEP="0",
        TIDEMARK_CHECKPOINT=str(tmp_path / "ck"),
    )
    line = _one_error_line(result)
    assert "max_records_per_step (TIDEMARK_MAX_RECORDS_PER_STEP)" in line


def test_a_nested_setting_that_is_not_json_names_the_setting(tmp_path: Path) -> None:
    result = _tidemark("run", str(_program(tmp_path)), TIDEMARK_KAFKA="{not json")
    line = _one_error_line(result)
    assert 'field "kafka"' in line


def test_an_unreachable_broker_names_the_setting(tmp_path: Path) -> None:
    result = _tidemark(
        "run", str(_program(tmp_path)), "--checkpoint", str(tmp_path / "ck"),
        "--bootstrap-servers", "127.0.0.1:1", "--metrics-port", "0",
        TIDEMARK_WAIT_FOR_TOPICS_SECONDS="1",
    )
    line = _one_error_line(result)
    assert "cannot reach the Kafka cluster at 127.0.0.1:1" in line
    assert "--bootstrap-servers" in line


def test_punctuate_to_an_unreachable_broker_names_the_setting() -> None:
    result = _tidemark(
        "punctuate", "--topic", "t", "--bound", "0", "--bootstrap-servers", "127.0.0.1:1"
    )
    line = _one_error_line(result)
    assert "cannot reach the Kafka cluster at 127.0.0.1:1" in line


def test_a_busy_metrics_port_names_the_setting(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))  # noqa: S104 - the port the metrics server binds
        busy.listen()
        port = busy.getsockname()[1]
        result = _tidemark(
            "run", str(_program(tmp_path)), "--checkpoint", str(tmp_path / "ck"),
            "--bootstrap-servers", "127.0.0.1:1", "--metrics-port", str(port),
        )
    line = _one_error_line(result)
    assert f"cannot serve metrics on 0.0.0.0:{port}" in line
    assert "--metrics-port" in line
