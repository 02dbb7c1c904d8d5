"""``aggregate OVER (...)`` to the IR's :class:`~app.circuit.ir.Over` (docs/language.md, OVER
aggregates; docs/semantics.md for when a row is written).

Flink's OVER aggregation: ``ORDER BY`` one ascending time attribute of the input (a LATENESS
column forwarded to the view, or the ``window_end`` of a window on one, such as an ``EMIT
AFTER WATERMARK`` aggregate's, SPEC S10), ``PARTITION BY`` any expressions, and a frame that
ends at the current row: ``RANGE BETWEEN INTERVAL ... PRECEDING AND CURRENT ROW``, ``RANGE
BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW`` (SQL's default without a frame), ``ROWS BETWEEN
n PRECEDING AND CURRENT ROW`` or ``ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW``. Every
OVER aggregate of one SELECT shares one window (Flink's rule), written inline or named in a
``WINDOW w AS (...)`` clause. Anything else is refused at the SQL as written (L7): sqlglot
gives the structure, the query's tokens the positions (its keywords carry none).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from app.circuit.ir import AggCall, Expr, Over, Position, SqlType, TimeAttribute
from app.program.lexer import CompileFailure, SourceText, Token, matching_paren

__all__ = ["OVER_AGGREGATES", "OverCall", "plan_over", "state_text"]

#: The aggregates an OVER window computes (the catalog's, without ARG_MAX/ARG_MIN).
OVER_AGGREGATES = ("COUNT", "SUM", "MIN", "MAX", "AVG")

#: How an OVER window is written, for fixes.
_FORMS = ("OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND "
          "CURRENT ROW), or ROWS BETWEEN n PRECEDING AND CURRENT ROW, or UNBOUNDED PRECEDING")


@dataclass(frozen=True)
class OverCall:
    """One ``aggregate OVER ...`` of the SELECT list as the translator found it: its sqlglot
    node, its column name in the Over operator's output and its aggregate."""

    node: exp.Window
    name: str
    call: AggCall


#: A window as planned: (partition, order column, frame, preceding).
_Window = tuple[tuple[Expr, ...], str, Literal["range", "rows"], int | None]


@dataclass(frozen=True)
class _Spec:
    """One OVER window's definition and where its parts are written."""

    node: exp.Window
    tokens: Sequence[Token]  # the tokens inside its parentheses
    position: Position  # where OVER (or the window's name) is


def plan_over(source: SourceText, tokens: Sequence[Token], select: exp.Select,
              calls: Sequence[OverCall], time_attrs: dict[str, TimeAttribute],
              types: dict[str, SqlType], translate: Callable[[exp.Expression], Expr]) -> Over:
    """The one :class:`Over` of a SELECT's OVER aggregates ``calls`` (in SELECT order),
    over an input whose time attributes are ``time_attrs`` and column types (SQL type
    ``types``; ``translate`` turns a PARTITION
    BY expression into the IR."""
    named = _named_windows(source, tokens, select)
    overs = [i for i, t in enumerate(tokens) if t.is_word("OVER")]
    planned: list[_Window] = []
    for index, call in enumerate(calls):
        at = overs[index] if index < len(overs) else 0
        spec = _spec_of(source, tokens, at, call.node, named)
        planned.append(_window(source, spec, time_attrs, types, translate))
        if planned[-1] != planned[0]:
            raise CompileFailure(spec.position, "all OVER aggregates of one SELECT must share "
                                 "one window (PARTITION BY, ORDER BY and frame)",
                                 "give them one window, e.g. OVER w ... WINDOW w AS (...), "
                                 "or compute the other aggregates in a view of their own")
    partition, order, frame, preceding = planned[0]
    return Over(partition, order, frame, preceding, tuple((c.name, c.call) for c in calls))


def _named_windows(source: SourceText, tokens: Sequence[Token],
                   select: exp.Select) -> dict[str, _Spec]:
    """The windows of the WINDOW clause by name, each with its tokens."""
    out: dict[str, _Spec] = {}
    start = next((i for i, t in enumerate(tokens) if t.is_word("WINDOW")), None)
    for node in select.args.get("windows") or []:
        name = str(node.this.this).lower()
        found = None
        if start is not None:
            for i in range(start, len(tokens) - 2):
                if (tokens[i].kind in ("word", "qident") and tokens[i].text.lower() == name
                        and tokens[i + 1].is_word("AS") and tokens[i + 2].is_punct("(")):
                    found = i
                    break
        if found is None:
            position = source.position(tokens[start].start if start is not None
                                       else tokens[0].start)
            out[name] = _Spec(node, (), position)
            continue
        close = matching_paren(tokens, found + 2)
        out[name] = _Spec(node, tokens[found + 3:close], source.position(tokens[found].start))
    return out


def _spec_of(source: SourceText, tokens: Sequence[Token], at: int, node: exp.Window,
             named: dict[str, _Spec]) -> _Spec:
    """The window an OVER names or defines (its ``OVER`` token at index ``at``)."""
    position = source.position(tokens[at].start)
    alias = node.args.get("alias")
    inline = any(node.args.get(k) for k in ("partition_by", "order", "spec"))
    if alias is not None and not inline:
        name = str(alias.this).lower()
        spec = named.get(name)
        if spec is None:
            raise CompileFailure(source.position(tokens[min(at + 1, len(tokens) - 1)].start),
                                 f"unknown window {name}",
                                 f"define it: WINDOW {name} AS (PARTITION BY ... ORDER BY ...)")
        return spec
    if alias is not None:
        raise CompileFailure(position, "unsupported: a window that refines a named window",
                             "write the whole window in the WINDOW clause and use OVER name")
    close = matching_paren(tokens, at + 1) if at + 1 < len(tokens) else -1
    inner = tokens[at + 2:close] if close > 0 else ()
    return _Spec(node, inner, position)


def _window(source: SourceText, spec: _Spec, time_attrs: dict[str, TimeAttribute],
            types: dict[str, SqlType], translate: Callable[[exp.Expression], Expr],
            ) -> _Window:
    """One window's (partition, order column, frame, preceding), checked."""
    node = spec.node

    def at(*words: str) -> Position:
        token = next((t for t in spec.tokens if t.is_word(*words)), None)
        return source.position(token.start) if token is not None else spec.position

    partition = tuple(translate(e) for e in node.args.get("partition_by") or [])
    order = node.args.get("order")
    keys = list(order.expressions) if order is not None else []
    usable = (", ".join(sorted(n for n, a in time_attrs.items() if _orderable(a)))
              or "none: add LATENESS to a column of the table")
    if len(keys) != 1:
        raise CompileFailure(at("ORDER") if keys else spec.position,
                             "an OVER window must ORDER BY exactly one time attribute",
                             f"ORDER BY a LATENESS column of the input ({usable}): {_FORMS}")
    key = keys[0]
    if key.args.get("desc"):
        raise CompileFailure(at("DESC"), "unsupported: ORDER BY ... DESC in an OVER window: "
                             "rows are aggregated in ascending time", "remove DESC")
    column = key.this
    name = (str(column.this.this) if isinstance(column, exp.Column)
            and isinstance(column.this, exp.Identifier) else None)
    if name is not None and not column.this.args.get("quoted"):
        name = name.lower()
    attr = time_attrs.get(name) if name is not None else None
    if attr is None:
        what = f"column {name}" if name is not None else "this expression"
        raise CompileFailure(_order_position(source, spec), f"{what} is not a time attribute "
                             "of the input, so an OVER window cannot ORDER BY it",
                             f"ORDER BY a LATENESS column of the input ({usable})")
    if not _orderable(attr):
        what = ("a window start, whose waterline follows its window" if attr.kind ==
                "window_start" else "a time attribute derived from another")
        raise CompileFailure(_order_position(source, spec), f"unsupported: an OVER window "
                             f"ordered by {name}, {what}",
                             f"ORDER BY a LATENESS column or a window_end of the input "
                             f"({usable})")
    assert name is not None
    if types[name].nullable:
        # A view's own LATENESS may be on a decoding CAST, which is NULL for a bad value.
        raise CompileFailure(_order_position(source, spec), f"column {name} may be NULL, and a "
                             "row without a time is in no OVER frame",
                             f"ORDER BY a NOT NULL LATENESS column ({usable})")
    frame = node.args.get("spec")
    if frame is None:
        return partition, name, "range", None
    kind = str(frame.args.get("kind") or "").upper()
    if kind not in ("RANGE", "ROWS"):
        raise CompileFailure(at(kind) if kind else spec.position, f"unsupported: a {kind} frame "
                             "in an OVER window", f"write {_FORMS}")
    end = frame.args.get("end")
    if frame.args.get("end_side") or (end is not None and str(end).upper() != "CURRENT ROW"):
        raise CompileFailure(at("FOLLOWING") if frame.args.get("end_side") == "FOLLOWING"
                             else at("AND"), "unsupported: an OVER frame that ends after the "
                             "current row: a row's value would wait for later rows",
                             f"end the frame at CURRENT ROW: {_FORMS}")
    start = frame.args.get("start")
    side = str(frame.args.get("start_side") or "").upper()
    if side != "PRECEDING":
        raise CompileFailure(at("FOLLOWING", "CURRENT", "ROWS", "RANGE"),
                             "unsupported: an OVER frame must start PRECEDING the current row",
                             f"write {_FORMS}")
    if isinstance(start, str) and start.upper() == "UNBOUNDED":
        return partition, name, "rows" if kind == "ROWS" else "range", None
    if kind == "ROWS":
        if not (isinstance(start, exp.Literal) and not start.is_string
                and str(start.this).isdigit()):
            raise CompileFailure(at("ROWS"), "a ROWS frame counts rows: n PRECEDING takes a "
                                 "non-negative integer", "write ROWS BETWEEN 5 PRECEDING AND "
                                 "CURRENT ROW")
        return partition, name, "rows", int(str(start.this))
    time_type = types[name].name
    amount = _range_amount(start, time_type)
    if amount is None:
        wanted = ("an INTERVAL, e.g. RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW"
                  if time_type == "TIMESTAMP" else "a non-negative integer")
        raise CompileFailure(at("RANGE"), f"bad RANGE frame for {name} ({time_type})",
                             f"use {wanted}")
    return partition, name, "range", amount


def _orderable(attr: TimeAttribute) -> bool:
    """Whether an OVER window can be ordered by ``attr`` (S10): a row is written once the
    waterline passes its time, so the attribute's own waterline must be its source's, as
    for a LATENESS column forwarded to the view, and for the ``window_end`` of a window on
    one (an ``EMIT AFTER WATERMARK`` aggregate's final rows: every later row's window ends
    above the waterline)."""
    if attr.kind in ("forwarded", "view_lateness"):
        return True
    return attr.kind == "window_end" and not attr.steps


def _range_amount(start: object, time_type: str) -> int | None:
    """A RANGE frame's extent in the column's unit: an INTERVAL (ms) of a TIMESTAMP, an
    integer of an INT/BIGINT column; None when it is neither."""
    from app.program.ddl import interval_ms

    if time_type == "TIMESTAMP" and isinstance(start, exp.Interval):
        unit = start.args.get("unit")
        amount = start.this
        if unit is None or amount is None:
            return None
        result = interval_ms(str(amount.name if isinstance(amount, exp.Literal) else amount),
                             unit.name)
        return None if isinstance(result, str) or result < 0 else result
    if time_type != "TIMESTAMP" and isinstance(start, exp.Literal) and not start.is_string:
        text = str(start.this)
        return int(text) if text.isdigit() else None
    return None


def _order_position(source: SourceText, spec: _Spec) -> Position:
    """Where the ORDER BY key is written (the token after ORDER BY)."""
    for i, token in enumerate(spec.tokens[:-2]):
        if token.is_word("ORDER") and spec.tokens[i + 1].is_word("BY"):
            return source.position(spec.tokens[i + 2].start)
    return spec.position


def state_text(over: Over, time_type: str) -> str:
    """SPEC S11 for an OVER view: what it holds per partition, and when that is freed."""
    w = f"w({over.order_column})"
    if over.preceding is None:
        kept = "the frame's running aggregates"
    elif over.frame == "rows":
        kept = f"its last {over.preceding} written rows"
    else:
        extent = (_extent(over.preceding) if time_type == "TIMESTAMP"
                  else str(over.preceding))
        kept = f"its rows at {over.order_column} >= {w} - {extent}"
    return (f"per partition: {kept}, and the rows waiting for {w} to pass their "
            f"{over.order_column}; a partition with nothing left is freed")


def _extent(ms: int) -> str:
    from app.program.query import _amount

    return _amount(ms, "interval").lower() if ms else "0"
