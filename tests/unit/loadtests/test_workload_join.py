"""Workload (d), the interval join of auctions and bids (loadtests/workloads.py): its program
runs on Spark (one query of both tables, ADR 0013), the peer writes records of the view's
shape, and the program computes the join the bench's peer does: every accepted bid paired with
each accepted auction of its id opened at most ten minutes before it (the reference evaluator
against a join written out here)."""

from __future__ import annotations

import json
from collections import Counter

from app.circuit.reference import StepInput, evaluate
from app.program.compile import compile_program
from app.runtime.planner.physical import physical_plan
from app.runtime.planner.support import check_supported
from loadtests.bench import pair_shape_of
from loadtests.generator import AUCTION, pair_timeline
from loadtests.workloads import WORKLOADS

W = WORKLOADS["d"]
TEXT = W.program.format(auctions="auctions", bids="bids", out="out")


def test_the_join_program_runs_on_spark_in_one_query_of_both_tables() -> None:
    circuit = compile_program("d.sql", TEXT)
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    (query,) = plan.queries
    assert query.tables == ("auction", "bid")
    assert [t.topic for t in circuit.tables] == ["auctions", "bids"]
    assert circuit.join_upstream("auction_bid") == "auction_bid"


def test_the_peer_writes_records_of_the_views_columns_in_their_order() -> None:
    circuit = compile_program("d.sql", TEXT)
    output = circuit.view("auction_bid").output
    assert output is not None
    view = [f["name"] for f in output.value_schema["fields"]]
    peer = [f["name"] for f in json.loads(W.peer_out_schema)["fields"]]
    assert (
        view
        == peer
        == ["date_time", "auction", "bidder", "price", "seller", "category", "auction_time"]
    )


def test_the_program_joins_each_bid_with_its_auction_within_ten_minutes() -> None:
    circuit = compile_program("d.sql", TEXT)
    shape = pair_shape_of("d")
    steps: list[StepInput] = []
    rows: dict[str, list[dict[str, int]]] = {"auction": [], "bid": []}
    for i, side, row, _late in pair_timeline(shape, 6_000):
        rows["auction" if side == AUCTION else "bid"].append(row)
        if (i + 1) % 2_000 == 0:  # three steps: the later ones find late rows
            steps.append(StepInput(rows=rows))
            rows = {"auction": [], "bid": []}
    results = evaluate(circuit, steps)
    late = Counter((d.table, tuple(sorted(d.row.items()))) for r in results for d in r.dead_letters)
    assert sum(late.values()) > 0
    accepted = {
        table: [
            r
            for step in steps
            for r in step.rows[table]
            if late[(table, tuple(sorted(r.items())))] == 0
        ]
        for table in ("auction", "bid")
    }
    by_id: dict[int, list[dict[str, int]]] = {}
    for a in accepted["auction"]:
        by_id.setdefault(a["id"], []).append(a)
    expected = Counter(
        (b["date_time"], b["auction"], b["bidder"], b["price"], a["seller"], a["category"])
        + (a["date_time"],)
        for b in accepted["bid"]
        for a in by_id.get(b["auction"], [])
        if a["date_time"] <= b["date_time"] <= a["date_time"] + 600_000
    )
    columns = ("date_time", "auction", "bidder", "price", "seller", "category", "auction_time")
    got = Counter(
        tuple(record.value[c] for c in columns)
        for r in results
        for record in r.outputs["auction_bid"]
        if record.value is not None
    )
    assert len(expected) > 4_500
    assert got == expected


def test_the_outer_join_workload_runs_on_the_join_operator_and_the_peer_writes_its_shape() -> None:
    """Workload (e), (d) as a LEFT OUTER join: Tidemark's join operator (ADR 0017) in the
    query of both tables, beside Spark's own ``leftouter`` join as the peer; the bid's
    columns are nullable on both sides (an auction without a bid is written with NULLs)."""
    outer = WORKLOADS["e"]
    circuit = compile_program("e.sql", outer.program.format(auctions="a", bids="b", out="o"))
    plan = physical_plan(circuit)
    check_supported(circuit, plan)
    assert plan.placement("auction_bid").state == "join_operator"
    output = circuit.view("auction_bid").output
    assert output is not None
    view = [(f["name"], f["type"]) for f in output.value_schema["fields"]]
    peer = [(f["name"], f["type"]) for f in json.loads(outer.peer_out_schema)["fields"]]
    assert [name for name, _ in view] == [name for name, _ in peer]
    nullable = [name for name, kind in peer if isinstance(kind, list)]
    assert nullable == ["date_time", "auction", "bidder", "price"]
    assert [name for name, kind in view if isinstance(kind, list) and "null" in kind] == nullable
