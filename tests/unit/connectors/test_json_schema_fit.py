"""Whether a subject's registered JSON Schema validates every object a ``json-registry`` view
writes (``use.latest.version``, app/connectors/confluent_json.py ``json_fit_problems``): named
schemas a governed registry holds, the problems of those that do not fit, and generated views
and schemas against the validator confluent-kafka's JSONSerializer builds. The view's schemas
are the compiler's own; what is written for each column is ``json_schema``'s."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema.validators import validator_for

from app.circuit.ir import Column, SqlType
from app.connectors.confluent_json import json_fit_problems
from app.connectors.json_encoder import JsonEncoder, json_schema
from app.program.avro_schema import record_schema
from app.program.compile import compile_program

PROGRAM = """
CREATE TABLE t (
    ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    card INT NOT NULL,
    amount DECIMAL(10, 2),
    rate DOUBLE NOT NULL,
    note VARCHAR
) WITH ('topic' = 't');
CREATE VIEW v WITH ('topic' = 'out', 'encoding' = 'json-registry') AS
SELECT ts, card, amount, rate, note FROM t;
"""


def _ours() -> dict[str, Any]:
    out = compile_program("p.sql", PROGRAM).view("v").output
    assert out is not None
    return out.value_schema


def _governed(**changes: Any) -> dict[str, Any]:
    """A schema as a platform team registers it for the view: Java's generator's style
    (``oneOf`` null for optional fields, no extra properties), the columns in another order,
    a property ``channel`` no column fills, the money a shared definition."""
    properties: dict[str, Any] = {
        "note": {"oneOf": [{"type": "null", "title": "Not included"}, {"type": "string"}]},
        "channel": {"type": "string", "maxLength": 8},
        "amount": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Money"}]},
        "rate": {"type": ["number", "string"]},
        "card": {"type": "number", "description": "card number"},
        "ts": {"type": "string", "format": "date-time"},
    }
    properties.update(changes)
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "com.example.Purchase",
        "type": "object",
        "additionalProperties": False,
        "properties": {k: v for k, v in properties.items() if v is not None},
        "required": ["ts", "card"],
        "definitions": {"Money": {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?$"}},
    }


def test_the_views_own_schema_and_a_governed_one_carry_the_rows() -> None:
    ours = _ours()
    assert json_fit_problems(json_schema(ours), ours) == []
    assert json_fit_problems(_governed(), ours) == []
    assert json_fit_problems(True, ours) == [
        "it has no property ts for column ts", "it has no property card for column card",
        "it has no property amount for column amount", "it has no property rate for column rate",
        "it has no property note for column note",
    ]


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"note": None}, "it has no property note for column note"),
        (
            {"card": {"type": "string"}},
            'column card (int) is written as integer, and property card takes no integer (its'
            ' type is "string")',
        ),
        (
            {"note": {"type": "string"}},
            'column note (string) is written as string or null, and property note takes no null'
            ' (its type is "string")',
        ),
        (
            {"amount": {"type": ["number", "null"]}},
            'column amount (decimal(10, 2)) is written as string or null, and property amount'
            ' takes no string (its type is ["number", "null"])',
        ),
        (
            {"rate": {"type": "number"}},
            'column rate (double) is written as number or string, and property rate takes no'
            ' string (its type is "number"); a NaN or an infinity is written as the string'
            ' "NaN", "Infinity" or "-Infinity": add "string" to its type',
        ),
        (
            {"ts": {"type": "string", "format": "date"}},
            'column ts (timestamp-millis) is written as string, and property ts limits its'
            ' strings (format "date")',
        ),
        (
            {"card": {"type": "integer", "maximum": 9999}},
            'column card (int) is written as integer, and property card limits its integers'
            " (maximum 9999)",
        ),
        (
            {"note": {"type": ["string", "null"], "enum": ["a", "b", None]}},
            "column note (string) is written as string or null, and property note takes only"
            " the values of its enum",
        ),
        (
            {"card": {"oneOf": [{"type": "integer"}, {"type": "number"}]}},
            "column card (int) is written as integer, and property card has no branch of its"
            " oneOf that alone takes every integer written",
        ),
        (
            {"card": {"anyOf": [{"type": "string"}, {"type": "boolean"}]}},
            "column card (int) is written as integer, and property card has no branch of its"
            " anyOf that takes every integer written",
        ),
        (
            {"card": {"$ref": "https://example.com/card.json"}},
            "column card (int) is written as integer, and property card refers to"
            " https://example.com/card.json, which is not followed (only #/... within the"
            " schema)",
        ),
        (
            {"card": {"$ref": "#/definitions/Card"}},
            "column card (int) is written as integer, and property card refers to"
            " #/definitions/Card, which the schema does not hold",
        ),
        (
            {"note": {"type": ["string", "null"], "not": {"type": "string", "maxLength": 0}}},
            "column note (string) is written as string or null, and property note may refuse a"
            " string by its not",
        ),
    ],
)
def test_each_column_that_does_not_fit_is_named(changes: dict[str, Any], problem: str) -> None:
    assert json_fit_problems(_governed(**changes), _ours()) == [problem]


def test_the_objects_own_rules_are_named() -> None:
    ours = _ours()
    required = _governed()
    required["required"] = ["ts", "card", "channel"]
    assert json_fit_problems(required, ours) == [
        "property channel is required and the view has no column channel"
    ]
    few = {**_governed(), "maxProperties": 3}
    assert json_fit_problems(few, ours) == [
        "it takes objects of 0 to 3 properties, and the view writes 5"
    ]
    keyed = {**_governed(), "propertyNames": {"maxLength": 4}}
    assert json_fit_problems(keyed, ours) == ["it has propertyNames at its top, which is not"
                                              " followed"]
    patterned = {**_governed(), "patternProperties": {"^n": {"type": "string"}}}
    assert json_fit_problems(patterned, ours) == [
        'column note (string) is written as string or null, and property note takes no null'
        ' (its type is "string")'
    ]
    assert json_fit_problems({"type": "array"}, ours) == [
        'it takes no object (its type is "array")'
    ]
    assert json_fit_problems({"type": "object", "minProperties": -1}, ours) == [
        "it is no valid JSON Schema: -1 is less than the minimum of 0"
    ]
    governed = _governed()
    definitions = {"P": governed, **governed.pop("definitions")}
    referred = {"$ref": "#/definitions/P", "definitions": definitions}
    assert json_fit_problems(referred, ours) == []
    # A $ref names a schema of the whole document, not of the one it is in.
    nested = {"$ref": "#/definitions/P", "definitions": {"P": _governed()}}
    assert json_fit_problems(nested, ours) == [
        "column amount (decimal(10, 2)) is written as string or null, and property amount has"
        " no branch of its oneOf that alone takes every string written"
    ]


_KINDS = ("BOOLEAN", "INT", "BIGINT", "REAL", "DOUBLE", "VARCHAR", "TIMESTAMP", "DATE",
          "DECIMAL", "VARBINARY")
_CHANGES = ("same", "same", "number", "untyped", "no-null", "one-of-null", "narrow", "limit",
            "format", "ref", "drop")


def _type(kind: str, nullable: bool) -> SqlType:
    if kind == "DECIMAL":
        return SqlType("DECIMAL", nullable=nullable, precision=10, scale=2)
    return SqlType(kind, nullable=nullable)


def _value(kind: str) -> st.SearchStrategy[Any]:
    return {
        "BOOLEAN": st.booleans(),
        "INT": st.integers(-(2**31), 2**31 - 1),
        "BIGINT": st.integers(-(2**63), 2**63 - 1),
        "REAL": st.floats(width=32),
        "DOUBLE": st.floats() | st.sampled_from([math.nan, math.inf, -math.inf]),
        "VARCHAR": st.text(max_size=8),
        "TIMESTAMP": st.integers(0, 4_000_000_000_000),
        "DATE": st.integers(0, 50_000),
        "DECIMAL": st.decimals(-(10**8) + 1, 10**8 - 1, places=2, allow_nan=False,
                               allow_infinity=False),
        "VARBINARY": st.binary(max_size=6),
    }[kind]


def _changed(form: dict[str, Any], change: str, definitions: dict[str, Any]) -> Any:
    """A registered property made from the column's own (``json_schema``'s) by one change."""
    types = [form["type"]] if isinstance(form["type"], str) else list(form["type"])
    solid = [t for t in types if t != "null"]
    if change == "number":
        return {**form, "type": ["number" if t == "integer" else t for t in types]}
    if change == "untyped":
        return {}
    if change == "no-null":
        return {**form, "type": solid if len(solid) > 1 else solid[0]}
    if change == "one-of-null":
        return {"oneOf": [{"type": "null"}, {**form, "type": solid}]}
    if change == "narrow":
        return {**form, "type": "integer" if "number" in solid else "number"}
    if change == "limit":
        return {**form, "maxLength": 3, "maximum": 10}
    if change == "format":
        return {**form, "format": "date"}
    if change == "ref":
        definitions[f"d{len(definitions)}"] = form
        return {"$ref": f"#/definitions/d{len(definitions) - 1}"}
    return copy.deepcopy(form)


@st.composite
def _case(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    kinds = draw(st.lists(st.sampled_from(_KINDS), min_size=1, max_size=5))
    columns = [Column(f"c{i}", _type(k, draw(st.booleans()))) for i, k in enumerate(kinds)]
    ours = record_schema("v", columns)
    own = json_schema(ours)
    definitions: dict[str, Any] = {}
    properties = {}
    for name, form in own["properties"].items():
        change = draw(st.sampled_from(_CHANGES))
        if change != "drop":
            properties[name] = _changed(form, change, definitions)
    properties["extra"] = {"type": "string"}
    required = [n for n in own["required"] if draw(st.booleans())]
    if draw(st.booleans()):
        required.append("extra")
    registered = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": draw(st.booleans()),
        "definitions": definitions,
    }
    rows = draw(st.lists(
        st.fixed_dictionaries({
            c.name: (st.none() | _value(c.type.name)) if c.type.nullable else _value(c.type.name)
            for c in columns
        }),
        min_size=1, max_size=4,
    ))
    return ours, registered, rows


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_case())
def test_a_schema_without_problems_validates_every_object_written(
    case: tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]],
) -> None:
    ours, registered, rows = case
    problems = json_fit_problems(registered, ours)
    # The validator JSONSerializer builds for a writer schema (no format assertions).
    validator = validator_for(registered)(registered)
    encoder = JsonEncoder(ours)
    for row in rows:
        document = encoder.document(row)
        errors = [e.message for e in validator.iter_errors(document)]
        assert problems or not errors, f"no problem named, yet {document} is refused: {errors}"

