"""What the Spark runtime cannot run yet is refused by name before Spark starts (L7: never
mis-executed)."""

from __future__ import annotations

import pytest

from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.plan import check_supported

TABLE = """
CREATE TABLE t (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    k  BIGINT NOT NULL
) WITH ('topic' = 'in'{extra});
"""


def test_json_tables_are_refused_not_decoded_as_avro_l7() -> None:
    circuit = compile_program("p.sql", TABLE.format(extra=", 'format' = 'json'"))
    with pytest.raises(ProgramError, match="format 'json' is not read by the Spark runtime"):
        check_supported(circuit)


def test_emit_after_delay_is_refused_by_name_l7() -> None:
    text = TABLE.format(extra="") + """
CREATE VIEW v WITH ('topic' = 'out') AS
SELECT window_start, window_end, k, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, k
EMIT STREAM AFTER DELAY INTERVAL '1' MINUTE;
"""
    with pytest.raises(ProgramError, match="AFTER DELAY is not supported by the Spark runtime"):
        check_supported(compile_program("p.sql", text))


def test_avro_program_is_supported() -> None:
    check_supported(compile_program("p.sql", TABLE.format(extra="")))
