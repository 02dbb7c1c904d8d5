"""``tidemark dead-letters show``: dead letters as text or as JSON lines.

Each record with its place (partition, offset, Kafka time), its S6 headers (reason, table,
message, source coordinates; a late one's column, value and waterline at rejection), its own
headers, its key, and its value: decoded with its table's schema when a program that declares
the table is given (:class:`ProgramDecoder`), else as bytes (hex in text, base64 in JSON).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from app.dead_letters.records import DeadLetter, iso_ms
from app.errors import TidemarkError

__all__ = ["HEX_SHOWN", "ProgramDecoder", "letter_json", "letter_text"]

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


class ProgramDecoder:
    """Decodes a dead letter's value with the schema of its table (``tidemark.table``) in a
    program: Avro or JSON as the table's ``'format'`` says."""

    def __init__(self, program: Path) -> None:
        from app.connectors.avro_codec import AvroCodec
        from app.connectors.json_records import JsonRecords
        from app.program.compile import compile_program
        from app.runtime.operators.source import source_spec

        if not program.is_file():
            raise TidemarkError(f"program file {program} does not exist")
        self.program = program
        circuit = compile_program(program)
        self._decoders: dict[str, tuple[Callable[[bytes], dict[str, Any]], dict[str, str]]] = {}
        self._refused: dict[str, str] = {}
        for table in circuit.tables:
            spec = source_spec(table)
            kinds = {c.name: c.kind for c in spec.columns}
            if table.format == "json":
                records = JsonRecords(table.name, [(c.name, c.kind) for c in spec.value_columns])
                self._decoders[table.name] = (records.decode, kinds)
            elif table.format == "avro":
                self._decoders[table.name] = (AvroCodec(table.avro_schema).decode, kinds)
            else:
                self._refused[table.name] = f"'format' = '{table.format}' is not decoded here"

    def decode(self, letter: DeadLetter) -> tuple[dict[str, Any] | None, str | None]:
        """The value as a row (JSON-ready), or None and why it is not."""
        table = letter.table or "?"
        if letter.value is None:
            return None, "no value"
        if table in self._refused:
            return None, self._refused[table]
        found = self._decoders.get(table)
        if found is None:
            return None, f"table {table} is not in {self.program}"
        decode, kinds = found
        try:
            row = decode(letter.value)
        except (TidemarkError, ValueError) as exc:
            return None, f"not a row of table {table}: {exc}"
        return {name: _shown(kinds.get(name, ""), v) for name, v in row.items()}, None


Decoded = tuple[dict[str, Any] | None, str | None]


def letter_json(
    letter: DeadLetter, decoded: Decoded | None = None, replayed_to: Iterable[str] = ()
) -> dict[str, Any]:
    """One dead letter as a JSON object (one line of ``show --format json``)."""
    source_topic, source_partition, source_offset = letter.source
    late = letter.late
    row, why = decoded if decoded is not None else (None, None)
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
        "value": row,
        "value_not_decoded": why,
        "value_base64": None if letter.value is None else base64.b64encode(letter.value).decode(),
        "headers": [[k, _header_value(v)] for k, v in letter.own_headers()],
        "replayed_to": sorted(set(replayed_to)),
    }


def letter_text(
    letter: DeadLetter, decoded: Decoded | None = None, replayed_to: Iterable[str] = ()
) -> str:
    """One dead letter as a few indented lines."""
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
    if letter.key is None:
        lines.append("  key:       null")
    else:
        text = _printable(letter.key)
        lines.append(f"  key:       {json.dumps(text) if text is not None else _hex(letter.key)}")
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
