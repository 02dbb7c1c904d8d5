"""A view's changes written as Debezium change events (``'encoding' = 'debezium-json'``, SPEC
S13; Flink's ``debezium-json`` sink format): an insertion is a create (``op`` c, ``after``), a
retraction a delete (``op`` d, ``before``), ``ts_ms`` the step's ptime; and a ``'format' =
'debezium-json'`` table of the same columns reads them back (ADR 0028)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from app.connectors.late_gate import LateGate
from app.connectors.output_reader import OutputReader
from app.connectors.record_metadata import RecordMeta
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec
from app.runtime.step.encode import ViewEncoding, encode_record

PROGRAM = """
CREATE TABLE sales (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    shop   VARCHAR NOT NULL,
    amount DECIMAL(10, 2) NOT NULL
) WITH ('topic' = 'sales');

CREATE VIEW per_shop WITH ('topic' = 'per_shop', 'format' = '{fmt}',
                           'encoding' = 'debezium-json') AS
SELECT shop, SUM(amount) AS total, COUNT(*) AS n FROM sales GROUP BY shop;
"""

READER = """
CREATE TABLE per_shop (
    changed TIMESTAMP NOT NULL METADATA FROM 'value.ingestion-timestamp'
            LATENESS INTERVAL '0' SECOND,
    shop    VARCHAR NOT NULL,
    total   DECIMAL(10, 2) NOT NULL,
    n       BIGINT NOT NULL,
    PRIMARY KEY (shop) NOT ENFORCED
) WITH ('topic' = 'per_shop', 'format' = 'debezium-json');
"""


def test_s13_each_change_is_a_create_or_a_delete_event_that_reads_back() -> None:
    circuit = compile_program("p.sql", text=PROGRAM.format(fmt="changelog"))
    view = circuit.view("per_shop")
    assert view.output is not None and view.output.encoding == "debezium-json"
    encoding = ViewEncoding.for_view(view)
    row = {"shop": "berlin", "total": Decimal("12.50"), "n": 2}
    inserted = encode_record(encoding, {**row, "_undo": False, "_ver": 0}, 60_000)
    retracted = encode_record(encoding, {**row, "_undo": True, "_ver": 1}, 120_000)
    assert inserted[0] == b'{"shop":"berlin"}'
    assert json.loads(inserted[1] or b"") == {
        "before": None, "after": {"shop": "berlin", "total": "12.50", "n": 2}, "op": "c",
        "ts_ms": 60_000}
    assert json.loads(retracted[1] or b"") == {
        "before": {"shop": "berlin", "total": "12.50", "n": 2}, "after": None, "op": "d",
        "ts_ms": 120_000}
    # A consumer of the view's own records sees the row, undo and ptime.
    reader = OutputReader("per_shop", view.output)
    assert reader.value(retracted[1]) == {**row, "undo": True, "ptime": 120_000}
    assert reader.key(retracted[0]) == {"shop": "berlin"}
    # A Debezium table reads the create as the key's row and the delete as its deletion.
    table = compile_program("r.sql", text=READER).table("per_shop")
    gate = LateGate(source_spec(table), {"changed": None}, 10**13)
    created = gate.classify(inserted[1], [], RecordMeta(inserted[0], 60_000, 0, 0))
    deleted = gate.classify(retracted[1], [], RecordMeta(retracted[0], 120_000, 0, 1))
    assert (created.kind, created.row) == ("ok", {"changed": 60_000, **row})
    assert (deleted.kind, deleted.row) == (
        "delete", {"changed": 120_000, "shop": "berlin", "total": None, "n": None})


def test_s13_an_append_view_writes_creates_only() -> None:
    circuit = compile_program("p.sql", text=PROGRAM.format(fmt="append").replace(
        "GROUP BY shop", "GROUP BY shop EMIT AFTER WATERMARK").replace(
        "SELECT shop,", "SELECT window_end, shop,").replace(
        "FROM sales", "FROM TABLE(TUMBLE(TABLE sales, DESCRIPTOR(ts), INTERVAL '1' HOUR))").replace(
        "GROUP BY shop", "GROUP BY window_start, window_end, shop"))
    view = circuit.view("per_shop")
    assert view.output is not None and view.output.format == "append"
    _, value = encode_record(ViewEncoding.for_view(view), {
        "window_end": 3_600_000, "shop": "rome", "total": Decimal("1.00"), "n": 1}, 3_660_000)
    event = json.loads(value or b"")
    assert (event["op"], event["before"], event["after"]["shop"], event["ts_ms"]) == (
        "c", None, "rome", 3_660_000)


def test_l6_debezium_json_is_no_upsert_encoding() -> None:
    with pytest.raises(ProgramError, match=r"'debezium-json' writes each change as an event.*"
                                           r"declare 'format' = 'changelog'"):
        compile_program("p.sql", text=PROGRAM.format(fmt="upsert"))


def test_l6_a_flink_kafka_sink_in_debezium_json_takes_an_updating_query() -> None:
    circuit = compile_program("f.sql", text="""
CREATE TABLE sales (
    ts     TIMESTAMP(3),
    shop   STRING,
    amount DECIMAL(10, 2),
    WATERMARK FOR ts AS ts - INTERVAL '1' MINUTE
) WITH ('connector' = 'kafka', 'topic' = 'sales', 'format' = 'json');
CREATE TABLE per_shop (shop STRING, total DECIMAL(10, 2))
WITH ('connector' = 'kafka', 'topic' = 'per_shop', 'format' = 'debezium-json');
INSERT INTO per_shop SELECT shop, SUM(amount) FROM sales GROUP BY shop;
""")
    output = circuit.view("per_shop").output
    assert output is not None
    assert (output.format, output.encoding) == ("changelog", "debezium-json")
