"""Flink SQL's table options and SET statements, read as Tidemark's (docs/porting-from-flink.md).

A ``CREATE TABLE ... WITH ('connector' = 'kafka', ...)`` is compiled as the Tidemark table
(or, when an ``INSERT INTO`` writes it, the output view) that the same options in Tidemark's
names declare: this module only maps each Flink option to its Tidemark option, or refuses
it, naming why. An option that cannot change what is read or written (a consumer group, a
parallelism) is a warning; one that Tidemark cannot honour is an error, never ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.circuit.ir import Diagnostic
from app.circuit.metadata import CHANGELOG_FORMATS
from app.program.ddl import OptionDecl, SetDecl, TableDecl
from app.program.kafka_keys import KEY_FORMATS, prefix_without_fields
from app.program.lexer import CompileFailure

__all__ = [
    "CONNECTORS",
    "DIALECTS",
    "FlinkTable",
    "connector_of",
    "set_statement",
    "sink_options",
    "source_options",
]

CONNECTORS = ("kafka", "upsert-kafka")
DIALECTS = ("tidemark", "flink")
#: Flink's value formats Tidemark reads and writes, by the same names.
_FORMATS = ("avro", "avro-confluent", "json", "protobuf-confluent", "raw")
_FORMAT_REASONS = {
    "csv": "Tidemark has no CSV format: produce the values as JSON or Avro",
    "protobuf": "Tidemark reads Protobuf only through a schema registry, without generated "
                "classes (its 'protobuf.message-class-name'): produce the values with a "
                "registry serializer and declare 'format' = 'protobuf-confluent'",
}
_CHANGELOG_FORMATS = ("debezium-json", "debezium-avro-confluent", "canal-json", "maxwell-json",
                      "ogg-json")
#: The option names of Flink's schema-registry URL, per side.
_REGISTRY_URL = ("avro-confluent.url", "value.avro-confluent.url",
                 "avro-confluent.schema-registry.url",
                 "value.avro-confluent.schema-registry.url",
                 "protobuf-confluent.url", "value.protobuf-confluent.url",
                 "protobuf-confluent.schema-registry.url",
                 "value.protobuf-confluent.schema-registry.url",
                 "debezium-avro-confluent.url", "value.debezium-avro-confluent.url",
                 "debezium-avro-confluent.schema-registry.url",
                 "value.debezium-avro-confluent.schema-registry.url")
_KEY_REGISTRY_URL = ("key.avro-confluent.url", "key.avro-confluent.schema-registry.url")
#: A registry format's subject options: a reader finds each record's schema by its id.
_SUBJECTS = tuple(f"{side}{fmt}.subject" for side in ("", "value.", "key.") for fmt in (
    "avro-confluent", "protobuf-confluent", "debezium-avro-confluent")
    if not (side == "key." and fmt != "avro-confluent"))
_OFFSETS = ("Tidemark keeps its offsets in the checkpoint, not in a consumer group: no "
            "offset is committed to the group")
_KAFKA_SETTINGS = ("the Kafka client settings are the service's (docs/configuration.md), "
                   "the same for every table and view")


@dataclass(frozen=True)
class FlinkTable:
    """A Flink table's options in Tidemark's names (a table's, or an output view's without
    its ``'format'``, which the query decides), and what else they say."""

    connector: str
    options: tuple[OptionDecl, ...]
    #: ``'properties.bootstrap.servers'``: the cluster it names, which must be the service's
    #: own (S15: one cluster for exactly-once), checked when ``tidemark run`` starts.
    bootstrap_servers: str | None
    #: The Kafka key's columns of an output (``'key.fields'``, an upsert-kafka PRIMARY KEY).
    key: tuple[str, ...]
    warnings: tuple[Diagnostic, ...]
    #: A read table's ``'key.fields'`` are also fields of its value, and read from it
    #: (``'value.fields-include' = 'ALL'``, Flink's default); its key is decoded and checked.
    #: Of a table INSERT INTO writes: its value holds its key columns too (not
    #: ``'EXCEPT_KEY'``).
    key_in_value: bool = False
    #: ``'key.fields-prefix'`` of a table INSERT INTO writes: its key's fields are its key
    #: columns' names without it (a read table's is one of its ``options``).
    key_prefix: OptionDecl | None = None


def connector_of(decl: TableDecl) -> OptionDecl | None:
    """The table's ``'connector'`` option: it puts the program in Flink's dialect."""
    return next((o for o in decl.options if o.key == "connector"), None)


def _text(option: OptionDecl) -> str:
    if not isinstance(option.value, str) or not option.value.strip():
        raise CompileFailure(option.value_position, f"option '{option.key}' takes a quoted "
                             "string")
    return option.value


class _Reader:
    """The options of one Flink table, read once each."""

    def __init__(self, decl: TableDecl, sink: bool) -> None:
        self.decl = decl
        self.sink = sink
        self.found: dict[str, OptionDecl] = {}
        self.out: list[OptionDecl] = []
        self.warnings: list[Diagnostic] = []
        self.bootstrap: str | None = None
        self.registry: OptionDecl | None = None
        for option in decl.options:
            if option.key in self.found:
                raise CompileFailure(option.position, f"duplicate option '{option.key}'")
            self.found[option.key] = option

    def emit(self, key: str, option: OptionDecl, value: str | None = None) -> None:
        self.out.append(OptionDecl(key, option.position,
                                   option.value if value is None else value,
                                   option.value_position))

    def warn(self, option: OptionDecl, why: str) -> None:
        self.warnings.append(Diagnostic("warning", option.position, f"option "
                                        f"'{option.key}' of table {self.decl.name} changes "
                                        f"nothing in Tidemark: {why}", "remove it"))

    def refuse(self, option: OptionDecl, why: str, fix: str | None = None) -> CompileFailure:
        return CompileFailure(option.position, f"unsupported option '{option.key}' of table "
                              f"{self.decl.name}: {why}", fix)

    def value_format(self) -> tuple[str, OptionDecl] | None:
        plain, value = self.found.get("format"), self.found.get("value.format")
        if plain is not None and value is not None:
            raise CompileFailure(value.position, "'format' and 'value.format' both name the "
                                 "value format", "keep one of them")
        option = plain or value
        if option is None:
            return None
        fmt = _text(option)
        if fmt in _FORMATS or (fmt in CHANGELOG_FORMATS and not self.sink) or (
                fmt == "debezium-json" and self.sink):
            return fmt, option
        if fmt in _CHANGELOG_FORMATS:
            raise self.refuse(option, f"'{fmt}' is a changelog of updates and deletes, which "
                              "a Tidemark table cannot read yet (a table is insert-only)",
                              "read the topic's after-images with 'format' = 'json' or 'avro' "
                              "in a table of its own (docs/porting-from-flink.md)")
        raise self.refuse(option, _FORMAT_REASONS.get(fmt, f"Tidemark has no format '{fmt}'"),
                          f"use one of {', '.join(repr(f) for f in _FORMATS)}")


def _read(decl: TableDecl, sink: bool,
          handle: Callable[[_Reader, str, OptionDecl], bool]) -> _Reader:
    """Every option of ``decl``: ``handle`` first (one side's own options), then the ones
    both sides share; anything else is refused."""
    reader = _Reader(decl, sink)
    connector = reader.found["connector"]
    name = _text(connector)
    if name not in CONNECTORS:
        raise reader.refuse(connector, f"Tidemark reads and writes Kafka topics only, not "
                            f"'{name}'", "declare 'connector' = 'kafka' (or 'upsert-kafka') "
                            "and a 'topic'")
    fmt = reader.value_format()
    for key, option in reader.found.items():
        if key in ("connector", "format", "value.format") or handle(reader, key, option):
            continue
        if key == "topic":
            topic = _text(option)
            if ";" in topic:
                raise reader.refuse(option, "a list of topics", "declare one table per topic "
                                    "and UNION ALL them in a view")
            reader.emit("topic", option)
        elif key == "properties.bootstrap.servers":
            reader.bootstrap = _text(option)
        elif key == "properties.group.id":
            reader.warn(option, _OFFSETS)
        elif key.startswith("properties."):
            raise reader.refuse(option, _KAFKA_SETTINGS, "remove it, and set it in the "
                                "service's configuration if every table needs it")
        elif key in _REGISTRY_URL or key in _KEY_REGISTRY_URL:
            side = "key" if key.startswith("key.") else "value"
            declared = (reader.found.get("key.format") if side == "key" else
                        None if fmt is None else fmt[1])
            named = next((f for f in ("debezium-avro-confluent", "protobuf-confluent")
                          if key.removeprefix("value.").startswith(f)), "avro-confluent")
            if declared is None or _text(declared).lower() != named:
                raise reader.refuse(option, f"it is an option of '{named}' {side}s",
                                    f"declare '{side}.format' = '{named}' or remove it")
            if reader.registry is not None and _text(reader.registry) != _text(option):
                raise reader.refuse(option, "a table's key and value are read with one schema "
                                    f"registry, and '{reader.registry.key}' names another",
                                    "name one registry")
            if reader.registry is None:
                reader.registry = option
                reader.emit("schema-registry.url", option)
        elif key in _SUBJECTS and not sink:
            side = "key" if key.startswith("key.") else "value"
            declared = (reader.found.get("key.format") if side == "key" else
                        None if fmt is None else fmt[1])
            named = key.removeprefix(f"{side}.").removesuffix(".subject")
            if declared is None or _text(declared).lower() != named:
                raise reader.refuse(option, f"it is an option of '{named}' {side}s",
                                    f"declare '{side}.format' = '{named}' or remove it")
            reader.warn(option, "a record is read with the schema its id names; a subject "
                        "names the schemas a writer registers")
        elif key.startswith(("avro-confluent.", "value.avro-confluent.",
                             "key.avro-confluent.", "protobuf-confluent.",
                             "value.protobuf-confluent.", "debezium-avro-confluent.",
                             "value.debezium-avro-confluent.")):
            raise reader.refuse(option, "the schema registry's credentials and TLS settings "
                                "are the service's (its schema_registry settings, by "
                                "Confluent's names, in docs/configuration.md)",
                                "remove it")
        elif key == "value.fields-include":
            include = _text(option).upper()
            if include not in ("ALL", "EXCEPT_KEY"):
                raise reader.refuse(option, f"Flink has no '{include}'",
                                    "write 'ALL' or 'EXCEPT_KEY'")
            if include == "EXCEPT_KEY" and "key.fields" not in reader.found and not (
                    _text(reader.found["connector"]) == "upsert-kafka"):
                raise reader.refuse(option, "'EXCEPT_KEY' leaves the key's fields out of the "
                                    "value, but the table names none", "add 'key.fields'")
        elif key in ("json.timestamp-format.standard", "value.json.timestamp-format.standard"
                     ) and not sink:
            pass  # every form is read: 'yyyy-mm-dd hh:mm:ss', ISO-8601, with an offset
        elif key in ("json.fail-on-missing-field", "value.json.fail-on-missing-field"
                     ) and not sink:
            if _text(option).lower() != "false":
                raise reader.refuse(option, "a missing field is NULL; in a NOT NULL column "
                                    "it makes the record an invalid dead letter (S7)",
                                    "declare the columns that must be present NOT NULL, and "
                                    "remove the option")
        elif key in ("json.ignore-parse-errors", "value.json.ignore-parse-errors"
                     ) and not sink:
            reader.warn(option, "a record that does not parse is neither skipped nor fatal: "
                        "it goes to the table's dead-letter topic (S7)")
        elif key.startswith(("debezium-json.", "value.debezium-json.")) and not sink:
            _debezium_option(reader, key, option, fmt)
        elif key in ("raw.charset", "value.raw.charset", "raw.endianness",
                     "value.raw.endianness"):
            _raw_option(reader, key, option, fmt)
        elif key.startswith(("json.", "value.json.")):
            raise reader.refuse(option, "Tidemark's JSON values have one form "
                                "(docs/language.md, JSON values)", "remove it")
        elif key in ("key.format", "key.fields"):
            if key == "key.format" and _text(option).lower() not in KEY_FORMATS:
                raise reader.refuse(option, f"Tidemark has no key format '{_text(option)}'",
                                    "use one of " + ", ".join(repr(f) for f in KEY_FORMATS))
            if not (sink and key == "key.fields"):
                reader.emit(key, option)
        elif key == "key.fields-prefix" and not sink:
            reader.emit(key, option)
        elif key == "key.json.ignore-parse-errors" and not sink:
            reader.warn(option, "a key that does not parse is neither skipped nor fatal: its "
                        "record goes to the table's dead-letter topic (S7)")
        elif key == "key.json.fail-on-missing-field" and not sink:
            if _text(option).lower() != "false":
                raise reader.refuse(option, "a missing key field is NULL; in a NOT NULL column "
                                    "it makes the record an invalid dead letter (S7)",
                                    "declare the key columns NOT NULL, and remove the option")
        elif key == "key.json.timestamp-format.standard" and not sink:
            pass  # every form is read, as of a value
        elif key.startswith("sink.") and not sink:
            reader.warn(option, f"table {decl.name} is read, never written")
        elif key.startswith("scan.") and sink:
            reader.warn(option, f"table {decl.name} is written by INSERT INTO, never read")
        else:
            raise reader.refuse(option, "Tidemark has no such Kafka table option",
                                "see docs/porting-from-flink.md for the options it takes")
    if fmt is None:
        raise CompileFailure(decl.position, f"table {decl.name} has no 'format'",
                             "add 'format' = 'json' (or 'avro', 'avro-confluent')")
    if "topic" not in reader.found:
        raise CompileFailure(decl.position, f"table {decl.name} has no 'topic'",
                             "add 'topic' = '<kafka topic>'")
    reader.emit("encoding" if sink else "format", fmt[1], fmt[0])
    return reader


def _raw_option(reader: _Reader, key: str, option: OptionDecl,
                fmt: tuple[str, OptionDecl] | None) -> None:
    """An option of Flink's ``raw`` format: its defaults, UTF-8 text and big-endian numbers,
    are the only forms Tidemark reads and writes (Kafka's Java serializers write them)."""
    if fmt is None or fmt[0] != "raw":
        raise reader.refuse(option, "it is an option of 'raw' values",
                            "declare 'format' = 'raw' or remove it")
    value = _text(option).strip().lower().replace("_", "-")
    default = "utf-8" if key.endswith("charset") else "big-endian"
    if value != default:
        raise reader.refuse(option, f"raw values are {'written' if reader.sink else 'read'} "
                            "as UTF-8 text and big-endian numbers, as Kafka's Java "
                            "serializers write them, not "
                            f"'{_text(option)}'", "remove it")


def _debezium_option(reader: _Reader, key: str, option: OptionDecl,
                     fmt: tuple[str, OptionDecl] | None) -> None:
    """An option of Flink's ``debezium-json`` format, of a table that reads it."""
    name = key.removeprefix("value.").removeprefix("debezium-json.")
    if fmt is None or fmt[0] != "debezium-json":
        raise reader.refuse(option, "it is an option of 'debezium-json' values",
                            "declare 'format' = 'debezium-json' or remove it")
    if name == "schema-include":
        reader.warn(option, "change events are read with or without the JsonConverter's "
                    "schema wrapping, whatever the option says")
    elif name == "ignore-parse-errors":
        reader.warn(option, "an event that does not parse is neither skipped nor fatal: it "
                    "goes to the table's dead-letter topic (S7)")
    elif name != "timestamp-format.standard":  # every form is read, as of a JSON value
        raise reader.refuse(option, "Tidemark's Debezium events are read in one way "
                            "(docs/language.md, Debezium topics)", "remove it")


def source_options(decl: TableDecl) -> FlinkTable:
    """A table that views read: Tidemark's table options (docs/language.md, Tables)."""

    def handle(reader: _Reader, key: str, option: OptionDecl) -> bool:
        if key in ("scan.startup.mode", "scan.startup.timestamp-millis",
                   "dead_letter.connect-headers"):
            reader.emit(key, option)
        elif key == "scan.topic-partition-discovery.interval":
            reader.warn(option, "each step reads every partition the topic has then")
        elif key.startswith("scan."):
            raise reader.refuse(option, "a table reads its topic from its start position on, "
                                "without end", "remove it")
        else:
            return False
        return True

    connector = connector_of(decl)
    assert connector is not None
    reader = _read(decl, False, handle)
    include = reader.found.get("value.fields-include")
    every = include is None or _text(include).upper() == "ALL"
    if _text(connector) == "upsert-kafka":
        _upsert_key(reader, connector, every)
        every = False
    key_in_value = "key.fields" in reader.found and every
    return FlinkTable(_text(connector), tuple(reader.out), reader.bootstrap, (),
                      tuple(reader.warnings), key_in_value)


def _upsert_key(reader: _Reader, connector: OptionDecl, every: bool) -> None:
    """An upsert-kafka input's key (Flink's upsert-kafka source): its PRIMARY KEY columns,
    decoded from the Kafka key by ``'key.format'`` (emitted as ``'key.fields'``), so a
    tombstone carries them and deletes its key (a changelog table, ADR 0030). They are read
    from the key also under ``'value.fields-include' = 'ALL'``, where the value holds them
    too: a tombstone has only the key, and Flink's writer puts the same values in both."""
    decl = reader.decl
    if decl.primary_key is None:
        raise CompileFailure(connector.value_position, f"upsert-kafka table {decl.name} has "
                             "no PRIMARY KEY, which names its Kafka key (Flink requires one)",
                             "add PRIMARY KEY (<key columns>) NOT ENFORCED")
    if "key.fields" in reader.found:
        raise reader.refuse(reader.found["key.fields"], "an upsert-kafka table's key is its "
                            "PRIMARY KEY", "remove it")
    if "key.format" not in reader.found:
        raise CompileFailure(connector.value_position, f"upsert-kafka table {decl.name} has "
                             "no 'key.format'", "add 'key.format' (its 'value.format', or "
                             "'raw' for one column's plain bytes)")
    prefix = reader.found.get("key.fields-prefix")
    if prefix is not None and every:
        raise reader.refuse(prefix, "it renames the key's fields, but 'value.fields-include' "
                            "= 'ALL' has them in the value too", "add 'value.fields-include' "
                            "= 'EXCEPT_KEY' (Flink requires it with a prefix)")
    fmt = reader.found.get("format") or reader.found.get("value.format")
    if every and fmt is not None and _text(fmt) == "avro":
        raise reader.refuse(fmt, "an upsert-kafka table's key columns are read from its key, "
                            "and schemaless Avro values are decoded with the schema of the "
                            "other columns, which 'value.fields-include' = 'ALL' does not "
                            "write", "add 'value.fields-include' = 'EXCEPT_KEY', or read the "
                            "values with 'avro-confluent'")
    where = decl.primary_key.position
    reader.out.append(OptionDecl("key.fields", where, ";".join(
        f'"{name}"' for name, _ in decl.primary_key.columns), where))


def sink_options(decl: TableDecl, primary_key: Sequence[str]) -> FlinkTable:
    """A table that INSERT INTO writes: an output view's options (docs/language.md, Views)
    but its ``'format'``, and its Kafka key's columns."""
    key: tuple[str, ...] = ()
    prefix: OptionDecl | None = None
    connector = connector_of(decl)
    assert connector is not None
    upsert = _text(connector) == "upsert-kafka"

    def handle(reader: _Reader, name: str, option: OptionDecl) -> bool:
        nonlocal key, prefix
        if name == "key.fields":
            if upsert:
                raise reader.refuse(option, "an upsert-kafka table's key is its PRIMARY KEY",
                                    "remove it")
            key = tuple(part.strip().lower() for part in _text(option).split(";"))
        elif name == "key.fields-prefix":
            prefix = option  # checked with the key columns (app/program/kafka_keys.py)
        elif name == "sink.partitioner":
            if _text(option) != "default":
                raise reader.refuse(option, "a record's partition is the murmur2 hash of its "
                                    "key, as Kafka's Java client places it", "remove it")
        elif name in ("sink.delivery-guarantee", "sink.semantic"):
            reader.warn(option, "Tidemark writes exactly once (Kafka transactions) always")
        elif name in ("sink.transactional-id-prefix", "sink.parallelism"):
            reader.warn(option, "the service names its transactions and chooses its "
                        "parallelism")
        elif name.startswith("sink.buffer-flush."):
            reader.warn(option, "each step's changes are written at the step's end")
        elif name in ("avro-confluent.subject", "value.avro-confluent.subject",
                      "key.avro-confluent.subject"):
            side = "key" if name.startswith("key.") else "value"
            declared = reader.found.get("key.format")
            if side == "key" and (declared is None
                                  or _text(declared).lower() != "avro-confluent"):
                raise reader.refuse(option, "it is an option of 'avro-confluent' keys",
                                    "declare 'key.format' = 'avro-confluent' or remove it")
            reader.emit(f"{side}.subject", option)
        else:
            return False
        return True

    reader = _read(decl, True, handle)
    if upsert:
        if not primary_key:
            raise CompileFailure(connector.value_position, f"upsert-kafka table {decl.name} "
                                 "has no PRIMARY KEY, which names its Kafka key",
                                 "add PRIMARY KEY (<key columns>) NOT ENFORCED")
        key = tuple(primary_key)
        if "key.format" not in reader.found:
            raise CompileFailure(connector.value_position, f"upsert-kafka table {decl.name} "
                                 "has no 'key.format'", "add 'key.format' (its 'value.format', "
                                 "or 'raw' for one column's plain bytes)")
    elif key and "key.format" not in reader.found:
        option = reader.found["key.fields"]
        raise reader.refuse(option, "'key.fields' needs 'key.format'",
                            "add 'key.format' (the value's format, or 'raw' for one "
                            "column's plain bytes)")
    elif not key and "key.format" in reader.found:
        option = reader.found["key.format"]
        raise reader.refuse(option, "'key.format' needs 'key.fields', the columns of the key",
                            "add 'key.fields' = 'col' (several: 'col1;col2')")
    if prefix is not None and not key:
        raise prefix_without_fields(decl.name, prefix)
    if key:
        where = reader.found.get("key.fields") or connector
        reader.out.append(OptionDecl("key", where.position, ", ".join(f'"{k}"' for k in key),
                                     where.value_position))
    include = reader.found.get("value.fields-include")
    return FlinkTable(_text(connector), tuple(reader.out), reader.bootstrap, key,
                      tuple(reader.warnings),
                      key_in_value=include is None or _text(include).upper() == "ALL",
                      key_prefix=prefix)


#: SET keys that change how a job runs, never what it reads or writes: warnings.
_RUN_ONLY = ("parallelism.default", "pipeline.", "execution.checkpointing.", "state.",
             "restart-strategy", "taskmanager.", "jobmanager.", "sql-client.",
             "table.exec.resource.", "table.exec.mini-batch.", "table.dml-sync",
             "execution.savepoint", "table.exec.source.idle-timeout", "rest.", "metrics.")


def set_statement(decl: SetDecl) -> tuple[str | None, Diagnostic | None]:
    """What ``SET 'key' = 'value'`` says: the dialect it sets (``'tidemark.dialect'``), or a
    warning for a key that cannot change results.

    Raises:
        CompileFailure: any other key, naming it.
    """
    key = decl.key.strip()
    value = decl.value.strip()
    if key == "tidemark.dialect":
        if value.lower() not in DIALECTS:
            raise CompileFailure(decl.key_position, f"bad 'tidemark.dialect' '{value}'",
                                 "write 'flink' or 'tidemark'")
        return value.lower(), None
    if key == "execution.runtime-mode" and value.lower() == "streaming":
        return None, None
    if key == "table.local-time-zone" and value.upper() in ("UTC", "Z", "+00:00", "GMT"):
        return None, None
    if key.startswith(_RUN_ONLY) or key in _RUN_ONLY:
        return None, Diagnostic("warning", decl.key_position, f"SET '{key}' changes how Flink "
                                "runs a job, not its results: Tidemark ignores it",
                                "remove it; the service's settings are in "
                                "docs/configuration.md")
    fix = "remove it"
    why = "it would change results, and Tidemark has no such setting"
    if key == "table.local-time-zone":
        why = "Tidemark's times are UTC instants"
        fix = "remove it, or write 'UTC'"
    elif key == "execution.runtime-mode":
        why = "Tidemark runs every program as a stream"
    elif key == "table.exec.state.ttl":
        why = ("Tidemark frees state by waterlines, never by a time to live: a query's state "
               "is bounded by its windows (docs/state-bound.md)")
    raise CompileFailure(decl.key_position, f"unsupported SET '{key}': {why}", fix)
