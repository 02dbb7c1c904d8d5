"""SPEC S16 (and S10, L7) in the compiler: ``PRIMARY KEY (...) NOT ENFORCED`` on CREATE
TABLE, and the temporal join ``a [LEFT] JOIN b FOR SYSTEM_TIME AS OF a.t ON ...`` (Flink's
event-time temporal join, seed 004): its IR, the time attribute it keeps, how explain shows
it, and every refusal with its position and fix."""

from __future__ import annotations

import pytest

from app.circuit.explain import explain_text
from app.circuit.ir import Circuit, ColumnRef, JoinAsOf
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.plan_fingerprint import plain_value

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
    ("CREATE TABLE t (k BIGINT NOT NULL, PRIMARY KEY (k, k)) WITH ('topic' = 't');",
     (1, 52, "PRIMARY KEY names column k twice", "list each key column once")),
    ("CREATE TABLE t (k BIGINT NOT NULL PRIMARY KEY, PRIMARY KEY (k)) WITH ('topic' = 't');",
     (1, 48, "a table has one PRIMARY KEY", "PRIMARY KEY (a, b)")),
    ("CREATE TABLE t (k BIGINT NOT NULL, PRIMARY KEY (k) ENFORCED) WITH ('topic' = 't');",
     (1, 52, "unsupported: an ENFORCED PRIMARY KEY", "PRIMARY KEY (...) NOT ENFORCED")),
    ("CREATE TABLE t (k BIGINT NOT NULL, UNIQUE (k)) WITH ('topic' = 't');",
     (1, 36, "unsupported: table constraint UNIQUE", "PRIMARY KEY (...) NOT ENFORCED")),
]


def test_s16_a_primary_key_column_is_not_null_as_flink_implies() -> None:
    """A NULL key is no key (it matches nothing): a PRIMARY KEY column is NOT NULL whether
    declared so or not, as in Flink SQL, and a NULL in it makes the record invalid (S7)."""
    circuit = compile_program("p.sql", "CREATE TABLE t (k BIGINT, v INT, PRIMARY KEY (k) NOT "
                              "ENFORCED) WITH ('topic' = 't');")
    table = circuit.table("t")
    assert [str(c.type) for c in table.columns] == ["BIGINT NOT NULL", "INT"]
    assert table.avro_schema["fields"][0]["type"] == "long"


@pytest.mark.parametrize("text, expected", KEY_ERRORS, ids=[e[1][2][:40] for e in KEY_ERRORS])
def test_l7_primary_key_errors_name_position_message_and_fix(
        text: str, expected: tuple[int, int, str, str | None]) -> None:
    line, column, message, fix = rejected(text, "")
    assert message.startswith(expected[2]), message
    assert (line, column) == expected[:2], message
    assert fix is not None and expected[3] is not None and expected[3] in fix


# -- the temporal join ---------------------------------------------------------------------


def test_s16_temporal_join_ir_keys_in_key_order_and_the_residual() -> None:
    """S16: ON's equalities on the key columns become the keys, in PRIMARY KEY order
    whatever ON's order; every other conjunct is the residual; the versions' time is the
    table's first LATENESS column."""
    circuit = compile_sql("""CREATE VIEW v AS
SELECT a.rowtime, a.amount, r.rate FROM amounts AS a
JOIN rates FOR SYSTEM_TIME AS OF a.rowtime AS r
  ON r.region = a.region AND a.currency = r.currency AND r.rate > 0;""")
    view = circuit.view("v")
    join = view.join
    assert join is not None
    assert (join.kind, join.form, join.bound) == ("inner", "temporal", None)
    assert join.as_of == JoinAsOf("rowtime", "rowtime")
    assert [(k.name, v.name) for k, v in join.keys  # type: ignore[union-attr]
            if isinstance(k, ColumnRef)] == [("a.currency", "r.currency"),
                                             ("a.region", "r.region")]
    assert join.residual is not None and "r.rate" in str(join.residual)
    assert view.sources == ("amounts", "rates")
    assert view.state.kind == "window"


def test_s16_s10_the_probe_time_stays_a_time_attribute_held_by_the_versions() -> None:
    """S10/S16: the AS OF column forwarded verbatim keeps the property, with
    w = min(w(probe), w(versions)); the version's time is a plain column. LEFT makes the
    versioned side's columns nullable."""
    circuit = compile_sql(f"""CREATE VIEW v AS
SELECT a.rowtime, r.rowtime AS rate_time, r.rate FROM amounts AS a
LEFT JOIN rates FOR SYSTEM_TIME AS OF a.rowtime AS r {ON};""")
    view = circuit.view("v")
    (attr,) = view.time_attributes
    assert attr.column == "rowtime" and attr.kind == "forwarded"
    assert attr.join is not None and attr.join.lag == 0
    assert (attr.join.own.table, attr.join.other.table) == ("amounts", "rates")
    types = {c.name: c.type for c in view.columns}
    assert not types["rowtime"].nullable and types["rate"].nullable
    assert view.output is None or view.output.format == "append"


def test_s16_explain_prints_the_temporal_join_its_waterline_and_state() -> None:
    circuit = compile_sql(f"""CREATE VIEW v WITH ('topic' = 'v') AS
SELECT a.rowtime, a.amount, r.rate FROM amounts AS a
LEFT JOIN rates FOR SYSTEM_TIME AS OF a.rowtime AS r {ON};""")
    text = explain_text(circuit)
    assert ("  primary key:  currency, region (NOT ENFORCED: each row is one more version of "
            "its key)") in text.splitlines()
    lines = text[text.index("view v <-"):].splitlines()
    assert lines[0] == "view v <- amounts LEFT JOIN rates"
    assert lines[1] == (
        "  1. TEMPORAL JOIN (LEFT OUTER) amounts AS a, rates AS r; keys a.currency = "
        "r.currency, a.region = r.region; as of a.rowtime: the version of r with the greatest "
        "r.rowtime <= a.rowtime; each row of a is held until w(rates.rowtime) > a.rowtime, "
        "then written once with its version, or with NULLs when it has none")
    assert ("  time:         rowtime (forwarded: JOIN: w = min(w(amounts.rowtime), "
            "w(rates.rowtime)))") in lines
    assert ("  state:        window: rows of a are held until w(rates.rowtime) > a.rowtime, "
            "then written and freed; of r, per key, the latest version at or below "
            "min(w(amounts.rowtime), w(rates.rowtime)) and every later one are kept (one "
            "version per key stays: state grows with the number of keys)") in lines
    assert "  emit:         default: each row after the step whose w(rates.rowtime) passes " \
           "its time" in lines


def test_s16_the_probe_may_be_a_windowed_aggregate_on_its_window_end() -> None:
    """Seed 004's second query: a daily sum (EMIT AFTER WATERMARK) joined AS OF its
    window_end keeps it as a window_end time attribute."""
    circuit = compile_sql("""CREATE LOCAL VIEW daily AS
SELECT currency, region, SUM(amount) AS total, window_end
FROM TABLE(TUMBLE(TABLE amounts, DESCRIPTOR(rowtime), INTERVAL '1' DAY))
GROUP BY currency, region, window_end EMIT AFTER WATERMARK;
CREATE VIEW v AS SELECT d.window_end, d.total, r.rate FROM daily AS d
JOIN rates FOR SYSTEM_TIME AS OF d.window_end AS r
  ON d.currency = r.currency AND d.region = r.region;""")
    (attr,) = circuit.view("v").time_attributes
    assert (attr.column, attr.kind) == ("window_end", "window_end")


TEMPORAL_ERRORS = [
    ("CREATE VIEW v AS SELECT a.amount FROM amounts a JOIN plain FOR SYSTEM_TIME AS OF "
     "a.rowtime AS r\n ON a.currency = r.currency;",
     (1, 54, "table plain has no PRIMARY KEY, so FOR SYSTEM_TIME AS OF cannot read its rows "
      "as versions of a key", "declare one in CREATE TABLE plain: PRIMARY KEY (<key "
      "columns>) NOT ENFORCED")),
    ("CREATE VIEW v AS SELECT a.amount FROM amounts a JOIN rates FOR SYSTEM_TIME AS OF "
     "a.rowtime AS r\n ON a.currency = r.currency;",
     (2, 5, "the ON condition of the temporal join does not cover the PRIMARY KEY of rates "
      "(currency, region): no equality on r.region", "add a.<column> = r.region")),
    ("CREATE VIEW v AS SELECT a.amount FROM amounts a JOIN rates FOR SYSTEM_TIME AS OF "
     "a.rowtime AS r\n ON a.currency = r.currency AND a.region > r.region;",
     (2, 5, "the ON condition of the temporal join does not cover the PRIMARY KEY", None)),
    ("CREATE VIEW v AS SELECT a.amount FROM amounts a JOIN rates FOR SYSTEM_TIME AS OF "
     f"a.placed AS r\n {ON};",
     (1, 82, "FOR SYSTEM_TIME AS OF a.placed: column a.placed is not a time attribute of "
      "amounts", "add LATENESS to amounts.placed, or join AS OF a column that has it")),
    ("CREATE VIEW v AS SELECT a.amount FROM amounts a JOIN rates FOR SYSTEM_TIME AS OF "
     f"r.rowtime AS r\n {ON};",
     (1, 82, "FOR SYSTEM_TIME AS OF r.rowtime: the time must be a column of the probe side "
      "a (FROM)", "write FOR SYSTEM_TIME AS OF a.<time attribute>")),
    ("CREATE VIEW v AS SELECT a.amount FROM amounts a JOIN untimed FOR SYSTEM_TIME AS OF "
     "a.rowtime AS r\n ON a.currency = r.currency;",
     (1, 54, "table untimed has no LATENESS column, so no waterline says when the version "
      "valid at a time is final", "add LATENESS to the event-time column of untimed")),
    ("CREATE VIEW v AS SELECT a.amount FROM amounts a RIGHT JOIN rates FOR SYSTEM_TIME AS OF "
     f"a.rowtime AS r\n {ON};",
     (1, 49, "unsupported: a RIGHT OUTER temporal join (FOR SYSTEM_TIME AS OF)",
      "use JOIN or LEFT JOIN")),
    ("CREATE VIEW v AS SELECT a.amount FROM amounts a FULL OUTER JOIN rates FOR SYSTEM_TIME "
     f"AS OF a.rowtime AS r\n {ON};",
     (1, 49, "unsupported: a FULL OUTER temporal join (FOR SYSTEM_TIME AS OF)",
      "use JOIN or LEFT JOIN")),
    ("CREATE LOCAL VIEW rv AS SELECT * FROM rates;\n"
     "CREATE VIEW v AS SELECT a.amount FROM amounts a JOIN rv FOR SYSTEM_TIME AS OF "
     f"a.rowtime AS r {ON};",
     (2, 54, "the versioned side of a temporal join must be a table with a PRIMARY KEY; rv "
      "is a view", "join FOR SYSTEM_TIME AS OF the table it reads")),
    ("CREATE VIEW v AS SELECT a.amount FROM amounts a JOIN rates FOR SYSTEM_TIME AS OF "
     "a.rowtime AS r\n ON a.amount = r.currency AND a.region = r.region;",
     (2, 5, "join keys of different types: a.amount is INT, r.currency is VARCHAR",
      "CAST one side, e.g. CAST(a.amount AS VARCHAR)")),
]


@pytest.mark.parametrize("text, expected", TEMPORAL_ERRORS,
                         ids=[e[1][2][:50] for e in TEMPORAL_ERRORS])
def test_l7_temporal_join_errors_name_position_message_and_fix(
        text: str, expected: tuple[int, int, str, str | None]) -> None:
    """L7: every refused temporal join names line:column (relative to the view here), the
    SQL as written, and the fix; nothing is mis-executed (S16)."""
    line, column, message, fix = rejected(text)
    want_line, want_column, want_message, want_fix = expected
    assert message.startswith(want_message), message
    assert (line, column) == (want_line, want_column), message
    if want_fix is not None:
        assert fix is not None and want_fix in fix, fix
