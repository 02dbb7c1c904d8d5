"""Tidemark's one settings object (STYLE habit 5).

Precedence, highest first: command-line flags, environment (``TIDEMARK_*``), a YAML config file
(``--config`` or ``TIDEMARK_CONFIG``), defaults. Everything is validated at start so a typo
fails with a clear message before Spark or Kafka is touched. Secrets are ``SecretStr``: they
print as ``**********`` in logs, errors and ``explain``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from app.errors import ConfigError

__all__ = [
    "OWNED_CLIENT_SETTINGS",
    "REGISTRY_SETTINGS",
    "SERIALIZER_SETTINGS",
    "SPARK_LOG_NAME",
    "CheckpointLocation",
    "KafkaSecurity",
    "ObjectStore",
    "Settings",
    "load_settings",
    "masked",
    "parse_duration_ms",
]

#: The Spark log file's name in the checkpoint directory, when ``spark_log_file`` is not set.
SPARK_LOG_NAME = "spark.log"

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h)?\s*$")


def parse_duration_ms(text: str) -> int:
    """``500ms``, ``2s``, ``1m``, ``1h`` or plain seconds, to milliseconds."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"not a duration: {text!r} (use e.g. 500ms, 2s, 1m)")
    amount, unit = int(match.group(1)), match.group(2) or "s"
    return amount * {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}[unit]


#: librdkafka settings Tidemark sets itself on the clients it makes, with the reason: a value
#: for one of them in ``kafka.client`` is refused, since it would be overridden or would break
#: what the reason names.
OWNED_CLIENT_SETTINGS: dict[str, str] = {
    "bootstrap.servers": "it is the setting bootstrap_servers (TIDEMARK_BOOTSTRAP_SERVERS)",
    "transactional.id": "the sink names each writing task's transactions (exactly-once output)",
    "transaction.timeout.ms": "the sink's transactions and step markers depend on it",
    "enable.idempotence": "the sink's producers are idempotent or transactional by exactly_once",
    "acks": "idempotent and transactional producers need acks=all",
    "isolation.level": "each consumer reads committed or uncommitted records by its role",
    "partitioner": (
        "keyed records are placed with murmur2 as the Java client places them (co-partitioning)"
    ),
    "group.id": "Tidemark's consumers use fixed group ids (docs/security.md lists them)",
    "enable.auto.commit": "Spark's checkpoint keeps the offsets; no consumer commits them",
    "enable.auto.offset.store": "Spark's checkpoint keeps the offsets",
    "auto.offset.reset": "the source reads the offset ranges Spark plans",
    "enable.partition.eof": "the source reads the offset ranges Spark plans",
    "enable.sparse.connections": "transactional producers and marker readers connect at once",
    "delivery.report.only.error": "the sink counts failed deliveries only",
    "linger.ms": "the sink's producers are tuned for whole steps (docs/performance.md)",
    "batch.num.messages": "the sink's producers are tuned for whole steps (docs/performance.md)",
    "message.max.bytes": "the sink's producers are tuned for whole steps (docs/performance.md)",
    "fetch.max.bytes": "the source's consumers are tuned for slices (docs/performance.md)",
    "max.partition.fetch.bytes": "the source's consumers are tuned for slices",
    "fetch.wait.max.ms": "the source's consumers are tuned for slices (docs/performance.md)",
    "fetch.queue.backoff.ms": "the source's consumers are tuned for slices (docs/performance.md)",
    "log_level": "Tidemark's clients log librdkafka's errors only",
}

#: The librdkafka settings KafkaSecurity's own fields give (librdkafka name -> field): set
#: them there, where they are checked together, not in ``kafka.client``.
_SECURITY_CLIENT_SETTINGS: dict[str, str] = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "ssl.ca.location": "ssl_ca_location",
    "ssl.certificate.location": "ssl_certificate_location",
    "ssl.key.location": "ssl_key_location",
    "ssl.key.password": "ssl_key_password",
    "sasl.oauthbearer.method": "sasl_oauthbearer_method",
    "sasl.oauthbearer.token.endpoint.url": "sasl_oauthbearer_token_endpoint_url",
    "sasl.oauthbearer.client.id": "sasl_oauthbearer_client_id",
    "sasl.oauthbearer.client.secret": "sasl_oauthbearer_client_secret",
    "sasl.oauthbearer.scope": "sasl_oauthbearer_scope",
    "sasl.oauthbearer.extensions": "sasl_oauthbearer_extensions",
}

#: The output serializers' settings, by the names Confluent's serializers give them: in the
#: ``schema_registry`` settings for every output, or as a view's options for its own.
SERIALIZER_SETTINGS = (
    "auto.register.schemas",
    "use.latest.version",
    "key.subject.name.strategy",
    "value.subject.name.strategy",
)

#: The TLS files of the registry client, by Confluent's names -> the Python client's.
_REGISTRY_TLS = {
    "schema.registry.ssl.ca.location": "ssl.ca.location",
    "schema.registry.ssl.certificate.location": "ssl.certificate.location",
    "schema.registry.ssl.key.location": "ssl.key.location",
    "schema.registry.ssl.key.password": "ssl.key.password",
}

#: Every key the ``schema_registry`` settings take.
REGISTRY_SETTINGS = (
    "schema.registry.url",
    "basic.auth.credentials.source",
    "basic.auth.user.info",
    "bearer.auth.credentials.source",
    "bearer.auth.token",
    "bearer.auth.logical.cluster",
    "bearer.auth.identity.pool.id",
    *_REGISTRY_TLS,
    *SERIALIZER_SETTINGS,
)
_REGISTRY_SECRETS = (
    "basic.auth.user.info", "bearer.auth.token", "schema.registry.ssl.key.password"
)


def _check_registry_value(name: str, text: str) -> None:
    """ValueError when a ``schema_registry`` setting's value is none of its choices."""
    choices = {
        "basic.auth.credentials.source": ("USER_INFO", "URL", "SASL_INHERIT"),
        "bearer.auth.credentials.source": ("STATIC_TOKEN",),
        "auto.register.schemas": ("true", "false"),
        "use.latest.version": ("true", "false"),
    }.get(name)
    if choices is not None and text not in choices:
        raise ValueError(f"schema_registry {name!r} is {text!r}: use one of {', '.join(choices)}")
    if name.endswith(".subject.name.strategy"):
        from app.connectors.registry_subjects import strategy_name

        strategy_name(text)
    if name == "schema.registry.url" and not text.startswith(("http://", "https://")):
        raise ValueError(f"schema_registry {name!r} is not an http:// or https:// URL: {text!r}")


#: A setting whose name holds one of these words is a secret: masked by :func:`masked` and
#: kept as a SecretStr in ``kafka.client``.
_SECRET_WORDS = ("password", "secret", "token")

MASK = "**********"


def _is_secret(key: str) -> bool:
    lowered = key.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def masked(conf: Mapping[str, Any]) -> dict[str, str]:
    """``conf`` as it may be logged: every value whose key names a password, secret or token
    is ``**********``."""
    return {key: MASK if _is_secret(key) else str(value) for key, value in conf.items()}


def _client_value(key: str, value: Any) -> str:
    """A YAML or JSON scalar as librdkafka reads it (``true``/``false`` for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise ValueError(
        f"kafka.client {key!r} must be a string, number or boolean, not {type(value).__name__}"
    )


class KafkaSecurity(BaseSettings):
    """Kafka connection security and further librdkafka settings (``client``), turned into the
    settings of every Kafka client Tidemark makes by ``client_config()``."""

    model_config = SettingsConfigDict(env_prefix="TIDEMARK_KAFKA_", extra="forbid")

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: (
        Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None
    ) = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: SecretStr | None = None
    #: Mounted secrets (a Kubernetes Secret volume): the password is the file's content.
    sasl_password_file: Path | None = None
    ssl_key_password_file: Path | None = None
    #: SASL OAUTHBEARER: librdkafka fetches and refreshes the token from the OIDC token
    #: endpoint itself (client credentials grant).
    sasl_oauthbearer_method: Literal["oidc"] = "oidc"
    sasl_oauthbearer_token_endpoint_url: str | None = None
    sasl_oauthbearer_client_id: str | None = None
    sasl_oauthbearer_client_secret: SecretStr | None = None
    sasl_oauthbearer_client_secret_file: Path | None = None
    sasl_oauthbearer_scope: str | None = None
    sasl_oauthbearer_extensions: str | None = None
    #: Further librdkafka settings for every client (``client.id``, ``compression.type``,
    #: ...); values of secret-named keys are kept as SecretStr.
    client: dict[str, str | SecretStr] = Field(default_factory=dict)

    @field_validator("client", mode="before")
    @classmethod
    def _check_client(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        checked: dict[str, str | SecretStr] = {}
        for key, raw in value.items():
            name = str(key)
            reason = OWNED_CLIENT_SETTINGS.get(name)
            if reason is not None:
                raise ValueError(f"kafka.client {name!r} is set by Tidemark: {reason}")
            field = _SECURITY_CLIENT_SETTINGS.get(name)
            if field is not None:
                raise ValueError(
                    f"kafka.client {name!r}: set it as kafka.{field}"
                    f" (TIDEMARK_KAFKA_{field.upper()}), where it is checked with the"
                    " other security settings"
                )
            if isinstance(raw, SecretStr):
                checked[name] = raw
                continue
            text = _client_value(name, raw)
            checked[name] = SecretStr(text) if _is_secret(name) else text
        return checked

    def _secrets_from_files(self) -> None:
        for name in ("sasl_password", "ssl_key_password", "sasl_oauthbearer_client_secret"):
            path: Path | None = getattr(self, f"{name}_file")
            if path is None or getattr(self, name) is not None:
                continue
            try:
                setattr(self, name, SecretStr(path.read_text().strip()))
            except OSError as exc:
                raise ConfigError(
                    f"TIDEMARK_KAFKA_{name.upper()}_FILE {path}: {exc.strerror}:"
                    " mount the secret there or fix the path"
                ) from exc
            except UnicodeDecodeError as exc:
                raise ConfigError(
                    f"TIDEMARK_KAFKA_{name.upper()}_FILE {path} is not UTF-8 text:"
                    " it must hold the password alone"
                ) from exc

    def client_config(self) -> dict[str, str]:
        self._secrets_from_files()
        conf: dict[str, str] = {
            key: value.get_secret_value() if isinstance(value, SecretStr) else value
            for key, value in self.client.items()
        }
        conf["security.protocol"] = self.security_protocol
        if self.security_protocol.startswith("SASL"):
            if self.sasl_mechanism == "OAUTHBEARER":
                conf.update(self._oauthbearer_config())
            else:
                conf.update(self._password_config())
        optional = {
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
            "ssl.key.password": (
                self.ssl_key_password.get_secret_value() if self.ssl_key_password else None
            ),
        }
        conf.update({k: v for k, v in optional.items() if v})
        return conf

    def _password_config(self) -> dict[str, str]:
        if not (self.sasl_mechanism and self.sasl_username and self.sasl_password):
            raise ConfigError(
                f"security protocol {self.security_protocol} needs"
                " TIDEMARK_KAFKA_SASL_MECHANISM,"
                " TIDEMARK_KAFKA_SASL_USERNAME and TIDEMARK_KAFKA_SASL_PASSWORD"
                " (or TIDEMARK_KAFKA_SASL_PASSWORD_FILE)"
            )
        return {
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password.get_secret_value(),
        }

    def _oauthbearer_config(self) -> dict[str, str]:
        url = self.sasl_oauthbearer_token_endpoint_url
        client_id = self.sasl_oauthbearer_client_id
        secret = self.sasl_oauthbearer_client_secret
        if not (url and client_id and secret):
            missing = [
                f"TIDEMARK_KAFKA_SASL_OAUTHBEARER_{name}"
                for name, value in (
                    ("TOKEN_ENDPOINT_URL", url), ("CLIENT_ID", client_id), ("CLIENT_SECRET", secret)
                )
                if not value
            ]
            raise ConfigError(
                "SASL mechanism OAUTHBEARER (method oidc) needs " + ", ".join(missing)
                + " (the secret may come from TIDEMARK_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE)"
            )
        conf = {
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": self.sasl_oauthbearer_method,
            "sasl.oauthbearer.token.endpoint.url": url,
            "sasl.oauthbearer.client.id": client_id,
            "sasl.oauthbearer.client.secret": secret.get_secret_value(),
        }
        if self.sasl_oauthbearer_scope:
            conf["sasl.oauthbearer.scope"] = self.sasl_oauthbearer_scope
        if self.sasl_oauthbearer_extensions:
            conf["sasl.oauthbearer.extensions"] = self.sasl_oauthbearer_extensions
        return conf


class _YamlFile(PydanticBaseSettingsSource):
    """The config file, lowest precedence above the defaults."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self._data: dict[str, Any] = {}
        if path is not None:
            if not path.is_file():
                raise ConfigError(f"config file {path} does not exist")
            try:
                loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except OSError as exc:
                raise ConfigError(
                    f"config file {path} cannot be read ({exc.strerror or type(exc).__name__}):"
                    " fix its permissions or give another with --config (TIDEMARK_CONFIG)"
                ) from exc
            except UnicodeDecodeError as exc:
                raise ConfigError(f"config file {path} is not UTF-8 text") from exc
            except yaml.YAMLError as exc:
                problem = " ".join(str(exc).split())
                raise ConfigError(
                    f"config file {path} is not valid YAML: {problem}: fix it at that line"
                ) from exc
            if not isinstance(loaded, dict):
                raise ConfigError(f"config file {path} must be a mapping of setting: value")
            self._data = {str(k).replace("-", "_"): v for k, v in loaded.items()}
            self._yield_to_environment(settings_cls)

    def _yield_to_environment(self, settings_cls: type[BaseSettings]) -> None:
        """A nested settings group of the file (``kafka:``) reaches its model as constructor
        arguments, which would beat the environment: drop each of its keys whose variable
        (``TIDEMARK_KAFKA_<KEY>``) is set, so the environment wins there as everywhere."""
        environment = {name.upper() for name in os.environ}
        for name, field in settings_cls.model_fields.items():
            nested, group = field.annotation, self._data.get(name)
            if not (isinstance(nested, type) and issubclass(nested, BaseSettings)):
                continue
            if isinstance(group, dict):
                prefix = str(nested.model_config.get("env_prefix", ""))
                self._data[name] = {
                    key: value for key, value in group.items()
                    if f"{prefix}{key}".upper() not in environment
                }

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


class ObjectStore(BaseSettings):
    """The S3-compatible object store of an ``s3a://bucket/prefix`` checkpoint (ADR 0025):
    Tidemark's own files there (app/runtime/store) and Spark's s3a:// filesystem
    (``fs.s3a.*``, app/runtime/session.py) both use these. Without an access key, Tidemark
    signs with ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN`` from
    the environment, which Spark's default credential chain reads too.

    The driver hands them to Spark's Python workers as environment variables of the same
    names (:meth:`environment`), so a worker reads them with ``ObjectStore()``."""

    model_config = SettingsConfigDict(env_prefix="TIDEMARK_S3_", extra="forbid")

    #: The store's URL, ``http(s)://host:port``; None: AWS S3 of ``region``.
    endpoint: str | None = None
    region: str = "us-east-1"
    #: ``http://endpoint/bucket/key`` rather than ``http://bucket.endpoint/key`` (most
    #: S3-compatible servers want it).
    path_style: bool = False
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    #: Seconds a checkpoint lease lasts without a renewal before another run may take it
    #: over (app/runtime/checkpoint_lease.py); the holder renews it every third of that.
    lease_seconds: float = Field(default=30, gt=0)
    #: The directory of Spark's s3a:// filesystem jars (hadoop-aws at pyspark's Hadoop
    #: version and its AWS SDK bundle), put on the driver's and executors' class path; None:
    #: ``.cache/hadoop-aws/libs`` of the source tree, where ``scripts/fetch-s3proxy.sh``
    #: (``make setup``) puts them.
    jars: Path | None = None

    @field_validator("endpoint")
    @classmethod
    def _check_endpoint(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"not an http:// or https:// URL: {value!r}")
        return value.rstrip("/") if value is not None else None

    def environment(self) -> dict[str, str]:
        """These settings as the environment variables ``ObjectStore()`` reads."""
        values = {
            "endpoint": self.endpoint,
            "region": self.region,
            "path_style": str(self.path_style).lower(),
            "access_key_id": self.access_key_id,
            "secret_access_key": (
                self.secret_access_key.get_secret_value() if self.secret_access_key else None
            ),
            "lease_seconds": repr(self.lease_seconds),
            "jars": str(self.jars) if self.jars is not None else None,
        }
        return {f"TIDEMARK_S3_{k.upper()}": v for k, v in values.items() if v is not None}


def _location(value: Any) -> Any:
    """A checkpoint given as a path (``Path``) is kept as its text, like a URL."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


#: A checkpoint: a local directory, or ``s3a://bucket/prefix`` (ADR 0025).
CheckpointLocation = Annotated[str, BeforeValidator(_location)]


class Settings(BaseSettings):
    """Everything ``tidemark run`` needs; see docs/configuration.md for each setting."""

    model_config = SettingsConfigDict(env_prefix="TIDEMARK_", extra="forbid")

    program: Path | None = None
    bootstrap_servers: str = "127.0.0.1:9092"
    checkpoint: CheckpointLocation = "var/checkpoint"
    spark_master: str = "local[2]"
    metrics_port: int = Field(default=9108, ge=0, le=65535)
    log_format: Literal["json", "console"] | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    #: Spark's own logs (driver JVM log4j2, its stdout/stderr, py4j and pyspark loggers):
    #: ``file`` keeps the console for Tidemark's lines, ``console`` mixes them in.
    spark_log: Literal["file", "console"] = "file"
    spark_log_file: Path | None = None
    trigger_interval: str = "0s"
    max_records_per_step: int = Field(default=200_000, gt=0)
    shuffle_partitions: int = Field(default=4, gt=0)
    wait_for_topics_seconds: float = Field(default=0, ge=0)
    #: The topics Tidemark creates (output and dead-letter; app/connectors/topics.py): their
    #: partitions (None: the input topic's), replication factor (None: the broker's default)
    #: and ``retention.ms`` (None: the broker's default; -1: no time limit). A view's
    #: ``'partitions'``, ``'replicas'`` and ``'retention'`` override them for its topic.
    topic_partitions: int | None = Field(default=None, gt=0)
    topic_replicas: int | None = Field(default=None, gt=0)
    topic_retention_ms: int | None = Field(default=None, ge=-1)
    #: How long a run waits for another run on the same checkpoint to release it (0: refuse
    #: at once, naming the holder); see app/runtime/checkpoint_lock.py.
    checkpoint_lock_wait_seconds: float = Field(default=0, ge=0)
    #: Input offsets the checkpoint still has to read but the topic no longer holds (deleted
    #: by retention or deleteRecords) fail the query (True), or are skipped, logged and counted
    #: in ``tidemark_input_skipped_offsets_total`` (False); Spark's Kafka source option of
    #: the same name.
    fail_on_data_loss: bool = True
    #: ``/healthz`` fails (Kubernetes restarts the pod) when a query's last step finished this
    #: long ago while records wait in its input; an idle query stays alive (0: never fails).
    liveness_stall_seconds: float = Field(default=600, ge=0)
    exactly_once: bool = True
    #: The compacted topic of the step markers of exactly-once output (ADR 0016), created at
    #: start when missing; Tidemark's own: never purged, its partition count never changed.
    marker_topic: str = "tidemark.step-markers"
    kafka: KafkaSecurity = Field(default_factory=KafkaSecurity)
    s3: ObjectStore = Field(default_factory=ObjectStore)
    #: The schema registry of ``'format' = 'avro-confluent'`` tables (a table's
    #: ``'schema-registry.url'`` overrides the URL); the credentials are HTTP basic auth.
    schema_registry_url: str | None = None
    schema_registry_username: str | None = None
    schema_registry_password: SecretStr | None = None
    #: A mounted secret: the registry password is the file's content (the variable wins).
    schema_registry_password_file: Path | None = None
    #: The registry client's and the output serializers' settings under the names
    #: Confluent's clients give them (:data:`REGISTRY_SETTINGS`), beside the ones above;
    #: values of secret-named keys are kept as SecretStr.
    schema_registry: dict[str, str | SecretStr] = Field(default_factory=dict)

    @field_validator("topic_retention_ms")
    @classmethod
    def _check_retention(cls, value: int | None) -> int | None:
        if value == 0:
            raise ValueError("0 would delete every record at once: give milliseconds, or -1")
        return value

    @field_validator("schema_registry", mode="before")
    @classmethod
    def _check_schema_registry(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        checked: dict[str, str | SecretStr] = {}
        for key, raw in value.items():
            name = str(key)
            if name not in REGISTRY_SETTINGS:
                raise ValueError(
                    f"schema_registry {name!r} is no setting Tidemark reads: use one of"
                    f" {', '.join(REGISTRY_SETTINGS)}"
                )
            if isinstance(raw, SecretStr):
                checked[name] = raw
                continue
            text = _client_value(name, raw)
            _check_registry_value(name, text)
            checked[name] = SecretStr(text) if name in _REGISTRY_SECRETS else text
        return checked

    @field_validator("schema_registry_url")
    @classmethod
    def _check_registry_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"not an http:// or https:// URL: {value!r}")
        return value

    @model_validator(mode="after")
    def _registry_password_from_file(self) -> Settings:
        path = self.schema_registry_password_file
        if path is None or self.schema_registry_password is not None:
            return self
        try:
            self.schema_registry_password = SecretStr(path.read_text(encoding="utf-8").strip())
        except OSError as exc:
            raise ValueError(
                f"TIDEMARK_SCHEMA_REGISTRY_PASSWORD_FILE {path}:"
                f" {exc.strerror or type(exc).__name__}: mount the secret there or fix the path"
            ) from exc
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"TIDEMARK_SCHEMA_REGISTRY_PASSWORD_FILE {path} is not UTF-8 text:"
                " it must hold the password alone"
            ) from exc
        return self

    def schema_registry_config(self, url: str | None = None) -> dict[str, str] | None:
        """The schema registry client's settings for ``url`` (None: ``schema_registry_url``
        or ``schema.registry.url``): with the basic-auth or bearer credentials and the TLS
        files when set; None when there is no URL."""
        url = url or self.registry_url
        if url is None:
            return None
        conf = {"url": url}
        user_info = self._registry_user_info(url)
        if user_info is not None:
            conf["basic.auth.user.info"] = user_info
        conf.update(self._registry_bearer())
        for name, client_name in _REGISTRY_TLS.items():
            value = self._registry_setting(name)
            if value is not None:
                conf[client_name] = value
        return conf

    @property
    def registry_url(self) -> str | None:
        """The service's registry URL: ``schema_registry_url`` or ``schema.registry.url``
        (a ConfigError when they name different registries)."""
        mapped = self._registry_setting("schema.registry.url")
        if mapped is not None and self.schema_registry_url not in (None, mapped):
            raise ConfigError(
                f"schema_registry_url {self.schema_registry_url} and schema_registry"
                f" 'schema.registry.url' {mapped} name different registries: set one"
            )
        return self.schema_registry_url or mapped

    def _registry_setting(self, name: str) -> str | None:
        value = self.schema_registry.get(name)
        if isinstance(value, SecretStr):
            return value.get_secret_value()
        return value

    def _registry_user_info(self, url: str) -> str | None:
        """``user:password`` of HTTP basic auth by ``basic.auth.credentials.source``
        (``USER_INFO``, the default; ``URL``: the URL's own; ``SASL_INHERIT``: the Kafka SASL
        user's), or None."""
        source = self._registry_setting("basic.auth.credentials.source") or "USER_INFO"
        flat = self.schema_registry_username is not None or self.schema_registry_password
        if (self.schema_registry_username is None) != (self.schema_registry_password is None):
            raise ConfigError(
                "schema registry credentials need both TIDEMARK_SCHEMA_REGISTRY_USERNAME and"
                " TIDEMARK_SCHEMA_REGISTRY_PASSWORD"
            )
        mapped = self._registry_setting("basic.auth.user.info")
        if flat and mapped is not None:
            raise ConfigError(
                "schema registry credentials are given twice: schema_registry_username and"
                " schema_registry 'basic.auth.user.info': set one"
            )
        if source == "URL":
            if flat or mapped is not None:
                raise ConfigError(
                    "basic.auth.credentials.source URL takes the credentials from the"
                    " registry URL (https://user:password@host): remove the others"
                )
            return None
        if source == "SASL_INHERIT":
            user, password = self.kafka.sasl_username, self.kafka.sasl_password
            if user is None or password is None:
                raise ConfigError(
                    "basic.auth.credentials.source SASL_INHERIT takes the Kafka SASL user:"
                    " set TIDEMARK_KAFKA_SASL_USERNAME and TIDEMARK_KAFKA_SASL_PASSWORD"
                )
            return f"{user}:{password.get_secret_value()}"
        if mapped is not None:
            return mapped
        user, password = self.schema_registry_username, self.schema_registry_password
        if user is not None and password is not None:
            return f"{user}:{password.get_secret_value()}"
        return None

    def _registry_bearer(self) -> dict[str, str]:
        """The static bearer token's client settings (``bearer.auth.credentials.source``
        ``STATIC_TOKEN``), or none."""
        source = self._registry_setting("bearer.auth.credentials.source")
        token = self._registry_setting("bearer.auth.token")
        if source is None and token is None:
            return {}
        if source not in (None, "STATIC_TOKEN") or token is None:
            raise ConfigError(
                "a schema registry bearer token needs schema_registry"
                " 'bearer.auth.credentials.source' = STATIC_TOKEN and 'bearer.auth.token'"
            )
        if self._registry_setting("basic.auth.user.info") or self.schema_registry_username:
            raise ConfigError(
                "the schema registry takes basic auth or a bearer token, not both: remove one"
            )
        conf = {
            "bearer.auth.credentials.source": "STATIC_TOKEN",
            "bearer.auth.token": token,
            # The Python client sends it as target-sr-cluster, which only Confluent Cloud reads.
            "bearer.auth.logical.cluster": self._registry_setting("bearer.auth.logical.cluster")
            or "",
        }
        pool = self._registry_setting("bearer.auth.identity.pool.id")
        if pool is not None:
            conf["bearer.auth.identity.pool.id"] = pool
        return conf

    def registry_serializer(self) -> dict[str, str]:
        """The service's output serializer settings (``auto.register.schemas``,
        ``use.latest.version``, ``key.subject.name.strategy``,
        ``value.subject.name.strategy``) that are set, by name; a view's own options win."""
        return {
            name: value for name in SERIALIZER_SETTINGS
            if (value := self._registry_setting(name)) is not None
        }

    @field_validator("trigger_interval")
    @classmethod
    def _check_interval(cls, value: str) -> str:
        parse_duration_ms(value)
        return value

    @property
    def trigger_interval_ms(self) -> int:
        return parse_duration_ms(self.trigger_interval)

    @property
    def spark_log_path(self) -> Path | None:
        """The file Spark's logs go to (``spark_log_file``, else ``spark.log`` in the
        checkpoint directory, or for an ``s3a://bucket/prefix`` checkpoint in
        ``var/log/s3a/bucket/prefix/``), or None when they go to the console."""
        if self.spark_log == "console":
            return None
        if self.spark_log_file is not None:
            return self.spark_log_file
        if "://" in self.checkpoint:
            # Spark's log is a local file, appended to as it runs: an object store has no
            # append, so a URL checkpoint's log goes to a local directory named after it.
            scheme, _, rest = self.checkpoint.partition("://")
            return Path("var/log") / scheme / rest.strip("/") / SPARK_LOG_NAME
        return Path(self.checkpoint) / SPARK_LOG_NAME

    def kafka_config(self) -> dict[str, str]:
        """librdkafka settings for every client Tidemark creates."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka.client_config()}

    #: The file load_settings() reads, for the duration of one Settings(...) call.
    _config_file: ClassVar[Path | None] = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            file_secret_settings,
            _YamlFile(settings_cls, cls._config_file),
        )


def _setting_name(model: str, loc: tuple[int | str, ...]) -> str:
    """An invalid setting as its environment variable names it: ``kafka.sasl_mechanism`` (or
    ``sasl_mechanism`` of a KafkaSecurity) is TIDEMARK_KAFKA_SASL_MECHANISM."""
    parts = [str(p) for p in loc]
    if model == KafkaSecurity.__name__:
        parts = ["kafka", *parts]
    elif model == ObjectStore.__name__:
        parts = ["s3", *parts]
    if not parts:
        return "settings"
    return f"{'.'.join(parts)} (TIDEMARK_{'_'.join(parts).upper()})"


def load_settings(config_file: Path | None = None, **flags: Any) -> Settings:
    """Settings from flags (None = not given), environment, config file, defaults."""
    path = config_file or (
        Path(os.environ["TIDEMARK_CONFIG"]) if os.environ.get("TIDEMARK_CONFIG") else None
    )
    given = {k: v for k, v in flags.items() if v is not None}
    Settings._config_file = path
    try:
        return Settings(**given)
    except ValidationError as exc:
        problems = "; ".join(
            f"{_setting_name(exc.title, err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(
            f"invalid configuration: {problems} (from a flag, a TIDEMARK_* variable or the"
            " config file; docs/configuration.md lists every setting)"
        ) from exc
    except SettingsError as exc:
        raise ConfigError(
            f"invalid configuration: {' '.join(str(exc).split())}: a TIDEMARK_* variable of a"
            " nested setting must hold JSON"
        ) from exc
    finally:
        Settings._config_file = None
