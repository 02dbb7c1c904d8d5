"""The Kafka client settings: ``kafka.client`` passes librdkafka settings through to every
client, settings Tidemark owns are refused by name, secrets are masked, read from files, and
OAUTHBEARER (OIDC) maps to librdkafka's settings. Each resulting configuration is given to a
real librdkafka client, which refuses unknown or inconsistent settings when it is made."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from app.config import OWNED_CLIENT_SETTINGS, KafkaSecurity, Settings, load_settings, masked
from app.connectors.kafka_consumers import SOURCE_CONSUMER
from app.connectors.sink.producers import PRODUCER_DEFAULTS, PRODUCER_SETTINGS
from app.errors import ConfigError

#: Nothing listens here: clients are made and closed without reaching a broker.
NOWHERE = "127.0.0.1:1"


@pytest.fixture(autouse=True)
def _no_tidemark_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("TIDEMARK_"):
            monkeypatch.delenv(name)


def _made_by_librdkafka(conf: dict[str, Any]) -> None:
    """A producer and a consumer accept ``conf`` (librdkafka checks names and values)."""
    producer = Producer({**conf, "log_level": 0})
    producer.flush(0)
    consumer = Consumer({**conf, "group.id": "tidemark-test", "log_level": 0})
    consumer.close()


def test_client_settings_pass_through_from_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "tidemark.yaml"
    config.write_text(
        "kafka:\n"
        "  client:\n"
        "    client.id: tidemark-purchases\n"
        "    compression.type: zstd\n"
        "    socket.keepalive.enable: true\n"
        "    reconnect.backoff.max.ms: 5000\n"
    )
    conf = load_settings(config, bootstrap_servers=NOWHERE).kafka_config()
    assert conf == {
        "bootstrap.servers": NOWHERE,
        "client.id": "tidemark-purchases",
        "compression.type": "zstd",
        "socket.keepalive.enable": "true",
        "reconnect.backoff.max.ms": "5000",
        "security.protocol": "PLAINTEXT",
    }
    _made_by_librdkafka(conf)


def test_client_settings_pass_through_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIDEMARK_KAFKA_CLIENT", json.dumps({"client.id": "from-env"}))
    monkeypatch.setenv("TIDEMARK_KAFKA_SECURITY_PROTOCOL", "SSL")
    conf = load_settings(None).kafka_config()
    assert conf["client.id"] == "from-env"
    assert conf["security.protocol"] == "SSL"


def test_an_unknown_client_setting_is_refused_by_librdkafka() -> None:
    """Pass-through reaches librdkafka itself: a misspelt name fails where a client is made."""
    conf = Settings(
        bootstrap_servers=NOWHERE, kafka=KafkaSecurity(client={"compresion.type": "zstd"})
    ).kafka_config()
    with pytest.raises(KafkaException, match="compresion.type"):
        Producer(conf)


@pytest.mark.parametrize("key", sorted(OWNED_CLIENT_SETTINGS))
def test_settings_tidemark_owns_are_refused_naming_the_key(tmp_path: Path, key: str) -> None:
    config = tmp_path / "tidemark.yaml"
    config.write_text(f"kafka:\n  client:\n    {key}: x\n")
    with pytest.raises(ConfigError) as error:
        load_settings(config)
    message = str(error.value)
    assert f"kafka.client '{key}' is set by Tidemark" in message
    assert OWNED_CLIENT_SETTINGS[key] in message


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("security.protocol", "TIDEMARK_KAFKA_SECURITY_PROTOCOL"),
        ("sasl.password", "TIDEMARK_KAFKA_SASL_PASSWORD"),
        ("sasl.oauthbearer.client.secret", "TIDEMARK_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET"),
        ("ssl.ca.location", "TIDEMARK_KAFKA_SSL_CA_LOCATION"),
    ],
)
def test_security_settings_are_refused_in_favour_of_their_own_setting(
    key: str, field: str
) -> None:
    with pytest.raises(ConfigError, match=f"'{key}': set it as .*{field}"):
        load_settings(None, kafka={"client": {key: "x"}})


def test_every_setting_the_clients_impose_is_owned() -> None:
    """A client setting the sink or source sets over the user's would silently win: each is
    refused instead (this fails when one is added there and not to OWNED_CLIENT_SETTINGS)."""
    imposed = {*PRODUCER_DEFAULTS, *PRODUCER_SETTINGS, *SOURCE_CONSUMER}
    assert imposed - set(OWNED_CLIENT_SETTINGS) == set()


def test_a_nested_client_value_is_refused() -> None:
    with pytest.raises(ConfigError, match="'client.id' must be a string, number or boolean"):
        load_settings(None, kafka={"client": {"client.id": ["a", "b"]}})


class SecretText:
    """Passwords that appear nowhere else."""

    PASSWORD = "pw-7f3a9c"
    KEYSTORE = "ks-41d0e2"


def test_secrets_are_masked_in_logs_and_in_the_settings() -> None:
    security = KafkaSecurity(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="tidemark",
        sasl_password=SecretText.PASSWORD,
        client={"ssl.keystore.password": SecretText.KEYSTORE, "client.id": "tm"},
    )
    settings = Settings(bootstrap_servers=NOWHERE, kafka=security)
    conf = settings.kafka_config()
    assert conf["sasl.password"] == SecretText.PASSWORD
    assert conf["ssl.keystore.password"] == SecretText.KEYSTORE
    shown = masked({**conf, "sasl.oauthbearer.client.secret": "s", "api.token": "t"})
    assert shown["sasl.password"] == "**********"
    assert shown["ssl.keystore.password"] == "**********"
    assert shown["sasl.oauthbearer.client.secret"] == "**********"
    assert shown["api.token"] == "**********"
    assert shown["client.id"] == "tm"
    assert shown["sasl.username"] == "tidemark"
    for text in (json.dumps(shown), repr(settings), str(settings)):
        assert SecretText.PASSWORD not in text
        assert SecretText.KEYSTORE not in text


def test_passwords_are_read_from_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sasl = tmp_path / "sasl-password"
    sasl.write_text("from-the-file\n")
    monkeypatch.setenv("TIDEMARK_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("TIDEMARK_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("TIDEMARK_KAFKA_SASL_USERNAME", "tidemark")
    monkeypatch.setenv("TIDEMARK_KAFKA_SASL_PASSWORD_FILE", str(sasl))
    conf = load_settings(None).kafka_config()
    assert conf["sasl.password"] == "from-the-file"
    monkeypatch.setenv("TIDEMARK_KAFKA_SASL_PASSWORD", "from-the-variable")
    assert load_settings(None).kafka_config()["sasl.password"] == "from-the-variable"


def test_a_missing_password_file_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDEMARK_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("TIDEMARK_KAFKA_SASL_MECHANISM", "OAUTHBEARER")
    monkeypatch.setenv(
        "TIDEMARK_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE", str(tmp_path / "absent")
    )
    with pytest.raises(ConfigError, match="TIDEMARK_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE"):
        load_settings(None).kafka_config()


def test_oauthbearer_oidc_maps_to_librdkafka(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "client-secret"
    secret.write_text("oidc-secret\n")
    monkeypatch.setenv("TIDEMARK_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("TIDEMARK_KAFKA_SASL_MECHANISM", "OAUTHBEARER")
    monkeypatch.setenv(
        "TIDEMARK_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL", "https://127.0.0.1:1/token"
    )
    monkeypatch.setenv("TIDEMARK_KAFKA_SASL_OAUTHBEARER_CLIENT_ID", "tidemark")
    monkeypatch.setenv("TIDEMARK_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE", str(secret))
    monkeypatch.setenv("TIDEMARK_KAFKA_SASL_OAUTHBEARER_SCOPE", "kafka")
    monkeypatch.setenv("TIDEMARK_KAFKA_SASL_OAUTHBEARER_EXTENSIONS", "logicalCluster=lc-1")
    conf = load_settings(None, bootstrap_servers=NOWHERE).kafka_config()
    assert conf == {
        "bootstrap.servers": NOWHERE,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": "https://127.0.0.1:1/token",
        "sasl.oauthbearer.client.id": "tidemark",
        "sasl.oauthbearer.client.secret": "oidc-secret",
        "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.extensions": "logicalCluster=lc-1",
    }
    _made_by_librdkafka(conf)


def test_oauthbearer_without_its_endpoint_or_client_names_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIDEMARK_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("TIDEMARK_KAFKA_SASL_MECHANISM", "OAUTHBEARER")
    monkeypatch.setenv("TIDEMARK_KAFKA_SASL_OAUTHBEARER_CLIENT_ID", "tidemark")
    with pytest.raises(ConfigError) as error:
        load_settings(None).kafka_config()
    message = str(error.value)
    assert "TIDEMARK_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL" in message
    assert "TIDEMARK_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET" in message
    assert "_CLIENT_ID" not in message


def test_the_environment_beats_the_config_files_kafka_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Precedence holds inside ``kafka:`` too: a TIDEMARK_KAFKA_* variable wins over the same
    key of the file, the file's other keys still apply."""
    config = tmp_path / "tidemark.yaml"
    config.write_text(
        "kafka:\n"
        "  security_protocol: SSL\n"
        "  ssl_ca_location: /from/file/ca.crt\n"
        "  client:\n"
        "    client.id: from-file\n"
    )
    assert load_settings(config).kafka.security_protocol == "SSL"
    monkeypatch.setenv("TIDEMARK_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("TIDEMARK_KAFKA_CLIENT", '{"client.id": "from-env"}')
    kafka = load_settings(config).kafka
    assert kafka.security_protocol == "SASL_PLAINTEXT"
    assert kafka.client == {"client.id": "from-env"}
    assert kafka.ssl_ca_location == "/from/file/ca.crt"


class _TokenEndpoint(BaseHTTPRequestHandler):
    """An OIDC token endpoint: records each request, answers with an unsigned JWT."""

    requests: ClassVar[list[tuple[str, str, str]]] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server interface
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        self.requests.append((self.path, self.headers.get("Authorization", ""), body))

        def part(claims: dict[str, Any]) -> str:
            return base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()

        now = int(time.time())
        claims = {"sub": "tidemark", "iat": now, "exp": now + 3600}
        token = f"{part({'alg': 'none'})}.{part(claims)}."
        answer = json.dumps({"access_token": token, "token_type": "bearer", "expires_in": 3600})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the interface's name
        pass


def test_librdkafka_fetches_the_oidc_token_with_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mapped settings drive librdkafka's own token fetch: a client made from them asks
    the token endpoint with the client credentials grant, the client id and the secret read
    from its file (HTTP basic auth) and the scope."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        secret = tmp_path / "client-secret"
        secret.write_text("oidc-secret\n")
        monkeypatch.setenv("TIDEMARK_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
        monkeypatch.setenv("TIDEMARK_KAFKA_SASL_MECHANISM", "OAUTHBEARER")
        monkeypatch.setenv("TIDEMARK_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL",
                           f"http://127.0.0.1:{server.server_port}/oauth2/token")
        monkeypatch.setenv("TIDEMARK_KAFKA_SASL_OAUTHBEARER_CLIENT_ID", "tidemark")
        monkeypatch.setenv("TIDEMARK_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE", str(secret))
        monkeypatch.setenv("TIDEMARK_KAFKA_SASL_OAUTHBEARER_SCOPE", "kafka")
        conf = load_settings(None, bootstrap_servers=NOWHERE).kafka_config()
        _TokenEndpoint.requests.clear()
        producer = Producer({**conf, "log_level": 0})
        deadline = time.monotonic() + 20
        while not _TokenEndpoint.requests and time.monotonic() < deadline:
            producer.poll(0.1)
        producer.flush(0)
    finally:
        server.shutdown()
        server.server_close()
    path, authorization, body = _TokenEndpoint.requests[0]
    assert path == "/oauth2/token"
    assert authorization == "Basic " + base64.b64encode(b"tidemark:oidc-secret").decode()
    assert parse_qs(body) == {"grant_type": ["client_credentials"], "scope": ["kafka"]}
