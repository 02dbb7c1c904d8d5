"""The values of a table's metadata columns, read from each Kafka record (not its value).

The language side (keys, allowed types, NULL rules) is app/circuit/metadata.py. Here the
source reads them: :meth:`RecordMetadata.row` for one record (the gate's per-record path) and
:meth:`RecordMetadata.columns` for a chunk of records at once (the columnar path), which give
the same values; a VARCHAR key or header that is not UTF-8 text is no value at all, and the
gate makes its record ``invalid`` with :meth:`RecordMetadata.row`'s message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from app.circuit.metadata import HEADER_PREFIX

if TYPE_CHECKING:
    from app.connectors.avro_columns import FieldColumn
    from app.connectors.record_key import KeyDecoder

__all__ = ["MetadataError", "RecordMeta", "RecordMetadata", "record_meta"]

Headers = Sequence[tuple[str, bytes | None]] | None


@dataclass(frozen=True)
class RecordMeta:
    """What a Kafka record carries besides its value and headers. ``timestamp_ms`` is None
    when the record has none (Kafka's TIMESTAMP_NOT_AVAILABLE)."""

    key: bytes | None
    timestamp_ms: int | None
    partition: int
    offset: int


def record_meta(message: Any) -> RecordMeta:
    """The :class:`RecordMeta` of a confluent-kafka message."""
    kind, ms = message.timestamp()
    return RecordMeta(message.key(), ms if kind else None, message.partition(), message.offset())


class MetadataError(ValueError):
    """A metadata value its column cannot hold (a VARCHAR key or header not UTF-8)."""


def _header(headers: Headers, name: str) -> bytes | None:
    """The value of the last header called ``name`` (Kafka's ``lastHeader``); None if none."""
    found = None
    for key, value in headers or ():
        if key == name:
            found = value
    return found


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8")


def _texts(raw: Sequence[bytes | None]) -> tuple[Any, npt.NDArray[np.bool_]]:
    """The values as an Arrow string array, NULL where not UTF-8 text, and where that is."""
    import pyarrow as pa

    texts: list[str | None] = []
    unreadable = np.zeros(len(raw), np.bool_)
    for i, item in enumerate(raw):
        try:
            texts.append(_text(item))
        except UnicodeDecodeError:
            texts.append(None)
            unreadable[i] = True
    return pa.array(texts, pa.string()), unreadable


class RecordMetadata:
    """Reads the metadata columns of one table: (name, kind, key) with kinds as in
    ``SourceColumn`` (``timestamp``, ``int32``, ``int64``, ``binary`` or ``string``). With a
    ``key`` decoder (a table's ``'key.format'``, :mod:`app.connectors.record_key`), the
    ``key`` columns are the decoded key's fields of their names, and every record's key is
    decoded, also when no column takes its values (Flink's ``'value.fields-include' =
    'ALL'``): a key that does not decode is then a dead letter all the same."""

    def __init__(
        self, columns: Sequence[tuple[str, str, str]], key: KeyDecoder | None = None
    ) -> None:
        self.specs = tuple(columns)
        self.key = key

    def __bool__(self) -> bool:
        return bool(self.specs) or self.key is not None

    def missing(self, name: str) -> str | None:
        """What a record lacks when metadata column ``name`` is NULL (for the message);
        None when ``name`` is a value column."""
        key = next((k for n, _, k in self.specs if n == name), None)
        if key is None:
            return None
        if key.startswith(HEADER_PREFIX):
            return f"no header {key[len(HEADER_PREFIX):]}"
        if key == "key" and self.key is not None:
            return f"no key field {name} (a null key, or a key without it)"
        return {"key": "a null key", "timestamp": "no timestamp"}.get(key, f"no {key}")

    def row(self, meta: RecordMeta | None, headers: Headers) -> dict[str, Any]:
        """The metadata columns of one record (None everywhere for an unknown record).

        Raises:
            MetadataError: a VARCHAR key or header that is not UTF-8 text.
            KeyRecordError: a key its table's key format does not decode.
        """
        row: dict[str, Any] = {}
        fields = (None if self.key is None
                  else self.key.decode(None if meta is None else meta.key, headers))
        for name, kind, key in self.specs:
            value: Any
            if fields is not None and key == "key":
                row[name] = fields.get(name)
                continue
            if key.startswith(HEADER_PREFIX):
                value = _header(headers, key[len(HEADER_PREFIX) :])
            elif meta is None:
                value = None
            else:
                value = {
                    "key": meta.key,
                    "timestamp": meta.timestamp_ms,
                    "partition": meta.partition,
                    "offset": meta.offset,
                }[key]
            if kind == "string" and value is not None:
                try:
                    value = _text(value)
                except UnicodeDecodeError as exc:
                    what = "key" if key == "key" else f"header {key[len(HEADER_PREFIX):]}"
                    raise MetadataError(
                        f"column {name}: the record's {what} is not UTF-8 text "
                        f"({exc.reason} at byte {exc.start})"
                    ) from None
            row[name] = value
        return row

    def columns(
        self, chunk: Sequence[Any], partition: int
    ) -> tuple[dict[str, FieldColumn], npt.NDArray[np.bool_]]:
        """The metadata columns of a chunk of confluent-kafka messages, and which rows have
        no value (a VARCHAR key or header not UTF-8: :meth:`row` raises for them)."""
        import pyarrow as pa
        from confluent_kafka import Message

        from app.connectors.avro_columns import FieldColumn

        if self.key is not None:
            raise ValueError("keys of a key format are decoded per record (row)")
        count = len(chunk)
        bad = np.zeros(count, np.bool_)
        out: dict[str, FieldColumn] = {}
        headers: list[Headers] | None = None
        for name, kind, key in self.specs:
            if key == "timestamp":
                pairs = chain.from_iterable(map(Message.timestamp, chunk))  # (type, ms) each
                stamps = np.fromiter(pairs, np.int64, 2 * count).reshape(count, 2)
                null = stamps[:, 0] == 0  # TIMESTAMP_NOT_AVAILABLE
                out[name] = FieldColumn("long", null, np.where(null, 0, stamps[:, 1]))
            elif key == "partition":
                out[name] = FieldColumn(
                    "long", np.zeros(count, np.bool_), np.full(count, partition, np.int64)
                )
            elif key == "offset":
                offsets = np.fromiter(map(Message.offset, chunk), np.int64, count)
                out[name] = FieldColumn("long", np.zeros(count, np.bool_), offsets)
            else:
                raw: list[bytes | None]
                if key == "key":
                    raw = list(map(Message.key, chunk))
                else:
                    if headers is None:
                        headers = [m.headers() for m in chunk]
                    wanted = key[len(HEADER_PREFIX) :]
                    raw = [_header(h, wanted) if h else None for h in headers]
                blobs = pa.array(raw, pa.binary())
                null = blobs.is_null().to_numpy(zero_copy_only=False)
                if kind == "binary":
                    out[name] = FieldColumn("bytes", null, array=blobs)
                    continue
                try:
                    # Arrow's UTF-8 check is the strict one of Python's decoder (RFC 3629: no
                    # surrogates, no overlong forms); the rare chunk it refuses is read per row.
                    texts = blobs.cast(pa.string())
                except pa.ArrowInvalid:
                    texts, unreadable = _texts(raw)
                    bad |= unreadable
                    null = null | unreadable
                out[name] = FieldColumn("string", null, array=texts)
        return out, bad
