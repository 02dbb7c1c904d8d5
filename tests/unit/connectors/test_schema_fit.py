"""Whether a subject's registered schema can carry a view's rows (``use.latest.version``,
app/connectors/schema_fit.py), and the subject names of Confluent's strategies
(app/connectors/registry_subjects.py). The view's schemas are the compiler's own."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest

from app.connectors.avro_codec import raw_schema
from app.connectors.registry_subjects import strategy_name, subject_name
from app.connectors.schema_fit import fit_problems, writer_schema
from app.program.compile import compile_program

PROGRAM = """
CREATE TABLE t (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    card INT NOT NULL,
    amount DECIMAL(10, 2),
    note VARCHAR
) WITH ('topic' = 't');
CREATE VIEW v WITH ('topic' = 'out', 'key' = 'card') AS SELECT ts, card, amount, note FROM t;
"""


def _ours() -> dict[str, Any]:
    out = compile_program("p.sql", PROGRAM).view("v").output
    assert out is not None
    return out.value_schema


def _record(*fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "record", "name": "Purchase", "namespace": "com.example", "fields": list(fields)
    }


TS = {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}
CARD = {"name": "card", "type": "long"}
AMOUNT = {
    "name": "amount",
    "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}],
    "default": None,
}
NOTE = {"name": "note", "type": ["null", "string"], "default": None}


def test_a_wider_schema_in_another_order_with_defaults_carries_the_rows() -> None:
    registered = _record(
        NOTE, {"name": "channel", "type": "string", "default": "web"}, AMOUNT, CARD, TS
    )
    assert fit_problems(registered, _ours()) == []
    # Encoded in the registered schema, a row reads back with the extra field's default.
    parsed = fastavro.parse_schema(raw_schema(registered))
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, {"ts": 5, "card": 7, "amount": None, "note": "x"})
    back = fastavro.schemaless_reader(io.BytesIO(buffer.getvalue()), parsed, None)
    assert back == {"note": "x", "channel": "web", "amount": None, "card": 7, "ts": 5}


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ((TS, CARD, AMOUNT), "it has no field note for column note"),
        (
            (TS, CARD, AMOUNT, NOTE, {"name": "channel", "type": "string"}),
            "field channel has no default and the view has no column channel",
        ),
        (
            (TS, {"name": "card", "type": "string"}, AMOUNT, NOTE),
            "column card is int, which field card of type string cannot hold",
        ),
        (
            (TS, CARD, AMOUNT, {"name": "note", "type": "string"}),
            "column note may be NULL but the field is string, which takes no null",
        ),
        (
            ({"name": "ts", "type": "long"}, CARD, AMOUNT, NOTE),
            "column ts is timestamp-millis, which field ts of type long cannot hold",
        ),
        (
            ({"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
             CARD, AMOUNT, NOTE),
            "column ts is timestamp-millis, which field ts of type timestamp-micros cannot hold",
        ),
        (
            (TS, CARD, {**AMOUNT, "type": ["null", {"type": "bytes", "logicalType": "decimal",
                                                     "precision": 12, "scale": 3}]}, NOTE),
            "column amount is decimal(10, 2), which field amount of type [null, decimal(12, 3)]"
            " cannot hold",
        ),
        (
            (TS, CARD, {**AMOUNT, "type": ["null", {"type": "bytes", "logicalType": "decimal",
                                                     "precision": 9, "scale": 2}]}, NOTE),
            "column amount is decimal(10, 2), which field amount of type [null, decimal(9, 2)]"
            " cannot hold",
        ),
        (
            (TS, {"name": "card", "type": {"type": "enum", "name": "C", "symbols": ["A"]}},
             AMOUNT, NOTE),
            "column card is int, which field card of type enum cannot hold",
        ),
    ],
)
def test_a_schema_that_cannot_carry_a_column_says_which_and_why(
    fields: tuple[dict[str, Any], ...], problem: str
) -> None:
    assert fit_problems(_record(*fields), _ours()) == [problem]


def test_numbers_widen_as_avro_promotes_them_never_narrow() -> None:
    ours = {"type": "record", "name": "v", "fields": [
        {"name": "i", "type": "int"}, {"name": "l", "type": "long"}, {"name": "f", "type": "float"}
    ]}
    wide = _record({"name": "i", "type": "double"}, {"name": "l", "type": ["null", "double"]},
                   {"name": "f", "type": "double"})
    assert fit_problems(wide, ours) == []
    narrow = _record({"name": "i", "type": "int"}, {"name": "l", "type": "int"},
                     {"name": "f", "type": "long"})
    assert fit_problems(narrow, ours) == [
        "column l is long, which field l of type int cannot hold",
        "column f is float, which field f of type long cannot hold",
    ]


def test_a_bare_key_fits_a_registered_primitive_of_its_type_or_wider() -> None:
    assert fit_problems("long", {"type": "int"}) == []
    assert writer_schema("long") == {"type": "long"}
    assert fit_problems("int", {"type": "long"}) != []
    assert fit_problems(_record(CARD), {"type": "long"}) != []


def test_a_record_is_needed_for_a_views_value() -> None:
    assert fit_problems("string", _ours()) == [
        "it is a string, not a record of the view's columns"
    ]


def test_subject_names_of_each_strategy_for_keys_and_values() -> None:
    value = _record(TS)
    assert subject_name("TopicNameStrategy", "orders", "value", value) == "orders-value"
    assert subject_name("TopicNameStrategy", "orders", "key", {"type": "long"}) == "orders-key"
    assert subject_name("RecordNameStrategy", "orders", "value", value) == "com.example.Purchase"
    assert (
        subject_name("TopicRecordNameStrategy", "orders", "key", value)
        == "orders-com.example.Purchase"
    )
    no_namespace = {"type": "record", "name": "K", "fields": []}
    assert subject_name("RecordNameStrategy", "orders", "key", no_namespace) == "K"
    with pytest.raises(ValueError, match="the key of topic orders is a bare long"):
        subject_name("RecordNameStrategy", "orders", "key", {"type": "long"})


def test_strategies_are_read_by_java_class_name_or_bare_name() -> None:
    java = "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
    assert strategy_name(java) == "TopicRecordNameStrategy"
    assert strategy_name("RecordNameStrategy") == "RecordNameStrategy"
    with pytest.raises(ValueError, match="no subject name strategy 'TopicStrategy'"):
        strategy_name("TopicStrategy")
