"""Accepted programs compile to the IR facts SPEC L1-L6, S10, S11 and S13 call for."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.circuit.ir import (
    Aggregate,
    Call,
    Cast,
    ColumnRef,
    Filter,
    Literal_,
    Project,
    SqlType,
    TimeAttribute,
    Window,
)
from app.program.avro_schema import avro_type, record_schema
from app.program.compile import compile_program

ROOT = Path(__file__).resolve().parents[3]
PIPELINES = sorted((ROOT / "pipelines").glob("*.sql"))

TABLE = """CREATE TABLE purchase (
    date_time   TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,
    credit_card BIGINT NOT NULL,
    amount      DECIMAL(10, 2),
    note        VARCHAR
) WITH ('topic' = 'purchases');
"""
WINDOW = "TABLE(TUMBLE(TABLE purchase, DESCRIPTOR(date_time), INTERVAL '1' HOUR))"


def compile_text(text: str):  # type: ignore[no-untyped-def]
    return compile_program("p.sql", text)


@pytest.mark.parametrize("program", PIPELINES, ids=[p.stem for p in PIPELINES])
def test_every_example_pipeline_compiles_without_warnings(
        program: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    circuit = compile_program(Path("pipelines") / program.name)
    assert circuit.views and circuit.tables
    assert circuit.warnings == ()


def test_l1_purchases_table_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    circuit = compile_program("pipelines/purchases.sql")
    assert circuit.program == "pipelines/purchases.sql"
    table = circuit.table("purchase")
    assert table.topic == "purchases"
    assert table.format == "avro"
    assert table.dead_letter_topic == "purchases.dlq"
    assert [(lt.column, lt.amount) for lt in table.lateness] == [("date_time", 3_600_000)]
    assert table.avro_schema["namespace"] == "tidemark.example"  # the 'schema' file itself
    assert table.column("amount").type == SqlType("DECIMAL", True, 10, 2)
    assert table.position.line == 5


def test_l6_stateless_view_is_append_with_forwarded_time_attribute(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    view = compile_program("pipelines/purchases.sql").view("large_purchase")
    assert isinstance(view.operators[0], Filter)
    assert isinstance(view.operators[1], Project)
    assert view.key == ()
    assert view.state.kind == "none"
    assert view.time_attributes == (
        TimeAttribute("date_time", "purchase", "date_time", "forwarded"),)
    assert view.output is not None
    assert view.output.format == "append"
    assert view.output.key_schema is None
    assert [f["name"] for f in view.output.value_schema["fields"]] == [
        "date_time", "credit_card", "amount", "amount_cents"]
    cents = dict(view.operators[1].outputs)["amount_cents"]
    assert isinstance(cents, Cast) and cents.type == SqlType("BIGINT")


def test_l1_table_defaults_and_derived_schema() -> None:
    circuit = compile_text(TABLE)
    table = circuit.table("purchase")
    assert table.format == "avro"
    assert table.dead_letter_topic == "purchases.dlq"
    assert table.avro_schema == record_schema("purchase", table.columns)
    assert table.max_future_ms is None


def test_l1_all_types_map_to_avro() -> None:
    circuit = compile_text(
        "CREATE TABLE t (b BOOLEAN NOT NULL, i INT NOT NULL, l BIGINT NOT NULL, r REAL NOT NULL,"
        " d DOUBLE NOT NULL, m DECIMAL(5, 1) NOT NULL, s VARCHAR NOT NULL, dt DATE NOT NULL,"
        " ts TIMESTAMP NOT NULL, bin VARBINARY NOT NULL, n INT) WITH ('topic' = 't',"
        " 'format' = 'avro-confluent', 'dead_letter' = 'bad', 'max_future' = INTERVAL '5' MINUTE"
        ");\n".replace("ts TIMESTAMP NOT NULL",
                         "ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND"))
    table = circuit.table("t")
    types = {f["name"]: f["type"] for f in table.avro_schema["fields"]}
    assert types == {
        "b": "boolean", "i": "int", "l": "long", "r": "float", "d": "double",
        "m": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 1},
        "s": "string", "dt": {"type": "int", "logicalType": "date"},
        "ts": {"type": "long", "logicalType": "timestamp-millis"}, "bin": "bytes",
        "n": ["null", "int"],
    }
    assert table.avro_schema["namespace"] == "tidemark"
    assert table.format == "avro-confluent"
    assert table.dead_letter_topic == "bad"
    assert table.max_future_ms == 300_000
    assert avro_type(SqlType("TIMESTAMP")) == ["null", {"type": "long",
                                                        "logicalType": "timestamp-millis"}]


def test_l2_integer_lateness_and_integer_windows() -> None:
    circuit = compile_text(
        "CREATE TABLE e (seq BIGINT NOT NULL LATENESS 10, v INT) WITH ('topic' = 'e');\n"
        "CREATE VIEW w WITH ('topic' = 'w') AS SELECT window_end, SUM(v) AS s\n"
        "FROM TABLE(TUMBLE(TABLE e, DESCRIPTOR(seq), 100, 5)) GROUP BY window_end;\n")
    assert circuit.table("e").lateness[0].amount == 10
    view = circuit.view("w")
    assert view.operators[0] == Window("TUMBLE", "seq", 100, 100, 5)
    assert view.columns[0].type == SqlType("BIGINT", nullable=False)
    assert view.state.kind == "window"


def test_l4_s10_s11_nexmark_q7(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    view = compile_program("pipelines/nexmark_q7.sql").view("max_bid")
    window, aggregate, project = view.operators
    assert window == Window("TUMBLE", "bidtime", 600_000, 600_000, 0)
    assert isinstance(aggregate, Aggregate)
    assert [k for k, _ in aggregate.keys] == ["window_start", "window_end"]
    assert [(n, a.fn) for n, a in aggregate.aggregates] == [
        ("_agg0", "ARG_MAX"), ("_agg1", "MAX"), ("_agg2", "ARG_MAX")]
    assert isinstance(project, Project)
    assert project.outputs[0] == ("wstart", ColumnRef("window_start",
                                                     SqlType("TIMESTAMP", nullable=False)))
    assert view.key == ("wstart", "wend")
    assert view.time_attributes == (
        TimeAttribute("wstart", "bid", "bidtime", "window_start"),
        TimeAttribute("wend", "bid", "bidtime", "window_end"))
    assert view.state.kind == "window"
    assert view.state.window_end_column == "wend"
    assert view.state.description == "a group is freed once w(bid.bidtime) >= wend"
    assert view.emit.after_watermark and not view.emit.stream
    assert view.output is not None and view.output.format == "append"
    assert view.output.key_columns == ()


def test_l6_s13_upsert_and_changelog_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    circuit = compile_program("pipelines/hop_purchases.sql")
    upsert = circuit.view("card_spend_15m")
    assert upsert.operators[0] == Window("HOP", "date_time", 900_000, 300_000, 0)
    assert isinstance(upsert.operators[2], Filter)  # HAVING after the Aggregate
    assert upsert.output is not None and upsert.output.format == "upsert"
    assert upsert.output.key_columns == ("window_start", "window_end", "credit_card")
    assert upsert.output.key_schema is not None
    assert [f["name"] for f in upsert.output.key_schema["fields"]] == [
        "window_start", "window_end", "credit_card"]
    changelog = circuit.view("spend_15m_changes")
    assert changelog.output is not None and changelog.output.format == "changelog"
    fields = changelog.output.value_schema["fields"]
    assert [f["name"] for f in fields][-3:] == ["undo", "ptime", "ver"]
    assert fields[-3]["type"] == "boolean"
    assert fields[-2]["type"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert fields[-1]["type"] == "long"


def test_l2_s10_view_lateness_decoding_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    circuit = compile_program("pipelines/decoded_purchases.sql")
    decoded = circuit.view("decoded_purchase")
    assert decoded.output is None
    assert [(v.column, v.amount) for v in decoded.lateness] == [("date_time", 3_600_000)]
    assert decoded.time_attributes == (
        TimeAttribute("date_time", "decoded_purchase", "date_time", "view_lateness"),)
    daily = circuit.view("daily_card_spend")
    assert daily.source == "decoded_purchase"
    assert TimeAttribute("window_end", "decoded_purchase", "date_time",
                         "window_end") in daily.time_attributes
    assert circuit.root_table("daily_card_spend").name == "purchase_raw"


@pytest.mark.parametrize(("emit", "fmt"), [("", "upsert"), ("EMIT STREAM", "changelog"),
                                           ("EMIT AFTER WATERMARK", "upsert"),
                                           ("EMIT STREAM AFTER WATERMARK", "changelog")])
def test_l6_aggregate_format_defaults(emit: str, fmt: str) -> None:
    view = compile_text(TABLE + "CREATE VIEW v WITH ('topic' = 'o') AS\n"
                        f"SELECT window_end, COUNT(*) AS n FROM {WINDOW}\n"
                        f"GROUP BY window_end {emit};").view("v")
    assert view.output is not None and view.output.format == fmt


@pytest.mark.parametrize(("emit", "fmt"), [("", "append"), ("EMIT STREAM", "changelog")])
def test_l6_stateless_format_defaults(emit: str, fmt: str) -> None:
    view = compile_text(TABLE + "CREATE VIEW v WITH ('topic' = 'o') AS\n"
                        f"SELECT credit_card FROM purchase {emit};").view("v")
    assert view.output is not None and view.output.format == fmt


def test_l5_emit_delay_is_in_milliseconds() -> None:
    view = compile_text(TABLE + "CREATE VIEW v WITH ('topic' = 'o') AS\n"
                        f"SELECT window_end, COUNT(*) AS n FROM {WINDOW} GROUP BY window_end\n"
                        "EMIT STREAM AFTER WATERMARK AND AFTER DELAY INTERVAL '6' MINUTES;"
                        ).view("v")
    assert (view.emit.stream, view.emit.after_watermark, view.emit.delay_ms) == (
        True, True, 360_000)


def test_l7_unbounded_group_by_is_a_warning_not_an_error() -> None:
    circuit = compile_text(TABLE + "CREATE VIEW per_card WITH ('topic' = 'o') AS\n"
                           "SELECT credit_card, SUM(amount) AS total FROM purchase\n"
                           "GROUP BY credit_card;")
    view = circuit.view("per_card")
    assert view.state.kind == "unbounded"
    assert view.key == ("credit_card",)
    (warning,) = circuit.warnings
    assert warning.severity == "warning"
    assert (warning.position.line, warning.position.column) == (9, 1)
    assert "unbounded state" in warning.message


def test_l3_views_chain_through_an_after_watermark_view() -> None:
    circuit = compile_text(
        TABLE + "CREATE LOCAL VIEW hourly AS\n"
        f"SELECT window_start, window_end, credit_card, SUM(amount) AS total FROM {WINDOW}\n"
        "GROUP BY window_start, window_end, credit_card EMIT AFTER WATERMARK;\n"
        "CREATE VIEW big WITH ('topic' = 'big') AS\n"
        "SELECT window_end AS hour_end, credit_card, total FROM hourly WHERE total > 1000;\n"
        "CREATE VIEW daily WITH ('topic' = 'daily') AS\n"
        "SELECT window_end, COUNT(*) AS cards\n"
        "FROM TABLE(TUMBLE(TABLE big, DESCRIPTOR(hour_end), INTERVAL '1' DAY))\n"
        "GROUP BY window_end;\n")
    assert [v.name for v in circuit.views] == ["hourly", "big", "daily"]
    big = circuit.view("big")
    assert big.output is not None and big.output.format == "append"
    assert big.time_attributes == (TimeAttribute("hour_end", "purchase", "date_time",
                                                 "window_end"),)
    assert circuit.view("daily").state.kind == "window"


def test_l3_expressions_translate_to_catalog_calls() -> None:
    view = compile_text(
        TABLE + "CREATE VIEW v AS SELECT\n"
        "  Credit_Card AS \"Card\",\n"
        "  p.amount BETWEEN 1 AND 10 AS small,\n"
        "  note IN ('a', 'b') AS ab,\n"
        "  date_time + INTERVAL '10' MINUTE AS later,\n"
        "  FLOOR(date_time TO HOUR) AS hour,\n"
        "  EXTRACT(HOUR FROM date_time) AS h,\n"
        "  COALESCE(note, 'none') || '!' AS n,\n"
        "  CASE WHEN amount > 100 THEN 'big' ELSE NULL END AS size\n"
        "FROM purchase p WHERE note NOT LIKE 'x%' AND note IS NOT NULL;\n").view("v")
    project = view.operators[-1]
    assert isinstance(project, Project)
    outputs = dict(project.outputs)
    assert list(outputs) == ["Card", "small", "ab", "later", "hour", "h", "n", "size"]
    small = outputs["small"]
    assert isinstance(small, Call) and small.fn == "AND"
    assert [a.fn for a in small.args if isinstance(a, Call)] == [">=", "<="]
    later = outputs["later"]
    assert isinstance(later, Call) and later.fn == "+"
    assert later.args[1] == Literal_(600_000, SqlType("BIGINT", nullable=False))
    assert later.type == SqlType("TIMESTAMP", nullable=False)
    hour = outputs["hour"]
    assert isinstance(hour, Call) and hour.fn == "DATE_TRUNC"
    assert outputs["h"].type == SqlType("BIGINT", nullable=False)
    assert isinstance(outputs["n"], Call) and outputs["n"].fn == "CONCAT"
    assert outputs["size"].type == SqlType("VARCHAR")
    # Monotone functions of date_time keep the property (S10, derived); EXTRACT does not.
    assert [(a.column, a.kind) for a in view.time_attributes] == [
        ("later", "derived"), ("hour", "derived")]
    where = view.operators[0]
    assert isinstance(where, Filter) and isinstance(where.predicate, Call)


def test_l3_select_star_and_group_by_alias() -> None:
    circuit = compile_text(
        TABLE + "CREATE LOCAL VIEW everything AS SELECT * FROM purchase;\n"
        "CREATE VIEW by_hour WITH ('topic' = 'o') AS\n"
        "SELECT FLOOR(date_time TO HOUR) AS hour, COUNT(*) AS n FROM everything GROUP BY hour;\n")
    assert [c.name for c in circuit.view("everything").columns] == [
        "date_time", "credit_card", "amount", "note"]
    by_hour = circuit.view("by_hour")
    aggregate = by_hour.operators[0]
    assert isinstance(aggregate, Aggregate)
    assert aggregate.keys[0][0] == "hour"
    assert by_hour.key == ("hour",)
    # FLOOR(date_time TO HOUR) is a time attribute: an hour's group is complete once
    # w(hour) = FLOOR(w(date_time) TO HOUR) passes it (S11).
    assert by_hour.state.kind == "window"


def test_schema_path_resolves_against_the_programs_parent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "schemas" / "t.avsc").write_text(
        '{"type": "record", "name": "t", "fields": [{"name": "x", "type": "long"},'
        ' {"name": "extra", "type": "string"}]}')
    program = tmp_path / "pipelines" / "p.sql"
    program.write_text("CREATE TABLE t (x BIGINT NOT NULL) WITH ('topic' = 't',"
                       " 'schema' = 'schemas/t.avsc');")
    monkeypatch.chdir(tmp_path / "pipelines")
    table = compile_program(program).table("t")
    assert [f["name"] for f in table.avro_schema["fields"]] == ["x", "extra"]
