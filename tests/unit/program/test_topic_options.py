"""A view's Kafka key and topic settings, a table's start position (docs/language.md):
what the compiler accepts, what it refuses (SPEC L7: position, message, fix), and the key the
reference evaluator's records carry (S13)."""

from __future__ import annotations

from typing import Any

import pytest

from app.circuit.ir import Circuit
from app.circuit.reference import StepInput, evaluate
from app.errors import ProgramError
from app.program.compile import compile_text

TABLE = (
    "CREATE TABLE t (\n"
    "  ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,\n"
    "  k BIGINT NOT NULL,\n"
    "  name VARCHAR,\n"
    "  n INT\n"
    ") WITH ('topic' = 'in');\n"
)
HOUR = 3_600_000


def _view(options: str, query: str = "SELECT ts, k, name, n FROM t") -> Circuit:
    return compile_text("p.sql", TABLE + f"CREATE VIEW v WITH ('topic' = 'out', {options}) AS\n"
                        f"{query};\n")


def _refused(text: str) -> Any:
    with pytest.raises(ProgramError) as info:
        compile_text("p.sql", text)
    return info.value.diagnostics[0]


def _view_refused(options: str, query: str = "SELECT ts, k, name, n FROM t") -> Any:
    return _refused(TABLE + f"CREATE VIEW v WITH ('topic' = 'out', {options}) AS\n{query};\n")


# -- 'key' --------------------------------------------------------------------------------


def test_an_append_view_is_keyed_by_its_declared_columns_in_their_order() -> None:
    output = _view("'key' = 'name, K'").view("v").output
    assert output is not None and output.format == "append"
    assert output.key_columns == ("name", "k")
    assert output.key_schema is not None
    assert output.key_schema["name"] == "v_key"
    assert [f["name"] for f in output.key_schema["fields"]] == ["name", "k"]
    assert [f["type"] for f in output.key_schema["fields"]] == [["null", "string"], "long"]


def test_an_append_view_without_key_has_a_null_key() -> None:
    output = _view("'format' = 'append'").view("v").output
    assert output is not None and output.key_columns == () and output.key_schema is None


def test_an_unknown_key_column_is_refused_at_its_place_with_the_columns() -> None:
    found = _view_refused("'key' = 'k,  nope'")
    # Line 7 is the view's; the column is 'nope' inside the quoted value.
    line = TABLE.count("\n") + 1
    column = len("CREATE VIEW v WITH ('topic' = 'out', 'key' = 'k,  ") + 1
    assert (found.position.line, found.position.column) == (line, column)
    assert found.message == "unknown column nope in 'key' of view v"
    assert found.fix == "available columns: ts, k, name, n"


def test_a_key_column_named_twice_or_an_empty_one_is_refused() -> None:
    assert "twice" in _view_refused("'key' = 'k, K'").message
    assert "empty column name" in _view_refused("'key' = 'k,'").message


def test_an_upsert_key_may_name_the_group_by_columns_in_another_order() -> None:
    circuit = _view("'key' = 'name, k'",
                    "SELECT k, name, COUNT(*) AS c FROM t GROUP BY k, name")
    output = circuit.view("v").output
    assert output is not None and output.format == "upsert"
    assert output.key_columns == ("name", "k")
    assert output.key_schema is not None
    assert [f["name"] for f in output.key_schema["fields"]] == ["name", "k"]


@pytest.mark.parametrize("key", ["k", "k, name, c", "c, k"])
def test_an_upsert_key_other_than_the_group_by_columns_is_refused(key: str) -> None:
    found = _view_refused(f"'key' = '{key}'",
                          "SELECT k, name, COUNT(*) AS c FROM t GROUP BY k, name")
    assert found.message.startswith("the upsert key of view v is its GROUP BY columns (k, name)")
    assert found.fix.startswith("write 'key' = 'k, name' (in any order), or remove 'key'")


def test_an_after_watermark_append_aggregate_may_key_by_any_column() -> None:
    circuit = _view(
        "'format' = 'append', 'key' = 'k'",
        "SELECT window_end, k, COUNT(*) AS c FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), "
        "INTERVAL '1' HOUR)) GROUP BY window_end, k EMIT AFTER WATERMARK",
    )
    output = circuit.view("v").output
    assert output is not None and output.key_columns == ("k",)


def test_topic_options_need_a_topic() -> None:
    for option in ("'key' = 'k'", "'partitions' = '3'", "'replicas' = '2'",
                   "'retention' = INTERVAL '1' DAY"):
        found = _refused(TABLE + f"CREATE VIEW v WITH ({option}) AS SELECT k FROM t;\n")
        assert "but no 'topic'" in found.message, option


# -- partitions, replicas, retention ---------------------------------------------------------


def test_topic_settings_are_read() -> None:
    output = _view("'partitions' = '6', 'replicas' = '3', 'retention' = INTERVAL '7' DAY"
                   ).view("v").output
    assert output is not None
    assert (output.partitions, output.replicas, output.retention_ms) == (6, 3, 7 * 24 * HOUR)
    assert _view("'retention' = '86400000'").view("v").output.retention_ms == 24 * HOUR  # type: ignore[union-attr]
    assert _view("'retention' = '-1'").view("v").output.retention_ms == -1  # type: ignore[union-attr]
    plain = _view("'format' = 'append'").view("v").output
    assert plain is not None and (plain.partitions, plain.replicas, plain.retention_ms) == (
        None, None, None)


@pytest.mark.parametrize(("option", "message"), [
    ("'partitions' = '0'", "'partitions' '0' is not a positive integer"),
    ("'replicas' = 'two'", "'replicas' 'two' is not a positive integer"),
    ("'retention' = '1 day'", "'retention' '1 day' is not an INTERVAL or a positive number"),
    ("'retention' = '0'", "'retention' '0' is not an INTERVAL"),
])
def test_bad_topic_settings_are_refused(option: str, message: str) -> None:
    found = _view_refused(option)
    assert found.message.startswith(message)
    assert found.fix


# -- 'scan.startup.mode' ---------------------------------------------------------------------


def _table(options: str) -> str:
    return TABLE.replace("('topic' = 'in')", f"('topic' = 'in', {options})")


def test_a_table_starts_at_the_earliest_offset_by_default() -> None:
    table = compile_text("p.sql", TABLE).table("t")
    assert (table.startup_mode, table.startup_timestamp_ms) == ("earliest-offset", None)


@pytest.mark.parametrize("mode", ["earliest-offset", "latest-offset"])
def test_a_table_declares_its_start(mode: str) -> None:
    table = compile_text("p.sql", _table(f"'scan.startup.mode' = '{mode}'")).table("t")
    assert (table.startup_mode, table.startup_timestamp_ms) == (mode, None)


def test_a_timestamp_start_takes_epoch_milliseconds() -> None:
    text = _table("'scan.startup.mode' = 'timestamp', "
                  "'scan.startup.timestamp-millis' = '1767225600000'")
    table = compile_text("p.sql", text).table("t")
    assert (table.startup_mode, table.startup_timestamp_ms) == ("timestamp", 1767225600000)


@pytest.mark.parametrize(("options", "message", "fix"), [
    ("'scan.startup.mode' = 'timestamp'",
     "'scan.startup.mode' = 'timestamp' needs 'scan.startup.timestamp-millis'",
     "add 'scan.startup.timestamp-millis'"),
    ("'scan.startup.timestamp-millis' = '5'",
     "'scan.startup.timestamp-millis' needs 'scan.startup.mode' = 'timestamp'",
     "add 'scan.startup.mode' = 'timestamp'"),
    ("'scan.startup.mode' = 'timestamp', 'scan.startup.timestamp-millis' = '2026-01-01'",
     "'scan.startup.timestamp-millis' '2026-01-01' is not a non-negative integer",
     "write epoch milliseconds"),
    ("'scan.startup.mode' = 'group-offsets'", "bad 'scan.startup.mode' 'group-offsets'",
     "not in a consumer group"),
    ("'scan.startup.mode' = 'latest'", "bad 'scan.startup.mode' 'latest'",
     "use one of 'earliest-offset', 'latest-offset', 'timestamp'"),
])
def test_bad_start_positions_are_refused(options: str, message: str, fix: str) -> None:
    found = _refused(_table(options))
    assert found.position.line == 6
    assert found.message == message
    assert fix in found.fix


# -- the reference evaluator's keys (S13) ----------------------------------------------------


def test_the_reference_writes_an_append_views_declared_key() -> None:
    circuit = _view("'key' = 'name, k'")
    rows = [{"ts": 1000, "k": 7, "name": "a", "n": 1}, {"ts": 2000, "k": 8, "name": None, "n": 2}]
    [result] = evaluate(circuit, [StepInput(rows={"t": rows})])
    assert [r.key for r in result.outputs["v"]] == [{"name": "a", "k": 7}, {"name": None, "k": 8}]


def test_the_reference_writes_an_after_watermark_views_declared_key() -> None:
    circuit = _view(
        "'format' = 'append', 'key' = 'k'",
        "SELECT window_end, k, COUNT(*) AS c FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), "
        "INTERVAL '1' HOUR)) GROUP BY window_end, k EMIT AFTER WATERMARK",
    )
    rows = [{"ts": 1000, "k": 7, "name": "a", "n": 1},
            {"ts": 2 * HOUR, "k": 8, "name": "b", "n": 1}]
    [result] = evaluate(circuit, [StepInput(rows={"t": rows})])
    assert [(r.key, r.value) for r in result.outputs["v"]] == [
        ({"k": 7}, {"window_end": HOUR, "k": 7, "c": 1})]
