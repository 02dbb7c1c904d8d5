"""WITH queries and subqueries in FROM, read out of a view's query (SPEC L3, S18).

``WITH w AS (SELECT ...) [, w2 AS (...)] SELECT ...`` and ``FROM (SELECT ...) AS s`` (also
as a side of a JOIN and in a branch of a UNION ALL) are not planned in place: each one is
the query of a local view that the compiler (:mod:`app.program.compile`) generates just
before the view that reads it, so every later stage sees a view over views (S18) and nothing
else. So is a window function written as a side of a JOIN (Flink's window join,
``FROM TABLE(TUMBLE(TABLE a, ...)) AS l JOIN TABLE(TUMBLE(TABLE b, ...)) AS r ON ...``): it
is the subquery ``(SELECT * FROM TABLE(TUMBLE(...)))`` of the same name (S16). This module
only splits the tokens: :func:`split_query` returns each WITH query's and subquery's own
tokens, and the outer query with each subquery replaced by a placeholder
name, in a copy of the text of the same length, so that every line and column reported for
any part is the file's own (SPEC L7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from app.circuit.ir import Column, Position
from app.program.ddl import _Cursor, identifier
from app.program.lexer import CompileFailure, SourceText, Token, matching_paren

__all__ = ["Derived", "QueryParts", "reserved_name", "split_query"]

#: Words after a subquery's ``)`` that end it without an alias.
_CLAUSE_WORDS = frozenset({
    "WHERE", "GROUP", "HAVING", "JOIN", "INNER", "LEFT", "RIGHT", "FULL", "CROSS",
    "NATURAL", "ON", "UNION", "INTERSECT", "EXCEPT", "ORDER", "LIMIT", "OFFSET", "FOR",
    "WINDOW", "QUALIFY", "USING", "LATERAL", "EMIT", "TABLESAMPLE",
})
_JOIN_WORDS = frozenset({"JOIN", "INNER", "LEFT", "RIGHT", "FULL", "CROSS", "NATURAL"})
#: The window functions of FROM (SPEC L4).
_WINDOW_FUNCTIONS = ("TUMBLE", "HOP", "SESSION", "CUMULATE")


@dataclass(frozen=True)
class Derived:
    """A WITH query or a subquery in FROM: the query of a local view the compiler generates.

    ``name`` is how the outer query names it (the WITH name, the subquery's alias; empty for
    a subquery without one); ``placeholder`` is the word the outer query's text shows in its
    place (the WITH name itself, or ``__sq<i>`` over a subquery's parentheses). A
    ``window`` is a window function as a side of a JOIN: its ``tokens`` are the function's
    own (``TABLE(TUMBLE(...))``), the query ``SELECT * FROM`` it. A ``join`` is the join of
    a join chain's earlier relations (``a JOIN b`` of ``a JOIN b ... JOIN c``), which the
    chain's last join reads. An ``aggregate`` is a subquery in WHERE compared per window,
    decorrelated into the aggregate per window that the query joins. An ``insert`` is the
    query of one of several INSERT INTO one table, whose rows the table's view unites.
    """

    kind: Literal["with", "subquery", "window", "join", "aggregate", "insert"]
    name: str
    position: Position
    tokens: tuple[Token, ...]
    placeholder: str
    #: Of a ``join``, the generated view of a join chain's first ``keep`` joins: its
    #: ``tokens`` are the SELECT that writes the chain, in ``source`` (which shows the
    #: chain's subqueries as their placeholders).
    source: SourceText | None = None
    keep: int = 0
    #: Of a ``join``: the view whose query writes the chain (its generated views are all
    #: named after it, ``view.a_join_b``, ``view.a_join_b_join_c``).
    parent: str = ""
    #: Of an ``aggregate`` (a per-window subquery in WHERE, app/program/window_subquery.py):
    #: the query the compiler wrote for it, over ``tokens`` in ``source``.
    query: exp.Select | None = None
    #: Of an ``insert`` (one of several INSERT INTO one table, app/program/insert.py): the
    #: table's columns, which its rows are conformed to (``parent`` is the table).
    columns: tuple[Column, ...] = ()


@dataclass(frozen=True)
class QueryParts:
    """A query split into its WITH queries, its subqueries in FROM (in text order) and the
    outer query, whose ``tokens`` and ``source`` show each subquery as its placeholder."""

    source: SourceText
    tokens: tuple[Token, ...]
    withs: tuple[Derived, ...]
    subqueries: tuple[Derived, ...]


def reserved_name(name: str) -> str | None:
    """Why ``name`` cannot be a user's table, view or WITH name, or None when it can: names
    starting with ``__`` are the compiler's placeholders, and a ``.`` separates the parts of
    a generated view's name (``view.with_name``), so no user name can ever equal one."""
    if name.startswith("__"):
        return f"names starting with __ are reserved: {name}"
    if "." in name:
        return (f"names containing a . are reserved for the views generated from WITH "
                f"queries and subqueries: {name}")
    return None


def split_query(source: SourceText, tokens: tuple[Token, ...]) -> QueryParts:
    """The WITH queries, the subqueries in FROM and the outer query of one query.

    Raises:
        CompileFailure: a WITH list or subquery that is not written as the grammar says, or
            with EMIT, LATENESS, options or column lists inside (they belong to CREATE VIEW).
    """
    withs: tuple[Derived, ...] = ()
    rest = tokens
    if tokens and tokens[0].is_word("WITH"):
        withs, rest = _with_list(source, tokens)
    subqueries, masked, outer = _subqueries(source, rest)
    return QueryParts(masked, outer, withs, subqueries)


def _with_list(source: SourceText,
               tokens: tuple[Token, ...]) -> tuple[tuple[Derived, ...], tuple[Token, ...]]:
    cursor = _Cursor(source, tokens, index=1, end_offset=tokens[-1].end)
    recursive = cursor.accept_word("RECURSIVE")
    if recursive is not None:
        raise CompileFailure(cursor.pos(recursive), "unsupported: WITH RECURSIVE",
                             "a WITH query reads tables, views and the WITH queries before "
                             "it; write each step as its own WITH query")
    found: list[Derived] = []
    while True:
        token = cursor.name("the name of a WITH query")
        name = identifier(token)
        position = cursor.pos(token)
        reserved = reserved_name(name)
        if reserved is not None:
            raise CompileFailure(position, reserved, "rename the WITH query")
        first = next((d for d in found if d.name == name), None)
        if first is not None:
            raise CompileFailure(position, f"duplicate WITH query name {name}: already "
                                 f"defined at line {first.position.line}",
                                 "rename one of them")
        after = cursor.peek()
        if after is not None and after.is_word("WITH"):
            raise CompileFailure(cursor.pos(after), f"WITH query {name} has options; a WITH "
                                 "query is a local view of its view only",
                                 "to write it to Kafka, declare it as CREATE VIEW name WITH "
                                 "('topic' = '...') AS SELECT ... and read that view")
        if after is not None and after.is_punct("("):
            raise CompileFailure(cursor.pos(after), f"unsupported: a column list after WITH "
                                 f"query {name}", "name the columns with AS in its own SELECT list "
                                 "(x AS a, y AS b)")
        if after is not None and after.is_word("MATERIALIZED", "NOT"):
            raise CompileFailure(cursor.pos(after), f"unsupported: {after.text.upper()} "
                                 f"in WITH query {name}",
                                 "remove it: every WITH query is a local view, computed once")
        cursor.expect_word("AS")
        open_ = cursor.expect_punct("(")
        close = _close(source, tokens, cursor.index - 1)
        body = tokens[cursor.index:close]
        _check_body(source, open_, body, f"WITH query {name}")
        found.append(Derived("with", name, position, body, name))
        cursor.index = close + 1
        if cursor.accept_punct(",") is None:
            break
    rest = tokens[cursor.index:]
    if not rest:
        raise CompileFailure(source.position(tokens[-1].end), "a WITH list needs a SELECT "
                             "after it", "write WITH w AS (SELECT ...) SELECT ... FROM w")
    return tuple(found), rest


def _close(source: SourceText, tokens: tuple[Token, ...], open_index: int) -> int:
    close = matching_paren(tokens, open_index)
    if close < 0:
        raise CompileFailure(source.position(tokens[open_index].start), "unclosed (",
                             "close it with )")
    return close


def _check_body(source: SourceText, open_: Token, body: tuple[Token, ...], what: str) -> None:
    """A WITH query or subquery is a query only: EMIT and LATENESS belong to CREATE VIEW."""
    if not body:
        raise CompileFailure(source.position(open_.start), f"{what} is empty",
                             "write a SELECT inside the parentheses")
    depth = 0
    for token in body:
        if token.is_punct("("):
            depth += 1
        elif token.is_punct(")"):
            depth -= 1
        elif depth == 0 and token.is_word("EMIT"):
            raise CompileFailure(source.position(token.start), f"EMIT in {what}: EMIT "
                                 "belongs to the view's own query",
                                 "remove it: a WITH query or subquery that aggregates by a "
                                 "window writes each window once, final (as EMIT AFTER "
                                 "WATERMARK); put EMIT after the view's query")
        elif depth == 0 and token.is_word("LATENESS"):
            raise CompileFailure(source.position(token.start), f"LATENESS in {what}",
                                 "declare LATENESS on a table column, or with LATENESS "
                                 "view.column on a view created with CREATE VIEW")


def _subqueries(source: SourceText, tokens: tuple[Token, ...],
                ) -> tuple[tuple[Derived, ...], SourceText, tuple[Token, ...]]:
    """Each ``(SELECT ...)`` or ``(WITH ...)`` right after a top-level FROM or JOIN, each
    window function as a side of a JOIN, and the query with each one replaced by its
    placeholder (text and tokens)."""
    found: list[Derived] = []
    spans: list[tuple[int, int, str]] = []
    outer: list[Token] = []
    depth = 0
    in_from = False  # between a top-level FROM and the clause after it
    i = 0
    while i < len(tokens):
        token = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        after = tokens[i + 2] if i + 2 < len(tokens) else None
        if depth == 0 and token.kind == "word":
            in_from = token.is_word("FROM") or (in_from and token.upper not in _CLAUSE_WORDS)
        # A relation follows FROM, JOIN, or a comma of FROM's list (``FROM a, b``).
        starts = depth == 0 and (token.is_word("FROM", "JOIN")
                                 or (in_from and token.is_punct(",")))
        if (starts and nxt is not None
                and nxt.is_punct("(") and after is not None and after.is_word("SELECT", "WITH")):
            outer.append(token)
            close = _close(source, tokens, i + 1)
            body = tokens[i + 2:close]
            placeholder = f"__sq{len(found) + 1}"
            _check_body(source, nxt, body, "a subquery")
            alias, alias_end = _alias(source, tokens, close + 1)
            following = tokens[alias_end] if alias_end < len(tokens) else None
            in_join = _joined(token, following)
            if not alias and in_join:
                raise CompileFailure(source.position(nxt.start), "a subquery as a side of a "
                                     "JOIN needs a name",
                                     "add an alias after it: JOIN (SELECT ...) AS s ON ...")
            found.append(Derived("subquery", alias, source.position(nxt.start), body,
                                 placeholder))
            spans.append((nxt.start, tokens[close].end, placeholder))
            outer.append(Token("word", placeholder, nxt.start, nxt.start + len(placeholder)))
            i = close + 1
            continue
        last = _window_function_end(tokens, i + 1) if starts else -1
        if last >= 0:
            alias, alias_end = _alias(source, tokens, last + 1, "window function")
            following = tokens[alias_end] if alias_end < len(tokens) else None
            if _joined(token, following):
                start = tokens[i + 1]
                if not alias:
                    raise CompileFailure(source.position(start.start), "a window function "
                                         "as a side of a JOIN needs a name",
                                         "add an alias after it: JOIN TABLE(TUMBLE(TABLE t, "
                                         "DESCRIPTOR(ts), INTERVAL '1' MINUTE)) AS r ON ...")
                placeholder = f"__sq{len(found) + 1}"
                found.append(Derived("window", alias, source.position(start.start),
                                     tokens[i + 1:last + 1], placeholder))
                spans.append((start.start, tokens[last].end, placeholder))
                outer.append(token)
                outer.append(Token("word", placeholder, start.start,
                                   start.start + len(placeholder)))
                i = last + 1
                continue
        if token.is_punct("("):
            depth += 1
        elif token.is_punct(")"):
            depth -= 1
        outer.append(token)
        i += 1
    if not spans:
        return (), source, tokens
    masked = SourceText(source.path, source.blank_except(0, len(source.text), tuple(spans)),
                        source.dialect)
    return tuple(found), masked, tuple(outer)


def _joined(token: Token, following: Token | None) -> bool:
    """Whether the relation after ``token`` (FROM, JOIN or a comma of FROM's list) is a side
    of a join: written after JOIN or a comma, or followed by one."""
    if token.is_word("JOIN") or token.is_punct(","):
        return True
    return following is not None and (following.is_word(*_JOIN_WORDS)
                                      or following.is_punct(","))


def _window_function_end(tokens: tuple[Token, ...], index: int) -> int:
    """The index of the last token of the window function that starts at ``index``
    (``TABLE(TUMBLE(...))``, or ``TUMBLE(...)`` without the outer TABLE), or -1."""
    at = index + 2 if (index + 1 < len(tokens) and tokens[index].is_word("TABLE")
                       and tokens[index + 1].is_punct("(")) else index
    if not (at + 1 < len(tokens) and tokens[at].is_word(*_WINDOW_FUNCTIONS)
            and tokens[at + 1].is_punct("(")):
        return -1
    # The ( after TABLE, or after the function's name: both at index + 1.
    return matching_paren(tokens, index + 1)


def _alias(source: SourceText, tokens: tuple[Token, ...], index: int,
           what: str = "subquery") -> tuple[str, int]:
    """A subquery's (or a window function's) alias (``AS s`` or ``s``) starting at
    ``index``, and the index after it; ``""`` when there is none."""
    token = tokens[index] if index < len(tokens) else None
    if token is None:
        return "", index
    if token.is_word("AS"):
        name = tokens[index + 1] if index + 1 < len(tokens) else None
        if name is None or name.kind not in ("word", "qident"):
            raise CompileFailure(source.position(token.end if name is None else name.start),
                                 f"expected the {what}'s name after AS",
                                 "write (SELECT ...) AS s" if what == "subquery"
                                 else "write TABLE(TUMBLE(...)) AS s")
        end = index + 2
    elif token.kind == "qident" or (token.kind == "word" and token.upper not in _CLAUSE_WORDS):
        name, end = token, index + 1
    else:
        return "", index
    alias = identifier(name)
    reserved = reserved_name(alias)
    if reserved is not None:
        raise CompileFailure(source.position(name.start), reserved, f"rename the {what}")
    columns = tokens[end] if end < len(tokens) else None
    if columns is not None and columns.is_punct("("):
        raise CompileFailure(source.position(columns.start), f"unsupported: a column list "
                             f"after {what} {alias}", "name the columns with AS in its own "
                             "SELECT list (x AS a, y AS b)" if what == "subquery" else
                             "name the columns with AS in the SELECT list that reads them "
                             "(l.x AS a, l.y AS b)")
    return alias, end
