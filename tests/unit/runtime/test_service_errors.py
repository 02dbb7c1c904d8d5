"""The service takes one Settings object, and what Spark or the file system raise reaches the
user as a Tidemark error that says what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import KafkaSecurity, Settings
from app.errors import ConfigError, SparkError
from app.program.compile import compile_text
from app.runtime.service import Service, prepare_checkpoint, query_failure

PROGRAM = (
    "CREATE TABLE t (\n  ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR\n)"
    " WITH ('topic' = 'in');\n"
)


def _settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(
        bootstrap_servers="broker:9092",
        checkpoint=tmp_path / "ck",
        kafka=KafkaSecurity(security_protocol="PLAINTEXT"),
        **values,  # type: ignore[arg-type]
    )


def test_the_service_reads_everything_from_its_settings(tmp_path: Path) -> None:
    settings = _settings(tmp_path, spark_log="file")
    service = Service(compile_text("p.sql", PROGRAM), settings)
    assert service.kafka_conf == settings.kafka_config()
    assert service.kafka_conf["bootstrap.servers"] == "broker:9092"
    assert service.checkpoint == str(tmp_path / "ck")


def test_a_writable_checkpoint_is_made(tmp_path: Path) -> None:
    prepare_checkpoint(tmp_path / "a" / "ck")
    assert (tmp_path / "a" / "ck").is_dir()
    assert list((tmp_path / "a" / "ck").iterdir()) == []


def test_a_checkpoint_under_a_file_names_the_setting(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="checkpoint directory .* is not writable.*"
                                          "TIDEMARK_CHECKPOINT"):
        prepare_checkpoint(tmp_path / "file" / "ck")


class _Failure(Exception):
    def __init__(self, desc: str) -> None:
        super().__init__(desc)
        self._desc = desc


def test_a_query_stopped_by_a_tidemark_error_shows_that_error() -> None:
    failure = _Failure(
        "[STREAM_FAILED] Query [id = 1] terminated with exception: An exception was thrown\n"
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
        "app.errors.KafkaError: the writer was fenced: another process took over\n"
    )
    error = query_failure("tidemark-t", failure, Path("/ck/spark.log"))
    assert isinstance(error, SparkError)
    assert error.__cause__ is failure
    text = str(error)
    assert "\n" not in text and "Traceback" not in text
    assert "streaming query tidemark-t stopped: the writer was fenced" in text
    assert "/ck/spark.log" in text


def test_a_query_stopped_by_spark_shows_the_first_line() -> None:
    failure = _Failure("[STREAM_FAILED] Query terminated: disk full\n\tat org.apache.Foo\n")
    text = str(query_failure("tidemark-t", failure, None))
    assert "stopped: [STREAM_FAILED] Query terminated: disk full." in text
    assert "org.apache" not in text
