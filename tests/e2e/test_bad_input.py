"""Bad input never stops the service (SPEC S6, S7), over the real broker and Spark.

Every kind of bad record is sent between good ones; each must reach the dead-letter topic once,
with its reason, a readable message, the S6 source headers, and its key, value and headers
unchanged, while every good row reaches the output and a second step still runs. A missing input
topic at start-up is one clear error from ``tidemark run`` (exit 2, no stack trace), or a wait
when ``TIDEMARK_WAIT_FOR_TOPICS_SECONDS`` is set.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import fastavro
import pytest

from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    sensor  BIGINT NOT NULL,
    qty     INT,
    label   VARCHAR,
    amount  DOUBLE NOT NULL
) WITH ('topic' = '{topic}', 'dead_letter' = '{dlq}', 'max_future' = INTERVAL '1' HOUR);

CREATE VIEW everything WITH ('topic' = '{out}', 'format' = 'append') AS
SELECT ts, sensor, qty, label, amount FROM reading;
"""


def _writer(schema: dict[str, Any], changes: dict[str, Any], extra: list[Any]) -> Any:
    """The table's record schema as another producer might have it."""
    fields = [{**f, "type": changes.get(f["name"], f["type"])} for f in schema["fields"]]
    return fastavro.parse_schema({**schema, "fields": fields + extra})


def _write(parsed: Any, record: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, record)
    return buffer.getvalue()


def test_every_kind_of_bad_record_is_a_dead_letter_and_good_rows_flow_s6_s7(
    kafka: Any, unique_topic: Any, tmp_path: Path
) -> None:
    names = {k: unique_topic(k) for k in ("in", "dlq", "out")}
    kafka.create_topic(names["in"], partitions=2)
    program = tmp_path / "bad.sql"
    program.write_text(PROGRAM.format(topic=names["in"], dlq=names["dlq"], out=names["out"]))
    circuit = compile_program(program)
    table = circuit.table("reading")
    codec = AvroCodec(table.avro_schema)
    now = int(time.time() * 1000)
    base = now - 600_000  # ten minutes ago: well inside max_future

    def good(i: int, label: str = "ok") -> bytes:
        return codec.encode({"ts": base + i * 100, "sensor": i, "qty": i, "label": label,
                             "amount": i / 2})

    raw = table.avro_schema
    bad: dict[str, tuple[str, bytes | None, str]] = {
        # name: (expected reason, value bytes, words the message must contain)
        "garbage": ("malformed", b"\x00\xff\xfe not avro at all \x81", "Avro schema"),
        "other_schema": (
            "malformed",
            _write(
                _writer(raw, {}, [{"name": "extra", "type": "string"}]),
                {"ts": base, "sensor": 1, "qty": 1, "label": "x", "amount": 1.0,
                 "extra": "more fields"},
            ),
            "another schema",
        ),
        # Written by a producer whose schema makes the NOT NULL column nullable. (A null in a
        # NOT NULL BIGINT or VARCHAR reads as 0 or '' in schemaless Avro: see reliability.md.)
        "null_not_null": (
            "invalid",
            _write(
                _writer(raw, {"amount": ["null", "double"]}, []),
                {"ts": base, "sensor": 1, "qty": 1, "label": "x", "amount": None},
            ),
            "amount is NOT NULL",
        ),
        "wrong_type": (
            "malformed",
            _write(
                _writer(raw, {"sensor": "string"}, []),
                {"ts": base, "sensor": "forty-two", "qty": 1, "label": "x", "amount": 1.0},
            ),
            "Avro schema",
        ),
        "int_overflow": (
            "invalid",
            _write(
                _writer(raw, {"qty": ["null", "long"]}, []),
                {"ts": base, "sensor": 1, "qty": 2**40, "label": "x", "amount": 1.0},
            ),
            "32-bit range",
        ),
        "empty_value": ("malformed", None, "tidemark.bound"),
        "far_future": (
            "future",
            codec.encode(
                {"ts": now + 2 * 3_600_000, "sensor": 9, "qty": 9, "label": "x", "amount": 1.0}
            ),
            "ahead of the wall clock",
        ),
        "oversized": ("malformed", os.urandom(3 * 1024 * 1024), "Avro schema"),
    }
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3, "message.max.bytes": 10485760})
    good_sent: list[int] = []
    i = 0
    for name, (_reason, value, _words) in bad.items():
        for _ in range(2):  # good rows around every bad one, on both partitions
            producer.produce(names["in"], key=f"g{i}".encode(), value=good(i), partition=i % 2)
            good_sent.append(i)
            i += 1
        producer.produce(
            names["in"],
            key=name.encode(),
            value=value,
            partition=i % 2,
            headers=[("origin", name.encode())],
        )
    big_label = "L" * (2 * 1024 * 1024)  # a large but valid record flows through
    producer.produce(names["in"], key=b"big", value=good(i, big_label), partition=0)
    good_sent.append(i)
    i += 1
    assert producer.flush(60) == 0

    reports: list[StepReport] = []
    service = Service(
        circuit, kafka.settings(tmp_path / "checkpoint", shuffle_partitions=2),
        on_step=reports.append,
    )
    service.start(once=True)
    service.wait(timeout_seconds=300)
    # The service keeps running: a second step of good rows after the bad ones.
    producer.produce(names["in"], key=b"after", value=good(i), partition=1)
    good_sent.append(i)
    assert producer.flush(30) == 0
    service.start(once=True)
    service.wait(timeout_seconds=300)

    counted: dict[str, int] = {}
    for report in reports:
        for reason, n in report.dead_letters.items():
            counted[reason] = counted.get(reason, 0) + n
    expected_counts: dict[str, int] = {}
    for reason, _value, _words in bad.values():
        expected_counts[reason] = expected_counts.get(reason, 0) + 1
    assert counted == expected_counts
    assert sum(r.accepted for r in reports) == len(good_sent)

    dead = read_topic(kafka.conf(), names["dlq"])
    assert sorted(m.key().decode() for m in dead) == sorted(bad), "each bad record exactly once"
    for msg in dead:
        name = msg.key().decode()
        reason, value, words = bad[name]
        headers = {k: v for k, v in msg.headers()}
        assert msg.value() == value, f"{name}: the value is kept unchanged for replay"
        assert headers["origin"] == name.encode(), "the original headers are kept"
        assert headers["tidemark.error.reason"].decode() == reason, name
        message = headers["tidemark.error.message"].decode()
        assert words in message, f"{name}: {message!r}"
        assert len(message) < 400 and "Traceback" not in message
        assert headers["tidemark.table"] == b"reading"
        assert headers["tidemark.source.topic"].decode() == names["in"]
        assert int(headers["tidemark.source.partition"]) in (0, 1)
        assert int(headers["tidemark.source.offset"]) >= 0

    everything = circuit.view("everything").output
    assert everything is not None
    out_codec = AvroCodec(everything.value_schema)
    rows = [out_codec.decode(m.value()) for m in read_topic(kafka.conf(), names["out"])]
    assert sorted(r["sensor"] for r in rows) == good_sent, "every good row, once"
    assert max(len(r["label"] or "") for r in rows) == len(big_label)


def _tidemark(args: list[str], env: dict[str, str], timeout: float = 120) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT, env={**os.environ, **env},
    )


def test_a_missing_input_topic_is_one_clear_error_or_a_bounded_wait_s7(
    kafka: Any, unique_topic: Any, tmp_path: Path
) -> None:
    missing = unique_topic("never-created")
    program = tmp_path / "missing.sql"
    program.write_text(PROGRAM.format(topic=missing, dlq=unique_topic("dlq"),
                                      out=unique_topic("out")))
    args = ["run", str(program), "--bootstrap-servers", kafka.bootstrap_servers,
            "--checkpoint", str(tmp_path / "cp"), "--metrics-port", "0", "--once"]
    env = {f"TIDEMARK_KAFKA_{k.upper().replace('.', '_')}": v
           for k, v in kafka.client_config().items()}
    result = _tidemark(args, env)
    assert result.returncode == 2, result.stderr
    assert f"tidemark: error: input topic(s) missing: {missing} (table reading)" in result.stderr
    assert "Traceback" not in result.stderr
    started = time.monotonic()
    result = _tidemark(args, {**env, "TIDEMARK_WAIT_FOR_TOPICS_SECONDS": "4"})
    assert time.monotonic() - started >= 4
    assert result.returncode == 2
    assert "(waited 4 s)" in result.stderr and "Traceback" not in result.stderr
