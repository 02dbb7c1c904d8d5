"""Where a new checkpoint starts reading a table's topic ('scan.startup.mode'), through the
real broker and Spark, two ``--once`` runs of one service:

    table    mode                          before run 1 (Kafka time)      run 1 reads   run 2
    late     latest-offset                 n=1, n=2                       nothing       n=3 (sent
                                                                                        after run 1)
    stamped  timestamp, T0 + 1000 ms       p0: T0, T0+2000; p1: T0+500,   T0+1500,      n=13 (sent
                                           T0+1500                        T0+2000       after run 1)

Run 2 continues from the checkpoint's offsets: the start position is for a new checkpoint
only. The reference evaluator sees what each step is fed; here it is fed the rows each run
reads, and the outputs agree.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.circuit.reference import StepInput, evaluate
from app.connectors.avro_codec import AvroCodec
from app.connectors.kafka_offsets import partition_ends, startup_offsets
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_text
from app.runtime.service import Service

pytestmark = pytest.mark.e2e

#: The Kafka time of the first record: recent, since the broker's retention deletes records
#: by their timestamp (a week by default).
T0 = (int(time.time() * 1000) // 60_000 - 10) * 60_000


def _program(late_in: str, stamped_in: str, late_out: str, stamped_out: str) -> Any:
    table = (
        "CREATE TABLE {name} (\n"
        "  ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,\n"
        "  n BIGINT NOT NULL\n"
        ") WITH ('topic' = '{topic}', {options});\n"
        "CREATE VIEW {name}_rows WITH ('topic' = '{out}') AS SELECT ts, n FROM {name};\n"
    )
    return compile_text(
        "p.sql",
        table.format(name="late", topic=late_in, out=late_out,
                     options="'scan.startup.mode' = 'latest-offset'")
        + table.format(name="stamped", topic=stamped_in, out=stamped_out,
                       options="'scan.startup.mode' = 'timestamp', "
                       f"'scan.startup.timestamp-millis' = '{T0 + 1000}'"),
    )


def _values(kafka: Any, circuit: Any, view: str, topic: str) -> Counter[int]:
    output = circuit.view(view).output
    codec = AvroCodec(output.value_schema)
    return Counter(codec.decode(m.value())["n"] for m in read_topic(kafka.conf(), topic))


def test_a_new_checkpoint_starts_at_the_declared_position(
    kafka: Any, unique_topic: Callable[[str], str], tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    late_in = kafka.create_topic(unique_topic("late"), 2)
    stamped_in = kafka.create_topic(unique_topic("stamped"), 2)
    late_out, stamped_out = unique_topic("late-out"), unique_topic("stamped-out")
    circuit = _program(late_in, stamped_in, late_out, stamped_out)
    codec = AvroCodec(circuit.table("late").avro_schema)
    producer = Producer({**kafka.conf(), "log_level": 3})

    def send(topic: str, n: int, partition: int, kafka_time: int) -> dict[str, int]:
        row = {"ts": T0 + n * 1000, "n": n}
        producer.produce(topic, value=codec.encode(row), partition=partition,
                         timestamp=kafka_time)
        return row

    for n in (1, 2):
        send(late_in, n, n % 2, T0)
    stamped = [(0, T0, 10), (0, T0 + 2000, 11), (1, T0 + 500, 12), (1, T0 + 1500, 14)]
    sent = {n: send(stamped_in, n, p, t) for p, t, n in stamped}
    assert producer.flush(30) == 0

    service = Service(circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2))
    service.start(once=True)
    service.wait(timeout_seconds=300)
    assert _values(kafka, circuit, "late_rows", late_out) == Counter()
    assert _values(kafka, circuit, "stamped_rows", stamped_out) == Counter({11: 1, 14: 1})

    after = [send(late_in, 3, 0, T0), send(stamped_in, 13, 1, T0)]  # an earlier Kafka time
    assert producer.flush(30) == 0
    service.start(once=True)
    service.wait(timeout_seconds=300)
    assert _values(kafka, circuit, "late_rows", late_out) == Counter({3: 1})
    assert _values(kafka, circuit, "stamped_rows", stamped_out) == Counter(
        {11: 1, 14: 1, 13: 1})
    # Each query's input position, for lag tools: the end offsets of what its steps read.
    positions = {
        circuit.table(q.tables[0]).topic: f"tidemark.program.{q.name}"
        for q in service.physical.queries
    }
    assert _position(kafka, positions[stamped_in], stamped_in) == {0: 2, 1: 3}
    assert _position(kafka, positions[late_in], late_in) == {0: 2}

    steps = [
        StepInput(rows={"late": [], "stamped": [sent[11], sent[14]]}),
        StepInput(rows={"late": [after[0]], "stamped": [after[1]]}),
    ]
    oracle = Counter(
        (view, r.value["n"])
        for result in evaluate(circuit, steps)
        for view, records in result.outputs.items()
        for r in records
        if r.value is not None
    )
    assert oracle == Counter({("stamped_rows", 11): 1, ("stamped_rows", 14): 1,
                              ("late_rows", 3): 1, ("stamped_rows", 13): 1})


def _position(kafka: Any, group: str, topic: str) -> dict[int, int]:
    """The offsets of ``topic`` committed to ``group`` once they stop changing (the step
    sink commits them asynchronously after each step)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**kafka.conf(), "log_level": 3})
    parts = [TopicPartition(topic, p) for p in range(2)]
    seen: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        request = [ConsumerGroupTopicPartitions(group, parts)]
        result = admin.list_consumer_group_offsets(request)[group].result(30)
        now = {t.partition: t.offset for t in result.topic_partitions if t.offset >= 0}
        if now and now == seen:
            return now
        seen = now
        time.sleep(1.0)
    return seen


def test_start_offsets_of_each_mode_on_the_broker(
    kafka: Any, unique_topic: Callable[[str], str]
) -> None:
    from confluent_kafka import Producer

    topic = kafka.create_topic(unique_topic("in"), 2)
    producer = Producer({**kafka.conf(), "log_level": 3})
    for partition, kafka_time in [(0, T0), (0, T0 + 2000), (1, T0 + 500), (1, T0 + 1500)]:
        producer.produce(topic, value=b"x", partition=partition, timestamp=kafka_time)
    assert producer.flush(30) == 0
    ends = partition_ends(kafka.conf(), topic, "t")
    assert ends == {0: (0, 2), 1: (0, 2)}
    starts = {
        (mode, ms): startup_offsets(kafka.conf(), topic, "t", ends, mode, ms)
        for mode, ms in [("earliest-offset", None), ("latest-offset", None),
                         ("timestamp", T0 + 1000), ("timestamp", T0), ("timestamp", T0 + 5000)]
    }
    assert list(starts.values()) == [
        {0: 0, 1: 0}, {0: 2, 1: 2}, {0: 1, 1: 1}, {0: 0, 1: 0}, {0: 2, 1: 2}
    ]
