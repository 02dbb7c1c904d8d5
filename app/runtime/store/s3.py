"""A checkpoint's files as objects of an S3-compatible store: ``s3a://bucket/prefix/name`` is
the object ``prefix/name`` of ``bucket``.

A PUT is whole and, once answered, durable; :meth:`S3Store.create` is a PUT with
``If-None-Match: *``, which the store refuses (412) when the key exists, so of two racing
creators exactly one wins. Listing is by delimiter: a "directory" is a common prefix.
:meth:`S3Store.head` and :meth:`S3Store.replace` (``If-Match``) are the lease's
(app/runtime/checkpoint_lease.py).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime

from app.config import ObjectStore
from app.errors import ConfigError, StateError
from app.runtime.store import SCHEME, CheckpointStore
from app.runtime.store.s3_client import S3Client, S3Response, S3Unavailable
from app.runtime.store.s3_credentials import CredentialsError

__all__ = ["ObjectVersion", "S3Store", "s3_store", "split_url"]

_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def split_url(location: str) -> tuple[str, str]:
    """``s3a://bucket/some/key`` -> (``bucket``, ``some/key``)."""
    bucket, _, key = location[len(SCHEME):].partition("/")
    if not bucket:
        raise ConfigError(
            f"{location} names no bucket: give the checkpoint as s3a://BUCKET/PREFIX"
        )
    return bucket, key.strip("/")


@dataclass(frozen=True)
class ObjectVersion:
    """An object as a HEAD saw it: its ETag, when it was last written and the store's clock
    at the answer (both by the store's clock, so their difference needs no synchronized
    clocks)."""

    etag: str
    last_modified: datetime | None
    server_time: datetime | None


class S3Store(CheckpointStore):
    """Objects of one S3-compatible endpoint (:class:`~app.config.ObjectStore`)."""

    def __init__(self, settings: ObjectStore) -> None:
        secret = settings.secret_access_key
        self.settings = settings
        self.client = S3Client(
            settings.endpoint,
            settings.region,
            settings.path_style,
            settings.access_key_id,
            secret.get_secret_value() if secret is not None else None,
        )

    def _call(
        self, action: str, location: str, method: str, key: str | None = None, **kwargs: object
    ) -> S3Response:
        bucket, path = split_url(location)
        try:
            return self.client.request(method, bucket, path if key is None else key, **kwargs)  # type: ignore[arg-type]
        except S3Unavailable as exc:
            raise StateError(
                f"cannot {action} {location}: the object store at {self.client.endpoint}"
                f" does not answer ({exc}): check TIDEMARK_S3_ENDPOINT and that the store runs"
            ) from exc
        except CredentialsError as exc:
            raise StateError(
                f"cannot {action} {location}: {exc}: {exc.hint}, or give an access key"
                " (TIDEMARK_S3_ACCESS_KEY_ID and TIDEMARK_S3_SECRET_ACCESS_KEY)"
            ) from exc

    def _failed(self, action: str, location: str, response: S3Response) -> StateError:
        code = response.error_code()
        hint = {
            "NoSuchBucket": "create the bucket, or give an existing one in --checkpoint",
            "AccessDenied": "give credentials that may read and write the bucket"
            " (TIDEMARK_S3_ACCESS_KEY_ID and TIDEMARK_S3_SECRET_ACCESS_KEY, or AWS_*)",
            "SignatureDoesNotMatch": "check TIDEMARK_S3_SECRET_ACCESS_KEY and"
            " TIDEMARK_S3_REGION",
            "InvalidAccessKeyId": "check TIDEMARK_S3_ACCESS_KEY_ID",
            "NotImplemented": "the store must support conditional writes (If-None-Match,"
            " If-Match) on PUT; see docs/reliability.md",
        }.get(code, "check the store's settings (TIDEMARK_S3_*) and that it runs")
        if code == "AccessDenied" and not response.signed:
            hint = (
                "the request went unsigned, since no credentials were found (an access key,"
                " AWS_* keys, a web identity, container credentials or an instance role, in"
                " the AWS SDKs' order; docs/configuration.md): give one"
            )
        return StateError(f"cannot {action} {location}: the object store answered {code}: {hint}")

    def read_bytes(self, location: str) -> bytes | None:
        response = self._call("read", location, "GET")
        if response.status == 404 and response.error_code() != "NoSuchBucket":
            return None
        if response.status != 200:
            raise self._failed("read", location, response)
        return response.body

    def write(self, location: str, data: str | bytes, durable: bool = True) -> None:
        raw = data if isinstance(data, bytes) else data.encode()
        response = self._call("write", location, "PUT", body=raw)
        if response.status != 200:
            raise self._failed("write", location, response)

    def create(self, location: str, data: str | bytes) -> bool:
        raw = data if isinstance(data, bytes) else data.encode()
        response = self._call(
            "create", location, "PUT", body=raw, headers={"If-None-Match": "*"}
        )
        if response.status == 200:
            return True
        if response.status == 412:
            return False
        if response.status == 409:
            # ConditionalRequestConflict: another conditional write of the key was in flight;
            # it decides, and a reader sees what it wrote.
            return False
        raise self._failed("create", location, response)

    def head(self, location: str) -> ObjectVersion | None:
        """The object's version, None when there is none."""
        response = self._call("read", location, "HEAD")
        if response.status == 404:
            return None
        if response.status != 200 or response.etag is None:
            raise self._failed("read", location, response)
        return ObjectVersion(response.etag, response.last_modified, response.server_time)

    def replace(self, location: str, data: str | bytes, etag: str) -> str | None:
        """Write the object only if it is still the version ``etag``: its new ETag, or None
        when another version (or none) is there now."""
        raw = data if isinstance(data, bytes) else data.encode()
        response = self._call("replace", location, "PUT", body=raw, headers={"If-Match": etag})
        if response.status == 200:
            return response.etag or ""
        if response.status in (404, 409, 412):
            return None
        raise self._failed("replace", location, response)

    def _listing(self, directory: str) -> tuple[list[str], list[str]]:
        """The object names and the sub-prefix names directly under ``directory``."""
        bucket, prefix = split_url(directory)
        prefix = f"{prefix}/" if prefix else ""
        files: list[str] = []
        prefixes: list[str] = []
        token: str | None = None
        while True:
            query = {"list-type": "2", "prefix": prefix, "delimiter": "/"}
            if token:
                query["continuation-token"] = token
            response = self._call("list", directory, "GET", key="", query=query)
            if response.status != 200:
                raise self._failed("list", directory, response)
            root = ET.fromstring(response.body)  # noqa: S314 - the configured store's answer
            for node in root:
                tag = node.tag.removeprefix(_NS)
                if tag == "Contents":
                    key = node.findtext(f"{_NS}Key") or node.findtext("Key") or ""
                    name = key[len(prefix):]
                    if name and "/" not in name:
                        files.append(name)
                elif tag == "CommonPrefixes":
                    key = node.findtext(f"{_NS}Prefix") or node.findtext("Prefix") or ""
                    name = key[len(prefix):].rstrip("/")
                    if name and "/" not in name:
                        prefixes.append(name)
            token = root.findtext(f"{_NS}NextContinuationToken") or root.findtext(
                "NextContinuationToken"
            )
            if not token:
                return files, prefixes

    def names(self, directory: str) -> list[str]:
        files, prefixes = self._listing(directory)
        return sorted(set(files) | set(prefixes))

    def directories(self, directory: str) -> list[str]:
        return sorted(self._listing(directory)[1])

    def delete(self, location: str) -> None:
        response = self._call("remove", location, "DELETE")
        if response.status not in (200, 204, 404):
            raise self._failed("remove", location, response)

    def exists(self, location: str) -> bool:
        return self.head(location) is not None

    def check_writable(self, directory: str) -> None:
        probe = f"{directory.rstrip('/')}/.tidemark-write-check"
        try:
            self.write(probe, b"")
            self.delete(probe)
        except StateError as exc:
            raise ConfigError(
                f"checkpoint {directory} is not writable: {exc}; give a bucket and prefix"
                " these credentials can write with --checkpoint or TIDEMARK_CHECKPOINT"
            ) from exc

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (tests and first setups); one that exists is no error."""
        response = self._call("create", f"{SCHEME}{bucket}", "PUT", key="")
        if response.status not in (200, 409):
            raise self._failed("create bucket", f"{SCHEME}{bucket}", response)


#: The stores of this process, one per distinct settings (a client keeps its connections).
_STORES: dict[tuple[str, str], S3Store] = {}


def s3_store(settings: ObjectStore | None = None) -> S3Store:
    """The store of ``settings`` (None: ``ObjectStore()``, from ``TIDEMARK_S3_*``)."""
    chosen = settings if settings is not None else ObjectStore()
    secret = chosen.secret_access_key
    key = (
        chosen.model_copy(update={"secret_access_key": None}).model_dump_json(),
        secret.get_secret_value() if secret is not None else "",
    )
    store = _STORES.get(key)
    if store is None:
        store = _STORES[key] = S3Store(chosen)
    return store
