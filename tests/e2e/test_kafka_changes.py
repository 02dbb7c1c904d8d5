"""Changes on the Kafka side while a checkpoint waits or a run goes on, over the real broker
and Spark: records deleted before a step read them (retention) stop the run with an error
naming them, unless skipping is asked for, which counts them; partitions added to an input
topic are read.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.errors import SparkError
from app.observability.listener import TidemarkQueryListener
from app.observability.metrics import TidemarkMetrics
from app.program.compile import compile_program
from app.runtime.service import Service

pytestmark = pytest.mark.e2e

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,
    sensor  BIGINT NOT NULL
) WITH ('topic' = '{topic}', 'dead_letter' = '{dlq}');

CREATE VIEW everything WITH ('topic' = '{out}', 'format' = 'append') AS
SELECT ts, sensor FROM reading;
"""

BASE_MS = 1_700_000_000_000


class Pipeline:
    """The program on test topics, its codecs and a producer of its input."""

    def __init__(self, kafka: Any, unique_topic: Any, tmp_path: Path, partitions: int) -> None:
        from confluent_kafka import Producer

        self.kafka = kafka
        self.topic = kafka.create_topic(unique_topic("in"), partitions)
        self.out = unique_topic("out")
        program = tmp_path / "changes.sql"
        program.write_text(PROGRAM.format(topic=self.topic, dlq=unique_topic("dlq"), out=self.out))
        self.circuit = compile_program(program)
        self.codec = AvroCodec(self.circuit.table("reading").avro_schema)
        view = self.circuit.view("everything").output
        assert view is not None
        self.out_codec = AvroCodec(view.value_schema)
        self.producer = Producer({**kafka.conf(), "log_level": 3})
        self.checkpoint = tmp_path / "checkpoint"

    def produce(self, sensors: range, partition: int = 0) -> None:
        for i in sensors:
            value = self.codec.encode({"ts": BASE_MS + i, "sensor": i})
            self.producer.produce(self.topic, value=value, partition=partition)
        assert self.producer.flush(30) == 0

    def run_once(self, metrics: TidemarkMetrics | None = None, **settings: Any) -> None:
        service = Service(
            self.circuit, self.kafka.settings(self.checkpoint, shuffle_partitions=2, **settings)
        )
        listener = None
        if metrics is not None:
            listener = TidemarkQueryListener(
                metrics, service.state_views(), None, service.query_topics()
            )
        try:
            service.start(once=True, listener=listener)
            service.wait(timeout_seconds=300)
        finally:
            if listener is not None and service.spark is not None:
                service.spark.streams.removeListener(listener)

    def written(self) -> list[int]:
        return sorted(
            self.out_codec.decode(m.value())["sensor"]
            for m in read_topic(self.kafka.conf(), self.out)
        )


def _written_within(
    pipeline: Pipeline, service: Service, expected: list[int], seconds: float = 180
) -> list[int]:
    """What the pipeline wrote once it is ``expected`` or ``seconds`` passed; the service's
    queries must not fail meanwhile."""
    deadline = time.monotonic() + seconds
    found = pipeline.written()
    while found != expected and time.monotonic() < deadline:
        assert all(q.exception() is None for q in service.queries)
        time.sleep(1.0)
        found = pipeline.written()
    return found


def _delete_records(kafka: Any, topic: str, partition: int, before: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    admin = AdminClient({**kafka.conf(), "log_level": 3})
    done = admin.delete_records([TopicPartition(topic, partition, before)])
    for future in done.values():
        assert future.result().low_watermark == before


def test_records_deleted_past_the_checkpoint_fail_loudly_unless_skipped_and_counted(
    kafka: Any, unique_topic: Any, tmp_path: Path
) -> None:
    pipeline = Pipeline(kafka, unique_topic, tmp_path, partitions=1)
    pipeline.produce(range(5))
    pipeline.run_once()
    assert pipeline.written() == list(range(5))
    # Offsets 5-9 are produced; retention takes 5-7 before the next run read them.
    pipeline.produce(range(5, 10))
    _delete_records(kafka, pipeline.topic, 0, 8)
    with pytest.raises(SparkError) as failed:
        pipeline.run_once()
    text = str(failed.value)
    assert (
        f"records of topic {pipeline.topic} (table reading) were deleted before this run"
        " read them: partition 0: offsets 5 to 7 (3)"
    ) in text, text
    assert "TIDEMARK_FAIL_ON_DATA_LOSS=false" in text
    assert pipeline.written() == list(range(5)), "nothing written by the failed run"

    metrics = TidemarkMetrics()
    pipeline.run_once(metrics, fail_on_data_loss=False)
    assert pipeline.written() == [*range(5), 8, 9]
    deadline = time.monotonic() + 20  # the listener hears of the step asynchronously
    labels = {"topic": pipeline.topic}
    while time.monotonic() < deadline:
        if metrics.registry.get_sample_value("tidemark_input_skipped_offsets_total", labels):
            break
        time.sleep(0.2)
    assert metrics.registry.get_sample_value("tidemark_input_skipped_offsets_total", labels) == 3


def test_a_2_mib_dead_letter_into_a_1_mib_topic_is_cut_to_fit_and_the_service_goes_on_s7(
    kafka: Any, unique_topic: Any, tmp_path: Path
) -> None:
    import hashlib

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic, dlq, out = unique_topic("in"), unique_topic("dlq"), unique_topic("out")
    admin = AdminClient({**kafka.conf(), "log_level": 3})
    created = admin.create_topics(
        [
            NewTopic(topic, 1, 1, config={"max.message.bytes": str(4 * 1024 * 1024)}),
            NewTopic(dlq, 1, 1, config={"max.message.bytes": "1048576"}),
        ]
    )
    for future in created.values():
        future.result(30)
    program = tmp_path / "oversize.sql"
    program.write_text(PROGRAM.format(topic=topic, dlq=dlq, out=out))
    circuit = compile_program(program)
    codec = AvroCodec(circuit.table("reading").avro_schema)
    huge = b"\xff" + bytes(range(256)) * 8192  # 2 MiB and a byte: not a record of the table
    producer = Producer({**kafka.conf(), "log_level": 3, "message.max.bytes": 8 * 1024 * 1024})
    for i in range(3):
        producer.produce(topic, value=codec.encode({"ts": BASE_MS + i, "sensor": i}))
    producer.produce(topic, key=b"huge", value=huge, headers=[("origin", b"test")])
    for i in range(3, 6):
        producer.produce(topic, value=codec.encode({"ts": BASE_MS + i, "sensor": i}))
    assert producer.flush(30) == 0

    service = Service(circuit, kafka.settings(tmp_path / "checkpoint", shuffle_partitions=2))
    service.start(once=True)
    service.wait(timeout_seconds=300)

    dead = read_topic(kafka.conf(), dlq)
    assert len(dead) == 1
    letter = dead[0]
    headers = dict(letter.headers())
    assert headers["tidemark.error.reason"] == b"malformed"
    assert headers["tidemark.error.truncated"] == b"value"
    assert headers["tidemark.error.original.size"] == str(len(huge)).encode()
    assert headers["tidemark.error.original.sha256"] == hashlib.sha256(huge).hexdigest().encode()
    assert headers["origin"] == b"test" and letter.key() == b"huge"
    assert headers["tidemark.source.offset"] == b"3"
    assert huge.startswith(letter.value()) and 1_000_000 < len(letter.value()) < 1048576
    view = circuit.view("everything").output
    assert view is not None
    out_codec = AvroCodec(view.value_schema)
    written = sorted(out_codec.decode(m.value())["sensor"] for m in read_topic(kafka.conf(), out))
    assert written == list(range(6)), "the records after the dead letter are written too"


def test_partitions_added_to_the_input_topic_mid_run_are_read(
    kafka: Any, unique_topic: Any, tmp_path: Path
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]

    pipeline = Pipeline(kafka, unique_topic, tmp_path, partitions=1)
    pipeline.produce(range(3))
    service = Service(
        pipeline.circuit,
        kafka.settings(pipeline.checkpoint, shuffle_partitions=2, trigger_interval="500ms"),
    )

    service.start()
    try:
        assert _written_within(pipeline, service, list(range(3))) == list(range(3))
        admin = AdminClient({**kafka.conf(), "log_level": 3})
        added = admin.create_partitions([NewPartitions(pipeline.topic, 3)])
        for future in added.values():
            future.result(30)
        # A producer that knows the new partitions (the first one's metadata is older).
        pipeline.producer = Producer({**kafka.conf(), "log_level": 3})
        topic = pipeline.topic
        while len(pipeline.producer.list_topics(topic).topics[topic].partitions) < 3:
            time.sleep(0.2)
        pipeline.produce(range(3, 6), partition=1)
        pipeline.produce(range(6, 9), partition=2)
        assert _written_within(pipeline, service, list(range(9))) == list(range(9))
    finally:
        service.stop()


def test_an_output_topic_deleted_mid_run_stops_the_service_with_a_clear_error(
    kafka: Any, unique_topic: Any, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    pipeline = Pipeline(kafka, unique_topic, tmp_path, partitions=1)
    pipeline.produce(range(3))
    service = Service(
        pipeline.circuit,
        kafka.settings(pipeline.checkpoint, shuffle_partitions=2, trigger_interval="500ms"),
    )
    service.start()
    try:
        assert _written_within(pipeline, service, list(range(3))) == list(range(3))
        admin = AdminClient({**kafka.conf(), "log_level": 3})
        for future in admin.delete_topics([pipeline.out]).values():
            future.result(30)
        deleted = time.monotonic()
        pipeline.produce(range(3, 6))
        while time.monotonic() - deleted < 200:
            if any(q.exception() is not None for q in service.queries):
                break
            time.sleep(0.5)
        seconds = time.monotonic() - deleted
        print(f"output topic deleted: the query stopped after {seconds:.1f} s")
        with pytest.raises(SparkError) as failed:
            service.stop()
    finally:
        service.stop()
    assert f"topic(s) {pipeline.out} do not exist" in str(failed.value)
    assert seconds < 120, "no retry loop"
