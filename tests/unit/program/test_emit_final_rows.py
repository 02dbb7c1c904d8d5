"""SPEC L5, S12 and L7 in the compiler: EMIT AFTER on a view whose rows are final as they
arrive.

A view that does not aggregate (a projection, a join, a UNION ALL, OVER aggregates) writes
each row once, final, in the step it is known: AFTER WATERMARK and AFTER DELAY, which choose
when a group's changes are written, change nothing there. Such a clause (the paper's Q7 join
form with ``EMIT AFTER WATERMARK``, or ``EMIT STREAM AFTER DELAY``) is accepted with an L7
warning, and the view is the one written without it (STREAM, which chooses the changelog
format, stays). Where a clause would change what is written it stays refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from app.circuit.ir import Circuit, EmitPolicy, Position
from app.circuit.reference import Punctuation, StepInput, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program

BID = """CREATE TABLE bid (
    bidtime TIMESTAMP NOT NULL LATENESS INTERVAL '4' MINUTE,
    price   BIGINT    NOT NULL,
    item    VARCHAR   NOT NULL
) WITH ('topic' = 'bids');
CREATE LOCAL VIEW max_price AS
SELECT window_end AS wend, MAX(price) AS maxprice
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;
"""
FIRST = BID.count("\n") + 1

Q7_JOIN = """CREATE VIEW q7 WITH ('topic' = 'q7') AS
SELECT m.wend, b.bidtime, b.price, b.item
FROM bid AS b JOIN max_price AS m
  ON b.price = m.maxprice
 AND b.bidtime >= m.wend - INTERVAL '10' MINUTE AND b.bidtime < m.wend
{emit};"""

MINUTE = 60_000


def compile_sql(text: str) -> Circuit:
    return compile_program("p.sql", BID + text)


def same_view(circuit: Circuit, other: Circuit, name: str) -> None:
    """The view as compiled with and without the clause (its position aside)."""
    here = Position("p.sql", 1, 1)
    assert replace(circuit.view(name), position=here) == replace(other.view(name),
                                                                 position=here)


def records(circuit: Circuit, view: str) -> list[list[Any]]:
    base = 1_704_096_000_000  # 2024-01-01 08:00
    steps = [
        StepInput({"bid": [{"bidtime": base + 1 * MINUTE, "price": 5, "item": "A"},
                           {"bidtime": base + 3 * MINUTE, "price": 7, "item": "B"}]}),
        StepInput({"bid": [{"bidtime": base + 12 * MINUTE, "price": 2, "item": "C"}]}),
        StepInput({}, punctuations={"bid": [Punctuation(base + 60 * MINUTE)]}),
    ]
    return [[(r.key, r.value) for r in result.outputs[view]]
            for result in evaluate(circuit, steps)]


@pytest.mark.parametrize(("emit", "written"), [
    ("EMIT AFTER WATERMARK", ""),
    ("EMIT AFTER DELAY INTERVAL '10' SECOND", ""),
    ("EMIT AFTER WATERMARK AND AFTER DELAY INTERVAL '1' MINUTE", ""),
    ("EMIT STREAM AFTER DELAY INTERVAL '10' SECOND", "EMIT STREAM"),
    ("EMIT STREAM AFTER WATERMARK", "EMIT STREAM"),
])
def test_l5_emit_after_on_a_join_is_the_view_without_it_with_a_warning(
        emit: str, written: str) -> None:
    """The paper's Q7 join form with an AFTER clause compiles as without it (STREAM kept),
    writes the same records in the same steps, and warns at the clause."""
    with_clause = compile_sql(Q7_JOIN.format(emit=emit))
    without = compile_sql(Q7_JOIN.format(emit=written))
    same_view(with_clause, without, "q7")
    assert with_clause.view("q7").emit == EmitPolicy(stream=bool(written))
    assert records(with_clause, "q7") == records(without, "q7")
    assert without.warnings == ()
    [warning] = with_clause.warnings
    assert warning.severity == "warning"
    assert (warning.position.line - FIRST + 1, warning.position.column) == (6, 1)
    assert warning.message.startswith(f"EMIT {'STREAM ' if written else ''}AFTER")
    assert "changes nothing, since the view does not aggregate: its rows are written as " \
           "they arrive, final" in warning.message
    assert warning.fix == ("remove the EMIT clause" if not written else
                           f"write EMIT STREAM, which writes the same changelog, instead of "
                           f"{warning.message.split(' on view')[0]}")


def test_l5_the_warning_names_the_clause_as_written() -> None:
    circuit = compile_sql(Q7_JOIN.format(
        emit="EMIT STREAM AFTER WATERMARK AND AFTER DELAY INTERVAL '1' MINUTE"))
    assert circuit.warnings[0].message.startswith(
        "EMIT STREAM AFTER WATERMARK AND AFTER DELAY on view q7: AFTER WATERMARK AND AFTER "
        "DELAY changes nothing")


@pytest.mark.parametrize("view", [
    # A projection of a table.
    "CREATE VIEW v WITH ('topic' = 'v') AS SELECT item, price FROM bid WHERE price > 1\n",
    # A UNION ALL.
    "CREATE VIEW v WITH ('topic' = 'v') AS SELECT item FROM bid UNION ALL SELECT item FROM "
    "bid\n",
    # OVER aggregates (each row written once the waterline passes it, final).
    "CREATE VIEW v WITH ('topic' = 'v') AS SELECT item, SUM(price) OVER (PARTITION BY item "
    "ORDER BY bidtime RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW) AS s "
    "FROM bid\n",
])
def test_l5_every_view_that_does_not_aggregate_takes_the_clause_as_a_no_op(view: str) -> None:
    with_clause = compile_sql(view + "EMIT AFTER WATERMARK;")
    without = compile_sql(view + ";")
    same_view(with_clause, without, "v")
    assert records(with_clause, "v") == records(without, "v")
    assert [w.message.split(":")[0] for w in with_clause.warnings] == [
        "EMIT AFTER WATERMARK on view v"]


@pytest.mark.parametrize(("view", "message"), [
    # STREAM changes the format: a changelog is no 'append'.
    ("CREATE VIEW v WITH ('topic' = 'v', 'format' = 'append') AS SELECT item FROM bid\n"
     "EMIT STREAM AFTER WATERMARK;", "EMIT STREAM writes a changelog, not 'append'"),
    # An aggregate without a window: AFTER WATERMARK would never write its groups.
    ("CREATE VIEW v WITH ('topic' = 'v') AS SELECT item, COUNT(*) AS n FROM bid GROUP BY "
     "item\nEMIT AFTER WATERMARK;", "EMIT AFTER WATERMARK on view v needs a GROUP BY key"),
])
def test_l7_an_emit_clause_that_would_change_what_is_written_stays_refused(
        view: str, message: str) -> None:
    with pytest.raises(ProgramError) as info:
        compile_sql(view)
    assert info.value.diagnostics[0].message.startswith(message)
