"""A view's SELECT to the operator pipeline of the IR (SPEC L3, L4, S10).

The pipeline is always ``[Window] [Filter(WHERE)] [Aggregate] [Filter(HAVING)] Project``.
After an :class:`~app.circuit.ir.Aggregate`, HAVING and the SELECT list refer to the
Aggregate's output names: the GROUP BY keys (the column's name for a plain column, else
``_key<i>``) then the aggregates (``_agg<i>``); the final Project gives the user's names.

sqlglot parses the SELECT. The window table function in FROM
(``TABLE(TUMBLE(TABLE t, DESCRIPTOR(c), size [, offset]))``) is read from the tokens first and
replaced, in a copy of the text of the same length, by a placeholder table name, so that every
line and column sqlglot reports is the file's own (SPEC L7).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Literal, cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from app.circuit import functions as fn
from app.circuit.derived_time import expression_time, monotone_steps
from app.circuit.explain import expr_text, waterline_text
from app.circuit.ir import (
    AggCall,
    Aggregate,
    Call,
    Case,
    Cast,
    Column,
    ColumnRef,
    Expr,
    Filter,
    Join,
    JoinAsOf,
    JoinBound,
    JoinSide,
    JoinTime,
    Literal_,
    Operator,
    Position,
    Project,
    SqlType,
    TimeAttribute,
    UnionAll,
    UnionBranch,
    Window,
    column_names,
    conjuncts,
)
from app.circuit.ir import substitute as _replace
from app.circuit.processing_time import NOW, now
from app.program.as_of_subquery import VERSIONS_BY, as_of_join
from app.program.ddl import _Cursor, parse_interval_tokens
from app.program.lexer import CompileFailure, SourceText, Token, matching_paren
from app.program.over_clause import OVER_AGGREGATES, OverCall, plan_over, state_text
from app.program.top_n import Ranking, TopNPlan, plan_ranking, plan_top_n, ranking_item

__all__ = [
    "JOINED_ROWS",
    "JOIN_PREFIX",
    "TVF_PLACEHOLDER",
    "UNNAMED",
    "WINDOW_TIME",
    "PlannedQuery",
    "Relation",
    "column_expression",
    "find_window_function",
    "join_chain",
    "over_join",
    "plan_decorrelated",
    "plan_join_prefix",
    "plan_over_join",
    "plan_parsed",
    "plan_query",
    "plan_window_side",
    "processing_time_attribute",
    "unite",
]

_PLACEHOLDER = "__tvf__"
#: The table name a parsed query shows its window function in FROM as.
TVF_PLACEHOLDER = _PLACEHOLDER
#: The name a join chain's last join reads the generated view of its earlier relations by
#: (the compiler's, app/program/compile.py); no user name starts with ``__``.
JOIN_PREFIX = "__joined__"
_BOOL = SqlType("BOOLEAN", nullable=False)
#: The fix of a subquery outside FROM: the JOIN that computes its rows (NEXMark Q7).
_JOIN_FORM = ("write it as a JOIN with the subquery in FROM, as NEXMark Q7's WHERE price = "
              "(SELECT MAX(price) ...) is FROM bid AS b JOIN (SELECT window_end, MAX(price) AS "
              "maxprice FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' "
              "MINUTE)) GROUP BY window_start, window_end) AS m ON b.price = m.maxprice AND "
              "b.bidtime >= m.window_end - INTERVAL '10' MINUTE AND b.bidtime < m.window_end "
              "(pipelines/nexmark_q7.sql)")


@dataclass(frozen=True)
class Relation:
    """What a view can read (a table or an earlier view) as the compiler sees it."""

    name: str
    columns: tuple[Column, ...]
    time_attributes: tuple[TimeAttribute, ...]
    insert_only: bool
    kind: Literal["table", "view"]
    #: A table's PRIMARY KEY columns (S16: a versioned table of a temporal join); empty
    #: for a table without one and for every view.
    primary_key: tuple[str, ...] = ()
    #: A SELECT ranking a window's rows (ROW_NUMBER/RANK), which only a reader limiting
    #: its rank makes a view of (app/program/top_n.py); None for any other relation.
    ranking: Ranking | None = None

    #: A table's ``AS PROCTIME()`` columns (processing-time attributes); empty for a view.
    processing_time: tuple[str, ...] = ()
    #: Of a stage boundary's table (ADR 0023): its LATENESS columns that are the
    #: ``window_end`` of the relation it reads (a window's rows are all in once the
    #: table's waterline reaches the window's end), which a window Top-N can rank by.
    window_ends: tuple[str, ...] = ()
    #: Of the generated view of a join chain's earlier relations: each relation's alias ->
    #: each of its columns -> this view's column holding it (``alias__column``).
    joined: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: Of a table of a program that calls CURRENT_WATERMARK: each LATENESS column -> the
    #: hidden column its rows carry its waterline in (app/circuit/computed_columns.py).
    current_watermarks: Mapping[str, Column] = field(default_factory=dict)
    #: Of an updating view made of the changes an ``EMIT ... AFTER DELAY`` aggregate holds
    #: back: that aggregate, whose held changes can come after the waterline passed their
    #: group, so the view has no time attributes for its readers (S11, S18).
    delayed: str = ""
    #: Of a changelog table (ADR 0030): the generated view of its latest row per key, which
    #: a view reads in its place everywhere but as the versioned side of a temporal join
    #: (:func:`read_as`). Empty for every other relation.
    latest: str = ""

    def time_attribute(self, column: str) -> TimeAttribute | None:
        for attr in self.time_attributes:
            if attr.column == column:
                return attr
        return None


def read_as(relation: Relation, relations: Mapping[str, Relation],
            versioned: bool = False) -> Relation:
    """What a view reads where its query names ``relation``: a changelog table's latest row
    per key (ADR 0030, an updating view), unless it is the ``versioned`` side of a temporal
    join, which reads the table's versions and deletions (S16)."""
    if versioned or not relation.latest:
        return relation
    return relations[relation.latest]


def processing_time_attribute(attr: TimeAttribute, relations: dict[str, Relation]) -> bool:
    """Whether ``attr`` follows a table's PROCTIME column (through forwarding views), as
    :func:`app.circuit.processing_time.attribute_is_processing_time` does over a circuit."""
    relation = relations.get(attr.table)
    if relation is None:
        return False
    if relation.kind == "table":
        return attr.source_column in relation.processing_time
    upstream = relation.time_attribute(attr.source_column)
    return (upstream is not None and upstream != attr
            and processing_time_attribute(upstream, relations))


def _expression_time(expr: Expr, attributes: dict[str, TimeAttribute], column: str,
                     relations: dict[str, Relation]) -> TimeAttribute | None:
    """:func:`expression_time`, except that only event time derives (S10, docs/semantics.md):
    an expression of a processing-time attribute is a plain value."""
    attr = expression_time(expr, attributes, column)
    if attr is not None and attr.kind == "derived" and attr.derivation is not None and (
            processing_time_attribute(attr.derivation.source, relations)):
        return None
    return attr


@dataclass
class PlannedQuery:
    source: str
    operators: list[Operator]
    columns: list[Column]
    key: tuple[str, ...]
    time_attributes: tuple[TimeAttribute, ...]
    aggregate: bool
    window: Window | None
    #: (output name or Aggregate key name, its time attribute) of the key that bounds state
    window_key: tuple[str, TimeAttribute] | None
    group_position: Position | None
    key_names: tuple[str, ...] = ()
    key_selected: dict[str, str] = field(default_factory=dict)
    time_key: tuple[str, TimeAttribute] | None = None
    #: Every relation read, in branch order (one per UNION ALL branch); empty: ``source``.
    sources: tuple[str, ...] = ()
    #: Where each output column's SELECT item is (for errors about a column).
    column_positions: tuple[Position, ...] = ()
    #: Of a JOIN view (S16): where its JOIN keyword is, when each side's rows are freed
    #: (empty for a join without a time bound), and what its incomplete bound lacks.
    join_position: Position | None = None
    join_state: str = ""
    join_unbounded: str = ""
    #: A SELECT DISTINCT, planned as the GROUP BY of its columns (for messages only).
    distinct: bool = False
    #: A SELECT that ranks a window's rows, for its reader to limit (no view of its own).
    ranking: Ranking | None = None
    #: A window Top-N (the reader of a ranking) and the ranking relation it read.
    top_n: TopNPlan | None = None
    ranked: str = ""
    #: Of a view with OVER aggregates: where its first OVER is (None without any).
    over_position: Position | None = None
    #: Of a view with OVER aggregates: what state it holds and when it is freed (S11).
    over_state: str = ""
    #: Of the generated view of a join chain's earlier relations (:func:`plan_join_prefix`):
    #: each relation's alias -> its columns -> this view's column.
    joined: dict[str, dict[str, str]] = field(default_factory=dict)
    #: A stateless query over an updating relation (S18): its rows are changes, each an
    #: insertion or a retraction of the relation's rows, passed on as they come.
    updating: bool = False
    #: An aggregate over an updating relation (S18): its accumulators take each retraction
    #: back (docs/semantics.md); the relation's name.
    retracting: str = ""


@dataclass(frozen=True)
class _Tvf:
    kind: str
    table: str
    table_position: Position
    column: str
    column_position: Position
    amounts: tuple[tuple[int, str, Position], ...]  # (amount, 'interval'|'integer', position)
    position: Position
    start: int
    end: int
    #: SESSION's ``PARTITION BY`` columns (name, position); empty without one.
    partition: tuple[tuple[str, Position], ...] = ()


def _find_tvf(source: SourceText, tokens: Sequence[Token]) -> _Tvf | None:
    for i, token in enumerate(tokens):
        if not (token.kind == "word" and i + 1 < len(tokens) and tokens[i + 1].is_punct("(")):
            continue
        word = token.text.upper()
        if word not in ("TUMBLE", "HOP", "SESSION", "CUMULATE"):
            continue
        close = matching_paren(tokens, i + 1)
        if close < 0:
            raise CompileFailure(source.position(token.start), f"unclosed {word}(")
        start_index, end_index = i, close
        if i >= 2 and tokens[i - 1].is_punct("(") and tokens[i - 2].is_word("TABLE"):
            outer = matching_paren(tokens, i - 1)
            if outer < 0:
                raise CompileFailure(source.position(tokens[i - 2].start), "unclosed TABLE(")
            start_index, end_index = i - 2, outer
        args = _split_args(tokens[i + 2:close])
        return _tvf_args(source, word, token, args, tokens[start_index].start,
                         tokens[end_index].end)
    return None


def find_window_function(source: SourceText, tokens: Sequence[Token]) -> _Tvf | None:
    """The first window function (L4) in ``tokens``, or None."""
    return _find_tvf(source, tokens)


def _split_args(tokens: Sequence[Token]) -> list[list[Token]]:
    args: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        if token.is_punct("("):
            depth += 1
        elif token.is_punct(")"):
            depth -= 1
        if depth == 0 and token.is_punct(","):
            args.append([])
        else:
            args[-1].append(token)
    # Calcite's named arguments (data => ..., timecol => ...) are read positionally.
    return [a[2:] if len(a) > 2 and a[1].is_punct("=>") else a for a in args]


def _tvf_args(source: SourceText, word: str, token: Token, args: list[list[Token]],
              start: int, end: int) -> _Tvf:
    position = source.position(token.start)
    needed = {"TUMBLE": 4, "HOP": 5, "CUMULATE": 5, "SESSION": 3}[word]
    usage = {
        "TUMBLE": "TABLE(TUMBLE(TABLE t, DESCRIPTOR(col), INTERVAL '1' MINUTE [, offset]))",
        "HOP": "TABLE(HOP(TABLE t, DESCRIPTOR(col), slide, size [, offset]))",
        "CUMULATE": "TABLE(CUMULATE(TABLE t, DESCRIPTOR(col), step, size [, offset]))",
        "SESSION": "TABLE(SESSION(TABLE t [PARTITION BY k], DESCRIPTOR(col), gap))",
    }[word]
    if word == "SESSION":
        args, partition = _session_partition(source, args, usage)
        if len(args) != 3 or any(not a for a in args):
            raise CompileFailure(position, "SESSION takes 3 arguments", f"write {usage}")
    else:
        partition = ()
        if not (needed - 1 <= len(args) <= needed) or any(not a for a in args):
            raise CompileFailure(position, f"{word} takes {needed - 1} or {needed} arguments",
                                 f"write {usage}")
    table_tokens = [t for t in args[0] if not t.is_punct("(", ")")]
    if len(table_tokens) != 2 or not table_tokens[0].is_word("TABLE") or table_tokens[1].kind \
            not in ("word", "qident"):
        raise CompileFailure(source.position(args[0][0].start),
                             f"the first argument of {word} must be TABLE name",
                             f"write {usage}")
    desc = args[1]
    if not (len(desc) == 4 and desc[0].is_word("DESCRIPTOR") and desc[1].is_punct("(")
            and desc[2].kind in ("word", "qident") and desc[3].is_punct(")")):
        raise CompileFailure(source.position(desc[0].start),
                             f"the second argument of {word} must be DESCRIPTOR(column)",
                             f"write {usage}")
    amounts: list[tuple[int, str, Position]] = []
    for arg in args[2:]:
        cursor = _Cursor(source, tuple(arg), end_offset=arg[-1].end)
        first = arg[0]
        if first.kind == "number":
            if len(arg) != 1 or not first.text.isdigit():
                raise CompileFailure(source.position(first.start),
                                     f"bad {word} size {first.text}: expected a non-negative "
                                     "integer or an INTERVAL")
            amounts.append((int(first.text), "integer", source.position(first.start)))
            continue
        interval = parse_interval_tokens(cursor)
        if cursor.peek() is not None:
            raise CompileFailure(cursor.pos(), f"unexpected {cursor.peek().text} in "  # type: ignore[union-attr]
                                 f"{word} arguments", f"write {usage}")
        amounts.append((interval.amount, "interval", interval.position))
    table_token = table_tokens[1]
    name = table_token.text if table_token.kind == "qident" else table_token.text.lower()
    column = desc[2].text if desc[2].kind == "qident" else desc[2].text.lower()
    return _Tvf(word, name, source.position(table_token.start), column,
                source.position(desc[2].start), tuple(amounts), position, start, end,
                partition)


def _session_partition(source: SourceText, args: list[list[Token]], usage: str,
                       ) -> tuple[list[list[Token]], tuple[tuple[str, Position], ...]]:
    """SESSION's first argument ``TABLE t [PARTITION BY k | PARTITION BY (k, ...)]``: the
    arguments with ``TABLE t`` alone first, and the partition columns. Without
    parentheses the commas of ``PARTITION BY a, b`` split it into arguments: each
    argument before the DESCRIPTOR is one more column."""
    first = args[0]
    at = next((i for i, t in enumerate(first) if t.is_word("PARTITION")), None)
    if at is None:
        return args, ()
    if at + 1 >= len(first) or not first[at + 1].is_word("BY"):
        raise CompileFailure(source.position(first[at].start), "PARTITION needs BY",
                             f"write {usage}")
    words = [first[at + 2:]]
    rest = args[1:]
    while rest and rest[0] and not rest[0][0].is_word("DESCRIPTOR"):
        words.append(rest[0])
        rest = rest[1:]
    columns: list[tuple[str, Position]] = []
    for tokens in words:
        for t in tokens:
            if t.is_punct("(", ")", ","):
                continue
            if t.kind not in ("word", "qident"):
                raise CompileFailure(source.position(t.start), f"PARTITION BY names columns, "
                                     f"not {t.text}", f"write {usage}")
            columns.append((t.text if t.kind == "qident" else t.text.lower(),
                            source.position(t.start)))
    if not columns:
        raise CompileFailure(source.position(first[at].start), "PARTITION BY names no column",
                             f"write {usage}")
    return [first[:at], *rest], tuple(columns)


# ---------------------------------------------------------------------------------------------


@dataclass
class _Scope:
    """The columns an expression can name, and under which qualifiers. Over a JOIN,
    ``sides`` maps each alias to its columns, and a column resolves to ``alias.column``."""

    columns: dict[str, Column]
    qualifiers: set[str]
    sides: dict[str, dict[str, Column]] = field(default_factory=dict)
    #: Over a join chain's last join: ``alias.column`` as written -> the column of the
    #: generated join of the earlier relations that holds it (``prefix.alias__column``).
    renamed: dict[str, str] = field(default_factory=dict)
    #: Names that stand for an expression of the columns: Flink's ``window_time`` of a
    #: window function, ``window_end - INTERVAL '1' MILLISECOND``.
    computed: dict[str, exp.Expression] = field(default_factory=dict)
    #: The table's columns CURRENT_WATERMARK(column) reads (Relation.current_watermarks).
    watermarks: Mapping[str, Column] = field(default_factory=dict)


#: Flink's ``window_time`` of a window function: the time attribute of a window's rows,
#: the last millisecond in the window (S10: a derived time attribute of ``window_end``).
WINDOW_TIME = "window_time"


def _window_time() -> exp.Expression:
    return exp.Sub(this=exp.column("window_end"),
                   expression=exp.Interval(this=exp.Literal.string("1"),
                                           unit=exp.var("MILLISECOND")))


class _Translator:
    """sqlglot expressions to IR expressions, type-checked through the function catalog."""

    def __init__(self, source: SourceText, scope: _Scope, fallback: Position,
                 aggregates: list[tuple[str, AggCall]] | None = None,
                 clause: str = "SELECT") -> None:
        self.source = source
        self.scope = scope
        self.fallback = fallback
        self.aggregates = aggregates
        self.clause = clause
        self.refs: list[tuple[str, Position]] = []
        self._untyped_nulls: set[int] = set()
        self._intervals: set[int] = set()
        self._in_aggregate = False
        #: The OVER aggregates found (a SELECT list's translator collects them; None: OVER
        #: is not allowed in this clause).
        self.overs: list[OverCall] | None = None

    # -- positions ------------------------------------------------------------------------

    def pos(self, node: exp.Expression) -> Position:
        starts = [n.meta["start"] for n in node.walk() if n.meta and "start" in n.meta]
        if not starts:
            return self.fallback
        return self.source.position(min(starts))

    def func_pos(self, node: exp.Expression) -> Position:
        """Where a function call's name starts: scan back from its first argument."""
        starts = [n.meta["start"] for n in node.walk() if n.meta and "start" in n.meta]
        if not starts:
            return self.fallback
        text = self.source.text
        i = min(starts) - 1
        while i >= 0 and text[i].isspace():
            i -= 1
        if i >= 0 and text[i] == "(":
            i -= 1
            while i >= 0 and text[i].isspace():
                i -= 1
            end = i
            while i >= 0 and (text[i].isalnum() or text[i] == "_"):
                i -= 1
            if end > i:
                return self.source.position(i + 1)
        return self.source.position(min(starts))

    def written_function(self, node: exp.Expression) -> tuple[str, Position]:
        """A function call's name as the program spells it (upper-cased) and where it starts,
        so that errors name the SQL the user wrote, not sqlglot's class (SPEC L7).

        sqlglot records the name token of a call written ``name(...)``; a special form
        (``POSITION(a IN b)``) is read back from its first argument; a bare keyword
        (``CURRENT_TIMESTAMP``) has no position, and is looked for from the query's start.
        """
        text = self.source.text
        start, end = node.meta.get("start"), node.meta.get("end")
        if start is not None and end is not None:
            written = text[start:end + 1]
            if re.fullmatch(r"[A-Za-z_]\w*", written):
                return written.upper(), self.source.position(start)
        has_args = any(n.meta and "start" in n.meta for n in node.walk())
        if has_args:
            position = self.func_pos(node)
            offset = self.source.offset(position.line, position.column)
            name = re.match(r"[A-Za-z_]\w*(?=\s*\()", text[offset:])
            if name:
                return name[0].upper(), position
        keyword = type(node).sql_name() if isinstance(node, exp.Func) else node.key.upper()
        origin = self.source.offset(self.fallback.line, self.fallback.column)
        found = re.compile(rf"\b{re.escape(keyword)}\b", re.IGNORECASE).search(text, origin)
        return keyword, self.source.position(found.start()) if found else self.fallback

    def _argument_node(self, node: exp.Expression, index: int) -> exp.Expression | None:
        """Argument ``index`` of a call ``name(...)`` parsed again from the program text: for
        an argument sqlglot turned into something else (TIMESTAMPDIFF's third argument, a
        bare name, becomes an upper-cased keyword). None when the text cannot be read."""
        text = self.source.text
        start = node.meta.get("end")
        if start is None:
            return None
        opening = text.find("(", start + 1)
        if opening < 0 or text[start + 1:opening].strip():
            return None
        spans: list[tuple[int, int]] = []
        depth, quote, begin = 0, "", opening + 1
        for i in range(opening + 1, len(text)):
            ch = text[i]
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch == "(":
                depth += 1
            elif ch == ")" and depth > 0:
                depth -= 1
            elif ch in ",)" and depth == 0:
                spans.append((begin, i))
                begin = i + 1
                if ch == ")":
                    break
        if index >= len(spans):
            return None
        try:
            parsed = sqlglot.parse_one(self.source.blank_except(*spans[index]))
        except (ParseError, TokenError):
            return None
        return parsed if isinstance(parsed, exp.Expression) else None

    def fail(self, node: exp.Expression, message: str, fix: str | None = None) -> CompileFailure:
        return CompileFailure(self.pos(node), message, fix)

    def _scalar_subquery(self, node: exp.Expression, where: str,
                         first_fix: str) -> CompileFailure:
        """A subquery outside FROM (a value, EXISTS, IN) is not a relation, so it is refused:
        it names the subquery as sqlglot prints it, at its opening parenthesis, and the JOIN
        that computes the same rows (SPEC L7)."""
        shown = node.sql().replace(_PLACEHOLDER, "TABLE(...)")
        if len(shown) > 60:
            shown = shown[:57] + "..."
        position = self.pos(node)
        starts = [n.meta["start"] for n in node.walk() if n.meta and "start" in n.meta]
        if starts:
            opening = list(re.finditer(r"\(\s*(?:SELECT|WITH)\b", self.source.text[:min(starts)],
                                       re.IGNORECASE))
            if opening:
                position = self.source.position(opening[-1].start())
        return CompileFailure(position, f"unsupported: a subquery {where}: {shown}",
                              f"{first_fix}{_JOIN_FORM}")

    # -- entry ----------------------------------------------------------------------------

    def translate(self, node: exp.Expression) -> Expr:
        result = self._translate(node)
        if id(result) in self._intervals:
            raise self.fail(node, "an INTERVAL can only be added to or subtracted from a "
                            "TIMESTAMP")
        return result

    def _call(self, name: str, args: Sequence[Expr], node: exp.Expression,
              position: Position | None = None) -> Call:
        args = self._type_nulls(list(args))
        try:
            result = fn.result_type(name, [a.type for a in args])
            fn.check_literals(name, args)
        except fn.FunctionTypeError as exc:
            raise CompileFailure(position or self.pos(node), exc.message, exc.fix) from exc
        return Call(name, tuple(args), result)

    def _type_nulls(self, args: list[Expr]) -> list[Expr]:
        typed = [a for a in args if id(a) not in self._untyped_nulls]
        if len(typed) == len(args):
            return args
        target = typed[0].type.with_nullable(True) if typed else SqlType("VARCHAR")
        return [Literal_(None, target) if id(a) in self._untyped_nulls else a for a in args]

    # -- the translation ------------------------------------------------------------------

    def _translate(self, node: exp.Expression) -> Expr:  # noqa: C901 - one dispatch table
        if isinstance(node, exp.Paren):
            return self._translate(node.this)
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, exp.Literal):
            return self._literal(node)
        if isinstance(node, exp.Boolean):
            return Literal_(bool(node.this), _BOOL)
        if isinstance(node, exp.Null):
            literal = Literal_(None, SqlType("VARCHAR"))
            self._untyped_nulls.add(id(literal))
            return literal
        if isinstance(node, exp.Interval):
            return self._interval(node)
        handler = _BINARY.get(type(node))
        if handler is not None:
            return self._binary(handler, node)
        if isinstance(node, (exp.And, exp.Or)):
            name = "AND" if isinstance(node, exp.And) else "OR"
            return self._call(name, [self.translate(node.this),
                                     self.translate(node.expression)], node)
        if isinstance(node, exp.Not):
            inner = node.this.unnest() if isinstance(node.this, exp.Paren) else node.this
            if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
                return self._call("IS NOT NULL", [self.translate(inner.this)], node)
            return self._call("NOT", [self.translate(node.this)], node)
        if isinstance(node, exp.Neg):
            return self._call("-", [self.translate(node.this)], node)
        if isinstance(node, exp.Is):
            if isinstance(node.expression, exp.Null):
                return self._call("IS NULL", [self.translate(node.this)], node)
            raise self.fail(node, f"unsupported: {node.sql()}", "use = TRUE or IS NULL")
        if isinstance(node, exp.Like):
            like = self._call("LIKE", [self.translate(node.this),
                                       self.translate(node.expression)], node)
            if node.args.get("escape") is not None:
                raise self.fail(node, "unsupported: LIKE ... ESCAPE",
                                "the escape character is backslash")
            return self._call("NOT", [like], node) if node.args.get("negate") else like
        if isinstance(node, exp.Escape):
            raise self.fail(node, "unsupported: LIKE ... ESCAPE",
                            "the escape character is backslash")
        if isinstance(node, exp.Between):
            value = self.translate(node.this)
            low = self.translate(node.args["low"])
            high = self.translate(node.args["high"])
            return self._call("AND", [self._call(">=", [value, low], node),
                                      self._call("<=", [value, high], node)], node)
        if isinstance(node, exp.In):
            if node.args.get("query") is not None:
                raise self._scalar_subquery(node.args["query"], "in IN",
                                            "list the values: x IN (1, 2, 3); or ")
            return self._call("IN", [self.translate(node.this)]
                              + [self.translate(e) for e in node.expressions], node)
        if isinstance(node, exp.DPipe):
            return self._call("CONCAT", [self.translate(node.this),
                                         self.translate(node.expression)], node)
        if isinstance(node, (exp.Cast, exp.TryCast)):
            return self._cast(node)
        if isinstance(node, exp.Case):
            return self._case(node)
        if isinstance(node, exp.Window):
            return self._over(node)
        if isinstance(node, (exp.Subquery, exp.Select, exp.Exists)):
            raise self._scalar_subquery(node, f"in {self.clause}", "")
        if isinstance(node, exp.AggFunc) or isinstance(node, exp.ArgMax | exp.ArgMin):
            return self._aggregate(node)
        if isinstance(node, exp.Func):
            return self._function(node)
        if isinstance(node, exp.Star):
            raise self.fail(node, "* is only allowed alone in the SELECT list or in COUNT(*)")
        raise self.fail(node, f"unsupported SQL: {node.sql()}")

    def _column(self, node: exp.Column) -> Expr:
        parts = node.parts
        if len(parts) > 2:
            raise self.fail(node, f"unsupported column reference {node.sql()}")
        name = _ident(parts[-1])
        if self.scope.sides:
            return self._joined_column(node, name, _ident(parts[0]) if len(parts) == 2 else None)
        if len(parts) == 2:
            qualifier = _ident(parts[0])
            if qualifier not in self.scope.qualifiers:
                raise self.fail(node, f"unknown table or view {qualifier} in {node.sql()}",
                                "qualify columns with the name of the relation in FROM")
        column = self.scope.columns.get(name)
        if column is None and name in self.scope.computed:
            return self._translate(self.scope.computed[name])
        if column is None:
            close = difflib.get_close_matches(name, list(self.scope.columns), n=1)
            fix = f"did you mean {close[0]}?" if close else (
                "available columns: " + ", ".join(self.scope.columns))
            raise self.fail(node, f"unknown column {name}", fix)
        self.refs.append((name, self.pos(node)))
        return ColumnRef(name, column.type)

    def _joined_column(self, node: exp.Column, name: str, qualifier: str | None) -> Expr:
        """SPEC S16: ``alias.column``, or a bare column that exactly one side has."""
        sides = self.scope.sides
        if qualifier is not None:
            side = sides.get(qualifier)
            if side is None:
                shown = ", ".join(sides)
                raise self.fail(node, f"unknown table or view alias {qualifier} in "
                                f"{node.sql()}", f"the relations of the join are {shown}")
            found = [qualifier] if name in side else []
            candidates = list(side)
        else:
            found = [alias for alias, columns in sides.items() if name in columns]
            candidates = [c for columns in sides.values() for c in columns]
        if len(found) > 1:
            which = "both sides of the join have" if len(sides) == 2 else (
                "several relations of the join have")
            raise self.fail(node, f"ambiguous column {name}: {which} it",
                            "qualify it: " + " or ".join(f"{a}.{name}" for a in found))
        if not found:
            close = difflib.get_close_matches(name, candidates, n=1)
            fix = f"did you mean {close[0]}?" if close else (
                "available columns: " + ", ".join(f"{a}.{c}" for a, cs in sides.items()
                                                  for c in cs))
            where = f" in {qualifier}" if qualifier is not None else ""
            raise self.fail(node, f"unknown column {name}{where}", fix)
        qualified = f"{found[0]}.{name}"
        qualified = self.scope.renamed.get(qualified, qualified)
        column = self.scope.columns[qualified]
        self.refs.append((qualified, self.pos(node)))
        return ColumnRef(qualified, column.type)

    def _literal(self, node: exp.Literal) -> Expr:
        text = str(node.this)
        if node.is_string:
            return Literal_(text, SqlType("VARCHAR", nullable=False))
        if "e" in text.lower():
            return Literal_(float(text), SqlType("DOUBLE", nullable=False))
        if "." in text:
            value = Decimal(text)
            digits = value.as_tuple()
            scale = max(-int(digits.exponent), 0)
            precision = max(len(digits.digits), scale + 1)
            if precision > 38:
                raise self.fail(node, f"numeric literal {text} has more than 38 digits")
            return Literal_(value, SqlType("DECIMAL", False, precision, scale))
        number = int(text)
        if -(2**31) <= number < 2**31:
            return Literal_(number, SqlType("INT", nullable=False))
        if -(2**63) <= number < 2**63:
            return Literal_(number, SqlType("BIGINT", nullable=False))
        raise self.fail(node, f"integer literal {text} is out of the BIGINT range")

    def _interval(self, node: exp.Interval) -> Expr:
        from app.program.ddl import interval_ms

        unit = node.args.get("unit")
        amount = node.this
        if unit is None or amount is None:
            raise self.fail(node, f"bad INTERVAL {node.sql()}", "write e.g. INTERVAL '1' HOUR")
        result = interval_ms(str(amount.name if isinstance(amount, exp.Literal) else amount),
                             unit.name)
        if isinstance(result, str):
            raise self.fail(node, result, "write e.g. INTERVAL '1' HOUR; units: "
                            + ", ".join(fn.TIME_UNITS_MS))
        literal = Literal_(result, SqlType("BIGINT", nullable=False))
        self._intervals.add(id(literal))
        return literal

    def _binary(self, name: str, node: exp.Expression) -> Expr:
        left = self._translate(node.this)
        right = self._translate(node.expression)
        left_interval = id(left) in self._intervals
        right_interval = id(right) in self._intervals
        if left_interval or right_interval:
            ok = name in ("+", "-") and (
                (right_interval and not left_interval and left.type.name == "TIMESTAMP")
                or (name == "+" and left_interval and not right_interval
                    and right.type.name == "TIMESTAMP"))
            if not ok:
                raise self.fail(node, "an INTERVAL can only be added to or subtracted from a "
                                "TIMESTAMP", "write e.g. date_time + INTERVAL '1' HOUR")
        elif name in ("+", "-") and "TIMESTAMP" in (left.type.name, right.type.name):
            other = right if left.type.name == "TIMESTAMP" else left
            if other.type.name != "TIMESTAMP" or name == "+":
                raise self.fail(node, f"cannot apply {name} to {left.type.name} and "
                                f"{right.type.name}",
                                "add or subtract an INTERVAL, e.g. date_time + INTERVAL '1' HOUR")
            raise self.fail(node, "unsupported: subtracting two TIMESTAMPs",
                            "compare them, or subtract UNIX_MILLIS(a) - UNIX_MILLIS(b)")
        return self._call(name, [left, right], node)

    def _cast(self, node: exp.Cast) -> Expr:
        target = self.sql_type(node.args["to"], node)
        inner = self._translate(node.this)
        if id(inner) in self._untyped_nulls:
            return Literal_(None, target)
        if id(inner) in self._intervals:
            raise self.fail(node, "cannot CAST an INTERVAL")
        if not fn.can_cast(inner.type, target):
            times = ("TIMESTAMP", "DATE")
            fix = (
                "UNIX_MILLIS(ts) is a TIMESTAMP's epoch milliseconds"
                if inner.type.name in times and fn.is_numeric(target)
                else "TIMESTAMP_MILLIS(ms) is the TIMESTAMP of epoch milliseconds"
                if fn.is_numeric(inner.type) and target.name in times
                else "see the CASTs allowed in docs/language.md (Expressions and functions)"
            )
            raise self.fail(node, f"cannot CAST {inner.type.name} to {target.name}", fix)
        target = target.with_nullable(True) if (
            inner.type.nullable or inner.type.name != target.name) else target
        if target.name in ("INT", "BIGINT", "DECIMAL", "REAL", "DOUBLE", "VARCHAR", "BOOLEAN") \
                and inner.type.name in ("INT", "BIGINT") and target.name in ("BIGINT", "DOUBLE",
                                                                              "VARCHAR"):
            # Widening casts of integers cannot fail.
            target = target.with_nullable(inner.type.nullable)
        if isinstance(inner, Literal_) and inner.type.name == "VARCHAR" and target.name in (
                "TIMESTAMP", "DATE"):
            value = fn.cast_value(inner.value, inner.type, target)
            if value is None:
                raise self.fail(node, f"bad {target.name} literal '{inner.value}'",
                                "write e.g. TIMESTAMP '2024-01-01 10:00:00' or DATE "
                                "'2024-01-01'")
            return Literal_(value, target.with_nullable(False))
        return Cast(inner, target)

    def sql_type(self, data_type: exp.DataType, node: exp.Expression) -> SqlType:
        kind = data_type.this
        params = [p.this for p in data_type.expressions]
        names = {
            exp.DataType.Type.BOOLEAN: "BOOLEAN", exp.DataType.Type.INT: "INT",
            exp.DataType.Type.BIGINT: "BIGINT", exp.DataType.Type.FLOAT: "REAL",
            exp.DataType.Type.DOUBLE: "DOUBLE", exp.DataType.Type.VARCHAR: "VARCHAR",
            exp.DataType.Type.TEXT: "VARCHAR", exp.DataType.Type.DATE: "DATE",
            exp.DataType.Type.TIMESTAMP: "TIMESTAMP", exp.DataType.Type.VARBINARY: "VARBINARY",
            exp.DataType.Type.DECIMAL: "DECIMAL", exp.DataType.Type.TIMESTAMPLTZ: "TIMESTAMP",
        }
        name = names.get(kind)
        if name is None:
            shown = data_type.sql()
            raise self.fail(node, f"unknown type {shown} in CAST",
                            "use one of BOOLEAN, INT, BIGINT, REAL, DOUBLE, DECIMAL(p, s), "
                            "VARCHAR, DATE, TIMESTAMP, VARBINARY")
        if name == "DECIMAL":
            values = [int(str(p.this)) if isinstance(p, exp.Literal) else -1 for p in params]
            precision = values[0] if values else 10
            scale = values[1] if len(values) > 1 else 0
            if not 1 <= precision <= 38 or not 0 <= scale <= precision:
                raise self.fail(node, f"bad DECIMAL({precision}, {scale})",
                                "precision is 1 to 38 and scale at most the precision")
            return SqlType("DECIMAL", True, precision, scale)
        if name == "TIMESTAMP" and params:
            # As in CREATE TABLE: any precision p of Flink's TIMESTAMP(p) and
            # TIMESTAMP_LTZ(p) is Tidemark's TIMESTAMP, an instant in milliseconds.
            digits = str(params[0].this) if isinstance(params[0], exp.Literal) else "?"
            if not digits.isdigit() or int(digits) > 9:
                raise self.fail(node, f"bad TIMESTAMP({digits}): the precision is 0 to 9",
                                "write TIMESTAMP(3)")
        return SqlType(name)  # type: ignore[arg-type]

    def _case(self, node: exp.Case) -> Expr:
        operand = node.this
        whens: list[tuple[Expr, Expr]] = []
        for branch in node.args.get("ifs") or []:
            condition = self.translate(branch.this)
            if operand is not None:
                condition = self._call("=", [self.translate(operand), condition], branch)
            if condition.type.name != "BOOLEAN":
                raise self.fail(branch.this, f"CASE WHEN needs a BOOLEAN condition, not "
                                f"{condition.type.name}")
            whens.append((condition, self.translate(branch.args["true"])))
        default = node.args.get("default")
        else_ = self.translate(default) if default is not None else None
        values = [v for _, v in whens] + ([else_] if else_ is not None else [])
        typed = self._type_nulls(values)
        result = typed[0].type
        for value in typed[1:]:
            unified = fn.common_type(result, value.type)
            if unified is None:
                raise self.fail(node, f"CASE branches have incompatible types {result.name} "
                                f"and {value.type.name}", "CAST them to one type")
            result = unified
        if else_ is None:
            result = result.with_nullable(True)
        whens = [(c, v) for (c, _), v in zip(whens, typed, strict=False)]
        if else_ is not None:
            else_ = typed[-1]
        return Case(tuple(whens), else_, result)

    def _aggregate(self, node: exp.Expression) -> Expr:
        name = _AGGREGATES.get(type(node))
        if name is None:
            written, where = self.written_function(node)
            raise CompileFailure(where, f"unsupported aggregate function {written}",
                                 "use COUNT, SUM, MIN, MAX, AVG, ARG_MAX or ARG_MIN")
        if self.aggregates is None:
            raise CompileFailure(self.func_pos(node), f"aggregate function {name} is not "
                                 f"allowed in {self.clause}",
                                 "filter groups with HAVING" if self.clause == "WHERE" else
                                 "aggregate in a view that reads the table"
                                 if self.clause.startswith("computed column") else None)
        if self._in_aggregate:
            raise CompileFailure(self.func_pos(node), "aggregate functions cannot be nested",
                                 "aggregate in a LOCAL view, then aggregate its rows in a view "
                                 "that reads it")
        self._in_aggregate = True
        try:
            distinct = False
            raw: list[exp.Expression] = []
            this = node.this
            if isinstance(this, exp.Distinct):
                distinct = True
                raw = list(this.expressions)
            elif isinstance(this, exp.Star):
                raw = []
            elif this is not None:
                raw = [this]
            if node.args.get("expression") is not None:
                raw.append(node.args["expression"])
            raw.extend(e for e in node.expressions if not isinstance(this, exp.Distinct))
            if name == "COUNT" and isinstance(this, exp.Star):
                call_args: tuple[Expr, ...] = ()
            else:
                if name == "COUNT" and len(raw) != 1:
                    raise CompileFailure(self.func_pos(node), "COUNT takes one argument or *")
                call_args = tuple(self.translate(a) for a in raw)
            if distinct and name != "COUNT":
                raise CompileFailure(self.func_pos(node), f"unsupported: {name}(DISTINCT ...)",
                                     "only COUNT(DISTINCT x) is supported")
            try:
                result = fn.aggregate_type(name, [a.type for a in call_args], distinct)
            except fn.FunctionTypeError as exc:
                raise CompileFailure(self.func_pos(node), exc.message, exc.fix) from exc
        finally:
            self._in_aggregate = False
        call = AggCall(name, call_args, distinct, result)
        for agg_name, existing in self.aggregates:
            if existing == call:
                return ColumnRef(agg_name, result)
        agg_name = f"_agg{len(self.aggregates)}"
        self.aggregates.append((agg_name, call))
        return ColumnRef(agg_name, result)

    def _over(self, node: exp.Window) -> Expr:
        """``aggregate OVER window``: the aggregate's column of the view's Over operator;
        the window itself is checked by :func:`app.program.over_clause.plan_over`."""
        inner = node.this
        name = _AGGREGATES.get(type(inner))
        if name not in OVER_AGGREGATES:
            written, where = self.written_function(inner)
            raise CompileFailure(where, f"unsupported: {written} OVER (...)",
                                 "OVER computes the aggregates " + ", ".join(OVER_AGGREGATES))
        if self.overs is None or self._in_aggregate:
            where_to = ("it cannot be nested in an aggregate" if self._in_aggregate
                        else f"it is not allowed in {self.clause}")
            raise CompileFailure(self.func_pos(inner), f"{name} OVER (...): {where_to}",
                                 "compute it in the SELECT list of a view, and filter or "
                                 "aggregate its rows in a view that reads it")
        found: list[tuple[str, AggCall]] = []
        saved, self.aggregates = self.aggregates, found
        try:
            self._aggregate(inner)
        finally:
            self.aggregates = saved
        call = found[0][1]
        if call.distinct:
            raise CompileFailure(self.func_pos(inner), f"unsupported: {name}(DISTINCT ...) "
                                 "OVER (...)", f"use {name}(x) OVER (...)")
        over_name = f"_over{len(self.overs)}"
        self.overs.append(OverCall(node, over_name, call))
        return ColumnRef(over_name, call.type)

    def _function(self, node: exp.Expression) -> Expr:
        written, position = self.written_function(node)
        if isinstance(node, _BATCH_TIME) or (
                isinstance(node, exp.Anonymous) and written in _BATCH_TIME_NAMES):
            precision = node.this if isinstance(node, exp.CurrentTimestamp) else None
            if isinstance(node, exp.Anonymous) and node.expressions or (
                    precision is not None and precision.name != "3"):
                raise CompileFailure(position, f"{written} takes no arguments",
                                     f"write {written}() (millisecond precision)")
            return now()
        if isinstance(node, _PROCESSING_TIME) or (
                isinstance(node, exp.Anonymous) and written in _PROCESSING_TIME_NAMES):
            raise CompileFailure(position, f"unsupported function {written}: processing time "
                                 "is the step's batch time, a TIMESTAMP",
                                 "use NOW() (or CURRENT_TIMESTAMP), e.g. CAST(NOW() AS DATE) "
                                 "for the date")
        if isinstance(node, exp.TimestampDiff):
            return self._timestampdiff(node, written, position)
        if isinstance(node, exp.Extract):
            unit = node.this.name.upper()
            if unit not in ("YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND"):
                raise CompileFailure(position, f"unsupported: EXTRACT({unit} ...)",
                                     "EXTRACT YEAR, MONTH, DAY, HOUR, MINUTE or SECOND")
            return self._call(unit, [self.translate(node.expression)], node, position)
        if isinstance(node, (exp.Floor, exp.Ceil)) and node.args.get("to") is not None:
            return self._trunc(node.args["to"].name, node.this, node, position,
                               "DATE_CEIL" if isinstance(node, exp.Ceil) else "DATE_TRUNC")
        if isinstance(node, (exp.DateTrunc, exp.TimestampTrunc)):
            unit = node.args.get("unit")
            unit_name = unit.name if unit is not None else ""
            return self._trunc(unit_name, node.this, node, position)
        if isinstance(node, exp.Round):
            value = self.translate(node.this)
            digits_node = node.args.get("decimals")
            if digits_node is None:
                return self._round(value, 0, node, position)
            digits = self.translate(digits_node)
            if not isinstance(digits, Literal_) or not isinstance(digits.value, int) \
                    or digits.value < 0:
                raise CompileFailure(position, "ROUND's digits must be a non-negative integer "
                                     "literal")
            return self._round(value, digits.value, node, position)
        if isinstance(node, exp.Trim):
            if node.args.get("position") or node.args.get("expression") is not None:
                raise CompileFailure(position, "unsupported: TRIM with LEADING/TRAILING or "
                                     "characters", "TRIM(x) removes spaces at both ends")
        if isinstance(node, exp.Anonymous) and str(node.this).upper() == "CURRENT_WATERMARK":
            return self._current_watermark(node, position)
        if isinstance(node, exp.Anonymous) and str(node.this).upper() == "TO_TIMESTAMP_LTZ":
            return self._to_timestamp_ltz(node, position)
        if isinstance(node, exp.Anonymous):
            name = str(node.this).upper()
            name = {"LENGTH": "CHAR_LENGTH", "CEILING": "CEIL", "CHARACTER_LENGTH":
                    "CHAR_LENGTH"}.get(name, name)
            if name not in _ANONYMOUS_OK:
                raise CompileFailure(position, f"unknown function {name}",
                                     "see docs/language.md for the supported functions")
            args = [self.translate(a) for a in node.expressions]
            return self._call(name, args, node, position)
        catalog_name = _FUNCTIONS.get(type(node))
        if catalog_name is None:
            raise CompileFailure(position, f"unsupported function {written}",
                                 "see docs/language.md for the supported functions")
        keys = _ARGUMENT_KEYS.get(type(node))
        if keys is not None:
            return self._keyed_call(catalog_name, keys, node, written, position)
        raw = [node.this] if node.this is not None and isinstance(node.this, exp.Expression) \
            else []
        for key in ("expression", "start", "length"):
            if node.args.get(key) is not None:
                raw.append(node.args[key])
        raw.extend(node.expressions)
        args = [self.translate(a) for a in raw]
        return self._call(catalog_name, args, node, position)

    def _current_watermark(self, node: exp.Anonymous, position: Position) -> Expr:
        """Flink's ``CURRENT_WATERMARK(ts)``: the waterline of the table's LATENESS column
        ts that the row's step started with, w(t-1), NULL before the first (docs/semantics.md,
        CURRENT_WATERMARK): a column the table's rows carry."""
        args = node.expressions
        fix = ("write CURRENT_WATERMARK(ts) in a view that reads the table whose LATENESS "
               "(or WATERMARK) column ts is")
        if len(args) != 1 or not isinstance(args[0], exp.Column):
            raise CompileFailure(position, "CURRENT_WATERMARK takes one column", fix)
        name = _ident(args[0].parts[-1])
        held = self.scope.watermarks.get(name)
        if held is None:
            raise CompileFailure(self.pos(args[0]), f"CURRENT_WATERMARK({name}): {name} is "
                                 "not a LATENESS column of the table this view reads", fix)
        self.refs.append((name, self.pos(args[0])))
        return ColumnRef(held.name, held.type)

    def _to_timestamp_ltz(self, node: exp.Anonymous, position: Position) -> Expr:
        """Flink's ``TO_TIMESTAMP_LTZ(epoch, precision)``: integer epoch seconds (precision 0)
        or milliseconds (3, the default) as a TIMESTAMP, NULL outside years 1 to 9999 (and,
        for seconds, where the milliseconds overflow BIGINT)."""
        fix = ("write TO_TIMESTAMP_LTZ(epoch_ms, 3) for epoch milliseconds, or "
               "TO_TIMESTAMP_LTZ(epoch_s, 0) for seconds")
        if not 1 <= len(node.expressions) <= 2:
            raise CompileFailure(position, "TO_TIMESTAMP_LTZ takes an epoch number and its "
                                 "precision", fix)
        value = self.translate(node.expressions[0])
        precision = 3
        if len(node.expressions) == 2:
            given = self.translate(node.expressions[1])
            if not isinstance(given, Literal_) or given.value not in (0, 3) \
                    or isinstance(given.value, bool):
                raise CompileFailure(self.pos(node.expressions[1]), "TO_TIMESTAMP_LTZ's "
                                     "precision must be 0 (seconds) or 3 (milliseconds)", fix)
            precision = int(given.value)
        if value.type.name not in ("INT", "BIGINT"):
            raise CompileFailure(position, f"TO_TIMESTAMP_LTZ needs an integer epoch, not "
                                 f"{value.type.name}", fix + " (CAST a number to BIGINT)")
        if precision == 0:
            value = self._call("*", [value, Literal_(1000, SqlType("BIGINT", False))], node,
                               position)
        return self._call("TIMESTAMP_MILLIS", [value], node, position)

    def _keyed_call(self, catalog_name: str, keys: tuple[str, ...], node: exp.Expression,
                    written: str, position: Position) -> Expr:
        """A call whose arguments sqlglot keeps under ``keys``, in SQL order; an argument
        under another key (LOCATE's start, REGEXP_REPLACE's position) is refused."""
        for key, value in node.args.items():
            if key not in keys and key not in _IGNORED_KEYS and value not in (None, [], False):
                raise CompileFailure(position, f"unsupported: {written} with a {key} argument",
                                     "see docs/language.md for the supported forms")
        raw: list[exp.Expression] = []
        for key in keys:
            value = node.args.get(key)
            if isinstance(value, list):
                raw.extend(value)
            elif value is not None:
                raw.append(value)
        args = [self.translate(a) for a in raw]
        if catalog_name == "IF" and len(args) == 3:
            # An untyped NULL branch takes the other branch's type, not the condition's.
            condition = args[0]
            if id(condition) in self._untyped_nulls:
                condition = Literal_(None, SqlType("BOOLEAN"))
            args = [condition, *self._type_nulls(args[1:])]
        return self._call(catalog_name, args, node, position)

    def _timestampdiff(self, node: exp.TimestampDiff, written: str,
                       position: Position) -> Expr:
        """Flink's ``TIMESTAMPDIFF(unit, t1, t2)``. sqlglot reads a bare name as the third
        argument into an upper-cased keyword, so that argument is read again from the text."""
        unit_node, start, end = node.this, node.expression, node.args.get("unit")
        if unit_node is None or start is None or end is None:
            raise CompileFailure(position, f"{written} takes 3 arguments: (unit, t1, t2)",
                                 "write e.g. TIMESTAMPDIFF(MINUTE, t1, t2)")
        unit = unit_node.name.upper() if isinstance(unit_node, (exp.Column, exp.Var)) and \
            not unit_node.args.get("table") else ""
        if unit.endswith("S") and unit[:-1] in fn.TIMESTAMPDIFF_UNITS:
            unit = unit[:-1]
        if unit not in fn.TIMESTAMPDIFF_UNITS:
            raise CompileFailure(self.pos(unit_node) if unit_node.meta or any(
                n.meta for n in unit_node.walk()) else position,
                f"unsupported {written} unit {unit_node.sql()}",
                "use " + ", ".join(fn.TIMESTAMPDIFF_UNITS))
        if isinstance(end, exp.Var):
            reread = self._argument_node(node, 2)
            if reread is None:
                raise CompileFailure(position, f"cannot read the third argument of {written}",
                                     "write e.g. TIMESTAMPDIFF(MINUTE, t1, t2)")
            end = reread
        times = self._type_nulls([self.translate(start), self.translate(end)])
        return self._call("TIMESTAMPDIFF", [Literal_(unit, SqlType("VARCHAR", nullable=False)),
                                            *times], node, position)

    def _trunc(self, unit: str, value_node: exp.Expression, node: exp.Expression,
               position: Position, function: str = "DATE_TRUNC") -> Expr:
        upper = unit.upper().strip("'")
        if upper.endswith("S") and upper[:-1] in ("SECOND", "MINUTE", "HOUR", "DAY", "MONTH",
                                                  "YEAR"):
            upper = upper[:-1]
        if upper not in ("SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR"):
            raise CompileFailure(position, f"unsupported truncation unit {unit}",
                                 "use SECOND, MINUTE, HOUR, DAY, MONTH or YEAR")
        value = self.translate(value_node)
        return self._call(function, [Literal_(upper, SqlType("VARCHAR", nullable=False)),
                                     value], node, position)

    def _round(self, value: Expr, digits: int, node: exp.Expression,
               position: Position) -> Expr:
        call = self._call("ROUND", [value, Literal_(digits, SqlType("INT", nullable=False))],
                          node, position)
        if value.type.name == "DECIMAL":
            return Call("ROUND", call.args, fn.round_decimal_type(value.type, digits))
        return call


_BINARY: dict[type, str] = {
    exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%",
    exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
}

_AGGREGATES: dict[type, str] = {
    exp.Count: "COUNT", exp.Sum: "SUM", exp.Min: "MIN", exp.Max: "MAX", exp.Avg: "AVG",
    exp.ArgMax: "ARG_MAX", exp.ArgMin: "ARG_MIN",
}

_FUNCTIONS: dict[type, str] = {
    exp.Coalesce: "COALESCE", exp.Nullif: "NULLIF", exp.Abs: "ABS", exp.Floor: "FLOOR",
    exp.Ceil: "CEIL", exp.Upper: "UPPER", exp.Lower: "LOWER", exp.Trim: "TRIM",
    exp.Length: "CHAR_LENGTH", exp.Substring: "SUBSTRING", exp.Concat: "CONCAT",
    exp.Year: "YEAR", exp.Month: "MONTH", exp.Day: "DAY", exp.Hour: "HOUR",
    exp.Minute: "MINUTE", exp.Second: "SECOND", exp.Replace: "REPLACE",
    exp.RegexpReplace: "REGEXP_REPLACE", exp.RegexpExtract: "REGEXP_EXTRACT", exp.If: "IF",
    exp.Greatest: "GREATEST", exp.Least: "LEAST", exp.SplitPart: "SPLIT_PART",
    exp.StrPosition: "POSITION", exp.UnixMillis: "UNIX_MILLIS",
}

_ANONYMOUS_OK = {"TIMESTAMP_MILLIS", "UNIX_MILLIS", "CHAR_LENGTH", "HOUR", "MINUTE", "SECOND",
                 "YEAR", "MONTH", "DAY", "UPPER", "LOWER", "TRIM", "CONCAT", "ABS", "FLOOR",
                 "CEIL", "COALESCE", "NULLIF", "SUBSTRING", "DATE_FORMAT", "JSON_VALUE"}

#: Catalog functions whose sqlglot nodes keep their arguments under these keys, in SQL order
#: (POSITION(sub IN s), STRPOS(s, sub), LOCATE(sub, s) and INSTR(s, sub) are one node).
_ARGUMENT_KEYS: dict[type, tuple[str, ...]] = {
    exp.Replace: ("this", "expression", "replacement"),
    exp.RegexpReplace: ("this", "expression", "replacement"),
    exp.RegexpExtract: ("this", "expression", "position", "group"),
    exp.If: ("this", "true", "false"),
    exp.Greatest: ("this", "expressions"),
    exp.Least: ("this", "expressions"),
    exp.SplitPart: ("this", "delimiter", "part_index"),
    exp.StrPosition: ("substr", "this"),
}
#: Flags sqlglot sets on a node that change nothing here.
_IGNORED_KEYS = {"ignore_nulls"}

#: Processing time in an expression: the evaluating step's batch time (processing_time.now).
_BATCH_TIME = (exp.CurrentTimestamp, exp.Localtimestamp)
_BATCH_TIME_NAMES = {"NOW", "PROCTIME", "LOCALTIMESTAMP", "CURRENT_TIMESTAMP"}
#: The other clock functions: a date or time of day, or Flink's per-row wall clock.
_PROCESSING_TIME = (exp.CurrentDate, exp.CurrentTime, exp.CurrentDatetime, exp.Localtime)
_PROCESSING_TIME_NAMES = {"CURRENT_ROW_TIMESTAMP", "CURRENT_DATE", "CURRENT_TIME", "LOCALTIME"}


# ---------------------------------------------------------------------------------------------


def column_expression(source: SourceText, tokens: Sequence[Token], columns: Sequence[Column],
                      what: str) -> Expr:
    """A table's computed column ``name AS <tokens>``, over ``columns`` (SPEC L3's scalar
    expressions: no aggregate, window or subquery), type-checked through the catalog."""
    start, end = tokens[0].start, tokens[-1].end
    try:
        parsed = sqlglot.parse_one(source.blank_except(start, end))
    except (ParseError, TokenError) as exc:
        raise CompileFailure(source.position(start), f"syntax error in {what}: {exc}",
                             "check the SQL at this position against the forms in "
                             "docs/language.md") from exc
    if not isinstance(parsed, exp.Expression):
        raise CompileFailure(source.position(start), f"expected an expression in {what}")
    node = parsed
    if any(isinstance(n, (exp.Select, exp.Window)) for n in node.walk()):
        raise CompileFailure(source.position(start), f"a subquery or OVER in {what}",
                             "a computed column is a scalar expression of the table's columns")
    scope = _Scope({c.name: c for c in columns}, set())
    return _Translator(source, scope, source.position(start), None, what).translate(node)


def _parse_select(source: SourceText, tokens: Sequence[Token], tvf: _Tvf | None) -> exp.Select:
    start, end = tokens[0].start, tokens[-1].end
    replacements: tuple[tuple[int, int, str], ...] = (
        ((tvf.start, tvf.end, _PLACEHOLDER),) if tvf else ())
    # A window function elsewhere (in a subquery outside FROM) is shown as a table too, so
    # that the subquery is refused as one (SPEC L7), not as a syntax error.
    rest = [t for t in tokens if tvf is None or t.start >= tvf.end or t.end <= tvf.start]
    while (other := _find_tvf(source, rest)) is not None:
        replacements += ((other.start, other.end, _PLACEHOLDER),)
        rest = [t for t in rest if t.start >= other.end]
    text = source.blank_except(start, end, replacements)
    try:
        parsed = sqlglot.parse_one(text)
    except ParseError as exc:
        info = exc.errors[0] if exc.errors else {}
        line, col = int(info.get("line") or 1), int(info.get("col") or 1)
        highlight = str(info.get("highlight") or "")
        offset = source.offset(line, col - max(len(highlight), 1) + 1)
        description = str(info.get("description") or "syntax error")
        missing = re.match(r"Required keyword: '(\w+)' missing for <class '[\w.]*\.(\w+)'>",
                           description)
        fix = "check the SQL at this position against the forms in docs/language.md"
        if missing:
            node_class = getattr(exp, missing[2], None)
            function = (node_class.sql_name() if isinstance(node_class, type)
                        and issubclass(node_class, exp.Func) else missing[2].upper())
            description = (f"{function} is missing its {missing[1]} argument "
                           "(wrong number of arguments)")
            fix = (f"give {function} all its arguments (docs/language.md, Expressions "
                   "and functions)")
        found = f" near '{highlight}'" if highlight else ""
        raise CompileFailure(source.position(offset), f"syntax error{found}: {description}",
                             fix) from exc
    except TokenError as exc:
        raise CompileFailure(source.position(start), f"syntax error: {exc}") from exc
    if isinstance(parsed, (exp.Union, exp.Intersect, exp.Except)):
        word = type(parsed).__name__.upper()
        token = next((t for t in tokens if t.is_word(word)), tokens[0])
        raise CompileFailure(source.position(token.start), f"unsupported: {word}",
                             "write one view per query")
    if not isinstance(parsed, exp.Select):
        raise CompileFailure(source.position(start), "expected a SELECT query after AS")
    return parsed


def _unsupported_clauses(source: SourceText, tokens: Sequence[Token], select: exp.Select) -> None:
    def at(word: str, default: Token) -> Position:
        token = next((t for t in tokens if t.is_word(word)), default)
        return source.position(token.start)

    for index, token in _top_level_words(tokens):
        after = tokens[index + 1] if index + 1 < len(tokens) else None
        if token.is_word("GROUP", "ORDER") and (after is None or not after.is_word("BY")):
            # Read as an alias of the relation before it, the clause would vanish.
            word = token.text.upper()
            raise CompileFailure(source.position(token.start), f"{word} without BY",
                                 f"write {word} BY <columns>")

    checks: list[tuple[str, str, str, str | None]] = [
        ("with", "WITH", "unsupported: WITH (common table expressions)",
         "define the inner query as a LOCAL VIEW"),
        ("order", "ORDER", "unsupported: ORDER BY (a view is an unordered relation)",
         "remove ORDER BY"),
        ("limit", "LIMIT", "unsupported: LIMIT", "remove LIMIT"),
        ("offset", "OFFSET", "unsupported: OFFSET", "remove OFFSET"),
        ("qualify", "QUALIFY", "unsupported: QUALIFY", None),
        ("laterals", "LATERAL", "unsupported: LATERAL", None),
        ("pivots", "PIVOT", "unsupported: PIVOT", None),
    ]
    for key, word, message, fix in checks:
        if select.args.get(key):
            raise CompileFailure(at(word, tokens[0]), message, fix)
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None:
        raise CompileFailure(source.position(tokens[0].start),
                             "a view reads FROM one table or view", "add FROM <table>")
    if not isinstance(from_.this, exp.Table):
        raise CompileFailure(at("FROM", tokens[0]), "unsupported: this FROM item",
                             "FROM names a table or view, a subquery (SELECT ...) AS s, or "
                             "TABLE(TUMBLE(...)) / TABLE(HOP(...))")
    if len(from_.expressions) > 0:
        raise CompileFailure(at("FROM", tokens[0]), "unsupported: several relations in FROM "
                             "(a join)", "a view reads one table or view")
    group = select.args.get("group")
    if group is not None and any(group.args.get(k) for k in ("rollup", "cube",
                                                             "grouping_sets")):
        raise CompileFailure(at("GROUP", tokens[0]), "unsupported: ROLLUP, CUBE or GROUPING "
                             "SETS")


def _window_columns(tvf: _Tvf, relation: Relation, source: SourceText,
                    ) -> tuple[Window, SqlType, TimeAttribute]:
    column = next((c for c in relation.columns if c.name == tvf.column), None)
    if column is None:
        raise CompileFailure(tvf.column_position, f"unknown column {tvf.column} in "
                             f"{relation.name}", "available columns: "
                             + ", ".join(c.name for c in relation.columns))
    attr = relation.time_attribute(tvf.column)
    if attr is None and relation.delayed:
        raise CompileFailure(tvf.column_position, f"column {tvf.column} of view "
                             f"{relation.name} is not a time attribute: view "
                             f"{relation.delayed} holds its changes back (EMIT AFTER DELAY), "
                             "so one can come after the waterline has passed its window "
                             "(SPEC S11, S18)",
                             f"remove AFTER DELAY from {relation.delayed}, or window its "
                             "input")
    if attr is None:
        raise CompileFailure(tvf.column_position,
                             f"column {tvf.column} is not a time attribute",
                             f"add LATENESS to {relation.name}.{tvf.column}, or window on a "
                             "column that has it, or on a monotone expression of one (c + "
                             "INTERVAL, FLOOR(c TO unit), CEIL(c TO unit))")
    unit = "interval" if column.type.name == "TIMESTAMP" else "integer"
    for amount, kind, position in tvf.amounts:
        if kind != unit:
            wanted = ("an INTERVAL like INTERVAL '1' MINUTE" if unit == "interval"
                      else "an integer (the column is " + column.type.name + ")")
            raise CompileFailure(position, f"bad {tvf.kind} argument: {tvf.column} is "
                                 f"{column.type.name}", f"use {wanted}")
        del amount
    amounts = [a for a, _, _ in tvf.amounts]
    if tvf.kind == "SESSION":
        if amounts[0] <= 0:
            raise CompileFailure(tvf.amounts[0][2], "SESSION gap must be positive")
        for name, position in tvf.partition:
            if not any(c.name == name for c in relation.columns):
                raise CompileFailure(position, f"unknown column {name} in {relation.name}",
                                     "PARTITION BY columns of the table the SESSION reads")
        window = Window("SESSION", tvf.column, amounts[0], amounts[0])
        return window, column.type.with_nullable(False), attr
    if tvf.kind == "TUMBLE":
        size, slide = amounts[0], amounts[0]
        offset = amounts[1] if len(amounts) > 1 else 0
        size_position = tvf.amounts[0][2]
        if size <= 0:
            raise CompileFailure(size_position, "TUMBLE size must be positive")
    elif tvf.kind == "CUMULATE":
        slide, size = amounts[0], amounts[1]
        offset = amounts[2] if len(amounts) > 2 else 0
        _check_cumulate_sizes(tvf, slide, size, unit)
    else:
        slide, size = amounts[0], amounts[1]
        offset = amounts[2] if len(amounts) > 2 else 0
        if slide <= 0 or size <= 0:
            raise CompileFailure(tvf.amounts[0][2], "HOP slide and size must be positive")
        if slide > size:
            raise CompileFailure(tvf.amounts[0][2], f"HOP slide {_amount(slide, unit)} is larger "
                                 f"than its size {_amount(size, unit)}: some rows would fall in "
                                 "no window", "use a slide at most the size (argument order: "
                                 "HOP(TABLE t, DESCRIPTOR(c), slide, size))")
        if size % slide != 0:
            raise CompileFailure(tvf.amounts[1][2], f"HOP size {_amount(size, unit)} is not a "
                                 f"multiple of its slide {_amount(slide, unit)}",
                                 "make the size a whole number of slides")
    # A CUMULATE's starts are its max size apart, as a TUMBLE's.
    if not 0 <= offset < (size if tvf.kind == "CUMULATE" else slide):
        raise CompileFailure(tvf.amounts[-1][2], f"{tvf.kind} offset must be at least 0 and "
                             f"less than the {'slide' if tvf.kind == 'HOP' else 'size'}")
    window = Window(tvf.kind, tvf.column, size, slide, offset)  # type: ignore[arg-type]
    bound_type = column.type.with_nullable(False)
    return window, bound_type, attr


def _check_cumulate_sizes(tvf: _Tvf, step: int, size: int, unit: str) -> None:
    """Flink's rules for CUMULATE(..., step, size [, offset]): a positive step and a max size
    that is a whole number of steps."""
    if step <= 0 or size <= 0:
        raise CompileFailure(tvf.amounts[0][2], "CUMULATE step and size must be positive")
    if step > size:
        raise CompileFailure(tvf.amounts[0][2], f"CUMULATE step {_amount(step, unit)} is larger "
                             f"than its max size {_amount(size, unit)}",
                             "use a step at most the size (argument order: CUMULATE(TABLE t, "
                             "DESCRIPTOR(c), step, size))")
    if size % step != 0:
        raise CompileFailure(tvf.amounts[1][2], f"CUMULATE size {_amount(size, unit)} is not a "
                             f"multiple of its step {_amount(step, unit)}",
                             "make the max size a whole number of steps")


def _amount(value: int, unit: str) -> str:
    if unit != "interval":
        return str(value)
    for name, ms in sorted(fn.TIME_UNITS_MS.items(), key=lambda kv: -kv[1]):
        if value % ms == 0:
            return f"{value // ms} {name}"
    return f"{value} ms"


_AttrKind = Literal["forwarded", "window_start", "window_end", "view_lateness", "derived"]


def _ident(node: Any) -> str:
    """SPEC L1: identifiers are lower-cased unless quoted."""
    text = str(node.this)
    return text if node.args.get("quoted") else text.lower()


def _derived(attr: TimeAttribute, column: str, kind: _AttrKind | None = None) -> TimeAttribute:
    """The time attribute of a column that carries ``attr``'s waterline under a new name."""
    new_kind = kind or ("forwarded" if attr.kind == "view_lateness" else attr.kind)
    return TimeAttribute(column, attr.table, attr.source_column, new_kind, attr.merged,
                         attr.join, attr.derivation)


#: The name Flink (Calcite) gives the i-th SELECT expression without one (``EXPR$1``).
UNNAMED = "EXPR$"


def _output_name(item: exp.Expression, index: int, translator: _Translator) -> str:
    if isinstance(item, exp.Alias):
        return _ident(item.args["alias"])
    if isinstance(item, exp.Column):
        return _ident(item.parts[-1])
    if translator.source.flink:
        # Flink's name; an INSERT INTO names it after its table's column, and a view with
        # a topic refuses it (app/program/compile.py).
        return f"{UNNAMED}{index}"
    raise CompileFailure(translator.pos(item), f"the SELECT expression {item.sql()} needs a "
                         "name", f"add AS <name>, e.g. {item.sql()} AS c{index}")




def _own_name(name: str, names: Sequence[str], index: int, source: SourceText,
              at: Position, view_name: str, fix: str = "give each column its own name with AS",
              ) -> str:
    """``name`` for the ``index``-th column of a SELECT, unless an earlier column has it:
    then, in Flink's dialect, the column's position (``EXPR$<index>``, as an unnamed
    expression: an INSERT INTO writes columns by position, and a view with a topic refuses
    it); elsewhere an error."""
    if name not in names:
        return name
    if source.flink:
        return f"{UNNAMED}{index}"
    raise CompileFailure(at, f"duplicate column name {name}"
                         + (f" in view {view_name}" if view_name else ""), fix)


def plan_query(source: SourceText, tokens: Sequence[Token], relations: dict[str, Relation],
               view_name: str) -> PlannedQuery:
    """Plan one view's query over the relations defined before it (SPEC L3, L4, S10, S17):
    a SELECT, or SELECTs joined by UNION ALL."""
    branches = _union_branches(source, tokens)
    if len(branches) == 1:
        return _plan_select(source, tokens, relations, view_name)
    return _plan_union(source, branches, relations, view_name)


def _union_branches(source: SourceText, tokens: Sequence[Token]) -> list[Sequence[Token]]:
    """The query's tokens split at each top-level UNION ALL; a UNION without ALL is refused
    (it would remove duplicates, which a stream cannot do without keeping every row)."""
    branches: list[Sequence[Token]] = []
    depth = 0
    start = 0
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.is_punct("("):
            depth += 1
        elif token.is_punct(")"):
            depth -= 1
        elif depth == 0 and token.is_word("UNION"):
            following = tokens[i + 1] if i + 1 < len(tokens) else None
            if following is None or not following.is_word("ALL"):
                shown = ("UNION DISTINCT" if following is not None
                         and following.is_word("DISTINCT") else "UNION")
                raise CompileFailure(source.position(token.start), f"unsupported: {shown} "
                                     "without ALL (removing duplicates needs every row kept)",
                                     "use UNION ALL in a LOCAL view and SELECT DISTINCT "
                                     "from it in the next one (with window_start, "
                                     "window_end among its columns, so its state is freed)")
            if i == start or i + 2 >= len(tokens):
                raise CompileFailure(source.position(token.start), "UNION ALL needs a SELECT "
                                     "on each side", "write SELECT ... FROM a UNION ALL "
                                     "SELECT ... FROM b")
            branches.append(tokens[start:i])
            start = i + 2
            i += 2
            continue
        i += 1
    branches.append(tokens[start:])
    return branches


def _type_text(type_: SqlType) -> str:
    return str(type_.with_nullable(True))


def _plan_union(source: SourceText, branches: Sequence[Sequence[Token]],
                relations: dict[str, Relation], view_name: str) -> PlannedQuery:
    """SPEC S17: each branch is a stateless SELECT with the first branch's column count and
    types; the union's columns are named by the first branch. A column is a time attribute
    of the union when it is one in every branch at that position (window_start excepted:
    its waterline bounds groups, not values); its waterline is the branches' minimum. A
    branch may read an updating relation (S18): the union then passes its changes on."""
    planned: list[PlannedQuery] = []
    for index, tokens in enumerate(branches, start=1):
        branch = _plan_select(source, tokens, relations, view_name)
        if branch.aggregate:
            raise CompileFailure(source.position(tokens[0].start), f"unsupported: branch "
                                 f"{index} of the UNION ALL of view {view_name} aggregates",
                                 "aggregate in a view that reads the UNION ALL, or union "
                                 "LOCAL views that aggregate with EMIT AFTER WATERMARK")
        if branch.join_position is not None:
            raise CompileFailure(branch.join_position, f"unsupported: branch {index} of the "
                                 f"UNION ALL of view {view_name} joins",
                                 "join in a LOCAL view and read that view in the branch")
        planned.append(branch)
    return unite(source, branches, planned, view_name)


def unite(source: SourceText, branches: Sequence[Sequence[Token]],
          planned: Sequence[PlannedQuery], view_name: str) -> PlannedQuery:
    """The UNION ALL of the stateless ``planned`` queries (S17), each written as the tokens
    of its branch: the same column count and types in each, named by the first. It is
    updating when a branch is (S18): its rows are then every branch's changes, the
    insertions of an insert-only branch and the insertions and retractions of an updating
    one, and a time attribute of an updating branch is one as its relation gives it to
    readers (an updating aggregate's GROUP BY time keys, S10)."""
    first = planned[0]
    names = [c.name for c in first.columns]
    nullable = [c.type.nullable for c in first.columns]
    for index, (tokens, branch) in enumerate(zip(branches, planned, strict=True), start=1):
        if index == 1:
            continue
        if len(branch.columns) != len(first.columns):
            raise CompileFailure(source.position(tokens[0].start), f"branch {index} of the "
                                 f"UNION ALL of view {view_name} has {len(branch.columns)} "
                                 f"columns, the first branch has {len(first.columns)}",
                                 "select the same number of columns, in the same order, in "
                                 "every branch")
        for position, (mine, theirs) in enumerate(zip(branch.columns, first.columns,
                                                      strict=True), start=1):
            if mine.type.with_nullable(True) != theirs.type.with_nullable(True):
                where = branch.column_positions[position - 1]
                raise CompileFailure(where, f"column {position} of the UNION ALL of view "
                                     f"{view_name} is {_type_text(theirs.type)} in the first "
                                     f"branch ({theirs.name}) but {_type_text(mine.type)} in "
                                     f"branch {index} ({mine.name})",
                                     f"CAST it in one branch, e.g. CAST({mine.name} AS "
                                     f"{_type_text(theirs.type)}) AS {theirs.name}")
            nullable[position - 1] = nullable[position - 1] or mine.type.nullable
    union_branches = []
    for branch in planned:
        project = branch.operators[-1]
        assert isinstance(project, Project)
        renamed = Project(tuple((name, expr) for name, (_, expr)
                                in zip(names, project.outputs, strict=True)))
        union_branches.append(UnionBranch(branch.source, (*branch.operators[:-1], renamed)))
    attrs: list[TimeAttribute] = []
    for position, name in enumerate(names):
        found = []
        for branch in planned:
            column = branch.columns[position].name
            found.append(next((a for a in branch.time_attributes if a.column == column), None))
        present = [a for a in found if a is not None]
        if len(present) != len(found) or any(a.kind == "window_start" for a in present):
            continue
        kind: _AttrKind = ("window_end" if all(a.kind == "window_end" for a in present)
                           else "forwarded")
        attrs.append(TimeAttribute(name, view_name, name, kind, tuple(present)))
    columns = [Column(name, c.type.with_nullable(flag))
               for name, c, flag in zip(names, first.columns, nullable, strict=True)]
    sources = tuple(b.source for b in planned)
    return PlannedQuery(sources[0], [UnionAll(tuple(union_branches))], columns, (),
                        tuple(attrs), False, None, None, None, sources=sources,
                        column_positions=first.column_positions,
                        updating=any(branch.updating for branch in planned))


def _plan_select(source: SourceText, tokens: Sequence[Token], relations: dict[str, Relation],
                 view_name: str) -> PlannedQuery:
    """Plan one SELECT over the relations defined before it (SPEC L3, L4, S10)."""
    first = tokens[0]
    if not first.is_word("SELECT"):
        if first.is_punct("(") or first.is_word("WITH", "VALUES", "TABLE"):
            raise CompileFailure(source.position(first.start), "unsupported: the query of a "
                                 "view must be a plain SELECT", "write AS SELECT ... FROM ...")
        raise CompileFailure(source.position(first.start), f"expected SELECT after AS, found "
                             f"{first.text}")
    tvf = _find_tvf(source, tokens)
    select = _parse_select(source, tokens, tvf)
    return _plan_parsed(source, tokens, select, tvf, relations, view_name)


def plan_parsed(source: SourceText, tokens: Sequence[Token], select: exp.Select,
                relations: dict[str, Relation], view_name: str) -> PlannedQuery:
    """Plan a SELECT the compiler wrote (``select``) for the query written as ``tokens``,
    whose window function in FROM, if any, ``select`` shows as :data:`TVF_PLACEHOLDER`."""
    return _plan_parsed(source, tokens, select, _find_tvf(source, tokens), relations,
                        view_name)


def plan_decorrelated(source: SourceText, tokens: Sequence[Token], select: exp.Select,
                      relations: dict[str, Relation], view_name: str,
                      position: Position) -> PlannedQuery:
    """Plan ``select``, the join the compiler wrote for the query ``tokens`` (a subquery
    in its WHERE decorrelated, app/program/window_subquery.py); ``position`` is where the
    subquery is, the join's place in errors and warnings."""
    _unsupported_clauses(source, tokens, select)
    return _plan_join(source, tokens, select, relations, view_name, None, at=position)


def plan_window_side(source: SourceText, tokens: Sequence[Token],
                     relations: dict[str, Relation], view_name: str) -> PlannedQuery:
    """The local view of a window function written as a side of a JOIN (``tokens`` are the
    function's own, ``TABLE(TUMBLE(...))``): planned as ``SELECT * FROM`` it, every column of
    its relation and ``window_start``/``window_end`` (SPEC L4, S16: Flink's window join
    reads two windowed relations)."""
    tvf = _find_tvf(source, tokens)
    assert tvf is not None and tvf.start == tokens[0].start and tvf.end == tokens[-1].end
    if tvf.kind == "SESSION":
        raise CompileFailure(tvf.position, *_SESSION_JOINED)
    select = exp.Select().select(exp.Star()).from_(exp.Table(this=exp.to_identifier(
        _PLACEHOLDER)))
    return _plan_parsed(source, tokens, select, tvf, relations, view_name)


def _plan_parsed(source: SourceText, tokens: Sequence[Token], select: exp.Select,
                 tvf: _Tvf | None, relations: dict[str, Relation],
                 view_name: str) -> PlannedQuery:
    """Plan one parsed SELECT (``tokens`` its query as written, ``tvf`` its window function
    in FROM) over the relations defined before it."""
    _unsupported_clauses(source, tokens, select)
    if select.args.get("joins"):
        return _plan_join(source, tokens, select, relations, view_name, tvf)
    planned = _plan_single(source, tokens, select, tvf, relations, view_name)
    relation = next((r for r in relations.values() if r.name == planned.source), None)
    if relation is None or relation.insert_only:
        return planned
    assert planned.over_position is None and planned.top_n is None
    if tvf is not None and not planned.aggregate:
        raise CompileFailure(tvf.position, f"unsupported: view {view_name} reads the "
                             f"{tvf.kind} windows of view {relation.name}, whose rows are "
                             "updated, without aggregating them: only a window aggregate "
                             "takes their retractions (SPEC S18); Flink's window join and "
                             "window Top-N read insert-only rows too",
                             f"aggregate the windows in this view (GROUP BY window_start, "
                             f"window_end, ...), or add EMIT AFTER WATERMARK to {relation.name}")
    if planned.aggregate:
        # S18: an aggregate over an updating relation takes its retractions back.
        _check_retractable(source, tokens, planned, relation.name, view_name)
        return replace(planned, retracting=relation.name)
    # S18: a stateless reader of an updating relation passes its retractions on.
    return replace(planned, updating=True)


#: The window functions whose aggregate takes an updating relation's retractions (S18), as
#: Flink 1.19's window aggregate does (FLINK-20281, apache/flink PR 24030).
_RETRACTABLE_WINDOWS = ("TUMBLE", "HOP", "CUMULATE")


def _check_updating_read(source: SourceText, position: Position, tvf: _Tvf | None,
                         select: exp.Select, relation: str, view_name: str) -> None:
    """S18: what may read the updated rows of ``relation`` in one SELECT. A filter, a
    projection and an aggregate take each retraction, and so does a TUMBLE, HOP or
    CUMULATE window whose rows are aggregated (checked once planned): a retracted row
    leaves every window it was in. A SESSION's bounds are its rows' times, which a
    retraction would move after the session closed; Flink's FLINK-20281 leaves SESSION
    out. OVER aggregates and rankings emit each row once, final, which a retraction
    cannot take back; Flink refuses them too (its over aggregate and window rank read
    insert-only rows)."""
    if tvf is not None and tvf.kind not in _RETRACTABLE_WINDOWS:
        raise CompileFailure(tvf.position, f"unsupported: view {view_name} has {tvf.kind} "
                             f"windows of view {relation}, whose rows are updated (it "
                             "aggregates without EMIT AFTER WATERMARK): a retraction would "
                             "move a session's bounds after it closed; a TUMBLE, HOP or "
                             "CUMULATE aggregate takes them (SPEC S18; Flink's FLINK-20281 "
                             "leaves SESSION out too)",
                             f"add EMIT AFTER WATERMARK to {relation}, or use TUMBLE, HOP or "
                             "CUMULATE")
    if select.find(exp.Window):
        raise CompileFailure(position, f"unsupported: view {view_name} ranks or runs OVER "
                             f"view {relation}, whose rows are updated (it aggregates without "
                             "EMIT AFTER WATERMARK): an OVER aggregate or a ranking writes "
                             "each row once, final, and a retraction cannot take it back "
                             "(SPEC S18; Flink refuses them too: its over aggregate and "
                             "window Top-N read insert-only rows)",
                             f"add EMIT AFTER WATERMARK to {relation}, or read its input "
                             "directly")


#: Aggregate functions whose value depends on the order rows arrived in (ties).
_BY_ARRIVAL = ("ARG_MAX", "ARG_MIN")


def _check_retractable(source: SourceText, tokens: Sequence[Token], planned: PlannedQuery,
                       relation: str, view_name: str) -> None:
    """S18: every aggregate function of ``planned`` can take a retraction of ``relation``
    back. COUNT, SUM and AVG subtract; MIN and MAX keep the multiset of values (and so
    do the DISTINCT forms). ARG_MAX and ARG_MIN break ties by arrival order, which a
    retraction has no place in: the changes of one step of an updating view come in no
    order of their own (per group on Spark), so the row a tie goes to would differ."""
    aggregate = next(op for op in planned.operators if isinstance(op, Aggregate))
    found = next((call.fn.upper() for _, call in aggregate.aggregates
                  if call.fn.upper() in _BY_ARRIVAL), None)
    if found is None:
        return
    token = next((t for t in tokens if t.is_word(found)), tokens[0])
    raise CompileFailure(source.position(token.start), f"unsupported: {found} in view "
                         f"{view_name}, over the updated rows of view {relation}: it breaks "
                         "ties by arrival order, which the changes of an updating view do "
                         "not have (SPEC S18)",
                         f"add EMIT AFTER WATERMARK to {relation}, or select MAX/MIN of the "
                         "value and join it back")


def _plan_single(source: SourceText, tokens: Sequence[Token], select: exp.Select,
                 tvf: _Tvf | None, relations: dict[str, Relation],
                 view_name: str) -> PlannedQuery:
    """Plan one parsed SELECT of one relation (no JOIN)."""
    first = tokens[0]
    fallback = source.position(first.start)

    from_ = select.args.get("from_") or select.args.get("from")
    assert from_ is not None
    table = from_.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        raise CompileFailure(
            source.position(table.meta.get("start", first.start)) if table.meta.get("start")
            is not None else fallback if tvf is None else tvf.position,
            "FROM must name a table, a view or TABLE(TUMBLE(...)) / TABLE(HOP(...))",
        )
    alias = table.alias_or_name
    table_name = table.name if table.this.quoted else table.name.lower()
    table_position = source.position(table.this.meta.get("start", first.start))
    window: Window | None = None
    if tvf is not None and table_name != _PLACEHOLDER and tvf.start > table.this.meta.get(
            "start", tvf.start):
        # A window function after FROM's relation is in a subquery outside FROM, which
        # the translator refuses as such (_parse_select shows it as a table there).
        tvf = None
    if tvf is not None:
        if table_name != _PLACEHOLDER:
            raise CompileFailure(tvf.position, f"{tvf.kind} must be the relation in FROM")
        table_name = tvf.table
        table_position = tvf.table_position
    if table_name == view_name:
        raise CompileFailure(table_position, f"view {view_name} cannot read itself")
    relation = relations.get(table_name)
    if relation is None:
        close = difflib.get_close_matches(table_name, list(relations), n=1)
        fix = (f"did you mean {close[0]}?" if close else
               "tables and views must be created before the views that read them")
        raise CompileFailure(table_position, f"unknown table or view {table_name}", fix)
    if relation.latest and tvf is not None:
        raise CompileFailure(tvf.position, f"unsupported: {tvf.kind} windows of table "
                             f"{relation.name}, a changelog table read as its latest row per "
                             "key, which has no time attribute: a key's row changes whenever "
                             "a change of it comes (ADR 0030; Flink's window aggregation "
                             "refuses update changes too)",
                             "aggregate its rows without a window (GROUP BY its columns), or "
                             "join it FOR SYSTEM_TIME AS OF a time of the probe side")
    relation = read_as(relation, relations)
    if not relation.insert_only:
        _check_updating_read(source, table_position, tvf, select, relation.name, view_name)
    if relation.ranking is not None:
        if tvf is not None:
            raise CompileFailure(tvf.position, f"unsupported: {tvf.kind} over the ranked rows "
                                 f"of {relation.name}", "window the rows before ranking them")
        return _plan_top_n(source, tokens, select, relation, relation.ranking, alias,
                           table, fallback, view_name)

    columns: dict[str, Column] = {c.name: c for c in relation.columns}
    time_attrs: dict[str, TimeAttribute] = {a.column: a for a in relation.time_attributes}
    operators: list[Operator] = []
    if tvf is not None:
        window, bound_type, attr = _window_columns(tvf, relation, source)
        bounds: tuple[tuple[str, _AttrKind], ...] = (("window_start", "window_start"),
                                                      ("window_end", "window_end"))
        for bound, bound_kind in bounds:
            if bound in columns and source.flink:
                # Flink's cascade windows a window aggregate's rows again: the new window's
                # columns take the place of the ones read (docs/semantics.md, Flink dialect).
                columns.pop(bound)
                time_attrs.pop(bound, None)
            if bound in columns:
                raise CompileFailure(tvf.position, f"{relation.name} already has a column "
                                     f"{bound}", "rename it in an earlier view")
            columns[bound] = Column(bound, bound_type)
            if not (window.kind == "SESSION" and bound == "window_start"):
                # A session open long ago can still close: its start is bounded by nothing.
                time_attrs[bound] = _derived(attr, bound, bound_kind)
        operators.append(window)
    computed: dict[str, exp.Expression] = {}
    if tvf is not None and source.flink and WINDOW_TIME not in columns:
        computed[WINDOW_TIME] = _window_time()
    # The name as written as well: a stage boundary's table is read by its view's name.
    qualifiers = {relation.name, alias.lower() if alias else table_name}
    if tvf is not None:
        qualifiers.add(_PLACEHOLDER)
    if table.alias:
        qualifiers = {table.alias if table.args["alias"].this.quoted else table.alias.lower()}
    scope = _Scope(columns, qualifiers, computed=computed,
                   watermarks=relation.current_watermarks)
    every_column = [*columns, *computed]

    where = select.args.get("where")
    if where is not None:
        translator = _Translator(source, scope, fallback, None, "WHERE")
        predicate = translator.translate(where.this)
        if predicate.type.name != "BOOLEAN":
            raise CompileFailure(translator.pos(where.this), f"WHERE needs a BOOLEAN "
                                 f"condition, not {predicate.type.name}",
                                 "compare the value, e.g. WHERE x <> 0")
        operators.append(Filter(predicate))

    items = [exp.Star() if isinstance(i, exp.Column) and isinstance(i.this, exp.Star) else i
             for i in select.expressions]  # t.* is * (there is one relation)
    if len(items) == 1 and isinstance(items[0], exp.Star):
        items = [exp.Column(this=exp.Identifier(this=c, quoted=True)) for c in every_column]
    elif any(ranking_item(i) is not None for i in items):
        # Flink's ``SELECT *, ROW_NUMBER() OVER (...) AS rownum``: * is every input column.
        items = [expanded for i in items for expanded in (
            [exp.Column(this=exp.Identifier(this=c, quoted=True)) for c in every_column]
            if isinstance(i, exp.Star) else [i])]
    elif any(isinstance(i, exp.Star) for i in items):
        star = next(i for i in items if isinstance(i, exp.Star))
        raise CompileFailure(_Translator(source, scope, fallback).pos(star) if star.meta
                             else fallback, "* must be alone in the SELECT list",
                             "list the columns")
    group = select.args.get("group")
    having = select.args.get("having")
    if any(ranking_item(item) is not None for item in items):
        return _plan_ranking(source, tokens, select, items, relation, window, tvf, operators,
                             scope, time_attrs, fallback)
    aggregates: list[tuple[str, AggCall]] = []
    select_translator = _Translator(source, scope, fallback, aggregates, "SELECT")
    select_translator.overs = []
    names: list[str] = []
    exprs: list[Expr] = []
    positions: list[Position] = []
    for index, item in enumerate(items):
        name = _own_name(_output_name(item, index, select_translator), names, index, source,
                         select_translator.pos(item), view_name)
        node = item.this if isinstance(item, exp.Alias) else item
        positions.append(select_translator.pos(item))
        names.append(name)
        exprs.append(select_translator.translate(node))
    having_expr: Expr | None = None
    having_translator = _Translator(source, scope, fallback, aggregates, "HAVING")
    if having is not None:
        having_expr = having_translator.translate(having.this)
        if having_expr.type.name != "BOOLEAN":
            raise CompileFailure(having_translator.pos(having.this), "HAVING needs a BOOLEAN "
                                 f"condition, not {having_expr.type.name}")
    distinct = _distinct(source, tokens, select, aggregates)
    if distinct is not None:
        # SELECT DISTINCT is a GROUP BY of every selected expression (as Flink and Feldera
        # plan it): from here on one path plans both, so the circuits are the same.
        group = exp.Group(expressions=[(i.this if isinstance(i, exp.Alias) else i).copy()
                                       for i in items])

    if select_translator.overs:
        return _over_query(source, tokens, select, relation, select_translator.overs,
                           _OverInput(columns, time_attrs, scope, fallback, tvf),
                           operators, list(zip(names, exprs, strict=True)), positions,
                           bool(group is not None or aggregates or having is not None))
    is_aggregate = group is not None or bool(aggregates)
    if window is not None and window.kind == "SESSION" and not is_aggregate:
        assert tvf is not None
        raise CompileFailure(tvf.position, "a SESSION window is known only once it closes, so "
                             "only an aggregate can read it",
                             "GROUP BY window_start, window_end (and the keys the sessions "
                             "are formed per) ... EMIT AFTER WATERMARK")
    if not is_aggregate:
        if having is not None:
            raise CompileFailure(having_translator.pos(having.this), "HAVING without GROUP BY "
                                 "or aggregates", "use WHERE")
        outputs = tuple(zip(names, exprs, strict=True))
        operators.append(Project(outputs))
        out_attrs = tuple(a for n, e in outputs
                          if (a := _expression_time(e, time_attrs, n, relations)) is not None)
        return PlannedQuery(relation.name, operators,
                            [Column(n, e.type) for n, e in outputs], (), out_attrs, False,
                            window, None, None, column_positions=tuple(positions))

    # -- aggregation ----------------------------------------------------------------------
    group_translator = _Translator(source, scope, fallback, None, "GROUP BY")
    keys: list[tuple[str, Expr]] = []
    group_items = list(group.expressions) if group is not None else []
    group_position = group_translator.pos(group) if group is not None else fallback
    if group is not None:
        token = next((t for t in tokens if t.is_word("GROUP")), None)
        if token is not None:
            group_position = source.position(token.start)
    if distinct is not None:
        group_position = distinct
    for i, item in enumerate(group_items):
        if isinstance(item, exp.Literal) and not item.is_string:
            raise CompileFailure(group_translator.pos(item), "unsupported: GROUP BY position",
                                 "GROUP BY the column or expression itself")
        if isinstance(item, exp.Column) and len(item.parts) == 1:
            key_name = _ident(item.parts[0])
            if key_name not in columns and key_name in names:
                # GROUP BY a SELECT alias (as PostgreSQL and Spark allow): group by its
                # expression, which must not contain aggregates.
                aliased = exprs[names.index(key_name)]
                if any(n.startswith("_agg") for n in column_names(aliased)):
                    raise CompileFailure(group_translator.pos(item), f"cannot GROUP BY "
                                         f"{key_name}: it is an aggregate")
                keys.append((key_name if key_name not in columns else f"_key{i}", aliased))
                continue
        expr = group_translator.translate(item)
        key_name = expr.name if isinstance(expr, ColumnRef) else f"_key{i}"
        if any(k == expr for _, k in keys):
            continue
        keys.append((key_name, expr))
    key_names = [k for k, _ in keys]

    def to_post(expr: Expr) -> Expr | None:
        for key_name, key_expr in keys:
            if expr == key_expr:
                return ColumnRef(key_name, key_expr.type)
        return None

    agg_names = {n for n, _ in aggregates}
    post_exprs: list[Expr] = []
    for index, (expr, translator_refs) in enumerate(zip(exprs, [select_translator.refs]
                                                        * len(exprs), strict=True)):
        post = _replace(expr, to_post)
        for ref in column_names(post):
            if ref not in agg_names and ref not in key_names:
                where_at = next((p for n, p in translator_refs if n == ref), positions[index])
                raise CompileFailure(where_at, f"column {ref} must appear in GROUP BY or be "
                                     "used in an aggregate function",
                                     f"add {ref} to GROUP BY or aggregate it, e.g. MAX({ref})")
        post_exprs.append(post)
    post_having: Expr | None = None
    if having_expr is not None:
        post_having = _replace(having_expr, to_post)
        for ref in column_names(post_having):
            if ref not in agg_names and ref not in key_names:
                where_at = next((p for n, p in having_translator.refs if n == ref), fallback)
                raise CompileFailure(where_at, f"column {ref} in HAVING must appear in GROUP "
                                     "BY or be used in an aggregate function")

    operators.append(Aggregate(tuple(keys), tuple(aggregates)))
    if post_having is not None:
        operators.append(Filter(post_having))
    outputs = tuple(zip(names, post_exprs, strict=True))
    operators.append(Project(outputs))

    key_time: dict[str, TimeAttribute] = {}
    for key_name, key_expr in keys:
        key_attr = _expression_time(key_expr, time_attrs, key_name, relations)
        if key_attr is not None:
            key_time[key_name] = key_attr
    selected: dict[str, str] = {}
    for out_name, expr in outputs:
        if isinstance(expr, ColumnRef) and expr.name in key_names and expr.name not in selected:
            selected[expr.name] = out_name
    out_attrs = tuple(found for n, e in outputs
                      if (found := _output_time(e, key_time, n, relations)) is not None)
    view_key = tuple(selected[k] for k in key_names if k in selected)
    window_key: tuple[str, TimeAttribute] | None = None
    time_key: tuple[str, TimeAttribute] | None = None
    for wanted in ("window_end", "window_start"):
        for key_name, attr in key_time.items():
            if attr.kind == wanted and window_key is None:
                window_key = (selected.get(key_name, key_name), attr)
    for key_name, attr in key_time.items():
        if time_key is None:
            time_key = (selected.get(key_name, key_name), attr)
    if window is not None and window.kind == "SESSION":
        assert tvf is not None
        _check_session(tvf, keys, window_key, group_position)
    if window is not None and window.kind == "CUMULATE" and (
            window_key is None or window_key[1].kind != "window_end"):
        assert tvf is not None
        # The windows of one start differ in their ends only.
        raise CompileFailure(group_position or tvf.position, "a CUMULATE aggregate must GROUP "
                             "BY window_end: its windows share their window_start and differ in "
                             "their end", "GROUP BY window_start, window_end, ...")
    planned = PlannedQuery(relation.name, operators,
                           [Column(n, e.type) for n, e in outputs], view_key, out_attrs, True,
                           window, window_key, group_position, tuple(key_names), selected,
                           time_key, column_positions=tuple(positions),
                           distinct=distinct is not None)
    return planned


def _output_time(expr: Expr, key_time: dict[str, TimeAttribute], column: str,
                 relations: dict[str, Relation]) -> TimeAttribute | None:
    """The time attribute of an aggregate's output ``column`` (S10): a GROUP BY key with
    one, read verbatim or through a monotone expression (Flink's cascade spelling,
    ``window_end - INTERVAL '1' MILLISECOND AS rowtime``: the group's rows are written once
    the key's waterline passes it, so every later row's key, and its image, is above). A
    ``window_start`` keeps its waterline only verbatim: it follows its window, which a
    derivation's steps do not carry."""
    if isinstance(expr, ColumnRef):
        attr = key_time.get(expr.name)
        return _derived(attr, column) if attr is not None else None
    found = monotone_steps(expr)
    if found is None or found[0].name not in key_time:
        return None
    if key_time[found[0].name].kind == "window_start":
        return None
    return _expression_time(expr, key_time, column, relations)


def _plan_ranking(source: SourceText, tokens: Sequence[Token], select: exp.Select,
                  items: Sequence[exp.Expression], relation: Relation, window: Window | None,
                  tvf: _Tvf | None, operators: Sequence[Operator], scope: _Scope,
                  time_attrs: dict[str, TimeAttribute], fallback: Position) -> PlannedQuery:
    """A SELECT with ``ROW_NUMBER()``/``RANK() OVER (...)``: a :class:`Ranking` of its
    input's rows (app/program/top_n.py), which its reader limits."""
    translator = _Translator(source, scope, fallback, None, "SELECT")
    found = [(index, node) for index, item in enumerate(items)
             if (node := ranking_item(item)) is not None]
    index, window_node = found[0]
    position = translator.func_pos(window_node.this) if window_node.this.meta else (
        translator.pos(items[index]))
    word = next((t for t in tokens if t.is_word("ROW_NUMBER", "RANK")), None)
    if word is not None:
        position = source.position(word.start)
    if len(found) > 1:
        raise CompileFailure(translator.pos(items[found[1][0]]), "unsupported: two ranking "
                             "functions in one SELECT", "rank once per SELECT")
    clauses = [("group", "GROUP"), ("having", "HAVING"), ("distinct", "DISTINCT")]
    for key, written in clauses:
        if select.args.get(key) is not None:
            token = next((t for t in tokens if t.is_word(written)), tokens[0])
            raise CompileFailure(source.position(token.start), f"unsupported: {written} in "
                                 "the SELECT that ranks rows with ROW_NUMBER()/RANK()",
                                 "aggregate in a subquery (GROUP BY window_start, window_end, "
                                 "...) and rank its rows in the SELECT that reads it")
    if window is not None and window.kind == "SESSION":
        assert tvf is not None
        raise CompileFailure(tvf.position, "a SESSION window is known only once it closes, so "
                             "only an aggregate can read it",
                             "aggregate the sessions in a subquery and rank its rows")
    names: list[str] = []
    exprs: list[Expr] = []
    for number, item in enumerate(items):
        name = _own_name(_output_name(item, number, translator), names, number, source,
                         translator.pos(item), "")
        names.append(name)
        if number == index:
            exprs.append(ColumnRef(name, SqlType("BIGINT", nullable=False)))
        else:
            exprs.append(translator.translate(item.this if isinstance(item, exp.Alias)
                                              else item))
    outputs = tuple(zip(names, exprs, strict=True))
    windows = _stage_windows(relation, time_attrs) if window is None else {}
    ranked = {**time_attrs, **windows}
    ranking = plan_ranking(window_node, names[index], position, relation.name, operators,
                           ranked, translator.translate, outputs, list(scope.columns))
    attrs = tuple(_derived(ranked[e.name], n) for n, e in outputs
                  if isinstance(e, ColumnRef) and e.name in ranked
                  and (ranked[e.name].kind in ("window_start", "window_end")
                       or e.name in windows))
    return PlannedQuery(relation.name, [*operators, Project(outputs)],
                        [Column(n, e.type) for n, e in outputs], (), attrs, False, window,
                        None, None, ranking=ranking)


def _stage_windows(relation: Relation,
                   time_attrs: dict[str, TimeAttribute]) -> dict[str, TimeAttribute]:
    """The window columns of a stage boundary's table (ADR 0023) as a ranking reads them:
    each ``window_end`` of the relation it reads is a window end again (its waterline, the
    punctuated one, completes a window's rows), and a ``window_start`` derived from one
    (``window_end - size``) is that window's start."""
    ends = {c: replace(time_attrs[c], kind="window_end")
            for c in relation.window_ends if c in time_attrs}
    starts = {c: a for c, a in time_attrs.items() if a.kind == "derived"
              and a.derivation is not None and a.derivation.source.column in ends}
    return {**ends, **starts}


def _plan_top_n(source: SourceText, tokens: Sequence[Token], select: exp.Select,
                relation: Relation, ranking: Ranking, alias: str | None, table: exp.Table,
                fallback: Position, view_name: str) -> PlannedQuery:
    """The SELECT reading a ranking: a window Top-N view over the ranking's input."""
    for key, written in [("group", "GROUP"), ("having", "HAVING"), ("distinct", "DISTINCT")]:
        if select.args.get(key) is not None:
            token = next((t for t in tokens if t.is_word(written)), tokens[0])
            raise CompileFailure(source.position(token.start), f"unsupported: {written} in "
                                 f"the SELECT that limits the rank of {relation.name}",
                                 f"aggregate the Top-N rows in a view that reads view "
                                 f"{view_name}")
    qualifiers = {relation.name, alias.lower() if alias else relation.name}
    if table.alias:
        qualifiers = {table.alias if table.args["alias"].this.quoted else table.alias.lower()}
    columns = {c.name: c for c in relation.columns}
    scope = _Scope(columns, qualifiers)
    translator = _Translator(source, scope, fallback, None, "SELECT")
    aggregate = select.find(exp.AggFunc)
    if isinstance(aggregate, exp.Expression):
        raise CompileFailure(translator.pos(cast(exp.Expression, aggregate)),
                             f"unsupported: an aggregate in the SELECT that limits the rank "
                             f"of {relation.name}",
                             f"aggregate the Top-N rows in a view that reads view {view_name}")
    items = [exp.Star() if isinstance(i, exp.Column) and isinstance(i.this, exp.Star) else i
             for i in select.expressions]
    if len(items) == 1 and isinstance(items[0], exp.Star):
        items = [exp.Column(this=exp.Identifier(this=c, quoted=True)) for c in columns]
    names: list[str] = []
    exprs: list[Expr] = []
    positions: list[Position] = []
    for index, item in enumerate(items):
        if isinstance(item, exp.Star):
            raise CompileFailure(fallback, "* must be alone in the SELECT list",
                                 "list the columns")
        name = _own_name(_output_name(item, index, translator), names, index, source,
                         translator.pos(item), view_name)
        names.append(name)
        positions.append(translator.pos(item))
        exprs.append(translator.translate(item.this if isinstance(item, exp.Alias) else item))
    where = select.args.get("where")
    word = next((t for t in tokens if t.is_word("WHERE")), None)
    where_position = source.position(word.start) if word is not None else fallback
    where_translator = _Translator(source, scope, fallback, None, "WHERE")
    attrs = {a.column: a for a in relation.time_attributes}
    plan = plan_top_n(ranking, relation.name, where.this if where is not None else None,
                      where_position, where_translator.translate,
                      tuple(zip(names, exprs, strict=True)), attrs)
    return PlannedQuery(ranking.source, list(plan.operators), list(plan.columns), (),
                        plan.time_attributes, False, None, None, None,
                        column_positions=tuple(positions), top_n=plan, ranked=relation.name)


@dataclass(frozen=True)
class _OverInput:
    """What a SELECT with OVER aggregates reads: its columns and time attributes, its scope
    for the PARTITION BY expressions, and its window function in FROM, if any."""

    columns: dict[str, Column]
    time_attrs: dict[str, TimeAttribute]
    scope: _Scope
    fallback: Position
    tvf: _Tvf | None


def _over_query(source: SourceText, tokens: Sequence[Token], select: exp.Select,
                relation: Relation, overs: Sequence[OverCall], given: _OverInput,
                operators: list[Operator], outputs: list[tuple[str, Expr]],
                positions: list[Position], grouped: bool) -> PlannedQuery:
    """The pipeline ``[Filter(WHERE)] Over Project`` of a SELECT with OVER aggregates: one
    output row per input row, insert-only; its ORDER BY column stays a time attribute (a row
    is written once its waterline passes the row's time), the other LATENESS columns do not
    (a row is written later than it arrived, below their waterlines)."""
    over_at = next((t for t in tokens if t.is_word("OVER")), tokens[0])
    if grouped:
        token = next((t for t in tokens if t.is_word("GROUP", "HAVING", "DISTINCT")), over_at)
        raise CompileFailure(source.position(token.start), "OVER aggregates cannot be combined "
                             "with GROUP BY, HAVING, DISTINCT or other aggregates in one SELECT",
                             "aggregate in a LOCAL view, and compute the OVER aggregates in a "
                             "view that reads it (or the other way round)")
    if given.tvf is not None:
        raise CompileFailure(given.tvf.position, "unsupported: OVER aggregates over a window "
                             "function in FROM", f"read {given.tvf.table} itself: OVER "
                             "windows are formed per row, by time")
    translator = _Translator(source, given.scope, given.fallback, None, "PARTITION BY")
    over = plan_over(source, tokens, select, overs, given.time_attrs,
                     {name: c.type for name, c in given.columns.items()},
                     translator.translate)
    operators.append(over)
    operators.append(Project(tuple(outputs)))
    out_attrs = tuple(_derived(given.time_attrs[e.name], n) for n, e in outputs
                      if isinstance(e, ColumnRef) and e.name == over.order_column)
    return PlannedQuery(relation.name, operators, [Column(n, e.type) for n, e in outputs], (),
                        out_attrs, False, None, None, None, column_positions=tuple(positions),
                        over_position=source.position(over_at.start),
                        over_state=state_text(over, given.columns[over.order_column].type.name))


def _distinct(source: SourceText, tokens: Sequence[Token], select: exp.Select,
              aggregates: Sequence[tuple[str, AggCall]]) -> Position | None:
    """Where ``SELECT DISTINCT`` is, or None without it. DISTINCT over a GROUP BY or
    aggregates (Flink's: it would remove duplicates among the aggregate's updated rows) and
    DISTINCT ON are refused; HAVING stays what it is without GROUP BY (SPEC L3, L7)."""
    distinct = select.args.get("distinct")
    if distinct is None:
        return None
    token = next((t for t in tokens if t.is_word("DISTINCT")), tokens[0])
    position = source.position(token.start)
    if distinct.args.get("on") is not None:
        raise CompileFailure(position, "unsupported: SELECT DISTINCT ON",
                             "SELECT DISTINCT the columns (one row per distinct row), or "
                             "GROUP BY the ON columns and aggregate the others, e.g. "
                             "ARG_MAX(x, ts)")
    if select.args.get("group") is not None or aggregates:
        raise CompileFailure(position, "unsupported: SELECT DISTINCT with GROUP BY or "
                             "aggregates (it would remove duplicates among the aggregate's "
                             "updated rows)",
                             "remove DISTINCT: a GROUP BY writes one row per group; to count "
                             "distinct values, use COUNT(DISTINCT x)")
    having = select.args.get("having")
    if having is not None:
        word = next((t for t in tokens if t.is_word("HAVING")), token)
        raise CompileFailure(source.position(word.start), "HAVING without GROUP BY or "
                             "aggregates", "use WHERE")
    return position


def _check_session(tvf: _Tvf, keys: Sequence[tuple[str, Expr]],
                   window_key: tuple[str, TimeAttribute] | None,
                   group_position: Position | None) -> None:
    """A SESSION aggregate groups by ``window_end`` (a session is final once the waterline
    reaches it), and its sessions are formed per its other GROUP BY keys, which PARTITION
    BY, if written, must name (Flink's and Spark's sessions are per those keys)."""
    if window_key is None or window_key[1].kind != "window_end":
        raise CompileFailure(group_position or tvf.position, "a SESSION aggregate must GROUP "
                             "BY window_end (a session is final once the waterline reaches "
                             "its end)", "GROUP BY window_start, window_end, ...")
    others = {name for name, expr in keys if name not in ("window_start", "window_end")
              and not (isinstance(expr, ColumnRef) and expr.name in ("window_start",
                                                                      "window_end"))}
    named = {name for name, _ in tvf.partition}
    if tvf.partition and named != others:
        raise CompileFailure(tvf.partition[0][1], f"SESSION PARTITION BY "
                             f"{', '.join(sorted(named))} must name the GROUP BY keys besides "
                             f"the window's ({', '.join(sorted(others)) or 'none'}): the "
                             "sessions are formed per those keys",
                             "PARTITION BY the other GROUP BY keys, or leave PARTITION BY out")


def literal_value(expr: Expr) -> Any:
    return expr.value if isinstance(expr, Literal_) else None


# ---------------------------------------------------------------------------------------------
# JOIN (SPEC S16).

_JoinKind = Literal["inner", "left", "right", "full"]
_SIDE_KINDS: dict[str, _JoinKind] = {"": "inner", "LEFT": "left", "RIGHT": "right",
                                     "FULL": "full"}
_BOUND_HINT = ("bound it on a time attribute of each side, e.g. b.ts BETWEEN a.ts - INTERVAL "
               "'10' MINUTE AND a.ts + INTERVAL '10' MINUTE, or join windowed views on "
               "a.window_end = b.window_end")
_FLIPPED = {">=": "<=", "<=": ">=", ">": "<", "<": ">", "=": "="}
#: The error (message, fix) of a SESSION window as a side of a join.
_SESSION_JOINED = ("a SESSION window is known only once it closes, so only an aggregate can "
                   "read it", "aggregate the sessions in a view (GROUP BY window_start, "
                   "window_end ... EMIT AFTER WATERMARK) and join that view")


@dataclass(frozen=True)
class _JoinInput:
    """One side of a join as the planner sees it."""

    relation: Relation
    alias: str
    position: Position
    #: The changelog table whose latest row per key ``relation`` is (ADR 0030), as the
    #: query names it; empty for every other side.
    table: str = ""

    def side(self) -> JoinSide:
        return JoinSide(self.relation.name, self.alias,
                        tuple(c.name for c in self.relation.columns))


@dataclass
class _BoundPair:
    """What the ON conjuncts say about ``right_column - left_column`` (S16)."""

    left_column: str
    right_column: str
    position: Position
    lower: int | None = None
    upper: int | None = None
    conjuncts: list[Expr] = field(default_factory=list)


def _top_level_words(tokens: Sequence[Token]) -> list[tuple[int, Token]]:
    depth = 0
    found: list[tuple[int, Token]] = []
    for index, token in enumerate(tokens):
        if token.is_punct("("):
            depth += 1
        elif token.is_punct(")"):
            depth -= 1
        elif depth == 0:
            found.append((index, token))
    return found


def _join_input(source: SourceText, table: exp.Expression, relations: dict[str, Relation],
                view_name: str, fallback: Position, versioned: bool = False) -> _JoinInput:
    """One side of a join as written: a changelog table is read as its latest row per key
    (:func:`read_as`, ADR 0030), but as the ``versioned`` side of a temporal join."""
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        where = (source.position(table.meta["start"]) if table.meta.get("start") is not None
                 else fallback)
        raise CompileFailure(where, "unsupported: a function as a side of a JOIN",
                             "apply it in a subquery and join that: JOIN (SELECT ... FROM "
                             "...) AS s ON ...")
    name = table.name if table.this.quoted else table.name.lower()
    position = source.position(table.this.meta.get("start", 0))
    if name == _PLACEHOLDER:
        raise CompileFailure(fallback, "unsupported: a window function as a side of a JOIN",
                             "window each side in a subquery, JOIN (SELECT * FROM TABLE("
                             "TUMBLE(...))) AS w, or a LOCAL view, and join them on "
                             "window_start and window_end")
    if name == view_name:
        raise CompileFailure(position, f"view {view_name} cannot read itself")
    relation = relations.get(name)
    if relation is None:
        close = difflib.get_close_matches(name, list(relations), n=1)
        fix = (f"did you mean {close[0]}?" if close else
               "tables and views must be created before the views that read them")
        raise CompileFailure(position, f"unknown table or view {name}", fix)
    alias_node = table.args.get("alias")
    alias = name
    if alias_node is not None and alias_node.this is not None:
        alias = _ident(alias_node.this)
    changelog = relation.name if relation.latest and not versioned else ""
    return _JoinInput(read_as(relation, relations, versioned), alias, position, changelog)


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    inner = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(inner, exp.And):
        return _conjuncts(inner.this) + _conjuncts(inner.expression)
    return [node]


def _aliases_of(expr: Expr) -> set[str]:
    return {name.split(".", 1)[0] for name in column_names(expr)}


def _linear(expr: Expr) -> tuple[str, int] | None:
    """``column + constant`` (an INTERVAL is a BIGINT literal of ms), or None."""
    if isinstance(expr, ColumnRef):
        return expr.name, 0
    if not (isinstance(expr, Call) and expr.fn in ("+", "-") and len(expr.args) == 2):
        return None
    first, second = expr.args

    def constant(e: Expr) -> int | None:
        ok = isinstance(e, Literal_) and isinstance(e.value, int) and not isinstance(
            e.value, bool)
        return e.value if ok else None  # type: ignore[union-attr]

    inner, amount = _linear(first), constant(second)
    if inner is not None and amount is not None:
        return inner[0], inner[1] + (amount if expr.fn == "+" else -amount)
    inner, amount = _linear(second), constant(first)
    if expr.fn == "+" and inner is not None and amount is not None:
        return inner[0], inner[1] + amount
    return None


def _offset_text(column: str, amount: int, unit: str) -> str:
    if amount == 0:
        return column
    shown = str(abs(amount))
    if unit == "interval":
        count, name = _amount(abs(amount), unit).lower().split(" ", 1)
        shown = f"{count} {name}{'s' if count != '1' and name != 'ms' else ''}"
    return f"{column} {'+' if amount > 0 else '-'} {shown}"


def _join_waterline(attr: TimeAttribute) -> str:
    if attr.steps:
        return waterline_text(attr)
    if attr.merged:
        return "min(" + ", ".join(_join_waterline(m) for m in attr.merged) + ")"
    return f"w({attr.table}.{attr.source_column})"


def _plan_join(source: SourceText, tokens: Sequence[Token], select: exp.Select,
               relations: dict[str, Relation], view_name: str,
               tvf: _Tvf | None, keep: int | None = None,
               at: Position | None = None) -> PlannedQuery:
    """:func:`_plan_one_join`; over a join chain, its errors and warning name each column
    as written (``a.k``), not as the generated view holds it (``a_join_b.a__k``)."""
    chained = relations.get(JOIN_PREFIX)
    if chained is None or not chained.joined:
        return _plan_one_join(source, tokens, select, relations, view_name, tvf, keep, at)
    try:
        planned = _plan_one_join(source, tokens, select, relations, view_name, tvf, keep, at)
    except CompileFailure as failure:
        raise CompileFailure(failure.position, _as_written(failure.message, chained),
                             _as_written(failure.fix, chained) if failure.fix else None,
                             ) from failure
    planned.join_unbounded = _as_written(planned.join_unbounded, chained)
    return planned


def _as_written(text: str, chained: Relation) -> str:
    """``text`` with each column of a join chain's generated view (``a_join_b.a__k``, or
    its own name) named as the query writes it (``a.k``)."""
    side = re.escape("_join_".join(chained.joined)) + "_*"
    for alias, columns in chained.joined.items():
        for column, held in columns.items():
            pattern = rf"(?<![\w.])(?:{side}|{re.escape(chained.name)})\.{re.escape(held)}\b"
            text = re.sub(pattern, f"{alias}.{column}".replace("\\", "\\\\"), text)
    return text


def _plan_one_join(source: SourceText, tokens: Sequence[Token], select: exp.Select,
                   relations: dict[str, Relation], view_name: str,
                   tvf: _Tvf | None, keep: int | None = None,
                   at: Position | None = None) -> PlannedQuery:
    """SPEC S16: ``FROM a [AS x] [INNER|LEFT|RIGHT|FULL [OUTER]] JOIN b [AS y] ON ...``.

    The ON condition is split into equality keys (one side's expression = the other's), a
    time bound (an interval join: ``b.t`` between ``a.t + lower`` and ``a.t + upper`` on two
    row-time attributes; a window join: equal ``window_end`` of two windowed relations) and
    a residual predicate. The view's pipeline is ``Join [Filter(WHERE)] Project``.

    A chain ``a JOIN b ON ... JOIN c ON ...`` is left-deep: its last join joins the
    generated view of the others (``relations[JOIN_PREFIX]``, :func:`plan_join_prefix`)
    with the last relation, and ``a.k`` names that view's column ``a__k``. ``keep`` plans
    the first ``keep`` joins only, as that generated view: every column of every
    relation, named ``alias__column``. ``at``: a join the compiler wrote (no JOIN in
    ``tokens``), placed there in errors.
    """
    fallback = source.position(tokens[0].start)
    words = _top_level_words(tokens)
    from_index = next((i for i, t in words if t.is_word("FROM")), 0)
    join_words = [t for i, t in words if i > from_index and t.is_word("JOIN")
                  and not _after_clause_word(words, i, from_index)]
    join_token = join_words[0] if join_words else None
    count = keep if keep is not None else len(select.args.get("joins") or [])
    commas = [t for i, t in words if i > from_index and t.is_punct(",")
              and not _after_clause_word(words, i, from_index)]
    if at is not None:
        position, clause = at, "WHERE"
    elif commas and (join_token is None or commas[0].start < join_token.start):
        select, position = _comma_join(source, select, commas, join_token)
        join_token = commas[0]
        clause = "WHERE"  # the condition as written
    else:
        if join_token is None:
            raise CompileFailure(fallback, "FROM reads several relations, but neither a JOIN "
                                 "nor a comma separates them",
                                 "write FROM a JOIN b ON ..., or FROM a, b WHERE ...")
        if 1 < count <= len(join_words):
            join_token = join_words[count - 1]  # the last join of a chain (or of its prefix)
        # The join clause starts at its first word: LEFT/RIGHT/FULL/INNER/... JOIN.
        leading = [t for i, t in words if i > from_index and t.start <= join_token.start]
        start = join_token
        for token in reversed(leading[:-1]):
            if not token.is_word("LEFT", "RIGHT", "FULL", "INNER", "OUTER", "CROSS",
                                 "NATURAL"):
                break
            start = token
        position = source.position(start.start)
        clause = "ON"
    joins = select.args["joins"][:count]
    chained: Relation | None = None
    if len(joins) > 1:
        chained = relations.get(JOIN_PREFIX)
        if chained is None or not chained.joined:
            raise CompileFailure(source.position(join_words[1].start) if len(join_words) > 1
                                 else position,
                                 "unsupported: a join of more than two relations",
                                 "join two relations in a LOCAL view and join that view in "
                                 "the next one")
        select = select.copy()
        select.set("joins", [joins[-1].copy()])
    select = as_of_join(source, select)
    join = select.args["joins"][0]
    side_word = str(join.side or "").upper()
    kind_word = str(join.kind or "").upper()
    if join.args.get("method"):
        raise CompileFailure(position, f"unsupported: {str(join.args['method']).upper()} "
                             "JOIN", "name the keys: JOIN b ON a.k = b.k")
    if kind_word == "CROSS":
        raise CompileFailure(position, "unsupported: CROSS JOIN (every pair of rows, kept "
                             "forever)", "JOIN b ON a.k = b.k with a time bound")
    if kind_word == "OUTER" and not side_word:
        raise CompileFailure(position, "OUTER JOIN needs LEFT, RIGHT or FULL",
                             "write FULL OUTER JOIN to keep the unmatched rows of both sides")
    if kind_word not in ("", "INNER", "OUTER") or side_word not in _SIDE_KINDS:
        raise CompileFailure(position, f"unsupported: {side_word} {kind_word} JOIN".replace(
            "  ", " "), "use [INNER], LEFT, RIGHT or FULL [OUTER] JOIN")
    kind = _SIDE_KINDS[side_word]
    version = join.this.args.get("version") if isinstance(join.this, exp.Table) else None
    for_token = next((t for i, t in words if i > from_index and t.is_word("FOR")), None)
    for_position = source.position(for_token.start) if for_token else position
    if version is not None and kind in ("right", "full"):
        raise CompileFailure(position, f"unsupported: a {kind.upper()} OUTER temporal join "
                             "(FOR SYSTEM_TIME AS OF): a temporal join writes each row of "
                             "its probe side (FROM) with one version of the versioned side",
                             "use JOIN or LEFT JOIN, with the versioned table after JOIN")
    if join.args.get("using"):
        raise CompileFailure(position, "unsupported: JOIN ... USING",
                             "write the keys in ON: JOIN b ON a.k = b.k")
    on = join.args.get("on")
    if on is None:
        raise CompileFailure(position, "JOIN needs an ON condition",
                             "write JOIN b ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '10' "
                             "MINUTE AND a.ts + INTERVAL '10' MINUTE")
    if tvf is not None and tvf.kind == "SESSION":
        raise CompileFailure(tvf.position, *_SESSION_JOINED)
    if tvf is not None:
        raise CompileFailure(tvf.position, "unsupported: a window function as a side of a "
                             "JOIN", "window each side in a LOCAL view (SELECT * FROM TABLE("
                             "TUMBLE(...))) and join the views on window_start and window_end")
    from_ = select.args.get("from_") or select.args.get("from")
    assert from_ is not None
    right = _join_input(source, join.this, relations, view_name, fallback,
                        versioned=version is not None)
    exposed: dict[str, dict[str, str]]
    if chained is not None:
        first = from_.this
        at = (source.position(first.this.meta["start"]) if isinstance(first, exp.Table)
              and first.this.meta.get("start") is not None else fallback)
        alias = "_join_".join(chained.joined)  # as the generated view is named
        while alias == right.alias or alias in chained.joined:
            alias += "_"
        left = _JoinInput(chained, alias, at)
        exposed = {name: dict(columns) for name, columns in chained.joined.items()}
    else:
        left = _join_input(source, from_.this, relations, view_name, fallback)
        exposed = {left.alias: {c.name: c.name for c in left.relation.columns}}
    if left.alias == right.alias or right.alias in exposed:
        what = "both sides of the join are" if chained is None else "two relations of the join are"
        raise CompileFailure(right.position, f"{what} named {right.alias}",
                             f"give one side an alias: JOIN {right.relation.name} AS "
                             f"{right.alias}2")
    exposed[right.alias] = {c.name: c.name for c in right.relation.columns}

    padded = {left.alias: kind in ("right", "full"), right.alias: kind in ("left", "full")}
    on_columns: dict[str, Column] = {}
    post_columns: dict[str, Column] = {}
    for joined in (left, right):
        for column in joined.relation.columns:
            name = f"{joined.alias}.{column.name}"
            on_columns[name] = Column(name, column.type)
            post_type = column.type.with_nullable(True) if padded[joined.alias] else column.type
            post_columns[name] = Column(name, post_type)
    # The relations as written (a chain's earlier ones inside its generated view), and where
    # each of their columns is.
    sides: dict[str, dict[str, Column]] = {}
    renamed: dict[str, str] = {}
    for name, holding in exposed.items():
        joined = right if name == right.alias else left
        sides[name] = {}
        for written, held in holding.items():
            sides[name][written] = on_columns[f"{joined.alias}.{held}"]
            if (name, written) != (joined.alias, held):
                renamed[f"{name}.{written}"] = f"{joined.alias}.{held}"
    on_scope = _Scope(on_columns, set(sides), sides, renamed)
    inputs = {left.alias: left, right.alias: right}
    if version is not None:
        assert isinstance(version, exp.Version)
        _updating_sides("temporal", left, right, view_name)
        temporal = _temporal_join(source, version, for_position, kind, left, right, on,
                                  on_scope, fallback, relations, clause)
        return _join_view(source, tokens, select, words, view_name, fallback, position,
                          temporal, left, right, sides, post_columns, "", renamed,
                          keep is not None)

    keys: list[tuple[Expr, Expr]] = []
    windows: list[tuple[str, str, Expr]] = []
    others: list[tuple[Expr, Position]] = []
    for node in _conjuncts(on):
        translator = _Translator(source, on_scope, fallback, None, clause)
        inner = node.unnest() if isinstance(node, exp.Paren) else node
        condition: Expr
        if isinstance(inner, exp.EQ):
            first = translator.translate(inner.this)
            second = translator.translate(inner.expression)
            first_sides, second_sides = _aliases_of(first), _aliases_of(second)
            across = (len(first_sides) == 1 and len(second_sides) == 1
                      and first_sides != second_sides)
            if across:
                if first_sides == {right.alias}:
                    first, second = second, first
                try:
                    fn.result_type("=", [first.type, second.type])
                except fn.FunctionTypeError as exc:
                    raise CompileFailure(translator.pos(inner), f"join keys of different "
                                         f"types: {expr_text(first)} is "
                                         f"{_type_text(first.type)}, {expr_text(second)} is "
                                         f"{_type_text(second.type)}",
                                         f"CAST one side, e.g. CAST({expr_text(second)} AS "
                                         f"{_type_text(first.type)})") from exc
            condition = translator._call("=", [first, second], inner)
            if across:
                window_columns = _window_pair(first, second, inputs)
                if window_columns is not None:
                    windows.append((window_columns[0], window_columns[1], condition))
                    continue
                if not _row_times(first, second, inputs):
                    keys.append((first, second))
                    continue
        else:
            condition = translator.translate(node)
        if condition.type.name != "BOOLEAN":
            raise CompileFailure(translator.pos(node), f"{clause} needs a BOOLEAN condition, not "
                                 f"{condition.type.name}", "compare columns: ON a.k = b.k")
        others.extend((c, translator.pos(node)) for c in conjuncts(condition))

    pairs = _bound_pairs(others, left.alias, right.alias)
    bound: JoinBound | None = None
    form: Literal["interval", "window", "regular"] = "regular"
    used: list[Expr] = []
    unbounded_why = ""
    if windows:
        left_column, right_column, window_condition = windows[0]
        bound = JoinBound(left_column, right_column, 0, 0)
        form = "window"
        used = [window_condition]
        others.extend((c, position) for _, _, c in windows[1:])
    else:
        for pair in pairs:
            problem = _bound_problem(pair, left, right)
            if problem is not None and (not _time_like(pair, inputs) or pair.lower is None
                                        or pair.upper is None):
                continue  # not meant as a bound (plain numbers, or one end): residual
            if problem is not None:
                if not any(_bound_problem(p, left, right) is None and p.lower is not None
                           and p.upper is not None for p in pairs):
                    if left.table or right.table:
                        # A changelog table's time column bounds nothing: its latest row
                        # per key has no time attribute, and its rows are updated.
                        _updating_sides("interval", left, right, view_name)
                    raise CompileFailure(pair.position, problem[0], problem[1])
                continue
            if pair.lower is None or pair.upper is None:
                missing = "upper" if pair.upper is None else "lower"
                unbounded_why = (f"its time bound on {pair.left_column} and "
                                 f"{pair.right_column} has no {missing} end")
                continue
            if pair.lower > pair.upper:
                raise CompileFailure(pair.position, f"the join's time bound is empty: "
                                     f"{pair.right_column} cannot be both >= "
                                     f"{pair.left_column} + {pair.lower} and <= "
                                     f"{pair.left_column} + {pair.upper} (column units)",
                                     "check the signs of the INTERVALs")
            bound = JoinBound(pair.left_column.split(".", 1)[1],
                              pair.right_column.split(".", 1)[1], pair.lower, pair.upper)
            form = "interval"
            used = pair.conjuncts
            break
    residual_parts = [c for c, _ in others if not any(c is u for u in used)]
    residual: Expr | None = None
    for part in residual_parts:
        residual = part if residual is None else Call("AND", (residual, part), _BOOL)
    _updating_sides(form, left, right, view_name)
    if form == "regular" and kind != "inner" and not keys:
        # S16, S18: a padded row is retracted when its key's first match comes; without a
        # key every row of the other side would be a candidate.
        raise CompileFailure(position, f"unsupported: a {kind.upper()} OUTER join without a "
                             "time bound needs an equality key (l.a = r.b): without one, "
                             "any row of the other side could match each row",
                             f"add a key to ON, e.g. {left.alias}.k = {right.alias}.k, or "
                             + _BOUND_HINT)
    join_op = Join(kind, form, left.side(), right.side(), tuple(keys), residual, bound,
                   reads_changes=not (left.relation.insert_only and right.relation.insert_only))
    return _join_view(source, tokens, select, words, view_name, fallback, position, join_op,
                      left, right, sides, post_columns, unbounded_why, renamed,
                      keep is not None)


def _updating_sides(form: str, left: _JoinInput, right: _JoinInput, view_name: str) -> None:
    """S16, S18: which joins read an updating relation. A join without a time bound
    (``regular``) does: each side holds its rows per key as a Z-set (a retraction takes its
    row out) and each step writes, per key it touched, the pairs after less the pairs
    before (``Join.per_key``, docs/semantics.md). An interval or window join writes each match
    once, final, and frees a row once the other side's waterline passes its bound, after
    which a retraction could not take its pairs back; Flink's interval and window joins
    read insert-only rows too. A temporal join's probe rows are written once, final. An
    OUTER join without a time bound also retracts a padded row when its first match comes
    (Flink's regular join does too). A side read as a
    changelog table's latest row per key (ADR 0030) is one such relation, and the
    refusals of the others name the table and the temporal join that reads its versions
    instead."""
    updated = next((side for side in (left, right) if not side.relation.insert_only), None)
    if updated is None or form == "regular":
        return
    updated = next((side for side in (left, right) if side.table), updated)
    name = updated.relation.name
    what = (f"view {view_name} joins view {name}, whose rows are updated (it aggregates "
            "without EMIT AFTER WATERMARK, or reads such a view)")
    instead = f"add EMIT AFTER WATERMARK to {name}"
    if updated.table:
        # A changelog table's latest row per key (ADR 0030): no EMIT makes it final.
        what = (f"view {view_name} joins table {updated.table}, a changelog table read as "
                "its latest row per key, whose rows are updated (ADR 0030)")
        instead = (f"join it as the versioned side: JOIN {updated.table} FOR SYSTEM_TIME AS "
                   "OF <probe time> ON <its PRIMARY KEY>")
    shown = {"interval": "an interval join", "window": "a window join",
             "temporal": "a temporal join (FOR SYSTEM_TIME AS OF)"}[form]
    raise CompileFailure(updated.position, f"unsupported: {what}, in {shown}: it writes "
                         "each match once, final, and frees a row once the other side's "
                         "waterline passes its bound, so a retraction could not take its "
                         "pairs back (SPEC S16, S18; Flink's interval and window joins "
                         "read insert-only rows too)",
                         f"{instead}, or join without a time bound (an INNER join on the "
                         "keys alone takes every change)")


def _chained_name(alias: str, column: str) -> str:
    """The column of a join chain's generated view that holds ``alias.column``."""
    return f"{alias}__{column}"


def join_chain(source: SourceText, tokens: Sequence[Token]) -> tuple[tuple[str, Position], ...]:
    """The relations (alias, where written) of a SELECT whose FROM joins more than two
    relations with JOIN (``a JOIN b ON ... JOIN c ON ...``), in order; empty for any other
    query (its planner refuses what it cannot plan)."""
    found = _joined_relations(source, tokens)
    if found is None:
        return ()
    clause, select = found
    if (sum(1 for _, t in clause if t.is_word("JOIN")) < 2
            or any(t.is_punct(",") for _, t in clause)):
        return ()
    return _relation_aliases(source, tokens, select)


def over_join(source: SourceText, tokens: Sequence[Token]) -> tuple[tuple[str, Position], ...]:
    """The relations (alias, where written) of a SELECT that joins (``FROM a JOIN b ON ...``,
    ``FROM a, b WHERE ...``, a join chain) and whose rows are then aggregated, made
    DISTINCT, ranked or given OVER aggregates; empty for any other query. The compiler
    plans such a query as a user of an engine without it would write it by hand (S16,
    S18): the joined rows as a generated local view, which the rest of the query reads
    (:func:`plan_over_join`), as Flink's and Feldera's planners put an aggregate above a
    join."""
    found = _joined_relations(source, tokens)
    if found is None:
        return ()
    _, select = found
    if not (select.args.get("group") or select.args.get("having")
            or select.args.get("distinct") or any(
                isinstance(node, (exp.AggFunc, exp.Window))
                for item in select.expressions for node in item.walk())):
        return ()
    return _relation_aliases(source, tokens, select)


def _joined_relations(source: SourceText, tokens: Sequence[Token],
                      ) -> tuple[list[tuple[int, Token]], exp.Select] | None:
    """Of a SELECT (no UNION, no window function in FROM): the top-level tokens of its FROM
    clause and the parsed query; None for any other query."""
    if not tokens or not tokens[0].is_word("SELECT"):
        return None
    words = _top_level_words(tokens)
    if any(t.is_word("UNION") for _, t in words):
        return None
    from_index = next((i for i, t in words if t.is_word("FROM")), None)
    if from_index is None or _find_tvf(source, tokens):
        return None
    clause = [(i, t) for i, t in words if i > from_index
              and not _after_clause_word(words, i, from_index)]
    select = _parse_select(source, tokens, None)
    return clause, select


def _relation_aliases(source: SourceText, tokens: Sequence[Token],
                      select: exp.Select) -> tuple[tuple[str, Position], ...]:
    """The relations of ``select``'s FROM and joins, each by its alias (its name without
    one, ``r<n>`` for a relation that is not named) and where it is written."""
    joins = select.args.get("joins") or []
    from_ = select.args.get("from_") or select.args.get("from")
    if not joins or from_ is None:
        return ()
    found: list[tuple[str, Position]] = []
    for number, table in enumerate([from_.this, *(j.this for j in joins)], start=1):
        alias = f"r{number}"
        at = source.position(tokens[0].start)
        if isinstance(table, exp.Table) and isinstance(table.this, exp.Identifier):
            alias_node = table.args.get("alias")
            alias = (_ident(alias_node.this) if alias_node is not None
                     and alias_node.this is not None else _ident(table.this))
            if table.this.meta.get("start") is not None:
                at = source.position(table.this.meta["start"])
        found.append((alias, at))
    return tuple(found)


def plan_join_prefix(source: SourceText, tokens: Sequence[Token],
                     relations: dict[str, Relation], view_name: str,
                     keep: int) -> PlannedQuery:
    """The generated view of the first ``keep`` joins of a join chain (``tokens``, the
    SELECT that writes the chain): ``SELECT *`` of them, each column named
    ``alias__column``, so that the chain's next join reads every column of every relation
    by its alias (S16; as a user writes it by hand: join two relations in a LOCAL view and
    join that view in the next one). The join of all the query's relations (read by
    :func:`plan_over_join`) keeps the query's WHERE, which filters the joined rows; an
    earlier prefix has none (the chain's last join applies it)."""
    select = _parse_select(source, tokens, None)
    prefix = select.copy()
    everything = keep == len(select.args.get("joins") or [])
    for key in ("where", "group", "having", "distinct", "windows", "qualify", "order",
                "limit", "offset"):
        if not (key == "where" and everything):
            prefix.set(key, None)
    prefix.set("joins", [j.copy() for j in (select.args.get("joins") or [])[:keep]])
    prefix.set("expressions", [exp.Star()])
    return _plan_join(source, tokens, prefix, relations, view_name, None, keep)


#: The name a query over a join (:func:`over_join`) reads the generated view of its joined
#: rows by (the compiler's, app/program/compile.py); no user name starts with ``__``.
JOINED_ROWS = "__joined_rows__"


def plan_over_join(source: SourceText, tokens: Sequence[Token],
                   relations: dict[str, Relation], view_name: str) -> PlannedQuery:
    """Plan a query that joins and then aggregates, ranks or is DISTINCT (:func:`over_join`)
    as the query of one relation, ``relations[JOINED_ROWS]``: the generated view of its
    joined rows (:func:`plan_join_prefix`, its WHERE included), whose column ``alias__c``
    holds ``alias.c``. ``alias.c`` and a bare ``c`` that one relation has keep naming it
    in the SELECT, GROUP BY, HAVING and OVER; a bare column selected keeps its name; errors
    name each column as written."""
    joined = relations[JOINED_ROWS]
    select = _parse_select(source, tokens, None)
    outer = select.copy()
    outer.set("joins", None)
    outer.set("where", None)
    outer.set("from_", exp.From(this=exp.Table(this=exp.to_identifier(JOINED_ROWS))))
    items: list[exp.Expression] = []
    for item in outer.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column)
                                          and isinstance(item.this, exp.Star)):
            only = _ident(item.args["table"]) if isinstance(item, exp.Column) else None
            if only is not None and only not in joined.joined:
                raise CompileFailure(source.position(item.args["table"].meta.get(
                    "start", tokens[0].start)), f"unknown table or view alias {only} in "
                    f"{item.sql()}", "the relations of the join are " + ", ".join(joined.joined))
            items.extend(exp.Alias(this=exp.Column(this=exp.Identifier(this=held, quoted=True)),
                                   alias=exp.Identifier(this=column, quoted=True))
                         for alias, columns in joined.joined.items() if only in (None, alias)
                         for column, held in columns.items())
        elif isinstance(item, exp.Column):
            items.append(exp.Alias(this=item, alias=exp.Identifier(
                this=_ident(item.parts[-1]), quoted=True)))
        else:
            items.append(item)
    outer.set("expressions", items)
    for column in list(outer.find_all(exp.Column)):
        held = _held_column(source, column, joined)
        if held is not None:
            found = exp.Column(this=exp.Identifier(this=held, quoted=True))
            starts = [n.meta for n in column.walk() if n.meta and "start" in n.meta]
            if starts:
                found.this.meta.update(min(starts, key=lambda m: m["start"]))
            column.replace(found)
    try:
        return _plan_parsed(source, tokens, outer, None, relations, view_name)
    except CompileFailure as failure:
        raise CompileFailure(failure.position, _joined_as_written(failure.message, joined),
                             _joined_as_written(failure.fix, joined) if failure.fix else None,
                             ) from failure


def _held_column(source: SourceText, column: exp.Column, joined: Relation) -> str | None:
    """The column of the generated view of joined rows that holds ``column`` as a query over
    the join writes it (``a.c``, or a bare ``c`` that one relation has); None for a name no
    relation has (an output column's name, read by GROUP BY or HAVING)."""
    parts = column.parts
    if len(parts) > 2 or isinstance(column.this, exp.Star):
        return None
    name = _ident(parts[-1])
    at = source.position(min((n.meta["start"] for n in column.walk()
                              if n.meta and "start" in n.meta), default=0))
    if len(parts) == 2:
        qualifier = _ident(parts[0])
        columns = joined.joined.get(qualifier)
        if columns is None:
            raise CompileFailure(at, f"unknown table or view alias {qualifier} in "
                                 f"{column.sql()}", "the relations of the join are "
                                 + ", ".join(joined.joined))
        if name not in columns:
            close = difflib.get_close_matches(name, list(columns), n=1)
            raise CompileFailure(at, f"unknown column {name} in {qualifier}",
                                 f"did you mean {qualifier}.{close[0]}?" if close else
                                 "available columns: " + ", ".join(
                                     f"{qualifier}.{c}" for c in columns))
        return columns[name]
    found = [alias for alias, columns in joined.joined.items() if name in columns]
    if len(found) > 1:
        which = ("both sides of the join have" if len(joined.joined) == 2
                 else "several relations of the join have")
        raise CompileFailure(at, f"ambiguous column {name}: {which} it",
                             "qualify it: " + " or ".join(f"{a}.{name}" for a in found))
    return joined.joined[found[0]][name] if found else None


def _joined_as_written(text: str, joined: Relation) -> str:
    """``text`` with each column of the generated view of joined rows (``a__c``, alone or
    qualified by the view) named as the query writes it (``a.c``), and the view as the join
    (a fix that adds an EMIT to it left out: the query has no such view to add one to)."""
    text = text.replace(f"add EMIT AFTER WATERMARK to {joined.name}, or ", "")
    text = text.replace(f"view {joined.name}", "the join").replace(
        f"{joined.name}.", f"{JOINED_ROWS}.").replace(joined.name, "the join")
    for alias, columns in joined.joined.items():
        for column, held in columns.items():
            pattern = rf"(?<![\w.])(?:{re.escape(JOINED_ROWS)}\.)?{re.escape(held)}\b"
            text = re.sub(pattern, f"{alias}.{column}".replace("\\", "\\\\"), text)
    return text


def _after_clause_word(words: list[tuple[int, Token]], index: int, from_index: int) -> bool:
    """Whether the top-level token at ``index`` comes after a clause that follows FROM
    (``WHERE``, ``GROUP BY``, ...): a comma there separates no relations."""
    return any(from_index < i < index and t.is_word("WHERE", "GROUP", "HAVING", "WINDOW",
                                                        "QUALIFY", "ORDER", "LIMIT", "EMIT")
               for i, t in words)


def _comma_join(source: SourceText, select: exp.Select, commas: Sequence[Token],
                join_token: Token | None) -> tuple[exp.Select, Position]:
    """``FROM a, b WHERE c``, the paper's NEXMark Q7 form (listing 2): the INNER join of
    ``a`` and ``b`` ON ``c``. For an inner join a condition in WHERE and one in ON select
    the same pairs, so WHERE is read as the ON condition, split into keys, time bound and
    residual like any other (S16)."""
    position = source.position(commas[0].start)
    if len(commas) > 1 or join_token is not None:
        raise CompileFailure(source.position(commas[-1].start) if len(commas) > 1 else
                             position, "unsupported: a join of more than two relations "
                             "in a FROM list", "write the joins with their conditions: FROM "
                             "a JOIN b ON a.k = b.k AND ... JOIN c ON a.k = c.k AND ...")
    where = select.args.get("where")
    if where is None:
        raise CompileFailure(position, "two relations in FROM need their join condition in "
                             "WHERE (without one, every pair of rows is kept forever)",
                             "add WHERE a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL '10' "
                             "MINUTE AND a.ts + INTERVAL '10' MINUTE, or write JOIN ... ON")
    joined = select.copy()
    joined.set("where", None)
    joined.args["joins"][0].set("on", where.this.copy())
    return joined, position


def _join_view(source: SourceText, tokens: Sequence[Token], select: exp.Select,
               words: list[tuple[int, Token]], view_name: str, fallback: Position,
               position: Position, join_op: Join, left: _JoinInput, right: _JoinInput,
               sides: dict[str, dict[str, Column]], post_columns: dict[str, Column],
               unbounded_why: str, renamed: dict[str, str] | None = None,
               flatten: bool = False) -> PlannedQuery:
    """The pipeline over the joined rows, ``Join [Filter(WHERE)] Project``, and the view's
    time attributes and state (S10, S16). ``flatten``: the generated view of a join chain's
    earlier relations, whose ``*`` names each column ``alias__column``."""
    # -- the pipeline over the joined rows ------------------------------------------------
    for key, word, shown in (("group", "GROUP", "GROUP BY"), ("having", "HAVING", "HAVING"),
                             ("distinct", "DISTINCT", "SELECT DISTINCT")):
        if select.args.get(key) is not None:
            token = next((t for _, t in words if t.is_word(word)), tokens[0])
            raise CompileFailure(source.position(token.start), f"unsupported: {shown} in a "
                                 "view that joins", "aggregate in a view that reads this one")
    post_scope = _Scope(post_columns, set(sides), sides, renamed or {})
    operators: list[Operator] = [join_op]
    where = select.args.get("where")
    if where is not None:
        translator = _Translator(source, post_scope, fallback, None, "WHERE")
        predicate = translator.translate(where.this)
        if predicate.type.name != "BOOLEAN":
            raise CompileFailure(translator.pos(where.this), f"WHERE needs a BOOLEAN "
                                 f"condition, not {predicate.type.name}",
                                 "compare the value, e.g. WHERE x <> 0")
        operators.append(Filter(predicate))
    found: list[tuple[str, AggCall]] = []
    select_translator = _Translator(source, post_scope, fallback, found, "SELECT")
    items: list[exp.Expression] = []
    for item in select.expressions:
        if isinstance(item, exp.Star) and flatten:
            items.extend(exp.Alias(this=exp.Column(this=exp.Identifier(this=c, quoted=True),
                                                   table=exp.Identifier(this=alias, quoted=True)),
                                   alias=exp.Identifier(this=_chained_name(alias, c), quoted=True))
                         for alias, columns in sides.items() for c in columns)
        elif isinstance(item, exp.Star):
            items.extend(exp.Column(this=exp.Identifier(this=c, quoted=True),
                                    table=exp.Identifier(this=alias, quoted=True))
                         for alias, columns in sides.items() for c in columns)
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            alias = _ident(item.args["table"])
            if alias not in sides:
                raise select_translator.fail(item, f"unknown table or view alias {alias} in "
                                             f"{item.sql()}", "the relations of the join are "
                                             + ", ".join(sides))
            items.extend(exp.Column(this=exp.Identifier(this=c, quoted=True),
                                    table=exp.Identifier(this=alias, quoted=True))
                         for c in sides[alias])
        else:
            items.append(item)
    names: list[str] = []
    outputs: list[tuple[str, Expr]] = []
    positions: list[Position] = []
    for index, item in enumerate(items):
        at = select_translator.pos(item) if item.meta or any(
            n.meta for n in item.walk()) else fallback
        name = _own_name(_output_name(item, index, select_translator), names, index, source,
                         at, view_name, "give each column its own name with AS (both sides of "
                         "the join may have it)")
        names.append(name)
        positions.append(at)
        node = item.this if isinstance(item, exp.Alias) else item
        expr = select_translator.translate(node)
        if found:
            raise CompileFailure(at, "unsupported: aggregates in a view that joins",
                                 "aggregate in a view that reads this one")
        outputs.append((name, expr))
    operators.append(Project(tuple(outputs)))

    times = _join_times(join_op, left, right)
    out_attrs = tuple(
        TimeAttribute(name, view_name, name, times[expr.name][0], join=times[expr.name][1])
        for name, expr in outputs if isinstance(expr, ColumnRef) and expr.name in times)
    joined = ({alias: {c: _chained_name(alias, c) for c in columns}
               for alias, columns in sides.items()} if flatten else {})
    return PlannedQuery(left.relation.name, operators, [Column(n, e.type) for n, e in outputs],
                        (), out_attrs, False, None, None, None,
                        sources=(left.relation.name, right.relation.name), joined=joined,
                        column_positions=tuple(positions), join_position=position,
                        join_state=_join_state_text(join_op, left, right),
                        join_unbounded=unbounded_why if join_op.bound is None else "",
                        updating=join_op.per_key)


def _temporal_join(source: SourceText, version: exp.Version, for_position: Position,
                   kind: _JoinKind, left: _JoinInput, right: _JoinInput, on: exp.Expression,
                   on_scope: _Scope, fallback: Position, relations: dict[str, Relation],
                   clause: str = "ON") -> Join:
    """SPEC S16: ``a [LEFT] JOIN b FOR SYSTEM_TIME AS OF a.t [AS y] ON ...`` (Flink's
    temporal join): ``b`` is a table with a PRIMARY KEY (its rows are versions of their
    key), ``a.t`` a time attribute of ``a`` (S10), and ON has an equality on every key
    column of ``b``; its other conjuncts are the residual. AS OF an event-time attribute,
    ``b`` needs a LATENESS column (its versions' times); AS OF a processing-time one (S13),
    a version's time is the batch time of the step it arrives in."""
    table = right.relation
    name = table.name
    if str(version.args.get("kind") or "").upper() != "AS OF":
        raise CompileFailure(for_position, f"unsupported: FOR SYSTEM_TIME "
                             f"{str(version.args.get('kind') or '').upper()}",
                             f"write FOR SYSTEM_TIME AS OF {left.alias}.<time column>")
    if table.kind != "table":
        raise CompileFailure(right.position, f"the versioned side of a temporal join must be a "
                             f"table with a PRIMARY KEY; {name} is a view",
                             "join FOR SYSTEM_TIME AS OF the table it reads, declared with "
                             "PRIMARY KEY (...) NOT ENFORCED")
    if not table.primary_key:
        raise CompileFailure(right.position, f"table {name} has no PRIMARY KEY, so FOR "
                             "SYSTEM_TIME AS OF cannot read its rows as versions of a key",
                             f"declare one in CREATE TABLE {name}: PRIMARY KEY (<key "
                             "columns>) NOT ENFORCED")
    translator = _Translator(source, on_scope, fallback, None, "FOR SYSTEM_TIME AS OF")
    as_of_node = version.expression
    as_of_position = translator.pos(as_of_node)
    as_of = translator.translate(as_of_node)
    shown = as_of_node.sql()
    probe_column: str | None = None
    if isinstance(as_of, Call) and as_of.fn == NOW:
        # RisingWave's AS OF PROCTIME(): each probe row at its own step's batch time.
        version_column = _version_column(source, version, table, left, right, True)
    else:
        if not isinstance(as_of, ColumnRef) or as_of.name.split(".", 1)[0] != left.alias:
            raise CompileFailure(as_of_position, f"FOR SYSTEM_TIME AS OF {shown}: the time "
                                 f"must be a column of the probe side {left.alias} (FROM), "
                                 "or PROCTIME()",
                                 f"write FOR SYSTEM_TIME AS OF {left.alias}.<time attribute>")
        probe_column = as_of.name.split(".", 1)[1]
        attr = left.relation.time_attribute(probe_column)
        if attr is None:
            raise CompileFailure(as_of_position, f"FOR SYSTEM_TIME AS OF {shown}: column "
                                 f"{as_of.name} is not a time attribute of "
                                 f"{left.relation.name}, so no waterline says when its rows "
                                 "can be joined",
                                 f"add LATENESS to {left.relation.name}.{probe_column}, or "
                                 "join AS OF a column that has it")
        version_column = _version_column(source, version, table, left, right,
                                         processing_time_attribute(attr, relations))
    # ON: an equality per key column of the versioned table, the rest is the residual.
    key_columns = {f"{right.alias}.{c}": c for c in table.primary_key}
    found: dict[str, tuple[Expr, Expr]] = {}
    others: list[Expr] = []
    for node in _conjuncts(on):
        on_translator = _Translator(source, on_scope, fallback, None, clause)
        inner = node.unnest() if isinstance(node, exp.Paren) else node
        if isinstance(inner, exp.EQ):
            first = on_translator.translate(inner.this)
            second = on_translator.translate(inner.expression)
            if isinstance(first, ColumnRef) and first.name in key_columns:
                first, second = second, first
            if (isinstance(second, ColumnRef) and second.name in key_columns
                    and _aliases_of(first) == {left.alias} and second.name not in found):
                try:
                    fn.result_type("=", [first.type, second.type])
                except fn.FunctionTypeError as exc:
                    raise CompileFailure(on_translator.pos(inner), f"join keys of different "
                                         f"types: {expr_text(first)} is "
                                         f"{_type_text(first.type)}, {expr_text(second)} is "
                                         f"{_type_text(second.type)}",
                                         f"CAST one side, e.g. CAST({expr_text(first)} AS "
                                         f"{_type_text(second.type)})") from exc
                found[second.name] = (first, second)
                continue
        condition = on_translator.translate(node)
        if condition.type.name != "BOOLEAN":
            raise CompileFailure(on_translator.pos(node), f"{clause} needs a BOOLEAN "
                                 f"condition, not {condition.type.name}",
                                 "compare columns: ON a.k = b.k")
        others.extend(conjuncts(condition))
    missing = [q for q in key_columns if q not in found]
    if missing:
        on_position = _on_position(source, on, fallback)
        raise CompileFailure(on_position, f"the ON condition of the temporal join does not "
                             f"cover the PRIMARY KEY of {name} ({', '.join(table.primary_key)})"
                             f": no equality on {', '.join(missing)}",
                             "add " + " AND ".join(f"{left.alias}.<column> = {q}"
                                                   for q in missing))
    residual: Expr | None = None
    for part in others:
        residual = part if residual is None else Call("AND", (residual, part), _BOOL)
    keys = tuple(found[q] for q in key_columns)
    return Join(kind, "temporal", left.side(), right.side(), keys, residual, None,
                JoinAsOf(probe_column, version_column))


def _version_column(source: SourceText, version: exp.Version, table: Relation,
                    left: _JoinInput, right: _JoinInput, processing: bool) -> str | None:
    """What times the versions of a temporal join (:class:`~app.circuit.ir.JoinAsOf`): the
    versioned table's first LATENESS column, or None AS OF a processing-time attribute (a
    version's time is its step's batch time). A correlated MAX subquery (seed 004's form,
    app/program/as_of_subquery.py) must order the versions by that same time."""
    name, alias = table.name, right.alias
    if processing:
        found = None
    elif not table.time_attributes:
        raise CompileFailure(right.position, f"table {name} has no LATENESS column, so no "
                             "waterline says when the version valid at a time is final",
                             f"add LATENESS to the event-time column of {name}, e.g. ts "
                             "TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE")
    else:
        found = table.time_attributes[0].column
    compared: tuple[str, int] | None = version.meta.get(VERSIONS_BY)
    if compared is None:
        return found
    column, at = compared
    if processing and column not in table.processing_time:
        raise CompileFailure(source.position(at), f"AS OF processing time, the version of "
                             f"{alias} is the latest its key has when the {left.alias} row "
                             f"arrives (by arrival), not the one with the greatest "
                             f"{alias}.{column}",
                             f"order the versions by an AS PROCTIME() column pt of {name} "
                             f"({alias}.pt = the MAX of pt at or below "
                             f"{left.alias}.<processing time>), or bound {column} by an "
                             f"event-time column of {left.alias}")
    if not processing and column != found:
        raise CompileFailure(source.position(at), f"the versions of {name} are ordered by its "
                             f"first LATENESS column {found}, not by {column}",
                             f"compare {alias}.{found} with the MAX of {found} at or below "
                             f"{left.alias}.<time>")
    return found


def _on_position(source: SourceText, on: exp.Expression,
                           fallback: Position) -> Position:
    """Where an ON condition starts (its first token sqlglot placed), for errors about it
    as a whole."""
    starts = [n.meta["start"] for n in on.walk() if n.meta.get("start") is not None]
    return source.position(min(starts)) if starts else fallback


def _window_pair(first: Expr, second: Expr,
                 inputs: dict[str, _JoinInput]) -> tuple[str, str] | None:
    """Side columns of ``left.x = right.y`` when both are ``window_end`` time attributes."""
    if not (isinstance(first, ColumnRef) and isinstance(second, ColumnRef)):
        return None
    found = []
    for ref in (first, second):
        alias, column = ref.name.split(".", 1)
        attr = inputs[alias].relation.time_attribute(column)
        if attr is None or attr.kind != "window_end":
            return None
        found.append(column)
    return found[0], found[1]


def _row_times(first: Expr, second: Expr, inputs: dict[str, _JoinInput]) -> bool:
    """Whether ``first = second`` relates two row-time attributes (an interval bound of
    width zero, not a key)."""
    for expr in (first, second):
        linear = _linear(expr)
        if linear is None:
            return False
        alias, column = linear[0].split(".", 1)
        attr = inputs[alias].relation.time_attribute(column)
        if attr is None or attr.kind in ("window_start", "window_end"):
            return False
    return True


def _bound_pairs(conjuncts: Sequence[tuple[Expr, Position]], left: str,
                 right: str) -> list[_BoundPair]:
    """Comparisons of ``column + constant`` of one side with one of the other, as bounds on
    ``right column - left column``, grouped by the pair of columns in ON order."""
    pairs: dict[tuple[str, str], _BoundPair] = {}
    for condition, position in conjuncts:
        if not (isinstance(condition, Call) and condition.fn in _FLIPPED
                and len(condition.args) == 2):
            continue
        first, second = (_linear(a) for a in condition.args)
        if first is None or second is None:
            continue
        op = condition.fn
        first_alias, second_alias = first[0].split(".", 1)[0], second[0].split(".", 1)[0]
        if {first_alias, second_alias} != {left, right}:
            continue
        types = {a.type.name for a in _refs(condition)}
        if not types <= {"TIMESTAMP", "INT", "BIGINT"} or len(types) != 1:
            continue
        if first_alias == left:  # x + a OP y + b  <=>  y - x FLIP(OP) a - b
            (x, a), (y, b), op = first, second, _FLIPPED[op]
        else:  # y + b OP x + a  <=>  y - x OP a - b
            (y, b), (x, a) = first, second
        amount = a - b
        pair = pairs.setdefault((x, y), _BoundPair(x, y, position))
        pair.conjuncts.append(condition)
        lower = {">=": amount, ">": amount + 1, "=": amount}.get(op)
        upper = {"<=": amount, "<": amount - 1, "=": amount}.get(op)
        if lower is not None:
            pair.lower = lower if pair.lower is None else max(pair.lower, lower)
        if upper is not None:
            pair.upper = upper if pair.upper is None else min(pair.upper, upper)
    return list(pairs.values())


def _refs(expr: Expr) -> list[ColumnRef]:
    if isinstance(expr, ColumnRef):
        return [expr]
    if isinstance(expr, Call):
        return [r for a in expr.args for r in _refs(a)]
    return []


def _time_like(pair: _BoundPair, inputs: dict[str, _JoinInput]) -> bool:
    """Whether ``pair`` was meant as a time bound: it compares TIMESTAMPs, or one of its
    columns is a time attribute."""
    for qualified in (pair.left_column, pair.right_column):
        alias, column = qualified.split(".", 1)
        relation = inputs[alias].relation
        found = next(c for c in relation.columns if c.name == column)
        if found.type.name == "TIMESTAMP" or relation.time_attribute(column) is not None:
            return True
    return False


def _bound_problem(pair: _BoundPair, left: _JoinInput,
                   right: _JoinInput) -> tuple[str, str] | None:
    """Why ``pair`` cannot bound the join's state (S10, S16), or None if it can."""
    for qualified, item in ((pair.left_column, left), (pair.right_column, right)):
        column = qualified.split(".", 1)[1]
        attr = item.relation.time_attribute(column)
        if attr is None:
            return (f"column {qualified} is not a time attribute, so the join's time bound "
                    f"on it cannot free state",
                    f"add LATENESS to {item.relation.name}.{column}, or bound the join on a "
                    "column that has it")
        if attr.kind == "window_start":
            # A row of a window that began below the waterline is not late (S10): no
            # waterline bounds window_start.
            return (f"the join's time bound uses {qualified}, a window start",
                    "bound the join on window_end, or join windowed relations on equal "
                    "window_end (a window join): a.window_end = b.window_end")
    return None


def _join_times(join: Join, left: _JoinInput,
                right: _JoinInput) -> dict[str, tuple[_AttrKind, JoinTime]]:
    """S10/S16: the joined columns that stay time attributes, with their waterline: a
    bound column of each side keeps its side's waterline, held back by the other side's so
    that no match or unmatched row found later is below it. Nothing without a bound."""
    if join.as_of is not None:
        # The probe's AS OF column: a row at x is written once w(versions) > x, so
        # w = min(w(probe), w(versions)); the version's time is a plain column. AS OF
        # processing time, a row is written in its own step: w = w(probe). AS OF
        # PROCTIME() no column is forwarded as the time.
        if join.as_of.probe_column is None:
            return {}
        probe = left.relation.time_attribute(join.as_of.probe_column)
        version_column = join.as_of.version_column
        versions = (probe if version_column is None
                    else right.relation.time_attribute(version_column))
        assert probe is not None and versions is not None
        kind: _AttrKind = probe.kind if probe.kind in ("window_start", "window_end") else (
            "forwarded")
        return {f"{left.alias}.{join.as_of.probe_column}": (
            kind, JoinTime(probe, versions, 0, "left"))}
    bound = join.bound
    if bound is None:
        return {}
    left_attr = left.relation.time_attribute(bound.left_column)
    right_attr = right.relation.time_attribute(bound.right_column)
    assert left_attr is not None and right_attr is not None
    result: dict[str, tuple[_AttrKind, JoinTime]] = {}
    if join.form == "interval":
        result[f"{left.alias}.{bound.left_column}"] = (
            "forwarded", JoinTime(left_attr, right_attr, bound.upper, "left"))
        result[f"{right.alias}.{bound.right_column}"] = (
            "forwarded", JoinTime(right_attr, left_attr, -bound.lower, "right"))
        return result
    sides: tuple[tuple[_JoinInput, TimeAttribute, TimeAttribute, Literal["left", "right"],
                       str], ...] = ((left, left_attr, right_attr, "left", bound.left_column),
                                     (right, right_attr, left_attr, "right",
                                      bound.right_column))
    for joined, own_end, other_end, side, column in sides:
        # A join chain's generated view holds x.window_end as x__window_end (and its start
        # as x__window_start).
        prefix = column[:-len("window_end")] if column.endswith("__window_end") else ""
        result[f"{joined.alias}.{prefix}window_end"] = ("window_end",
                                                        JoinTime(own_end, other_end, 0, side))
        start = joined.relation.time_attribute(f"{prefix}window_start")
        if start is not None and start.kind == "window_start":
            result[f"{joined.alias}.{prefix}window_start"] = (
                "window_start", JoinTime(start, other_end, 0, side))
    return result


def _join_state_text(join: Join, left: _JoinInput, right: _JoinInput) -> str:
    """When each side's rows are freed (S16), for ``View.state`` and explain."""
    if join.as_of is not None:
        if join.as_of.version_column is None:
            return (f"rows of {left.alias} are written in the step they arrive in, then "
                    f"freed; of {right.alias}, per key, the latest version is kept (state "
                    "grows with the number of keys)")
        assert join.as_of.probe_column is not None
        probe = left.relation.time_attribute(join.as_of.probe_column)
        probe_column = f"{left.alias}.{join.as_of.probe_column}"
        versions = right.relation.time_attribute(join.as_of.version_column)
        assert probe is not None and versions is not None
        return (f"rows of {left.alias} are held until {_join_waterline(versions)} > "
                f"{probe_column}, then written and freed; of {right.alias}, per key, the "
                f"latest version at or below min({_join_waterline(probe)}, "
                f"{_join_waterline(versions)}) and every later one are kept (one version "
                "per key stays: state grows with the number of keys)")
    bound = join.bound
    if bound is None:
        return ""
    left_attr = left.relation.time_attribute(bound.left_column)
    right_attr = right.relation.time_attribute(bound.right_column)
    assert left_attr is not None and right_attr is not None
    left_column = f"{left.alias}.{bound.left_column}"
    right_column = f"{right.alias}.{bound.right_column}"
    if join.form == "window":
        return (f"rows of {left.alias} are freed once {_join_waterline(right_attr)} >= "
                f"{left_column}; rows of {right.alias} once {_join_waterline(left_attr)} >= "
                f"{right_column}")
    column = next(c for c in left.relation.columns if c.name == bound.left_column)
    unit = "interval" if column.type.name == "TIMESTAMP" else "integer"
    # Future rows have a time >= w, a window_end > w (S5, S10).
    above = {attr: ">=" if attr.kind == "window_end" else ">" for attr in (left_attr, right_attr)}
    return (f"rows of {left.alias} are freed once {_join_waterline(right_attr)} "
            f"{above[right_attr]} {_offset_text(left_column, bound.upper, unit)}; rows of "
            f"{right.alias} once {_join_waterline(left_attr)} {above[left_attr]} "
            f"{_offset_text(right_column, -bound.lower, unit)}")
