"""The one error hierarchy of Tidemark (STYLE habit 4).

Every error a user can cause is a :class:`TidemarkError` whose text says what is wrong and how
to fix it; the CLI prints it without a stack trace. Compile errors are collected, then raised
together as one :class:`ProgramError` so a user fixes a file in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.circuit.ir import Diagnostic

__all__ = [
    "CheckpointError",
    "ConfigError",
    "KafkaError",
    "ProgramError",
    "SerializationError",
    "SinkError",
    "SparkError",
    "StateError",
    "SubjectSchemaError",
    "TidemarkError",
    "kafka_reason",
]


class TidemarkError(Exception):
    """Base of every error Tidemark raises on purpose."""


class ProgramError(TidemarkError):
    """A program file was rejected (SPEC L7): one or more diagnostics with file:line:column."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = tuple(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))


class SerializationError(TidemarkError):
    """A record could not be decoded or encoded with its Avro schema."""


class KafkaError(TidemarkError):
    """The broker could not be reached, a topic is missing, or a produce/consume failed."""


class SinkError(KafkaError):
    """The sink could not write a step's records: a producer could not be created, or a
    transaction or its step marker failed for good (a fenced writer, a broker that stayed
    away). A :class:`KafkaError`, so whoever handles Kafka failures handles it too."""


class ConfigError(TidemarkError):
    """Invalid configuration (flags, environment, config file)."""


class CheckpointError(TidemarkError):
    """The program cannot continue the checkpoint it was given: the plan recorded with the
    checkpoint differs in a way its state cannot follow (docs/adr/0015), or that record cannot
    be read. The text lists what changed and the options."""


class SubjectSchemaError(TidemarkError):
    """An output's subject in the schema registry gives it no schema to write with: its
    latest version cannot carry the view's rows, or the view's schema is not registered and
    may not be. Raised at start, before anything is written; the text names the view, the
    subject, the schema id and version and what does not fit."""


class SparkError(TidemarkError):
    """Spark could not start, or a streaming query stopped with an error."""


class StateError(TidemarkError):
    """A file of the steps' own state (waterlines, planned slices, the slice cache) could not
    be read or written: a checkpoint or temporary directory that is full, read-only or gone."""


def kafka_reason(exc: BaseException) -> str:
    """A Kafka client error's own text, for a :class:`KafkaError` that translates it (a
    confluent-kafka ``KafkaException`` wraps a ``KafkaError`` whose ``str()`` is the text)."""
    inner = exc.args[0] if exc.args else exc
    text = inner.str() if hasattr(inner, "str") else str(inner)
    return str(text).strip() or type(exc).__name__
