"""The command line as a user meets it: ``--version`` prints the installed version, ``--help``
of ``run`` shows each option's default and environment variable, and a ``--format`` that is
not a choice is a usage error listing the choices."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from test_cli_errors import ROOT, _tidemark

from app.cli import DISTRIBUTION
from app.config import SPARK_LOG_NAME, Settings


def _tidemark_wide(*args: str) -> CompletedProcess[str]:
    """``tidemark *args`` with no TIDEMARK_* variable set, its help wide enough that no line
    wraps, and no colours."""
    return _tidemark(*args, COLUMNS="400", NO_COLOR="1", TERM="dumb")


def _option_help(help_text: str, option: str) -> str:
    """The help line of ``option`` (the table row that starts with it)."""
    rows = [line for line in help_text.splitlines() if re.search(rf"\s{option}\s", line)]
    assert len(rows) == 1, help_text
    return rows[0]


def _shows_default(line: str, default: str) -> bool:
    return re.search(rf"\[default: \(?{re.escape(default)}\)?\]", line) is not None


def test_version_prints_the_installed_distributions_version() -> None:
    result = _tidemark_wide("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"tidemark {version(DISTRIBUTION)}"


#: The options of ``run`` read from a setting: option, setting, the default shown.
RUN_SETTINGS = [
    ("--bootstrap-servers", "bootstrap_servers", None),
    ("--checkpoint", "checkpoint", None),
    ("--spark-master", "spark_master", None),
    ("--metrics-port", "metrics_port", None),
    ("--max-records-per-step", "max_records_per_step", None),
    ("--spark-log", "spark_log", None),
    ("--spark-log-file", "spark_log_file", f"CHECKPOINT/{SPARK_LOG_NAME}"),
]


@pytest.mark.parametrize(("option", "setting", "shown"), RUN_SETTINGS)
def test_run_help_shows_each_settings_default_and_variable(
    option: str, setting: str, shown: str | None
) -> None:
    result = _tidemark_wide("run", "--help")
    assert result.returncode == 0, result.stderr
    line = _option_help(result.stdout, option)
    assert f"[env var: TIDEMARK_{setting.upper()}]" in line, line
    default = shown if shown is not None else str(Settings.model_fields[setting].default)
    assert _shows_default(line, default), line


def test_run_help_shows_the_program_and_config_variables() -> None:
    result = _tidemark_wide("run", "--help")
    assert result.returncode == 0, result.stderr
    assert "[env var: TIDEMARK_PROGRAM]" in _option_help(result.stdout, "program")
    assert "[env var: TIDEMARK_CONFIG]" in _option_help(result.stdout, "--config")


def test_demo_help_shows_its_own_spark_log_file_default() -> None:
    from app.demo import DEMO_SPARK_LOG

    result = _tidemark_wide("demo", "--help")
    assert result.returncode == 0, result.stderr
    line = _option_help(result.stdout, "--spark-log-file")
    assert _shows_default(line, str(DEMO_SPARK_LOG)), line


def test_a_format_that_is_not_a_choice_is_a_usage_error_listing_the_choices(
    tmp_path: Path,
) -> None:
    program = tmp_path / "p.sql"
    program.write_text("CREATE TABLE t (n BIGINT) WITH ('topic' = 't');\n")
    result = _tidemark_wide("explain", str(program), "--format", "jsn")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "Invalid value for '--format'" in result.stderr, result.stderr
    assert "'jsn' is not one of 'text', 'json'" in result.stderr, result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("choice", ["text", "json"])
def test_each_format_choice_is_accepted(choice: str) -> None:
    program = ROOT / "pipelines" / "purchases_demo.sql"
    result = _tidemark_wide("explain", str(program), "--format", choice)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_a_bad_value_in_an_options_variable_names_the_variable(tmp_path: Path) -> None:
    program = tmp_path / "p.sql"
    program.write_text("CREATE TABLE t (n BIGINT) WITH ('topic' = 't');\n")
    result = _tidemark(
        "run", str(program), COLUMNS="400", NO_COLOR="1", TIDEMARK_METRICS_PORT="ninety"
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "TIDEMARK_METRICS_PORT" in result.stderr and "--metrics-port" in result.stderr


def test_l7_explain_says_what_run_would_refuse(tmp_path: Path) -> None:
    """A program that compiles is not yet one that runs: plain explain (text and JSON) lists
    what `tidemark run` refuses, with position and fix; a program that runs lists nothing."""
    program = tmp_path / "self.sql"
    program.write_text(
        "CREATE TABLE a (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL,"
        " t2 TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE) WITH ('topic' = 'a');\n"
        "CREATE VIEW pairs WITH ('topic' = 'pairs') AS\n"
        "SELECT x.ts, x.k, y.ts AS y_ts FROM a x JOIN a y ON x.k = y.k\n"
        "  AND y.ts BETWEEN x.t2 - INTERVAL '1' MINUTE AND x.t2 + INTERVAL '1' MINUTE;\n"
    )
    text = _tidemark_wide("explain", str(program))
    assert text.returncode == 0, text.stderr
    assert "tidemark run refuses this program" in text.stdout
    assert f"{program}:2:13: error: view pairs: a join bound on x.t2" in text.stdout
    data = _tidemark_wide("explain", str(program), "--format", "json")
    assert '"refused_by_run": [' in data.stdout and "a join bound on x.t2" in data.stdout
    runs = _tidemark_wide("explain", str(ROOT / "pipelines" / "orders_trades.sql"))
    assert runs.returncode == 0 and "refuses" not in runs.stdout
