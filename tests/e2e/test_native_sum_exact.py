"""SUM and AVG of integers on Spark's native aggregation are exact at their types' limits (L3,
S11).

The native path (ADR 0004) sums a BIGINT as three BIGINT sums of slices of each value and joins
them once per group. These windows are chosen so that any running BIGINT sum would overflow
on the way, while the exact totals fall inside BIGINT, on its limits, or outside it (a NULL
SUM: integer overflow is NULL, docs/language.md); AVG of integers is the exact total divided
once, as a DOUBLE. An INT is summed as one BIGINT (``try_sum``), its totals past INT's limits
but inside BIGINT, and the COUNT(*) and SUM of a NOT NULL column share one count, while an
expression typed NOT NULL that overflows to NULL is not counted. One step,
then a row far ahead closes the windows (EMIT AFTER WATERMARK).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.connectors.avro_codec import AvroCodec
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.operators.native_aggregate_support import is_native
from app.runtime.service import Service

pytestmark = pytest.mark.e2e

BASE_MS = 1_700_000_040_000  # a minute boundary
MAX = 2**63 - 1
MIN = -(2**63)

PROGRAM = """
CREATE TABLE readings (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr  VARCHAR NOT NULL,
    n    BIGINT
) WITH ('topic' = '{topic}');

CREATE VIEW totals WITH ('topic' = '{out}', 'format' = 'append') AS
SELECT window_start, usr, COUNT(*) AS c, SUM(n) AS s, AVG(n) AS a
FROM TABLE(TUMBLE(TABLE readings, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, usr
EMIT AFTER WATERMARK;
"""

#: usr -> the values of its window [0, 60 s).
VALUES: dict[str, list[int | None]] = {
    "back_in_range": [MAX, MAX, -MAX, -5],  # passes MAX twice, ends at MAX - 5
    "just_max": [MAX - 1, 1, None],  # ends exactly on MAX; a NULL is skipped
    "just_min": [MIN, 5, -5],  # ends exactly on MIN
    "above": [MAX, 1],  # 2^63: outside BIGINT
    "below": [MIN, -1],  # -2^63 - 1: outside BIGINT
    "slices": [(1 << 42) + 3, -(1 << 21) - 7, -(1 << 42), 123_456_789_012],  # every slice
    "all_null": [None, None],
}


def _expected(values: list[int | None]) -> tuple[int, int | None, float | None]:
    present = [v for v in values if v is not None]
    total = sum(present)
    in_range = MIN <= total <= MAX
    return (
        len(values),
        total if present and in_range else None,
        total / len(present) if present else None,
    )


INT_MAX = 2**31 - 1
INT_MIN = -(2**31)

INT_PROGRAM = """
CREATE TABLE readings (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr  VARCHAR NOT NULL,
    n    INT,
    m    INT NOT NULL
) WITH ('topic' = '{topic}');

CREATE VIEW totals WITH ('topic' = '{out}', 'format' = 'append') AS
SELECT window_start, usr, COUNT(*) AS c, SUM(n) AS s, AVG(n) AS a, COUNT(n) AS cn,
       SUM(m) AS sm, AVG(m) AS am, COUNT(m) AS cm, COUNT(m + m) AS cmm, AVG(m + m) AS amm
FROM TABLE(TUMBLE(TABLE readings, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, usr
EMIT AFTER WATERMARK;
"""

#: usr -> the (n, m) values of its window [0, 60 s).
INT_VALUES: dict[str, list[tuple[int | None, int]]] = {
    "above_int": [(INT_MAX, INT_MAX)] * 5,  # 5 * (2^31 - 1): past INT, inside BIGINT
    "below_int": [(INT_MIN, INT_MIN)] * 4 + [(None, -1)],  # a NULL n is skipped
    "mixed": [(INT_MAX, INT_MIN), (INT_MIN, INT_MAX), (7, 7), (None, 0)],
    "all_null": [(None, 3), (None, 4)],
}


def _run(
    kafka: Any, unique_topic: Any, tmp_path: Path, program_text: str, rows: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Run ``program_text`` (view ``totals``, native) over ``rows`` in minute 0 and a closing
    row; the written records by ``usr``."""
    topic, out = unique_topic("in"), unique_topic("out")
    kafka.create_topic(topic, partitions=1)
    program = tmp_path / "readings.sql"
    program.write_text(program_text.format(topic=topic, out=out))
    circuit = compile_program(program)
    assert is_native(circuit, circuit.view("totals")), "the view must run on the native path"
    codec = AvroCodec(circuit.table("readings").avro_schema)
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    for second, row in enumerate(rows, 1):
        producer.produce(topic, value=codec.encode({**row, "ts": BASE_MS + second * 1000}))
    closing = {**rows[0], "ts": BASE_MS + 200_000, "usr": "closing"}
    producer.produce(topic, value=codec.encode(closing), partition=0)
    assert producer.flush(30) == 0

    service = Service(circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2))
    service.start(once=True)
    service.wait(timeout_seconds=300)

    output = circuit.view("totals").output
    assert output is not None
    value_codec = AvroCodec(output.value_schema)
    written = {}
    for msg in read_topic(kafka.conf(), out):
        value = value_codec.decode(msg.value())
        assert value["window_start"] == BASE_MS
        written[value["usr"]] = value
    return written


def test_native_sum_and_avg_are_exact_past_bigint_on_the_way_l3(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    rows = [{"usr": usr, "n": n} for usr, values in VALUES.items() for n in values]
    written = _run(kafka, unique_topic, tmp_path, PROGRAM, rows)
    got = {usr: (v["c"], v["s"], v["a"]) for usr, v in written.items()}
    assert got == {usr: _expected(values) for usr, values in VALUES.items()}


def test_native_int_sums_pass_int_exactly_and_share_the_count_l3(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    rows = [
        {"usr": usr, "n": n, "m": m} for usr, values in INT_VALUES.items() for n, m in values
    ]
    written = _run(kafka, unique_topic, tmp_path, INT_PROGRAM, rows)
    expected = {}
    for usr, values in INT_VALUES.items():
        c, s, a = _expected([n for n, _ in values])
        ms = [m for _, m in values]
        cn = sum(n is not None for n, _ in values)
        # m + m is typed INT NOT NULL, yet NULL where it leaves INT: neither counted nor
        # averaged.
        doubled = [2 * m for m in ms if INT_MIN <= 2 * m <= INT_MAX]
        amm = sum(doubled) / len(doubled) if doubled else None
        expected[usr] = (c, s, a, cn, sum(ms), sum(ms) / len(ms), len(ms), len(doubled), amm)
    got = {
        usr: (v["c"], v["s"], v["a"], v["cn"], v["sm"], v["am"], v["cm"], v["cmm"], v["amm"])
        for usr, v in written.items()
    }
    assert got == expected
