"""The DDL shell of a program (SPEC L1-L5): what surrounds the SELECT of each view.

Grammar (case-insensitive keywords; ``[]`` optional)::

    CREATE [TEMPORARY] TABLE [IF NOT EXISTS] name (
                        column type [NOT NULL | NULL] [METADATA [FROM 'key'] [VIRTUAL]]
                        [LATENESS lateness] [PRIMARY KEY [NOT ENFORCED]] [COMMENT 'text']
                      | column AS PROCTIME() | column AS expr [LATENESS lateness]
                        [COMMENT 'text'] , ...
                        [, WATERMARK FOR column AS column [- INTERVAL 'n' unit]]
                        [, [CONSTRAINT name] PRIMARY KEY ( column , ... ) [NOT ENFORCED]] )
        [COMMENT 'text'] [WITH ( 'key' = value , ... )]
    CREATE [LOCAL | TEMPORARY] VIEW [IF NOT EXISTS] name [WITH ( 'key' = value , ... )]
        AS select [EMIT emit]
    LATENESS view.column lateness
    INSERT INTO table [( column , ... )] select                       (Flink SQL)
    EXECUTE STATEMENT SET BEGIN insert ; ... END | BEGIN STATEMENT SET ; ... END
    SET 'key' = 'value'
    lateness := INTERVAL 'n' unit | INTERVAL n unit | n          (n a non-negative integer)
    emit     := STREAM | [STREAM] AFTER WATERMARK [AND AFTER DELAY INTERVAL ...]
              | [STREAM] AFTER DELAY INTERVAL ...

A ``COMMENT 'text'`` (Flink's, on a table or a column) is read and dropped: it cannot change
what a program reads or writes. Flink's other table clauses (``PARTITIONED BY``,
``DISTRIBUTED BY``, ``LIKE``, ``AS SELECT``), ``[CREATE OR] REPLACE``, ``DROP`` and catalog
names are refused by name (docs/porting-from-flink.md says why).

The parser is a small cursor over :class:`~app.program.lexer.Token` s; every error carries the
position of the token it stopped at (SPEC L7).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from app.circuit.functions import TIME_UNITS_MS
from app.circuit.ir import Position, SqlType
from app.program.lexer import CompileFailure, SourceText, Statement, Token

__all__ = [
    "ColumnDecl",
    "EmitDecl",
    "InsertDecl",
    "IntervalDecl",
    "KeyDecl",
    "LatenessDecl",
    "OptionDecl",
    "SetDecl",
    "StatementSetDecl",
    "TableDecl",
    "ViewDecl",
    "WatermarkDecl",
    "parse_interval_tokens",
    "parse_statement",
    "parse_type",
]

TYPE_NAMES = ("BOOLEAN, INT, BIGINT, REAL, DOUBLE, DECIMAL(p, s), VARCHAR, DATE, TIMESTAMP, "
              "VARBINARY")


@dataclass(frozen=True)
class IntervalDecl:
    """A LATENESS / delay / window amount: ``ms`` for an INTERVAL, ``integer`` for a number."""

    kind: Literal["interval", "integer"]
    amount: int
    position: Position
    text: str


@dataclass(frozen=True)
class OptionDecl:
    key: str
    position: Position
    value: str | IntervalDecl
    value_position: Position


@dataclass(frozen=True)
class ColumnDecl:
    name: str
    type: SqlType
    lateness: IntervalDecl | None
    position: Position
    lateness_position: Position | None = None
    #: ``METADATA FROM 'key'`` (app/circuit/metadata.py): the key as written, the column's
    #: own name for ``METADATA`` alone; None for a value column.
    metadata: str | None = None
    metadata_position: Position | None = None
    #: ``name AS PROCTIME()``: a processing-time attribute (TIMESTAMP NOT NULL), no field of
    #: the record: its value is the batch time of the step its row arrives in.
    processing_time: bool = False
    #: ``name AS expr``: the expression's tokens (a computed column, compiled over the table's
    #: other columns, which then gives the column its type: ``type`` holds only whether it is
    #: NOT NULL, by its LATENESS, WATERMARK or PRIMARY KEY).
    computed: tuple[Token, ...] | None = None


@dataclass(frozen=True)
class KeyDecl:
    """``PRIMARY KEY (a, b) [NOT ENFORCED]`` (or ``PRIMARY KEY`` after one column): the
    column names as written, each with its position, and where PRIMARY is."""

    columns: tuple[tuple[str, Position], ...]
    position: Position


@dataclass(frozen=True)
class WatermarkDecl:
    """Flink's ``WATERMARK FOR c AS c - INTERVAL 'n' unit``: LATENESS n on column c (``AS c``
    alone is LATENESS 0). ``position`` is where WATERMARK is."""

    column: str
    column_position: Position
    amount: IntervalDecl
    position: Position


@dataclass(frozen=True)
class TableDecl:
    name: str
    position: Position
    columns: tuple[ColumnDecl, ...]
    options: tuple[OptionDecl, ...]
    primary_key: KeyDecl | None = None
    watermarks: tuple[WatermarkDecl, ...] = ()


@dataclass(frozen=True)
class EmitDecl:
    stream: bool
    after_watermark: bool
    delay: IntervalDecl | None
    position: Position


@dataclass(frozen=True)
class ViewDecl:
    name: str
    position: Position
    local: bool
    options: tuple[OptionDecl, ...]
    query_tokens: tuple[Token, ...]
    emit: EmitDecl | None


@dataclass(frozen=True)
class LatenessDecl:
    view: str
    column: str
    position: Position
    column_position: Position
    amount: IntervalDecl


@dataclass(frozen=True)
class InsertDecl:
    """Flink's ``INSERT INTO table [(columns)] SELECT ...``: the query's rows written to a
    table declared with a ``'connector'`` (an output, as a view with a ``'topic'``)."""

    table: str
    position: Position
    table_position: Position
    columns: tuple[tuple[str, Position], ...]
    query_tokens: tuple[Token, ...]
    #: ``INSERT INTO table``'s own tokens (where the statement's errors point).
    head_tokens: tuple[Token, ...] = ()


@dataclass(frozen=True)
class SetDecl:
    """``SET 'key' = 'value'`` (Flink SQL's configuration statement)."""

    key: str
    value: str
    position: Position
    key_position: Position


@dataclass(frozen=True)
class StatementSetDecl:
    """Where a statement set begins (``BEGIN STATEMENT SET``, ``EXECUTE STATEMENT SET
    BEGIN``) or ends (``END``). A program is one job: its INSERTs run together either way."""

    begins: bool
    position: Position


Decl = (TableDecl | ViewDecl | LatenessDecl | InsertDecl | SetDecl | StatementSetDecl)


def identifier(token: Token) -> str:
    """SPEC L1: identifiers are case-insensitive (lower-cased) unless quoted."""
    return token.text if token.kind == "qident" else token.text.lower()


@dataclass
class _Cursor:
    source: SourceText
    tokens: tuple[Token, ...]
    index: int = 0
    end_offset: int = field(default=0)

    def peek(self, ahead: int = 0) -> Token | None:
        i = self.index + ahead
        return self.tokens[i] if i < len(self.tokens) else None

    def next(self, what: str) -> Token:
        token = self.peek()
        if token is None:
            raise CompileFailure(self.source.position(self.end_offset),
                                 f"unexpected end of statement: expected {what}")
        self.index += 1
        return token

    def pos(self, token: Token | None = None) -> Position:
        if token is None:
            token = self.peek()
        if token is None:
            return self.source.position(self.end_offset)
        return self.source.position(token.start)

    def expect_word(self, *words: str) -> Token:
        token = self.next(" or ".join(words))
        if not token.is_word(*words):
            raise CompileFailure(self.pos(token), f"expected {' or '.join(words)}, found "
                                 f"{_show(token)}")
        return token

    def expect_punct(self, symbol: str) -> Token:
        token = self.next(f"'{symbol}'")
        if not token.is_punct(symbol):
            raise CompileFailure(self.pos(token), f"expected '{symbol}', found {_show(token)}")
        return token

    def accept_word(self, *words: str) -> Token | None:
        token = self.peek()
        if token is not None and token.is_word(*words):
            self.index += 1
            return token
        return None

    def accept_punct(self, symbol: str) -> Token | None:
        token = self.peek()
        if token is not None and token.is_punct(symbol):
            self.index += 1
            return token
        return None

    def name(self, what: str) -> Token:
        token = self.next(what)
        if token.kind not in ("word", "qident"):
            raise CompileFailure(self.pos(token), f"expected {what}, found {_show(token)}")
        return token


def _show(token: Token) -> str:
    if token.kind == "string":
        return f"'{token.text}'"
    if token.kind == "qident":
        return f'"{token.text}"'
    return token.text


def parse_statement(source: SourceText, statement: Statement) -> list[Decl]:
    """Parse one statement's shell; raises :class:`CompileFailure` on the first error.

    Most statements are one declaration; ``EXECUTE STATEMENT SET BEGIN INSERT ...`` is the
    start of a statement set and its first INSERT (the ``;`` after BEGIN is its own)."""
    cursor = _Cursor(source, statement.tokens, end_offset=statement.end)
    first = cursor.next("a statement")
    if first.is_word("CREATE"):
        temporary = cursor.accept_word("TEMPORARY") is not None
        if cursor.accept_word("TABLE"):
            return [_table(cursor, first)]
        local = cursor.accept_word("LOCAL") is not None
        if cursor.accept_word("VIEW"):
            return [_view(cursor, first, local)]
        token = cursor.peek()
        if token is not None and token.is_word("OR") and not temporary and not local:
            raise _replace(cursor, token, "CREATE OR ")
        if token is not None and token.is_word("MATERIALIZED", "FUNCTION", "TYPE",
                                               "INDEX", "TEMPORARY", "CATALOG", "DATABASE"):
            raise CompileFailure(cursor.pos(token), f"unsupported: CREATE {token.text.upper()}",
                                 "a program has CREATE TABLE, CREATE [LOCAL] VIEW and LATENESS "
                                 "statements")
        after = "TABLE or VIEW after CREATE TEMPORARY" if temporary else (
            "TABLE, VIEW or LOCAL VIEW after CREATE")
        raise CompileFailure(cursor.pos(), f"expected {after}")
    if first.is_word("LATENESS"):
        return [_lateness_statement(cursor, first)]
    if first.is_word("INSERT"):
        return [_insert(cursor, first)]
    if first.is_word("SET"):
        return [_set(cursor, first)]
    if first.is_word("EXECUTE") and cursor.accept_word("STATEMENT"):
        cursor.expect_word("SET")
        cursor.expect_word("BEGIN")
        begin = StatementSetDecl(True, cursor.pos(first))
        insert = cursor.peek()
        if insert is None:
            return [begin]
        cursor.index += 1
        if not insert.is_word("INSERT"):
            raise CompileFailure(cursor.pos(insert), f"unexpected {_show(insert)} in a "
                                 "statement set", "a statement set holds INSERT INTO "
                                 "statements")
        return [begin, _insert(cursor, insert)]
    if first.is_word("BEGIN") and cursor.accept_word("STATEMENT"):
        cursor.expect_word("SET")
        _expect_end(cursor)
        return [StatementSetDecl(True, cursor.pos(first))]
    if first.is_word("END"):
        _expect_end(cursor)
        return [StatementSetDecl(False, cursor.pos(first))]
    if first.is_word("EXECUTE"):
        raise CompileFailure(cursor.pos(first), "unsupported statement EXECUTE",
                             "write the INSERT INTO statements themselves, or EXECUTE "
                             "STATEMENT SET BEGIN ... END")
    if first.is_word("REPLACE"):
        raise _replace(cursor, first, "")
    if first.is_word("DROP", "ALTER"):
        raise _drop_or_alter(cursor, first)
    if first.is_word("SELECT", "DELETE", "UPDATE"):
        raise CompileFailure(cursor.pos(first), f"unsupported statement {first.text.upper()}",
                             "wrap a query in CREATE VIEW name AS SELECT ..., or write it to a "
                             "table with INSERT INTO table SELECT ...")
    raise CompileFailure(cursor.pos(first), f"unexpected {_show(first)}: a statement starts "
                         "with CREATE TABLE, CREATE [LOCAL] VIEW, LATENESS, INSERT INTO or SET")


def _replace(cursor: _Cursor, at: Token, create: str) -> CompileFailure:
    """``REPLACE TABLE ...`` or ``CREATE OR REPLACE ...`` (Flink's RTAS), at REPLACE or OR:
    named in full, with its table or view."""
    words = [create.strip(), "REPLACE"] if create else ["REPLACE"]
    if create:
        cursor.index += 1  # OR
        cursor.expect_word("REPLACE")
    temporary = cursor.accept_word("TEMPORARY")
    kind = cursor.peek()
    kind_word = kind.text.upper() if kind is not None and kind.kind == "word" else "TABLE"
    form = " ".join([*words, *(["TEMPORARY"] if temporary else []), kind_word])
    name = cursor.peek(1)
    shown = identifier(name) if name is not None and name.kind in ("word", "qident") else "t"
    if kind_word == "VIEW":
        fix = (f"change CREATE VIEW {shown} AS SELECT ... itself to what it should be; the "
               "program is compiled again as a whole")
    else:
        fix = (f"change CREATE TABLE {shown} (...) WITH (...) itself to what it should be (a "
               f"query's rows: INSERT INTO {shown} SELECT ...); the program is compiled "
               "again as a whole")
    return CompileFailure(cursor.pos(at), f"{form} is not supported: a program is the whole "
                          "definition of its tables and views, compiled together, so nothing "
                          "in it replaces one", fix)


def _drop_or_alter(cursor: _Cursor, first: Token) -> CompileFailure:
    """``DROP ...`` or ``ALTER ...``: a program declares what runs, it changes no catalog."""
    verb = first.text.upper()
    kind = cursor.peek()
    kind_word = kind.text.upper() if kind is not None and kind.kind == "word" else ""
    message = (f"unsupported statement {verb}: a program declares the tables and views that "
               "run, compiled together; it changes no catalog")
    if verb == "ALTER":
        return CompileFailure(cursor.pos(first), message, "remove the ALTER statement and "
                              "change the CREATE statement it alters itself")
    if kind_word == "VIEW":
        fix = "remove the DROP statement (and the CREATE VIEW of a view that should not run)"
    else:
        fix = "remove the DROP statement (a table no view reads is not read)"
    return CompileFailure(cursor.pos(first), message, fix)


def _qualified_name(cursor: _Cursor, what: str, kind: str) -> Token:
    """A table or view name; Flink's ``catalog.db.name`` is refused at its first part."""
    name = cursor.name(what)
    if cursor.peek() is None or not cursor.peek().is_punct("."):  # type: ignore[union-attr]
        return name
    parts = [name]
    while cursor.accept_punct("."):
        parts.append(cursor.name(what))
    written = ".".join(_show(part) for part in parts)
    raise CompileFailure(cursor.pos(name), f"catalog and database names are not supported: "
                         f"name the {kind} alone, not {written} (a program declares its own "
                         "tables and views; it reads no catalog)",
                         f"write CREATE {kind.upper()} {identifier(parts[-1])}")


def _comment(cursor: _Cursor) -> bool:
    """``COMMENT 'text'`` (Flink's, on a table or a column): read and dropped, as it cannot
    change what is read or written. False when the cursor is not at COMMENT."""
    comment = cursor.accept_word("COMMENT")
    if comment is None:
        return False
    text = cursor.next("a quoted comment")
    if text.kind != "string":
        raise CompileFailure(cursor.pos(text), f"expected a quoted comment after COMMENT, "
                             f"found {_show(text)}", "write COMMENT 'text'")
    return True


#: What a table's statement is, the fix of an error in its shell.
_TABLE_FORM = ("a table is: CREATE TABLE name (column type, ...) [COMMENT 'text'] "
               "[WITH ('key' = 'value', ...)]")


def _table_clauses(cursor: _Cursor, name: str) -> tuple[OptionDecl, ...]:
    """What follows a table's columns: ``[COMMENT 'text'] [WITH (...)]``; Flink's
    ``DISTRIBUTED``, ``PARTITIONED BY``, ``LIKE`` and ``AS SELECT`` are refused by name."""
    _comment(cursor)
    _refused_table_clause(cursor, name)
    options: tuple[OptionDecl, ...] = ()
    if cursor.accept_word("WITH"):
        options = _options(cursor)
        _refused_table_clause(cursor, name)
    _expect_end(cursor, _TABLE_FORM)
    return options


def _refused_table_clause(cursor: _Cursor, name: str) -> None:
    """Flink's table clauses Tidemark refuses, at the cursor: named, with why."""
    token = cursor.peek()
    if token is None:
        return
    key_fix = ("; key the records with 'key.fields' (or the PRIMARY KEY of an upsert-kafka "
               "table)")
    placed = ("a record's partition is the murmur2 hash of its key, as Java's Kafka client "
              "places it")
    if token.is_word("PARTITIONED"):
        raise CompileFailure(cursor.pos(token), "PARTITIONED BY is not supported: Kafka "
                             f"topics are not partitioned by columns in Tidemark; {placed}",
                             "remove PARTITIONED BY" + key_fix)
    if token.is_word("DISTRIBUTED"):
        after = cursor.peek(1)
        form = "DISTRIBUTED " + (after.text.upper() if after is not None
                                 and after.is_word("BY", "INTO") else "BY")
        raise CompileFailure(cursor.pos(token), f"{form} is not supported: a Kafka topic's "
                             "partitions are its own, set where it is created, not a table's "
                             f"buckets; {placed}", f"remove {form} ...{key_fix}")
    if token.is_word("LIKE"):
        other = cursor.peek(1)
        source = (identifier(other) if other is not None and other.kind in ("word", "qident")
                  else "the other table")
        raise CompileFailure(cursor.pos(token), "LIKE is not supported: a table's columns, "
                             "watermark and options are written out in full in its own "
                             "definition", f"write the columns and options of {source} in "
                             "this table's definition")
    if token.is_word("AS"):
        raise _create_table_as(cursor, token, name)


def _create_table_as(cursor: _Cursor, at: Token, name: str) -> CompileFailure:
    return CompileFailure(cursor.pos(at), "CREATE TABLE ... AS SELECT is not supported: a "
                          "table is an input, declared by its columns, not made by a query",
                          f"declare the table with its columns, then INSERT INTO {name} "
                          f"SELECT ..., or write CREATE VIEW {name} WITH ('topic' = ...) AS "
                          "SELECT ...")


def _if_not_exists(cursor: _Cursor) -> None:
    """Flink's ``IF NOT EXISTS``: a program declares every name once, so it changes nothing."""
    token = cursor.peek()
    if token is not None and token.is_word("IF"):
        cursor.index += 1
        cursor.expect_word("NOT")
        cursor.expect_word("EXISTS")


def _insert(cursor: _Cursor, insert: Token) -> InsertDecl:
    """``INSERT INTO table [(c, ...)] SELECT ...`` (the cursor past INSERT)."""
    into = cursor.next("INTO")
    if into.is_word("OVERWRITE"):
        raise CompileFailure(cursor.pos(into), "unsupported: INSERT OVERWRITE (a Kafka topic "
                             "is appended to, never overwritten)", "write INSERT INTO")
    if not into.is_word("INTO"):
        raise CompileFailure(cursor.pos(into), f"expected INTO, found {_show(into)}")
    name = cursor.name("a table name")
    after = cursor.peek()
    if after is not None and after.is_punct("."):
        raise CompileFailure(cursor.pos(after), "unsupported: a catalog or database in a "
                             "table name", "name the table as the program declares it")
    columns: list[tuple[str, Position]] = []
    if cursor.peek() is not None and cursor.peek().is_punct("("):  # type: ignore[union-attr]
        columns = _name_list(cursor, "a column name")
    rest = cursor.tokens[cursor.index:]
    if not rest:
        raise CompileFailure(cursor.pos(), "expected a SELECT after INSERT INTO "
                             f"{identifier(name)}")
    if rest[0].is_word("VALUES"):
        raise CompileFailure(cursor.pos(rest[0]), "unsupported: INSERT INTO ... VALUES (a "
                             "program's rows come from its tables' topics)",
                             "produce the rows to the table's topic, or write INSERT INTO "
                             "table SELECT ...")
    return InsertDecl(identifier(name), cursor.pos(insert), cursor.pos(name), tuple(columns),
                      tuple(rest), (insert, into, name))


def _set(cursor: _Cursor, first: Token) -> SetDecl:
    """``SET 'key' = 'value'``."""
    key = cursor.next("a quoted configuration key")
    if key.kind != "string":
        raise CompileFailure(cursor.pos(key), f"expected a quoted configuration key, found "
                             f"{_show(key)}", "write SET 'key' = 'value'")
    cursor.expect_punct("=")
    value = cursor.next("a quoted value")
    if value.kind != "string":
        raise CompileFailure(cursor.pos(value), f"expected a quoted value, found "
                             f"{_show(value)}", f"write SET '{key.text}' = '...'")
    _expect_end(cursor)
    return SetDecl(key.text, value.text, cursor.pos(first), cursor.pos(key))


def _table(cursor: _Cursor, create: Token) -> TableDecl:
    _if_not_exists(cursor)
    name = _qualified_name(cursor, "a table name", "table")
    token = cursor.peek()
    if token is not None and not token.is_punct("("):
        # Flink's CTAS without columns: CREATE TABLE t [WITH (...)] AS SELECT ...
        as_ = next((t for t in cursor.tokens[cursor.index:] if t.is_word("AS")), None)
        if token.is_word("WITH", "AS") and as_ is not None:
            raise _create_table_as(cursor, as_, identifier(name))
        raise CompileFailure(cursor.pos(token), f"expected '(' and the columns of table "
                             f"{identifier(name)}, found {_show(token)}", _TABLE_FORM)
    cursor.expect_punct("(")
    columns: list[ColumnDecl] = []
    key: KeyDecl | None = None
    watermarks: list[WatermarkDecl] = []
    while True:
        token = cursor.peek()
        if token is not None and token.is_word("WATERMARK"):
            watermarks.append(_watermark(cursor))
            if cursor.accept_punct(","):
                continue
            cursor.expect_punct(")")
            break
        constraint = token is not None and token.is_word("CONSTRAINT")
        if constraint:
            cursor.index += 1
            cursor.name("a constraint name")
            token = cursor.peek()
        if token is not None and token.is_word("PRIMARY"):
            found = _primary_key(cursor, None)
            if key is not None:
                raise CompileFailure(found.position, "a table has one PRIMARY KEY",
                                     "list every key column in one PRIMARY KEY (a, b)")
            key = found
        elif constraint or (token is not None and token.is_word("FOREIGN", "UNIQUE", "CHECK")):
            shown = token.text.upper() if token is not None else "CONSTRAINT"
            raise CompileFailure(cursor.pos(token), f"unsupported: table constraint {shown}",
                                 "a table's constraints are PRIMARY KEY (...) NOT ENFORCED and "
                                 "WATERMARK FOR")
        else:
            column = _column(cursor)
            columns.append(column)
            after = cursor.peek()
            if after is not None and after.is_word("PRIMARY"):
                found = _primary_key(cursor, column)
                if key is not None:
                    raise CompileFailure(found.position, "a table has one PRIMARY KEY",
                                         "list every key column in one PRIMARY KEY (a, b)")
                key = found
                _comment(cursor)
        if cursor.accept_punct(","):
            continue
        cursor.expect_punct(")")
        break
    options = _table_clauses(cursor, identifier(name))
    return TableDecl(identifier(name), cursor.pos(name), tuple(columns), options, key,
                     tuple(watermarks))


def _watermark(cursor: _Cursor) -> WatermarkDecl:
    """``WATERMARK FOR c AS c [- INTERVAL 'n' unit]`` (Flink's bounded out-of-orderness):
    Tidemark's LATENESS n on c. Any other strategy (a function, another column, ``+``) is
    refused, naming what was written, with the LATENESS it would need."""
    watermark = cursor.expect_word("WATERMARK")
    position = cursor.pos(watermark)
    cursor.expect_word("FOR")
    column = cursor.name("the watermark's column")
    name = identifier(column)
    cursor.expect_word("AS")
    start = cursor.index
    end = _element_end(cursor, start)
    body = cursor.tokens[start:end]
    written = cursor.source.text[body[0].start:body[-1].end] if body else ""
    fix = (f"write WATERMARK FOR {name} AS {name} - INTERVAL '5' SECOND (Tidemark's LATENESS "
           f"on {name}: rows more than 5 seconds below the greatest {name} read are late), or "
           f"WATERMARK FOR {name} AS {name}")
    refused = CompileFailure(cursor.pos(body[0]) if body else position,
                             f"unsupported watermark strategy {written or '(none)'} for "
                             f"{name}: Tidemark's watermark is the greatest {name} read minus "
                             "a constant delay", fix)
    if not body or body[0].kind not in ("word", "qident") or identifier(body[0]) != name:
        raise refused
    cursor.index = start + 1
    if len(body) == 1:
        return WatermarkDecl(name, cursor.pos(column),
                             IntervalDecl("interval", 0, cursor.pos(body[0]), "0"), position)
    if not body[1].is_punct("-") or len(body) < 3 or not body[2].is_word("INTERVAL"):
        raise refused
    cursor.index = start + 2
    amount = parse_interval_tokens(cursor)
    if cursor.index != end:
        raise refused
    return WatermarkDecl(name, cursor.pos(column), amount, position)


def _primary_key(cursor: _Cursor, column: ColumnDecl | None) -> KeyDecl:
    """``PRIMARY KEY [(a, ...)] [NOT ENFORCED]``, at PRIMARY; without a list it follows
    ``column``'s definition and names that column. NOT ENFORCED is Flink's spelling (the
    key is not checked: every row of a key is one more version); Feldera's plain
    ``PRIMARY KEY`` means the same here."""
    primary = cursor.expect_word("PRIMARY")
    position = cursor.pos(primary)
    cursor.expect_word("KEY")
    names: list[tuple[str, Position]] = []
    if column is not None:
        names.append((column.name, column.position))
    else:
        names = _name_list(cursor, "a key column name")
    if cursor.accept_word("NOT"):
        cursor.expect_word("ENFORCED")
    elif cursor.peek() is not None and cursor.peek().is_word("ENFORCED"):  # type: ignore[union-attr]
        raise CompileFailure(cursor.pos(), "unsupported: an ENFORCED PRIMARY KEY (a table "
                             "keeps every row it reads: Tidemark never checks the key)",
                             "write PRIMARY KEY (...) NOT ENFORCED")
    return KeyDecl(tuple(names), position)


def _name_list(cursor: _Cursor, what: str) -> list[tuple[str, Position]]:
    """``( name , ... )``: each name as an identifier, with its position."""
    cursor.expect_punct("(")
    names: list[tuple[str, Position]] = []
    while True:
        token = cursor.name(what)
        names.append((identifier(token), cursor.pos(token)))
        if cursor.accept_punct(","):
            continue
        cursor.expect_punct(")")
        return names


def _expect_end(cursor: _Cursor, fix: str | None = None) -> None:
    token = cursor.peek()
    if token is not None:
        raise CompileFailure(cursor.pos(token), f"unexpected {_show(token)}: expected ';'",
                             fix)


def parse_type(cursor: _Cursor) -> SqlType:
    token = cursor.name("a type")
    word = token.text.upper()
    position = cursor.pos(token)
    if word in ("BOOLEAN", "BOOL"):
        return SqlType("BOOLEAN")
    if word in ("INT", "INTEGER"):
        return SqlType("INT")
    if word == "BIGINT":
        return SqlType("BIGINT")
    if word in ("REAL", "FLOAT"):
        return SqlType("REAL")
    if word == "DOUBLE":
        cursor.accept_word("PRECISION")
        return SqlType("DOUBLE")
    if word in ("DECIMAL", "NUMERIC", "DEC"):
        precision, scale = 10, 0
        if cursor.accept_punct("("):
            precision = _small_int(cursor, "a DECIMAL precision")
            if cursor.accept_punct(","):
                scale = _small_int(cursor, "a DECIMAL scale")
            cursor.expect_punct(")")
        if not 1 <= precision <= 38 or scale > precision:
            raise CompileFailure(position, f"bad DECIMAL({precision}, {scale})",
                                 "precision is 1 to 38 and scale at most the precision")
        return SqlType("DECIMAL", True, precision, scale)
    if word in ("VARCHAR", "STRING", "TEXT", "CHAR"):
        if word == "CHAR":
            cursor.expect_word("VARYING")
        _optional_length(cursor)
        return SqlType("VARCHAR")
    if word == "DATE":
        return SqlType("DATE")
    if word in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        # Flink's TIMESTAMP(p) and TIMESTAMP_LTZ(p) (an instant): Tidemark's one TIMESTAMP,
        # an instant in UTC with millisecond precision, whatever p says (docs/language.md).
        if cursor.accept_punct("("):
            digits = _small_int(cursor, "a TIMESTAMP precision")
            cursor.expect_punct(")")
            if digits > 9:
                raise CompileFailure(position, f"bad {word}({digits}): the precision is 0 to "
                                     "9", f"write {word}(3)")
        if word == "TIMESTAMP" and cursor.accept_word("WITHOUT"):
            cursor.expect_word("TIME")
            cursor.expect_word("ZONE")
        elif word == "TIMESTAMP" and cursor.accept_word("WITH"):
            cursor.expect_word("LOCAL")
            cursor.expect_word("TIME")
            cursor.expect_word("ZONE")
        return SqlType("TIMESTAMP")
    if word in ("VARBINARY", "BYTES", "BINARY"):
        if word == "BINARY":
            cursor.expect_word("VARYING")
        _optional_length(cursor)
        return SqlType("VARBINARY")
    raise CompileFailure(position, f"unknown type {token.text}", f"use one of {TYPE_NAMES}")


def _optional_length(cursor: _Cursor) -> None:
    if cursor.accept_punct("("):
        _small_int(cursor, "a length")
        cursor.expect_punct(")")


def _small_int(cursor: _Cursor, what: str) -> int:
    token = cursor.next(what)
    if token.kind != "number" or not token.text.isdigit():
        raise CompileFailure(cursor.pos(token), f"expected {what}, found {_show(token)}")
    return int(token.text)


def _column(cursor: _Cursor) -> ColumnDecl:
    name = cursor.name("a column name")
    after = cursor.peek()
    if after is not None and after.is_word("AS"):
        if _proctime_follows(cursor):
            return _proctime_column(cursor, name)
        return _computed_column(cursor, name)
    sql_type = parse_type(cursor)
    nullable = True
    lateness: IntervalDecl | None = None
    lateness_position: Position | None = None
    metadata: str | None = None
    metadata_position: Position | None = None
    while True:
        token = cursor.peek()
        if token is None or token.is_punct(",", ")"):
            break
        if cursor.accept_word("NOT"):
            cursor.expect_word("NULL")
            nullable = False
        elif cursor.accept_word("NULL"):
            nullable = True
        elif token.is_word("LATENESS"):
            cursor.index += 1
            lateness_position = cursor.pos(token)
            lateness = _lateness_amount(cursor)
        elif token.is_word("METADATA"):
            cursor.index += 1
            metadata_position = cursor.pos(token)
            metadata = identifier(name)
            if cursor.accept_word("FROM"):
                key = cursor.next("a quoted metadata key like 'timestamp'")
                if key.kind != "string":
                    raise CompileFailure(cursor.pos(key), f"expected a quoted metadata key "
                                         f"like 'timestamp', found {_show(key)}",
                                         "write METADATA FROM 'timestamp'")
                metadata, metadata_position = key.text, cursor.pos(key)
            cursor.accept_word("VIRTUAL")  # tables are only read: every metadata is virtual
        elif token.is_word("PRIMARY"):
            break  # PRIMARY KEY after a column: the table's key (_primary_key)
        elif token.is_word("COMMENT"):
            _comment(cursor)
        elif token.is_word("DEFAULT", "UNIQUE", "REFERENCES", "CHECK"):
            raise CompileFailure(cursor.pos(token), f"unsupported column constraint "
                                 f"{token.text.upper()}")
        else:
            raise CompileFailure(cursor.pos(token), f"unexpected {_show(token)} in the "
                                 f"definition of column {identifier(name)}",
                                 "a column is: name type [NOT NULL] [METADATA FROM 'key'] "
                                 "[LATENESS INTERVAL 'n' unit] [COMMENT 'text']")
    return ColumnDecl(identifier(name), sql_type.with_nullable(nullable), lateness,
                      cursor.pos(name), lateness_position, metadata, metadata_position)


#: Functions of processing time: of them, only ``PROCTIME()`` declares a table column.
_PROCESSING_TIME = ("PROCTIME", "NOW", "CURRENT_TIMESTAMP", "LOCALTIMESTAMP",
                    "CURRENT_ROW_TIMESTAMP", "CURRENT_TIME", "CURRENT_DATE", "LOCALTIME")


def _proctime_follows(cursor: _Cursor) -> bool:
    """The cursor is at ``AS PROCTIME ( )`` (Flink's processing-time attribute)."""
    tokens = cursor.tokens[cursor.index + 1:cursor.index + 4]
    return (len(tokens) == 3 and tokens[0].is_word("PROCTIME") and tokens[1].is_punct("(")
            and tokens[2].is_punct(")"))


def _proctime_column(cursor: _Cursor, name: Token) -> ColumnDecl:
    """``name AS PROCTIME()``: a TIMESTAMP NOT NULL processing-time attribute (seed 004). Its
    values only grow, step by step, so it is never late: LATENESS on it is refused (L7)."""
    cursor.index += 4
    _comment(cursor)
    token = cursor.peek()
    if token is not None and token.is_word("LATENESS"):
        column = identifier(name)
        raise CompileFailure(cursor.pos(token), f"LATENESS on processing-time column "
                             f"{column} AS PROCTIME(): its value is the batch time of the "
                             "step its row arrives in, never late",
                             f"write {column} AS PROCTIME() without LATENESS, and put "
                             "LATENESS on an event-time column (ts TIMESTAMP NOT NULL "
                             "LATENESS INTERVAL '5' SECOND)")
    if token is not None and not token.is_punct(",", ")"):
        raise CompileFailure(cursor.pos(token), f"unexpected {_show(token)} after "
                             f"{identifier(name)} AS PROCTIME()",
                             "a processing-time column is: name AS PROCTIME() "
                             "[COMMENT 'text']")
    return ColumnDecl(identifier(name), SqlType("TIMESTAMP", False), None, cursor.pos(name),
                      processing_time=True)


def _element_end(cursor: _Cursor, start: int) -> int:
    """The index of the ``,`` or ``)`` that ends the table element whose tokens from
    ``start`` on are an expression (a computed column's, a watermark's)."""
    end, depth = start, 0
    while end < len(cursor.tokens):
        token = cursor.tokens[end]
        if token.is_punct("("):
            depth += 1
        elif token.is_punct(")"):
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and token.is_punct(","):
            break
        end += 1
    return end


def _computed_column(cursor: _Cursor, name: Token) -> ColumnDecl:
    """Flink's computed column ``name AS expr [LATENESS ...]`` (the cursor at AS): a column
    computed from the record's other columns when it is decoded (docs/language.md). Time
    is event time only: an expression of processing time is refused but ``PROCTIME()``
    itself (SPEC S10, L7)."""
    start = cursor.index + 1
    end = _element_end(cursor, start)
    column = identifier(name)
    lateness_at = next((i for i in range(start, end) if cursor.tokens[i].is_word("LATENESS")),
                       end)
    # A top-level COMMENT 'text' (Flink's) ends the expression too.
    depth, comment_at = 0, end
    for i in range(start, end - 1):
        token = cursor.tokens[i]
        if token.is_punct("("):
            depth += 1
        elif token.is_punct(")"):
            depth -= 1
        elif depth == 0 and token.is_word("COMMENT") and cursor.tokens[i + 1].kind == "string":
            comment_at = i
            break
    body = cursor.tokens[start:min(lateness_at, comment_at)]
    written = (cursor.source.text[body[0].start:body[-1].end] if body else "")
    if not body:
        raise CompileFailure(cursor.pos(cursor.tokens[start] if start < len(cursor.tokens)
                                        else name),
                             f"computed column {column} has no expression",
                             f"write {column} AS <expression of the table's columns>")
    if any(t.is_word(*_PROCESSING_TIME) for t in body):
        shown = f"{column} AS {written}"
        raise CompileFailure(cursor.pos(name), f"unsupported: processing-time column "
                             f"{shown} (a table's processing-time column is exactly "
                             f"{column} AS PROCTIME())",
                             f"write {column} AS PROCTIME(), or compute {written} in a "
                             "view that reads the table")
    cursor.index = start + len(body)
    _comment(cursor)
    lateness: IntervalDecl | None = None
    lateness_position: Position | None = None
    if cursor.index < end and cursor.tokens[cursor.index].is_word("LATENESS"):
        lateness_position = cursor.pos(cursor.tokens[cursor.index])
        cursor.index += 1
        lateness = _lateness_amount(cursor)
        _comment(cursor)
    if cursor.index != end:
        token = cursor.tokens[cursor.index]
        after = "LATENESS" if lateness is not None else "COMMENT"
        raise CompileFailure(cursor.pos(token), f"unexpected {_show(token)} after the "
                             f"{after} of computed column {column}",
                             f"a computed column is: {column} AS expr [LATENESS INTERVAL "
                             "'n' unit] [COMMENT 'text']")
    # LATENESS makes the column NOT NULL (SPEC L2): a row without a time is invalid (S7).
    return ColumnDecl(column, SqlType("VARCHAR", lateness is None), lateness, cursor.pos(name),
                      lateness_position, computed=tuple(body))


def _lateness_amount(cursor: _Cursor) -> IntervalDecl:
    token = cursor.peek()
    if token is not None and token.kind == "number":
        cursor.index += 1
        if not token.text.isdigit():
            raise CompileFailure(cursor.pos(token), f"bad LATENESS {token.text}: expected a "
                                 "non-negative integer or an INTERVAL")
        return IntervalDecl("integer", int(token.text), cursor.pos(token), token.text)
    return parse_interval_tokens(cursor)


def parse_interval_tokens(cursor: _Cursor) -> IntervalDecl:
    """``INTERVAL 'n' unit`` or ``INTERVAL n unit`` to milliseconds (units MILLISECOND,
    SECOND, MINUTE, HOUR, DAY, singular or plural)."""
    start = cursor.peek()
    if start is None or not start.is_word("INTERVAL"):
        raise CompileFailure(cursor.pos(start), "expected INTERVAL 'n' unit",
                             "write e.g. INTERVAL '1' HOUR")
    cursor.index += 1
    position = cursor.pos(start)
    amount = cursor.next("an interval amount")
    unit = cursor.peek()
    text = amount.text.strip()
    if amount.kind == "string" and " " in text and unit is not None and not unit.is_word(
            *_UNIT_WORDS):
        number, _, unit_text = text.partition(" ")
        return _interval(position, number, unit_text.strip(), f"INTERVAL '{text}'")
    if amount.kind not in ("string", "number"):
        raise CompileFailure(cursor.pos(amount), f"bad INTERVAL: expected a quoted amount, "
                             f"found {_show(amount)}", "write e.g. INTERVAL '1' HOUR")
    if unit is None or unit.kind != "word":
        raise CompileFailure(cursor.pos(unit) if unit else position,
                             "bad INTERVAL: missing unit",
                             f"add a unit: {', '.join(TIME_UNITS_MS)}")
    cursor.index += 1
    if cursor.peek() is not None and cursor.peek().is_word("TO"):  # type: ignore[union-attr]
        raise CompileFailure(cursor.pos(), "unsupported: INTERVAL ... TO ... ranges",
                             "write a single unit, e.g. INTERVAL '90' MINUTE")
    return _interval(position, text, unit.text, f"INTERVAL '{text}' {unit.text.upper()}")


_UNIT_WORDS = tuple(TIME_UNITS_MS) + tuple(u + "S" for u in TIME_UNITS_MS)


def interval_ms(number: str, unit: str) -> int | str:
    """The interval in ms, or a message saying what is wrong with it."""
    upper = unit.upper()
    if upper.endswith("S") and upper[:-1] in TIME_UNITS_MS:
        upper = upper[:-1]
    if upper not in TIME_UNITS_MS:
        return f"unknown INTERVAL unit {unit}"
    if not re.fullmatch(r"[0-9]+(\.[0-9]*)?|\.[0-9]+", number):
        return f"bad INTERVAL amount '{number}': expected a non-negative number"
    # A fraction of a unit (Flink's INTERVAL '0.1' SECOND) is exact in Decimal: the interval
    # is a whole number of milliseconds, or refused.
    ms = Decimal(number) * TIME_UNITS_MS[upper]
    if ms != ms.to_integral_value():
        return (f"INTERVAL '{number}' {unit.upper()} is not a whole number of milliseconds, "
                "the precision of TIMESTAMP")
    return int(ms)


def _interval(position: Position, number: str, unit: str, text: str) -> IntervalDecl:
    result = interval_ms(number, unit)
    if isinstance(result, str):
        raise CompileFailure(position, result,
                             f"write e.g. INTERVAL '1' HOUR; units: {', '.join(TIME_UNITS_MS)}")
    return IntervalDecl("interval", result, position, text)


def _options(cursor: _Cursor) -> tuple[OptionDecl, ...]:
    cursor.expect_punct("(")
    options: list[OptionDecl] = []
    while True:
        key = cursor.next("an option name")
        if key.kind != "string":
            raise CompileFailure(cursor.pos(key), f"expected a quoted option name like "
                                 f"'topic', found {_show(key)}")
        cursor.expect_punct("=")
        value_token = cursor.peek()
        value_position = cursor.pos(value_token)
        value: str | IntervalDecl
        if value_token is not None and value_token.is_word("INTERVAL"):
            value = parse_interval_tokens(cursor)
        else:
            token = cursor.next("an option value")
            if token.kind != "string":
                raise CompileFailure(cursor.pos(token), f"expected a quoted option value, "
                                     f"found {_show(token)}")
            value = token.text
        options.append(OptionDecl(key.text.lower(), cursor.pos(key), value, value_position))
        if cursor.accept_punct(","):
            continue
        cursor.expect_punct(")")
        return tuple(options)


def _view(cursor: _Cursor, create: Token, local: bool) -> ViewDecl:
    _if_not_exists(cursor)
    name = _qualified_name(cursor, "a view name", "view")
    options: tuple[OptionDecl, ...] = ()
    if cursor.accept_word("WITH"):
        options = _options(cursor)
    cursor.expect_word("AS")
    rest = cursor.tokens[cursor.index:]
    if not rest:
        raise CompileFailure(cursor.pos(), "expected a SELECT after AS")
    depth = 0
    emit_index = None
    for i, token in enumerate(rest):
        if token.is_punct("("):
            depth += 1
        elif token.is_punct(")"):
            depth -= 1
        elif depth == 0 and token.is_word("EMIT"):
            emit_index = i
            break
    query = rest if emit_index is None else rest[:emit_index]
    emit = None
    if emit_index is not None:
        cursor.index += emit_index
        emit = _emit(cursor)
    if not query:
        raise CompileFailure(cursor.pos(rest[0]), "expected a SELECT after AS")
    return ViewDecl(identifier(name), cursor.pos(name), local, options, tuple(query), emit)


def _emit(cursor: _Cursor) -> EmitDecl:
    emit = cursor.expect_word("EMIT")
    stream = cursor.accept_word("STREAM") is not None
    after_watermark = False
    delay = None
    if cursor.accept_word("AFTER"):
        if cursor.accept_word("WATERMARK"):
            after_watermark = True
            if cursor.accept_word("AND"):
                cursor.expect_word("AFTER")
                cursor.expect_word("DELAY")
                delay = parse_interval_tokens(cursor)
        else:
            cursor.expect_word("DELAY", "WATERMARK")
            delay = parse_interval_tokens(cursor)
    elif not stream:
        raise CompileFailure(cursor.pos(), "bad EMIT clause",
                             "write EMIT STREAM, EMIT AFTER WATERMARK, EMIT STREAM AFTER "
                             "WATERMARK or EMIT [STREAM] AFTER DELAY INTERVAL 'n' unit")
    _expect_end(cursor)
    return EmitDecl(stream, after_watermark, delay, cursor.pos(emit))


def _lateness_statement(cursor: _Cursor, first: Token) -> LatenessDecl:
    view = cursor.name("a view name")
    cursor.expect_punct(".")
    column = cursor.name("a column name")
    amount = _lateness_amount(cursor)
    _expect_end(cursor)
    return LatenessDecl(identifier(view), identifier(column), cursor.pos(first),
                        cursor.pos(column), amount)
