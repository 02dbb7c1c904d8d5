"""A minimal S3 client: the six requests a checkpoint needs, signed with AWS Signature V4.

Tidemark needs GET, PUT (plain, ``If-None-Match: *`` and ``If-Match: <etag>``), HEAD,
DELETE, ListObjectsV2 and, for tests, CreateBucket. It speaks them over ``http.client``
with one keep-alive connection per thread, so the driver and every Python worker process
(which have no JVM of their own to borrow Hadoop's S3A client from) use the same code.
boto3 was the other candidate; its botocore caps ``python-dateutil`` below the version the
project pins (ADR 0025).

Credentials: :mod:`app.runtime.store.s3_credentials` (the settings' access key, the
environment's, a web identity exchanged at STS, container credentials such as EKS Pod
Identity's, or the instance metadata service's), the source chosen once per client.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import os
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import quote, urlsplit

from app.runtime.store.s3_credentials import credentials_from

__all__ = ["S3Client", "S3Response", "S3Unavailable"]

#: Attempts of a request that met a connection error or a 5xx answer (S3 asks clients to
#: retry those), with a doubling pause from :data:`_FIRST_PAUSE_SECONDS`.
_ATTEMPTS = 5
_FIRST_PAUSE_SECONDS = 0.1
_TIMEOUT_SECONDS = 30.0
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class S3Unavailable(Exception):
    """The store did not answer (connection refused, timeouts, 5xx after retries)."""


@dataclass(frozen=True)
class S3Response:
    status: int
    headers: dict[str, str]
    body: bytes
    #: False: the request went unsigned (no credential source gave keys).
    signed: bool = True

    @property
    def etag(self) -> str | None:
        return self.headers.get("etag")

    @property
    def server_time(self) -> datetime | None:
        """The store's clock when it answered (``Date``)."""
        return _http_date(self.headers.get("date"))

    @property
    def last_modified(self) -> datetime | None:
        return _http_date(self.headers.get("last-modified"))

    def error_code(self) -> str:
        """The S3 error code of an error answer (``NoSuchBucket``), else its status."""
        try:
            root = ET.fromstring(self.body) if self.body else None  # noqa: S314 - our store's
            code = root.findtext("Code") if root is not None else None
        except ET.ParseError:
            code = None
        return code or f"HTTP {self.status}"


def _http_date(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).astimezone(UTC)
    except (TypeError, ValueError):
        return None


def _sign(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


class S3Client:
    """Requests to one S3-compatible endpoint. Thread-safe: each thread keeps its own
    connection; a forked process opens new ones (they are keyed by process id)."""

    def __init__(
        self,
        endpoint: str | None,
        region: str,
        path_style: bool,
        access_key_id: str | None,
        secret_access_key: str | None,
    ) -> None:
        self.endpoint = endpoint or f"https://s3.{region}.amazonaws.com"
        self.region = region
        self.path_style = path_style
        self.credentials = credentials_from(access_key_id, secret_access_key, region)
        parts = urlsplit(self.endpoint)
        self._secure = parts.scheme == "https"
        self._host = parts.netloc
        self._base_path = parts.path.rstrip("/")
        self._local = threading.local()

    def request(
        self,
        method: str,
        bucket: str,
        key: str = "",
        *,
        query: dict[str, str] | None = None,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
    ) -> S3Response:
        """One request, retried on connection errors and 5xx answers; any other answer
        (404, 409, 412 included) is returned for the caller to judge. Raises
        :class:`~app.runtime.store.s3_credentials.CredentialsError` when no keys can be had."""
        pause = _FIRST_PAUSE_SECONDS
        failure: BaseException | None = None
        for attempt in range(_ATTEMPTS):
            if attempt:
                time.sleep(pause)
                pause *= 2
            try:
                response = self._send(method, bucket, key, query or {}, body, headers or {})
            except (OSError, http.client.HTTPException) as exc:
                self._drop_connection()
                failure = exc
                continue
            if response.status >= 500:
                failure = None
                last = response
                continue
            return response
        if failure is not None:
            raise S3Unavailable(f"{type(failure).__name__}: {failure}") from failure
        raise S3Unavailable(f"{last.error_code()} after {_ATTEMPTS} attempts")

    def _connection(self) -> http.client.HTTPConnection:
        held = getattr(self._local, "connection", None)
        if held is not None and held[0] == os.getpid():
            return held[1]  # type: ignore[no-any-return]
        factory = http.client.HTTPSConnection if self._secure else http.client.HTTPConnection
        host = self._host
        connection = factory(host, timeout=_TIMEOUT_SECONDS)
        self._local.connection = (os.getpid(), connection)
        return connection

    def _drop_connection(self) -> None:
        held = getattr(self._local, "connection", None)
        self._local.connection = None
        if held is not None and held[0] == os.getpid():
            held[1].close()

    def _send(
        self,
        method: str,
        bucket: str,
        key: str,
        query: dict[str, str],
        body: bytes,
        extra: dict[str, str],
    ) -> S3Response:
        if self.path_style:
            host = self._host
            path = f"{self._base_path}/{bucket}" + (f"/{key}" if key else "/")
        else:
            host = f"{bucket}.{self._host}"
            path = f"{self._base_path}/{key}"
        canonical_path = quote(path, safe="/~")
        canonical_query = "&".join(
            f"{quote(k, safe='~')}={quote(v, safe='~')}" for k, v in sorted(query.items())
        )
        payload_hash = hashlib.sha256(body).hexdigest() if body else _EMPTY_SHA256
        now = datetime.now(UTC)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        headers = {
            "host": host,
            "x-amz-date": amz_date,
            "x-amz-content-sha256": payload_hash,
            **{k.lower(): v for k, v in extra.items()},
        }
        keys = self.credentials.keys() if self.credentials is not None else None
        if keys is not None and keys.session_token:
            headers["x-amz-security-token"] = keys.session_token
        if keys is not None:
            signed = sorted(headers)
            canonical = "\n".join(
                [
                    method,
                    canonical_path,
                    canonical_query,
                    "".join(f"{name}:{headers[name].strip()}\n" for name in signed),
                    ";".join(signed),
                    payload_hash,
                ]
            )
            scope = f"{amz_date[:8]}/{self.region}/s3/aws4_request"
            digest = hashlib.sha256(canonical.encode()).hexdigest()
            to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, digest])
            key_bytes = _sign(("AWS4" + keys.secret_access_key).encode(), amz_date[:8])
            for part in (self.region, "s3", "aws4_request"):
                key_bytes = _sign(key_bytes, part)
            signature = hmac.new(key_bytes, to_sign.encode(), hashlib.sha256).hexdigest()
            headers["authorization"] = (
                f"AWS4-HMAC-SHA256 Credential={keys.access_key_id}/{scope},"
                f" SignedHeaders={';'.join(signed)}, Signature={signature}"
            )
        target = canonical_path + (f"?{canonical_query}" if canonical_query else "")
        connection = self._connection()
        if not self.path_style:
            headers["host"] = host
        connection.request(method, target, body=body or None, headers=headers)
        answer = connection.getresponse()
        data = answer.read()
        if answer.getheader("connection", "").lower() == "close":
            self._drop_connection()
        return S3Response(
            answer.status, {k.lower(): v for k, v in answer.getheaders()}, data, keys is not None
        )
