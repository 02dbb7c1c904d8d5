"""Where Spark's own logs go: the log4j2 configuration Tidemark writes for the driver JVM, the
JVM options that point at it (an operator's configuration in SPARK_CONF_DIR stays in charge),
and the py4j/pyspark Python loggers."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.observability.logging import (
    SPARK_PYTHON_LOGGERS,
    jvm_output_path,
    route_spark_python_logs,
    spark_log4j2_properties,
    write_spark_log4j2_config,
)
from app.runtime.session import (
    COORDINATOR_JAVA_OPTIONS,
    driver_java_options,
    operator_log4j2_config,
)


def _properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and line[0] not in "#!")
    return {key.strip(): value.strip() for key, value in pairs}


def test_the_jvm_logs_to_a_rolled_file_at_warn(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "spark.log"
    props = _properties(spark_log4j2_properties(log_file))
    assert props["appender.file.type"] == "RollingFile"
    assert props["appender.file.fileName"] == str(log_file)
    assert props["appender.file.filePattern"] == f"{log_file}.%i"
    assert props["appender.file.policies.size.type"] == "SizeBasedTriggeringPolicy"
    assert props["rootLogger.level"] == "warn"
    assert props["rootLogger.appenderRef.file.ref"] == "file"
    # Nothing of it goes to a console appender.
    assert not any("console" in key.lower() or "Console" in v for key, v in props.items())


def test_a_relative_log_file_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    props = _properties(spark_log4j2_properties(Path("var/spark.log")))
    assert props["appender.file.fileName"] == str(tmp_path / "var" / "spark.log")


def test_backslashes_in_the_path_survive_java_properties_escaping(tmp_path: Path) -> None:
    text = spark_log4j2_properties(tmp_path / "a\\b" / "spark.log")
    assert f"fileName = {tmp_path}/a\\\\b/spark.log" in text


def test_the_configuration_is_written_beside_the_log_file(tmp_path: Path) -> None:
    log_file = tmp_path / "new" / "spark.log"
    config = write_spark_log4j2_config(log_file)
    assert config == tmp_path / "new" / "spark-log4j2.properties"
    assert config.read_text() == spark_log4j2_properties(log_file)
    assert [p.name for p in config.parent.iterdir()] == [config.name]  # no temporary left
    assert jvm_output_path(log_file) == tmp_path / "new" / "spark.out"


def test_driver_options_point_log4j2_at_the_written_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    log_file = tmp_path / "with space" / "spark.log"
    options = shlex.split(driver_java_options(rows_in_jvm=False, spark_log=log_file))
    config = log_file.with_name("spark-log4j2.properties")
    assert options == [COORDINATOR_JAVA_OPTIONS, f"-Dlog4j2.configurationFile={config}"]
    assert config.is_file()
    assert driver_java_options(rows_in_jvm=True, spark_log=None) == ""
    assert driver_java_options(rows_in_jvm=False, spark_log=None) == COORDINATOR_JAVA_OPTIONS


def test_an_operators_log4j2_configuration_stays_in_charge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    assert operator_log4j2_config() is None
    (conf / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    assert operator_log4j2_config() is None
    (conf / "log4j2.properties").write_text("rootLogger.level = info\n")
    assert operator_log4j2_config() == conf / "log4j2.properties"
    log_file = tmp_path / "logs" / "spark.log"
    assert driver_java_options(rows_in_jvm=True, spark_log=log_file) == ""
    assert not log_file.with_name("spark-log4j2.properties").exists()


def _file_handlers(name: str) -> list[logging.Handler]:
    return [h for h in logging.getLogger(name).handlers if isinstance(h, logging.FileHandler)]


@pytest.fixture
def _restore_spark_loggers() -> Iterator[None]:
    saved = {
        name: (logging.getLogger(name).level, logging.getLogger(name).propagate)
        for name in SPARK_PYTHON_LOGGERS
    }
    yield None
    route_spark_python_logs(None)
    for name, (level, propagate) in saved.items():
        logging.getLogger(name).setLevel(level)
        logging.getLogger(name).propagate = propagate


@pytest.mark.usefixtures("_restore_spark_loggers")
def test_py4j_and_pyspark_loggers_write_to_the_file_not_the_console(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_file = tmp_path / "spark.log"
    route_spark_python_logs(log_file)
    route_spark_python_logs(log_file)  # twice: still one handler each
    logging.getLogger("py4j.clientserver").warning("gateway went away")
    logging.getLogger("pyspark").info("chatter below WARNING")
    logging.getLogger("tidemark.demo").warning("not Spark's")
    for name in SPARK_PYTHON_LOGGERS:
        assert len(_file_handlers(name)) == 1
    text = log_file.read_text()
    assert "WARNING py4j.clientserver: gateway went away" in text
    assert "chatter" not in text and "not Spark's" not in text
    assert "gateway went away" not in capsys.readouterr().err
    route_spark_python_logs(None)
    assert all(logging.getLogger(n).propagate for n in SPARK_PYTHON_LOGGERS)
    assert all(not _file_handlers(n) for n in SPARK_PYTHON_LOGGERS)


@pytest.mark.usefixtures("_restore_spark_loggers")
def test_the_python_handler_follows_the_file_when_log4j2_rolls_it(tmp_path: Path) -> None:
    log_file = tmp_path / "spark.log"
    route_spark_python_logs(log_file)
    logging.getLogger("py4j").warning("before the roll")
    log_file.rename(tmp_path / "spark.log.1")
    logging.getLogger("py4j").warning("after the roll")
    assert "after the roll" in log_file.read_text()
    assert "after the roll" not in (tmp_path / "spark.log.1").read_text()
