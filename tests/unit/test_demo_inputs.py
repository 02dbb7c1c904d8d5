"""``tidemark demo --program``'s records: every shipped program's tables get records their
decoders accept, with event times that follow the clock within the LATENESS, late ones behind
it by more, and NOT NULL columns filled."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from app.circuit.functions import parse_timestamp
from app.connectors.avro_codec import AvroCodec
from app.connectors.json_encoder import json_decoder
from app.demo_inputs import HOUR_MS, JITTER_MS, TableInputs, table_inputs
from app.errors import ConfigError
from app.program.compile import compile_program, compile_text

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = sorted((ROOT / "pipelines").glob("*.sql"))
CLOCK = 1_764_151_200_000  # 2025-11-26 10:00 UTC


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_each_tables_records_decode_as_rows_of_the_table(
    program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    circuit = compile_program(Path("pipelines") / program.name)
    inputs = table_inputs(circuit, seed=3, late_fraction=0.0)
    for table in circuit.tables:
        if table.format == "json":
            decode = json_decoder(table.name, table.avro_schema).decode
        else:
            decode = AvroCodec(table.avro_schema).decode
        maker = inputs[table.name]
        lateness = {lt.column: lt.amount for lt in table.lateness}
        for _ in range(300):
            value = maker.record(CLOCK)
            if value in (b"\x00not-avro", b"{not json"):
                continue
            row = decode(value)
            for column in table.columns:
                if getattr(column, "metadata", None) is not None:
                    continue
                if not column.type.nullable:
                    assert row[column.name] is not None, column.name
                if column.name in lateness:
                    lag = CLOCK - row[column.name]
                    assert 0 <= lag <= min(lateness[column.name], JITTER_MS)
                if column.type.name == "VARCHAR" and "time" in column.name:
                    assert parse_timestamp(row[column.name]) == CLOCK
        assert maker.sent == 300 and maker.late_sent == 0
        assert 0 <= maker.malformed_sent < 10


def test_late_records_are_behind_the_clock_by_more_than_their_lateness() -> None:
    circuit = compile_program(ROOT / "pipelines" / "orders_trades.sql")
    maker = TableInputs(circuit.table("orders"), random.Random(1), late_fraction=1.0)
    for _ in range(50):
        row = maker.row(CLOCK, late=True)
        assert CLOCK - 3 * HOUR_MS <= row["rowtime"] <= CLOCK - 2 * HOUR_MS
        assert 1 <= row["orderid"] <= 20 and row["ticker"] in ("ORCL", "YHOO", "MSFT", "IBM")


def test_a_table_that_needs_a_registry_is_refused() -> None:
    circuit = compile_text(
        "p.sql",
        "CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, n INT) WITH "
        "('topic' = 't', 'format' = 'avro-confluent', "
        "'schema-registry.url' = 'http://localhost:8081');",
    )
    with pytest.raises(ConfigError, match="schema registry"):
        table_inputs(circuit, 0, 0.0)


def test_a_debezium_tables_records_are_create_events_its_source_reads_as_rows() -> None:
    """ADR 0028: each record is the create event of a row, made at the clock; the demo
    itself refuses such a program (it shows no updates), the generator still feeds it."""
    from app.connectors.late_gate import LateGate
    from app.demo import _check_program
    from app.runtime.operators.source import source_spec

    circuit = compile_text("cdc.sql", """CREATE TABLE rates (
        changed TIMESTAMP NOT NULL METADATA FROM 'value.source.timestamp'
                LATENESS INTERVAL '1' SECOND,
        currency VARCHAR NOT NULL, rate DECIMAL(10, 2) NOT NULL,
        PRIMARY KEY (currency) NOT ENFORCED
    ) WITH ('topic' = 'rates', 'format' = 'debezium-json');""")
    table = circuit.table("rates")
    inputs = TableInputs(table, random.Random(3), late_fraction=0.0)
    gate = LateGate(source_spec(table), {}, 0)
    clock = 1_795_000_000_000
    verdicts = [gate.classify(inputs.record(clock), None) for _ in range(400)]
    rows = [v.row for v in verdicts if v.kind == "ok"]
    assert len(rows) >= 390 and all(r is not None and r["changed"] == clock for r in rows)
    assert {v.kind for v in verdicts} <= {"ok", "malformed"}
    with pytest.raises(ConfigError, match="change events, whose updates and deletes"):
        _check_program(circuit)
