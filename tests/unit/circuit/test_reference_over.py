"""OVER aggregates (docs/semantics.md; SPEC S5, S10, S11, S12) in the reference evaluator,
from SQL text, step by step, with expectations written by hand.

purchase has LATENESS 1 minute. Four steps:

1. a 8:00 (1), a 8:05 (2), b 8:03 (10), c 8:04 (7): w = 8:04. Written: a 8:00 and b 8:03
   (below w); c 8:04 equals w, so a row at 8:04 may still come (S5): it waits.
2. c 8:04 (1) (equal to w(t-1): on time), a 8:05 (3), a 8:12 (4): w = 8:11. Written, in
   (time, arrival) order: c 8:04 twice, a 8:05 twice (peers: a RANGE frame gives them
   equal values).
3. a 8:03 (100) (late: below 8:11, a dead letter never counted), b 8:20 (5): w = 8:19.
   Written: a 8:12.
4. a bound of 8:40 moves w to 8:39. Written: b 8:20.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from circuit_builders import at

from app.circuit.ir import Circuit
from app.circuit.reference import Punctuation, StepInput, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program

TABLE = """
CREATE TABLE purchase (
    ts     TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    item   VARCHAR NOT NULL,
    amount BIGINT
) WITH ('topic' = 'purchases');
"""

VIEW = """
CREATE VIEW v WITH ('topic' = 'v') AS
SELECT item, ts, amount,
       SUM(amount) OVER (PARTITION BY item ORDER BY ts {frame}) AS s,
       COUNT(*) OVER (PARTITION BY item ORDER BY ts {frame}) AS n
FROM purchase;
"""

STEPS = [
    StepInput({"purchase": [
        {"ts": at("8:00"), "item": "a", "amount": 1},
        {"ts": at("8:05"), "item": "a", "amount": 2},
        {"ts": at("8:03"), "item": "b", "amount": 10},
        {"ts": at("8:04"), "item": "c", "amount": 7},
    ]}),
    StepInput({"purchase": [
        {"ts": at("8:04"), "item": "c", "amount": 1},
        {"ts": at("8:05"), "item": "a", "amount": 3},
        {"ts": at("8:12"), "item": "a", "amount": 4},
    ]}),
    StepInput({"purchase": [
        {"ts": at("8:03"), "item": "a", "amount": 100},
        {"ts": at("8:20"), "item": "b", "amount": 5},
    ]}),
    StepInput({}, punctuations={"purchase": [Punctuation(at("8:40"))]}),
]


def view(frame: str) -> Circuit:
    return compile_program("over.sql", text=TABLE + VIEW.format(frame=frame))


def rows(frame: str) -> list[list[tuple[str, str, int, int, int]]]:
    """Per step, the written rows as (item, time, amount, s, n)."""
    out = []
    for result in evaluate(view(frame), STEPS):
        step = []
        for record in result.outputs["v"]:
            value = record.value
            assert value is not None and record.key is None
            clock = next(c for c in _CLOCKS if at(c) == value["ts"])
            step.append((value["item"], clock, value["amount"], value["s"], value["n"]))
        out.append(step)
    return out


_CLOCKS = ["8:00", "8:03", "8:04", "8:05", "8:12", "8:20"]


def test_s12_range_frame_writes_each_row_once_the_waterline_passes_it_peers_equal() -> None:
    assert rows("RANGE BETWEEN INTERVAL '10' MINUTE PRECEDING AND CURRENT ROW") == [
        [("a", "8:00", 1, 1, 1), ("b", "8:03", 10, 10, 1)],
        [("c", "8:04", 7, 8, 2), ("c", "8:04", 1, 8, 2),
         ("a", "8:05", 2, 6, 3), ("a", "8:05", 3, 6, 3)],
        # 8:12 reads [8:02, 8:12]: 8:00 is out, the late 8:03 was never counted.
        [("a", "8:12", 4, 9, 3)],
        [("b", "8:20", 5, 5, 1)],
    ]


def test_rows_frame_reads_the_row_and_its_predecessors_in_arrival_order() -> None:
    assert rows("ROWS BETWEEN 1 PRECEDING AND CURRENT ROW") == [
        [("a", "8:00", 1, 1, 1), ("b", "8:03", 10, 10, 1)],
        [("c", "8:04", 7, 7, 1), ("c", "8:04", 1, 8, 2),
         ("a", "8:05", 2, 3, 2), ("a", "8:05", 3, 5, 2)],
        [("a", "8:12", 4, 7, 2)],
        [("b", "8:20", 5, 15, 2)],
    ]


def test_unbounded_frames_default_to_range_and_rows_differ_on_peers() -> None:
    default = rows("")
    assert default == rows("RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW")
    assert default == [
        [("a", "8:00", 1, 1, 1), ("b", "8:03", 10, 10, 1)],
        [("c", "8:04", 7, 8, 2), ("c", "8:04", 1, 8, 2),
         ("a", "8:05", 2, 6, 3), ("a", "8:05", 3, 6, 3)],
        [("a", "8:12", 4, 10, 4)],
        [("b", "8:20", 5, 15, 2)],
    ]
    assert rows("ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW")[1] == [
        ("c", "8:04", 7, 7, 1), ("c", "8:04", 1, 8, 2),
        ("a", "8:05", 2, 3, 2), ("a", "8:05", 3, 6, 3)]


def test_s5_late_rows_are_dead_letters_and_s11_state_is_freed_by_the_waterline() -> None:
    results = evaluate(view("RANGE BETWEEN INTERVAL '10' MINUTE PRECEDING AND CURRENT ROW"),
                       STEPS)
    assert [len(r.dead_letters) for r in results] == [0, 0, 1, 0]
    assert results[2].dead_letters[0].reason == "late"
    # After step 2 (w = 8:11, frames read from 8:01): a's 8:05 twice and waiting 8:12, b's
    # 8:03, c's 8:04 twice. After step 3 (from 8:09): a's 8:12, b's waiting 8:20.
    assert [r.state_rows["v"] for r in results] == [4, 6, 2, 0]
    # The ORDER BY column stays a time attribute, with the table's waterline (S10, S14).
    assert [r.view_waterlines["v"] for r in results] == [
        at("8:04"), at("8:11"), at("8:19"), at("8:39")]


def test_rows_frame_keeps_the_last_n_written_rows() -> None:
    results = evaluate(view("ROWS BETWEEN 1 PRECEDING AND CURRENT ROW"), STEPS)
    # Step 4: a keeps its last written row (8:12), b its 8:20: one row per partition.
    assert [r.state_rows["v"] for r in results] == [4, 4, 4, 3]


def test_avg_min_max_and_a_named_window() -> None:
    circuit = compile_program("over.sql", text=TABLE + """
CREATE VIEW v WITH ('topic' = 'v') AS
SELECT item, ts, AVG(amount) OVER w AS mean, MIN(amount) OVER w AS low,
       MAX(amount) OVER w AS high, amount * 2 + SUM(amount) OVER w AS mixed
FROM purchase WHERE amount < 50
WINDOW w AS (PARTITION BY item ORDER BY ts
             RANGE BETWEEN INTERVAL '10' MINUTE PRECEDING AND CURRENT ROW);
""")
    results = evaluate(circuit, STEPS)
    step2 = [r.value for r in results[1].outputs["v"]]
    assert [(v["item"], v["mean"], v["low"], v["high"], v["mixed"]) for v in step2] == [
        ("c", 4.0, 1, 7, 22), ("c", 4.0, 1, 7, 10), ("a", 2.0, 1, 3, 10), ("a", 2.0, 1, 3, 12)]


def test_language_doc_over_example_runs() -> None:
    """docs/language.md's OVER example: the running average of the last hour per item."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "language.md").read_text("utf-8")
    section = doc[doc.index("**OVER aggregates**"):]
    example = re.search(r"```sql\n(CREATE TABLE.*?)```", section, re.S)
    assert example is not None
    circuit = compile_program("doc.sql", text=example[1])
    def event(seqno: int, clock: str, cost: str) -> dict[str, Any]:
        return {"seqno": seqno, "ts": at(clock), "classification": "x", "cost": Decimal(cost)}

    steps = [
        StepInput({"event": [event(1, "8:00", "10"), event(2, "8:30", "20")]}),
        StepInput({"event": [event(3, "9:10", "30")]}),
        StepInput({}, punctuations={"event": [Punctuation(at("10:00"))]}),
    ]
    results = evaluate(circuit, steps)
    written: list[list[Any]] = [
        [(v["seqno"], v["avg_cost"]) for v in (r.value for r in x.outputs["avg_cost"]) if v]
        for x in results]
    # 9:10 reads [8:10, 9:10]: 8:30 and itself.
    assert written == [[(1, Decimal(10))], [(2, Decimal(15))], [(3, Decimal(25))]]


@pytest.mark.parametrize(("over", "message", "fix"), [
    ("OVER (PARTITION BY item ORDER BY ts ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING)",
     "8:87: error: unsupported: an OVER frame that ends after the current row", "CURRENT ROW"),
    ("OVER (ORDER BY ts DESC)", "8:38: error: unsupported: ORDER BY ... DESC", "remove DESC"),
    ("OVER (ORDER BY amount)", "8:35: error: column amount is not a time attribute",
     "ORDER BY a LATENESS column of the input (ts)"),
    ("OVER (PARTITION BY item)", "8:20: error: an OVER window must ORDER BY exactly one time",
     "ORDER BY a LATENESS column"),
    ("OVER (ORDER BY ts RANGE BETWEEN 5 PRECEDING AND CURRENT ROW)",
     "8:38: error: bad RANGE frame for ts (TIMESTAMP)", "use an INTERVAL"),
    ("OVER w", "8:25: error: unknown window w", "WINDOW w AS"),
    ("OVER (ORDER BY ts GROUPS BETWEEN 1 PRECEDING AND CURRENT ROW)",
     "8:38: error: unsupported: a GROUPS frame", "ROWS BETWEEN n PRECEDING"),
])
def test_l7_unsupported_over_windows_are_refused_where_written(over: str, message: str,
                                                              fix: str) -> None:
    text = TABLE + f"CREATE VIEW v AS\nSELECT SUM(amount) {over} AS s FROM purchase;\n"
    with pytest.raises(ProgramError) as caught:
        compile_program("over.sql", text=text)
    assert f"over.sql:{message}" in str(caught.value)
    assert fix in str(caught.value)


@pytest.mark.parametrize(("select", "message"), [
    ("SUM(amount) OVER (ORDER BY ts) AS s, COUNT(*) OVER (PARTITION BY item ORDER BY ts) AS n "
     "FROM purchase", "must share one window"),
    ("item, SUM(amount) OVER (ORDER BY ts) AS s FROM purchase GROUP BY item",
     "OVER aggregates cannot be combined with GROUP BY"),
    ("SUM(amount) OVER (ORDER BY ts) AS s, MAX(amount) AS m FROM purchase",
     "OVER aggregates cannot be combined"),
    ("ts FROM purchase WHERE SUM(amount) OVER (ORDER BY ts) > 1",
     "SUM OVER (...): it is not allowed in WHERE"),
    ("ROW_NUMBER() OVER (ORDER BY ts) AS r FROM purchase",
     "unsupported: ROW_NUMBER() OVER (...) over rows of no window"),
])
def test_l7_over_aggregates_in_one_select_share_one_window_and_no_group_by(
        select: str, message: str) -> None:
    with pytest.raises(ProgramError, match=re.escape(message)):
        compile_program("over.sql", text=TABLE + f"CREATE VIEW v AS\nSELECT {select};\n")


@pytest.mark.parametrize("fmt", ["upsert", "changelog"])
def test_l6_an_over_view_is_insert_only(fmt: str) -> None:
    text = TABLE + (f"CREATE VIEW v WITH ('topic' = 'v', 'format' = '{fmt}') AS\n"
                    "SELECT ts, SUM(amount) OVER (ORDER BY ts) AS s FROM purchase;\n")
    with pytest.raises(ProgramError, match="written as 'append'"):
        compile_program("over.sql", text=text)
