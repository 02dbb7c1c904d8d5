"""SPEC S16 and L7 in the compiler: a FROM that joins more than two relations.

``a JOIN b ON ... JOIN c ON ...`` (Flink's form) is planned left-deep, as a user writes it
by hand: the join of every relation but the last is a generated local view
(``<view>.a_join_b``, each column of each relation named ``alias__column``), and the view
joins it with the last relation. ``a.k`` keeps naming a's column in the SELECT list, the
WHERE and every ON; errors and warnings name columns as written. Time attributes follow S16
as for any join of a view: the generated view keeps the bound columns of its join.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import fields, is_dataclass
from typing import Any

import pytest

from app.circuit.ir import Circuit, Join, Position
from app.circuit.reference import StepInput, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.compose import compose

TABLES = """
CREATE TABLE a (ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND, k VARCHAR NOT NULL,
                v BIGINT NOT NULL) WITH ('topic'='a');
CREATE TABLE b (ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND, k VARCHAR NOT NULL,
                w BIGINT NOT NULL) WITH ('topic'='b');
CREATE TABLE c (ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND, k VARCHAR NOT NULL,
                z BIGINT NOT NULL) WITH ('topic'='c');
CREATE TABLE d (ts TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND, k VARCHAR NOT NULL,
                u BIGINT NOT NULL) WITH ('topic'='d');
"""
FIRST = TABLES.count("\n") + 1

J3 = """CREATE VIEW j3 WITH ('topic'='o') AS SELECT a.k, a.v, b.w, c.z
FROM a JOIN b ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts
JOIN c ON a.k = c.k AND c.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts;"""

# The same program as a user writes it without the chain (the fix the compiler gave).
BY_HAND = """CREATE LOCAL VIEW ab AS
SELECT a.ts AS a__ts, a.k AS a__k, a.v AS a__v, b.ts AS b__ts, b.k AS b__k, b.w AS b__w
FROM a JOIN b ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts;
CREATE VIEW j3 WITH ('topic'='o') AS
SELECT a_join_b.a__k AS k, a_join_b.a__v AS v, a_join_b.b__w AS w, c.z
FROM ab AS a_join_b JOIN c ON a_join_b.a__k = c.k
 AND c.ts BETWEEN a_join_b.a__ts - INTERVAL '1' MINUTE AND a_join_b.a__ts;"""

DAY = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def at(clock: str) -> int:
    hours, minutes, seconds = (int(p) for p in clock.split(":"))
    return int((DAY + dt.timedelta(hours=hours, minutes=minutes,
                                   seconds=seconds)).timestamp() * 1000)


def compile_sql(text: str) -> Circuit:
    return compile_program("p.sql", TABLES + text)


def rejected(text: str) -> tuple[int, int, str, str]:
    with pytest.raises(ProgramError) as info:
        compile_sql(text)
    first = info.value.diagnostics[0]
    return first.position.line - FIRST + 1, first.position.column, first.message, first.fix or ""


def plain(value: Any, names: dict[str, str]) -> Any:
    """IR values without positions, each renamed relation given its other name."""
    if is_dataclass(value) and not isinstance(value, type):
        return {"node": type(value).__name__} | {
            f.name: plain(getattr(value, f.name), names) for f in fields(value)
            if not isinstance(getattr(value, f.name), Position)}
    if isinstance(value, tuple | list):
        return [plain(v, names) for v in value]
    if isinstance(value, dict):
        return {plain(k, names): plain(v, names) for k, v in value.items()}
    if isinstance(value, str):
        for old, new in names.items():  # a waterline in a state's text: w(ab.a__ts)
            value = value.replace(f"w({old}.", f"w({new}.")
        return names.get(value, value)
    return value


def join_of(circuit: Circuit, view: str) -> Join:
    join = circuit.view(view).join
    assert join is not None
    return join


# -- the circuit ---------------------------------------------------------------------------


def test_s16_a_join_of_three_relations_is_the_local_view_written_by_hand() -> None:
    """The chain's circuit is the hand-written one: a local view joining a and b (every
    column, ``alias__column``) and the view joining it with c, up to the local view's name."""
    chained = compile_sql(J3)
    by_hand = compile_sql(BY_HAND)
    assert [v.name for v in chained.views] == ["j3.a_join_b", "j3"]
    names = {"ab": "j3.a_join_b"}
    for mine, theirs in zip(chained.views, by_hand.views, strict=True):
        assert plain(mine, {}) == plain(theirs, names), mine.name
    assert chained.warnings == by_hand.warnings == ()


def test_s16_the_last_join_of_a_chain_is_an_interval_join_on_the_first_relations_time() -> None:
    """S16: the generated view keeps a.ts and b.ts (its bound columns) as time attributes,
    so ``c.ts BETWEEN a.ts - 1 minute AND a.ts`` bounds the last join's state."""
    circuit = compile_sql(J3)
    first = circuit.view("j3.a_join_b")
    assert first.output is None and first.sources == ("a", "b")
    assert [a.column for a in first.time_attributes] == ["a__ts", "b__ts"]
    join = join_of(circuit, "j3")
    assert (join.form, join.kind) == ("interval", "inner")
    assert join.left.source == "j3.a_join_b" and join.right.source == "c"
    assert join.bound is not None
    assert (join.bound.left_column, join.bound.right_column) == ("a__ts", "ts")
    assert (join.bound.lower, join.bound.upper) == (-60_000, 0)
    assert [c.name for c in circuit.view("j3").columns] == ["k", "v", "w", "z"]
    assert circuit.view("j3").state.kind == "window"


def test_s16_four_relations_nest_left_deep() -> None:
    """``a JOIN b JOIN c JOIN d``: ((a b) c) d, each prefix a generated view; the last ON
    names columns of a and b through them; WHERE filters after the last join."""
    circuit = compile_sql("""CREATE VIEW j4 WITH ('topic'='o') AS SELECT a.k, b.w, c.z, d.u
FROM a JOIN b ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts
JOIN c ON a.k = c.k AND c.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts
JOIN d ON d.k = a.k AND d.ts BETWEEN a.ts AND a.ts + INTERVAL '10' SECOND
WHERE b.w > c.z;""")
    names = [v.name for v in circuit.views]
    assert names == ["j4.a_join_b", "j4.a_join_b_join_c", "j4"]
    middle = circuit.view(names[1])
    assert middle.sources == (names[0], "c")
    assert [c.name for c in middle.columns] == [
        "a__ts", "a__k", "a__v", "b__ts", "b__k", "b__w", "c__ts", "c__k", "c__z"]
    last = join_of(circuit, "j4")
    assert last.left.source == names[1] and last.right.source == "d"
    assert last.bound is not None and last.bound.left_column == "a__ts"
    assert [c.name for c in circuit.view("j4").columns] == ["k", "w", "z", "u"]


def test_s16_outer_joins_in_a_chain_pad_their_sides() -> None:
    """``a LEFT JOIN b ... LEFT JOIN c``: b's columns are nullable in the generated view,
    c's in the view; the columns of a stay NOT NULL."""
    circuit = compile_sql("""CREATE VIEW l3 WITH ('topic'='o') AS SELECT a.k, b.w, c.z
FROM a LEFT JOIN b ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts
LEFT JOIN c ON a.k = c.k AND c.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts;""")
    assert join_of(circuit, "l3.a_join_b").kind == "left"
    assert join_of(circuit, "l3").kind == "left"
    types = {c.name: c.type.nullable for c in circuit.view("l3").columns}
    assert types == {"k": False, "w": True, "z": True}


def test_s16_unqualified_columns_and_star_resolve_through_the_chain() -> None:
    """A column only one relation has may be written bare; ``x.*`` is that relation's
    columns under their own names."""
    circuit = compile_sql("""CREATE VIEW s WITH ('topic'='o') AS SELECT c.*, v, w
FROM a JOIN b ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts
JOIN c ON a.k = c.k AND c.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts;""")
    assert [c.name for c in circuit.view("s").columns] == ["ts", "k", "z", "v", "w"]


def test_s16_window_join_of_three_windowed_relations() -> None:
    """Flink's window join of three TVFs: two window joins on window_end, the last on the
    first relation's window; x.window_end stays a window_end time attribute."""
    circuit = compile_sql("""CREATE VIEW wj WITH ('topic'='o', 'format'='append') AS
SELECT x.k, x.window_start, x.window_end, x.v, y.w, z.z
FROM TABLE(TUMBLE(TABLE a, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) AS x
JOIN TABLE(TUMBLE(TABLE b, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) AS y
  ON x.k = y.k AND x.window_start = y.window_start AND x.window_end = y.window_end
JOIN TABLE(TUMBLE(TABLE c, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) AS z
  ON x.k = z.k AND x.window_start = z.window_start AND x.window_end = z.window_end;""")
    assert [v.name for v in circuit.views] == ["wj.x", "wj.y", "wj.z", "wj.x_join_y", "wj"]
    join = join_of(circuit, "wj")
    assert join.form == "window" and join.bound is not None
    assert join.bound.left_column == "x__window_end"
    kinds = {a.column: a.kind for a in circuit.view("wj").time_attributes}
    assert kinds == {"window_start": "window_start", "window_end": "window_end"}
    assert compose(circuit).refused == ()


# -- rows (reference evaluator) and Spark placement ------------------------------------------


def test_s16_a_join_chain_writes_the_rows_a_join_of_three_relations_has() -> None:
    """Hand-checked rows: a row of a matches b rows in [a.ts - 1 minute, a.ts] and c rows
    in the same span, each triple once, in the step its last row arrives."""
    circuit = compile_sql(J3)
    steps = [
        # a.x@10:01 matches b.x@10:00:30 (b.x@10:01:30 is after a.ts) and c.x@10:00:59
        # (c.x@9:59:59 is more than a minute before); a.y matches b.y, but no c.y yet.
        StepInput({"a": [{"ts": at("10:01:00"), "k": "x", "v": 1},
                         {"ts": at("10:01:00"), "k": "y", "v": 2}],
                   "b": [{"ts": at("10:00:30"), "k": "x", "w": 10},
                         {"ts": at("10:01:30"), "k": "x", "w": 11},
                         {"ts": at("10:00:10"), "k": "y", "w": 20}],
                   "c": [{"ts": at("10:00:59"), "k": "x", "z": 100},
                         {"ts": at("9:59:59"), "k": "x", "z": 101}]}),
        # c rows above w(c.ts) = 10:00:54 join the held (a, b) pairs; a.x@10:02:30 joins
        # b.x@10:01:30 (held), but no c row lies in [10:01:30, 10:02:30].
        StepInput({"c": [{"ts": at("10:00:56"), "k": "y", "z": 200},
                         {"ts": at("10:00:58"), "k": "x", "z": 102}],
                   "a": [{"ts": at("10:02:30"), "k": "x", "v": 3}]}),
        # b.x@10:02 joins a.x@10:02:30; still no c row in its span; c.z has no key match.
        StepInput({"c": [{"ts": at("10:03:00"), "k": "z", "z": 0}],
                   "b": [{"ts": at("10:02:00"), "k": "x", "w": 12}]}),
    ]
    results = evaluate(circuit, steps)
    written = [[r.value for r in result.outputs["j3"]] for result in results]
    assert written == [
        [{"k": "x", "v": 1, "w": 10, "z": 100}],
        [{"k": "y", "v": 2, "w": 20, "z": 200}, {"k": "x", "v": 1, "w": 10, "z": 102}],
        [],
    ]
    assert all(not result.dead_letters for result in results)


def test_s19_spark_runs_a_join_chain_across_a_stage_boundary() -> None:
    """The Spark runtime runs the chain: the generated view of a and b is a stage boundary
    the last join reads (ADR 0023); nothing is refused."""
    composed = compose(compile_sql(J3))
    assert composed.refused == ()
    assert "j3.a_join_b" in composed.boundaries
    assert join_of(composed.circuit, "j3").left.source == "__in_j3_a_join_b"


# -- errors (L7) ---------------------------------------------------------------------------

ERRORS = [
    ("CREATE VIEW v AS SELECT a.k FROM a JOIN b ON a.k = b.k\n JOIN b ON a.k = b.k;",
     (2, 7, "two relations of the join are named b", "give one side an alias")),
    ("CREATE VIEW v AS SELECT a.k FROM a JOIN b ON a.k = b.k\n JOIN c ON a.k = c.q;",
     (2, 18, "unknown column q in c", "available columns: a.ts, a.k, a.v, b.ts")),
    ("CREATE VIEW v AS SELECT k FROM a JOIN b ON a.k = b.k\n JOIN c ON a.k = c.k;",
     (1, 25, "ambiguous column k: several relations of the join have it",
      "qualify it: a.k or b.k or c.k")),
    ("CREATE VIEW v AS SELECT a.k FROM a JOIN b ON a.k = b.k\n"
     " AND b.ts BETWEEN a.ts AND a.ts + INTERVAL '1' MINUTE\n JOIN c ON a.k = c.k\n"
     " AND c.ts BETWEEN a.ts AND a.ts + INTERVAL '1' MINUTE\n"
     " JOIN d ON a.k = d.k AND d.ts BETWEEN b.ts AND b.ts + INTERVAL '1' MINUTE;",
     (5, 26, "column b.ts is not a time attribute, so the join's time bound on it cannot "
      "free state", "bound the join on a column that has it")),
    ("CREATE VIEW v AS SELECT a.k FROM a, b, c WHERE a.k = b.k AND a.k = c.k;",
     (1, 38, "unsupported: a join of more than two relations in a FROM list",
      "FROM a JOIN b ON a.k = b.k AND ... JOIN c ON a.k = c.k")),
]


@pytest.mark.parametrize("text, expected", ERRORS, ids=[e[1][2][:40] for e in ERRORS])
def test_l7_join_chain_errors_name_the_sql_as_written(
        text: str, expected: tuple[int, int, str, str]) -> None:
    """L7: errors in any join of a chain point at the SQL as written and name its columns
    as written (b.ts), never the generated view's (a_join_b.b__ts)."""
    line, column, message, fix = rejected(text)
    want_line, want_column, want_message, want_fix = expected
    assert message.startswith(want_message), message
    assert (line, column) == (want_line, want_column), message
    assert want_fix in fix, fix
    assert "__" not in message + fix


def test_l7_the_unbounded_warning_of_a_chain_names_columns_as_written() -> None:
    """A last join whose bound has one end per column keeps unbounded state (L7 warning),
    said of a.ts and c.ts."""
    circuit = compile_sql("""CREATE VIEW v WITH ('topic'='o') AS SELECT a.k
FROM a JOIN b ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts
JOIN c ON a.k = c.k AND c.ts BETWEEN b.ts AND a.ts + INTERVAL '1' MINUTE;""")
    messages = [w.message for w in circuit.warnings]
    assert messages == ["view v keeps unbounded state: its join has no time bound (its time "
                        "bound on a.ts and c.ts has no lower end), so no row of either side "
                        "is ever freed"]
