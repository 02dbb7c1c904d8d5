"""The seeds' worked examples again, from SQL text through compile_program into the oracle.

The hand-built circuits of the other tests pin the evaluator down whatever the compiler does;
these pin the pair (compiler + evaluator) to the same answers. Step mapping for seed 001 as in
test_reference_paper.py: one step per line of the paper's data set, ``WM -> x`` = a
punctuation at ``x + 10 min`` (bid.bidtime has LATENESS 10 minutes), ptime = processing time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from circuit_builders import (
    DATA_SET,
    at,
    materialize,
    money,
    paper_steps,
    records,
    values,
)

from app.circuit.ir import Circuit, SqlType
from app.circuit.reference import Punctuation, Reference, StepInput, StepResult, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program

PROGRAMS = Path(__file__).resolve().parents[3] / "pipelines"

BID = """
CREATE TABLE bid (
    bidtime TIMESTAMP NOT NULL LATENESS INTERVAL '10' MINUTE,
    price   DECIMAL(10, 2) NOT NULL,
    item    VARCHAR NOT NULL
) WITH ('topic' = 'bids');
"""

Q7 = """
CREATE VIEW q7 WITH ('topic' = 'q7'{fmt}) AS
SELECT window_start AS wstart, window_end AS wend,
       ARG_MAX(bidtime, price) AS bidtime, MAX(price) AS price, ARG_MAX(item, price) AS item
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE))
GROUP BY window_start, window_end
{emit};
"""


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=text)


def run_q7(emit: str, fmt: str = "") -> list[StepResult]:
    circuit = compile_sql(BID + Q7.format(emit=emit, fmt=fmt))
    return evaluate(circuit, paper_steps())


def row(wstart: str, wend: str, bidtime: str, price: int, item: str) -> dict[str, Any]:
    return {"wstart": at(wstart), "wend": at(wend), "bidtime": at(bidtime),
            "price": money(price), "item": item}


def log(base: dict[str, Any], undo: bool, ptime: str, ver: int) -> dict[str, Any]:
    return {**base, "undo": undo, "ptime": at(ptime), "ver": ver}


A, B = row("8:00", "8:10", "8:07", 2, "A"), row("8:10", "8:20", "8:11", 3, "B")
C, D = row("8:00", "8:10", "8:05", 4, "C"), row("8:00", "8:10", "8:09", 5, "D")
F = row("8:10", "8:20", "8:17", 6, "F")


def test_s8_sql_listing3_q7_final_answers() -> None:
    final = materialize(run_q7(""), "q7")
    assert sorted(final.values(), key=lambda r: r["wend"]) == [D, F]


def test_s12_sql_listing9_emit_stream() -> None:
    assert values(run_q7("EMIT STREAM"), "q7") == [
        log(A, False, "8:08", 0), log(B, False, "8:12", 0),
        log(A, True, "8:13", 1), log(C, False, "8:13", 2),
        log(C, True, "8:15", 3), log(D, False, "8:15", 4),
        log(B, True, "8:18", 1), log(F, False, "8:18", 2),
    ]


def test_s12_sql_listings10_to_12_emit_after_watermark() -> None:
    results = run_q7("EMIT AFTER WATERMARK")
    emitted_at = [(ptime, [r.value for r in res.outputs["q7"]])
                  for (ptime, _), res in zip(DATA_SET, results, strict=True) if res.outputs["q7"]]
    assert emitted_at == [("8:16", [D]), ("8:21", [F])]


#: Listing 2: the same query as a join of the bids with each window's highest price, the
#: bid's time bounded by the window's end (an interval join on ``window_end``, S16).
Q7_JOIN = """
CREATE LOCAL VIEW max_bid AS
SELECT window_end AS wend, MAX(price) AS maxprice
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;

CREATE VIEW q7 WITH ('topic' = 'q7', 'format' = 'append') AS
SELECT m.wend - INTERVAL '10' MINUTE AS wstart, m.wend AS wend, b.bidtime AS bidtime,
       b.price AS price, b.item AS item
FROM bid AS b JOIN max_bid AS m
  ON b.price = m.maxprice
 AND b.bidtime >= m.wend - INTERVAL '10' MINUTE AND b.bidtime < m.wend;
"""


def test_s16_sql_listing2_q7_as_a_join_writes_listing3_when_each_window_is_final() -> None:
    """Each window's top bid is written once, in the step its window's maximum is (8:16 and
    8:21, as the ARG_MAX form's EMIT AFTER WATERMARK), and each bid is freed once no window
    it belongs to can still be written."""
    circuit = compile_sql(BID + Q7_JOIN)
    results = evaluate(circuit, paper_steps())
    emitted_at = [(ptime, [r.value for r in res.outputs["q7"]])
                  for (ptime, _), res in zip(DATA_SET, results, strict=True) if res.outputs["q7"]]
    assert emitted_at == [("8:16", [D]), ("8:21", [F])]
    arg_max = run_q7("EMIT AFTER WATERMARK", ", 'format' = 'append'")
    assert [[r.value for r in res.outputs["q7"]] for res in results] == [
        [r.value for r in res.outputs["q7"]] for res in arg_max
    ]


#: Listing 2 as the paper writes it: the bids and a subquery of each window's maximum in one
#: FROM list, joined by WHERE (Tidemark's spelling of the window function and its columns).
Q7_LISTING2 = """
CREATE VIEW q7 WITH ('topic' = 'q7', 'format' = 'append') AS
SELECT MaxBid.wstart, MaxBid.wend, Bid.bidtime, Bid.price, Bid.item
FROM
  bid AS Bid,
  (SELECT MAX(price) AS maxPrice, window_start AS wstart, window_end AS wend
   FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE))
   GROUP BY window_start, window_end) AS MaxBid
WHERE
  Bid.price = MaxBid.maxPrice AND
  Bid.bidtime >= MaxBid.wend - INTERVAL '10' MINUTE AND
  Bid.bidtime < MaxBid.wend;
"""


def test_s16_sql_listing2_as_written_is_the_inner_join_of_its_from_list() -> None:
    """``FROM a, (SELECT ...) AS b WHERE ...`` is the INNER join ON the WHERE condition: the
    same keys and time bound as the JOIN form, and listing 3's rows in the same steps."""
    circuit = compile_sql(BID + Q7_LISTING2)
    join = circuit.view("q7").join
    assert join is not None and (join.kind, join.form) == ("inner", "interval")
    assert join.bound is not None and (join.bound.lower, join.bound.upper) == (1, 600_000)
    results = evaluate(circuit, paper_steps())
    emitted_at = [(ptime, [r.value for r in res.outputs["q7"]])
                  for (ptime, _), res in zip(DATA_SET, results, strict=True) if res.outputs["q7"]]
    assert emitted_at == [("8:16", [D]), ("8:21", [F])]


@pytest.mark.parametrize(("from_list", "expected"), [
    ("bid AS a, bid AS b", "two relations in FROM need their join condition in WHERE"),
    ("bid AS a, bid AS b, bid AS c", "unsupported: a join of more than two relations"),
])
def test_l7_a_from_list_without_where_or_of_three_relations_is_refused(
        from_list: str, expected: str) -> None:
    where = "" if "c" not in from_list else " WHERE a.price = b.price"
    text = BID + (f"CREATE VIEW v WITH ('topic' = 'v', 'format' = 'append') AS "
                  f"SELECT a.item FROM {from_list}{where};")
    with pytest.raises(ProgramError) as raised:
        compile_sql(text)
    assert expected in str(raised.value)


def test_s16_sql_q7_as_a_join_writes_every_bid_that_ties_for_the_top_price() -> None:
    """Where the ARG_MAX form keeps the earliest of two bids at the top price, the join
    matches both with the window's maximum: the forms agree when no two bids of a window
    tie for its top price."""
    steps = [
        StepInput({"bid": [{"bidtime": at("8:01"), "price": money(5), "item": "P"},
                           {"bidtime": at("8:04"), "price": money(5), "item": "Q"},
                           {"bidtime": at("8:02"), "price": money(2), "item": "R"}]}, at("8:05")),
        StepInput({}, at("8:30"), punctuations={"bid": [Punctuation(at("8:30"))]}),
    ]
    joined = evaluate(compile_sql(BID + Q7_JOIN), steps)
    arg_max = evaluate(compile_sql(BID + Q7.format(emit="EMIT AFTER WATERMARK", fmt="")), steps)
    assert [r.value["item"] for r in joined[1].outputs["q7"]] == ["P", "Q"]
    assert [r.value["item"] for r in arg_max[1].outputs["q7"]] == ["P"]


def test_s12_sql_listing13_emit_stream_after_watermark() -> None:
    assert values(run_q7("EMIT STREAM AFTER WATERMARK"), "q7") == [
        log(D, False, "8:16", 0), log(F, False, "8:21", 0),
    ]


def test_s12_sql_listing14_emit_stream_after_delay() -> None:
    assert values(run_q7("EMIT STREAM AFTER DELAY INTERVAL '6' MINUTE"), "q7") == [
        log(C, False, "8:14", 0), log(F, False, "8:18", 0),
        log(C, True, "8:21", 1), log(D, False, "8:21", 2),
    ]


def test_s13_sql_append_after_watermark_has_no_key() -> None:
    got = records(run_q7("EMIT AFTER WATERMARK", ", 'format' = 'append'"), "q7")
    assert [(r.key, r.value) for r in got] == [(None, D), (None, F)]


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        ("TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE)",
         [("8:00", "8:10", 11), ("8:10", "8:20", 10)]),  # listing 6
        ("HOP(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTE, INTERVAL '10' MINUTE)",
         [("8:00", "8:10", 11), ("8:05", "8:15", 15), ("8:10", "8:20", 10),
          ("8:15", "8:25", 6)]),  # listing 8
    ],
)
def test_s9_sql_listings6_and_8_group_by_wend(window: str, expected: list[Any]) -> None:
    circuit = compile_sql(BID + f"""
        CREATE VIEW sums WITH ('topic' = 'sums') AS
        SELECT MAX(window_start) AS wstart, window_end AS wend, SUM(price) AS price
        FROM TABLE({window}) GROUP BY window_end;""")
    final = materialize(evaluate(circuit, paper_steps()), "sums")
    assert sorted((r["wstart"], r["wend"], r["price"]) for r in final.values()) == [
        (at(s), at(e), money(p)) for s, e, p in expected
    ]


def test_s9_sql_listing7_hop_rows() -> None:
    circuit = compile_sql(BID + """
        CREATE VIEW hopped WITH ('topic' = 'hopped', 'format' = 'append') AS
        SELECT window_start AS wstart, window_end AS wend, bidtime, item
        FROM TABLE(HOP(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTE,
                       INTERVAL '10' MINUTE));""")
    got = [(v["wstart"], v["item"]) for v in values(evaluate(circuit, paper_steps()), "hopped")]
    assert got == [(at(s), i) for s, i in [
        ("8:00", "A"), ("8:05", "A"), ("8:05", "B"), ("8:10", "B"), ("8:00", "C"), ("8:05", "C"),
        ("8:00", "D"), ("8:05", "D"), ("8:05", "E"), ("8:10", "E"), ("8:10", "F"), ("8:15", "F"),
    ]]


def test_s3_l2_sql_seed000_purchase_and_decoded_purchase() -> None:
    circuit = compile_sql("""
        CREATE TABLE purchase (
            date_time TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,
            credit_card BIGINT NOT NULL,
            amount DECIMAL(10, 2)
        ) WITH ('topic' = 'purchases');
        CREATE TABLE raw_purchase (
            date_time VARCHAR NOT NULL,
            credit_card BIGINT NOT NULL,
            amount DECIMAL(10, 2)
        ) WITH ('topic' = 'raw');
        CREATE LOCAL VIEW decoded_purchase AS
        SELECT CAST(date_time AS TIMESTAMP) AS date_time, credit_card, amount
        FROM raw_purchase;
        LATENESS decoded_purchase.date_time INTERVAL '1' HOUR;
        CREATE VIEW decoded WITH ('topic' = 'decoded', 'format' = 'append') AS
        SELECT * FROM decoded_purchase;
    """)
    reference = Reference(circuit)
    first = reference.step(StepInput({
        "purchase": [{"date_time": at("10:00"), "credit_card": 1, "amount": money(5)}],
        "raw_purchase": [{"date_time": "2024-01-01 10:00:00", "credit_card": 1,
                          "amount": money(5)}],
    }))
    assert first.waterlines["purchase"]["date_time"] == at("9:00")
    assert first.waterlines["decoded_purchase"]["date_time"] == at("9:00")
    second = reference.step(StepInput({
        "raw_purchase": [{"date_time": "2024-01-01 08:00:00", "credit_card": 2,
                          "amount": None}],
    }))
    assert [(d.table, d.reason, d.row["credit_card"]) for d in second.dead_letters] == [
        ("raw_purchase", "late", 2)
    ]
    assert second.outputs["decoded"] == ()


def test_s11_s4_sql_seed003_hourly_counts_and_punctuation() -> None:
    circuit = compile_sql("""
        CREATE TABLE ev (rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
                         color VARCHAR NOT NULL) WITH ('topic' = 'ev');
        CREATE VIEW hourly WITH ('topic' = 'hourly', 'format' = 'append') AS
        SELECT window_start, color, COUNT(*) AS n
        FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(rowtime), INTERVAL '1' HOUR))
        GROUP BY window_start, color EMIT AFTER WATERMARK;""")
    rows = [("3:01", "blue"), ("3:15", "red"), ("4:00", "red"), ("4:06", "blue"),
            ("4:45", "blue")]
    steps = [StepInput({"ev": [{"rowtime": at(t), "color": c}]}) for t, c in rows]
    steps.append(StepInput({}, punctuations={"ev": [Punctuation(at("5:00"))]}))
    results = evaluate(circuit, steps)
    per_step = [[(v["window_start"], v["color"], v["n"]) for v in values([r], "hourly")]
                for r in results]
    three, four = at("3:00"), at("4:00")
    assert per_step == [[], [], [(three, "blue", 1), (three, "red", 1)], [], [],
                        [(four, "blue", 2), (four, "red", 1)]]
    assert results[-1].state_rows["hourly"] == 0


def _sample(type_: SqlType, index: int) -> Any:
    samples = {"TIMESTAMP": at("10:00") + index * 60_000, "DATE": 19_723, "BIGINT": index,
               "INT": index, "VARCHAR": f"v{index}", "BOOLEAN": True, "DOUBLE": 1.5,
               "REAL": 1.5, "DECIMAL": money(index), "VARBINARY": b"x"}
    return samples[type_.name]


@pytest.mark.parametrize("program", sorted(p.name for p in PROGRAMS.glob("*.sql")))
def test_s8_every_example_program_runs_in_the_oracle(program: str) -> None:
    circuit = compile_program(PROGRAMS / program)
    reference = Reference(circuit)
    for index in range(3):
        rows = {t.name: [{c.name: _sample(c.type, index) for c in t.columns}]
                for t in circuit.tables}
        result = reference.step(StepInput(rows, batch_time_ms=index))
        assert all(d.reason == "invalid" for d in result.dead_letters) or not result.dead_letters
    # A week on: past the end of every window of the programs (a day's too).
    closing = {t.name: [Punctuation(at("23:59") + 7 * 86_400_000)]
               for t in circuit.tables if t.lateness}
    result = reference.step(StepInput({}, batch_time_ms=3, punctuations=closing))
    for view in circuit.views:
        if view.join is not None and view.join.as_of is not None:
            # A temporal join keeps the latest version of each key (three keys here).
            assert result.state_rows[view.name] == 3, view.name
        elif view.state.kind == "window":
            assert result.state_rows[view.name] == 0, view.name
