"""A view's Confluent serializer options (SPEC L6, L7): kept on its output for ``tidemark
run``, checked at compile time with the position and a fix."""

from __future__ import annotations

import pytest

from app.errors import ProgramError
from app.program.compile import compile_program

TABLE = """
CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL)
WITH ('topic' = 't');
"""


def _view(options: str) -> str:
    return TABLE + f"CREATE VIEW v WITH ('topic' = 'o', {options}) AS SELECT ts, k FROM t;\n"


def test_l6_serializer_options_are_kept_by_confluent_names() -> None:
    program = _view(
        "'encoding' = 'avro-confluent', 'auto.register.schemas' = 'FALSE', "
        "'use.latest.version' = 'true', "
        "'value.subject.name.strategy' = "
        "'io.confluent.kafka.serializers.subject.TopicRecordNameStrategy'"
    )
    out = compile_program("p.sql", program).view("v").output
    assert out is not None
    assert dict(out.serializer) == {
        "auto.register.schemas": "false",
        "use.latest.version": "true",
        "value.subject.name.strategy": "TopicRecordNameStrategy",
    }


def test_l6_a_subject_named_outright_is_kept_as_written() -> None:
    """``'key.subject'`` and ``'value.subject'`` name the subjects the schemas are
    registered (or looked up) under, in place of a strategy's (Flink's
    ``'key.avro-confluent.subject'`` and ``'value.avro-confluent.subject'``)."""
    program = _view("'encoding' = 'avro-confluent', 'key' = 'k', "
                    "'key.subject' = 'Orders-Key', 'value.subject' = 'orders-v2'")
    out = compile_program("p.sql", program).view("v").output
    assert out is not None
    assert dict(out.serializer) == {"key.subject": "Orders-Key", "value.subject": "orders-v2"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("'use.latest.version' = 'true'",
         "p.sql:4:36: error: 'use.latest.version' is an option of outputs with 'encoding' or"
         " 'key.format' 'avro-confluent'"),
        ("'encoding' = 'avro-confluent', 'key.subject.name.strategy' = 'Record'",
         "p.sql:4:97: error: no subject name strategy 'Record'"),
        ("'encoding' = 'avro-confluent', 'auto.register.schemas' = 'no'",
         "p.sql:4:93: error: 'auto.register.schemas' is 'no'"),
        ("'encoding' = 'avro-confluent', 'value.subject' = 'orders-v2', "
         "'value.subject.name.strategy' = 'RecordNameStrategy'",
         "p.sql:4:98: error: 'value.subject' names the subject, so "
         "'value.subject.name.strategy' has none to choose"),
    ],
)
def test_l7_a_wrong_serializer_option_is_refused_where_it_is(options: str, message: str) -> None:
    with pytest.raises(ProgramError) as refused:
        compile_program("p.sql", _view(options))
    assert str(refused.value).startswith(message)
