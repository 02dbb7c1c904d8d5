"""The correlated MAX subquery of seed 004, read as the temporal join it states (SPEC S16).

Before SQL had ``FOR SYSTEM_TIME AS OF``, the rate valid at an amount's time was written with
a correlated scalar subquery (seed 004, Flink's design of time attributes)::

    FROM amounts AS a, rates AS r
    WHERE a.currency = r.currency
      AND r.rowtime = (SELECT MAX(r2.rowtime) FROM rates AS r2
                       WHERE r2.currency = a.currency AND r2.rowtime <= a.rowtime)

Its rows are the pairs of each ``a`` row with the row of ``r`` of its key whose time is the
greatest at or below ``a.rowtime``: the temporal join ``a JOIN rates FOR SYSTEM_TIME AS OF
a.rowtime AS r ON a.currency = r.currency``, which the rest of the compiler plans (the only
difference, rows of one key at the very same time, is settled as the temporal join settles
it: the later one is the version). :func:`as_of_join` finds that conjunct in a join's ON (the
WHERE of a FROM list) and rewrites the join so; any other subquery is left for the
translator, which refuses it with the JOIN form as the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import sqlglot
from sqlglot import exp

from app.program.lexer import CompileFailure, SourceText

__all__ = ["VERSIONS_BY", "as_of_join"]

#: The meta key of a rewritten ``FOR SYSTEM_TIME AS OF``: (the versioned column the
#: subquery compared, where the subquery's conjunct starts).
VERSIONS_BY = "versions_by"


@dataclass(frozen=True)
class _Found:
    conjunct: exp.Expression
    probe_time: exp.Column
    #: The versioned column the subquery orders versions by (``v.t``).
    versions_by: str
    #: (probe column, versioned column name) per correlated key of the subquery.
    keys: tuple[tuple[exp.Column, str], ...]


def _name(node: exp.Expression | None) -> str:
    if isinstance(node, exp.Identifier):
        text = str(node.this)
        return text if node.quoted else text.lower()
    return "" if node is None else str(node.name).lower()


def _alias(table: exp.Expression) -> str:
    alias = table.args.get("alias")
    if alias is not None and alias.this is not None:
        return _name(alias.this)
    return _name(table.this) if isinstance(table, exp.Table) else ""


def _column_of(node: exp.Expression, alias: str) -> str | None:
    """``alias.c`` -> ``c``; anything else None."""
    if isinstance(node, exp.Column) and _name(node.args.get("table")) == alias:
        return _name(node.this)
    return None


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    inner = cast(exp.Expression, node.unnest()) if isinstance(node, exp.Paren) else node
    if isinstance(inner, exp.And):
        return _conjuncts(inner.this) + _conjuncts(inner.expression)
    return [inner]


def _position(node: exp.Expression) -> int:
    starts = [n.meta["start"] for n in node.walk() if n.meta.get("start") is not None]
    return min(starts) if starts else 0


def as_of_join(source: SourceText, select: exp.Select) -> exp.Select:
    """``select`` (a join of two relations) with a conjunct ``v.t = (SELECT MAX(v2.t) FROM
    <v's relation> AS v2 WHERE v2.k = p.x ... AND v2.t <= p.s)`` of its ON read as ``JOIN
    <v's relation> FOR SYSTEM_TIME AS OF p.s AS v``; unchanged without one.

    Raises:
        CompileFailure: the conjunct has that shape but states no temporal join (another
            aggregate, ``<``, a key the ON does not join on), with the form that does.
    """
    joins = select.args.get("joins") or []
    from_ = select.args.get("from_") or select.args.get("from")
    if len(joins) != 1 or from_ is None or joins[0].args.get("on") is None:
        return select
    join = joins[0]
    versioned = join.this
    if not isinstance(versioned, exp.Table) or versioned.args.get("version") is not None:
        return select
    probe, alias = _alias(from_.this), _alias(versioned)
    on = join.args["on"]
    found = None
    for conjunct in _conjuncts(on):
        found = _match(source, conjunct, probe, alias, _name(versioned.this))
        if found is not None:
            break
    if found is None:
        return select
    rest = [c for c in _conjuncts(on) if c is not found.conjunct]
    joined_keys = {(probe_col.sql().lower(), column) for probe_col, column in _on_keys(
        rest, probe, alias)}
    for probe_column, column in found.keys:
        if (probe_column.sql().lower(), column) not in joined_keys:
            raise CompileFailure(
                source.position(_position(found.conjunct)),
                f"the subquery finds the latest {alias} row of its key {column} = "
                f"{probe_column.sql()}, but the join does not join on that key",
                f"add {probe_column.sql()} = {alias}.{column} to the join's condition")
    template = sqlglot.parse_one(
        "SELECT 1 FROM p JOIN v FOR SYSTEM_TIME AS OF p.t AS v ON TRUE")
    version = template.args["joins"][0].this.args["version"].copy()
    version.set("expression", found.probe_time.copy())
    # The compiler checks that the versions are ordered by what the temporal join orders
    # them by (its LATENESS column, or arrival for processing time).
    version.meta[VERSIONS_BY] = (found.versions_by, _position(found.conjunct))
    rewritten = select.copy()
    new_join = rewritten.args["joins"][0]
    new_join.this.set("version", version)
    condition: exp.Expression = rest[0].copy() if rest else exp.true()
    for part in rest[1:]:
        condition = exp.And(this=condition, expression=part.copy())
    new_join.set("on", condition)
    return rewritten


def _on_keys(conjuncts: list[exp.Expression], probe: str,
             alias: str) -> list[tuple[exp.Column, str]]:
    """The ON's equalities ``probe.x = alias.k`` (either way round) as (probe column, k)."""
    keys = []
    for node in conjuncts:
        if not isinstance(node, exp.EQ):
            continue
        for first, second in ((node.this, node.expression), (node.expression, node.this)):
            column = _column_of(second, alias)
            if column is not None and isinstance(first, exp.Column) and _column_of(
                    first, probe) is not None:
                keys.append((first, column))
    return keys


def _match(source: SourceText, conjunct: exp.Expression, probe: str, alias: str,
           relation: str) -> _Found | None:
    if not isinstance(conjunct, exp.EQ):
        return None
    for own, other in ((conjunct.this, conjunct.expression),
                       (conjunct.expression, conjunct.this)):
        time = _column_of(own, alias)
        if time is None or not isinstance(other, exp.Subquery):
            continue
        query = other.this
        if not isinstance(query, exp.Select):
            return None
        return _subquery(source, conjunct, query, probe, alias, relation, time)
    return None


def _subquery(source: SourceText, conjunct: exp.Expression, query: exp.Select, probe: str,
              alias: str, relation: str, time: str) -> _Found | None:
    """The subquery's keys and probe time, when it is ``SELECT MAX(v2.t) FROM <relation> AS
    v2 WHERE v2.k = p.x ... AND v2.t <= p.s``; None for a subquery of another shape (the
    translator refuses it)."""
    from_ = query.args.get("from_") or query.args.get("from")
    items = query.expressions
    if (from_ is None or query.args.get("joins") or query.args.get("group")
            or len(items) != 1 or not isinstance(items[0], exp.Max)
            or not isinstance(from_.this, exp.Table) or _name(from_.this.this) != relation):
        return None
    inner = _alias(from_.this)
    at = source.position(_position(conjunct))
    if _column_of(items[0].this, inner) != time:
        raise CompileFailure(at, f"the subquery compares {alias}.{time} with the MAX of "
                             f"{items[0].this.sql()}: it finds no version of {alias}",
                             f"take MAX({inner}.{time}), the time of the versions")
    where = query.args.get("where")
    keys: list[tuple[exp.Column, str]] = []
    probe_time: exp.Column | None = None
    for node in _conjuncts(where.this) if where is not None else []:
        if isinstance(node, (exp.LTE, exp.GTE)):
            low, high = ((node.this, node.expression) if isinstance(node, exp.LTE)
                         else (node.expression, node.this))
            if (_column_of(low, inner) == time and isinstance(high, exp.Column)
                    and _column_of(high, probe) is not None and probe_time is None):
                probe_time = high
                continue
        if isinstance(node, exp.EQ):
            pair = next(((k, p) for k, p in ((node.this, node.expression),
                                             (node.expression, node.this))
                         if _column_of(k, inner) is not None
                         and isinstance(p, exp.Column) and _column_of(p, probe) is not None),
                        None)
            if pair is not None:
                key = _column_of(pair[0], inner)
                assert key is not None and isinstance(pair[1], exp.Column)
                keys.append((pair[1], key))
                continue
        raise CompileFailure(at, f"unsupported: {node.sql()} in the subquery that finds the "
                             f"version of {alias}: only its key equalities ({inner}.k = "
                             f"{probe}.x) and {inner}.{time} <= {probe}.<time> state a "
                             "temporal join",
                             f"write the temporal join: JOIN {relation} FOR SYSTEM_TIME AS OF "
                             f"{probe}.<time> AS {alias} ON {probe}.x = {alias}.k")
    if probe_time is None:
        raise CompileFailure(at, f"the subquery that finds the latest {alias} row has no "
                             f"bound {inner}.{time} <= {probe}.<time>, so it is no version "
                             "valid at a time",
                             f"add AND {inner}.{time} <= {probe}.<time attribute>, or write "
                             f"JOIN {relation} FOR SYSTEM_TIME AS OF {probe}.<time> AS {alias}")
    return _Found(conjunct, probe_time, time, tuple(keys))
