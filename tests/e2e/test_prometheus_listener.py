"""The query listener and the input-lag probe against real Spark and a real Kafka broker.

A real Structured Streaming query with a windowed aggregate (one stateful operator) runs with
:class:`TidemarkQueryListener` registered; a real Prometheus scrapes the metrics, and the checks
go through its query API: state rows per view (SPEC S11), step durations (S1), query up/down.
:class:`InputLagProbe` reads high watermarks from a real broker (``app.local_kafka``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus import PrometheusServer, prometheus_server  # noqa: F401

from app.observability.listener import InputLagProbe, ProgressListener, TidemarkQueryListener
from app.observability.metrics import TidemarkMetrics
from app.observability.server import MetricsServer

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from app.runtime.session import spark_session

    session = spark_session("local[2]", shuffle_partitions=2,
                            local_dir=tmp_path_factory.mktemp("spark-local"))
    yield session
    session.stop()


def test_s11_state_rows_per_view_step_durations_and_query_up_from_a_real_spark_query(
    spark: object,
    tmp_path: Path,
    prometheus_server: Callable[..., PrometheusServer],  # noqa: F811
) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    assert isinstance(spark, SparkSession)
    metrics = TidemarkMetrics()
    listener = TidemarkQueryListener(metrics, {"tidemark-rates": ["per_second"]})
    spark.streams.addListener(listener)
    query = None
    try:
        with MetricsServer(metrics.registry, lambda: (listener.queries_running(), "query"),
                           port=0, host="127.0.0.1") as server:
            prom = prometheus_server([f"127.0.0.1:{server.port}"])
            per_second = (
                spark.readStream.format("rate").option("rowsPerSecond", 50).load()
                .withWatermark("timestamp", "2 seconds")
                .groupBy(F.window("timestamp", "1 second"), (F.col("value") % 7).alias("k"))
                .count()
            )
            query = (
                per_second.writeStream.format("noop").outputMode("append")
                .queryName("tidemark-rates")
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(processingTime="500 milliseconds")
                .start()
            )
            prom.wait_for_scrape()
            prom.wait_for('tidemark_query_up{query="tidemark-rates"} == 1')
            rows = prom.wait_for('tidemark_state_rows{view="per_second"} > 0', timeout_seconds=90)
            assert [r["metric"]["view"] for r in rows] == ["per_second"]
            prom.wait_for('tidemark_state_bytes{view="per_second"} > 0')
            prom.wait_for("tidemark_step_duration_seconds_count >= 3", timeout_seconds=60)
            assert listener.queries_running()
            query.stop()
            query = None
            prom.wait_for('tidemark_query_up{query="tidemark-rates"} == 0', timeout_seconds=30)
            assert not listener.queries_running()
    finally:
        if query is not None:
            query.stop()
        spark.streams.removeListener(listener)


def test_a_progress_listener_gets_the_progress_the_query_reports(
    spark: object, tmp_path: Path
) -> None:
    """ProgressListener builds its events from each progress's JSON, not field by field over
    py4j: the events must carry what the query itself reports for those steps, state
    operators and source offsets (as the JSON strings PySpark's own events give) included."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    assert isinstance(spark, SparkSession)
    seen: list[StreamingQueryProgress] = []

    class Recorder(ProgressListener):
        def onQueryStarted(self, event: object) -> None:  # noqa: N802 - Spark's name
            return None

        def onQueryProgress(self, event: object) -> None:  # noqa: N802
            seen.append(event.progress)  # type: ignore[attr-defined]

        def onQueryTerminated(self, event: object) -> None:  # noqa: N802
            return None

    recorder = Recorder()
    spark.streams.addListener(recorder)
    query = (
        spark.readStream.format("rate").option("rowsPerSecond", 50).load()
        .withWatermark("timestamp", "2 seconds")
        .groupBy(F.window("timestamp", "1 second"), (F.col("value") % 7).alias("k"))
        .count()
        .writeStream.format("noop").outputMode("append")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        query.stop()
    finally:
        if query.isActive:
            query.stop()
        spark.streams.removeListener(recorder)
    reported = {p.batchId: json.loads(p.json) for p in query.recentProgress}
    assert len(seen) >= 4
    for progress in seen:
        assert json.loads(progress.json) == reported[progress.batchId]
        assert isinstance(progress.sources[0].endOffset, str)
        json.loads(progress.sources[0].endOffset)
    assert any(p.stateOperators and p.stateOperators[0].numRowsTotal > 0 for p in seen)


def test_input_lag_is_end_offset_minus_processed_offset_from_a_real_broker() -> None:
    from app.local_kafka import LocalKafka

    with LocalKafka() as kafka:
        conf = {"bootstrap.servers": kafka.bootstrap_servers, **kafka.client_config()}
        admin = AdminClient(conf)
        for future in admin.create_topics([NewTopic("lag-probe", num_partitions=2)]).values():
            future.result(timeout=30)
        producer = Producer(conf)
        for i in range(30):
            producer.produce("lag-probe", value=b"x", partition=0 if i < 20 else 1)
        assert producer.flush(30) == 0
        metrics = TidemarkMetrics()
        probe = InputLagProbe(metrics, conf, timeout_seconds=5)
        try:
            assert probe.observe({"lag-probe": {"0": 5, "1": 10}}) == {
                ("lag-probe", 0): 15, ("lag-probe", 1): 0}
        finally:
            probe.close()
        assert metrics.registry.get_sample_value(
            "tidemark_input_lag_records", {"topic": "lag-probe", "partition": "0"}) == 15
        unknown = InputLagProbe(metrics, conf, timeout_seconds=1)
        started = time.monotonic()
        try:
            assert unknown.observe({"no-such-topic": {"0": 0}}) == {}  # logged, never raised
        finally:
            unknown.close()
        assert time.monotonic() - started < 10
