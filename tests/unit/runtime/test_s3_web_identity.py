"""Tidemark's own S3 client on a web identity (EKS IRSA; app/runtime/store/s3_credentials.py):
with no access key anywhere, ``AWS_ROLE_ARN`` and ``AWS_WEB_IDENTITY_TOKEN_FILE`` are
exchanged at STS for temporary keys, which sign the requests to a real S3-compatible server
(S3Proxy, which accepts only its own key). No STS can run here, so the one the test starts
answers ``AssumeRoleWithWebIdentity`` as AWS documents it, with S3Proxy's key as the
temporary one; it checks the form it is sent, as STS does. Its answer has no SessionToken:
S3Proxy answers 501 NotImplemented to any request that carries one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from local_s3proxy import ACCESS_KEY_ID, SECRET_ACCESS_KEY

from app.config import ObjectStore
from app.errors import StateError
from app.runtime.store.s3 import S3Store

ROLE = "arn:aws:iam::123456789012:role/tidemark"

_ANSWER = """<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:streams:tidemark</SubjectFromWebIdentityToken>
    <Credentials>
      <SecretAccessKey>{secret}</SecretAccessKey>
      <Expiration>{expires}</Expiration>
      <AccessKeyId>{key}</AccessKeyId>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>"""

_REFUSAL = """<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error><Type>Sender</Type><Code>AccessDenied</Code>
  <Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message></Error>
</ErrorResponse>"""


class _Sts:
    def __init__(self) -> None:
        self.forms: list[dict[str, str]] = []
        self.lifetime = timedelta(hours=1)
        self.refuse = False


@pytest.fixture
def sts() -> Iterator[tuple[_Sts, str]]:
    state = _Sts()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = int(self.headers["content-length"])
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            state.forms.append(form)
            valid = (form.get("Action") == "AssumeRoleWithWebIdentity"
                     and form.get("Version") == "2011-06-15" and form.get("RoleArn") == ROLE
                     and form.get("RoleSessionName") and form.get("WebIdentityToken"))
            if state.refuse or not valid:
                status, body = 403, _REFUSAL
            else:
                expires = datetime.now(UTC) + state.lifetime
                status, body = 200, _ANSWER.format(
                    secret=SECRET_ACCESS_KEY,
                    key=ACCESS_KEY_ID, expires=expires.strftime("%Y-%m-%dT%H:%M:%SZ"))
            data = body.encode()
            self.send_response(status)
            self.send_header("content-type", "text/xml")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

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
def web_identity(object_store: Any, sts: tuple[_Sts, str], tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> tuple[_Sts, Path]:
    """The bucket's settings without a key, and a pod's IRSA environment. Each test makes its
    own store (``store_at`` keeps one per process and settings)."""
    state, endpoint = sts
    for name in ("TIDEMARK_S3_ACCESS_KEY_ID", "TIDEMARK_S3_SECRET_ACCESS_KEY",
                 "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    token = tmp_path / "token"
    token.write_text("eyJ.first.token\n", encoding="utf-8")
    monkeypatch.setenv("AWS_ROLE_ARN", ROLE)
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", endpoint)
    return state, token


def test_a_web_identity_is_exchanged_once_for_keys_that_sign_every_request(
    object_store: Any, web_identity: tuple[_Sts, Path]
) -> None:
    state, _ = web_identity
    location = object_store.url("ck", "t", "tidemark", "sink-id")
    store = S3Store(ObjectStore())
    assert store.create(location, "first")
    assert store.read_text(location) == "first"
    assert [f["WebIdentityToken"] for f in state.forms] == ["eyJ.first.token"]
    assert state.forms[0]["RoleSessionName"].startswith("tidemark-")


def test_keys_near_their_end_are_exchanged_again_with_the_rotated_token(
    object_store: Any, web_identity: tuple[_Sts, Path]
) -> None:
    state, token = web_identity
    state.lifetime = timedelta(minutes=4)  # within RENEW_BEFORE of their end at once
    location = object_store.url("ck", "w")
    store = S3Store(ObjectStore())
    store.write(location, "1")
    token.write_text("eyJ.rotated.token", encoding="utf-8")
    store.write(location, "2")
    assert store.read_text(location) == "2"
    assert [f["WebIdentityToken"] for f in state.forms][:2] == [
        "eyJ.first.token", "eyJ.rotated.token"]


def test_a_refused_web_identity_is_a_state_error_naming_the_role(
    object_store: Any, web_identity: tuple[_Sts, Path]
) -> None:
    state, _ = web_identity
    state.refuse = True
    location = object_store.url("ck", "x")
    with pytest.raises(StateError, match=r"refused the web identity for role "
                       r"arn:aws:iam::123456789012:role/tidemark: AccessDenied.*AWS_ROLE_ARN"):
        S3Store(ObjectStore()).write(location, "x")


def test_spark_s3a_is_told_of_the_web_identity_its_default_list_lacks(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from app.runtime.session import S3A_WEB_IDENTITY_PROVIDERS, s3a_settings

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "TIDEMARK_S3_ACCESS_KEY_ID",
                 "TIDEMARK_S3_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_WEB_IDENTITY_TOKEN_FILE", raising=False)
    key = "spark.hadoop.fs.s3a.aws.credentials.provider"
    assert key not in _s3a(s3a_settings)
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/tidemark")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tmp_path / "token"))
    providers = _s3a(s3a_settings)[key].split(",")
    # Hadoop's defaults in their order, web identity before the instance's role.
    assert providers[2:] == [
        "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider",
        "software.amazon.awssdk.auth.credentials.WebIdentityTokenFileCredentialsProvider",
        "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider"]
    assert S3A_WEB_IDENTITY_PROVIDERS == ",".join(providers)
    # Keys of the settings go first and need no provider list.
    monkeypatch.setenv("TIDEMARK_S3_ACCESS_KEY_ID", ACCESS_KEY_ID)
    monkeypatch.setenv("TIDEMARK_S3_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
    assert key not in _s3a(s3a_settings)


def _s3a(settings: Any) -> dict[str, str]:
    return dict(settings(ObjectStore()))
