"""``spark_log`` / ``spark_log_file``: flags > TIDEMARK_* environment > YAML file > defaults,
validated like every other setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import load_settings
from app.errors import ConfigError


@pytest.fixture(autouse=True)
def _no_tidemark_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TIDEMARK_SPARK_LOG", "TIDEMARK_SPARK_LOG_FILE", "TIDEMARK_CONFIG",
                 "TIDEMARK_CHECKPOINT"):
        monkeypatch.delenv(name, raising=False)


def test_by_default_spark_logs_to_a_file_in_the_checkpoint() -> None:
    settings = load_settings(None)
    assert settings.spark_log == "file"
    assert settings.spark_log_path == Path("var/checkpoint/spark.log")
    assert load_settings(None, checkpoint=Path("/ck")).spark_log_path == Path("/ck/spark.log")


def test_console_sends_spark_logs_back_to_the_console() -> None:
    settings = load_settings(None, spark_log="console", spark_log_file=Path("/x/spark.log"))
    assert settings.spark_log_path is None


def test_flags_beat_environment_beat_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tidemark.yaml"
    config.write_text("spark_log: console\nspark-log-file: /from/yaml.log\n")
    assert load_settings(config).spark_log_path is None
    assert load_settings(config, spark_log="file").spark_log_path == Path("/from/yaml.log")
    monkeypatch.setenv("TIDEMARK_SPARK_LOG", "file")
    monkeypatch.setenv("TIDEMARK_SPARK_LOG_FILE", "/from/env.log")
    assert load_settings(config).spark_log_path == Path("/from/env.log")
    assert load_settings(config, spark_log_file=Path("/flag.log")).spark_log_path == Path(
        "/flag.log"
    )


def test_an_unknown_value_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEMARK_SPARK_LOG", "stdout")
    with pytest.raises(ConfigError, match="spark_log"):
        load_settings(None)
