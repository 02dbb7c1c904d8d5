"""SPEC L1, L7 in the compiler: ``PRIMARY KEY (...) NOT ENFORCED`` on CREATE TABLE, the key
of a versioned table (S16), and its errors with their positions and fixes."""

from __future__ import annotations

import pytest

from app.circuit.ir import Circuit
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.plan_fingerprint import plain_value

TABLES = """
CREATE TABLE amounts (
    rowtime  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR NOT NULL,
    region   INT NOT NULL,
    amount   INT NOT NULL,
    placed   TIMESTAMP
) WITH ('topic' = 'amounts');
CREATE TABLE rates (
    rowtime  TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    currency VARCHAR NOT NULL,
    region   INT NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    PRIMARY KEY (currency, region) NOT ENFORCED
) WITH ('topic' = 'rates');
CREATE TABLE plain (
    rowtime  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR NOT NULL
) WITH ('topic' = 'plain');
CREATE TABLE untimed (
    currency VARCHAR NOT NULL PRIMARY KEY NOT ENFORCED,
    rate     DECIMAL(10, 2)
) WITH ('topic' = 'untimed');
"""
# Line of the first line of a view written right after TABLES.
FIRST = TABLES.count("\n") + 1

ON = "ON a.currency = r.currency AND a.region = r.region"


def compile_sql(text: str) -> Circuit:
    return compile_program("p.sql", TABLES + text)


def rejected(text: str, tables: str = TABLES) -> tuple[int, int, str, str | None]:
    with pytest.raises(ProgramError) as info:
        compile_program("p.sql", tables + text)
    first = info.value.diagnostics[0]
    return (first.position.line - tables.count("\n"), first.position.column, first.message,
            first.fix)


# -- PRIMARY KEY ---------------------------------------------------------------------------


def test_l1_primary_key_is_stored_in_key_order_with_either_spelling() -> None:
    circuit = compile_sql("")
    assert circuit.table("rates").primary_key == ("currency", "region")
    assert circuit.table("untimed").primary_key == ("currency",)
    assert circuit.table("amounts").primary_key == ()
    plain = compile_program("p.sql", "CREATE TABLE t (k BIGINT NOT NULL, CONSTRAINT pk "
                            "PRIMARY KEY (k)) WITH ('topic' = 't');")
    assert plain.table("t").primary_key == ("k",)


def test_l1_a_table_without_a_key_keeps_its_plan_digest() -> None:
    """The key is a field added to the IR: a table without one digests as before."""
    assert "primary_key" not in plain_value(compile_sql("").table("amounts"))
    assert plain_value(compile_sql("").table("rates"))["primary_key"] == [
        "currency", "region"]


KEY_ERRORS = [
    ("CREATE TABLE t (k BIGINT NOT NULL, PRIMARY KEY (kk) NOT ENFORCED) WITH ('topic' = 't');",
     (1, 49, "PRIMARY KEY column kk is not a column of table t", "did you mean k?")),
    ("CREATE TABLE t (k BIGINT, PRIMARY KEY (k) NOT ENFORCED) WITH ('topic' = 't');",
     (1, 40, "PRIMARY KEY column t.k is nullable", "declare it NOT NULL: k BIGINT NOT NULL")),
    ("CREATE TABLE t (k BIGINT NOT NULL, PRIMARY KEY (k, k)) WITH ('topic' = 't');",
     (1, 52, "PRIMARY KEY names column k twice", "list each key column once")),
    ("CREATE TABLE t (k BIGINT NOT NULL PRIMARY KEY, PRIMARY KEY (k)) WITH ('topic' = 't');",
     (1, 48, "a table has one PRIMARY KEY", "PRIMARY KEY (a, b)")),
    ("CREATE TABLE t (k BIGINT NOT NULL, PRIMARY KEY (k) ENFORCED) WITH ('topic' = 't');",
     (1, 52, "unsupported: an ENFORCED PRIMARY KEY", "PRIMARY KEY (...) NOT ENFORCED")),
    ("CREATE TABLE t (k BIGINT NOT NULL, UNIQUE (k)) WITH ('topic' = 't');",
     (1, 36, "unsupported: table constraint UNIQUE", "PRIMARY KEY (...) NOT ENFORCED")),
]


@pytest.mark.parametrize("text, expected", KEY_ERRORS, ids=[e[1][2][:40] for e in KEY_ERRORS])
def test_l7_primary_key_errors_name_position_message_and_fix(
        text: str, expected: tuple[int, int, str, str | None]) -> None:
    line, column, message, fix = rejected(text, "")
    assert message.startswith(expected[2]), message
    assert (line, column) == expected[:2], message
    assert fix is not None and expected[3] is not None and expected[3] in fix
