"""``tidemark dead-letters`` against a real broker: summary, show, replay once, a second
replay that writes nothing, a forced one that writes again, and a crashed replay's open
transaction that the next replay aborts before it reads the ledger.

The dead letters carry the headers the sink writes (built by
:func:`app.connectors.sink.headers.dead_letter_headers`) and are written in a transaction,
as a step writes them, beside one that is aborted and must never be seen. No Spark runs.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.connectors.avro_codec import AvroCodec
from app.connectors.sink.headers import dead_letter_headers, format_time_value
from app.connectors.sink.record import (
    LATE_COLUMN,
    LATE_VALUE,
    LATE_WATERLINE,
    MESSAGE,
    REASON,
    REL,
    SRC_OFFSET,
    SRC_PARTITION,
)
from app.connectors.topic_reader import read_topic
from app.dead_letters.replay import (
    LedgerEntry,
    Replay,
    ledger_key,
    ledger_topic,
    transactional_id,
)
from app.dead_letters.selection import Selection
from app.program.compile import compile_program

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    sensor  BIGINT NOT NULL,
    label   VARCHAR
) WITH ('topic' = '{topic}', 'dead_letter' = '{dlq}');

CREATE VIEW everything WITH ('topic' = '{out}', 'format' = 'append') AS
SELECT ts, sensor, label FROM reading;
"""

BASE = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _tidemark(kafka: Any, *args: str, process: bool = False) -> Any:
    """``tidemark dead-letters ARGS`` with the broker in the environment, as its own process
    (``process``) or in this one (Click's runner: the same command, without a Python start
    per call)."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("TIDEMARK_")}
    env |= {f"TIDEMARK_KAFKA_{k.upper().replace('.', '_')}": v
            for k, v in kafka.client_config().items()}
    env["TIDEMARK_BOOTSTRAP_SERVERS"] = kafka.bootstrap_servers
    if not process:
        from typer.testing import CliRunner

        from app.cli import app

        result = CliRunner().invoke(app, ["dead-letters", *args], env=env)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            result.exception
        )
        return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)
    given = {k: v for k, v in env.items() if v is not None}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "dead-letters", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env={**clean, **given},
        check=False,
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def _error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("tidemark: ")]
    assert len(lines) == 1 and lines[0].startswith("tidemark: error: "), result.stderr
    return lines[0]


def _dead_letters(codec: AvroCodec, source_topic: str) -> list[dict[str, Any]]:
    """Nine dead letters as a step's sink writes them: the original key, value and headers,
    then the S6 headers from the sink's own code."""
    table = {"topic": source_topic, "units": {"ts": "ms"}}
    letters = []
    for i in range(5):  # late: 20 s to 60 s below a waterline of BASE
        value = BASE - 20_000 * (i + 1)
        row = {REASON: "late", MESSAGE: f"ts = {value} is below the waterline {BASE}",
               REL: "reading", SRC_PARTITION: i % 2, SRC_OFFSET: 100 + i,
               LATE_COLUMN: "ts", LATE_VALUE: value, LATE_WATERLINE: BASE}
        letters.append({"key": f"late-{i}".encode(),
                        "value": codec.encode({"ts": value, "sensor": i, "label": f"l{i}"}),
                        "headers": [("origin", b"sensor-feed"), ("trace", None),
                                    *dead_letter_headers(row, table)],
                        "partition": i % 2})
    others = [("malformed", b"\x00\xff not avro"), ("malformed", b"\x81\x82"),
              ("invalid", b"\x02"), ("future", codec.encode(
                  {"ts": BASE + 10 * 86_400_000, "sensor": 9, "label": None}))]
    for j, (reason, value) in enumerate(others):
        row = {REASON: reason, MESSAGE: f"a {reason} record", REL: "reading",
               SRC_PARTITION: 0, SRC_OFFSET: 200 + j, LATE_COLUMN: None, LATE_VALUE: None,
               LATE_WATERLINE: None}
        letters.append({"key": f"{reason}-{j}".encode(), "value": value,
                        "headers": [("origin", b"sensor-feed"), *dead_letter_headers(row, table)],
                        "partition": j % 2})
    return letters


def _produce_in_transaction(kafka: Any, topic: str, letters: list[dict[str, Any]],
                            commit: bool, tid: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "transactional.id": tid, "log_level": 3})
    producer.init_transactions(30)
    producer.begin_transaction()
    for letter in letters:
        producer.produce(topic, key=letter["key"], value=letter["value"],
                         headers=letter["headers"], partition=letter["partition"])
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def test_summary_show_replay_once_then_forced(
    kafka: Any, unique_topic: Any, tmp_path: Path
) -> None:
    names = {k: unique_topic(k) for k in ("in", "dlq", "out", "fix")}
    kafka.create_topic(names["in"], partitions=2)
    kafka.create_topic(names["dlq"], partitions=2)
    kafka.create_topic(names["fix"], partitions=2)
    program = tmp_path / "p.sql"
    program.write_text(PROGRAM.format(topic=names["in"], dlq=names["dlq"], out=names["out"]))
    table = compile_program(program).table("reading")
    codec = AvroCodec(table.avro_schema)
    letters = _dead_letters(codec, names["in"])
    _produce_in_transaction(kafka, names["dlq"], letters, True, f"{names['dlq']}-step-1")
    aborted = [{**letters[0], "key": b"aborted"}]
    _produce_in_transaction(kafka, names["dlq"], aborted, False, f"{names['dlq']}-step-2")
    dlq = names["dlq"]

    summary = json.loads(_ok(_tidemark(kafka, "summary", "--topic", dlq, "--format", "json")))
    assert summary["dead_letters"] == 9, "the aborted transaction's dead letter is not read"
    assert summary["by_reason"] == {"future": 1, "invalid": 1, "late": 5, "malformed": 2}
    assert summary["by_table"] == {"reading": 9}
    assert summary["event_time"] == {"reading.ts": {
        "min": format_time_value(BASE - 100_000, "ms"),
        "max": format_time_value(BASE - 20_000, "ms")}}
    assert summary["waterline_at_rejection"]["reading.ts"]["max"] == format_time_value(BASE, "ms")
    assert {p: s["count"] for p, s in summary["partitions"].items()} == {"0": 5, "1": 4}
    assert summary["kafka_time"] is not None and summary["replayed"] == {}

    shown = _ok(_tidemark(kafka, "show", "--topic", dlq, "--reason", "late", "--reason",
                          "malformed", "--format", "json", "--program", str(program)))
    records = [json.loads(line) for line in shown.splitlines()]
    malformed = [r for r in records if r["reason"] == "malformed"]
    assert [base64.b64decode(r["value_base64"]) for r in malformed] == [
        b"\x00\xff not avro", b"\x81\x82"]
    assert all(r["value"] is None and "not a row of table reading" in r["value_not_decoded"]
               for r in malformed)
    records = [r for r in records if r["reason"] == "late"]
    assert sorted(r["key"] for r in records) == [f"late-{i}" for i in range(5)]
    for record in records:
        i = int(record["key"].split("-")[1])
        assert record["reason"] == "late" and record["table"] == "reading"
        assert record["value"] == {"ts": format_time_value(BASE - 20_000 * (i + 1), "ms"),
                                   "sensor": i, "label": f"l{i}"}
        assert record["late"]["waterline"] == format_time_value(BASE, "ms")
        assert record["source"] == {"topic": names["in"], "partition": i % 2, "offset": 100 + i}
        assert record["headers"] == [["origin", "sensor-feed"], ["trace", None]]
    limited = _ok(_tidemark(kafka, "show", "--topic", dlq, "--limit", "2"))
    assert limited.count(f"{dlq} partition ") == 2
    assert "more match: raise --limit 2" in limited

    first = _ok(_tidemark(kafka, "replay", "--topic", dlq, "--reason", "late",
                          "--to", names["fix"], process=True))
    assert f"replayed 5 dead letter(s) of {dlq} to {names['fix']}" in first
    replayed = read_topic(kafka.conf(), names["fix"])
    originals = {m["key"]: m for m in letters}
    assert sorted(m.key() for m in replayed) == [f"late-{i}".encode() for i in range(5)]
    for msg in replayed:
        original = originals[msg.key()]
        assert msg.value() == original["value"]
        headers = list(msg.headers())
        assert headers[:-1] == original["headers"], "the original headers, in order"
        name, place = headers[-1]
        assert name == "tidemark.replayed-from"
        assert place.decode().rsplit("/", 2)[0] == dlq

    again = _ok(_tidemark(kafka, "replay", "--topic", dlq, "--reason", "late",
                          "--to", names["fix"]))
    assert "nothing written" in again and "skipped: 5 dead letter(s) already replayed" in again
    assert len(read_topic(kafka.conf(), names["fix"])) == 5, "a second replay writes nothing"

    forced_run = _tidemark(kafka, "replay", "--topic", dlq, "--reason", "late",
                           "--to", names["fix"], "--force", "--progress-every", "1")
    forced = _ok(forced_run)
    assert "replayed 5 dead letter(s)" in forced and "written again (--force): 5" in forced
    assert "replay: 5 dead letter(s) written" in forced_run.stderr, "a progress line"
    assert len(read_topic(kafka.conf(), names["fix"])) == 10, "--force writes them again"

    after = json.loads(_ok(_tidemark(kafka, "summary", "--topic", dlq, "--format", "json")))
    assert after["replayed"] == {names["fix"]: 5}
    ledger = read_topic(kafka.conf(), ledger_topic(dlq))
    last = {m.key(): LedgerEntry.from_json(m.value()) for m in ledger}
    assert len(last) == 5 and {e.times for e in last.values()} == {2}

    assert "does not exist" in _error(_tidemark(kafka, "summary", "--topic", dlq + ".nope",
                                                process=True))
    line = _error(_tidemark(kafka, "replay", "--topic", dlq, "--to", names["out"]))
    assert f"target topic {names['out']} does not exist: create it" in line
    from confluent_kafka import Producer

    plain = Producer({**kafka.conf(), "log_level": 3})
    plain.produce(names["in"], key=b"k", value=codec.encode({"ts": BASE, "sensor": 1,
                                                              "label": None}))
    assert plain.flush(30) == 0
    line = _error(_tidemark(kafka, "show", "--topic", names["in"]))
    assert f"{names['in']} is not a dead-letter topic" in line
    line = _error(_tidemark(kafka, "replay", "--topic", names["in"], "--to", names["fix"]))
    assert line.startswith(f"tidemark: error: {names['in']} is not a dead-letter topic")


def test_a_crashed_replays_open_transaction_is_aborted_and_replayed_once(
    kafka: Any, unique_topic: Any
) -> None:
    """A replay that died inside a transaction (its records and ledger entries produced, not
    committed) leaves nothing a read_committed consumer sees; the next replay fences it,
    reads the ledger and writes every selected record once, in transactions of ``chunk``."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    dlq, fix = unique_topic("dlq"), unique_topic("fix")
    kafka.create_topic(dlq)
    kafka.create_topic(fix)
    codec = AvroCodec({"type": "record", "name": "reading", "fields": [
        {"name": "ts", "type": "long"}, {"name": "sensor", "type": "long"},
        {"name": "label", "type": ["null", "string"]}]})
    letters = [{**letter, "partition": 0} for letter in _dead_letters(codec, "in")]
    _produce_in_transaction(kafka, dlq, letters, True, f"{dlq}-step")
    admin = AdminClient({**kafka.conf(), "log_level": 3})
    admin.create_topics(
        [NewTopic(ledger_topic(dlq), 1, 1, config={"cleanup.policy": "compact"})]
    )[ledger_topic(dlq)].result(30)

    crashed = Producer({**kafka.conf(), "transactional.id": transactional_id(dlq),
                        "transaction.timeout.ms": 120_000, "log_level": 0})
    crashed.init_transactions(30)
    crashed.begin_transaction()
    for offset in range(3):  # the first three, as a replay writes them, never committed
        letter = letters[offset]
        place = f"{dlq}/0/{offset}"
        crashed.produce(fix, key=letter["key"], value=letter["value"],
                        headers=[*letter["headers"], ("tidemark.replayed-from", place.encode())])
        crashed.produce(ledger_topic(dlq), key=ledger_key(place, fix).encode(),
                        value=LedgerEntry(place, fix, BASE, "crashed").to_json())
    assert crashed.flush(30) == 0  # produced, in an open transaction; then the process dies

    progress: list[int] = []
    report = Replay(kafka.conf(), dlq, fix, Selection(), chunk=4, progress_every=3,
                    progress=lambda n, _s: progress.append(n)).run()
    del crashed  # fenced by the replay's init_transactions: nothing it holds can commit
    assert (report.written, report.transactions, report.already) == (9, 3, [])
    assert progress == [3, 6, 9]
    written = read_topic(kafka.conf(), fix, timeout_seconds=20)
    assert sorted(m.key() for m in written) == sorted(m["key"] for m in letters), "once each"
    entries = read_topic(kafka.conf(), ledger_topic(dlq), timeout_seconds=20)
    assert len(entries) == 9
    assert all(LedgerEntry.from_json(m.value()).replay != "crashed" for m in entries)
    again = _ok(_tidemark(kafka, "replay", "--topic", dlq, "--to", fix))
    assert "nothing written" in again


def test_a_transaction_the_broker_refuses_writes_and_records_nothing(
    kafka: Any, unique_topic: Any
) -> None:
    """A record the target refuses (larger than its max.message.bytes) fails its whole
    transaction: neither the records beside it nor any ledger entry are written, the error
    says what was and was not written, and a replay of what fits then goes through."""
    from confluent_kafka.admin import AdminClient, NewTopic

    dlq, small = unique_topic("dlq"), unique_topic("small")
    kafka.create_topic(dlq)
    admin = AdminClient({**kafka.conf(), "log_level": 3})
    admin.create_topics([NewTopic(small, 1, 1, config={"max.message.bytes": "2000"})]
                        )[small].result(30)
    codec = AvroCodec({"type": "record", "name": "reading", "fields": [
        {"name": "ts", "type": "long"}, {"name": "sensor", "type": "long"},
        {"name": "label", "type": ["null", "string"]}]})
    letters = [{**letter, "partition": 0} for letter in _dead_letters(codec, "in")[:3]]
    letters[2] = {**letters[2], "value": b"x" * 50_000}
    _produce_in_transaction(kafka, dlq, letters, True, f"{dlq}-step")

    line = _error(_tidemark(kafka, "replay", "--topic", dlq, "--to", small))
    assert f"replay to {small} failed" in line
    assert "0 dead letter(s) were written and recorded" in line
    assert "the 3 of the failed transaction were not written" in line
    assert read_topic(kafka.conf(), small, timeout_seconds=20) == []
    assert read_topic(kafka.conf(), ledger_topic(dlq), timeout_seconds=20) == []

    out = _ok(_tidemark(kafka, "replay", "--topic", dlq, "--to", small, "--to-offset", "1"))
    assert f"replayed 2 dead letter(s) of {dlq} to {small}" in out
    assert len(read_topic(kafka.conf(), small, timeout_seconds=20)) == 2
