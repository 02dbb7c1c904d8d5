"""Flink's upsert-kafka input read as its latest row per key (SPEC S16, S18; ADR 0030): the
Kafka key holds the PRIMARY KEY, a record is an upsert of its key and a tombstone deletes
it, so the table is a changelog table and its views read the generated view
``<table>.latest``, as Flink's upsert-kafka source is a changelog of its keys. Real
``confluent_kafka.Message`` objects pass the table's source (its key decoder and gate);
expectations are computed by hand: an upsert of a new key inserts it, an update moves it
between groups (a retraction and an insertion), a tombstone takes it out, a re-insert
puts it back. A Tidemark-dialect table keyed by its Kafka key stays insert-only (S2)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from confluent_kafka import Message

from app.circuit.explain import explain_text
from app.circuit.ir import Circuit
from app.circuit.reference import Deletion, StepInput, StepResult, evaluate
from app.connectors.late_gate import LateGate
from app.connectors.record_metadata import record_meta
from app.errors import ProgramError
from app.program.compile import compile_text
from app.runtime.operators.source import source_spec

NOW = 1_800_000_000_000

#: The read side of Flink's Upsert Kafka page (upsert-kafka.md): users keyed by user_id,
#: counted per region into its pageviews_per_region table.
USERS = """CREATE TABLE users (
  user_id BIGINT,
  user_region STRING,
  pageviews BIGINT,
  ts TIMESTAMP(3) METADATA FROM 'timestamp',
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND,
  PRIMARY KEY (user_id) NOT ENFORCED
) WITH (
  'connector' = 'upsert-kafka',
  'topic' = 'users',
  'properties.bootstrap.servers' = 'localhost:9092',
  'key.format' = '{key}',
  'value.format' = 'json'{extra}
);
"""

PROGRAM = USERS + """
CREATE TABLE pageviews_per_region (
  user_region STRING,
  users BIGINT,
  pv BIGINT,
  PRIMARY KEY (user_region) NOT ENFORCED
) WITH (
  'connector' = 'upsert-kafka',
  'topic' = 'pageviews_per_region',
  'key.format' = 'json',
  'value.format' = 'json'
);

INSERT INTO pageviews_per_region
SELECT user_region, COUNT(*), SUM(pageviews) FROM users GROUP BY user_region;
"""


def compiled(program: str = PROGRAM, key: str = "json", extra: str = "") -> Circuit:
    return compile_text("upsert.sql", program.format(key=key, extra=extra))


def record(user: int, key: str, at_s: int, region: str | None = None,
           views: int = 0) -> tuple[bytes, bytes | None, int]:
    """A record of Flink's upsert-kafka writer: the key's JSON object (or its raw Long),
    the row (every column, 'value.fields-include' = 'ALL'; None: a tombstone), its time."""
    key_bytes = (json.dumps({"user_id": user}).encode() if key == "json"
                 else user.to_bytes(8, "big", signed=True))
    value = None if region is None else json.dumps(
        {"user_id": user, "user_region": region, "pageviews": views}).encode()
    return key_bytes, value, at_s * 1000


def through_source(circuit: Circuit, table: str,
                   records: Sequence[tuple[bytes, bytes | None, int]]) -> list[Any]:
    """The table's accepted rows and deletions of one step's records, as its source's gate
    reads real Kafka messages (key decoder, metadata) and the reference evaluator takes
    them (the evaluator gates late rows itself: no waterline here)."""
    gate = LateGate(source_spec(circuit.table(table)), {}, NOW)
    out: list[Any] = []
    for i, (key, value, ms) in enumerate(records):
        msg = Message(topic=table, partition=0, offset=i, key=key, value=value,
                      timestamp=(1, ms))
        verdict = gate.classify(msg.value(), msg.headers(), record_meta(msg))
        assert verdict.kind in ("ok", "delete") and verdict.row is not None, verdict
        out.append(verdict.row if verdict.kind == "ok" else Deletion(verdict.row))
    return out


#: Steps (times in seconds): users 1 and 2 in eu, 3 in us; 2 moves to us with more views;
#: a tombstone deletes 1; 1 comes back in us.
STEPS = [
    [(1, 10, "eu", 1), (2, 10, "eu", 2), (3, 10, "us", 4)],
    [(2, 20, "us", 5)],
    [(1, 30, None, 0)],
    [(1, 40, "us", 1)],
]


def run(circuit: Circuit, key: str = "json") -> list[StepResult]:
    return evaluate(circuit, [StepInput({"users": through_source(circuit, "users", [
        record(user, key, at, region, views) for user, at, region, views in step])})
        for step in STEPS])


def upserts(result: StepResult, view: str) -> list[tuple[Any, ...]]:
    """The step's records of an upsert output: (key, users, pv), None for a tombstone."""
    return sorted(((r.key or {})["user_region"],
                   None if r.value is None else (r.value["users"], r.value["pv"]))
                  for r in result.outputs[view])


@pytest.mark.parametrize("key", ["json", "raw"])
def test_s18_the_upsert_kafka_pages_users_are_counted_per_region(key: str) -> None:
    circuit = compiled(key=key)
    results = run(circuit, key)
    assert [upserts(r, "pageviews_per_region") for r in results] == [
        [("eu", (2, 3)), ("us", (1, 4))],
        # 2 moves: eu loses it and its 2 views, us gets it with 5.
        [("eu", (1, 1)), ("us", (2, 9))],
        # The tombstone of 1: eu has no user left (the upsert output's own tombstone).
        [("eu", None)],
        # 1 again, in us.
        [("us", (3, 10))],
    ]
    assert all(not r.dead_letters for r in results)
    # One group per key ever seen, the deleted one included (never freed, ADR 0030).
    assert results[-1].state_rows["users.latest"] == 3


def test_s2_s16_the_table_is_keyed_by_its_kafka_key_and_tombstones_delete() -> None:
    table = compiled().table("users")
    assert table.upserts and table.changelog and table.deletes_by_tombstone
    assert (table.key_format, table.key_fields, table.primary_key) == (
        "json", ("user_id",), ("user_id",))
    # Read from the key (a tombstone has no value), though the value holds it too.
    assert table.column("user_id").metadata == "key"
    assert [f["name"] for f in table.avro_schema["fields"]] == ["user_region", "pageviews"]


def test_s18_a_filter_of_the_table_writes_the_changelog_of_its_rows() -> None:
    circuit = compiled(USERS + """
CREATE TABLE eu_users (user_id BIGINT, pageviews BIGINT) WITH (
  'connector' = 'kafka', 'topic' = 'eu_users', 'format' = 'debezium-json');
INSERT INTO eu_users SELECT user_id, pageviews FROM users WHERE user_region = 'eu';
""")
    results = run(circuit)
    written = [[(bool(r.value and r.value["undo"]), (r.value or {}).get("user_id"),
                 (r.value or {}).get("pageviews")) for r in result.outputs["eu_users"]]
               for result in results]
    assert written == [
        [(False, 1, 1), (False, 2, 2)],
        [(True, 2, 2)],  # 2 left eu
        [(True, 1, 1)],  # 1 deleted
        [],  # 1 is back, in us
    ]


def test_s19_explain_shows_the_latest_row_per_key() -> None:
    circuit = compiled()
    latest = circuit.view("users.latest")
    assert latest.reads_deletions and latest.key == ("user_id",) and latest.output is None
    assert circuit.view("pageviews_per_region").sources == ("users.latest",)
    text = explain_text(circuit)
    assert "view users.latest <- users (local)" in text
    assert ("primary key:  user_id (NOT ENFORCED: each row is one more version of its key, "
            "each record an upsert of its key, a tombstone deletes its key)") in text


def test_s16_a_temporal_join_reads_the_upsert_tables_versions() -> None:
    circuit = compiled(USERS + """
CREATE TABLE clicks (
  user_id BIGINT, at TIMESTAMP(3),
  WATERMARK FOR at AS at - INTERVAL '0' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'clicks', 'format' = 'json');
CREATE TABLE regions (user_id BIGINT, user_region STRING) WITH (
  'connector' = 'kafka', 'topic' = 'regions', 'format' = 'json');
INSERT INTO regions SELECT c.user_id, u.user_region FROM clicks AS c
JOIN users FOR SYSTEM_TIME AS OF c.at AS u ON c.user_id = u.user_id;
""")
    assert [v.name for v in circuit.views] == ["regions"]
    steps = [[(1, 10, "eu", 0), (2, 10, "us", 0)], [(1, 20, None, 0)], [(3, 40, "us", 0)]]
    clicks = [[{"user_id": 1, "at": 15_000}],
              [{"user_id": 1, "at": 25_000}, {"user_id": 2, "at": 25_000}], []]
    results = evaluate(circuit, [StepInput({
        "users": through_source(circuit, "users", [record(u, "json", at, region, views)
                                                   for u, at, region, views in step]),
        "clicks": clicks[i]}) for i, step in enumerate(steps)])
    found = [[(r.value or {}).get("user_region") for r in result.outputs["regions"]]
             for result in results]
    # A click joins once the users' waterline passes it: at 15 s user 1 is in eu; at 25 s
    # its tombstone (20 s) has ended its version, while user 2's goes on.
    assert found == [[], ["eu"], ["us"]]


def test_s2_a_tidemark_keyed_table_stays_insert_only() -> None:
    """Keyed by its Kafka key in Tidemark's dialect, every row is one more version: the
    count counts them all, and a tombstone reaches no view but a temporal join."""
    circuit = compile_text("keyed.sql", """
CREATE TABLE users (
  user_id BIGINT NOT NULL,
  user_region VARCHAR NOT NULL,
  pageviews BIGINT NOT NULL,
  ts TIMESTAMP NOT NULL METADATA FROM 'timestamp' LATENESS INTERVAL '1' SECOND,
  PRIMARY KEY (user_id) NOT ENFORCED
) WITH ('topic' = 'users', 'format' = 'json', 'key.format' = 'raw', 'key.fields' = 'user_id');
CREATE VIEW per_region WITH ('topic' = 'per_region') AS
SELECT user_region, COUNT(*) AS users, SUM(pageviews) AS pv FROM users GROUP BY user_region;
""")
    table = circuit.table("users")
    assert not table.upserts and not table.changelog and table.deletes_by_tombstone
    assert [v.name for v in circuit.views] == ["per_region"]
    results = run(circuit, "raw")
    assert [upserts(r, "per_region") for r in results] == [
        [("eu", (2, 3)), ("us", (1, 4))],
        [("us", (2, 9))],  # 2's second row is one more row: eu keeps its first
        [],  # the tombstone changes no count
        [("us", (3, 10))],
    ]


@pytest.mark.parametrize(("extra", "message", "fix"), [
    (",\n  'key.fields' = 'user_id'", "unsupported option 'key.fields' of table users: an "
     "upsert-kafka table's key is its PRIMARY KEY", "remove it"),
    (",\n  'sink.parallelism' = '2'", None, None),
    (",\n  'key.fields-prefix' = 'k_'", "unsupported option 'key.fields-prefix' of table "
     "users: it renames the key's fields, but 'value.fields-include' = 'ALL' has them in "
     "the value too", "add 'value.fields-include' = 'EXCEPT_KEY' (Flink requires it with a "
     "prefix)"),
])
def test_l7_upsert_kafka_options_follow_flinks_rules(extra: str, message: str | None,
                                                    fix: str | None) -> None:
    if message is None:
        circuit = compiled(USERS, extra=extra)
        (warning,) = circuit.warnings
        assert warning.message == ("option 'sink.parallelism' of table users changes nothing "
                                   "in Tidemark: table users is read, never written")
        return
    with pytest.raises(ProgramError) as info:
        compiled(USERS, extra=extra)
    (found,) = info.value.diagnostics
    assert (found.message, found.fix) == (message, fix)
    assert found.position.line == 14


def test_l7_an_upsert_kafka_input_without_primary_key_or_key_format_is_refused() -> None:
    no_key = USERS.replace(",\n  PRIMARY KEY (user_id) NOT ENFORCED", "")
    with pytest.raises(ProgramError) as info:
        compiled(no_key)
    (found,) = info.value.diagnostics
    assert (found.position.line, found.position.column) == (8, 17)
    assert found.message == ("upsert-kafka table users has no PRIMARY KEY, which names its "
                             "Kafka key (Flink requires one)")
    assert found.fix == "add PRIMARY KEY (<key columns>) NOT ENFORCED"
    no_format = USERS.replace("  'key.format' = '{key}',\n", "")
    with pytest.raises(ProgramError) as info:
        compiled(no_format)
    (found,) = info.value.diagnostics
    assert found.message == "upsert-kafka table users has no 'key.format'"


def test_l7_schemaless_avro_values_with_every_column_are_refused() -> None:
    avro = USERS.replace("'value.format' = 'json'", "'value.format' = 'avro'")
    with pytest.raises(ProgramError) as info:
        compiled(avro)
    (found,) = info.value.diagnostics
    assert found.message.startswith("unsupported option 'value.format' of table users: an "
                                    "upsert-kafka table's key columns are read from its key")
    apart = compiled(avro, extra=",\n  'value.fields-include' = 'EXCEPT_KEY'")
    table = apart.table("users")
    assert table.changelog and [f["name"] for f in table.avro_schema["fields"]] == [
        "user_region", "pageviews"]


@pytest.mark.parametrize(("query", "message"), [
    ("SELECT a.user_id FROM users AS a JOIN users AS b ON a.user_id = b.user_id "
     "AND b.ts BETWEEN a.ts - INTERVAL '1' MINUTE AND a.ts",
     "joins table users, a changelog table read as its latest row per key"),
    ("SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE users, DESCRIPTOR(ts), "
     "INTERVAL '1' MINUTE)) GROUP BY window_start, window_end",
     "TUMBLE windows of table users, a changelog table read as its latest row per key"),
])
def test_l7_what_reads_no_updating_input_refuses_the_upsert_table(query: str,
                                                                   message: str) -> None:
    """As for a Debezium table: an interval join reads no updating relation, and the
    latest row per key has no time attribute, so no window."""
    with pytest.raises(ProgramError) as info:
        compiled(USERS + """
CREATE TABLE out_ (a BIGINT, PRIMARY KEY (a) NOT ENFORCED) WITH ('connector' = 'upsert-kafka',
  'topic' = 'o', 'key.format' = 'json', 'value.format' = 'json');
INSERT INTO out_ """ + query + ";\n")
    found = info.value.diagnostics[0]
    assert message in found.message
    assert found.position.line > 13
