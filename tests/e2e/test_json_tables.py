"""``'format' = 'json'`` tables through the real broker and Spark (SPEC L1, L2, S3-S7, S12-S14).

The two example programs whose table reads JSON run as shipped, on test topics, one
``--once`` run per step, with a late, a malformed and a wrong-type record among the good ones.
decoded_purchases also writes its view as JSON (``'encoding' = 'json'``): its records are read
back as JSON objects and compared with the reference evaluator's.

pipelines/decoded_purchases.sql (times on 2024-01-01 unless marked +1d; LATENESS 1 hour on the
decoded view column):

    step  records                                          view w before  dead letters   w after
    1     10:00 1 50, 09:30 2 "150.00"                     -inf           -              09:00
    2     08:59 1 "20.00", 09:00 2 10.5, +1d 03:00 1 120,  09:00          late 08:59,    +1d 02:00
          +1d 01:00 2 (no amount), a cut-off object,                      malformed,
          card "one", amount true                                         invalid x2
    3     23:00 2 30, +1d 05:00 1 "200"                    +1d 02:00      late 23:00     +1d 04:00

pipelines/hourly_colors.sql (events on 2026-11-26, LATENESS 1 second, hourly counts once final):

    step  records                                               dead letters          w after
    1     10:00:00Z red, 10:15 blue (epoch ms), 10:30 red       -                     10:29:59
          (no zone: UTC; an extra field)
    2     10:20 red, 11:00:05 green, bytes not UTF-8, an        late, malformed x2,   11:00:04
          array, rowtime true, no color                         invalid x2
    3     12:00:02.5 red                                        -                     12:00:01.5

Outputs are checked against hand-written expectations and against the reference evaluator fed
the rows the test sent; dead letters by reason, message and original bytes.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from table_steps import keyed_oracle, keyed_written, shipped_copy

from app.circuit.reference import StepInput, evaluate
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

#: (value bytes, the row they decode to or None, expected reason or None, message words)
Sent = tuple[bytes, dict[str, Any] | None, str | None, str]


def _ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


def _run(
    kafka: Any,
    tmp_path: Path,
    circuit: Any,
    topic: str,
    steps: list[list[Sent]],
) -> tuple[list[StepReport], list[StepInput], dict[bytes, Sent]]:
    """Produce each step's records (with a key naming them), run one ``--once`` step each."""
    from confluent_kafka import Producer

    table = circuit.tables[0].name
    producer = Producer({**kafka.conf(), "log_level": 3})
    reports: list[StepReport] = []
    service = Service(
        circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2), on_step=reports.append
    )
    inputs: list[StepInput] = []
    by_key: dict[bytes, Sent] = {}
    for number, records in enumerate(steps):
        for i, sent in enumerate(records):
            key = f"s{number}r{i}".encode()
            by_key[key] = sent
            producer.produce(
                topic, key=key, value=sent[0], partition=i % 2, headers=[("origin", key)]
            )
        assert producer.flush(30) == 0
        rows = [row for _, row, _, _ in records if row is not None]
        inputs.append(StepInput(rows={table: rows}))
        service.start(once=True)
        service.wait(timeout_seconds=300)
    return reports, inputs, by_key


def _check_dead_letters(
    kafka: Any, dlq: str, topic: str, table: str, by_key: dict[bytes, Sent]
) -> Counter[str]:
    """Every bad or late record once, original key, value and headers, its reason and words."""
    reasons: Counter[str] = Counter()
    dead = read_topic(kafka.conf(), dlq)
    assert sorted(m.key() for m in dead) == sorted(k for k, s in by_key.items() if s[2])
    for msg in dead:
        value, _row, reason, words = by_key[msg.key()]
        headers = {k: v for k, v in msg.headers()}
        assert msg.value() == value, "the original bytes, for replay"
        assert headers["origin"] == msg.key()
        assert headers["tidemark.error.reason"].decode() == reason, msg.key()
        message = headers["tidemark.error.message"].decode()
        assert words in message, message
        assert headers["tidemark.table"].decode() == table
        assert headers["tidemark.source.topic"].decode() == topic
        assert int(headers["tidemark.source.offset"]) >= 0
        reasons[reason] += 1
    return reasons


def _purchase(text: str, when: str, card: int, amount: str | None) -> Sent:
    row = {
        "date_time": when,
        "credit_card": card,
        "amount": None if amount is None else Decimal(amount),
    }
    return (text.encode(), row, None, "")


def test_decoded_purchases_runs_on_json_values_l1_l2_s6_s7(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    t = {k: unique_topic(k) for k in ("raw", "daily")}
    kafka.create_topic(t["raw"], partitions=2)
    program = shipped_copy(
        tmp_path,
        "decoded_purchases.sql",
        {"purchases.raw": t["raw"], "purchases.daily_card_spend": t["daily"]},
    )
    circuit = compile_program(program)
    table = circuit.table("purchase_raw")
    assert table.format == "json" and table.dead_letter_topic == t["raw"] + ".dlq"

    late_0859 = _purchase(
        '{"date_time": "2024-01-01 08:59:00", "credit_card": 1, "amount": "20.00"}',
        "2024-01-01 08:59:00",
        1,
        "20.00",
    )
    late_2300 = _purchase(
        '{"date_time": "2024-01-01 23:00:00", "credit_card": 2, "amount": 30}',
        "2024-01-01 23:00:00",
        2,
        "30.00",
    )
    steps: list[list[Sent]] = [
        [
            _purchase(
                '{"date_time": "2024-01-01 10:00:00", "credit_card": 1, "amount": 50}',
                "2024-01-01 10:00:00",
                1,
                "50.00",
            ),
            _purchase(
                '{"amount": "150.00", "credit_card": 2, "date_time": "2024-01-01 09:30:00"}',
                "2024-01-01 09:30:00",
                2,
                "150.00",
            ),
        ],
        [
            (late_0859[0], late_0859[1], "late", "below the waterline"),
            _purchase(
                '{"date_time": "2024-01-01 09:00:00", "credit_card": 2, "amount": 10.5}',
                "2024-01-01 09:00:00",
                2,
                "10.50",
            ),
            _purchase(
                '{"date_time": "2024-01-02 03:00:00", "credit_card": 1, "amount": 120}',
                "2024-01-02 03:00:00",
                1,
                "120.00",
            ),
            _purchase(
                '{"date_time": "2024-01-02 01:00:00", "credit_card": 2, "note": "no amount"}',
                "2024-01-02 01:00:00",
                2,
                None,
            ),
            (
                b'{"date_time": "2024-01-01 09:10:00", "credit_card": 1',
                None,
                "malformed",
                "not a JSON record of table purchase_raw: Expecting",
            ),
            (
                b'{"date_time": "2024-01-01 09:20:00", "credit_card": "one", "amount": 5}',
                None,
                "invalid",
                'column credit_card: expected a BIGINT (a JSON integer), got "one"',
            ),
            (
                b'{"date_time": "2024-01-01 09:30:00", "credit_card": 3, "amount": true}',
                None,
                "invalid",
                "column amount: expected a DECIMAL(10,2) number or string, got true",
            ),
        ],
        [
            (late_2300[0], late_2300[1], "late", "below the waterline"),
            _purchase(
                '{"date_time": "2024-01-02 05:00:00", "credit_card": 1, "amount": "200"}',
                "2024-01-02 05:00:00",
                1,
                "200.00",
            ),
        ],
    ]
    reports, inputs, by_key = _run(kafka, tmp_path, circuit, t["raw"], steps)
    expected = evaluate(circuit, inputs)

    data_steps = [r for r in reports if r.step is not None]
    assert [{k: n for k, n in r.dead_letters.items() if n} for r in data_steps] == [
        {},
        {"late": 1, "malformed": 1, "invalid": 2},
        {"late": 1},
    ]
    view_w = [r.waterlines["decoded_purchase.date_time"] for r in data_steps]
    assert (
        view_w
        == [_ms(2024, 1, 1, 9), _ms(2024, 1, 2, 2), _ms(2024, 1, 2, 4)]
        == [e.waterlines["decoded_purchase"]["date_time"] for e in expected]
    )

    reasons = _check_dead_letters(kafka, table.dead_letter_topic, t["raw"], "purchase_raw", by_key)
    assert reasons == Counter({"late": 2, "invalid": 2, "malformed": 1})
    late_headers = {
        json.loads(m.value())["date_time"]: {k: v.decode() for k, v in m.headers()}
        for m in read_topic(kafka.conf(), table.dead_letter_topic)
        if dict(m.headers())["tidemark.error.reason"] == b"late"
    }
    assert late_headers["2024-01-01 08:59:00"]["tidemark.late.column"] == (
        "decoded_purchase.date_time"
    )
    assert late_headers["2024-01-01 08:59:00"]["tidemark.late.waterline"] == (
        "2024-01-01T09:00:00.000Z"
    )
    assert late_headers["2024-01-01 23:00:00"]["tidemark.late.value"] == (
        "2024-01-01T23:00:00.000Z"
    )

    # The upsert topic's last value per key: the daily spend per card, by hand.
    records = keyed_written(kafka, circuit, "daily_card_spend", t["daily"])
    assert records == keyed_oracle(expected, "daily_card_spend")
    final: dict[tuple[int, int], tuple[Decimal | None, int]] = {}
    for key, value, _mark in sorted(records, key=lambda record: record[2]):  # step order
        k = dict(key)
        if value is None:
            final.pop((k["window_start"], k["credit_card"]), None)
            continue
        v = dict(value)
        final[(k["window_start"], k["credit_card"])] = (v["total"], v["purchases"])
    day1, day2 = _ms(2024, 1, 1), _ms(2024, 1, 2)
    assert final == {
        (day1, 1): (Decimal("50.00"), 1),
        (day1, 2): (Decimal("160.50"), 2),
        (day2, 1): (Decimal("320.00"), 2),
        (day2, 2): (None, 1),
    }
    # As a consumer reads them: keys and values are JSON objects, times ISO-8601 UTC strings,
    # DECIMALs exact strings.
    day2_card1 = {
        "window_start": "2024-01-02T00:00:00.000Z",
        "window_end": "2024-01-03T00:00:00.000Z",
        "credit_card": 1,
    }
    written = [
        json.loads(m.value())
        for m in read_topic(kafka.conf(), t["daily"])
        if json.loads(m.key()) == day2_card1
    ]
    assert written[-1] == {**day2_card1, "total": "320.00", "purchases": 2}


def _color(text: str, when: int, color: str) -> Sent:
    return (text.encode(), {"rowtime": when, "color": color}, None, "")


@pytest.mark.slow  # ~2 min; `.venv/bin/pytest -m slow tests/e2e/test_json_tables.py`
def test_hourly_colors_runs_on_json_values_l1_s3_s5_s7_s12(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    t = {k: unique_topic(k) for k in ("colors", "dlq", "hourly")}
    kafka.create_topic(t["colors"], partitions=2)
    program = shipped_copy(
        tmp_path,
        "hourly_colors.sql",
        {"colors": t["colors"], "colors.dlq": t["dlq"], "colors.hourly": t["hourly"]},
    )
    circuit = compile_program(program)
    assert circuit.table("color_event").format == "json"

    def at(hour: int, minute: int, second: int = 0, ms: int = 0) -> int:
        return _ms(2026, 11, 26, hour, minute, second) + ms

    late = _color('{"rowtime": "2026-11-26T10:20:00Z", "color": "red"}', at(10, 20), "red")
    steps: list[list[Sent]] = [
        [
            _color('{"rowtime": "2026-11-26T10:00:00Z", "color": "red"}', at(10, 0), "red"),
            _color(f'{{"rowtime": {at(10, 15)}, "color": "blue"}}', at(10, 15), "blue"),
            _color(
                '{"color": "red", "rowtime": "2026-11-26T10:30:00", "sensor": 7}', at(10, 30), "red"
            ),
        ],
        [
            (late[0], late[1], "late", "below the waterline"),
            _color(
                '{"rowtime": "2026-11-26T11:00:05+00:00", "color": "green"}', at(11, 0, 5), "green"
            ),
            (
                b'\xff\xfe{"rowtime": 1, "color": "red"}',
                None,
                "malformed",
                "not a JSON record of table color_event: not UTF-8 text",
            ),
            (
                b'["2026-11-26T10:40:00Z", "red"]',
                None,
                "malformed",
                "the value is an array, not a JSON object",
            ),
            (
                b'{"rowtime": true, "color": "red"}',
                None,
                "invalid",
                "column rowtime: expected a TIMESTAMP ISO-8601 string or epoch milliseconds",
            ),
            (
                b'{"rowtime": "2026-11-26T10:40:00Z"}',
                None,
                "invalid",
                "column color is NOT NULL but the record has null",
            ),
        ],
        [
            _color(
                '{"rowtime": "2026-11-26 12:00:02.500Z", "color": "red"}', at(12, 0, 2, 500), "red"
            ),
        ],
    ]
    reports, inputs, by_key = _run(kafka, tmp_path, circuit, t["colors"], steps)
    expected = evaluate(circuit, inputs)

    data_steps = [r for r in reports if r.step is not None]
    assert (
        [r.waterlines["rowtime"] for r in data_steps]
        == [at(10, 29, 59), at(11, 0, 4), at(12, 0, 1, 500)]
        == [e.waterlines["color_event"]["rowtime"] for e in expected]
    )
    assert [r.accepted for r in data_steps] == [3, 1, 1]

    reasons = _check_dead_letters(kafka, t["dlq"], t["colors"], "color_event", by_key)
    assert reasons == Counter({"late": 1, "malformed": 2, "invalid": 2})
    assert sum(r.dead_letters.get("late", 0) for r in data_steps) == 1

    records = keyed_written(kafka, circuit, "hourly_color_count", t["hourly"])
    assert records == keyed_oracle(expected, "hourly_color_count")
    rows = sorted(
        (dict(value)["window_start"], dict(value)["color"], dict(value)["events"], mark)
        for (_key, value, mark) in records.elements()
    )
    assert rows == [
        (at(10, 0), "blue", 1, "2026-11-26T11:00:04.000Z"),
        (at(10, 0), "red", 2, "2026-11-26T11:00:04.000Z"),
        (at(11, 0), "green", 1, "2026-11-26T12:00:01.500Z"),
    ]
