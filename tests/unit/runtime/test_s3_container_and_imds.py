"""Tidemark's own S3 client on container credentials (EKS Pod Identity, ECS task roles) and on
the instance metadata service (IMDSv2), the sources after a web identity in the AWS SDKs'
chain (app/runtime/store/s3_credentials.py, ADR 0025). Neither service can run here, so the
test starts one that answers as AWS documents it (the Pod Identity agent's and ECS's
``GET`` with an ``Authorization`` header; IMDSv2's token ``PUT``, role listing and role keys,
each refused without the session token) and hands out S3Proxy's key as the temporary one, which
then signs requests to a real S3-compatible server (S3Proxy, which accepts only its own key).
The answers carry no ``Token``: S3Proxy answers 501 NotImplemented to any request with an
``x-amz-security-token``. The suite's conftest disables IMDS for every other test; these point
``AWS_EC2_METADATA_SERVICE_ENDPOINT`` at their own server."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from local_s3proxy import ACCESS_KEY_ID, SECRET_ACCESS_KEY

from app.config import ObjectStore
from app.errors import StateError
from app.runtime.store.s3 import S3Store
from app.runtime.store.s3_credentials import (
    IMDS_TIMEOUT_SECONDS,
    ContainerCredentials,
    CredentialsError,
    InstanceMetadataCredentials,
    _container_url_allowed,
    credentials_from,
)

ROLE = "tidemark-node"
IMDS_TOKEN = "AQAEAtidemark-imds-session"  # noqa: S105 - the test server's own


@dataclass
class _Metadata:
    """What the test's metadata server was asked, and how it answers."""

    #: (method, path, the Authorization or X-aws-ec2-metadata-token header) of each request.
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    lifetime: timedelta = timedelta(hours=6)
    role: str | None = ROLE
    status: int = 200

    def keys(self) -> bytes:
        expires = datetime.now(UTC) + self.lifetime
        return json.dumps({
            "Code": "Success", "LastUpdated": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "Type": "AWS-HMAC", "AccessKeyId": ACCESS_KEY_ID,
            "SecretAccessKey": SECRET_ACCESS_KEY,
            "Expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}).encode()


@pytest.fixture
def metadata() -> Iterator[tuple[_Metadata, str]]:
    """One server for both protocols: ``/v1/credentials`` is the Pod Identity agent's path,
    ``/latest/...`` IMDS's."""
    state = _Metadata()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self) -> None:  # noqa: N802 - http.server's name
            ttl = self.headers.get("x-aws-ec2-metadata-token-ttl-seconds")
            state.requests.append(("PUT", self.path, ttl))
            if self.path != "/latest/api/token" or not ttl or not 1 <= int(ttl) <= 21600:
                self._answer(400, b"")
            else:
                self._answer(200, IMDS_TOKEN.encode())

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.startswith("/latest/"):
                token = self.headers.get("x-aws-ec2-metadata-token")
                state.requests.append(("GET", self.path, token))
                roles = "/latest/meta-data/iam/security-credentials/"
                if token != IMDS_TOKEN:
                    self._answer(401, b"")
                elif self.path == roles:
                    self._answer(200 if state.role else 404, (state.role or "").encode())
                elif state.role and self.path == roles + state.role:
                    self._answer(state.status, state.keys(), "application/json")
                else:
                    self._answer(404, b"")
                return
            authorization = self.headers.get("authorization")
            state.requests.append(("GET", self.path, authorization))
            if not authorization:
                self._answer(401, b'{"message":"no authorization token"}')
            else:
                self._answer(state.status, state.keys(), "application/json")

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def no_keys(object_store: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The bucket's settings without a key and no earlier source of the chain set. Each test
    makes its own store (``store_at`` keeps one per process and settings)."""
    for name in ("TIDEMARK_S3_ACCESS_KEY_ID", "TIDEMARK_S3_SECRET_ACCESS_KEY",
                 "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    return object_store


@pytest.fixture
def imds(no_keys: Any, metadata: tuple[_Metadata, str],
         monkeypatch: pytest.MonkeyPatch) -> _Metadata:
    state, endpoint = metadata
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint)
    return state


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- container credentials ---------------------------------------------------------------


def test_pod_identity_keys_sign_requests_and_are_renewed_with_the_rotated_token(
    no_keys: Any, metadata: tuple[_Metadata, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EKS Pod Identity: the agent's full URI (loopback here, 169.254.170.23 in a pod), the
    Authorization header from the token file, read anew at each fetch; keys within
    RENEW_BEFORE of their end are fetched again."""
    state, endpoint = metadata
    state.lifetime = timedelta(minutes=4)
    token = tmp_path / "eks-pod-identity-token"
    token.write_text("eyJ.first.token\n", encoding="utf-8")
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{endpoint}/v1/credentials")
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(token))
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "ignored-beside-the-file")
    location = no_keys.url("ck", "pod-identity")
    store = S3Store(ObjectStore())
    assert store.create(location, "first")
    token.write_text("eyJ.rotated.token", encoding="utf-8")
    store.write(location, "second")
    assert store.read_text(location) == "second"
    assert state.requests[:2] == [("GET", "/v1/credentials", "eyJ.first.token"),
                                  ("GET", "/v1/credentials", "eyJ.rotated.token")]


def test_keys_far_from_their_end_are_fetched_once(
    no_keys: Any, metadata: tuple[_Metadata, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state, endpoint = metadata
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{endpoint}/v1/credentials")
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "ecs-token")
    location = no_keys.url("ck", "once")
    store = S3Store(ObjectStore())
    store.write(location, "1")
    store.write(location, "2")
    assert store.read_text(location) == "2"
    assert state.requests == [("GET", "/v1/credentials", "ecs-token")]


def test_an_ecs_relative_uri_is_on_the_ecs_agent_and_wins_over_a_full_uri(
    tmp_path: Path,
) -> None:
    """ECS's relative URI is appended to 169.254.170.2 (not contacted here); the SDKs read
    it before the full URI."""
    found = credentials_from(None, None, "us-east-1", {
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/5f3e-task",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://169.254.170.23/v1/credentials",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN": "ecs-token"})
    assert isinstance(found, ContainerCredentials)
    assert found.url == "http://169.254.170.2/v2/credentials/5f3e-task"
    assert (found.token_file, found.token) == (None, "ecs-token")
    pod = credentials_from(None, None, "us-east-1", {
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://169.254.170.23/v1/credentials",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(tmp_path / "t")})
    assert isinstance(pod, ContainerCredentials)
    assert (pod.url, pod.token_file) == ("http://169.254.170.23/v1/credentials", tmp_path / "t")


@pytest.mark.parametrize(("url", "allowed"), [
    ("http://169.254.170.23/v1/credentials", True), ("http://[fd00:ec2::23]/v1/credentials", True),
    ("http://169.254.170.2/v2/credentials/x", True), ("http://localhost:8080/creds", True),
    ("http://127.0.0.2:80/creds", True), ("http://[::1]/creds", True),
    ("https://creds.example.com/v1", True), ("https://10.0.0.5/v1", True),
    ("http://169.254.169.254/latest/meta-data/", False), ("http://creds.example.com/v1", False),
    ("http://localhost.example.com/creds", False), ("http://10.0.0.5/creds", False),
    ("http://[fd00:ec2::24]/creds", False), ("ftp://169.254.170.23/creds", False),
    ("https:///creds", False),
])
def test_which_full_uris_the_sdks_allow(url: str, allowed: bool) -> None:
    assert _container_url_allowed(url) is allowed


@pytest.mark.parametrize("url", [
    "http://192.0.2.10/v1/credentials", "http://creds.example.invalid/v1",
])
def test_a_full_uri_on_a_host_the_sdks_refuse_is_refused_before_any_request(
    no_keys: Any, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    """Plain http only to the container agents and loopback (the authorization token and the
    keys would cross the network in clear to any other host). The hosts are a documentation
    address and a reserved name, so a regression fails here without reaching anything."""
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url)
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "secret-token")
    started = time.monotonic()
    with pytest.raises(StateError, match=(
            r"AWS_CONTAINER_CREDENTIALS_FULL_URI .* is refused: over plain http it must name"
            r" a loopback address.*else use https: check the pod's EKS Pod Identity")):
        S3Store(ObjectStore()).write(no_keys.url("ck", "refused"), "x")
    assert time.monotonic() - started < 0.5


def test_a_refusing_agent_is_a_state_error_naming_it(
    no_keys: Any, metadata: tuple[_Metadata, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, endpoint = metadata
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{endpoint}/v1/credentials")
    with pytest.raises(StateError, match=r"container credentials endpoint .* refused: HTTP 401"
                       r".*no authorization token.*EKS Pod Identity association"):
        S3Store(ObjectStore()).write(no_keys.url("ck", "no-token"), "x")


def test_a_token_with_a_line_break_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\r\nx-evil: 1", encoding="utf-8")
    with pytest.raises(CredentialsError, match="line break"):
        ContainerCredentials("http://127.0.0.1:1/v1", token, None, 0.0).keys()


# -- instance metadata (IMDSv2) ----------------------------------------------------------


def test_imds_token_then_role_then_keys_sign_every_request(imds: _Metadata, no_keys: Any,
                                                           ) -> None:
    location = no_keys.url("ck", "imds")
    store = S3Store(ObjectStore())
    assert store.create(location, "first")
    assert store.read_text(location) == "first"
    roles = "/latest/meta-data/iam/security-credentials/"
    assert imds.requests == [("PUT", "/latest/api/token", "21600"),
                             ("GET", roles, IMDS_TOKEN), ("GET", roles + ROLE, IMDS_TOKEN)]


def test_imds_keys_near_their_end_are_fetched_again(imds: _Metadata, no_keys: Any) -> None:
    imds.lifetime = timedelta(minutes=4)
    location = no_keys.url("ck", "imds-renew")
    store = S3Store(ObjectStore())
    store.write(location, "1")
    store.write(location, "2")
    assert store.read_text(location) == "2"
    assert [r[:2] for r in imds.requests].count(("PUT", "/latest/api/token")) == 3


def test_imds_failing_after_it_gave_keys_is_a_state_error(imds: _Metadata,
                                                          no_keys: Any) -> None:
    """Once IMDS has given keys, a failed renewal is an error, not a fall to unsigned."""
    imds.lifetime = timedelta(minutes=4)
    location = no_keys.url("ck", "imds-fails")
    store = S3Store(ObjectStore())
    store.write(location, "1")
    imds.status = 500
    with pytest.raises(StateError, match=r"instance metadata service at .* answered HTTP 500 "
                       r"for the keys of role tidemark-node: check the instance's role"):
        store.write(location, "2")


def test_imds_disabled_is_not_asked(metadata: tuple[_Metadata, str]) -> None:
    state, endpoint = metadata
    for value in ("true", "TRUE"):
        assert credentials_from(None, None, "us-east-1", {
            "AWS_EC2_METADATA_DISABLED": value,
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": endpoint}) is None
    assert state.requests == []
    enabled = credentials_from(None, None, "us-east-1", {
        "AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": endpoint})
    assert isinstance(enabled, InstanceMetadataCredentials)
    assert enabled.endpoint == endpoint
    assert isinstance(default := credentials_from(None, None, "us-east-1", {}),
                      InstanceMetadataCredentials)
    assert default.endpoint == "http://169.254.169.254"
    ipv6 = credentials_from(None, None, "us-east-1",
                            {"AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE": "IPv6"})
    assert isinstance(ipv6, InstanceMetadataCredentials)
    assert ipv6.endpoint == "http://[fd00:ec2::254]"


def test_no_imds_falls_through_to_unsigned_requests_at_once_and_asks_once(
    no_keys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A closed port (no IMDS): the first request goes unsigned without waiting for a
    timeout, and IMDS is not tried again; S3Proxy, which wants its key, refuses it."""
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    store = S3Store(ObjectStore())
    credentials = store.client.credentials
    assert isinstance(credentials, InstanceMetadataCredentials)
    started = time.monotonic()
    assert credentials.keys() is None
    assert time.monotonic() - started < IMDS_TIMEOUT_SECONDS / 2
    with pytest.raises(StateError, match="answered AccessDenied: the request went unsigned"):
        store.write(no_keys.url("ck", "unsigned"), "x")


def test_an_unroutable_imds_costs_one_timeout_of_a_second(metadata: tuple[_Metadata, str],
                                                          ) -> None:
    """A listener that never answers (a black-holed 169.254.169.254): one timeout, then
    unsigned for good."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        credentials = InstanceMetadataCredentials(f"http://127.0.0.1:{silent.getsockname()[1]}")
        started = time.monotonic()
        assert credentials.keys() is None
        spent = time.monotonic() - started
        assert IMDS_TIMEOUT_SECONDS * 0.9 <= spent < IMDS_TIMEOUT_SECONDS * 2
        started = time.monotonic()
        assert credentials.keys() is None
        assert time.monotonic() - started < 0.1


def test_an_instance_without_a_role_is_unsigned(imds: _Metadata) -> None:
    imds.role = None
    credentials = credentials_from(None, None, "us-east-1")
    assert isinstance(credentials, InstanceMetadataCredentials)
    assert credentials.keys() is None
    assert credentials.keys() is None
    assert [r[:2] for r in imds.requests] == [
        ("PUT", "/latest/api/token"), ("GET", "/latest/meta-data/iam/security-credentials/")]
