"""NEXMark Q7 as the paper's CQL listing states it (seed 001, listing 1), read as its join.

Listing 1 compares each bid of a ten-minute window with the highest price of the window's
bids. With window functions (L4) the comparison is a correlated scalar subquery::

    SELECT B.window_start, B.window_end, B.bidtime, B.price, B.item
    FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE)) AS B
    WHERE B.price = (SELECT MAX(B1.price)
                     FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE)) B1
                     WHERE B1.window_end = B.window_end)

Its rows are those of the join form (listing 2, ``pipelines/nexmark_q7.sql``): the aggregate
per window, joined with the bids of the window at its price. :func:`window_subquery` finds
that conjunct in a query's WHERE and decorrelates it so: the subquery becomes a generated
local view of the aggregate per window (``SELECT window_start, window_end, MAX(B1.price) AS
max_price ... GROUP BY window_start, window_end``, each window written once, final, as every
generated windowed aggregate is), and the query the INNER join of its own rows with that view
ON the correlation (``B.window_end = B1.window_end``: a window join, S16) AND the comparison
(``B.price = B1.max_price``); its other WHERE conditions filter the joined rows. A
correlation on another column (``B1.auction = B.auction``) is one more GROUP BY key and join
key; a condition of the subquery on its own rows filters the aggregate's input. A window
function in the query's FROM becomes a side of the join, as a window function written as a
side of a JOIN does (app/program/subqueries.py).

Any other subquery is left for the translator, which refuses it with the join form as the
fix; a subquery of this shape that states no per-window comparison (no correlation on
``window_end``, or a correlation other than equalities) is refused here, with the forms that
do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from app.circuit.ir import Position
from app.program.lexer import CompileFailure, SourceText, Token, matching_paren
from app.program.query import TVF_PLACEHOLDER, find_window_function
from app.program.subqueries import Derived

__all__ = ["AGGREGATE", "SIDE", "Decorrelated", "window_subquery"]

#: The names the decorrelated query reads its two generated views by (no user name starts
#: with ``__``).
SIDE = "__side__"
AGGREGATE = "__max__"

_CLAUSES = ("GROUP", "HAVING", "WINDOW", "QUALIFY", "ORDER", "LIMIT", "OFFSET", "EMIT", "UNION")
_AGGREGATES: dict[type[exp.Expression], str] = {exp.Max: "max", exp.Min: "min"}


@dataclass(frozen=True)
class Decorrelated:
    """A query with the per-window subquery decorrelated: the window function of its FROM
    as a join side (None when FROM names a relation), the generated aggregate, and the
    query as the join of the two (its relations named :data:`SIDE`, :data:`AGGREGATE`)."""

    side: Derived | None
    aggregate: Derived
    select: exp.Select
    #: Where the subquery is written: the join's place in errors and warnings.
    position: Position


def _ident(node: exp.Expression | None) -> str:
    if isinstance(node, exp.Identifier):
        text = str(node.this)
        return text if node.quoted else text.lower()
    return "" if node is None else str(node.name).lower()


def _qualifier(column: exp.Column) -> str | None:
    table = column.args.get("table")
    return _ident(table) if table is not None else None


def _alias(table: exp.Table, default: str) -> str:
    alias = table.args.get("alias")
    if alias is not None and alias.this is not None:
        return _ident(alias.this)
    return default


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    inner = cast(exp.Expression, node.unnest()) if isinstance(node, exp.Paren) else node
    if isinstance(inner, exp.And):
        return _conjuncts(inner.this) + _conjuncts(inner.expression)
    return [inner]


def _and(parts: Sequence[exp.Expression]) -> exp.Expression | None:
    result: exp.Expression | None = None
    for part in parts:
        result = part if result is None else exp.And(this=result, expression=part)
    return result


def _start(node: exp.Expression) -> int | None:
    starts = [n.meta["start"] for n in node.walk() if n.meta.get("start") is not None]
    return min(starts) if starts else None


def _column(name: str, table: str | None = None) -> exp.Column:
    return exp.Column(this=exp.Identifier(this=name, quoted=True),
                      table=exp.Identifier(this=table, quoted=True) if table else None)


def _parse(source: SourceText, start: int, end: int,
           replacements: tuple[tuple[int, int, str], ...]) -> exp.Select | None:
    try:
        parsed = sqlglot.parse_one(source.blank_except(start, end, replacements))
    except (ParseError, TokenError):
        return None
    return parsed if isinstance(parsed, exp.Select) else None


def _top_level(tokens: Sequence[Token]) -> list[tuple[int, Token]]:
    depth = 0
    found: list[tuple[int, Token]] = []
    for index, token in enumerate(tokens):
        if token.is_punct("("):
            if depth == 0:
                found.append((index, token))
            depth += 1
        elif token.is_punct(")"):
            depth -= 1
        elif depth == 0:
            found.append((index, token))
    return found


def window_subquery(source: SourceText, tokens: Sequence[Token]) -> Decorrelated | None:
    """``tokens`` (a query) decorrelated as the module says, or None when its WHERE has no
    conjunct ``x = (SELECT MAX(...) FROM <windowed relation> ...)`` over one relation.

    Raises:
        CompileFailure: such a subquery that compares with no per-window value.
    """
    if not tokens or not tokens[0].is_word("SELECT"):
        return None
    words = _top_level(tokens)
    from_index = next((i for i, t in words if t.is_word("FROM")), None)
    where_index = next((i for i, t in words if t.is_word("WHERE")), None)
    if from_index is None or where_index is None or where_index < from_index:
        return None
    end = next((i for i, t in words if i > where_index and t.is_word(*_CLAUSES)), len(tokens))
    open_index = next((i for i, t in words if where_index < i < end and t.is_punct("(")
                       and i + 1 < len(tokens) and tokens[i + 1].is_word("SELECT")), None)
    if open_index is None:
        return None
    close_index = matching_paren(tokens, open_index)
    if close_index < 0:
        return None
    if any(t.is_punct(",") or t.is_word("JOIN") for i, t in words
           if from_index < i < where_index):
        return None
    side_tvf = find_window_function(source, tokens[from_index + 1:where_index])
    opening = tokens[open_index]
    position = source.position(opening.start)
    replacements = ((side_tvf.start, side_tvf.end, SIDE),) if side_tvf is not None else ()
    outer = _parse(source, tokens[0].start, tokens[-1].end,
                   (*replacements, (opening.start, tokens[close_index].end, AGGREGATE)))
    body = tuple(tokens[open_index + 1:close_index])
    inner_tvf = find_window_function(source, body)
    inner = _parse(source, body[0].start, body[-1].end,
                   ((inner_tvf.start, inner_tvf.end, TVF_PLACEHOLDER),)
                   if inner_tvf is not None else ())
    if outer is None or inner is None:
        return None
    outer_from = outer.args.get("from_") or outer.args.get("from")
    if (outer.args.get("joins") or outer_from is None
            or not isinstance(outer_from.this, exp.Table)):
        return None
    found = _compared(outer)
    if found is None:
        return None
    comparison, compared = found
    aggregate = _aggregate(inner)
    if aggregate is None:
        return None
    outer_table = outer_from.this
    outer_name = side_tvf.table if side_tvf is not None else _ident(outer_table.this)
    outer_alias = _alias(outer_table, outer_name)
    inner_from = inner.args.get("from_") or inner.args.get("from")
    assert inner_from is not None and isinstance(inner_from.this, exp.Table)
    inner_name = inner_tvf.table if inner_tvf is not None else _ident(inner_from.this.this)
    inner_alias = _alias(inner_from.this, inner_name)
    if inner_alias == outer_alias:
        return None  # the subquery's own rows hide the query's: nothing correlates
    keys, kept = _correlation(source, inner, inner_alias, outer_alias, position)
    if not any(name == "window_end" for _, name in keys):
        function = type(aggregate).__name__.upper()
        raise CompileFailure(position, f"unsupported: a subquery in WHERE whose {function} is "
                             f"not per window: it compares with the {function} of every row "
                             f"of {inner_name} so far, a value that changes with each row",
                             f"compare with the {function} of the row's window: add WHERE "
                             f"{inner_alias}.window_end = {outer_alias}.window_end to the "
                             "subquery (its FROM a TUMBLE or HOP)")
    names = [name for _, name in keys if name != "window_start"]
    group = ["window_start", *names] if inner_tvf is not None or any(
        name == "window_start" for _, name in keys) else names
    group = [name for index, name in enumerate(group) if name not in group[:index]]
    function = type(aggregate).__name__.lower()
    argument = aggregate.this
    value = f"{function}_{_ident(argument.this)}" if isinstance(argument, exp.Column) else (
        f"{function}_value")
    while value in group:
        value += "_"
    per_window = inner.copy()
    per_window.set("expressions", [
        *(exp.Alias(this=_column(name), alias=exp.Identifier(this=name, quoted=True))
          for name in group),
        exp.Alias(this=aggregate.copy(), alias=exp.Identifier(this=value, quoted=True))])
    condition = _and([part.copy() for part in kept])
    per_window.set("where", exp.Where(this=condition) if condition is not None else None)
    per_window.set("group", exp.Group(expressions=[_column(name) for name in group]))
    joined = _joined(outer, comparison, compared, keys, outer_alias, inner_alias, value)
    side = None
    if side_tvf is not None:
        side_tokens = tuple(t for t in tokens[from_index + 1:where_index]
                            if side_tvf.start <= t.start and t.end <= side_tvf.end)
        side = Derived("window", outer_alias, side_tvf.position, side_tokens, SIDE)
    made = Derived("aggregate", inner_alias, position, body, AGGREGATE, source,
                   query=per_window)
    return Decorrelated(side, made, joined, position)


def _compared(outer: exp.Select) -> tuple[exp.Expression, exp.Expression] | None:
    """The WHERE conjunct ``x = <subquery>`` (either way round) and its ``x``; None when the
    subquery is anywhere else."""
    where = outer.args.get("where")
    found = None
    for conjunct in _conjuncts(where.this if where is not None else None):
        if not isinstance(conjunct, exp.EQ):
            continue
        for own, other in ((conjunct.this, conjunct.expression),
                           (conjunct.expression, conjunct.this)):
            if (isinstance(other, exp.Column) and other.args.get("table") is None
                    and _ident(other.this) == AGGREGATE.lower()):
                found = (conjunct, own)
    if found is None:
        return None
    uses = [c for c in outer.find_all(exp.Column) if _ident(c.this) == AGGREGATE.lower()]
    return found if len(uses) == 1 else None


def _aggregate(inner: exp.Select) -> exp.Expression | None:
    """The subquery's one MAX or MIN, when it is all it selects from one relation."""
    items = inner.expressions
    from_ = inner.args.get("from_") or inner.args.get("from")
    if (len(items) != 1 or from_ is None or not isinstance(from_.this, exp.Table)
            or any(inner.args.get(k) for k in ("joins", "group", "having", "distinct",
                                                "order", "limit", "offset", "with"))):
        return None
    item = items[0].this if isinstance(items[0], exp.Alias) else items[0]
    return item if type(item) in _AGGREGATES else None


def _correlation(source: SourceText, inner: exp.Select, inner_alias: str, outer_alias: str,
                 position: Position) -> tuple[list[tuple[exp.Expression, str]],
                                              list[exp.Expression]]:
    """The subquery's WHERE split into its correlation, (the query's expression, the
    subquery's column) per equality, and the conditions on its own rows."""
    keys: list[tuple[exp.Expression, str]] = []
    kept: list[exp.Expression] = []
    where = inner.args.get("where")
    for conjunct in _conjuncts(where.this if where is not None else None):
        outer_refs = [c for c in conjunct.find_all(exp.Column) if _qualifier(c) == outer_alias]
        if not outer_refs:
            kept.append(conjunct)
            continue
        if isinstance(conjunct, exp.EQ):
            pair = None
            for own, other in ((conjunct.this, conjunct.expression),
                               (conjunct.expression, conjunct.this)):
                if (isinstance(own, exp.Column) and _qualifier(own) in (inner_alias, None)
                        and not isinstance(own.this, exp.Star)
                        and all(_qualifier(c) == outer_alias
                                for c in other.find_all(exp.Column))):
                    pair = (other, _ident(own.this))
                    break
            if pair is not None:
                keys.append(pair)
                continue
        start = _start(conjunct)
        raise CompileFailure(source.position(start) if start is not None else position,
                             f"unsupported: {conjunct.sql()} in a subquery compared per "
                             f"window: only equalities of its columns with the query's "
                             f"({inner_alias}.window_end = {outer_alias}.window_end, "
                             f"{inner_alias}.k = {outer_alias}.k) correlate it",
                             "write the other conditions on the subquery's own rows, or "
                             "write the join form: FROM bid AS b JOIN (SELECT window_end, "
                             "MAX(price) AS maxprice FROM TABLE(TUMBLE(...)) GROUP BY "
                             "window_start, window_end) AS m ON b.price = m.maxprice AND ... "
                             "(pipelines/nexmark_q7.sql)")
    return keys, kept


def _joined(outer: exp.Select, comparison: exp.Expression, compared: exp.Expression,
            keys: Sequence[tuple[exp.Expression, str]], outer_alias: str, inner_alias: str,
            value: str) -> exp.Select:
    """The query as the INNER join of its relation with the aggregate per window, ON the
    correlation and the comparison; its columns qualified by its relation, as the subquery
    was the only other one."""
    joined = outer.copy()
    where = joined.args.get("where")
    comparison_start = _start(comparison)
    rest = [c for c in _conjuncts(where.this if where is not None else None)
            if not (isinstance(c, exp.EQ) and _start(c) == comparison_start
                    and c.sql() == comparison.sql())]
    condition = _and(rest)
    joined.set("where", exp.Where(this=condition) if condition is not None else None)
    joined.set("expressions", [exp.Column(this=exp.Star(), table=exp.Identifier(
        this=outer_alias, quoted=True)) if isinstance(item, exp.Star) else item
        for item in joined.expressions])
    on = [exp.EQ(this=expr.copy(), expression=_column(name, inner_alias))
          for expr, name in keys]
    on.append(exp.EQ(this=compared.copy(), expression=_column(value, inner_alias)))
    clause = _and(on)
    assert clause is not None
    from_ = joined.args.get("from_") or joined.args.get("from")
    assert from_ is not None
    from_.this.set("alias", exp.TableAlias(this=exp.Identifier(this=outer_alias, quoted=True)))
    for node in [*joined.expressions, *([joined.args["where"]] if condition is not None
                                        else []), clause]:
        for column in node.find_all(exp.Column):
            if column.args.get("table") is None and not isinstance(column.this, exp.Star):
                column.set("table", exp.Identifier(this=outer_alias, quoted=True))
    joined.set("joins", [exp.Join(this=exp.Table(
        this=exp.Identifier(this=AGGREGATE), alias=exp.TableAlias(
            this=exp.Identifier(this=inner_alias, quoted=True))), on=clause)])
    return joined
