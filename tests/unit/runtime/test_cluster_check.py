"""S15 at start: a program's tables and outputs all live on the service's one cluster, whose
transactions make the output exactly-once. Flink's ``'properties.bootstrap.servers'`` names a
cluster per table; ``tidemark run`` refuses one that is not its own before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import KafkaSecurity, Settings
from app.errors import ConfigError
from app.program.compile import compile_text
from app.runtime.service import Service, check_cluster


def _program(source: str, sink: str) -> str:
    return (
        "CREATE TABLE clicks (ts TIMESTAMP(3), usr STRING,\n"
        "  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND\n"
        ") WITH ('connector' = 'kafka', 'topic' = 'clicks', 'format' = 'json',\n"
        f"  'properties.bootstrap.servers' = '{source}');\n"
        "CREATE TABLE seen (ts TIMESTAMP(3), usr STRING) WITH ('connector' = 'kafka',\n"
        f"  'topic' = 'seen', 'format' = 'json', 'properties.bootstrap.servers' = '{sink}');\n"
        "INSERT INTO seen SELECT ts, usr FROM clicks;\n"
    )


def test_s15_the_servers_are_recorded_on_the_table_and_the_output() -> None:
    circuit = compile_text("p.sql", _program("a:9092", "b:9092,a:9092"))
    assert circuit.table("clicks").bootstrap_servers == "a:9092"
    output = circuit.view("seen").output
    assert output is not None and output.bootstrap_servers == "b:9092,a:9092"


@pytest.mark.parametrize("servers", ["broker:9092", "other:9092, BROKER:9092"])
def test_s15_a_table_naming_one_of_the_service_servers_runs(servers: str) -> None:
    check_cluster(compile_text("p.sql", _program(servers, servers)), "broker:9092,b2:9092")


def test_s15_another_cluster_is_refused_naming_the_table_and_both_clusters() -> None:
    circuit = compile_text("p.sql", _program("broker:9092", "elsewhere:9092"))
    with pytest.raises(ConfigError) as info:
        check_cluster(circuit, "broker:9092")
    assert str(info.value).startswith(
        "table seen names the Kafka cluster 'elsewhere:9092' ('properties.bootstrap.servers'), "
        "but the service's is 'broker:9092' (bootstrap_servers)")


def test_s15_the_service_refuses_another_cluster_before_it_starts(tmp_path: Path) -> None:
    settings = Settings(bootstrap_servers="broker:9092", checkpoint=tmp_path / "ck",
                        kafka=KafkaSecurity(security_protocol="PLAINTEXT"))
    service = Service(compile_text("p.sql", _program("...", "broker:9092")), settings)
    with pytest.raises(ConfigError, match="table clicks names the Kafka cluster '...'"):
        service.start(once=True)
    assert service.spark is None
