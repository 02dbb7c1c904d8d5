"""``tidemark dead-letters show``: dead letters as text or as JSON lines.

Each record with its place (partition, offset, Kafka time), its S6 headers (reason, table,
message, source coordinates; a late one's column, value and waterline at rejection), its own
headers, its key, and its value: decoded with its table's schema when a program that declares
the table is given (:class:`ProgramDecoder`: every ``'format'`` a table reads, Avro, JSON and
``avro-confluent``, and keys of a table with a ``'key.format'``), else as bytes (hex in text,
base64 in JSON).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.dead_letters.records import DeadLetter, iso_ms
from app.errors import TidemarkError

if TYPE_CHECKING:
    from app.connectors.late_gate import SourceSpec

__all__ = ["HEX_SHOWN", "ProgramDecoder", "RegistryFor", "letter_json", "letter_text"]

#: How many bytes of an undecoded key or value the text output shows.
HEX_SHOWN = 48

_EPOCH = date(1970, 1, 1)


def _printable(raw: bytes) -> str | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None


def _hex(raw: bytes) -> str:
    shown = raw[:HEX_SHOWN].hex(" ")
    more = f" ... ({len(raw)} bytes)" if len(raw) > HEX_SHOWN else f" ({len(raw)} bytes)"
    return f"hex {shown}{more}"


def _header_value(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    text = _printable(raw)
    return text if text is not None else "base64:" + base64.b64encode(raw).decode()


def _shown(kind: str, value: Any) -> Any:
    """A decoded column value as JSON shows it (times as ISO-8601, exact decimals as text)."""
    if value is None:
        return None
    if kind == "timestamp" and isinstance(value, int):
        return iso_ms(value)
    if kind == "date" and isinstance(value, int):
        return (_EPOCH + timedelta(days=value)).isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return "base64:" + base64.b64encode(value).decode()
    return value


#: The schema registry client's settings for a table's own ``'schema-registry.url'`` (None:
#: the ``schema_registry_url`` setting), or None when there is no registry to ask.
RegistryFor = Callable[[str | None], Mapping[str, str] | None]

_NO_REGISTRY = (
    "{option} is not decoded without a schema registry: give"
    " --schema-registry-url (TIDEMARK_SCHEMA_REGISTRY_URL) or the table's"
    " 'schema-registry.url'"
)


class ProgramDecoder:
    """Decodes a dead letter's value, and its key where the table declares ``'key.format'``,
    with the schema of its table (``tidemark.table``) in a program, as the table's source
    does: ``'format'`` Avro, JSON or ``avro-confluent`` (writer schemas fetched from the
    registry by the id each value carries, resolved to the table's), keys in any
    ``'key.format'`` (:mod:`app.connectors.record_key`)."""

    def __init__(self, program: Path, registry_for: RegistryFor | None = None) -> None:
        from dataclasses import replace

        from app.program.compile import compile_program
        from app.runtime.operators.source import source_spec

        if not program.is_file():
            raise TidemarkError(f"program file {program} does not exist")
        self.program = program
        circuit = compile_program(program)
        self._values: dict[str, Callable[[bytes], dict[str, Any]]] = {}
        self._keys: dict[str, Callable[[bytes | None], dict[str, Any]]] = {}
        self._kinds: dict[str, dict[str, str]] = {}
        self._refused: dict[str, str] = {}
        self._keys_refused: dict[str, str] = {}
        for table in circuit.tables:
            registry = None
            registry_format = table.format in ("avro-confluent", "json-registry",
                                               "protobuf-confluent", "debezium-avro-confluent")
            if (registry_format or table.key_format == "avro-confluent") and registry_for:
                registry = registry_for((table.schema_registry or {}).get("url"))
            if registry is not None:
                table = replace(table, schema_registry=dict(registry))
            spec = source_spec(table)
            self._kinds[table.name] = {c.name: c.kind for c in spec.columns}
            value = _value_decoder(spec)
            if isinstance(value, str):
                self._refused[table.name] = value
            else:
                self._values[table.name] = value
            if spec.key_format is not None:
                key = _key_decoder(spec)
                if isinstance(key, str):
                    self._keys_refused[table.name] = key
                else:
                    self._keys[table.name] = key

    def decode(self, letter: DeadLetter) -> tuple[dict[str, Any] | None, str | None]:
        """The value as a row (JSON-ready), or None and why it is not."""
        table = letter.table or "?"
        if letter.value is None:
            return None, "no value"
        if table in self._refused:
            return None, self._refused[table]
        decode = self._values.get(table)
        if decode is None:
            return None, f"table {table} is not in {self.program}"
        try:
            row = decode(letter.value)
        except (TidemarkError, ValueError) as exc:
            return None, f"not a row of table {table}: {exc}"
        return self._shown(table, row), None

    def decode_key(self, letter: DeadLetter) -> tuple[dict[str, Any] | None, str | None]:
        """The key as its table's key columns (JSON-ready), or None and why not; (None,
        None) when the table declares no ``'key.format'`` (its key is shown as bytes)."""
        table = letter.table or "?"
        if table in self._keys_refused:
            return None, self._keys_refused[table]
        decode = self._keys.get(table)
        if decode is None:
            return None, None
        try:
            row = decode(letter.key)
        except (TidemarkError, ValueError) as exc:
            return None, f"not a key of table {table}: {exc}"
        return self._shown(table, row), None

    def _shown(self, table: str, row: Mapping[str, Any]) -> dict[str, Any]:
        kinds = self._kinds[table]
        return {name: _shown(kinds.get(name, ""), v) for name, v in row.items()}


def _value_decoder(spec: SourceSpec) -> Callable[[bytes], dict[str, Any]] | str:
    """The decoder of a table's values, or why there is none."""
    from app.connectors.avro_codec import AvroCodec
    from app.connectors.confluent_avro import ConfluentAvroRecords
    from app.connectors.json_records import JsonRecords

    if spec.format == "json":
        return JsonRecords(spec.table, [(c.name, c.kind) for c in spec.value_columns]).decode
    if spec.format == "raw":
        from app.connectors.record_key import RAW_KINDS, raw_decode

        (column,) = spec.value_columns
        return lambda value: {column.name: raw_decode(RAW_KINDS[column.kind], value, "value")}
    if spec.format == "debezium-avro-confluent" and spec.registry is None:
        return _NO_REGISTRY.format(option="'format' = 'debezium-avro-confluent'")
    if spec.format in ("debezium-json", "debezium-avro-confluent"):
        from app.connectors.late_gate import LateGate

        gate = LateGate(spec, {}, 0)

        def event(value: bytes) -> dict[str, Any]:
            verdict = gate.classify(value, None)
            if verdict.row is None:
                raise ValueError(verdict.message)
            return verdict.row

        return event
    if spec.format == "avro":
        return AvroCodec(spec.avro_schema).decode
    if spec.format == "avro-confluent":
        if spec.registry is None:
            return _NO_REGISTRY.format(option="'format' = 'avro-confluent'")
        return ConfluentAvroRecords(spec.table, spec.avro_schema, spec.registry).decode
    if spec.format == "json-registry":
        from app.connectors.confluent_json import ConfluentJsonRecords

        if spec.registry is None:
            return _NO_REGISTRY.format(option="'format' = 'json-registry'")
        columns = [(c.name, c.kind) for c in spec.value_columns]
        return ConfluentJsonRecords(spec.table, spec.topic, columns, spec.registry).decode
    if spec.format == "protobuf-confluent":
        from app.connectors.confluent_protobuf import ConfluentProtobufRecords

        if spec.registry is None:
            return _NO_REGISTRY.format(option="'format' = 'protobuf-confluent'")
        columns = [(c.name, c.kind) for c in spec.value_columns]
        return ConfluentProtobufRecords(spec.table, columns, spec.registry).decode
    return f"'format' = '{spec.format}' is not decoded here"


def _key_decoder(spec: SourceSpec) -> Callable[[bytes | None], dict[str, Any]] | str:
    """The decoder of a table's keys (its ``'key.format'``), or why there is none."""
    from app.connectors.record_key import KeyDecoder

    assert spec.key_format is not None and spec.key_schema is not None
    if spec.key_format == "avro-confluent" and spec.registry is None:
        return _NO_REGISTRY.format(option="'key.format' = 'avro-confluent'")
    kinds = {c.name: c.kind for c in spec.columns}
    return KeyDecoder(
        spec.table, spec.key_format, [(n, kinds[n]) for n in spec.key_fields], spec.key_schema,
        spec.registry,
    ).decode


Decoded = tuple[dict[str, Any] | None, str | None]


def letter_json(
    letter: DeadLetter,
    decoded: Decoded | None = None,
    replayed_to: Iterable[str] = (),
    key: Decoded | None = None,
) -> dict[str, Any]:
    """One dead letter as a JSON object (one line of ``show --format json``); ``decoded``
    and ``key``: its value and key as :class:`ProgramDecoder` decodes them."""
    source_topic, source_partition, source_offset = letter.source
    late = letter.late
    row, why = decoded if decoded is not None else (None, None)
    key_row, key_why = key if key is not None else (None, None)
    return {
        "topic": letter.topic,
        "partition": letter.partition,
        "offset": letter.offset,
        "timestamp": None if letter.timestamp_ms is None else iso_ms(letter.timestamp_ms),
        "reason": letter.reason,
        "table": letter.table,
        "message": letter.message,
        "source": {"topic": source_topic, "partition": source_partition, "offset": source_offset},
        "late": None
        if late is None
        else {"column": late[0], "value": late[1], "waterline": late[2]},
        "key": None if letter.key is None else _printable(letter.key),
        "key_base64": None if letter.key is None else base64.b64encode(letter.key).decode(),
        "key_columns": key_row,
        "key_not_decoded": key_why,
        "value": row,
        "value_not_decoded": why,
        "value_base64": None if letter.value is None else base64.b64encode(letter.value).decode(),
        "headers": [[k, _header_value(v)] for k, v in letter.own_headers()],
        "replayed_to": sorted(set(replayed_to)),
    }


def letter_text(
    letter: DeadLetter,
    decoded: Decoded | None = None,
    replayed_to: Iterable[str] = (),
    key: Decoded | None = None,
) -> str:
    """One dead letter as a few indented lines; ``decoded`` and ``key``: its value and key as
    :class:`ProgramDecoder` decodes them."""
    stamp = "?" if letter.timestamp_ms is None else iso_ms(letter.timestamp_ms)
    lines = [
        f"{letter.topic} partition {letter.partition} offset {letter.offset} at {stamp}:"
        f" {letter.reason}, table {letter.table}"
    ]
    if letter.message:
        lines.append(f"  message:   {letter.message}")
    source_topic, source_partition, source_offset = letter.source
    lines.append(
        f"  source:    {source_topic} partition {source_partition} offset {source_offset}"
    )
    late = letter.late
    if late is not None:
        lines.append(f"  late:      {late[0]} = {late[1]}, waterline {late[2]}")
    key_row, key_why = key if key is not None else (None, None)
    if key_row is not None:
        lines.append(f"  key:       {json.dumps(key_row, ensure_ascii=False)}")
    elif letter.key is None:
        lines.append("  key:       null")
    else:
        text = _printable(letter.key)
        lines.append(f"  key:       {json.dumps(text) if text is not None else _hex(letter.key)}")
    if key_why:
        lines.append(f"             ({key_why})")
    row, why = decoded if decoded is not None else (None, None)
    if letter.value is None:
        lines.append("  value:     null")
    elif row is not None:
        lines.append(f"  value:     {json.dumps(row, ensure_ascii=False)}")
    else:
        lines.append(f"  value:     {_hex(letter.value)}")
        if why:
            lines.append(f"             ({why})")
    own = letter.own_headers()
    if own:
        shown = ", ".join(f"{k}={_header_value(v)}" for k, v in own)
        lines.append(f"  headers:   {shown}")
    targets = sorted(set(replayed_to))
    if targets:
        lines.append(f"  replayed:  to {', '.join(targets)}")
    return "\n".join(lines) + "\n"
