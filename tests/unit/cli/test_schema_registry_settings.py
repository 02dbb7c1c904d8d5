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


def test_confluent_named_settings_give_the_client_its_url_credentials_and_ca() -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    settings = Settings(
        schema_registry={
            "schema.registry.url": "https://registry:8081",
            "basic.auth.credentials.source": "USER_INFO",
            "basic.auth.user.info": "tidemark:pw",
            "schema.registry.ssl.ca.location": "/etc/tidemark/ca.pem",
        }
    )
    conf = settings.schema_registry_config()
    assert conf == {
        "url": "https://registry:8081",
        "basic.auth.user.info": "tidemark:pw",
        "ssl.ca.location": "/etc/tidemark/ca.pem",
    }
    assert "pw" not in repr(settings)
    del conf["ssl.ca.location"]  # read when the client is made: below
    SchemaRegistryClient(conf).close()  # the client takes every other key (no I/O)


def test_a_missing_ca_file_is_refused_at_start_naming_it() -> None:
    settings = Settings(schema_registry={
        "schema.registry.url": "https://127.0.0.1:1",
        "schema.registry.ssl.ca.location": "/nonexistent/ca.pem",
    })
    with pytest.raises(ConfigError, match="table a: the schema registry client of http://127"
                       r".0.0.1:1 cannot be made: FileNotFoundError.*/nonexistent/ca.pem"):
        with_schema_registry(compile_program("p.sql", TABLES), settings)


def test_a_bearer_token_and_inherited_sasl_credentials() -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    bearer = Settings(
        schema_registry_url="http://r:8081",
        schema_registry={"bearer.auth.credentials.source": "STATIC_TOKEN",
                         "bearer.auth.token": "t0ken"},
    )
    conf = bearer.schema_registry_config()
    assert conf is not None and conf["bearer.auth.token"] == "t0ken"
    assert "t0ken" not in repr(bearer)
    SchemaRegistryClient(conf).close()
    inherit = Settings(
        schema_registry_url="http://r:8081",
        schema_registry={"basic.auth.credentials.source": "SASL_INHERIT"},
        kafka={"sasl_username": "svc", "sasl_password": "kpw"},
    )
    assert inherit.schema_registry_config() == {
        "url": "http://r:8081", "basic.auth.user.info": "svc:kpw"
    }
    in_url = Settings(schema_registry={"schema.registry.url": "http://u:p@r:8081",
                                       "basic.auth.credentials.source": "URL"})
    assert in_url.schema_registry_config() == {"url": "http://u:p@r:8081"}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"schema_registry": {"schema.registry.urls": "http://r"}},
         "schema_registry 'schema.registry.urls' is no setting Tidemark reads"),
        ({"schema_registry": {"value.subject.name.strategy": "Topic"}},
         "no subject name strategy 'Topic'"),
        ({"schema_registry": {"use.latest.version": "yes"}},
         "'use.latest.version' is 'yes': use one of true, false"),
    ],
)
def test_a_wrong_confluent_named_setting_is_refused_naming_it(
    given: dict[str, object], message: str
) -> None:
    from app.config import load_settings

    with pytest.raises(ConfigError, match=message):
        load_settings(**given)


def test_credentials_given_twice_or_registries_that_differ_are_refused() -> None:
    twice = Settings(
        schema_registry_url="http://r:8081",
        schema_registry_username="a",
        schema_registry_password=SecretStr("b"),
        schema_registry={"basic.auth.user.info": "c:d"},
    )
    with pytest.raises(ConfigError, match="credentials are given twice"):
        twice.schema_registry_config()
    differ = Settings(schema_registry_url="http://a:1",
                      schema_registry={"schema.registry.url": "http://b:1"})
    with pytest.raises(ConfigError, match="name different registries"):
        differ.schema_registry_config()


def test_serializer_settings_from_yaml_booleans_and_java_class_names() -> None:
    settings = Settings(schema_registry={
        "auto.register.schemas": False,
        "use.latest.version": True,
        "value.subject.name.strategy":
            "io.confluent.kafka.serializers.subject.RecordNameStrategy",
    })
    assert settings.registry_serializer() == {
        "auto.register.schemas": "false",
        "use.latest.version": "true",
        "value.subject.name.strategy": "io.confluent.kafka.serializers.subject.RecordNameStrategy",
    }
