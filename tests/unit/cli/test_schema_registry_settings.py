"""How ``tidemark run`` completes the schema registries of ``avro-confluent`` tables and views
(:func:`app.cli.with_schema_registry`): the table's or view's own URL over the setting, the
setting's credentials with either, and an error naming what has no registry at all."""

from __future__ import annotations

import os

import pytest
from pydantic import SecretStr

from app.cli import with_schema_registry
from app.config import Settings
from app.errors import ConfigError
from app.program.compile import compile_program

TABLES = """
CREATE TABLE a (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL)
WITH ('topic' = 'a', 'format' = 'avro-confluent', 'schema-registry.url' = 'http://127.0.0.1:1');
CREATE TABLE b (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL)
WITH ('topic' = 'b', 'format' = 'avro-confluent');
CREATE TABLE c (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE, k BIGINT NOT NULL)
WITH ('topic' = 'c');
"""


@pytest.fixture(autouse=True)
def _no_tidemark_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("TIDEMARK_"):
            monkeypatch.delenv(name)


def test_the_tables_own_url_wins_and_the_credentials_apply_to_every_registry() -> None:
    settings = Settings(
        schema_registry_url="http://127.0.0.1:2",
        schema_registry_username="tidemark",
        schema_registry_password=SecretStr("pw"),
    )
    circuit = with_schema_registry(compile_program("p.sql", TABLES), settings)
    auth = {"basic.auth.user.info": "tidemark:pw"}
    assert circuit.table("a").schema_registry == {"url": "http://127.0.0.1:1", **auth}
    assert circuit.table("b").schema_registry == {"url": "http://127.0.0.1:2", **auth}
    assert circuit.table("c").schema_registry is None
    assert "pw" not in repr(settings)


def test_a_table_without_any_registry_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="table b has 'format' = 'avro-confluent' but no sch"):
        with_schema_registry(compile_program("p.sql", TABLES), Settings())


def test_a_view_without_any_registry_is_an_error_naming_it() -> None:
    program = TABLES.replace(", 'format' = 'avro-confluent');", ");") + """
CREATE VIEW v WITH ('topic' = 'out', 'encoding' = 'avro-confluent') AS SELECT ts, k FROM c;
"""
    with pytest.raises(ConfigError, match="view v has 'encoding' = 'avro-confluent' but no"):
        with_schema_registry(compile_program("p.sql", program), Settings())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("'topic' = 'x', 'schema-registry.url' = 'http://127.0.0.1:1'", "is an option of 'for"),
        ("'topic' = 'x', 'format' = 'avro-confluent', 'schema-registry.url' = 'reg:1'", "not an"),
    ],
)
def test_the_table_option_is_checked_at_compile_time(options: str, message: str) -> None:
    from app.errors import ProgramError

    program = f"CREATE TABLE t (k BIGINT NOT NULL) WITH ({options});"
    with pytest.raises(ProgramError, match=message):
        compile_program("p.sql", program)
