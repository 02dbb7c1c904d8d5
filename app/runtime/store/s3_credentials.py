"""The keys Tidemark's own S3 client signs with (ADR 0025), found as the AWS SDKs' default
chain finds them, in its order:

1. the settings' access key (``TIDEMARK_S3_ACCESS_KEY_ID``, ``TIDEMARK_S3_SECRET_ACCESS_KEY``);
2. ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN``;
3. a web identity: ``AWS_ROLE_ARN`` and ``AWS_WEB_IDENTITY_TOKEN_FILE`` (what EKS sets for a
   service account with an IAM role, IRSA), exchanged at STS for temporary keys
   (``AssumeRoleWithWebIdentity``, a request that takes no signature), the token file read
   anew each time (the kubelet rotates it). STS is the region's,
   ``https://sts.<region>.amazonaws.com``, unless ``AWS_ENDPOINT_URL_STS`` (the SDKs'
   variable) names another; the session is ``AWS_ROLE_SESSION_NAME``, else ``tidemark-<pid>``;
4. container credentials (EKS Pod Identity, ECS task roles): a GET of
   ``AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`` on ``http://169.254.170.2`` (ECS) or else of
   ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` (EKS Pod Identity sets
   ``http://169.254.170.23/v1/credentials``), with the ``Authorization`` header read from
   ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`` anew each time (EKS rotates it), else
   ``AWS_CONTAINER_AUTHORIZATION_TOKEN``. A full URI over plain http must name a host the
   SDKs allow (a loopback address, ``localhost``, ``169.254.170.2``, ``169.254.170.23``,
   ``fd00:ec2::23``); https may name any;
5. the instance metadata service (an EC2 instance's role), IMDSv2 only: a session token
   (``PUT /latest/api/token``), the role's name, then its keys, each request with a
   :data:`IMDS_TIMEOUT_SECONDS` timeout and no retry, as the SDKs do. ``http://169.254.169.254``
   unless ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` names another (or
   ``AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE=IPv6``: ``http://[fd00:ec2::254]``);
   ``AWS_EC2_METADATA_DISABLED=true`` skips it. Tried at the first request, not at start: a
   service that does not answer the token (off EC2, IMDS turned off) or an instance without
   a role means
6. none: requests go unsigned (an S3-compatible store that takes anonymous requests). That
   is remembered for the life of the client, so the cost off EC2 is one connection attempt
   (refused at once where nothing listens, at most one timeout where the address is
   unroutable).

The temporary keys of 3-5 are fetched again :data:`RENEW_BEFORE` before they expire, by one
mechanism (:class:`RefreshingCredentials`); a source that is configured but fails (STS refuses,
the Pod Identity agent does not answer, IMDS gave keys once and then fails) is a
:class:`CredentialsError`, never a silent fall to unsigned requests.

Spark's s3a filesystem reads the same variables through the AWS SDK's default chain, so one
service account (or instance role) serves both.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol
from urllib.parse import urlencode, urlsplit

__all__ = [
    "IMDS_TIMEOUT_SECONDS",
    "RENEW_BEFORE",
    "ContainerCredentials",
    "Credentials",
    "CredentialsError",
    "InstanceMetadataCredentials",
    "Keys",
    "RefreshingCredentials",
    "StaticCredentials",
    "WebIdentityCredentials",
    "credentials_from",
]

#: Temporary keys are fetched again this long before they expire.
RENEW_BEFORE = timedelta(minutes=5)
_STS_NS = {"sts": "https://sts.amazonaws.com/doc/2011-06-15/"}
_TIMEOUT_SECONDS = 30.0
#: The container endpoint's timeout and attempts (botocore's ``ContainerMetadataFetcher``).
_CONTAINER_TIMEOUT_SECONDS = 2.0
_CONTAINER_ATTEMPTS = 3
_CONTAINER_PAUSE_SECONDS = 1.0
_ECS_HOST = "http://169.254.170.2"
#: Hosts a full container URI may name over plain http (the SDKs' list; loopback too).
_CONTAINER_HOSTS = frozenset({"localhost", "169.254.170.2", "169.254.170.23", "fd00:ec2::23"})
#: Each IMDS request's timeout; one attempt (the SDKs' defaults), so a pod or machine without
#: IMDS falls through to unsigned requests within about a second.
IMDS_TIMEOUT_SECONDS = 1.0
_IMDS_ENDPOINT = "http://169.254.169.254"
_IMDS_ENDPOINT_IPV6 = "http://[fd00:ec2::254]"
_IMDS_TOKEN_TTL_SECONDS = 21600
_IMDS_ROLES = "/latest/meta-data/iam/security-credentials/"


class CredentialsError(Exception):
    """No keys could be had from the source the environment configures (STS refused the web
    identity, the container endpoint or the instance metadata service failed). ``hint`` says
    what to check."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Keys:
    access_key_id: str
    secret_access_key: str
    session_token: str | None = None
    #: When temporary keys stop being accepted; None: never.
    expires: datetime | None = None


class Credentials(Protocol):
    def keys(self) -> Keys | None:
        """The keys to sign the next request with; None: send it unsigned."""
        ...


@dataclass(frozen=True)
class StaticCredentials:
    held: Keys

    def keys(self) -> Keys:
        return self.held


class RefreshingCredentials:
    """Temporary keys from :meth:`_fetch`, shared until they are within :data:`RENEW_BEFORE`
    of their end, then fetched again. Thread-safe: one fetch at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: Keys | None = None
        self._none = False

    def keys(self) -> Keys | None:
        with self._lock:
            if self._none:
                return None
            held = self._held
            if held is None or (held.expires is not None
                                and held.expires - datetime.now(UTC) < RENEW_BEFORE):
                fetched = self._fetch(first=held is None)
                if fetched is None:
                    self._none = True
                    return None
                held = self._held = fetched
            return held

    def _fetch(self, first: bool) -> Keys | None:
        """New keys, or a :class:`CredentialsError`; None (only when ``first``): the source
        has no keys to give, requests go unsigned from now on."""
        raise NotImplementedError


def _http(method: str, url: str, headers: Mapping[str, str], timeout: float,
          body: bytes | None = None) -> tuple[int, bytes]:
    """One request; raises ``OSError`` or ``http.client.HTTPException`` when no answer."""
    parts = urlsplit(url)
    factory = (http.client.HTTPSConnection if parts.scheme == "https"
               else http.client.HTTPConnection)
    connection = factory(parts.netloc, timeout=timeout)
    try:
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request(method, target, body=body, headers=dict(headers))
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def _json_keys(body: bytes, source: str, hint: str) -> Keys:
    """The keys of a container endpoint's or IMDS's JSON answer (the same four fields)."""
    try:
        found = json.loads(body)
    except ValueError as exc:
        raise CredentialsError(f"{source} answered with no JSON", hint) from exc
    if not isinstance(found, dict):
        raise CredentialsError(f"{source} answered with no JSON object", hint)
    if found.get("Code", "Success") != "Success":
        raise CredentialsError(f"{source} answered {found.get('Code')}: "
                               f"{found.get('Message', '')}", hint)
    key, secret, expiration = (found.get(name) for name in
                               ("AccessKeyId", "SecretAccessKey", "Expiration"))
    if not (isinstance(key, str) and key and isinstance(secret, str) and secret
            and isinstance(expiration, str)):
        raise CredentialsError(f"{source} answered without credentials", hint)
    try:
        expires = datetime.fromisoformat(expiration.replace("Z", "+00:00"))
    except ValueError as exc:
        raise CredentialsError(f"{source} answered an Expiration that is no time: "
                               f"{expiration!r}", hint) from exc
    token = found.get("Token")
    return Keys(key, secret, token if isinstance(token, str) and token else None,
                expires if expires.tzinfo is not None else expires.replace(tzinfo=UTC))


class WebIdentityCredentials(RefreshingCredentials):
    """Temporary keys of ``role_arn`` for the token in ``token_file``."""

    HINT = "check AWS_ROLE_ARN and the role's trust of the service account"

    def __init__(self, role_arn: str, token_file: Path, session_name: str, sts_endpoint: str,
                 ) -> None:
        super().__init__()
        self.role_arn = role_arn
        self.token_file = token_file
        self.session_name = session_name
        self.sts_endpoint = sts_endpoint.rstrip("/")

    def _fetch(self, first: bool) -> Keys:
        try:
            token = self.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CredentialsError(f"cannot read the web identity token {self.token_file} "
                                   f"(AWS_WEB_IDENTITY_TOKEN_FILE): {exc.strerror}",
                                   self.HINT) from exc
        form = urlencode({"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15",
                          "RoleArn": self.role_arn, "RoleSessionName": self.session_name,
                          "WebIdentityToken": token}).encode()
        try:
            status, body = _http("POST", self.sts_endpoint + "/", {
                "content-type": "application/x-www-form-urlencoded; charset=utf-8"},
                _TIMEOUT_SECONDS, form)
        except (OSError, http.client.HTTPException) as exc:
            raise CredentialsError(f"STS at {self.sts_endpoint} did not answer the exchange "
                                   f"of the web identity token for role {self.role_arn}: "
                                   f"{type(exc).__name__}: {exc}", self.HINT) from exc
        try:
            root = ET.fromstring(body)  # noqa: S314 - the configured STS's answer
        except ET.ParseError as exc:
            raise CredentialsError(f"STS at {self.sts_endpoint} answered HTTP {status} "
                                   "with no XML", self.HINT) from exc
        if status != 200:
            code = root.findtext(".//sts:Error/sts:Code", namespaces=_STS_NS) or "?"
            message = root.findtext(".//sts:Error/sts:Message", namespaces=_STS_NS) or ""
            raise CredentialsError(f"STS at {self.sts_endpoint} refused the web identity for "
                                   f"role {self.role_arn}: {code}: {message}", self.HINT)
        found = root.find(".//sts:Credentials", _STS_NS)
        values = {name: (found.findtext(f"sts:{name}", namespaces=_STS_NS)
                         if found is not None else None)
                  for name in ("AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration")}
        if not (values["AccessKeyId"] and values["SecretAccessKey"] and values["Expiration"]):
            raise CredentialsError(f"STS at {self.sts_endpoint} answered without credentials",
                                   self.HINT)
        return Keys(values["AccessKeyId"], values["SecretAccessKey"], values["SessionToken"],
                    datetime.fromisoformat(values["Expiration"].replace("Z", "+00:00")))


def _container_url_allowed(url: str) -> bool:
    """Whether the SDKs would fetch credentials from ``url`` as a full container URI: any
    https URL, plain http only to the container agents' addresses and loopback (anything else
    could hand the authorization token, and the keys, to another host)."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return bool(parts.hostname)
    if parts.scheme != "http" or not parts.hostname:
        return False
    if parts.hostname in _CONTAINER_HOSTS:
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


class ContainerCredentials(RefreshingCredentials):
    """Temporary keys from a container credentials endpoint (EKS Pod Identity's agent, ECS's)."""

    HINT = ("check the pod's EKS Pod Identity association (or the ECS task role) and that the "
            "agent at AWS_CONTAINER_CREDENTIALS_FULL_URI (RELATIVE_URI on ECS) answers")

    def __init__(self, url: str, token_file: Path | None, token: str | None,
                 pause_seconds: float = _CONTAINER_PAUSE_SECONDS) -> None:
        super().__init__()
        self.url = url
        self.token_file = token_file
        self.token = token
        self.pause_seconds = pause_seconds

    def _authorization(self) -> str | None:
        token: str | None
        if self.token_file is not None:
            try:
                token = self.token_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise CredentialsError(
                    f"cannot read the container authorization token {self.token_file} "
                    f"(AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE): {exc.strerror}",
                    self.HINT) from exc
        else:
            token = self.token
        if token is not None and ("\r" in token or "\n" in token):
            raise CredentialsError("the container authorization token holds a line break, "
                                   "which no HTTP header may", self.HINT)
        return token

    def _fetch(self, first: bool) -> Keys:
        if not _container_url_allowed(self.url):
            raise CredentialsError(
                f"AWS_CONTAINER_CREDENTIALS_FULL_URI {self.url} is refused: over plain http "
                "it must name a loopback address, localhost, 169.254.170.2, 169.254.170.23 "
                "or fd00:ec2::23 (as the AWS SDKs require), else use https", self.HINT)
        token = self._authorization()
        headers = {"accept": "application/json"}
        if token:
            headers["authorization"] = token
        source = f"the container credentials endpoint {self.url}"
        failure = "did not answer"
        for attempt in range(_CONTAINER_ATTEMPTS):
            if attempt:
                time.sleep(self.pause_seconds)
            try:
                status, body = _http("GET", self.url, headers, _CONTAINER_TIMEOUT_SECONDS)
            except (OSError, http.client.HTTPException) as exc:
                failure = f"did not answer: {type(exc).__name__}: {exc}"
                continue
            if status >= 500:
                failure = f"answered HTTP {status}"
                continue
            if status != 200:
                raise CredentialsError(f"{source} refused: HTTP {status}: "
                                       f"{body[:200].decode('utf-8', 'replace')}", self.HINT)
            return _json_keys(body, source, self.HINT)
        raise CredentialsError(f"{source} {failure} after {_CONTAINER_ATTEMPTS} attempts",
                               self.HINT)


class InstanceMetadataCredentials(RefreshingCredentials):
    """Temporary keys of the instance's role from IMDSv2 at ``endpoint``."""

    HINT = ("check the instance's role (its instance profile) and that the instance metadata "
            "service answers (AWS_EC2_METADATA_DISABLED=true skips it)")

    def __init__(self, endpoint: str) -> None:
        super().__init__()
        self.endpoint = endpoint.rstrip("/")

    def _fetch(self, first: bool) -> Keys | None:
        source = f"the instance metadata service at {self.endpoint}"
        try:
            status, body = _http(
                "PUT", self.endpoint + "/latest/api/token",
                {"x-aws-ec2-metadata-token-ttl-seconds": str(_IMDS_TOKEN_TTL_SECONDS)},
                IMDS_TIMEOUT_SECONDS)
        except (OSError, http.client.HTTPException) as exc:
            if first:
                return None  # no IMDS here: unsigned, as the module says
            raise CredentialsError(f"{source} did not answer: {type(exc).__name__}: {exc}",
                                   self.HINT) from exc
        if status != 200:
            if first:
                return None  # IMDS turned off (403) or without IMDSv2
            raise CredentialsError(f"{source} refused a session token: HTTP {status}",
                                   self.HINT)
        session = {"x-aws-ec2-metadata-token": body.decode("ascii", "replace").strip()}
        try:
            status, body = _http("GET", self.endpoint + _IMDS_ROLES, session,
                                 IMDS_TIMEOUT_SECONDS)
            if status == 404 and first:
                return None  # an instance without a role
            if status != 200:
                raise CredentialsError(f"{source} answered HTTP {status} for the role",
                                       self.HINT)
            role = body.decode("utf-8", "replace").strip().splitlines()
            if not role:
                raise CredentialsError(f"{source} names no role", self.HINT)
            status, body = _http("GET", self.endpoint + _IMDS_ROLES + role[0], session,
                                 IMDS_TIMEOUT_SECONDS)
        except (OSError, http.client.HTTPException) as exc:
            raise CredentialsError(f"{source} did not answer: {type(exc).__name__}: {exc}",
                                   self.HINT) from exc
        if status != 200:
            raise CredentialsError(f"{source} answered HTTP {status} for the keys of role "
                                   f"{role[0]}", self.HINT)
        return _json_keys(body, f"{source} (role {role[0]})", self.HINT)


def credentials_from(access_key_id: str | None, secret_access_key: str | None, region: str,
                     environ: Mapping[str, str] = os.environ) -> Credentials | None:
    """The first source of the module's list the environment configures; None: sign
    nothing."""
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
    relative = environ.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
    full = environ.get("AWS_CONTAINER_CREDENTIALS_FULL_URI")
    if relative or full:
        authorization_file = environ.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
        return ContainerCredentials(
            _ECS_HOST + relative if relative else str(full),
            Path(authorization_file) if authorization_file else None,
            environ.get("AWS_CONTAINER_AUTHORIZATION_TOKEN") or None)
    if environ.get("AWS_EC2_METADATA_DISABLED", "").strip().lower() == "true":
        return None
    ipv6 = environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "").strip().lower() == "ipv6"
    return InstanceMetadataCredentials(environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT")
                                       or (_IMDS_ENDPOINT_IPV6 if ipv6 else _IMDS_ENDPOINT))
