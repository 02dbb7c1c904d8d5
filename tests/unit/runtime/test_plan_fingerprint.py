"""The plan fingerprint and the rules of which program changes a checkpoint can follow
(app/runtime/planner/plan_fingerprint.py, ADR 0015): every rule on a pair of programs, no Spark."""

from __future__ import annotations

import json

from app.program.compile import compile_program
from app.runtime.planner.plan_fingerprint import (
    PlanComparison,
    PlanFingerprint,
    canonical_json,
    compare_plans,
    plan_fingerprint,
    state_version,
)

TABLE = """
CREATE TABLE t (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    k   BIGINT    NOT NULL,
    x   DOUBLE
) WITH ('topic' = 'in');
"""
FILTER = (
    "CREATE VIEW f WITH ('topic' = 'f', 'format' = 'append') AS SELECT ts, k FROM t WHERE k > 5;\n"
)
OTHER_FILTER = (
    "CREATE VIEW g WITH ('topic' = 'g', 'format' = 'append') AS SELECT ts, x FROM t WHERE x > 1;\n"
)
HOURLY = (
    "CREATE VIEW hourly WITH ('topic' = 'h') AS "
    "SELECT window_start, window_end, k, SUM(x) AS total "
    "FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '{hours}' HOUR)) "
    "GROUP BY window_start, window_end, k;\n"
)
NATIVE = (
    "CREATE VIEW counts WITH ('topic' = 'c') AS "
    "SELECT window_start, window_end, k, COUNT(*) AS n "
    "FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) "
    "GROUP BY window_start, window_end, k EMIT AFTER WATERMARK;\n"
)


def _fingerprint(text: str, name: str = "p.sql") -> PlanFingerprint:
    return plan_fingerprint(compile_program(name, text))


def _compare(old: str, new: str) -> PlanComparison:
    return compare_plans(_fingerprint(old).document, _fingerprint(new).document)


def _texts(comparison: PlanComparison) -> list[str]:
    return [str(c) for c in comparison.changes]


def test_the_digest_is_the_sha256_of_the_canonical_document() -> None:
    import hashlib

    fingerprint = _fingerprint(TABLE + FILTER + HOURLY.format(hours=1))
    text = canonical_json(fingerprint.document)
    assert fingerprint.digest == hashlib.sha256(text.encode()).hexdigest()
    assert json.loads(text) == fingerprint.document
    assert fingerprint.document["tidemark"] == state_version()


def test_comments_file_names_and_statement_positions_change_nothing() -> None:
    one = _fingerprint(TABLE + FILTER + HOURLY.format(hours=1), "a.sql")
    two = _fingerprint(
        "-- hourly totals\n\n" + TABLE + "\n" + FILTER + HOURLY.format(hours=1), "b.sql"
    )
    assert one.digest == two.digest
    assert _compare(TABLE + FILTER, TABLE + "/* docs */" + FILTER).changes == ()


def test_the_document_names_the_state_layout_of_each_query() -> None:
    document = _fingerprint(TABLE + FILTER + NATIVE + HOURLY.format(hours=1)).document
    assert document["queries"]["tidemark-t"]["state_operators"] == [
        {"kind": "native", "views": ["counts"]},
        {"kind": "python", "views": ["hourly"]},
    ]
    assert document["views"]["hourly"]["state_operator"] == "python"
    assert document["views"]["counts"]["state_operator"] == "native counts"
    assert document["views"]["f"]["state_operator"] is None
    assert document["views"]["hourly"]["windows"][0]["text"] == "TUMBLE 1 hour on ts"
    assert document["tables"]["t"]["lateness"] == {"ts": {"amount": 10_000, "text": "10 seconds"}}


def test_python_aggregate_views_swapped_in_the_file_change_nothing() -> None:
    daily = HOURLY.format(hours=24).replace("hourly", "daily").replace("'h'", "'d'")
    hourly = HOURLY.format(hours=1)
    assert _compare(TABLE + hourly + daily, TABLE + daily + hourly).changes == ()


def test_a_changed_window_size_is_refused_naming_the_view_and_both_sizes_s11() -> None:
    comparison = _compare(TABLE + HOURLY.format(hours=1), TABLE + HOURLY.format(hours=2))
    assert not comparison.compatible
    assert _texts(comparison) == [
        "view hourly: window TUMBLE 1 hour on ts -> TUMBLE 2 hours on ts "
        "(its state is kept per window)"
    ]


def test_a_changed_table_lateness_is_refused_either_way_s3() -> None:
    larger = TABLE.replace("'10' SECOND", "'1' MINUTE")
    for old, new in ((TABLE, larger), (larger, TABLE)):
        comparison = _compare(old + FILTER, new + FILTER)
        assert not comparison.compatible
        assert [c.subject for c in comparison.refused] == ["table t"]
    assert "LATENESS ts 10 seconds -> ts 1 minute" in _texts(_compare(TABLE, larger))[0]


def test_an_added_or_removed_stateful_view_is_refused() -> None:
    added = _compare(TABLE + FILTER, TABLE + FILTER + HOURLY.format(hours=1))
    assert not added.compatible
    assert "view hourly: added (it holds state" in _texts(added)[0]
    removed = _compare(TABLE + FILTER + HOURLY.format(hours=1), TABLE + FILTER)
    assert not removed.compatible
    assert [c.subject for c in removed.refused] == ["view hourly"]


def test_a_native_view_added_before_another_moves_the_operators_and_is_refused() -> None:
    comparison = _compare(
        TABLE + NATIVE, TABLE + NATIVE.replace("counts", "early").replace("'c'", "'e'") + NATIVE
    )
    assert not comparison.compatible
    assert "view early: added" in _texts(comparison)[0]


def test_a_stateless_view_added_removed_or_changed_proceeds_and_is_said() -> None:
    base = TABLE + FILTER + HOURLY.format(hours=1)
    added = _compare(base, base + OTHER_FILTER)
    assert added.compatible
    assert _texts(added) == ["view g: added, stateless: it computes from the next step on"]
    assert added.kept == ("table t: offsets and waterlines", "view hourly: its state (python)")
    removed = _compare(base + OTHER_FILTER, base)
    assert removed.compatible and _texts(removed) == ["view g: removed"]
    changed = _compare(base, base.replace("k > 5", "k > 6"))
    assert changed.compatible
    assert _texts(changed) == [
        "view f: its query changed (WHERE, SELECT, JOIN or its inputs): new rows follow the "
        "new query"
    ]


def test_an_output_topic_or_dead_letter_topic_rename_proceeds() -> None:
    base = TABLE + HOURLY.format(hours=1)
    renamed = base.replace("'topic' = 'h'", "'topic' = 'hourly-v2'").replace(
        "'topic' = 'in')", "'topic' = 'in', 'dead_letter' = 'in.late')"
    )
    comparison = _compare(base, renamed)
    assert comparison.compatible
    assert _texts(comparison) == [
        "table t: dead-letter topic in.dlq -> in.late",
        "view hourly: output topic h -> hourly-v2",
    ]


def test_a_redefined_aggregate_or_emit_is_refused() -> None:
    base = TABLE + HOURLY.format(hours=1)
    aggregates = _compare(base, base.replace("SUM(x)", "MAX(x)"))
    assert not aggregates.compatible
    assert "aggregates SUM(x) -> MAX(x)" in _texts(aggregates)[0]
    emit = _compare(
        base,
        base.replace(
            "GROUP BY window_start, window_end, k;",
            "GROUP BY window_start, window_end, k EMIT STREAM;",
        ),
    )
    assert not emit.compatible
    where = _compare(base, base.replace("GROUP BY", "WHERE k > 0 GROUP BY"))
    assert not where.compatible
    assert "its state was built by the old one" in _texts(where)[0]


def test_a_change_upstream_of_a_stateful_view_is_refused_s18() -> None:
    local = "CREATE LOCAL VIEW big AS SELECT ts, k, x FROM t WHERE x > {n};\n"
    reader = HOURLY.format(hours=1).replace("TABLE t,", "TABLE big,")
    comparison = _compare(TABLE + local.format(n=1) + reader, TABLE + local.format(n=2) + reader)
    assert not comparison.compatible
    assert "view hourly: a view it reads changed" in " ".join(_texts(comparison))


def test_table_columns_refused_only_when_the_query_holds_state() -> None:
    wider = TABLE.replace("x   DOUBLE", "x   DOUBLE,\n    y   INT")
    assert _compare(TABLE + FILTER, wider + FILTER).compatible
    held = _compare(TABLE + HOURLY.format(hours=1), wider + HOURLY.format(hours=1))
    assert not held.compatible
    assert "its query holds state" in _texts(held)[0]


def test_a_table_added_in_a_query_of_its_own_proceeds_with_its_views() -> None:
    other = (
        "CREATE TABLE u (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND, "
        "k BIGINT NOT NULL) WITH ('topic' = 'in2');\n"
    )
    counts = "CREATE VIEW uc WITH ('topic' = 'uc') AS SELECT k, COUNT(*) AS n FROM u GROUP BY k;\n"
    comparison = _compare(TABLE + FILTER, TABLE + other + FILTER + counts)
    assert comparison.compatible
    assert _texts(comparison) == [
        "table u: added, topic in2, in a query of new tables: it starts at its 'scan.startup.mode'",
        "view uc: added, over new tables: it starts with them",
    ]


def test_a_table_added_to_a_query_that_exists_is_refused() -> None:
    other = (
        "CREATE TABLE u (ts TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND, "
        "k BIGINT NOT NULL) WITH ('topic' = 'in2');\n"
    )
    union = (
        "CREATE VIEW b WITH ('topic' = 'b', 'format' = 'append') AS "
        "SELECT ts, k FROM t UNION ALL SELECT ts, k FROM u;\n"
    )
    comparison = _compare(TABLE + FILTER, TABLE + other + FILTER + union)
    assert not comparison.compatible
    assert "table u: added, topic in2 (it would join query tidemark-t" in _texts(comparison)[0]


def test_tables_removed_or_moved_to_another_topic_are_refused() -> None:
    other = "CREATE TABLE u (ts TIMESTAMP NOT NULL, k BIGINT NOT NULL) WITH ('topic' = 'in2');\n"
    assert not _compare(TABLE + other + FILTER, TABLE + FILTER).compatible
    moved = _compare(TABLE + FILTER, TABLE.replace("'in'", "'in-v2'") + FILTER)
    assert [str(c) for c in moved.refused] == [
        "table t: topic in -> in-v2 (the checkpoint's offsets are the old topic's)"
    ]


def test_a_different_major_minor_version_or_document_format_is_refused() -> None:
    document = _fingerprint(TABLE + FILTER).document
    older = dict(document, tidemark="0.0")
    comparison = compare_plans(older, document)
    assert not comparison.compatible
    assert _texts(comparison)[0].startswith("tidemark: version 0.0 -> ")
    newer = dict(document, fingerprint_format=99)
    assert not compare_plans(newer, document).compatible
    assert state_version("1.4.2") == "1.4"


JOINED = """
CREATE TABLE a (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL)
    WITH ('topic' = 'a');
CREATE TABLE b (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL)
    WITH ('topic' = 'b');
CREATE VIEW pairs WITH ('topic' = 'pairs', 'format' = 'append') AS
SELECT a.ts, a.k, b.ts AS b_ts FROM a JOIN b
    ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts + INTERVAL '1' MINUTE;
"""


def test_a_stateless_output_over_a_join_runs_the_join_again_and_is_refused_s16() -> None:
    """Each output branch runs the joins it reads (each a state operator of Spark): a new
    stateless output over a join adds one, and Spark's operators are found by their order."""
    reader = (
        "CREATE VIEW near WITH ('topic' = 'near', 'format' = 'append') AS "
        "SELECT ts, k FROM pairs WHERE k > 0;\n"
    )
    document = _fingerprint(JOINED).document
    assert document["queries"]["tidemark-a"]["state_operators"] == [
        {"kind": "join", "views": ["pairs"]}
    ]
    comparison = _compare(JOINED, JOINED + reader)
    assert not comparison.compatible
    assert [str(c) for c in comparison.refused] == [
        "query tidemark-a: state operators [join pairs] -> [join pairs, join pairs] (Spark "
        "finds state by the operators' order)"
    ]


def test_an_output_key_format_changed_on_its_topic_is_refused_s13() -> None:
    base = TABLE + FILTER.replace("'format' = 'append'", "'format' = 'append', 'key' = 'k'")
    raw = base.replace("'key' = 'k'", "'key' = 'k', 'key.format' = 'raw'")
    # A plan without a declared key format is the document it was before key formats.
    assert "key_format" not in json.dumps(_fingerprint(base).document)
    comparison = _compare(base, raw)
    assert not comparison.compatible
    assert _texts(comparison) == [
        "view f: output key format record -> raw on topic f (its records of a key would have "
        "two keys: an upsert topic would keep both, and consumers partitioned by the old bytes "
        "would miss the new; write the new key to a new topic)"]
    # On a new topic it is a new output: it proceeds.
    moved = raw.replace("'topic' = 'f'", "'topic' = 'f-raw'")
    assert _compare(base, moved).compatible


def test_an_outputs_key_fields_renamed_by_a_prefix_proceed_and_are_said_s13() -> None:
    sink = """
CREATE TABLE src (k_id BIGINT, n BIGINT) WITH ('connector' = 'kafka', 'topic' = 'src',
  'format' = 'json');
CREATE TABLE out (k_id BIGINT, n BIGINT) WITH ('connector' = 'kafka', 'topic' = 'out',
  'key.format' = 'json', 'key.fields' = 'k_id', 'value.format' = 'json');
INSERT INTO out SELECT * FROM src;
"""
    prefixed = sink.replace("'key.fields' = 'k_id',", "'key.fields' = 'k_id', "
                            "'key.fields-prefix' = 'k_', 'value.fields-include' = 'EXCEPT_KEY',")
    # Without a prefix the key's fields are its columns: the document is the one before.
    assert "key_fields" not in json.dumps(_fingerprint(sink).document)
    comparison = _compare(sink, prefixed)
    assert comparison.compatible
    assert _texts(comparison) == ["view out: output key fields ['k_id'] -> ['id']"]
