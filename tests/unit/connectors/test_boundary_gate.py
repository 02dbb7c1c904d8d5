"""The late gate of a stage boundary's table (ADR 0023): an insert-only view's rows are judged
against the boundary's waterline like any table's, but the changes of an updating view are
never late at their reader (SPEC S18, S19), even one an EMIT AFTER DELAY aggregate held back
until the boundary's waterline had passed its time."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import numpy as np

from app.connectors.avro_columns import ColumnarDecoder
from app.connectors.late_gate import LateGate
from app.program.compile import compile_text
from app.runtime.operators.source import source_spec
from app.runtime.planner.compose import compose

PROGRAM = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND,
    usr VARCHAR NOT NULL
) WITH ('topic' = 'clicks');

CREATE LOCAL VIEW held AS
SELECT window_end AS slot_end, usr, COUNT(*) AS c
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY window_start, window_end, usr EMIT AFTER DELAY INTERVAL '2' SECOND;

CREATE VIEW slots WITH ('topic' = 'slots') AS SELECT slot_end, usr, c FROM held;

CREATE LOCAL VIEW final AS
SELECT window_end AS slot_end, usr, COUNT(*) AS c
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY window_start, window_end, usr EMIT AFTER WATERMARK;

CREATE VIEW busy WITH ('topic' = 'busy') AS SELECT slot_end, usr, c FROM final WHERE c > 1;
"""
WATERLINE = 1_800_000_044_000


def _gate(relation: str) -> LateGate:
    composed = compose(compile_text("p.sql", PROGRAM))
    assert composed.refused == ()
    table = composed.circuit.table(f"__in_{relation}")
    return LateGate(source_spec(table), {"slot_end": WATERLINE}, WATERLINE)


def _encoded(gate: LateGate, row: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(gate.spec.avro_schema), row)
    return buffer.getvalue()


def test_a_change_below_the_boundarys_waterline_is_accepted_s18() -> None:
    gate = _gate("held")
    assert gate.spec.changes and gate.spec.bounded
    change = {"slot_end": WATERLINE - 14_000, "usr": "b", "c": 1, "undo": False,
              "ptime": WATERLINE, "ver": 0}
    retraction = {**change, "undo": True, "ver": 1}
    values = [_encoded(gate, change), _encoded(gate, retraction)]
    assert [gate.classify(v, None).kind for v in values] == ["ok", "ok"]
    decoded = ColumnarDecoder(gate.spec.avro_schema).decode(
        values, [c.name for c in gate.spec.value_columns])
    assert np.asarray(gate.accepts(decoded)).tolist() == [True, True]


def test_a_final_row_below_the_boundarys_waterline_is_still_late_s5() -> None:
    gate = _gate("final")
    assert gate.spec.bounded and not gate.spec.changes
    value = _encoded(gate, {"slot_end": WATERLINE - 14_000, "usr": "b", "c": 2})
    assert gate.classify(value, None).kind == "late"
    decoded = ColumnarDecoder(gate.spec.avro_schema).decode(
        [value], [c.name for c in gate.spec.value_columns])
    assert np.asarray(gate.accepts(decoded)).tolist() == [False]
