"""A service run continuously on real time, for what Spark's clock decides: steps without
input, processing-time timeouts, batch times (EMIT AFTER DELAY, PROCTIME, NOW()).

The test produces rows to the program's one table, recording where each landed (partition,
offset); Spark's offset log then says which rows each step read and at what batch time, so the
reference evaluator can be fed exactly the steps Spark ran (:meth:`ClockedRun.reference`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from spark_offset_log import Batch, spark_batches

from app.circuit.ir import Circuit
from app.circuit.reference import Reference, StepInput, StepResult
from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport


class ClockedRun:
    """The service over ``program`` (``table`` its one table, read from ``topics["topic"]``),
    stepping every second; input produced with its (partition, offset) recorded."""

    def __init__(self, kafka: Any, tmp_path: Path, program: str, table: str,
                 topics: dict[str, str],
                 on_step: Callable[[StepReport], None] | None = None) -> None:
        path = tmp_path / f"{table}.sql"
        path.write_text(program, encoding="utf-8")
        self.circuit: Circuit = compile_program(path)
        self.table = table
        self.codec = AvroCodec(self.circuit.table(table).avro_schema)
        self.topics = topics
        self.kafka_conf = kafka.conf()
        self.producer = Producer({**kafka.conf(), "log_level": 3})
        self.placed: list[tuple[int, int, dict[str, Any]]] = []
        self.checkpoint = tmp_path / "ck"
        self.service = Service(
            self.circuit,
            kafka.settings(self.checkpoint, shuffle_partitions=2, trigger_interval="1000ms"),
            on_step=on_step,
        )

    def produce_rows(self, rows: list[dict[str, Any]], partition: int) -> None:
        """The rows to one partition, in order, as one record batch."""
        for row in rows:

            def delivered(err: Any, msg: Any, row: dict[str, Any] = row) -> None:
                assert err is None, err
                self.placed.append((msg.partition(), msg.offset(), row))

            self.producer.produce(self.topics["topic"], value=self.codec.encode(row),
                                  partition=partition, on_delivery=delivered)
        assert self.producer.flush(30) == 0

    def batches(self) -> list[Batch]:
        return spark_batches(self.checkpoint / self.table / "spark", written=set())

    def wait(self, what: str, condition: Callable[[], bool], seconds: float = 240) -> None:
        deadline = time.monotonic() + seconds
        while not condition():
            for query in self.service.queries:
                if query.exception() is not None:
                    raise AssertionError(f"query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; batches {self.batches()}")
            time.sleep(0.2)

    def read_all(self) -> int:
        """The first committed step whose end offsets include every record produced so far
        (-1: none yet)."""
        wanted: dict[int, int] = {}
        for p, o, _ in self.placed:
            wanted[p] = max(wanted.get(p, 0), o + 1)
        for batch in self.batches():
            if all(batch.ends.get(p, 0) >= o for p, o in wanted.items()):
                return batch.batch_id
        return -1

    def records(self, view: str) -> list[tuple[Any, Any]]:
        """The view's topic, decoded: (key, value) per record, None for a null one."""
        out = self.circuit.view(view).output
        assert out is not None
        key_codec = AvroCodec(out.key_schema) if out.key_schema else None
        value_codec = AvroCodec(out.value_schema)
        found = []
        for msg in read_topic(self.kafka_conf, self.topics[view]):
            key = key_codec.decode(msg.key()) if key_codec and msg.key() is not None else None
            value = value_codec.decode(msg.value()) if msg.value() is not None else None
            found.append((key, value))
        return found

    @staticmethod
    def expected(view: str, results: list[StepResult]) -> list[tuple[Any, Any]]:
        """The oracle's records of ``view`` as :meth:`records` reads them, steps in order."""
        return [
            (None if r.key is None else dict(r.key), None if r.value is None else dict(r.value))
            for result in results
            for r in result.outputs[view]
        ]

    def reference(self, batches: list[Batch]) -> list[StepResult]:
        """The oracle fed Spark's steps: each step's rows (by offset range) and batch time."""
        reference = Reference(self.circuit)
        results = []
        previous: dict[int, int] = {}
        for batch in batches:
            rows = sorted(
                (p, o, row)
                for p, o, row in self.placed
                if previous.get(p, 0) <= o < batch.ends.get(p, 0)
            )
            results.append(reference.step(StepInput(
                rows={self.table: [r for _, _, r in rows]}, batch_time_ms=batch.time_ms)))
            previous = batch.ends
        return results
