"""Tokens and statements of a program file (SPEC L1-L5), with exact positions (SPEC L7).

The DDL shell (CREATE TABLE/VIEW, WITH, LATENESS, EMIT) is read from these tokens by
:mod:`app.program.ddl`; the SELECT of a view is handed to sqlglot with everything else of the
file blanked out, so that sqlglot's own line/column numbers are those of the file.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.circuit.ir import Position

__all__ = [
    "CompileFailure",
    "SourceText",
    "Statement",
    "Token",
    "matching_paren",
    "split_statements",
    "tokenize",
]

TokenKind = Literal["word", "qident", "string", "number", "punct"]

_PUNCT2 = ("<=", ">=", "<>", "!=", "||", "=>", "::")


class CompileFailure(Exception):
    """One L7 error found while compiling one statement: it stops that statement only."""

    def __init__(self, position: Position, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.position = position
        self.message = message
        self.fix = fix


class SourceText:
    """The program text and how to turn a character offset into a 1-based line/column.

    ``dialect`` is how the program reads where Flink SQL and Tidemark differ
    (docs/semantics.md, Flink dialect): the compiler sets it once it has read the tables.
    """

    def __init__(self, path: str, text: str, dialect: str = "tidemark") -> None:
        self.path = path
        self.text = text
        self.dialect = dialect
        self._line_starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]

    @property
    def flink(self) -> bool:
        """The program is in Flink's dialect (its tables name a ``'connector'``)."""
        return self.dialect == "flink"

    def position(self, offset: int) -> Position:
        line = bisect.bisect_right(self._line_starts, offset) - 1
        return Position(self.path, line + 1, offset - self._line_starts[line] + 1)

    def offset(self, line: int, column: int) -> int:
        """The character offset of a 1-based line/column (clamped to the text)."""
        line = max(1, min(line, len(self._line_starts)))
        return min(self._line_starts[line - 1] + max(column, 1) - 1, len(self.text))

    def blank_except(self, start: int, end: int,
                     replacements: tuple[tuple[int, int, str], ...] = ()) -> str:
        """The text with every character outside [start, end) turned into a space (newlines
        kept) and each (s, e, word) replacement's span overwritten by ``word`` padded with
        spaces, so offsets, lines and columns of what is kept do not move."""
        chars = [ch if ch == "\n" else " " for ch in self.text]
        chars[start:end] = self.text[start:end]
        for s, e, word in replacements:
            span = [ch if ch == "\n" else " " for ch in self.text[s:e]]
            assert len(word) <= len(span)
            span[: len(word)] = word
            chars[s:e] = span
        return "".join(chars)


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    text: str
    start: int
    end: int

    @property
    def upper(self) -> str:
        """Keyword view of the token: upper-cased for words, the text otherwise."""
        return self.text.upper() if self.kind == "word" else self.text

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.text.upper() in words

    def is_punct(self, *symbols: str) -> bool:
        return self.kind == "punct" and self.text in symbols


def tokenize(source: SourceText) -> list[Token]:
    """Split the program into tokens; comments and whitespace are dropped.

    Strings are ``'...'`` with ``''`` for a quote, quoted identifiers ``"..."`` (kept as
    written, SPEC L1: quoted identifiers are case-sensitive). A backquoted identifier
    (Flink's `` `user` ``) is an identifier that may be a reserved word, case-insensitive as an
    unquoted one: it is read as the double-quoted identifier of its lower-cased name, which
    has the same length, so ``source.text`` is rewritten in place and every later stage
    (sqlglot included) sees ``"user"`` at the same line and column.
    """
    text = source.text
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith("--", i):
            newline = text.find("\n", i)
            i = n if newline < 0 else newline + 1
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            if close < 0:
                raise CompileFailure(source.position(i), "unterminated /* comment",
                                     "close it with */")
            i = close + 2
        elif ch == "'":
            j, parts = i + 1, []
            while True:
                close = text.find("'", j)
                if close < 0:
                    raise CompileFailure(source.position(i), "unterminated string literal",
                                         "close it with a single quote '")
                parts.append(text[j:close])
                if text.startswith("''", close):
                    parts.append("'")
                    j = close + 2
                    continue
                break
            tokens.append(Token("string", "".join(parts), i, close + 1))
            i = close + 1
        elif ch == '"':
            close = text.find('"', i + 1)
            if close < 0:
                raise CompileFailure(source.position(i), "unterminated quoted identifier",
                                     'close it with a double quote "')
            tokens.append(Token("qident", text[i + 1:close], i, close + 1))
            i = close + 1
        elif ch == "`":
            close = text.find("`", i + 1)
            if close < 0:
                raise CompileFailure(source.position(i), "unterminated quoted identifier",
                                     "close it with a backquote `")
            name = text[i + 1:close].lower()
            if not name or '"' in name:
                raise CompileFailure(source.position(i), f"bad quoted identifier "
                                     f"{text[i:close + 1]}", "name it with letters, digits "
                                     "and _")
            source.text = source.text[:i] + f'"{name}"' + source.text[close + 1:]
            tokens.append(Token("qident", name, i, close + 1))
            i = close + 1
        elif ch.isalpha() or ch == "_":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] in "_$"):
                j += 1
            tokens.append(Token("word", text[i:j], i, j))
            i = j
        elif ch.isdigit() or (ch == "." and i + 1 < n and text[i + 1].isdigit()):
            j = i + 1
            while j < n and (text[j].isdigit() or text[j] == "."):
                j += 1
            if j < n and text[j] in "eE" and (
                    text[j + 1:j + 2].isdigit() or text[j + 1:j + 2] in ("+", "-")):
                j += 2
                while j < n and text[j].isdigit():
                    j += 1
            tokens.append(Token("number", text[i:j], i, j))
            i = j
        elif text[i:i + 2] in _PUNCT2:
            tokens.append(Token("punct", text[i:i + 2], i, i + 2))
            i += 2
        else:
            tokens.append(Token("punct", ch, i, i + 1))
            i += 1
    return tokens


@dataclass(frozen=True)
class Statement:
    """The tokens of one statement (without its ';')."""

    tokens: tuple[Token, ...]

    @property
    def start(self) -> int:
        return self.tokens[0].start

    @property
    def end(self) -> int:
        return self.tokens[-1].end


def matching_paren(tokens: Sequence[Token], open_index: int) -> int:
    """The index of the ``)`` that closes the ``(`` at ``open_index``; -1 if none does."""
    depth = 0
    for i in range(open_index, len(tokens)):
        if tokens[i].is_punct("("):
            depth += 1
        elif tokens[i].is_punct(")"):
            depth -= 1
            if depth == 0:
                return i
    return -1


def split_statements(tokens: list[Token]) -> list[Statement]:
    """Statements are separated by ``;`` (SPEC L1); empty statements are skipped."""
    statements: list[Statement] = []
    current: list[Token] = []
    for token in tokens:
        if token.is_punct(";"):
            if current:
                statements.append(Statement(tuple(current)))
            current = []
        else:
            current.append(token)
    if current:
        statements.append(Statement(tuple(current)))
    return statements
