"""What a writing task's step marker costs, per way of keeping it (docs/adr/0016):
``python -m loadtests.marker_cost [--transactions 150] [--records 100]``.

One writing task's transaction, with its producer kept between steps as the sink keeps it
(:class:`app.connectors.sink.producers.ProducerPool`), against the real broker
(``KAFKA_BOOTSTRAP_SERVERS``, else the local one), each way in turn, round after round:

* ``group``: today's marker. Read the committed offset of group = the transactional id, begin,
  ``send_offsets_to_transaction`` of ``batch + 1`` on the dead-letter topic's partition 0,
  produce the records, commit;
* ``group+position``: the same, plus the task's input position (two partitions) committed to a
  consumer group named after the program in the same transaction (a second
  ``send_offsets_to_transaction``), so ``kafka-consumer-groups`` shows the true lag;
* ``topic``: the marker as a record of a compacted topic keyed by the transactional id,
  produced in the transaction with the records; no read per task (the driver reads the
  topic's markers once at start-up, when only the first step can be a replay);
* ``topic+position``: ``topic`` plus the input position in the program's group.

Prints one JSON line: per way, the median and 90th percentile of a transaction's wall time
(from the marker read, or begin, to the commit's return) in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

WAYS = ("group", "group+position", "topic", "topic+position")


def _task(
    way: str, conf: dict[str, str], names: dict[str, str], records: int
) -> Callable[[int], float]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    tid = f"tidemark-cost-{way}-{uuid.uuid4().hex[:8]}"
    producer = Producer(
        {**conf, "transactional.id": tid, "enable.sparse.connections": False,
         "linger.ms": 5, "acks": "all", "log_level": 3}
    )  # fmt: skip
    producer.init_transactions(60)
    marker_group = Consumer(
        {**conf, "group.id": tid, "isolation.level": "read_committed",
         "enable.auto.commit": False, "enable.sparse.connections": False, "log_level": 3}
    )  # fmt: skip
    program_group = Consumer(
        {**conf, "group.id": names["program"], "enable.auto.commit": False, "log_level": 3}
    )
    values = [b"x" * 40 for _ in range(records)]

    def step(batch: int) -> float:
        started = time.perf_counter()
        if way.startswith("group"):
            marker_group.committed([TopicPartition(names["anchor"], 0)], timeout=60)
        producer.begin_transaction()
        if way.startswith("group"):
            offset = TopicPartition(names["anchor"], 0, batch + 1, metadata="f1:" + "a" * 32)
            producer.send_offsets_to_transaction(
                [offset], marker_group.consumer_group_metadata(), 60
            )
        if way.endswith("+position"):
            position = [TopicPartition(names["input"], p, (batch + 1) * 50) for p in (0, 1)]
            producer.send_offsets_to_transaction(
                position, program_group.consumer_group_metadata(), 60
            )
        for value in values:
            producer.produce(names["output"], value=value)
        if way.startswith("topic"):
            marker = json.dumps({"batch": batch, "fingerprint": "a" * 32, "counts": []})
            producer.produce(names["markers"], key=tid.encode(), value=marker.encode())
        producer.commit_transaction(120)
        return 1000 * (time.perf_counter() - started)

    return step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transactions", type=int, default=150)
    parser.add_argument("--records", type=int, default=100)
    args = parser.parse_args()
    from confluent_kafka.admin import AdminClient, NewTopic

    from loadtests.bench import broker, create_topic

    bootstrap, local = broker()
    try:
        run = uuid.uuid4().hex[:6]
        names = {
            "input": f"cost.in.{run}",
            "output": f"cost.out.{run}",
            "anchor": f"cost.dlq.{run}",
            "markers": f"cost.markers.{run}",
            "program": f"tidemark.cost.{run}",
        }
        create_topic(bootstrap, names["input"], 2)
        create_topic(bootstrap, names["output"], 2)
        create_topic(bootstrap, names["anchor"], 1)
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
        compacted = NewTopic(names["markers"], 1, 1, config={"cleanup.policy": "compact"})
        admin.create_topics([compacted])[names["markers"]].result(30)
        conf = {"bootstrap.servers": bootstrap}
        tasks = {way: _task(way, conf, names, args.records) for way in WAYS}
        times: dict[str, list[float]] = {way: [] for way in WAYS}
        for batch in range(args.transactions):
            for way in WAYS:  # interleaved: drift in the machine's load hits every way alike
                took = tasks[way](batch)
                if batch >= 5:
                    times[way].append(took)
        figures: dict[str, Any] = {"records": args.records, "transactions": args.transactions}
        for way, values in times.items():
            ordered = sorted(values)
            figures[way] = {
                "median_ms": round(statistics.median(ordered), 2),
                "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
            }
        print(json.dumps(figures))
    finally:
        if local is not None:
            local.cleanup()


if __name__ == "__main__":
    main()
