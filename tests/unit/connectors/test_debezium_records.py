"""Debezium change events as rows and deletions of a keyed table (ADR 0028; SPEC S2, S5,
S7, S16): the gate of a compiled ``'format' = 'debezium-json'`` table, on every ``op``, both
JSON forms (bare, and wrapped by the JsonConverter's ``schema``/``payload``), tombstones and
bad events, and the source's slices built from them."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from app.circuit.reference import Deletion, StepInput, evaluate
from app.connectors.kafka_source import KafkaPartitionSlice, decode_slice
from app.connectors.late_gate import LateGate
from app.connectors.record_metadata import RecordMeta
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec

NOW = 1_800_000_000_000

RATES = """
CREATE TABLE rates (
    changed  TIMESTAMP NOT NULL METADATA FROM 'value.source.timestamp'
             LATENESS INTERVAL '0' SECOND,
    ingested TIMESTAMP METADATA FROM 'value.ingestion-timestamp',
    db       VARCHAR METADATA FROM 'value.source.database',
    tbl      VARCHAR METADATA FROM 'value.source.table',
    currency VARCHAR NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    note     VARCHAR,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = 'rates', 'format' = 'debezium-json');
"""

#: The Kafka key gives the key, the record's timestamp the time: tombstones delete too.
KEYED = """
CREATE TABLE rates (
    changed  TIMESTAMP NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '0' SECOND,
    currency VARCHAR NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = 'rates', 'format' = 'debezium-json', 'key.format' = 'json',
        'key.fields' = 'currency');
"""

#: The time is a column of the row: a delete event's is its before image's.
ROW_TIMED = """
CREATE TABLE rates (
    updated  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH ('topic' = 'rates', 'format' = 'debezium-json');
"""


def _gate(tmp_path: Path, program: str = RATES, waterline: int | None = None) -> LateGate:
    path = tmp_path / "rates.sql"
    path.write_text(program, encoding="utf-8")
    table = compile_program(path).table("rates")
    column = table.lateness[0].column
    return LateGate(source_spec(table), {column: waterline}, NOW)


def event(op: str, before: Any = None, after: Any = None, wrapped: bool = False,
          source_ms: Any = 1_000, **extra: Any) -> bytes:
    """A Debezium change event's bytes, as the JsonConverter writes it."""
    body = {
        "before": before,
        "after": after,
        "op": op,
        "source": {"ts_ms": source_ms, "db": "shop", "schema": "public", "table": "rates"},
        "ts_ms": 1_250,
        **extra,
    }
    if wrapped:
        body = {"schema": {"type": "struct", "name": "rates.Envelope"}, "payload": body}
    return json.dumps(body).encode()


EUR = {"currency": "EUR", "rate": "1.10", "note": "first"}
EUR2 = {"currency": "EUR", "rate": 1.2, "note": None}
META = {"changed": 1_000, "ingested": 1_250, "db": "shop", "tbl": "rates"}


@pytest.mark.parametrize("wrapped", [False, True], ids=["bare", "schema-wrapped"])
def test_s2_s16_creates_reads_and_updates_are_rows_deletes_delete_the_key(
    tmp_path: Path, wrapped: bool
) -> None:
    gate = _gate(tmp_path)
    create = gate.classify(event("c", after=EUR, wrapped=wrapped), None)
    snapshot = gate.classify(event("r", after=EUR, wrapped=wrapped), None)
    update = gate.classify(event("u", before=EUR, after=EUR2, wrapped=wrapped), None)
    delete = gate.classify(event("d", before=EUR2, wrapped=wrapped), None)
    row = {**META, "currency": "EUR", "note": "first"}
    assert (create.kind, create.row) == ("ok", {**row, "rate": Decimal("1.10")})
    assert (snapshot.kind, snapshot.row) == (create.kind, create.row)
    assert update.kind == "ok" and update.row is not None
    assert (str(update.row["rate"]), update.row["note"]) == ("1.20", None)
    # A deletion holds its key and time (and the envelope's metadata); the rest is NULL.
    assert (delete.kind, delete.row) == (
        "delete", {**META, "currency": "EUR", "rate": None, "note": None})


def test_s16_a_delete_event_takes_its_key_and_row_time_from_before(tmp_path: Path) -> None:
    gate = _gate(tmp_path, ROW_TIMED)
    before = {"updated": "1970-01-01T00:00:05Z", "currency": "GBP", "rate": "1.25"}
    verdict = gate.classify(event("d", before=before), None)
    assert (verdict.kind, verdict.row) == (
        "delete", {"updated": 5_000, "currency": "GBP", "rate": None})


def test_s16_a_delete_event_without_before_takes_its_key_from_the_kafka_key(
    tmp_path: Path,
) -> None:
    gate = _gate(tmp_path, KEYED)
    verdict = gate.classify(event("d"), None, RecordMeta(b'{"currency": "CHF"}', 5_000, 0, 7))
    assert (verdict.kind, verdict.row) == (
        "delete", {"changed": 5_000, "currency": "CHF", "rate": None})


@pytest.mark.parametrize(
    ("value", "reason", "message"),
    [
        (b"\xff{", "malformed", "not a JSON record of table rates: not UTF-8 text"),
        (b"[1, 2]", "malformed",
         "not a Debezium change event of table rates: the event is an array, not a JSON object"),
        (b'{"schema": {}, "payload": null}', "malformed",
         "not a Debezium change event of table rates: the event is null, not a JSON object"),
        (b'{"after": {"currency": "EUR"}}', "malformed",
         "not a Debezium change event of table rates: it has no 'op' field"),
        (event("t"), "invalid", "op \"t\" is a truncate that table rates does not apply"),
        (event("x", after=EUR), "invalid", "op \"x\" is an operation that table rates does"),
        (event("c"), "invalid", "a 'c' event without after: it has no row"),
        (event("u", after=[1]), "invalid", "after of an 'u' event is an array, not a JSON"),
        (event("c", after={**EUR, "rate": True}), "invalid",
         "column rate: expected a DECIMAL(10,2) number or string, got true (in after)"),
        (event("c", after={**EUR, "rate": "1.234"}), "invalid",
         "column rate = 1.234 is more digits than DECIMAL(10, 2) holds"),
        (event("c", after={"rate": "1.10"}), "invalid",
         "column currency is NOT NULL but the record has null"),
        (event("d", before=None), "invalid",
         "column currency is NOT NULL but the delete event has no before.currency"),
        (event("c", after=EUR, source_ms=None), "invalid",
         "column changed is NOT NULL but the record has no source.ts_ms "
         "(value.source.timestamp)"),
        (event("c", after=EUR, source_ms="yesterday"), "invalid",
         "column changed: source.ts_ms (value.source.timestamp) is \"yesterday\", not epoch"),
        (event("c", after=EUR, source_ms=10**18), "invalid",
         "column changed = 1000000000000000000 is outside the TIMESTAMP range"),
    ],
)
def test_s7_a_bad_event_is_a_dead_letter_with_its_reason(
    tmp_path: Path, value: bytes, reason: str, message: str
) -> None:
    verdict = _gate(tmp_path).classify(value, None)
    assert (verdict.kind, verdict.row) == (reason, None)
    assert verdict.message.startswith(message), verdict.message


def test_s5_a_late_delete_event_is_a_late_dead_letter_and_deletes_nothing(
    tmp_path: Path,
) -> None:
    gate = _gate(tmp_path, waterline=2_000)
    verdict = gate.classify(event("d", before=EUR), None)
    assert (verdict.kind, verdict.column, verdict.value, verdict.waterline) == (
        "late", "changed", 1_000, 2_000)
    on_time = gate.classify(event("d", before=EUR, source_ms=2_000), None)
    assert on_time.kind == "delete"


def test_s16_a_tombstone_is_skipped_when_only_the_events_give_its_key_and_time(
    tmp_path: Path,
) -> None:
    """The tombstone Debezium writes after a delete event changes nothing the delete event
    did not: no row, no dead letter. Punctuation is read as in every table (S4)."""
    gate = _gate(tmp_path)
    meta = RecordMeta(b'{"currency": "EUR"}', 5_000, 0, 8)
    assert gate.classify(None, None, meta).kind == "skipped"
    mark = gate.classify(None, [("tidemark.bound", b"7000")], meta)
    assert (mark.kind, mark.bounds) == ("punctuation", {"changed": 7_000})
    assert _gate(tmp_path, ROW_TIMED).classify(None, None, meta).kind == "skipped"


def test_s16_a_tombstone_deletes_its_key_when_the_record_gives_key_and_time(
    tmp_path: Path,
) -> None:
    gate = _gate(tmp_path, KEYED, waterline=4_000)
    verdict = gate.classify(None, None, RecordMeta(b'{"currency": "EUR"}', 5_000, 0, 8))
    assert (verdict.kind, verdict.row) == (
        "delete", {"changed": 5_000, "currency": "EUR", "rate": None})
    late = gate.classify(None, None, RecordMeta(b'{"currency": "EUR"}', 3_000, 0, 9))
    assert late.kind == "late"
    keyless = gate.classify(None, None, RecordMeta(None, 5_000, 0, 10))
    assert keyless.kind == "invalid" and "currency" in keyless.message


def test_s3_a_slice_of_events_gives_rows_deletions_dead_letters_and_its_probe(
    tmp_path: Path,
) -> None:
    """The source's per-record path: a skipped tombstone inserts no row and writes no dead
    letter; a delete event is an accepted ``delete`` row whose time moves the probe."""
    spec = _gate(tmp_path).spec
    values = [
        event("c", after=EUR, source_ms=1_000),
        event("u", before=EUR, after=EUR2, source_ms=2_000, wrapped=True),
        event("d", before=EUR2, source_ms=3_000),
        None,
        b"not json",
    ]
    messages = [
        Message(topic="rates", partition=0, offset=10 + i, key=b'{"currency": "EUR"}', value=v,
                timestamp=(TIMESTAMP_CREATE_TIME, NOW))
        for i, v in enumerate(values)
    ]
    part = KafkaPartitionSlice(0, 10, 15, 1, NOW, {"changed": None})
    rows = pa.Table.from_batches(list(decode_slice(spec, part, messages))).to_pylist()
    kinds = [(r["_kind"], r["_offset"], r["currency"]) for r in rows]
    assert kinds == [
        ("ok", 10, "EUR"),
        ("ok", 11, "EUR"),
        ("delete", 12, "EUR"),
        ("malformed", 14, None),
        ("probe", None, None),
    ]
    probe = rows[-1]
    assert probe["_accepted"] == 3
    assert probe["changed"].timestamp() * 1000 == 3_000


def test_s18_a_changelog_table_is_read_elsewhere_as_its_latest_row_per_key(
    tmp_path: Path,
) -> None:
    """ADR 0030: a view other than a temporal join reads the generated view of the table's
    latest row per key, an updating relation, so its rows are written as a changelog."""
    path = tmp_path / "p.sql"
    path.write_text(RATES + "CREATE VIEW all_rates WITH ('topic' = 'out') AS\n"
                    "SELECT currency, rate FROM rates;\n", encoding="utf-8")
    circuit = compile_program(path)
    assert circuit.view("all_rates").sources == ("rates.latest",)
    output = circuit.view("all_rates").output
    assert output is not None and output.format == "changelog"


def test_l7_a_change_events_metadata_needs_a_changelog_table(tmp_path: Path) -> None:
    path = tmp_path / "p.sql"
    path.write_text(RATES.replace("'debezium-json'", "'json'"), encoding="utf-8")
    with pytest.raises(ProgramError) as info:
        compile_program(path)
    first = info.value.diagnostics[0]
    assert first.message == ("METADATA FROM 'value.source.timestamp' of column rates.changed "
                             "is a Debezium change event's")
    assert (first.position.line, first.position.column) == (3, 47)


JOINED = RATES + """
CREATE TABLE amounts (
    ts       TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR NOT NULL,
    amount   INT NOT NULL
) WITH ('topic' = 'amounts', 'format' = 'json');

CREATE VIEW converted WITH ('topic' = 'converted') AS
SELECT a.ts, a.currency, a.amount, r.rate
FROM amounts AS a
LEFT JOIN rates FOR SYSTEM_TIME AS OF a.ts AS r ON a.currency = r.currency;
"""


def decoded(gate: LateGate, values: list[bytes | None]) -> list[Any]:
    """What the reference evaluator reads of a step's events: the gate's rows, deletions as
    :class:`Deletion` (dead letters and skipped tombstones are no input)."""
    out: list[Any] = []
    for value in values:
        verdict = gate.classify(value, None, RecordMeta(b'{"currency": "EUR"}', NOW, 0, 0))
        if verdict.kind == "ok":
            out.append(verdict.row)
        elif verdict.kind == "delete":
            assert verdict.row is not None
            out.append(Deletion(verdict.row))
    return out


def test_s16_the_reference_joins_each_amount_with_the_events_version_at_its_time(
    tmp_path: Path,
) -> None:
    """EUR created at 1 s, updated at 3 s, deleted at 5 s (then its tombstone), created
    again at 7 s: amounts at 2, 4, 6 and 8 s get 1.10, 1.20, none and 1.30."""
    path = tmp_path / "joined.sql"
    path.write_text(JOINED, encoding="utf-8")
    circuit = compile_program(path)
    gate = LateGate(source_spec(circuit.table("rates")), {}, NOW)
    eur3 = {**EUR, "rate": "1.30"}
    events = [
        [event("c", after=EUR, source_ms=1_000)],
        [event("u", before=EUR, after=EUR2, source_ms=3_000, wrapped=True)],
        [event("d", before=EUR2, source_ms=5_000), None],
        [event("c", after=eur3, source_ms=7_000), event("t", source_ms=7_500)],
        [event("u", before=eur3, after=eur3, source_ms=9_000)],
    ]
    amounts = [[{"ts": 2_000 * (i + 1), "currency": "EUR", "amount": i}] for i in range(4)]
    steps = [
        StepInput({"rates": decoded(gate, values), "amounts": amounts[i] if i < 4 else []})
        for i, values in enumerate(events)
    ]
    results = evaluate(circuit, steps)
    written = [(r.value or {})["amount"] for result in results for r in result.outputs[
        "converted"]]
    rates = {(r.value or {})["amount"]: (r.value or {})["rate"]
             for result in results for r in result.outputs["converted"]}
    assert written == [0, 1, 2, 3]
    assert rates == {0: Decimal("1.10"), 1: Decimal("1.20"), 2: None, 3: Decimal("1.30")}
