"""The keys Tidemark's own S3 client signs with (ADR 0025), found as the AWS SDKs find them:

1. the settings' access key (``TIDEMARK_S3_ACCESS_KEY_ID``, ``TIDEMARK_S3_SECRET_ACCESS_KEY``);
2. ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN``;
3. a web identity: ``AWS_ROLE_ARN`` and ``AWS_WEB_IDENTITY_TOKEN_FILE`` (what EKS sets for a
   service account with an IAM role, IRSA), exchanged at STS for temporary keys
   (``AssumeRoleWithWebIdentity``, a request that takes no signature) and exchanged again
   :data:`RENEW_BEFORE` before they expire, the token file read anew each time (the kubelet
   rotates it). STS is the region's, ``https://sts.<region>.amazonaws.com``, unless
   ``AWS_ENDPOINT_URL_STS`` (the SDKs' variable) names another; the session is
   ``AWS_ROLE_SESSION_NAME``, else ``tidemark-<pid>``;
4. none: requests go unsigned.

Spark's s3a filesystem reads the same variables through the AWS SDK's default chain, so one
service account serves both.
"""

from __future__ import annotations

import http.client
import os
import threading
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol
from urllib.parse import urlencode, urlsplit

__all__ = [
    "RENEW_BEFORE",
    "Credentials",
    "CredentialsError",
    "Keys",
    "StaticCredentials",
    "WebIdentityCredentials",
    "credentials_from",
]

#: Temporary keys are exchanged again this long before they expire.
RENEW_BEFORE = timedelta(minutes=5)
_STS_NS = {"sts": "https://sts.amazonaws.com/doc/2011-06-15/"}
_TIMEOUT_SECONDS = 30.0


class CredentialsError(Exception):
    """No keys could be had (STS refused the web identity or did not answer)."""


@dataclass(frozen=True)
class Keys:
    access_key_id: str
    secret_access_key: str
    session_token: str | None = None
    #: When temporary keys stop being accepted; None: never.
    expires: datetime | None = None


class Credentials(Protocol):
    def keys(self) -> Keys:
        """The keys to sign the next request with."""
        ...


@dataclass(frozen=True)
class StaticCredentials:
    held: Keys

    def keys(self) -> Keys:
        return self.held


class WebIdentityCredentials:
    """Temporary keys of ``role_arn`` for the token in ``token_file``. Thread-safe: one
    exchange at a time, its keys shared until they near their end."""

    def __init__(self, role_arn: str, token_file: Path, session_name: str, sts_endpoint: str,
                 ) -> None:
        self.role_arn = role_arn
        self.token_file = token_file
        self.session_name = session_name
        self.sts_endpoint = sts_endpoint.rstrip("/")
        self._lock = threading.Lock()
        self._held: Keys | None = None

    def keys(self) -> Keys:
        with self._lock:
            held = self._held
            if held is None or (held.expires is not None
                                and held.expires - datetime.now(UTC) < RENEW_BEFORE):
                held = self._held = self._exchange()
            return held

    def _exchange(self) -> Keys:
        try:
            token = self.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CredentialsError(f"cannot read the web identity token {self.token_file} "
                                   f"(AWS_WEB_IDENTITY_TOKEN_FILE): {exc.strerror}") from exc
        form = urlencode({"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15",
                          "RoleArn": self.role_arn, "RoleSessionName": self.session_name,
                          "WebIdentityToken": token}).encode()
        parts = urlsplit(self.sts_endpoint)
        factory = (http.client.HTTPSConnection if parts.scheme == "https"
                   else http.client.HTTPConnection)
        connection = factory(parts.netloc, timeout=_TIMEOUT_SECONDS)
        try:
            connection.request("POST", (parts.path or "") + "/", body=form, headers={
                "content-type": "application/x-www-form-urlencoded; charset=utf-8"})
            answer = connection.getresponse()
            body = answer.read()
        except (OSError, http.client.HTTPException) as exc:
            raise CredentialsError(f"STS at {self.sts_endpoint} did not answer the exchange "
                                   f"of the web identity token for role {self.role_arn}: "
                                   f"{type(exc).__name__}: {exc}") from exc
        finally:
            connection.close()
        try:
            root = ET.fromstring(body)  # noqa: S314 - the configured STS's answer
        except ET.ParseError as exc:
            raise CredentialsError(f"STS at {self.sts_endpoint} answered HTTP {answer.status} "
                                   "with no XML") from exc
        if answer.status != 200:
            code = root.findtext(".//sts:Error/sts:Code", namespaces=_STS_NS) or "?"
            message = root.findtext(".//sts:Error/sts:Message", namespaces=_STS_NS) or ""
            raise CredentialsError(f"STS at {self.sts_endpoint} refused the web identity for "
                                   f"role {self.role_arn}: {code}: {message}")
        found = root.find(".//sts:Credentials", _STS_NS)
        values = {name: (found.findtext(f"sts:{name}", namespaces=_STS_NS)
                         if found is not None else None)
                  for name in ("AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration")}
        if not (values["AccessKeyId"] and values["SecretAccessKey"] and values["Expiration"]):
            raise CredentialsError(f"STS at {self.sts_endpoint} answered without credentials")
        return Keys(values["AccessKeyId"], values["SecretAccessKey"], values["SessionToken"],
                    datetime.fromisoformat(values["Expiration"].replace("Z", "+00:00")))


def credentials_from(access_key_id: str | None, secret_access_key: str | None, region: str,
                     environ: Mapping[str, str] = os.environ) -> Credentials | None:
    """The first source of the module's list that gives keys; None: sign nothing."""
    if access_key_id and secret_access_key:
        return StaticCredentials(Keys(access_key_id, secret_access_key))
    if environ.get("AWS_ACCESS_KEY_ID") and environ.get("AWS_SECRET_ACCESS_KEY"):
        return StaticCredentials(Keys(environ["AWS_ACCESS_KEY_ID"],
                                      environ["AWS_SECRET_ACCESS_KEY"],
                                      environ.get("AWS_SESSION_TOKEN") or None))
    role, token_file = environ.get("AWS_ROLE_ARN"), environ.get("AWS_WEB_IDENTITY_TOKEN_FILE")
    if role and token_file:
        sts_region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or region
        session = environ.get("AWS_ROLE_SESSION_NAME") or f"tidemark-{os.getpid()}"
        return WebIdentityCredentials(
            role, Path(token_file), session,
            environ.get("AWS_ENDPOINT_URL_STS") or f"https://sts.{sts_region}.amazonaws.com")
    return None
