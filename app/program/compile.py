"""The compiler's one entry point: a program file to a :class:`~app.circuit.ir.Circuit`.

Stages, in order (STYLE habit 3): tokenize and split statements, parse each statement's DDL
shell, then build tables and views in file order (each view can read any table or view defined
before it). Errors are collected per statement and reported together as one
:class:`~app.errors.ProgramError` (SPEC L7): a user fixes a file in one pass, and a broken
program never reaches Spark. Warnings (unbounded state) ride on ``Circuit.warnings``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

from sqlglot import exp

from app.circuit.computed_columns import current_watermark_column
from app.circuit.explain import waterline_text
from app.circuit.ir import (
    DELETION_COLUMN,
    LATEST,
    AggCall,
    Aggregate,
    Call,
    Circuit,
    Column,
    ColumnRef,
    Computed,
    Diagnostic,
    EmitPolicy,
    Expr,
    Filter,
    Join,
    Lateness,
    Literal_,
    Output,
    Position,
    Project,
    SqlType,
    StateBound,
    Table,
    TimeAttribute,
    View,
    ViewLateness,
)
from app.circuit.metadata import (
    CHANGELOG_FORMATS,
    CHANGELOG_METADATA_TYPES,
    HEADER_PREFIX,
    METADATA_TYPES,
    REGISTRY_FORMATS,
    metadata_types,
)
from app.circuit.processing_time import mark_processing_windows
from app.connectors.registry_subjects import strategy_name
from app.errors import ProgramError
from app.program.avro_schema import CHANGELOG_FIELDS, record_schema, schema_mismatches
from app.program.ddl import (
    ColumnDecl,
    Decl,
    InsertDecl,
    IntervalDecl,
    LatenessDecl,
    OptionDecl,
    SetDecl,
    StatementSetDecl,
    TableDecl,
    ViewDecl,
    parse_statement,
)
from app.program.flink import (
    FlinkTable,
    connector_of,
    set_statement,
    sink_options,
    source_options,
)
from app.program.insert import conform
from app.program.kafka_keys import RAW_TYPES, option_names, raw_fix, table_key, view_key
from app.program.lexer import CompileFailure, SourceText, Token, split_statements, tokenize
from app.program.query import (
    JOIN_PREFIX,
    JOINED_ROWS,
    UNNAMED,
    PlannedQuery,
    Relation,
    column_expression,
    join_chain,
    over_join,
    plan_decorrelated,
    plan_join_prefix,
    plan_over_join,
    plan_parsed,
    plan_query,
    plan_window_side,
    processing_time_attribute,
    unite,
)
from app.program.stages import (
    Composition,
    stage_output,
    stage_table,
    stage_writer_name,
    table_passthrough,
    window_span,
)
from app.program.subqueries import Derived, reserved_name, split_query
from app.program.top_n import LIMIT_FIX as _LIMIT_FIX
from app.program.upsert_rows import UPSERT_SUFFIX, plan_upsert, upsert_state
from app.program.window_subquery import AGGREGATE, SIDE, window_subquery

__all__ = ["compile_program", "compile_text"]

TABLE_OPTIONS = ("topic", "format", "schema", "dead_letter", "max_future", "schema-registry.url",
                 "scan.startup.mode", "scan.startup.timestamp-millis", "key.format",
                 "key.fields", "key.fields-prefix", "dead_letter.connect-headers")
#: An ``avro-confluent`` output's serializer options, as Confluent's serializers name them,
#: and the subjects named outright (Flink's ``'[key.|value.]avro-confluent.subject'``).
SERIALIZER_OPTIONS = ("auto.register.schemas", "use.latest.version", "key.subject.name.strategy",
                      "value.subject.name.strategy", "key.subject", "value.subject")
VIEW_OPTIONS = ("topic", "format", "encoding", "schema-registry.url", "key", "key.format",
                "partitions", "replicas", "retention", *SERIALIZER_OPTIONS)
#: Where a new checkpoint starts reading a table's topic (Flink's Kafka connector's names).
STARTUP_MODES = ("earliest-offset", "latest-offset", "timestamp")
VIEW_ENCODINGS = ("avro", "avro-confluent", "json", "json-registry", "protobuf-confluent",
                  "debezium-json", "raw")
TABLE_FORMATS = ("avro", "avro-confluent", "json", "json-registry", "protobuf-confluent", "raw",
                 *CHANGELOG_FORMATS)
VIEW_FORMATS = ("upsert", "changelog", "append")


def compile_program(path: str | Path, text: str | None = None,
                    composition: Composition | None = None) -> Circuit:
    """Compile a program file (SPEC part L). ``text`` overrides reading ``path``;
    ``composition`` places stage boundaries (app/program/stages.py, the planner's).

    Raises:
        ProgramError: every error found, each with file:line:column and a fix.
    """
    program = str(path)
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ProgramError([Diagnostic("error", Position(program, 1, 1),
                                           f"cannot read the program: {exc.strerror}")]) from exc
        except UnicodeDecodeError as exc:
            raise ProgramError([Diagnostic("error", Position(program, 1, 1),
                                           "the program is not UTF-8 text")]) from exc
    return compile_text(program, text, composition)


@dataclass(frozen=True)
class _StageSource:
    """A boundary's rows as the tables of later stages carry them."""

    columns: tuple[Column, ...]
    time_attributes: tuple[TimeAttribute, ...]
    position: Position
    joined: Mapping[str, Mapping[str, str]]
    primary_key: tuple[str, ...]
    #: The relation's rows are updated (S18): the boundary carries its changelog.
    updating: bool = False


def compile_text(program: str, text: str, composition: Composition | None = None) -> Circuit:
    return _Compiler(SourceText(program, text), composition).run()


class _Compiler:
    def __init__(self, source: SourceText, composition: Composition | None = None) -> None:
        self.source = source
        self.composition = composition or Composition()
        #: Each boundary's rows as its readers see them (stages.py), and its table per stage
        #: that reads it, made when a view of that stage first reads it.
        self.stage_sources: dict[str, _StageSource] = {}
        self.stage_inputs: dict[tuple[str, int], Relation] = {}
        self.errors: list[Diagnostic] = []
        self.warnings: list[Diagnostic] = []
        #: The program calls CURRENT_WATERMARK (set from its tokens by :meth:`run`).
        self.reads_watermarks = False
        self.tables: list[Table] = []
        self.views: list[View] = []
        self.relations: dict[str, Relation] = {}
        self.declared: dict[str, Position] = {}
        #: Each WITH query's name -> the view whose query it belongs to (for errors only).
        self.with_owners: dict[str, str] = {}

    def error(self, failure: CompileFailure) -> None:
        self.errors.append(Diagnostic("error", failure.position, failure.message, failure.fix))

    def run(self) -> Circuit:
        try:
            tokens = tokenize(self.source)
        except CompileFailure as failure:
            raise ProgramError([Diagnostic("error", failure.position, failure.message,
                                           failure.fix)]) from failure
        # A program that calls CURRENT_WATERMARK: its tables' rows carry their waterlines.
        self.reads_watermarks = any(
            t.is_word("CURRENT_WATERMARK") and i + 1 < len(tokens) and tokens[i + 1].is_punct("(")
            for i, t in enumerate(tokens))
        decls: list[Decl] = []
        for statement in split_statements(tokens):
            try:
                decls.extend(parse_statement(self.source, statement))
            except CompileFailure as failure:
                self.error(failure)
        self.source.dialect = self._dialect(decls)
        inserts: dict[str, list[InsertDecl]] = {}
        for decl in decls:
            if isinstance(decl, InsertDecl):
                inserts.setdefault(decl.table, []).append(decl)
        if not decls and not self.errors:
            self.errors.append(Diagnostic("error", self.source.position(0),
                                          "the program has no statements",
                                          "add CREATE TABLE and CREATE VIEW statements"))
        view_lateness: dict[str, list[LatenessDecl]] = {}
        for decl in decls:
            if isinstance(decl, LatenessDecl):
                view_lateness.setdefault(decl.view, []).append(decl)
        view_names = {d.name for d in decls if isinstance(d, ViewDecl)}
        table_names = {d.name for d in decls if isinstance(d, TableDecl)}
        for name, items in view_lateness.items():
            if name not in view_names:
                fix = ("put LATENESS on the table's column definition: "
                       "date_time TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR"
                       if name in table_names else "LATENESS view.column names a view")
                self.error(CompileFailure(items[0].position, f"unknown view {name} in LATENESS",
                                          fix))
        failed: set[str] = set()
        sinks: dict[str, TableDecl] = {}
        for decl in decls:
            try:
                if isinstance(decl, TableDecl) and decl.name in inserts:
                    self._declare(decl.name, decl.position, "table")
                    sinks[decl.name] = self._sink_table(decl)
                elif isinstance(decl, TableDecl):
                    self._table(decl)
                elif isinstance(decl, ViewDecl):
                    self._view(decl, view_lateness.get(decl.name, []))
                elif isinstance(decl, InsertDecl) and decl is inserts[decl.table][-1]:
                    self._insert(sinks.get(decl.table), inserts[decl.table])
            except CompileFailure as failure:
                if isinstance(decl, (TableDecl, ViewDecl)):
                    failed.add(decl.name)
                # A view over a relation that already failed would only repeat that error.
                if not any(failure.message == f"unknown table or view {name}"
                           for name in failed):
                    self.error(failure)
        if self.errors:
            raise ProgramError(sorted(self.errors, key=lambda d: (d.position.line,
                                                                 d.position.column)))
        # A boundary's table of a stage whose views saw it in scope but did not read it.
        read = {source for view in self.views for source in view.sources}
        # A changelog table's latest row per key that no view reads (ADR 0030).
        self.views = [v for v in self.views if not v.reads_deletions or v.name in read
                      or v.name in self.composition.boundaries]
        tables = [t for t in self.tables if t.stage_input is None or t.name in read]
        return mark_processing_windows(Circuit(
            self.source.path, tuple(tables), tuple(self.views), tuple(self.warnings),
            self.source.text, cast(Literal["tidemark", "flink"], self.source.dialect)))

    def _dialect(self, decls: Sequence[Decl]) -> str:
        """Flink's dialect when a table names a ``'connector'`` (Flink's way to bind a table
        to Kafka), unless ``SET 'tidemark.dialect'`` says otherwise; also reads the SET
        statements (a key that cannot change results is a warning, another an error) and
        checks that each statement set ends (docs/porting-from-flink.md)."""
        dialect = ("flink" if any(isinstance(d, TableDecl) and connector_of(d) is not None
                                  for d in decls) else "tidemark")
        chosen: str | None = None
        open_set: StatementSetDecl | None = None
        for decl in decls:
            try:
                if isinstance(decl, SetDecl):
                    said, warning = set_statement(decl)
                    chosen = said or chosen
                    if warning is not None:
                        self.warnings.append(warning)
                elif isinstance(decl, StatementSetDecl) and decl.begins:
                    if open_set is not None:
                        raise CompileFailure(decl.position, "a statement set in a statement "
                                             "set", "END the first one before BEGIN")
                    open_set = decl
                elif isinstance(decl, StatementSetDecl):
                    if open_set is None:
                        raise CompileFailure(decl.position, "END without a statement set",
                                             "remove it, or open the set with EXECUTE "
                                             "STATEMENT SET BEGIN")
                    open_set = None
                elif open_set is not None and not isinstance(decl, InsertDecl):
                    raise CompileFailure(decl.position, "a statement set holds INSERT INTO "
                                         "statements only", "END the statement set before it")
            except CompileFailure as failure:
                self.error(failure)
        if open_set is not None:
            self.error(CompileFailure(open_set.position, "the statement set has no END",
                                      "close it with END;"))
        return chosen or dialect

    # -- names ------------------------------------------------------------------------------

    def _declare(self, name: str, position: Position, what: str) -> None:
        if name in self.declared:
            first = self.declared[name]
            raise CompileFailure(position, f"duplicate name {name}: already declared at line "
                                 f"{first.line}", f"rename this {what}")
        reserved = reserved_name(name)
        if reserved is not None:
            raise CompileFailure(position, reserved, f"rename this {what}")
        self.declared[name] = position

    # -- tables (SPEC L1, L2) -----------------------------------------------------------------

    def _table(self, decl: TableDecl) -> None:
        self._declare(decl.name, decl.position, "table")
        decl = _with_watermarks(decl)
        bootstrap: str | None = None
        key_in_value = False
        upserts = False
        if connector_of(decl) is not None:
            flink = source_options(decl)
            self.warnings.extend(flink.warnings)
            decl = replace(decl, options=flink.options)
            bootstrap = flink.bootstrap_servers
            key_in_value = flink.key_in_value
            upserts = flink.connector == "upsert-kafka"
        columns: list[Column] = []
        lateness: list[Lateness] = []
        seen: set[str] = set()
        read = [Column(c.name, c.type) for c in decl.columns
                if c.computed is None and not c.processing_time]
        format_option = next((o for o in decl.options if o.key == "format"), None)
        changelog = (format_option is not None and isinstance(format_option.value, str)
                     and format_option.value in CHANGELOG_FORMATS)
        for col in decl.columns:
            if col.name in seen:
                raise CompileFailure(col.position, f"duplicate column {col.name} in table "
                                     f"{decl.name}", "rename one of them")
            seen.add(col.name)
            if col.computed is not None:
                column = self._computed_column(decl.name, col, read)
                col = replace(col, type=column.type)
                columns.append(column)
            else:
                columns.append(Column(col.name, col.type,
                                      _metadata_key(decl.name, col, changelog),
                                      processing_time=col.processing_time))
            if col.lateness is not None:
                assert col.lateness_position is not None
                lateness.append(Lateness(col.name, _lateness_amount(
                    decl.name, col.name, col.type.name, col.type.nullable, col.lateness,
                    col.lateness_position, table=True)))
        options = self._options(decl.options, TABLE_OPTIONS, "table", decl.position)
        topic = options.get("topic")
        if topic is None:
            raise CompileFailure(decl.position, f"table {decl.name} has no 'topic'",
                                 "add WITH ('topic' = '<kafka topic>')")
        topic_value = self._string(topic)
        fmt = self._string(options["format"]) if "format" in options else "avro"
        if fmt not in TABLE_FORMATS:
            assert "format" in options
            raise CompileFailure(options["format"].value_position, f"bad table format '{fmt}'",
                                 f"use one of {', '.join(TABLE_FORMATS)}")
        dead_letter = (self._string(options["dead_letter"]) if "dead_letter" in options
                       else f"{topic_value}.dlq")
        if dead_letter == topic_value:
            raise CompileFailure(options["dead_letter"].value_position,
                                 "the dead-letter topic must differ from the input topic")
        connect_headers = False
        if "dead_letter.connect-headers" in options:
            option = options["dead_letter.connect-headers"]
            flag = self._string(option).strip().lower()
            if flag not in ("true", "false"):
                raise CompileFailure(option.value_position,
                                     f"'dead_letter.connect-headers' is '{flag}'",
                                     "write 'true' (Kafka Connect's __connect.errors.* headers "
                                     "beside Tidemark's) or 'false'")
            connect_headers = flag == "true"
        max_future_ms: int | None = None
        if "max_future" in options:
            option = options["max_future"]
            if not isinstance(option.value, IntervalDecl):
                raise CompileFailure(option.value_position, "'max_future' must be an INTERVAL",
                                     "write 'max_future' = INTERVAL '1' HOUR")
            if not any(c.type.name == "TIMESTAMP" and c.name in {lt.column for lt in lateness}
                       for c in columns):
                raise CompileFailure(option.position, "'max_future' needs a TIMESTAMP column "
                                     "with LATENESS", "add LATENESS to the event-time column")
            max_future_ms = option.value.amount
        primary_key = _primary_key(decl, columns)
        key = table_key(decl.name, options, columns, key_in_value)
        columns = list(key.columns)
        watermarks: dict[str, Column] = {}
        if self.reads_watermarks:
            # Each row carries the waterlines its step started with, for CURRENT_WATERMARK.
            by_name = {c.name: c for c in columns}
            watermarks = {lt.column: current_watermark_column(decl.name, by_name[lt.column])
                          for lt in lateness}
            columns += watermarks.values()
        registry = self._registry_url(options.get("schema-registry.url"),
                                      "avro-confluent" if key.format == "avro-confluent" else fmt,
                                      "table")
        # Metadata columns come from the Kafka record, not its value, and a processing-time
        # column from the step: no schema field.
        value_columns = [c for c in columns if c.metadata is None and not c.processing_time
                         and c.computed is None]
        if fmt == "raw":
            _raw_value(decl, options, value_columns)
        schema: dict[str, Any]
        if "schema" in options:
            schema = self._schema_file(options["schema"], value_columns, decl.name)
        else:
            schema = record_schema(decl.name, value_columns)
        table = Table(decl.name, tuple(columns), topic_value,
                      cast(Literal["avro", "avro-confluent", "json", "json-registry",
                                   "protobuf-confluent", "raw", "debezium-json",
                                   "debezium-avro-confluent"], fmt),
                      schema, dead_letter,
                      tuple(lateness), max_future_ms, decl.position, registry,
                      *self._startup(options), primary_key=primary_key,
                      bootstrap_servers=bootstrap, key_format=key.format,
                      key_fields=key.fields, key_schema=key.schema,
                      dead_letter_connect_headers=connect_headers, upserts=upserts)
        self.tables.append(table)
        self.relations[decl.name] = Relation(
            decl.name, tuple(Column(c.name, c.type) for c in table.columns
                             if c not in watermarks.values()),
            tuple(TimeAttribute(name, decl.name, name, "forwarded") for name in
                  [lt.column for lt in lateness] + [c.name for c in columns if c.processing_time]),
            True, "table", table.primary_key,
            processing_time=tuple(c.name for c in columns if c.processing_time),
            current_watermarks=watermarks)
        if table.changelog and not table.primary_key:
            raise CompileFailure(decl.position, f"table {decl.name} reads change events "
                                 f"('format' = '{fmt}'), which update and delete rows by key, "
                                 "but has no PRIMARY KEY",
                                 "add PRIMARY KEY (<the database table's key columns>) NOT "
                                 "ENFORCED")
        if table.changelog:
            self.relations[decl.name] = replace(self.relations[decl.name],
                                                latest=self._latest_view(table))
        if decl.name in self.composition.boundaries:
            if table.deletes_keys:
                # A view sees no deletions (S16): a boundary would drop them.
                raise CompileFailure(decl.position, f"table {decl.name} deletes keys (by "
                                     "tombstone or delete event), which a later query cannot "
                                     "read through a stage boundary",
                                     "read it in the query of its table")
            writer = table_passthrough(self.composition, table)
            self.declared[writer.name] = decl.position
            self.views.append(writer)
            self._stage_input(decl.name, writer.columns, writer.time_attributes, decl.position,
                              primary_key=table.primary_key)

    def _latest_view(self, table: Table) -> str:
        """The generated local view ``<table>.latest`` of a changelog table: its latest row
        per key (ADR 0030), which views read in the table's place but as the versioned side
        of a temporal join. ``GROUP BY`` the PRIMARY KEY, each other column ``LATEST(c, by)``
        (by the first LATENESS column, ties to the later arrival, as a temporal join's
        versions; by arrival alone without one), and a key whose latest change is a deletion
        has no row (HAVING on its deletion flag). Updating, with no time attribute (a key's
        row changes whenever a change of it comes) and one row per key, never freed. It
        joins the circuit where the table is declared and leaves it unless a view reads it."""
        name = f"{table.name}.latest"
        self.declared[name] = table.position
        read = self.relations[table.name].columns
        by: Expr = Literal_(0, SqlType("BIGINT", False))
        if table.lateness:
            first = table.column(table.lateness[0].column)
            by = ColumnRef(first.name, first.type)
        flag = SqlType("BOOLEAN", False)
        latest = [(c.name, AggCall(LATEST, (ColumnRef(c.name, c.type), by), False, c.type))
                  for c in read if c.name not in table.primary_key]
        latest.append((DELETION_COLUMN, AggCall(LATEST, (ColumnRef(DELETION_COLUMN, flag), by),
                                                False, flag)))
        columns = tuple(Column(c.name, c.type) for c in read)
        operators = (
            Aggregate(tuple((k, ColumnRef(k, table.column(k).type)) for k in table.primary_key),
                      tuple(latest)),
            Filter(Call("NOT", (ColumnRef(DELETION_COLUMN, flag),), flag)),
            Project(tuple((c.name, ColumnRef(c.name, c.type)) for c in columns)),
        )
        state = StateBound("unbounded", None, f"one row per key of {table.name} (its latest "
                           "change, a deletion included), never freed")
        view = View(name, (table.name,), operators, columns, table.primary_key, (),
                    EmitPolicy(), None, state, table.position)
        self.views.append(self._stage_writer(view, table.position, True))
        self.relations[name] = Relation(name, columns, (), False, "view")
        if name in self.composition.boundaries:
            self._stage_input(name, columns, (), table.position, updating=True)
        return name

    def _computed_column(self, table: str, col: ColumnDecl, read: Sequence[Column]) -> Column:
        """``name AS expr``: computed from the record's columns (value, key and metadata
        ones) when it is decoded, before the late gate (docs/language.md, Computed columns).
        Its type is the expression's; NOT NULL when its LATENESS, WATERMARK or PRIMARY KEY
        says so (a NULL then makes the record an invalid dead letter, S7)."""
        assert col.computed is not None
        what = f"computed column {table}.{col.name}"
        expr = column_expression(self.source, col.computed, read, what)
        written = self.source.text[col.computed[0].start:col.computed[-1].end]
        return Column(col.name, expr.type.with_nullable(col.type.nullable),
                      computed=Computed(expr, written))

    # -- INSERT INTO (Flink SQL; docs/porting-from-flink.md) --------------------------------------

    def _sink_table(self, decl: TableDecl) -> TableDecl:
        """A table an INSERT INTO writes: no input, the output view of its INSERTs, whose
        columns are the table's (checked here; compiled at its last INSERT)."""
        if connector_of(decl) is None:
            raise CompileFailure(decl.position, f"table {decl.name} is an input (it has no "
                                 "'connector'), so INSERT INTO cannot write it",
                                 "declare the table INSERT INTO writes with 'connector' = "
                                 "'kafka' (or 'upsert-kafka'), or write the query as CREATE "
                                 f"VIEW {decl.name} WITH ('topic' = ...) AS SELECT ...")
        decl = _with_watermarks(decl)
        for col in decl.columns:
            if col.metadata is not None or col.processing_time or col.computed is not None:
                raise CompileFailure(col.position, f"column {decl.name}.{col.name} is not "
                                     "written by INSERT INTO: writing Kafka metadata (or a "
                                     "processing time, or a computed column) is not supported",
                                     "remove the column from the table INSERT INTO writes")
        return decl

    def _insert(self, table: TableDecl | None, inserts: Sequence[InsertDecl]) -> None:
        """The output view of ``table`` (Flink's sink table): its one INSERT's query, or the
        UNION ALL of its INSERTs' queries, each a generated local view ``table.insert<i>``
        (as several INSERT INTO one table write in Flink), conformed to its columns."""
        first = inserts[0]
        if table is None:
            if first.table in self.declared:
                if any(t.name == first.table for t in self.tables) or any(
                        v.name == first.table for v in self.views):
                    raise CompileFailure(first.table_position, f"INSERT INTO {first.table}, "
                                         "which is not a table declared with a 'connector'",
                                         "INSERT INTO writes a table declared with "
                                         "'connector' = 'kafka' (or 'upsert-kafka')")
                return  # its CREATE TABLE failed, with its own error
            raise CompileFailure(first.table_position, f"unknown table {first.table} in "
                                 "INSERT INTO", "declare it first: CREATE TABLE "
                                 f"{first.table} (...) WITH ('connector' = 'kafka', ...)")
        for insert in inserts:
            if insert.columns and [n for n, _ in insert.columns] != [
                    c.name for c in table.columns]:
                raise CompileFailure(insert.columns[0][1], f"INSERT INTO {table.name} "
                                     "(columns) must list every column of the table, in its "
                                     "order: " + ", ".join(c.name for c in table.columns),
                                     "list them all in order, or leave the list out")
        key = tuple(n for n, _ in table.primary_key.columns) if table.primary_key else ()
        flink = sink_options(table, key)
        self.warnings.extend(flink.warnings)
        columns = tuple(Column(c.name, c.type) for c in table.columns)
        united: PlannedQuery | None = None
        if len(inserts) > 1:
            branches: list[PlannedQuery] = []
            scope = dict(self.relations)
            for number, insert in enumerate(inserts, start=1):
                item = Derived("insert", f"insert{number}", insert.position,
                               insert.query_tokens, "", parent=table.name, columns=columns)
                relation = self._derived_view(table.name, item, self.relations, number, ())
                scope[relation.name] = relation
                select = exp.select(exp.Star()).from_(exp.Table(this=exp.to_identifier(
                    relation.name, quoted=True)))
                branches.append(plan_parsed(self.source, insert.head_tokens, select, scope,
                                            table.name))
            united = unite(self.source, [i.head_tokens for i in inserts], branches, table.name)
        view = ViewDecl(table.name, first.position, False, flink.options,
                        inserts[-1].query_tokens, None)
        self.relations[table.name] = self._local_or_output_view(
            view, (), self.relations, None, _Sink(columns, flink, united, first.position))

    def _sink_format(self, decl: ViewDecl, sink: _Sink, insert_only: bool) -> OptionDecl:
        """The output format of a table INSERT INTO writes (S13): ``'kafka'`` appends, so
        its query must be insert-only; ``'upsert-kafka'`` is keyed by its PRIMARY KEY: an
        upsert of an updating aggregate (keyed by its GROUP BY columns), else each row
        appended under its key, the same records."""
        encoding = next((o for o in sink.table.options if o.key == "encoding"), None)
        if encoding is not None and self._string(encoding) == "debezium-json":
            # Change events carry updates and deletes: Flink's 'kafka' connector takes an
            # updating query in this format.
            return OptionDecl("format", decl.position,
                              "append" if insert_only else "changelog", decl.position)
        if sink.table.connector == "kafka" and not insert_only:
            raise CompileFailure(decl.position, f"INSERT INTO {decl.name}: the query updates "
                                 "its rows (a GROUP BY without a window, or an OUTER JOIN "
                                 "without a time bound), which a 'kafka' "
                                 "table cannot take (Flink: \"doesn't support consuming update "
                                 "changes\")", f"declare {decl.name} 'connector' = "
                                 "'upsert-kafka' with a PRIMARY KEY of the GROUP BY columns, "
                                 "or aggregate by window (GROUP BY window_start, window_end)")
        fmt = "upsert" if sink.table.connector == "upsert-kafka" and not insert_only else (
            "append")
        return OptionDecl("format", decl.position, fmt, decl.position)

    # -- stage boundaries (SPEC S19, ADR 0023) --------------------------------------------------

    def _stage_input(self, relation: str, columns: Sequence[Column],
                     time_attributes: Sequence[TimeAttribute], position: Position,
                     joined: Mapping[str, Mapping[str, str]] | None = None,
                     primary_key: tuple[str, ...] = (), updating: bool = False) -> None:
        """Keep what the tables later stages read ``relation`` through are made of."""
        self.stage_sources[relation] = _StageSource(tuple(columns), tuple(time_attributes),
                                                    position, joined or {}, primary_key,
                                                    updating)

    def _stage_read(self, relation: str, stage: int) -> Relation:
        """The table views of ``stage`` read ``relation`` through (app/program/stages.py):
        one per reading stage, so that a view moved on from a crowded query gets a query of
        its own (app/runtime/planner/compose.py)."""
        made = self.stage_inputs.get((relation, stage))
        if made is not None:
            return made
        source = self.stage_sources[relation]
        event_time = [a for a in source.time_attributes
                      if not processing_time_attribute(a, self.relations)]
        views = {v.name: v for v in self.views}
        start = next((a.column for a in event_time if a.kind == "window_start"), None)
        span = (window_span(views, views[relation], start)
                if start is not None and relation in views else None)
        later = stage - self.composition.stage(relation) - 1
        table, attributes = stage_table(self.composition, relation, source.columns, event_time,
                                        span, source.position, source.primary_key, later,
                                        source.updating)
        self.declared[table.name] = source.position
        self.tables.append(table)
        lateness = {x.column for x in table.lateness}
        # A window Top-N ranks the rows of one window end (app/program/top_n.py): the
        # relation's own, or one a filter of a boundary's table passes on.
        passed = self.relations[relation].window_ends if relation in self.relations else ()
        ends = tuple(a.column for a in event_time
                     if (a.kind == "window_end" or a.column in passed) and a.column in lateness)
        # The reader of an updating relation's changelog sees its columns, and its rows
        # as changes (S18): ``undo`` is the runtime's, never a column of the reader's.
        made = Relation(table.name, source.columns, attributes, not source.updating, "table",
                        source.primary_key, joined=source.joined, window_ends=ends)
        self.stage_inputs[(relation, stage)] = made
        return made

    def _staged(self, name: str, scope: dict[str, Relation]) -> dict[str, Relation]:
        """``scope`` as view ``name`` sees it: each boundary of an earlier stage read through
        its table."""
        if not self.stage_sources:
            return scope
        stage = self.composition.stage(name)
        return {key: (self._stage_read(rel.name, stage)
                      if rel.name in self.stage_sources
                      and self.composition.stage(rel.name) < stage else rel)
                for key, rel in scope.items()}

    def _stage_writer(self, view: View, position: Position, updating: bool) -> View:
        """A boundary view with its internal output: itself when it writes no topic of its
        own, else beside it a twin that computes the same rows for the internal topic."""
        if not self.composition.boundaries or view.name not in self.composition.boundaries:
            return view
        output = stage_output(self.composition, view.name, view.columns, updating)
        if view.output is None:
            return replace(view, output=output)
        twin = replace(view, name=stage_writer_name(view.name), output=output)
        self.declared[twin.name] = position
        self.views.append(twin)
        return view

    def _startup(self, options: dict[str, OptionDecl],
                 ) -> tuple[Literal["earliest-offset", "latest-offset", "timestamp"], int | None]:
        """A table's ``'scan.startup.mode'`` and, for ``'timestamp'``, its
        ``'scan.startup.timestamp-millis'`` (epoch ms), as Flink's Kafka connector names them."""
        mode_option = options.get("scan.startup.mode")
        millis_option = options.get("scan.startup.timestamp-millis")
        mode = self._string(mode_option) if mode_option is not None else "earliest-offset"
        if mode not in STARTUP_MODES:
            assert mode_option is not None
            fix = f"use one of {', '.join(repr(m) for m in STARTUP_MODES)}"
            if mode in ("group-offsets", "specific-offsets"):
                fix = ("Tidemark keeps its offsets in the checkpoint, not in a consumer group: "
                       + fix)
            raise CompileFailure(mode_option.value_position,
                                 f"bad 'scan.startup.mode' '{mode}'", fix)
        known = cast(Literal["earliest-offset", "latest-offset", "timestamp"], mode)
        if mode != "timestamp":
            if millis_option is not None:
                raise CompileFailure(millis_option.position, "'scan.startup.timestamp-millis' "
                                     "needs 'scan.startup.mode' = 'timestamp'",
                                     "add 'scan.startup.mode' = 'timestamp', or remove it")
            return known, None
        if millis_option is None:
            assert mode_option is not None
            raise CompileFailure(mode_option.position, "'scan.startup.mode' = 'timestamp' "
                                 "needs 'scan.startup.timestamp-millis'",
                                 "add 'scan.startup.timestamp-millis' = '<epoch milliseconds>'")
        text = self._string(millis_option).strip()
        if not text.isdigit():
            raise CompileFailure(millis_option.value_position,
                                 f"'scan.startup.timestamp-millis' '{text}' is not a "
                                 "non-negative integer",
                                 "write epoch milliseconds, e.g. '1767225600000' for "
                                 "2026-01-01T00:00:00Z")
        return known, int(text)

    def _options(self, options: Sequence[OptionDecl], allowed: Sequence[str], what: str,
                 position: Position) -> dict[str, OptionDecl]:
        found: dict[str, OptionDecl] = {}
        for option in options:
            if option.key not in allowed:
                raise CompileFailure(option.position, f"unknown {what} option '{option.key}'",
                                     f"{what} options are {', '.join(repr(a) for a in allowed)}")
            if option.key in found:
                raise CompileFailure(option.position, f"duplicate option '{option.key}'")
            found[option.key] = option
        del position
        return found

    def _registry_url(self, option: OptionDecl | None, fmt: str,
                      what: str) -> dict[str, str] | None:
        """The registry client settings a ``'schema-registry.url'`` option gives (None
        without one); the option belongs to ``avro-confluent`` tables and views only."""
        if option is None:
            return None
        key = "format" if what == "table" else "encoding"
        if fmt not in REGISTRY_FORMATS:
            kinds = ("'avro-confluent', 'json-registry', 'protobuf-confluent' or "
                     "'debezium-avro-confluent'")
            raise CompileFailure(option.position, "'schema-registry.url' is an option of "
                                 f"'{key}' = {kinds} {what}s",
                                 f"declare '{key}' = 'avro-confluent' or remove the option")
        url = self._string(option)
        if not url.startswith(("http://", "https://")):
            raise CompileFailure(option.value_position, f"'schema-registry.url' {url} is "
                                 "not an http:// or https:// URL",
                                 "write 'schema-registry.url' = 'http://host:port'")
        return {"url": url}

    def _serializer_options(self, options: dict[str, OptionDecl],
                            registry: bool) -> tuple[tuple[str, str], ...]:
        """A view's Confluent serializer options (:data:`SERIALIZER_OPTIONS`), checked: a
        flag is 'true' or 'false', a strategy one of Confluent's (kept by its bare class
        name), a subject named outright not beside its side's strategy; only an output with
        an ``avro-confluent`` key or value takes them."""
        found: list[tuple[str, str]] = []
        for name in SERIALIZER_OPTIONS:
            option = options.get(name)
            if option is None:
                continue
            if not registry:
                raise CompileFailure(option.position, f"'{name}' is an option of outputs "
                                     "with 'encoding' or 'key.format' 'avro-confluent' (or "
                                     "'encoding' 'json-registry' or 'protobuf-confluent')",
                                     "declare 'encoding' = 'avro-confluent' or remove it")
            value = self._string(option).strip()
            if name.endswith(".subject"):
                # A subject named outright, as Flink's 'avro-confluent.subject' names it.
                strategy = options.get(f"{name}.name.strategy")
                if strategy is not None:
                    raise CompileFailure(strategy.position, f"'{name}' names the subject, so "
                                         f"'{name}.name.strategy' has none to choose",
                                         "keep one of the two")
            elif name.endswith("strategy"):
                try:
                    value = strategy_name(value)
                except ValueError as exc:
                    raise CompileFailure(option.value_position, str(exc)) from None
            elif value.lower() not in ("true", "false"):
                raise CompileFailure(option.value_position, f"'{name}' is '{value}'",
                                     "write 'true' or 'false'")
            else:
                value = value.lower()
            found.append((name, value))
        return tuple(found)

    def _string(self, option: OptionDecl) -> str:
        if not isinstance(option.value, str):
            raise CompileFailure(option.value_position, f"option '{option.key}' takes a quoted "
                                 "string")
        if not option.value.strip():
            raise CompileFailure(option.value_position, f"option '{option.key}' is empty")
        return option.value

    def _schema_file(self, option: OptionDecl, columns: Sequence[Column],
                     table: str) -> dict[str, Any]:
        raw = self._string(option)
        path = _resolve_schema(raw, self.source.path)
        if path is None:
            raise CompileFailure(option.value_position, f"schema file {raw} not found",
                                 "relative paths resolve against the working directory, the "
                                 "program's parent directory, then the program's directory; "
                                 "or drop 'schema' to derive it from the columns")
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CompileFailure(option.value_position, f"schema file {raw} cannot be read: "
                                 f"{exc.strerror or exc}", "fix its permissions or the "
                                 "path") from exc
        except UnicodeDecodeError as exc:
            raise CompileFailure(option.value_position, f"schema file {raw} is not UTF-8 "
                                 "text") from exc
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CompileFailure(option.value_position, f"schema file {raw} is not valid JSON: "
                                 f"{exc}") from exc
        try:
            import fastavro

            fastavro.parse_schema(schema)
        except Exception as exc:  # noqa: BLE001 - fastavro raises several unrelated types
            raise CompileFailure(option.value_position, f"schema file {raw} is not a valid "
                                 f"Avro schema: {exc}") from exc
        problems = schema_mismatches(schema, columns)
        if problems:
            raise CompileFailure(option.value_position, f"schema file {raw} does not match "
                                 f"table {table}: " + "; ".join(problems),
                                 "make the column types and NOT NULL match the schema's fields")
        return cast(dict[str, Any], schema)

    # -- views (SPEC L3-L6, S10, S11) ---------------------------------------------------------

    def _view(self, decl: ViewDecl, lateness_decls: Sequence[LatenessDecl]) -> None:
        self._declare(decl.name, decl.position, "view")
        start = len(self.views)
        try:
            relation = self._local_or_output_view(decl, lateness_decls, self.relations, None)
        except CompileFailure as failure:
            # The views generated for its WITH queries and subqueries go with it.
            del self.views[start:]
            name, owner = next(((w, v) for w, v in self.with_owners.items()
                                if failure.message == f"unknown table or view {w}"), ("", ""))
            if not owner or owner == decl.name:
                raise
            raise CompileFailure(failure.position, failure.message,
                                 f"{name} is a WITH query of view {owner}, read only by that "
                                 f"view's query: to share it, declare it as CREATE LOCAL VIEW "
                                 f"{name} AS SELECT ...") from failure
        self.relations[decl.name] = relation

    def _local_or_output_view(self, decl: ViewDecl, lateness_decls: Sequence[LatenessDecl],
                              scope: dict[str, Relation], derived: Derived | None,
                              sink: _Sink | None = None) -> Relation:
        """Compile one view, append it to the circuit after the views generated for its WITH
        queries and subqueries, and return it as readers see it. ``derived`` is set for those
        generated views: local views over ``scope`` (the relations and WITH names their query
        can see). ``sink`` is set for the view of a table INSERT INTO writes."""
        options = self._options(decl.options, VIEW_OPTIONS, "view", decl.position)
        scope = self._staged(decl.name, scope)
        if sink is not None and sink.united is not None:
            planned = sink.united
        elif derived is not None and derived.kind == "window":
            planned = plan_window_side(self.source, decl.query_tokens, scope, decl.name)
        elif derived is not None and derived.kind == "aggregate":
            assert derived.source is not None and derived.query is not None
            planned = plan_parsed(derived.source, decl.query_tokens, derived.query, scope,
                                  decl.name)
        elif derived is not None and derived.kind == "join":
            assert derived.source is not None
            planned = self._plan_chain(decl.name, derived.source, decl.query_tokens, scope,
                                       derived.keep, derived.parent)
        else:
            planned = self._plan(decl.name, decl.query_tokens, scope)
        if derived is not None and derived.kind == "insert":
            planned, warnings = conform(planned, derived.columns, derived.parent,
                                        derived.position)
            self.warnings.extend(warnings)
        elif sink is not None and sink.united is None:
            planned, warnings = conform(planned, sink.columns, decl.name, sink.position)
            self.warnings.extend(warnings)
        upsert_key = self._upsert_key(decl, options, planned, sink)
        upsert = (options, sink)
        if upsert_key:
            # The view's changes, local; its upsert is the generated view that reads them.
            options, sink = {}, None
        emit = _emit_policy(decl)
        final_by_default = (self.source.flink and derived is None and decl.emit is None
                            and planned.aggregate and planned.window_key is not None)
        if final_by_default:
            # Flink's window aggregation writes one final row per window, append-only
            # (docs/semantics.md, Flink dialect): EMIT AFTER WATERMARK as its default.
            emit = EmitPolicy(after_watermark=True)
        if derived is not None:
            emit = self._derived_emit(derived, planned)
        if planned.ranking is not None:
            return self._ranking(decl, derived, planned)
        if planned.top_n is not None and decl.emit is not None:
            raise CompileFailure(decl.emit.position, f"EMIT on view {decl.name}, a window "
                                 "Top-N", "remove it: a window Top-N writes each window's rows "
                                 "once, final, when the window is complete")
        if (emit.after_watermark or emit.delay_ms is not None) and not planned.aggregate:
            emit = self._final_rows_emit(decl, emit)
        after_watermark = emit.after_watermark
        if planned.window is not None and planned.window.kind == "SESSION" and not (
                emit.after_watermark and emit.delay_ms is None and not emit.stream):
            raise CompileFailure(decl.emit.position if decl.emit is not None else decl.position,
                                 f"view {decl.name} aggregates SESSION windows, which are known "
                                 "only once they close: its rows can only be final",
                                 "end the view with EMIT AFTER WATERMARK")
        if planned.retracting and after_watermark:
            self._final_over_changes(decl, planned)
        state = self._state(decl, planned, after_watermark)
        insert_only = (not planned.aggregate or after_watermark) and not planned.updating

        view_lateness, time_attributes = self._view_lateness(decl, planned, lateness_decls)
        if sink is not None:
            options = {**options, "format": self._sink_format(decl, sink, insert_only)}
        elif final_by_default and "topic" in options and "format" not in options:
            options = {**options, "format": OptionDecl("format", decl.position, "append",
                                                       decl.position)}
        output = self._output(decl, options, planned, emit, insert_only,
                              None if sink is None else sink.table)
        if output is not None and sink is not None:
            output = replace(output, bootstrap_servers=sink.table.bootstrap_servers)
        view = View(decl.name, planned.sources or (planned.source,), tuple(planned.operators),
                    tuple(planned.columns),
                    planned.key, time_attributes, emit, output, state, decl.position,
                    view_lateness)
        at = len(self.views)
        view = self._stage_writer(view, decl.position, not insert_only)
        self.views.insert(at, view)
        # A view that holds its changes has no time attribute its readers can free on (S11).
        read_times = () if view.holds_changes else time_attributes
        delayed = "" if insert_only else self._delayed_upstream(decl.name) or ""
        relation = Relation(decl.name, view.columns, read_times, insert_only, "view",
                            joined=planned.joined, delayed=delayed,
                            window_ends=self._window_ends_passed(planned, read_times))
        if view.name in self.composition.boundaries:
            self._stage_input(view.name, view.columns, read_times, decl.position,
                              planned.joined, updating=not insert_only)
        if upsert_key:
            self._upsert_view(decl, *upsert, relation, upsert_key)
        return relation

    def _upsert_key(self, decl: ViewDecl, options: dict[str, OptionDecl],
                    planned: PlannedQuery, sink: _Sink | None) -> tuple[str, ...]:
        """The key an upsert of updating rows that do not aggregate is kept by (ADR 0032):
        an upsert-kafka table's PRIMARY KEY, or an ``'upsert'`` view's ``'key'``; empty for
        any other view (an aggregate is its own upsert, by its GROUP BY columns)."""
        if planned.aggregate or not planned.updating or (decl.emit is not None
                                                         and decl.emit.stream):
            return ()
        if sink is not None:
            encoding = next((o for o in sink.table.options if o.key == "encoding"), None)
            if encoding is not None and self._string(encoding) == "debezium-json":
                return ()
            return sink.table.key if sink.table.connector == "upsert-kafka" else ()
        fmt = options.get("format")
        if fmt is None or self._string(fmt) != "upsert" or "key" not in options:
            return ()
        return self._declared_key(decl.name, options["key"], planned.columns, "upsert", None)

    def _upsert_view(self, decl: ViewDecl, options: dict[str, OptionDecl], sink: _Sink | None,
                     rows: Relation, key: tuple[str, ...]) -> None:
        """``<view>.upsert`` (app/program/upsert_rows.py): view ``decl``'s rows per ``key``,
        written to the view's topic as its upsert."""
        name = decl.name + UPSERT_SUFFIX
        self.declared[name] = decl.position
        read = self._staged(name, {rows.name: rows})[rows.name]
        planned = plan_upsert(read, key)
        emit = EmitPolicy()
        if sink is not None:
            options = {**options, "format": self._sink_format(decl, sink, False)}
        output = self._output(decl, options, planned, emit, False,
                              None if sink is None else sink.table)
        if output is not None and sink is not None:
            output = replace(output, bootstrap_servers=sink.table.bootstrap_servers)
        view = View(name, (read.name,), tuple(planned.operators), tuple(planned.columns),
                    planned.key, (), emit, output, upsert_state(decl.name, key), decl.position)
        at = len(self.views)
        self.views.insert(at, self._stage_writer(view, decl.position, True))

    def _window_ends_passed(self, planned: PlannedQuery,
                            time_attributes: Sequence[TimeAttribute]) -> tuple[str, ...]:
        """A filter or projection of a stage boundary's table passes its window ends on
        (:attr:`Relation.window_ends`): the columns that forward one as it is, so that a
        window Top-N reads a filter of an aggregate's final rows as it reads them."""
        staged = {r.name: r for r in self.stage_inputs.values()}
        source = staged.get(planned.source)
        if source is None or not source.window_ends or planned.aggregate or planned.sources:
            return ()
        if not all(isinstance(op, Filter | Project) for op in planned.operators):
            return ()
        ends = set(source.window_ends)
        for op in planned.operators:
            if isinstance(op, Project):
                ends = {name for name, expr in op.outputs
                        if isinstance(expr, ColumnRef) and expr.name in ends}
        timed = {a.column for a in time_attributes}
        return tuple(c.name for c in planned.columns if c.name in ends and c.name in timed)

    def _updated_source(self, planned: PlannedQuery) -> str:
        """The first relation an updating stateless query reads whose rows are updated (a
        UNION ALL may read insert-only relations beside it)."""
        staged = {r.name: r for r in self.stage_inputs.values()}
        for name in planned.sources or (planned.source,):
            relation = self.relations.get(name) or staged.get(name)
            if relation is not None and not relation.insert_only:
                return name
        return planned.source

    def _final_over_changes(self, decl: ViewDecl, planned: PlannedQuery) -> None:
        """S11, S18: EMIT AFTER WATERMARK over an updating relation writes a group once no
        change of the relation can reach it. A change of an aggregate carries its group's
        key, so a group by one of the relation's time attributes (each from a GROUP BY key
        of the aggregate behind it) gets no change once the key's waterline passes it; but
        only if that aggregate writes its changes in the step its rows arrive (no AFTER
        DELAY, which holds them past the waterline). Anything else is refused here."""
        assert decl.emit is not None
        relation = planned.retracting
        delayed = self._delayed_upstream(relation)
        if delayed is not None:
            raise CompileFailure(decl.emit.position, f"EMIT AFTER WATERMARK on view "
                                 f"{decl.name}, which aggregates the updated rows of view "
                                 f"{relation}: view {delayed} holds its changes back (EMIT "
                                 "AFTER DELAY), so one can come after the waterline has "
                                 "passed its group (SPEC S11, S18)",
                                 f"remove AFTER DELAY from {delayed}, or remove EMIT AFTER "
                                 f"WATERMARK from {decl.name}")
        if planned.window_key is None and planned.time_key is None:
            raise CompileFailure(decl.emit.position, f"EMIT AFTER WATERMARK on view "
                                 f"{decl.name}, which aggregates the updated rows of view "
                                 f"{relation}: a group is final only once no change of "
                                 f"{relation} can reach it, which needs a GROUP BY key that is "
                                 f"a time attribute of {relation} (SPEC S11, S18)",
                                 f"GROUP BY a window_end or time attribute {relation} groups "
                                 "by, or remove EMIT AFTER WATERMARK (the view then updates "
                                 "its rows)")

    def _delayed_upstream(self, relation: str) -> str | None:
        """The aggregate with EMIT ... AFTER DELAY whose changes updating ``relation`` is
        made of (through filters, UNION ALL branches and stage boundaries), or None."""
        pending = [relation]
        while pending:
            name = pending.pop(0)
            table = next((t for t in self.tables if t.name == name), None)
            if table is not None:
                pending.extend(() if table.stage_input is None else (table.stage_input,))
                continue
            view = next((v for v in self.views if v.name == name), None)
            if view is None:
                continue
            if not view.is_stateless:
                if view.emit.delay_ms is not None:
                    return view.name
                continue
            pending.extend(view.sources)
        return None

    def _final_rows_emit(self, decl: ViewDecl, emit: EmitPolicy) -> EmitPolicy:
        """S12 for a view that does not aggregate (a projection, a join, a UNION ALL, OVER
        aggregates): each row is written once, final, in the step it is known; no group is
        ever updated. AFTER WATERMARK and AFTER DELAY only choose when a group's changes are
        written, so here they change nothing: the view is compiled without them (STREAM,
        which chooses the changelog format, stays), with an L7 warning."""
        assert decl.emit is not None
        parts = (["AFTER WATERMARK"] if emit.after_watermark else []) + (
            ["AFTER DELAY"] if emit.delay_ms is not None else [])
        after = " AND ".join(parts)
        clause = "EMIT " + ("STREAM " if emit.stream else "") + after
        self.warnings.append(Diagnostic(
            "warning", decl.emit.position, f"{clause} on view {decl.name}: {after} changes "
            "nothing, since the view does not aggregate: its rows are written as they arrive, "
            "final", "remove the EMIT clause" if not emit.stream else
            f"write EMIT STREAM, which writes the same changelog, instead of {clause}"))
        return EmitPolicy(stream=emit.stream)

    def _ranking(self, decl: ViewDecl, derived: Derived | None,
                 planned: PlannedQuery) -> Relation:
        """A query ranking a window's rows (ROW_NUMBER/RANK): no view of its own, a relation
        whose reader limits the rank and becomes the window Top-N (app/program/top_n.py)."""
        ranking = planned.ranking
        assert ranking is not None
        if derived is None and not decl.local:
            raise CompileFailure(ranking.position, f"view {decl.name} ranks rows with "
                                 f"{ranking.function}() but no SELECT limits the rank "
                                 "(Flink's window Top-N)", _LIMIT_FIX)
        if decl.emit is not None:
            raise CompileFailure(decl.emit.position, f"EMIT on view {decl.name}, which ranks "
                                 "rows", "remove it: the view that limits the rank writes each "
                                 "window's rows once, final")
        return Relation(decl.name, tuple(planned.columns), planned.time_attributes, True,
                        "view", ranking=ranking)

    # -- WITH queries and subqueries in FROM (SPEC L3, S18; docs/language.md) -----------------

    def _plan(self, name: str, tokens: Sequence[Token],
              scope: dict[str, Relation]) -> PlannedQuery:
        """Plan the query of view ``name`` over ``scope``. Its WITH queries come first, each
        a generated local view that the later ones and the query read by its WITH name; then
        its subqueries in FROM, each a generated local view read in its place. A WITH query
        that nothing reads is compiled (its errors count, as Calcite validates every WITH
        item), then left out of the circuit with a warning: Flink and Feldera compute only
        what is read."""
        parts = split_query(self.source, tuple(tokens))
        decorrelated = window_subquery(parts.source, parts.tokens)
        if not parts.withs and not parts.subqueries and decorrelated is None:
            return _unranked(self._plan_chain(name, self.source, tuple(tokens), scope),
                             scope, name)
        start = len(self.views)
        local = dict(scope)
        made: list[tuple[Derived, str, int, int]] = []
        for index, item in enumerate(parts.withs):
            if item.name == name:
                raise CompileFailure(item.position, f"WITH query {item.name} has the name of "
                                     "its view", "rename the WITH query")
            before = len(self.warnings)
            relation = self._derived_view(name, item, local, index + 1, parts.withs[index + 1:])
            local[item.name] = relation
            self.with_owners.setdefault(item.name, name)
            made.append((item, relation.name, before, len(self.warnings)))
        reads = dict(local)
        for number, item in enumerate(parts.subqueries, start=1):
            reads[item.placeholder] = self._derived_view(name, item, local, number, ())
        # Its WITH queries and subqueries of an earlier stage, through their tables.
        reads = self._staged(name, reads)
        if decorrelated is not None:
            # A subquery in WHERE compared per window: the join of the query's rows with
            # the aggregate per window (app/program/window_subquery.py).
            number = len(parts.subqueries) + 1
            if decorrelated.side is not None:
                reads[SIDE] = self._derived_view(name, decorrelated.side, local, number, ())
            reads[AGGREGATE] = self._derived_view(name, decorrelated.aggregate, local,
                                                  number + 1, ())
            reads = {**reads, **self._staged(name, {k: reads[k] for k in (SIDE, AGGREGATE)
                                                    if k in reads})}
            planned = _unranked(plan_decorrelated(parts.source, parts.tokens,
                                                  decorrelated.select, reads, name,
                                                  decorrelated.position), reads, name)
            self._drop_unread(name, planned, start, made)
            return planned
        planned = _unranked(self._plan_chain(name, parts.source, parts.tokens, reads), reads,
                            name)
        self._drop_unread(name, planned, start, made)
        return planned

    def _plan_chain(self, name: str, source: SourceText, tokens: tuple[Token, ...],
                    scope: dict[str, Relation], keep: int | None = None,
                    parent: str = "") -> PlannedQuery:
        """Plan a query whose FROM may join more than two relations (``a JOIN b ON ... JOIN
        c ON ...``, S16), left-deep, as a user writes it by hand: the join of all but the
        last relation is a generated local view (``name.a_join_b``, every column of each
        relation named ``alias__column``), which the last join reads; ``a.k`` keeps naming
        a's column in the SELECT, the WHERE and the last ON. ``keep``: plan that generated
        view of the first ``keep`` joins (of the chain of view ``parent``)."""
        over = over_join(source, tokens) if keep is None else ()
        if over:
            # The joined rows, WHERE included, as a generated local view that the rest of
            # the query (its aggregate, DISTINCT, ranking or OVER) reads (ADR 0031).
            item = Derived("join", "_join_".join(alias for alias, _ in over), over[0][1],
                           tokens, "", source, len(over) - 1, parent or name)
            rows = self._derived_view(parent or name, item, scope, 0, ())
            return plan_over_join(source, tokens,
                                  {**scope, **self._staged(name, {JOINED_ROWS: rows})}, name)
        chain = join_chain(source, tokens)
        joins = len(chain) - 1 if keep is None else keep
        reads = scope
        if joins >= 2:
            aliases = [alias for alias, _ in chain[:joins]]
            item = Derived("join", "_join_".join(aliases), chain[0][1], tokens, "",
                           source, joins - 1, parent or name)
            prefix = self._derived_view(parent or name, item, scope, 0, ())
            reads = {**scope, **self._staged(name, {JOIN_PREFIX: prefix})}
        if keep is None:
            return plan_query(source, tokens, reads, name)
        return plan_join_prefix(source, tokens, reads, name, keep)

    def _derived_view(self, parent: str, item: Derived, scope: dict[str, Relation],
                      number: int, later: Sequence[Derived]) -> Relation:
        """The local view of one WITH query or subquery of view ``parent``, named
        ``parent.name`` (``parent.subquery<number>`` for a subquery without an alias)."""
        local = item.name or f"subquery{number}"
        name = f"{parent}.{local}"
        suffix = 2
        # Generated names hold a '.', which no user name may (reserved_name): they can only
        # meet each other (a WITH query and a subquery alias of one name).
        while name in self.declared:
            name, suffix = f"{parent}.{local}#{suffix}", suffix + 1
        self.declared[name] = item.position
        decl = ViewDecl(name, item.position, True, (), item.tokens, None)
        try:
            return self._local_or_output_view(decl, (), scope, item)
        except CompileFailure as failure:
            if item.kind == "with" and failure.message == f"unknown table or view {item.name}":
                raise CompileFailure(failure.position, failure.message,
                                     f"WITH query {item.name} cannot read itself (WITH "
                                     "RECURSIVE is not supported): read a table, a view or an "
                                     "earlier WITH query") from failure
            defined_later = next((d for d in later
                                  if failure.message == f"unknown table or view {d.name}"), None)
            if defined_later is None:
                raise
            raise CompileFailure(failure.position, failure.message,
                                 f"WITH query {defined_later.name} is defined after "
                                 f"{item.name}: move it before {item.name}") from failure

    def _derived_emit(self, item: Derived, planned: PlannedQuery) -> EmitPolicy:
        """A WITH query or subquery has no EMIT of its own (L5: EMIT ends a CREATE VIEW). One
        that aggregates by a window writes each window once, final, as with EMIT AFTER
        WATERMARK (Flink's window aggregation, whose cascades are written this way), so the
        query reading it sees final rows only (S18). One that aggregates without a window
        would update its rows, which no view can read."""
        if not planned.aggregate:
            return EmitPolicy()
        if planned.window_key is None:
            what = (f"WITH query {item.name}" if item.kind == "with"
                    else f"the query of INSERT INTO {item.parent} ({item.name}: each of several "
                    "INSERT INTO one table is united with the others)" if item.kind == "insert"
                    else f"subquery {item.name}" if item.name else "a subquery")
            raise CompileFailure(planned.group_position or item.position, f"{what} "
                                 "aggregates without a window, so its rows are updated and "
                                 "no query can read them",
                                 "GROUP BY window_start, window_end of a TUMBLE or HOP on a "
                                 "time attribute (each window is then read once, final), or "
                                 "aggregate in the view's own query")
        return EmitPolicy(after_watermark=True)

    def _drop_unread(self, name: str, planned: PlannedQuery, start: int,
                     made: Sequence[tuple[Derived, str, int, int]]) -> None:
        """Leave out the generated views (from ``start``) that the query does not read,
        directly or through another, with their warnings (each WITH query's range of
        ``self.warnings``), and warn about each unread WITH query instead."""
        generated = {v.name: v for v in self.views[start:]}
        read: set[str] = {planned.ranked} if planned.ranked else set()
        pending = list(planned.sources or (planned.source,))
        # A stage boundary is read through its internal topic: it is computed (ADR 0023).
        pending.extend(v for v in generated if v in self.composition.boundaries)
        while pending:
            relation = pending.pop()
            if relation in generated and relation not in read:
                read.add(relation)
                pending.extend(generated[relation].sources)
        dropped: set[int] = set()
        for item, view, before, after in made:
            if view not in read:
                dropped.update(range(before, after))
                self.warnings.append(Diagnostic(
                    "warning", item.position, f"WITH query {item.name} of view {name} is "
                    "never read, so it is not computed",
                    f"remove it, or read it in the query: FROM {item.name}"))
        self.warnings[:] = [w for i, w in enumerate(self.warnings) if i not in dropped]
        self.views[start:] = [v for v in self.views[start:] if v.name in read]

    def _state(self, decl: ViewDecl, planned: PlannedQuery, after_watermark: bool) -> StateBound:
        if planned.join_position is not None:
            if planned.join_state:
                return StateBound("window", None, planned.join_state)
            self.warnings.append(Diagnostic(
                "warning", planned.join_position,
                f"view {decl.name} keeps unbounded state: its join has no time bound"
                + (f" ({planned.join_unbounded})" if planned.join_unbounded else "")
                + ", so no row of either side is ever freed",
                "bound it on a time attribute of each side, e.g. b.ts BETWEEN a.ts - INTERVAL "
                "'10' MINUTE AND a.ts + INTERVAL '10' MINUTE, or join windowed views on "
                "a.window_end = b.window_end"))
            join = planned.operators[0]
            if isinstance(join, Join) and join.per_key:
                # S16, S18: each side's rows per key as a Z-set; a row whose weight sums
                # to 0 leaves.
                return StateBound("unbounded", None, "every row of both sides is kept "
                                  "(retracted rows leave); never freed")
            return StateBound("unbounded", None, "every row of both sides is kept; never freed")
        if planned.top_n is not None:
            top_n = planned.top_n.top_n
            attr = next((a for a in planned.time_attributes if a.kind == "window_end"), None)
            ranking = next(v for k, v in [("ROW_NUMBER", f"best {top_n.limit} rows"),
                                          ("RANK", f"rows ranked <= {top_n.limit}")]
                           if k == top_n.function)
            window = planned.top_n.window
            return StateBound("window", attr.column if attr is not None else None,
                              f"a window partition's {ranking} are held until "
                              f"w({window.table}.{window.source_column}) >= its window_end, "
                              "then written and freed")
        if planned.over_position is not None:
            return StateBound("window", None, planned.over_state)
        if not planned.aggregate:
            return StateBound("none", None, "stateless: holds no state")
        if planned.window_key is not None:
            column, attr = planned.window_key
            waterline = (waterline_text(attr) if attr.steps
                         else f"w({attr.table}.{attr.source_column})")
            if planned.window is not None and planned.window.kind == "SESSION":
                text = (f"each row is held until its session closes ({waterline} >= its last "
                        f"time + {_span(planned.window.size)}); a session's group is freed once "
                        "written")
            elif attr.kind == "window_end":
                text = f"a group is freed once {waterline} >= {column}"
            else:
                size = planned.window.size if planned.window is not None else None
                bound = f"{column} + {_span(size)}" if size is not None else f"the end of {column}"
                text = f"a group is freed once {waterline} >= {bound}"
            return StateBound("window", column, text)
        if planned.time_key is not None:
            # S11: no accepted row is below the attribute's waterline, so the group of value
            # d gets no row once w > d (docs/semantics.md, derived time attributes).
            column, attr = planned.time_key
            how = f"w({column}) = {waterline_text(attr)}"
            return StateBound("window", column,
                              f"a group is freed once w({column}) > {column} ({how})")
        if after_watermark:
            assert decl.emit is not None
            raise CompileFailure(decl.emit.position, f"EMIT AFTER WATERMARK on view "
                                 f"{decl.name} needs a GROUP BY key that is window_end or "
                                 "window_start of a TUMBLE/HOP on a time attribute, or another "
                                 "time attribute (e.g. CEIL(ts TO DAY) of a LATENESS column)",
                                 "GROUP BY window_start, window_end of "
                                 "TABLE(TUMBLE(TABLE t, DESCRIPTOR(col), INTERVAL ...))")
        position = planned.group_position or decl.position
        delayed = (self._delayed_upstream(planned.retracting) if planned.retracting
                   else None)
        if delayed is not None:
            self.warnings.append(Diagnostic(
                "warning", position, f"view {decl.name} keeps unbounded state: view {delayed} "
                "holds its changes back (EMIT AFTER DELAY), so a change can reach a group "
                "after the waterline has passed it, and no group is ever freed",
                f"remove AFTER DELAY from {delayed} to free each group of a time key once "
                "the waterline passes it"))
            return StateBound("unbounded", None, "grows with the number of groups; never freed")
        keys = "column of its SELECT DISTINCT" if planned.distinct else "GROUP BY key"
        message = (f"view {decl.name} keeps unbounded state: no {keys} is a time "
                   "attribute, so its groups are never freed")
        fix = ("GROUP BY window_end of a TUMBLE or HOP on a LATENESS column to bound it"
               if not planned.distinct else "select window_start, window_end of a TUMBLE or "
               "HOP on a LATENESS column to bound it: SELECT DISTINCT window_start, "
               "window_end, ... FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(col), INTERVAL ...))")
        self.warnings.append(Diagnostic("warning", position, message, fix))
        return StateBound("unbounded", None, "grows with the number of groups; never freed")

    def _view_lateness(self, decl: ViewDecl, planned: PlannedQuery,
                       lateness_decls: Sequence[LatenessDecl],
                       ) -> tuple[tuple[ViewLateness, ...], tuple[TimeAttribute, ...]]:
        attrs = list(planned.time_attributes)
        result: list[ViewLateness] = []
        for item in lateness_decls:
            sources = planned.sources or (planned.source,)
            union = decl.name if len(sources) > 1 else self._union_upstream(sources)
            if union is not None:
                # A view's late rows are dead letters of its one root table (L2, S6); a
                # UNION ALL or a JOIN has several, each with its own gate already.
                joins = planned.join_position is not None if union == decl.name else any(
                    v.name == union and v.join is not None for v in self.views)
                word = "JOIN" if joins else "UNION ALL"
                what = (f"a {word}" if union == decl.name
                        else f"which reads the {word} view {union}")
                raise CompileFailure(item.position, f"LATENESS on view {decl.name}, {what}",
                                     f"declare LATENESS on each {'side' if joins else 'branch'}"
                                     "'s input (a table column, or a decoding view it reads)")
            if planned.aggregate or planned.window is not None or planned.over_position:
                raise CompileFailure(item.position, f"LATENESS on view {decl.name}, which is "
                                     "not a stateless projection/filter of one table",
                                     "declare LATENESS on a view that only decodes, filters or "
                                     "renames its input (no GROUP BY, no window)")
            column = next((c for c in planned.columns if c.name == item.column), None)
            if column is None:
                raise CompileFailure(item.column_position, f"unknown column {item.column} in "
                                     f"view {decl.name}", "available columns: "
                                     + ", ".join(c.name for c in planned.columns))
            if any(v.column == item.column for v in result):
                raise CompileFailure(item.position, f"duplicate LATENESS for "
                                     f"{decl.name}.{item.column}")
            amount = _lateness_amount(decl.name, item.column, column.type.name, False,
                                      item.amount, item.position, table=False)
            # A decoding CAST is nullable (a malformed string gives NULL). SPEC L2 asks for
            # NOT NULL columns; on views we accept nullable ones with SQL's own answer: a NULL
            # is never below the waterline (not late) and never moves it (docs/language.md).
            result.append(ViewLateness(decl.name, item.column, amount, item.position))
            attrs = [a for a in attrs if a.column != item.column]
            attrs.append(TimeAttribute(item.column, decl.name, item.column, "view_lateness"))
        return tuple(result), tuple(attrs)

    def _union_upstream(self, sources: Sequence[str]) -> str | None:
        """The UNION ALL view among ``sources`` and the views they read, if any (S17)."""
        views = {v.name: v for v in self.views}
        pending = list(sources)
        while pending:
            view = views.get(pending.pop(0))
            if view is None:
                continue
            if len(view.sources) > 1:
                return view.name
            pending.extend(view.sources)
        return None

    def _output(self, decl: ViewDecl, options: dict[str, OptionDecl], planned: PlannedQuery,
                emit: EmitPolicy, insert_only: bool,
                sink: FlinkTable | None = None) -> Output | None:
        """The view's Kafka binding (None without a 'topic'); ``sink``: the options of the
        table an INSERT INTO writes, whose ``'value.fields-include' = 'EXCEPT_KEY'`` leaves
        the key columns out of the value and ``'key.fields-prefix'`` names the key's fields."""
        topic_option = options.get("topic")
        format_option = options.get("format")
        if topic_option is None:
            for key in VIEW_OPTIONS:
                if key != "topic" and key in options:
                    raise CompileFailure(options[key].position, f"view {decl.name} has a "
                                         f"'{key}' but no 'topic'",
                                         "add 'topic' to write it to Kafka")
            return None
        if decl.local:
            raise CompileFailure(topic_option.position, f"LOCAL view {decl.name} has a 'topic'",
                                 "remove LOCAL to write it to Kafka, or remove 'topic'")
        for index, column in enumerate(planned.columns):
            if column.name.startswith(UNNAMED):
                where = (planned.column_positions[index]
                         if index < len(planned.column_positions) else decl.position)
                raise CompileFailure(where, f"column {index + 1} of view {decl.name} has no "
                                     "name of its own (an expression without AS, or a name an "
                                     "earlier column has), which its topic's schema needs",
                                     f"add AS <name> to it, e.g. AS c{index}")
        topic = self._string(topic_option)
        if topic in {t.topic for t in self.tables} | {t.dead_letter_topic for t in self.tables}:
            raise CompileFailure(topic_option.value_position, f"view {decl.name} writes to "
                                 f"topic {topic}, which is an input or dead-letter topic",
                                 f"give the view a topic of its own: WITH ('topic' = "
                                 f"'{decl.name}')")
        for other in self.views:
            if other.output is not None and other.output.topic == topic:
                raise CompileFailure(topic_option.value_position, f"topic {topic} is already "
                                     f"written by view {other.name}")
        if format_option is not None:
            fmt = self._string(format_option)
            if fmt not in VIEW_FORMATS:
                raise CompileFailure(format_option.value_position, f"bad view format '{fmt}'",
                                     f"use one of {', '.join(VIEW_FORMATS)}")
        elif not planned.aggregate:
            fmt = "changelog" if emit.stream or planned.updating else "append"
        else:
            fmt = "changelog" if emit.stream else "upsert"
        where = format_option.value_position if format_option else decl.position
        if planned.over_position is not None and fmt != "append":
            raise CompileFailure(where, f"view {decl.name} computes OVER aggregates: each "
                                 "input row gives one final output row, so it is written as "
                                 f"'append', not '{fmt}'",
                                 "use 'format' = 'append' (and no EMIT STREAM)")
        join = planned.operators[0] if planned.operators else None
        if isinstance(join, Join) and join.pads_at_once and fmt != "changelog":
            raise CompileFailure(where, f"view {decl.name} is a {join.kind.upper()} OUTER "
                                 "join without a time bound: a row without a match is "
                                 "written padded with NULLs at once and retracted when its "
                                 f"first match comes (SPEC S16, S18), which 'changelog' "
                                 f"writes and '{fmt}' cannot",
                                 "use 'format' = 'changelog', or bound the join on a time "
                                 "attribute of each side" + _UPSERT_FIX.get(fmt, ""))
        if planned.updating and fmt != "changelog":
            updated = self._updated_source(planned)
            latest = next((v.sources[0] for v in self.views
                           if v.name == updated and v.reads_deletions), None)
            if latest is not None:
                raise CompileFailure(where, f"view {decl.name} reads table {latest}, a "
                                     "changelog table read as its latest row per key (ADR "
                                     "0030), and passes its updates and deletes on as "
                                     f"retractions (SPEC S18), which 'changelog' writes and "
                                     f"'{fmt}' cannot",
                                     "use 'format' = 'changelog'" + _UPSERT_FIX.get(fmt, ""))
            raise CompileFailure(where, f"view {decl.name} reads the updated rows of view "
                                 f"{updated} and passes their retractions on (SPEC "
                                 f"S18), which 'changelog' writes and '{fmt}' cannot",
                                 "use 'format' = 'changelog', or add EMIT AFTER WATERMARK to "
                                 f"{updated}" + _UPSERT_FIX.get(fmt, ""))
        if fmt == "append" and not insert_only:
            raise CompileFailure(where, f"view {decl.name} updates its rows (GROUP BY without "
                                 "EMIT AFTER WATERMARK), so it cannot be written as 'append'",
                                 "use 'upsert' or 'changelog', or add EMIT AFTER WATERMARK")
        if fmt == "append" and emit.stream:
            raise CompileFailure(where, "EMIT STREAM writes a changelog, not 'append'",
                                 "use 'changelog' or remove STREAM")
        key_columns: tuple[str, ...] = ()
        if fmt in ("upsert", "changelog") and planned.aggregate:
            missing = [k for k in planned.key_names if k not in planned.key_selected]
            if missing:
                shown = ", ".join(missing)
                raise CompileFailure(where, f"the {fmt} key of view {decl.name} needs every "
                                     f"GROUP BY column, but {shown} is not selected",
                                     f"add {shown} to the SELECT list, or use 'append' with "
                                     "EMIT AFTER WATERMARK")
            key_columns = planned.key
        if fmt == "upsert" and not planned.aggregate and "key" in options:
            raise CompileFailure(where, f"view {decl.name} writes each row once, final (it "
                                 "neither aggregates nor updates its rows), so there is no "
                                 "latest row per key to upsert", "use 'format' = 'append': "
                                 "its 'key' keys the records all the same")
        if fmt == "upsert" and not planned.aggregate:
            raise CompileFailure(where, f"view {decl.name} has no key (no GROUP BY), so it "
                                 "cannot be written as 'upsert'", "use 'append'")
        columns = tuple(planned.columns)
        by_name = {c.name: c for c in columns}
        if "key" in options:
            key_columns = self._declared_key(decl.name, options["key"], columns, fmt,
                                             key_columns if planned.aggregate else None)
        extra = CHANGELOG_FIELDS if fmt == "changelog" else ()
        clash = [c.name for c in extra if c.name in by_name]
        if clash:
            raise CompileFailure(where, f"view {decl.name} has a column named {clash[0]}, "
                                 "which the changelog format adds", "rename the column")
        in_value = columns if sink is None or sink.key_in_value else tuple(
            c for c in columns if c.name not in key_columns)
        value_schema = record_schema(decl.name, in_value, extra)
        key_schema = (record_schema(f"{decl.name}_key", [by_name[k] for k in key_columns])
                      if key_columns else None)
        encoding = self._string(options["encoding"]) if "encoding" in options else "avro"
        if encoding not in VIEW_ENCODINGS:
            raise CompileFailure(options["encoding"].value_position,
                                 f"bad view encoding '{encoding}'",
                                 f"use one of {', '.join(VIEW_ENCODINGS)}")
        if encoding == "debezium-json" and fmt == "upsert":
            raise CompileFailure(options["encoding"].value_position,
                                 f"view {decl.name} is written as 'upsert', but 'debezium-json' "
                                 "writes each change as an event (a create, or a delete of the "
                                 "row it retracts), which is the 'changelog' format",
                                 "declare 'format' = 'changelog'")
        if encoding == "raw":
            _raw_output(decl.name, options["encoding"], fmt, in_value, key_columns,
                        "key.format" in options)
        key_format: str | None = None
        key_fields: tuple[str, ...] = ()
        if "key.format" in options:
            declared = view_key(decl.name, options["key.format"], columns, key_columns,
                                self.source.dialect != "flink",
                                None if sink is None else sink.key_prefix,
                                sink is None or sink.key_in_value)
            key_format, key_schema = declared.format, declared.schema
            if declared.fields != key_columns:
                key_fields = declared.fields
        registry = self._registry_url(
            options.get("schema-registry.url"),
            "avro-confluent" if key_format == "avro-confluent" else encoding, "view")
        serializer = self._serializer_options(
            options, "avro-confluent" in (encoding, key_format)
            or encoding in ("json-registry", "protobuf-confluent"))
        return Output(topic, cast(Literal["upsert", "changelog", "append"], fmt), key_columns,
                      key_schema, value_schema,
                      cast(Literal["avro", "avro-confluent", "json", "json-registry",
                                   "protobuf-confluent", "debezium-json", "raw"], encoding),
                      registry,
                      key_format=key_format, key_fields=key_fields, serializer=serializer,
                      partitions=self._count(options.get("partitions")),
                      replicas=self._count(options.get("replicas")),
                      retention_ms=(_retention_ms(options["retention"]) if "retention" in options
                                    else None))

    def _declared_key(self, view: str, option: OptionDecl, columns: Sequence[Column], fmt: str,
                      group_key: tuple[str, ...] | None) -> tuple[str, ...]:
        """The view's ``'key'``: its columns in the declared order. An ``upsert`` or
        ``changelog`` aggregate's key is its GROUP BY columns (S13: one record per group and
        key), so there the option may only name them, in any order; any other view may key
        its records by any of its columns."""
        self._string(option)
        start = option.value_position
        names: list[str] = []
        for raw, where in option_names(option, ",",
                                       "write 'key' = 'col' or 'key' = 'col1, col2'"):
            quoted = len(raw) > 1 and raw[0] == raw[-1] == '"'
            name = raw[1:-1] if quoted else raw.lower()
            if name not in {c.name for c in columns}:
                raise CompileFailure(where, f"unknown column {name} in 'key' of view {view}",
                                     "available columns: " + ", ".join(c.name for c in columns))
            if name in names:
                raise CompileFailure(where, f"column {name} is twice in 'key' of view {view}",
                                     "name each key column once")
            names.append(name)
        if (group_key is not None and fmt in ("upsert", "changelog")
                and sorted(names) != sorted(group_key)):
            shown = ", ".join(group_key)
            raise CompileFailure(start, f"the {fmt} key of view {view} is its GROUP BY "
                                 f"columns ({shown}), not {', '.join(names)}",
                                 f"write 'key' = '{shown}' (in any order), or remove 'key'; to "
                                 "key by other columns, use 'append' with EMIT AFTER WATERMARK")
        return tuple(names)

    def _count(self, option: OptionDecl | None) -> int | None:
        """A topic's ``'partitions'`` or ``'replicas'``: a positive integer (None without)."""
        if option is None:
            return None
        text = self._string(option).strip()
        if not text.isdigit() or int(text) < 1:
            raise CompileFailure(option.value_position, f"'{option.key}' '{text}' is not a "
                                 "positive integer", f"write e.g. '{option.key}' = '3'")
        return int(text)


#: What an 'upsert' of updating rows without a GROUP BY lacks (ADR 0032).
_UPSERT_FIX = {"upsert": "; or declare 'key' = '<columns of one row>' to write each key's "
                         "latest row"}


@dataclass(frozen=True)
class _Sink:
    """What the view of a table INSERT INTO writes takes from the table: its columns, its
    options read as Tidemark's, and, for several INSERTs, the UNION ALL of their rows."""

    columns: tuple[Column, ...]
    table: FlinkTable
    united: PlannedQuery | None
    position: Position


def _unranked(planned: PlannedQuery, reads: dict[str, Relation], name: str) -> PlannedQuery:
    """``planned``, unless it reads a ranking other than as the one SELECT limiting its rank
    (a JOIN or UNION ALL side): a ranking's rows mean nothing before the limit."""
    for source in planned.sources or (planned.source,):
        relation = reads.get(source)
        if relation is not None and relation.ranking is not None:
            raise CompileFailure(relation.ranking.position, f"the ranked rows of {source} are "
                                 f"read by view {name} other than by one SELECT that limits "
                                 "the rank", _LIMIT_FIX)
    return planned


def _span(size: int) -> str:
    from app.program.query import _amount

    return _amount(size, "interval").lower() if size else "0"


def _emit_policy(decl: ViewDecl) -> EmitPolicy:
    if decl.emit is None:
        return EmitPolicy()
    delay = decl.emit.delay.amount if decl.emit.delay is not None else None
    if delay is not None and decl.emit.delay is not None and decl.emit.delay.kind != "interval":
        raise CompileFailure(decl.emit.delay.position, "EMIT AFTER DELAY takes an INTERVAL")
    return EmitPolicy(decl.emit.stream, decl.emit.after_watermark, delay)


def _lateness_amount(relation: str, column: str, type_name: str, nullable: bool,
                     amount: IntervalDecl, position: Position, table: bool) -> int:
    """SPEC L2: LATENESS goes on NOT NULL TIMESTAMP (INTERVAL) or INT/BIGINT (integer)."""
    if type_name not in ("TIMESTAMP", "INT", "BIGINT"):
        fix = (f"decode it in a LOCAL view (CAST({column} AS TIMESTAMP)) and declare "
               f"LATENESS view.{column} INTERVAL ...; LATENESS needs TIMESTAMP, INT or BIGINT"
               if type_name == "VARCHAR" and table else
               "LATENESS needs a TIMESTAMP, INT or BIGINT column")
        raise CompileFailure(position, f"LATENESS on {relation}.{column}, a {type_name} "
                             "column, which does not support subtraction", fix)
    if nullable:
        raise CompileFailure(position, f"LATENESS on nullable column {relation}.{column}",
                             f"declare it NOT NULL: {column} {type_name} NOT NULL LATENESS ...")
    if type_name == "TIMESTAMP" and amount.kind != "interval":
        raise CompileFailure(amount.position, f"LATENESS of TIMESTAMP column {column} must be "
                             "an INTERVAL", "write e.g. LATENESS INTERVAL '1' HOUR")
    if type_name != "TIMESTAMP" and amount.kind != "integer":
        raise CompileFailure(amount.position, f"LATENESS of {type_name} column {column} must "
                             "be an integer in the column's unit", "write e.g. LATENESS 10")
    return amount.amount


def _metadata_key(table: str, col: ColumnDecl, changelog: bool = False) -> str | None:
    """The checked metadata key of a table column (None for a value column); a change
    event's keys only in a ``changelog`` table."""
    if col.metadata is None:
        return None
    assert col.metadata_position is not None
    key = col.metadata
    fixed = key.lower()
    if fixed.startswith(HEADER_PREFIX):
        key = HEADER_PREFIX + key[len(HEADER_PREFIX):]
    elif fixed in METADATA_TYPES or fixed in CHANGELOG_METADATA_TYPES:
        key = fixed
    types = metadata_types(key, changelog)
    if types is None and key in CHANGELOG_METADATA_TYPES:
        raise CompileFailure(col.metadata_position, f"METADATA FROM '{key}' of column "
                             f"{table}.{col.name} is a Debezium change event's",
                             "declare the table 'format' = 'debezium-json', or read another "
                             "key")
    if types is None:
        known = ", ".join(f"'{k}'" for k in
                          [*METADATA_TYPES, *(CHANGELOG_METADATA_TYPES if changelog else ())])
        raise CompileFailure(col.metadata_position, f"unknown metadata key '{col.metadata}' "
                             f"of column {table}.{col.name}", f"metadata keys are {known}")
    if col.type.name not in types:
        raise CompileFailure(col.position, f"column {table}.{col.name} is {col.type.name}, "
                             f"but METADATA FROM '{key}' is {' or '.join(types)}",
                             f"declare it {' or '.join(types)}")
    return key


def _retention_ms(option: OptionDecl) -> int:
    """A view's ``'retention'``: an INTERVAL, or milliseconds as a quoted integer; '-1'
    keeps records without a time limit (Kafka's ``retention.ms=-1``)."""
    if isinstance(option.value, IntervalDecl):
        if option.value.kind != "interval" or option.value.amount < 1:
            raise CompileFailure(option.value_position, "'retention' must be a positive "
                                 "INTERVAL", "write 'retention' = INTERVAL '7' DAY")
        return option.value.amount
    text = option.value.strip()
    if text == "-1" or (text.isdigit() and int(text) > 0):
        return int(text)
    raise CompileFailure(option.value_position, f"'retention' '{text}' is not an INTERVAL or "
                         "a positive number of milliseconds",
                         "write 'retention' = INTERVAL '7' DAY, '604800000' (ms), or '-1' "
                         "(no time limit)")


def _resolve_schema(raw: str, program: str) -> Path | None:
    path = Path(raw)
    if path.is_absolute():
        return path if path.is_file() else None
    program_dir = Path(program).resolve().parent
    for base in (Path.cwd(), program_dir.parent, program_dir):
        candidate = base / path
        if candidate.is_file():
            return candidate
    return None


def _primary_key(decl: TableDecl, columns: Sequence[Column]) -> tuple[str, ...]:
    """The table's PRIMARY KEY columns (S16, versioned tables): each a column of the table,
    NOT NULL (a NULL key is no key: it would match nothing), named once."""
    if decl.primary_key is None:
        return ()
    types = {c.name: c.type for c in columns}
    names: list[str] = []
    for name, position in decl.primary_key.columns:
        if name not in types:
            close = difflib.get_close_matches(name, list(types), n=1)
            raise CompileFailure(position, f"PRIMARY KEY column {name} is not a column of "
                                 f"table {decl.name}",
                                 f"did you mean {close[0]}?" if close else
                                 "list columns of the table: PRIMARY KEY (currency) NOT "
                                 "ENFORCED")
        if name in names:
            raise CompileFailure(position, f"PRIMARY KEY names column {name} twice",
                                 "list each key column once")
        names.append(name)
    return tuple(names)




def _with_watermarks(decl: TableDecl) -> TableDecl:
    """``decl`` with each ``WATERMARK FOR c AS c - INTERVAL ...`` as LATENESS on c (Flink's
    watermark declares what LATENESS does, SPEC L2), and with its PRIMARY KEY columns and
    watermark columns NOT NULL, as Flink implies (a NULL key is no key; a row without a time
    cannot be placed: in Flink it fails the job, here it is an invalid dead letter, S7)."""
    by_name = {c.name: c for c in decl.columns}
    columns = dict(by_name)
    for mark in decl.watermarks:
        column = columns.get(mark.column)
        if column is None or column.processing_time:
            what = "a processing-time column" if column is not None else "not a column"
            raise CompileFailure(mark.column_position, f"WATERMARK FOR {mark.column}: "
                                 f"{mark.column} is {what} of table {decl.name}",
                                 "declare the watermark on a TIMESTAMP column of the table")
        if column.lateness is not None:
            raise CompileFailure(mark.position, f"column {decl.name}.{mark.column} has "
                                 "LATENESS and a WATERMARK", "keep one of them")
        columns[mark.column] = replace(column, lateness=mark.amount,
                                       lateness_position=mark.position,
                                       type=column.type.with_nullable(False))
    keys = {name for name, _ in decl.primary_key.columns} if decl.primary_key else set()
    for name in keys & set(columns):
        columns[name] = replace(columns[name], type=columns[name].type.with_nullable(False))
    return replace(decl, columns=tuple(columns[c.name] for c in decl.columns))


def _raw_output(view: str, option: OptionDecl, fmt: str, value_columns: Sequence[Column],
                key_columns: Sequence[str], declared_key: bool) -> None:
    """An output of raw values (``'encoding' = 'raw'``, Flink's ``'format' = 'raw'`` of a
    table INSERT INTO writes): each value is one column's bytes, as a ``'raw'`` table reads
    them, so the value has exactly one column (Flink's ``'EXCEPT_KEY'`` leaves the key
    columns out of it), of a type a raw value can hold; a changelog's fields have no place
    in it, and a key needs a ``'key.format'`` (raw bytes are no record of key columns).

    Raises:
        CompileFailure: at the option, any of those.
    """
    where = option.value_position
    if fmt == "changelog":
        raise CompileFailure(where, f"view {view} is written as 'changelog', whose values "
                             "carry undo, ptime and ver beside the row, but a raw value is one "
                             "column's bytes", "use 'format' = 'append' (or 'upsert'), or "
                             "'encoding' = 'json'")
    if len(value_columns) != 1:
        names = ", ".join(c.name for c in value_columns) or "none"
        raise CompileFailure(where, f"view {view} writes raw values, one column's bytes, but "
                             f"its value has {len(value_columns)} columns ({names})",
                             "write one column (Flink: the key columns in the key, with "
                             "'value.fields-include' = 'EXCEPT_KEY'), or write the values as "
                             "'json' or 'avro'")
    (column,) = value_columns
    if column.type.name not in RAW_TYPES:
        raise CompileFailure(where, f"column {view}.{column.name} is {column.type.name}, "
                             "which a raw value cannot hold", raw_fix("value"))
    if key_columns and not declared_key:
        raise CompileFailure(where, f"view {view} writes raw values and a key of "
                             f"{', '.join(key_columns)}, whose record a raw value's encoding "
                             "cannot write", "add 'key.format' ('raw' for one column's "
                             "bytes, or 'json', 'avro')")


def _raw_value(decl: TableDecl, options: Mapping[str, OptionDecl],
               value_columns: Sequence[Column]) -> None:
    """A ``'format' = 'raw'`` table (Flink's raw format): its value is one column's bytes,
    as Kafka's Java serializers write them, so it has exactly one column read from the
    value, of a type a raw value can hold, and no schema file.

    Raises:
        CompileFailure: another number of value columns, a type a raw value cannot hold,
            a ``'schema'`` option.
    """
    if "schema" in options:
        raise CompileFailure(options["schema"].position, f"table {decl.name} reads raw "
                             "values, which have no schema", "remove 'schema'")
    if len(value_columns) != 1:
        names = ", ".join(c.name for c in value_columns) or "none"
        raise CompileFailure(decl.position, f"table {decl.name} reads raw values, one "
                             f"column's bytes, but {len(value_columns)} of its columns are "
                             f"read from the value ({names})", "declare one column beside "
                             "METADATA columns (the key, the timestamp), or read the values "
                             "as 'json' or 'avro'")
    (column,) = value_columns
    if column.type.name not in RAW_TYPES:
        raise CompileFailure(decl.position, f"column {decl.name}.{column.name} is "
                             f"{column.type.name}, which a raw value cannot hold",
                             raw_fix("value"))
