"""pipelines/hop_purchases.sql and pipelines/nexmark_q7.sql as shipped, on test topics, through
the real broker and Spark (SPEC S5, S12, S13, S14): a few records in three ``--once`` steps,
a late one among them, compared with hand-written expectations and with the reference
evaluator record for record.

hop_purchases (HOP 15 minutes every 5, LATENESS 1 hour; times on 2026-11-26):

    step  purchases                                    w before  dead letters  w after
    1     10:01 #1 50.00, 10:07 #2 20.00, 10:12 #1 -60  -inf      -             09:12
    2     10:20 #1 30.00, 09:00 #2 10.00 (late)         09:12     late          09:20
    3     11:40 #2 5.00                                 09:20     -             10:40

nexmark_q7 (10-minute windows, LATENESS 4 minutes; the top bid of a window once final):

    step  bids                                         w after  rows written
    1     10:01 10 a, 10:03 30 b, 10:07 20 c            10:03    -
    2     10:12 5 d, 10:02 99 e (late), 10:05 40 f      10:08    -
    3     10:25 1 g                                     10:21    [10:00, 10:10) f, [10:10, 10:20) d
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from table_steps import run_steps

from app.circuit.ir import Circuit
from app.circuit.reference import StepResult, evaluate
from app.connectors.output_reader import OutputReader
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def _program(tmp: Path, name: str, topics: Mapping[str, str]) -> Circuit:
    """The shipped program with each quoted topic name replaced by a test topic."""
    text = (ROOT / "pipelines" / f"{name}.sql").read_text(encoding="utf-8")
    for shipped, test in topics.items():
        assert f"'{shipped}'" in text, shipped
        text = text.replace(f"'{shipped}'", f"'{test}'")
    path = tmp / f"{name}.sql"
    path.write_text(text, encoding="utf-8")
    return compile_program(path)


def _ms(clock: str) -> int:
    hour, minute = (int(x) for x in clock.split(":"))
    return int(datetime(2026, 11, 26, hour, minute, tzinfo=UTC).timestamp() * 1000)


def _frozen(record: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...] | None:
    """A record as a hashable value; a changelog's ``ptime`` (the step's batch time) left out."""
    if record is None:
        return None
    return tuple(sorted((k, v) for k, v in record.items() if k != "ptime"))


def _written(kafka: Any, circuit: Circuit, view: str, topic: str) -> Counter[Any]:
    """Every record of ``view`` as (key, value, ``tidemark.waterline`` header), counted."""
    output = circuit.view(view).output
    assert output is not None
    reader = OutputReader(view, output)
    return Counter(
        (
            _frozen(reader.key(m.key())),
            _frozen(reader.value(m.value())),
            dict(m.headers())["tidemark.waterline"].decode(),
        )
        for m in read_topic(kafka.conf(), topic)
    )


def _oracle(results: Sequence[StepResult], view: str) -> Counter[Any]:
    return Counter(
        (_frozen(r.key), _frozen(r.value), format_time_value(r.waterline, "ms"))
        for result in results
        for r in result.outputs[view]
    )


def _late(kafka: Any, dlq: str) -> list[dict[str, str]]:
    return [
        {k: v.decode() for k, v in m.headers() if k.startswith("tidemark.")}
        for m in read_topic(kafka.conf(), dlq)
    ]


def _purchase(clock: str, card: int, amount: str) -> dict[str, Any]:
    return {"date_time": _ms(clock), "credit_card": card, "amount": Decimal(amount)}


def test_hop_purchases_runs_as_shipped_s12_s13_s14(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {k: unique_topic(k) for k in ("purchases", "card_spend", "changes")}
    kafka.create_topic(topics["purchases"], partitions=2)
    circuit = _program(
        tmp_path,
        "hop_purchases",
        {
            "purchases": topics["purchases"],
            "purchases.card_spend_15m": topics["card_spend"],
            "purchases.spend_15m_changes": topics["changes"],
        },
    )
    steps = [
        {
            "purchase": [
                _purchase("10:01", 1, "50.00"),
                _purchase("10:07", 2, "20.00"),
                _purchase("10:12", 1, "-60.00"),
            ]
        },
        {"purchase": [_purchase("10:20", 1, "30.00"), _purchase("09:00", 2, "10.00")]},
        {"purchase": [_purchase("11:40", 2, "5.00")]},
    ]
    reports, inputs = run_steps(
        kafka, tmp_path, circuit, {"purchase": topics["purchases"]}, steps
    )
    expected = evaluate(circuit, inputs)

    data_steps = [r for r in reports if r.step is not None]
    assert [r.waterlines["date_time"] for r in data_steps] == [
        _ms("09:12"), _ms("09:20"), _ms("10:40")
    ]
    assert [r.dead_letters.get("late", 0) for r in data_steps] == [0, 1, 0]
    [late] = _late(kafka, topics["purchases"] + ".dlq")
    assert late["tidemark.error.reason"] == "late"
    assert late["tidemark.late.value"] == "2026-11-26T09:00:00.000Z"

    card_spend = _written(kafka, circuit, "card_spend_15m", topics["card_spend"])
    assert card_spend == _oracle(expected, "card_spend_15m")
    final: dict[tuple[int, int], Any] = {}
    for key, value, _mark in card_spend.elements():
        assert key is not None
        k = dict(key)
        if value is None:  # HAVING SUM(amount) > 0 no longer holds: a tombstone
            final.pop((k["window_start"], k["credit_card"]), None)
        else:
            final[(k["window_start"], k["credit_card"])] = (
                dict(value)["purchases"], dict(value)["total"]
            )
    # Card 1's 10:12 refund makes its 10:00, 10:05 and 10:10 windows non-positive.
    assert final[(_ms("09:50"), 1)] == (1, Decimal("50.00"))
    assert (_ms("10:00"), 1) not in final and (_ms("10:05"), 1) not in final
    assert (_ms("10:10"), 1) not in final, "-60.00, then -30.00: never positive"
    assert final[(_ms("10:15"), 1)] == (1, Decimal("30.00"))
    assert final[(_ms("10:20"), 1)] == (1, Decimal("30.00"))
    assert final[(_ms("11:30"), 2)] == (1, Decimal("5.00"))

    changes = _written(kafka, circuit, "spend_15m_changes", topics["changes"])
    assert changes == _oracle(expected, "spend_15m_changes")
    firsts = [dict(v) for _k, v, _m in changes if v is not None and dict(v)["ver"] == 0]
    assert {v["window_end"] for v in firsts} >= {_ms("10:05"), _ms("10:35"), _ms("11:45")}


def _bid(clock: str, price: int, item: str) -> dict[str, Any]:
    return {"bidtime": _ms(clock), "price": price, "item": item}


def test_nexmark_q7_runs_as_shipped_s5_s12_s14(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {k: unique_topic(k) for k in ("bids", "q7")}
    kafka.create_topic(topics["bids"], partitions=2)
    circuit = _program(
        tmp_path, "nexmark_q7", {"nexmark.bids": topics["bids"], "nexmark.q7": topics["q7"]}
    )
    steps = [
        {"bid": [_bid("10:01", 10, "a"), _bid("10:03", 30, "b"), _bid("10:07", 20, "c")]},
        {"bid": [_bid("10:12", 5, "d"), _bid("10:02", 99, "e"), _bid("10:05", 40, "f")]},
        {"bid": [_bid("10:25", 1, "g")]},
    ]
    reports, inputs = run_steps(kafka, tmp_path, circuit, {"bid": topics["bids"]}, steps)
    expected = evaluate(circuit, inputs)

    data_steps = [r for r in reports if r.step is not None]
    assert [r.waterlines["bidtime"] for r in data_steps] == [
        _ms("10:03"), _ms("10:08"), _ms("10:21")
    ]
    [late] = _late(kafka, topics["bids"] + ".dlq")
    assert late["tidemark.late.value"] == "2026-11-26T10:02:00.000Z"

    rows = _written(kafka, circuit, "max_bid", topics["q7"])
    assert rows == _oracle(expected, "max_bid")
    header = "2026-11-26T10:21:00.000Z"
    assert rows == Counter(
        [
            (None, _frozen({"wstart": _ms("10:00"), "wend": _ms("10:10"),
                            "bidtime": _ms("10:05"), "price": 40, "item": "f"}), header),
            (None, _frozen({"wstart": _ms("10:10"), "wend": _ms("10:20"),
                            "bidtime": _ms("10:12"), "price": 5, "item": "d"}), header),
        ]
    )
