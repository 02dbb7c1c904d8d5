"""Window Top-N (ROW_NUMBER, RANK; docs/language.md) in the reference evaluator, from SQL
text, step by step (S11, S12).

bid has LATENESS 1 minute. Steps: (1) a 5 at 8:01, b 7 at 8:02, a 4 at 8:03, c 7 at 8:04,
d 1 at 8:05: w = 8:04; (2) e 20 at 8:09, b 1 at 8:12: w = 8:11, which completes the window
[8:00, 8:10); (3) a 100 at 8:05, late (below 8:11), and c 3 at 8:15: w = 8:14; (4) a bound
of 8:21: w = 8:20 completes [8:10, 8:20). Expected rows are written by hand.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from circuit_builders import at

from app.circuit.ir import Circuit, Project, TopN, Window
from app.circuit.reference import Punctuation, StepInput, StepResult, evaluate
from app.program.compile import compile_program

TABLE = """
CREATE TABLE bid (
    ts    TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    item  VARCHAR NOT NULL,
    price BIGINT NOT NULL
) WITH ('topic' = 'bids');
"""

#: Over a window function's rows (Flink's "Window Top-N follows after Window TVF").
OVER_ROWS = """
CREATE VIEW top WITH ('topic' = 'top') AS
SELECT item, price, window_end, r FROM (
  SELECT *, {fn}() OVER (PARTITION BY window_start, window_end ORDER BY {order}) AS r
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' MINUTES)))
WHERE {where};
"""


def bid(clock: str, item: str, price: int) -> dict[str, Any]:
    return {"ts": at(clock), "item": item, "price": price}


STEPS = [
    StepInput({"bid": [bid("8:01", "a", 5), bid("8:02", "b", 7), bid("8:03", "a", 4),
                       bid("8:04", "c", 7), bid("8:05", "d", 1)]}),
    StepInput({"bid": [bid("8:09", "e", 20), bid("8:12", "b", 1)]}),
    StepInput({"bid": [bid("8:05", "a", 100), bid("8:15", "c", 3)]}),
    StepInput({}, punctuations={"bid": [Punctuation(at("8:21"))]}),
]


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=TABLE + text)


def rows_of(results: list[StepResult], view: str) -> list[list[dict[str, Any] | None]]:
    return [[r.value for r in step.outputs[view]] for step in results]


def over_rows(fn: str = "ROW_NUMBER", order: str = "price DESC", where: str = "r <= 2",
              steps: list[StepInput] = STEPS) -> list[StepResult]:
    return evaluate(compile_sql(OVER_ROWS.format(fn=fn, order=order, where=where)), steps)


def ranked(item: str, price: int, end: str, rank: int) -> dict[str, Any]:
    return {"item": item, "price": price, "window_end": at(end), "r": rank}


def test_s12_language_doc_top_n_writes_each_windows_best_rows_once_when_complete() -> None:
    """docs/language.md's example: the two items with the largest sums per 10 minutes, written
    in the step whose waterline completes the window (the aggregate's final rows all arrive
    in that step, S18), best first; the late bid of a 100 changes nothing."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "language.md").read_text("utf-8")
    section = doc[doc.index("### Window Top-N"):]
    example = re.search(r"```sql\n(CREATE TABLE bid.*?)```", section, re.S)
    assert example is not None
    circuit = compile_program("doc.sql", text=example[1])
    results = evaluate(circuit, STEPS)

    def row(item: str, total: int, start: str, end: str, rownum: int) -> dict[str, Any]:
        return {"window_start": at(start), "window_end": at(end), "item": item,
                "total": total, "rownum": rownum}

    assert rows_of(results, "top_items") == [
        [],
        [row("e", 20, "8:00", "8:10", 1), row("a", 9, "8:00", "8:10", 2)],
        [],
        [row("c", 3, "8:10", "8:20", 1), row("b", 1, "8:10", "8:20", 2)],
    ]
    assert [r.dead_letters[0].reason for r in results if r.dead_letters] == ["late"]
    view = circuit.view("top_items")
    assert view.output is not None and view.output.format == "append"
    assert [a.column for a in view.time_attributes] == ["window_start", "window_end"]


def test_s12_row_number_over_window_rows_breaks_ties_by_the_rows_columns() -> None:
    """b and c both bid 7: equal on the ORDER BY key, they are ordered by their columns in
    the key's direction (DESC), so c (8:04) comes before b (8:02), whatever the arrival."""
    assert rows_of(over_rows(), "top") == [
        [],
        [ranked("e", 20, "8:10", 1), ranked("c", 7, "8:10", 2)],
        [],
        [ranked("c", 3, "8:20", 1), ranked("b", 1, "8:20", 2)],
    ]
    swapped = [StepInput({"bid": list(reversed(STEPS[0].rows["bid"]))}), *STEPS[1:]]
    assert rows_of(over_rows(steps=swapped), "top") == rows_of(over_rows(), "top")


def test_s12_rank_gives_ties_one_rank_and_passes_more_than_n_rows() -> None:
    assert rows_of(over_rows("RANK"), "top")[1] == [
        ranked("e", 20, "8:10", 1), ranked("c", 7, "8:10", 2), ranked("b", 7, "8:10", 2)]
    assert rows_of(over_rows("RANK", "price DESC", "r = 1"), "top")[1] == [
        ranked("e", 20, "8:10", 1)]
    # Ascending; < N is <= N - 1.
    assert rows_of(over_rows("RANK", "price", "r < 3"), "top")[1] == [
        ranked("d", 1, "8:10", 1), ranked("a", 4, "8:10", 2)]


def test_s11_top_n_holds_at_most_n_rows_per_partition_and_frees_them_when_written() -> None:
    """Five rows of [8:00, 8:10) arrive in step 1: two are held for ROW_NUMBER <= 2, one
    for <= 1, and two for RANK <= 1 (b and c tie first); written and freed in step 2, when
    b's 8:12 is held."""
    assert [r.state_rows["top"] for r in over_rows()] == [2, 1, 2, 0]
    assert [r.state_rows["top"] for r in over_rows(where="r <= 1")] == [1, 1, 1, 0]
    assert [r.state_rows["top"] for r in over_rows("RANK", where="r <= 1")] == [2, 1, 1, 0]


def test_s12_null_is_the_smallest_value_first_ascending_last_descending() -> None:
    order = "CASE WHEN item = 'd' THEN NULL ELSE price END"
    first = over_rows("ROW_NUMBER", order, "r <= 1")[1].outputs["top"]
    assert [r.value["item"] for r in first if r.value] == ["d"]
    last = over_rows("ROW_NUMBER", f"{order} DESC, item", "r <= 6")[1].outputs["top"]
    assert [r.value["item"] for r in last if r.value] == ["e", "b", "c", "a", "a", "d"]


def test_s12_partition_keys_rank_each_key_apart_and_other_conditions_follow_the_rank() -> None:
    """PARTITION BY the window and the item: each item's best bid per window; the WHERE's
    other condition filters the ranked rows (a's best is 5, so a is gone, not replaced)."""
    sql = """
CREATE VIEW best WITH ('topic' = 'best') AS
SELECT item, price FROM (
  SELECT item, price, window_end, ROW_NUMBER() OVER (
    PARTITION BY window_end, item ORDER BY price DESC) AS rownum
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' MINUTES)))
WHERE rownum = 1 AND item <> 'a';
"""
    results = evaluate(compile_sql(sql), STEPS)
    assert rows_of(results, "best")[1] == [
        {"item": "b", "price": 7}, {"item": "c", "price": 7}, {"item": "d", "price": 1},
        {"item": "e", "price": 20}]


def test_s18_ranking_in_a_with_query_or_a_local_view_over_an_aggregate_view() -> None:
    """The ranking SELECT may be a WITH query or a LOCAL view; the aggregate an earlier view."""
    sums = """
CREATE LOCAL VIEW sums AS
SELECT window_start, window_end, item, SUM(price) AS total
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end, item EMIT AFTER WATERMARK;
"""
    with_query = sums + """
CREATE VIEW top WITH ('topic' = 'top') AS
WITH ranked AS (SELECT item, total, window_end, RANK() OVER (
  PARTITION BY window_end ORDER BY total DESC) AS r FROM sums)
SELECT item, total FROM ranked WHERE r <= 1;
"""
    local = sums + """
CREATE LOCAL VIEW ranked AS SELECT item, total, window_end, RANK() OVER (
  PARTITION BY window_end ORDER BY total DESC) AS r FROM sums;
CREATE VIEW top WITH ('topic' = 'top') AS SELECT item, total FROM ranked WHERE 1 >= r;
"""
    for sql in (with_query, local):
        circuit = compile_sql(sql)
        assert [v.name for v in circuit.views] == ["sums", "top"]
        assert rows_of(evaluate(circuit, STEPS), "top") == [
            [], [{"item": "e", "total": 20}], [], [{"item": "c", "total": 3}]]


def test_l3_top_n_view_reads_the_ranked_input_through_its_window_and_filter() -> None:
    circuit = compile_sql(OVER_ROWS.format(fn="ROW_NUMBER", order="price DESC",
                                           where="r <= 3"))
    view = circuit.view("top")
    assert view.sources == ("bid",)
    assert [type(op) for op in view.operators] == [Window, TopN, Project]
    top_n = view.top_n
    assert top_n is not None and (top_n.limit, top_n.rank_column) == (3, "r")
    assert [a.column for a in view.time_attributes] == ["window_end"]
    assert view.state.kind == "window"
    assert "best 3 rows" in view.state.description


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (OVER_ROWS.format(fn="ROW_NUMBER", order="price", where="item <> 'a'"),
         "is read without a limit on r"),
        (OVER_ROWS.format(fn="ROW_NUMBER", order="price", where="r > 2"),
         "unsupported: this condition on r"),
        (OVER_ROWS.format(fn="ROW_NUMBER", order="price", where="r = 2"),
         "unsupported: this condition on r"),
        (OVER_ROWS.format(fn="ROW_NUMBER", order="price", where="r < 1"),
         "the limit on r keeps no row"),
        (OVER_ROWS.format(fn="RANK", order="price DESC NULLS FIRST", where="r <= 1"),
         "unsupported: NULLS FIRST"),
        (OVER_ROWS.format(fn="RANK", order="price", where="r <= 1").replace(
            "window_start, window_end", "window_start"), "its PARTITION BY has no window_end"),
        (OVER_ROWS.format(fn="RANK", order="price", where="r <= 1").replace(
            "ORDER BY price", ""), "has no ORDER BY"),
        ("CREATE VIEW v WITH ('topic' = 'v') AS SELECT *, ROW_NUMBER() OVER (PARTITION BY "
         "item ORDER BY price) AS n FROM bid;", "over rows of no window"),
        ("CREATE VIEW v WITH ('topic' = 'v') AS SELECT *, ROW_NUMBER() OVER (PARTITION BY "
         "window_end ORDER BY price) AS n FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), "
         "INTERVAL '1' MINUTE));", "no SELECT limits the rank"),
        ("CREATE VIEW v WITH ('topic' = 'v') AS SELECT * FROM (SELECT *, ROW_NUMBER() OVER "
         "(PARTITION BY window_end ORDER BY price) AS n FROM TABLE(TUMBLE(TABLE bid, "
         "DESCRIPTOR(ts), INTERVAL '1' MINUTE))) WHERE n <= 1 EMIT AFTER WATERMARK;",
         "EMIT on view v, a window Top-N"),
        ("CREATE VIEW v WITH ('topic' = 'v') AS SELECT COUNT(*) AS c FROM (SELECT *, "
         "ROW_NUMBER() OVER (PARTITION BY window_end ORDER BY price) AS n FROM "
         "TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '1' MINUTE))) WHERE n <= 1;",
         "aggregate"),
        ("CREATE VIEW v WITH ('topic' = 'v') AS SELECT * FROM (SELECT window_end, "
         "ROW_NUMBER() OVER (PARTITION BY window_end ORDER BY price) AS n FROM "
         "TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) GROUP BY window_end) "
         "WHERE n <= 1;", "unsupported: GROUP"),
        ("CREATE VIEW v WITH ('topic' = 'v') AS SELECT * FROM (SELECT *, ROW_NUMBER() OVER "
         "(PARTITION BY window_end ORDER BY price) AS price FROM TABLE(TUMBLE(TABLE bid, "
         "DESCRIPTOR(ts), INTERVAL '1' MINUTE))) WHERE price <= 1;", "duplicate column name"),
    ],
)
def test_l7_top_n_forms_not_supported_are_refused_with_a_fix(sql: str, message: str) -> None:
    from app.errors import ProgramError

    with pytest.raises(ProgramError) as info:
        compile_sql(sql)
    first = info.value.diagnostics[0]
    assert message in first.message, str(first)
    assert first.fix, str(first)
