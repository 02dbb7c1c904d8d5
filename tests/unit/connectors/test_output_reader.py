"""OutputReader reads back what each output encoding writes (SPEC S13): the same key and value
records from ``avro``, ``avro-confluent`` and ``json`` records of one row; tombstones None."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from app.connectors.output_reader import OutputReader
from app.program.compile import compile_text
from app.runtime.step.encode import ViewEncoding, encode_record

PROGRAM = """
CREATE TABLE purchase (
    date_time TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,
    card BIGINT NOT NULL,
    amount DECIMAL(10, 2)
) WITH ('topic' = 'purchases');
CREATE VIEW spend WITH ('topic' = 'spend', 'encoding' = '{encoding}') AS
SELECT window_start, card, SUM(amount) AS total
FROM TABLE(TUMBLE(TABLE purchase, DESCRIPTOR(date_time), INTERVAL '1' HOUR))
GROUP BY window_start, card;
"""
ROW = {"window_start": 1_764_151_200_000, "card": 7, "total": Decimal("12.50")}


@pytest.mark.parametrize("encoding", ["avro", "avro-confluent", "json"])
def test_each_encoding_reads_back_to_the_row(encoding: str) -> None:
    text = PROGRAM.format(encoding=encoding)
    if encoding == "avro-confluent":
        registry = "'schema-registry.url' = 'http://localhost:1', 'encoding'"
        text = text.replace("'encoding'", registry)
    view = compile_text("p.sql", text).view("spend")
    assert view.output is not None
    output = view.output
    if encoding == "avro-confluent":  # as `tidemark run` sets them once registered
        output = replace(output, key_schema_id=3, value_schema_id=4)
        view = replace(view, output=output)
    enc = ViewEncoding.for_view(view)
    key, value = encode_record(enc, ROW, None)
    reader = OutputReader("spend", output)
    assert reader.key(key) == {"window_start": ROW["window_start"], "card": 7}
    assert reader.value(value) == ROW
    tombstone = encode_record(enc, {**ROW, "_delete": True}, None)
    assert reader.value(tombstone[1]) is None
    if encoding == "avro-confluent":
        assert value is not None and value[:5] == b"\x00\x00\x00\x00\x04"
