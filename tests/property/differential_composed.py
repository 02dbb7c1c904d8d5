"""Generated programs whose views read each other, for the composed differential test.

The Spark runtime runs a view one query cannot run in a later query, which reads its input
through an internal topic (a stage boundary, SPEC S19, ADR 0023). This generator writes the
programs that exercise it: one or two tables (``ta``, ``tb``: ``ts TIMESTAMP LATENESS``, ``k``
VARCHAR from a small set, ``v`` BIGINT) and many independent *stacks* of up to four views
each, every view any form over any earlier view of its stack or a table:

- a filter/projection (stateless): every time attribute forwarded (renamed at times), a
  drawn WHERE, a computed column at times;
- a windowed ``EMIT AFTER WATERMARK`` aggregate: TUMBLE (with an offset at times) or HOP on
  any event-time attribute of the relation (a table's ``ts``, an aggregate's window start or
  end, a join's or a union's forwarded time, an updating aggregate's window start or end),
  keyed by the window and a VARCHAR key or by the window alone, COUNT/SUM/MIN/MAX of a
  BIGINT; the window columns renamed (``ws<i>``, ``we<i>``: a TVF over a relation that has a
  ``window_start`` fails), one or both kept;
- an interval join of two relations on a VARCHAR key with a time bound, INNER or (at times)
  LEFT;
- a UNION ALL of two relations, each projected to the same columns (a time attribute, a key
  when both have one, a value); at times, once a stack holds an updating view, a UNION ALL of
  it and any relation (S17, S18: updating, written as a ``changelog``);
- an updating aggregate (S18): GROUP BY a key, a value or both without a window, or a
  TUMBLE, HOP or CUMULATE with the default EMIT or EMIT STREAM, over any relation (an
  updating one included, whose retractions it takes back, its windows on one of its time
  attributes); ``changelog`` or ``upsert``;
- at times, once a stack holds an updating view with a key, a join without a time bound of
  it and a relation with a key, on the keys, INNER, LEFT or FULL (S16, S18: each pair's
  change weighed by both sides', an outer row padded at once and retracted when its first
  match comes; updating, a ``changelog`` without time attributes);
- in place of an aggregate or GROUP BY at times (:data:`OVER_SHARE`) an OVER aggregate of an
  insert-only relation: COUNT, SUM, MIN, MAX over a RANGE frame of seconds or UNBOUNDED (a
  ROWS frame over a table or filters of one), PARTITION BY a key at times, ORDER BY a time
  attribute that is no window start;
- so too (:data:`TOP_N_SHARE`) a window Top-N (ROW_NUMBER or RANK, ``<= N``): of a TUMBLE
  or HOP of an insert-only relation, of an EMIT AFTER WATERMARK aggregate written as its
  subquery, or of an earlier view's windows (an aggregate's, a SESSION's, a Top-N's);
- so too (:data:`SESSION_SHARE`) a SESSION window aggregate, EMIT AFTER WATERMARK, of a
  table, a filter or a UNION ALL, per a key or over all rows.

The rows of those three are final (insert-only) and wait for a waterline (gated); an OVER
keeps its ORDER BY column as a time attribute, a Top-N its window's columns, a SESSION its
``window_end`` (its ``window_start`` is a plain column), and every other time column they
pass on is a plain TIMESTAMP.

A filter of an updating view is updating too (written as a ``changelog``); once a stack holds
an updating view, its next view is a UNION ALL over one 4 times in 10, else half the time
(with a key) a regular join of one (and after either, most often a GROUP BY or filter of
it), else reads one 3 times in 5 (a filter, an aggregate, or a window aggregate on one of
its time attributes, updating or EMIT AFTER WATERMARK: Flink 1.19's window aggregate over a
changelog). Interval joins never read one (the compiler refuses them, S18). An
insert-only output writes ``'format' = 'append'``, so its rows compare as a multiset; an
intermediate view is an output or LOCAL at random. Stacks are drawn one at a time and kept
only if the program with them compiles and ``compose`` refuses nothing; every draw that is
skipped is counted by its reason (:attr:`Composed.skipped`), never narrowed away.

Input: a few steps of rows per table (out of order within LATENESS, a few late ones), then
a step of late rows (at times one exactly on the waterline), a few on time and a punctuation
far ahead of every row, so every window closes, and steps that repeat that punctuation, so
every stage behind a boundary (a step behind its writer, ADR 0023) closes its windows too.
Everything derives from one seed.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from differential_cases import BASE_MS, S, Step

from app.errors import ProgramError
from app.program.compile import compile_text
from app.runtime.planner.compose import compose

__all__ = ["Col", "Composed", "Rel", "Stack", "ViewDraw", "draw_input", "generate"]

KEYS = ("a", "b", "c")
#: Punctuation far ahead of every row: every window of every level closes below it.
FINAL_AHEAD_S = 600


@dataclass(frozen=True)
class Col:
    """A column of a generated relation: ``time`` (a NOT NULL event-time attribute),
    ``key`` (VARCHAR), ``val`` (BIGINT) or ``stamp`` (a TIMESTAMP that is no time
    attribute: an outer join's nullable side, a SESSION's window start, a time column an
    OVER or a Top-N passes on)."""

    name: str
    kind: str
    #: A window start (or a column forwarded from one): a time attribute whose waterline
    #: follows its window, which an OVER cannot be ordered by.
    start: bool = False


@dataclass(frozen=True)
class Rel:
    name: str
    cols: tuple[Col, ...]
    is_table: bool = False
    #: Its rows are updated (S18): an aggregate without EMIT AFTER WATERMARK, or a filter of
    #: one. Only filters and aggregates (windowed on one of its time attributes) read it.
    updating: bool = False
    #: Some of its rows wait for a waterline (an AFTER WATERMARK window, a LEFT join's
    #: padded rows) in it or in what it reads, so on Spark they may come steps later.
    gated: bool = False
    #: A UNION ALL with an updating branch (:func:`_updating_union`) or a regular join of
    #: an updating view (:func:`_updating_join`): a reader of it is drawn at times next.
    united: bool = False
    #: Its changes include a regular join's pairs of updating rows (in it or in what it
    #: passes on): within a step a pair may be retracted before it is inserted (S16, S18).
    paired: bool = False
    #: The form of the view that makes it (:attr:`ViewDraw.form`; empty for a table).
    form: str = ""
    #: The column that is the end of the windows of its final rows (an EMIT AFTER
    #: WATERMARK aggregate's, a SESSION aggregate's, a Top-N's), which a Top-N may rank
    #: them by (PARTITION BY it); None if it has none.
    window_end: str | None = None
    #: Its rows keep one table's arrival order (a table, or filters of one), so a ROWS
    #: frame over them is the same on both sides (rows of equal time go by arrival).
    arrival: bool = False

    def of(self, kind: str) -> list[Col]:
        return [c for c in self.cols if c.kind == kind]


@dataclass
class ViewDraw:
    """One generated view: its form, the relations it reads, its query, whether it is an
    output view (else LOCAL) and the relation it makes."""

    name: str
    form: str
    sources: tuple[str, ...]
    sql: str
    output: bool
    rel: Rel
    #: The format an output writes: ``append`` for insert-only views, ``changelog`` or
    #: ``upsert`` for an updating aggregate, ``changelog`` for a filter of one.
    fmt: str = "append"

    def text(self) -> str:
        """The CREATE VIEW statement (an output view's topic left as ``{topic}``)."""
        return f"{_head(self.name, self.output, self.fmt)}\n{self.sql}"


@dataclass
class Stack:
    views: list[ViewDraw]

    @property
    def compositions(self) -> int:
        """Views that read another view (not only tables)."""
        names = {v.name for v in self.views}
        return sum(1 for v in self.views if any(s in names for s in v.sources))


@dataclass
class Composed:
    seed: int
    lateness_s: dict[str, int]
    stacks: list[Stack]
    steps: list[Step]
    #: Stacks drawn, and those skipped by reason (normalised message).
    drawn: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    #: Which stage boundaries and stages ``compose`` chose for the whole program.
    boundaries: frozenset[str] = frozenset()

    @property
    def views(self) -> list[ViewDraw]:
        return [v for s in self.stacks for v in s.views]

    @property
    def outputs(self) -> list[str]:
        return [v.name for v in self.views if v.output]

    def view(self, name: str) -> ViewDraw:
        return next(v for v in self.views if v.name == name)

    @property
    def compositions(self) -> int:
        return sum(s.compositions for s in self.stacks)

    @property
    def forms(self) -> Counter[str]:
        return Counter(v.form for v in self.views)

    def flush_step(self) -> Step:
        """The last step's punctuation again, for the stages behind a boundary, whose
        waterline follows their writer's a step behind (ADR 0023): it changes nothing in
        the reference evaluator."""
        return Step({t: [r for r in records if r[1] == "punctuation"]
                     for t, records in self.steps[-1].records.items()})

    def topic_names(self) -> list[str]:
        return [*self.lateness_s, *(t + ".dlq" for t in self.lateness_s), *self.outputs]

    def program(self, topics: dict[str, str]) -> str:
        return program_text(self.lateness_s, self.views, topics)

    def describe(self, only: set[str] | None = None) -> str:
        """Seed, program (the stacks of ``only``'s views, or all) and steps."""
        views = self.views
        if only is not None:
            views = [v for s in self.stacks if any(v.name in only for v in s.views)
                     for v in s.views]
        names = {n: n for n in self.topic_names()}
        lines = [f"seed={self.seed}", program_text(self.lateness_s, views, names)]
        for index, step in enumerate(self.steps, 1):
            lines.append(f"-- step {index}")
            for table, records in step.records.items():
                for partition, kind, payload in records:
                    if kind == "row":
                        shown: Any = {**payload, "ts": (payload["ts"] - BASE_MS) / S}
                    else:
                        shown = (payload - BASE_MS) / S
                    lines.append(f"   {table} p{partition} {kind} {shown}")
        return "\n".join(lines)


def table_sql(table: str, lateness: int, topics: dict[str, str]) -> str:
    return (
        f"CREATE TABLE {table} (\n"
        f"    ts TIMESTAMP NOT NULL LATENESS INTERVAL '{lateness}' SECOND,\n"
        f"    k  VARCHAR NOT NULL,\n    v  BIGINT NOT NULL\n"
        f") WITH ('topic' = '{topics[table]}', 'dead_letter' = '{topics[table + '.dlq']}');"
    )


def program_text(lateness: dict[str, int], views: list[ViewDraw], topics: dict[str, str]) -> str:
    parts = [table_sql(t, amount, topics) for t, amount in lateness.items()]
    parts += [v.text().format(topic=topics.get(v.name, v.name)) for v in views]
    return "\n\n".join(parts) + "\n"


# --- drawing views ------------------------------------------------------------------------------

#: Forms a view draws (the binary ones need two relations of the right columns).
FORMS = ("filter", "filter", "aggregate", "aggregate", "aggregate", "join", "union",
         "group", "group")
AGG_CALLS = ("COUNT(*)", "SUM({v})", "MIN({v})", "MAX({v})", "COUNT({v})")


def _head(name: str, output: bool, fmt: str = "append") -> str:
    if output:
        return f"CREATE VIEW {name} WITH ('topic' = '{{topic}}', 'format' = '{fmt}') AS"
    return f"CREATE LOCAL VIEW {name} AS"


def _where(rng: random.Random, rel: Rel, alias: str = "") -> str | None:
    vals, keys, times = rel.of("val"), rel.of("key"), rel.of("time")
    choices: list[str] = []
    if vals:
        v = f"{alias}{rng.choice(vals).name}"
        n = rng.randint(0, 6)
        choices += [f"{v} > {n}", f"{v} <= {n}", f"{v} <> {n}"]
    if keys:
        k = f"{alias}{rng.choice(keys).name}"
        choices += [f"{k} <> '{rng.choice(KEYS)}'", f"{k} = '{rng.choice(KEYS)}'"]
    if vals and keys:
        choices.append(f"{alias}{rng.choice(keys).name} = 'a' OR "
                       f"{alias}{rng.choice(vals).name} >= {rng.randint(1, 5)}")
    if times:
        choices.append(f"{alias}{rng.choice(times).name} >= TIMESTAMP "
                       f"'{_clock(rng.randint(8, 30))}'")
    if not choices or rng.random() < 0.3:
        return None
    return rng.choice(choices)


def _clock(second: int) -> str:
    """BASE_MS + ``second`` s as a SQL TIMESTAMP literal (UTC)."""
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp((BASE_MS + second * S) / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _filter(rng: random.Random, name: str, output: bool, src: Rel, n: int) -> ViewDraw:
    items: list[str] = []
    cols: list[Col] = []
    end = None  # the window end of ``src``'s final rows, as the filter passes it on
    for index, col in enumerate(src.cols):
        if col.kind == "time" and rng.random() < 0.3:
            new = f"t{n}_{index}"
            items.append(f"{col.name} AS {new}")
            cols.append(replace(col, name=new))
            end = new if col.name == src.window_end else end
        elif col.kind == "val" and len(src.of("val")) > 1 and rng.random() < 0.3:
            continue  # dropped
        else:
            items.append(col.name)
            cols.append(col)
            end = col.name if col.name == src.window_end else end
    vals = src.of("val")
    if vals and rng.random() < 0.4:
        v = rng.choice(vals).name
        new = f"x{n}"
        items.append(rng.choice((f"{v} * 2 AS {new}", f"{v} + 1 AS {new}", f"{v} - 3 AS {new}")))
        cols.append(Col(new, "val"))
    where = _where(rng, src)
    sql = (f"SELECT {', '.join(items)} FROM {src.name}"
           + (f" WHERE {where}" if where else "") + ";")
    rel = Rel(name, tuple(cols), updating=src.updating, gated=src.gated, paired=src.paired,
              arrival=src.arrival, window_end=end)
    return ViewDraw(name, "filter", (src.name,), sql, output, rel,
                    "changelog" if src.updating else "append")


def _aggregate(rng: random.Random, name: str, output: bool, src: Rel, n: int) -> ViewDraw:
    time = rng.choice(src.of("time")).name
    size = rng.randint(1, 6)
    roll = rng.random()
    if roll < 0.5:
        tvf = f"TUMBLE(TABLE {src.name}, DESCRIPTOR({time}), INTERVAL '{size}' SECOND)"
    elif roll < 0.65 and size > 1:
        tvf = (f"TUMBLE(TABLE {src.name}, DESCRIPTOR({time}), INTERVAL '{size}' SECOND, "
               f"INTERVAL '{rng.randint(1, size - 1)}' SECOND)")
    else:
        slide = rng.randint(1, 3)
        tvf = (f"HOP(TABLE {src.name}, DESCRIPTOR({time}), INTERVAL '{slide}' SECOND, "
               f"INTERVAL '{slide * rng.randint(2, 3)}' SECOND)")
    window = rng.choice(("both", "both", "end", "start"))
    items: list[str] = []
    cols: list[Col] = []
    if window in ("both", "start"):
        items.append(f"window_start AS ws{n}")
        cols.append(Col(f"ws{n}", "time", start=True))
    if window in ("both", "end"):
        items.append(f"window_end AS we{n}")
        cols.append(Col(f"we{n}", "time"))
    group = ["window_start", "window_end"]
    keys = src.of("key")
    if keys and rng.random() < 0.7:
        key = rng.choice(keys).name
        items.append(key)
        group.append(key)
        cols.append(Col(key, "key"))
    sql = _final_windows_sql(rng, src, n, items, cols, group, tvf)
    return ViewDraw(name, "aggregate", (src.name,), sql, output,
                    Rel(name, tuple(cols), gated=True,
                        window_end=f"we{n}" if window != "start" else None))


def _grouped(rng: random.Random, name: str, output: bool, src: Rel, n: int) -> ViewDraw:
    """An updating aggregate (S12, S18): a GROUP BY without a window, or a TUMBLE, HOP or
    CUMULATE with the default EMIT or EMIT STREAM on a time attribute, over any relation
    (over an updating one it takes each retraction back). Written as a changelog or an
    upsert."""
    items: list[str] = []
    cols: list[Col] = []
    group: list[str] = []
    keys, vals = src.of("key"), src.of("val")
    windowed = bool(src.of("time")) and rng.random() < (0.7 if src.updating else 0.4)
    source = src.name
    if windowed:
        time = rng.choice(src.of("time")).name
        size = rng.randint(2, 6)
        roll = rng.random()
        if roll < 0.45:
            source = (f"TABLE(TUMBLE(TABLE {src.name}, DESCRIPTOR({time}), "
                      f"INTERVAL '{size}' SECOND))")
        elif roll < 0.7:
            step = rng.randint(1, 2)
            source = (f"TABLE(CUMULATE(TABLE {src.name}, DESCRIPTOR({time}), "
                      f"INTERVAL '{step}' SECOND, INTERVAL '{step * rng.randint(2, 3)}' "
                      "SECOND))")
        else:
            slide = rng.randint(1, 3)
            source = (f"TABLE(HOP(TABLE {src.name}, DESCRIPTOR({time}), "
                      f"INTERVAL '{slide}' SECOND, INTERVAL '{slide * 2}' SECOND))")
        items += [f"window_start AS ws{n}", f"window_end AS we{n}"]
        cols += [Col(f"ws{n}", "time", start=True), Col(f"we{n}", "time")]
        group += ["window_start", "window_end"]
    wanted = rng.choice(("key", "key", "val", "both"))
    chosen: list[Col] = []
    if wanted in ("key", "both") and keys:
        chosen.append(rng.choice(keys))
    if wanted in ("val", "both") and vals:
        chosen.append(rng.choice(vals))
    if not chosen and not windowed:  # a key or a value to group by (the caller's pick)
        chosen.append(rng.choice([*keys, *vals]))
    for col in chosen:
        items.append(col.name)
        group.append(col.name)
        cols.append(col)
    rest = [v for v in vals if v not in chosen]
    calls = [c for c in AGG_CALLS if rest or "{v}" not in c]
    for j, call in enumerate(rng.sample(calls, rng.randint(1, min(3, len(calls))))):
        alias = f"a{n}_{j}"
        items.append(f"{call.format(v=rng.choice(rest).name if rest else '')} AS {alias}")
        cols.append(Col(alias, "val"))
    where = _where(rng, src)
    stream = rng.random() < 0.4
    sql = (f"SELECT {', '.join(items)}\nFROM {source}\n"
           + (f"WHERE {where}\n" if where else "")
           + f"GROUP BY {', '.join(group)}"
           + ("\nEMIT STREAM" if stream else "") + ";")
    fmt = rng.choice(("changelog", "changelog", "upsert"))
    return ViewDraw(name, "group", (src.name,), sql, output,
                    Rel(name, tuple(cols), updating=True, gated=src.gated), fmt)


def _join(rng: random.Random, name: str, output: bool, left: Rel, right: Rel, n: int) -> ViewDraw:
    ltc, rtc = rng.choice(left.of("time")), rng.choice(right.of("time"))
    lt, rt = ltc.name, rtc.name
    lk, rk = rng.choice(left.of("key")).name, rng.choice(right.of("key")).name
    before, after = rng.randint(0, 5), rng.randint(0, 5)
    kind = rng.choice(("", "", "", "LEFT "))
    items = [f"l.{lt} AS lt{n}", f"r.{rt} AS rt{n}", f"l.{lk} AS k{n}"]
    cols = [Col(f"lt{n}", "time", ltc.start),
            Col(f"rt{n}", "stamp") if kind else Col(f"rt{n}", "time", rtc.start),
            Col(f"k{n}", "key")]
    for side, rel in (("l", left), ("r", right)):
        if rel.of("val"):
            items.append(f"{side}.{rng.choice(rel.of('val')).name} AS {side}v{n}")
            cols.append(Col(f"{side}v{n}", "val"))
    residual = None
    if left.of("val") and right.of("val") and rng.random() < 0.3:
        residual = (f"l.{rng.choice(left.of('val')).name} "
                    f"{rng.choice(('<', '>=', '<>'))} r.{rng.choice(right.of('val')).name}")
    joined = (f"FROM {left.name} AS l {kind}JOIN {right.name} AS r\n"
              f"  ON l.{lk} = r.{rk}\n"
              f" AND r.{rt} BETWEEN l.{lt} - INTERVAL '{before}' SECOND"
              f" AND l.{lt} + INTERVAL '{after}' SECOND"
              + (f"\n AND {residual}" if residual else ""))
    gated = bool(kind) or left.gated or right.gated
    if rng.random() < AGGREGATED_JOIN_SHARE:
        return _aggregated_join(rng, name, output, left, right, joined, lk, n, gated, False)
    sql = f"SELECT {', '.join(items)}\n{joined};"
    rel = Rel(name, tuple(cols), gated=gated)
    return ViewDraw(name, "join", (left.name, right.name), sql, output, rel)


#: The share of drawn joins written with a GROUP BY over them in the same SELECT.
AGGREGATED_JOIN_SHARE = 0.25


def _aggregated_join(rng: random.Random, name: str, output: bool, left: Rel, right: Rel,
                     joined: str, lk: str, n: int, gated: bool, nullable_key: bool) -> ViewDraw:
    """A GROUP BY over a join in one SELECT (S16, S18; ADR 0031), as Flink SQL writes it:
    the left key and one to three aggregates of either side's values, qualified as written
    (``SUM(r.v)``). Without a window it is updating, written as a changelog or an upsert
    (a changelog when the key may be NULL: a FULL join's padded right rows)."""
    vals = [f"{side}.{c.name}" for side, rel in (("l", left), ("r", right)) for c in rel.of("val")]
    calls = [c for c in AGG_CALLS if vals or "{v}" not in c]
    items = [f"l.{lk} AS k{n}"]
    cols = [Col(f"k{n}", "key")]
    for j, call in enumerate(rng.sample(calls, rng.randint(1, min(3, len(calls))))):
        items.append(f"{call.format(v=rng.choice(vals) if vals else '')} AS a{n}_{j}")
        cols.append(Col(f"a{n}_{j}", "val"))
    sql = f"SELECT {', '.join(items)}\n{joined}\nGROUP BY l.{lk};"
    fmt = "changelog" if nullable_key else rng.choice(("changelog", "upsert"))
    return ViewDraw(name, "join_aggregate", (left.name, right.name), sql, output,
                    Rel(name, tuple(cols), updating=True, gated=gated), fmt)


def _union(rng: random.Random, name: str, output: bool, one: Rel, two: Rel, n: int) -> ViewDraw:
    keyed = bool(one.of("key") and two.of("key")) and rng.random() < 0.8
    branches = []
    start = False
    for rel in (one, two):
        time = rng.choice(rel.of("time"))
        start = start or time.start
        items = [f"{time.name} AS t{n}"]
        if keyed:
            items.append(f"{rng.choice(rel.of('key')).name} AS k{n}")
        items.append(f"{rng.choice(rel.of('val')).name} AS v{n}")
        where = _where(rng, rel)
        branches.append(f"SELECT {', '.join(items)} FROM {rel.name}"
                        + (f" WHERE {where}" if where else ""))
    cols = [Col(f"t{n}", "time", start), *([Col(f"k{n}", "key")] if keyed else []),
            Col(f"v{n}", "val")]
    sql = "\nUNION ALL\n".join(branches) + ";"
    rel = Rel(name, tuple(cols), gated=one.gated or two.gated)
    return ViewDraw(name, "union", (one.name, two.name), sql, output, rel)


#: How often a view of a stack that holds an updating view is a UNION ALL over one.
UPDATING_UNION_SHARE = 0.4


def _updating_union(rng: random.Random, name: str, output: bool, pool: list[Rel],
                    n: int) -> ViewDraw | None:
    """At times (only once the stack holds an updating view) a UNION ALL with an updating
    branch (S17, S18): that view and another relation with a value column (a table, an
    insert-only view or an updating one; itself when there is none), each projected to a
    value, a key when both have one and a time column when both have one; the union passes
    every branch's changes on, so it is updating and written as a ``changelog``."""
    updating = [r for r in pool if r.updating and r.of("val")]
    if not updating or rng.random() >= UPDATING_UNION_SHARE:
        return None
    one = rng.choice(updating)
    others = [r for r in pool if r.of("val") and r is not one]
    two = rng.choice(others) if others else one
    pair = [one, two] if rng.random() < 0.5 else [two, one]
    timed = all(r.of("time") for r in pair) and rng.random() < 0.5
    keyed = all(r.of("key") for r in pair) and rng.random() < 0.8
    branches = []
    start = False
    for rel in pair:
        items = []
        if timed:
            time = rng.choice(rel.of("time"))
            start = start or time.start
            items.append(f"{time.name} AS t{n}")
        if keyed:
            items.append(f"{rng.choice(rel.of('key')).name} AS k{n}")
        items.append(f"{rng.choice(rel.of('val')).name} AS v{n}")
        where = _where(rng, rel)
        branches.append(f"SELECT {', '.join(items)} FROM {rel.name}"
                        + (f" WHERE {where}" if where else ""))
    cols = [*([Col(f"t{n}", "time", start)] if timed else []),
            *([Col(f"k{n}", "key")] if keyed else []), Col(f"v{n}", "val")]
    sql = "\nUNION ALL\n".join(branches) + ";"
    rel = Rel(name, tuple(cols), updating=True, gated=one.gated or two.gated, united=True,
              paired=one.paired or two.paired)
    return ViewDraw(name, "union_updating", tuple(r.name for r in pair), sql, output, rel,
                    "changelog")


#: How often a view of a stack that holds a keyed updating view (and draws no UNION ALL
#: over one) is a regular join of one.
UPDATING_JOIN_SHARE = 0.5


def _updating_join(rng: random.Random, name: str, output: bool, pool: list[Rel],
                   n: int) -> ViewDraw | None:
    """At times (only once the stack holds an updating view with a key) a join without a
    time bound of it (S16, S18) with another relation with a key (a table, an insert-only
    view or an updating one; itself when there is none), on the keys, either side first:
    the key and a value of each side. INNER half the time, else LEFT or FULL (a row without
    a match written padded at once, retracted when its first match comes). The join passes
    each pair's change on with the product of its rows' weights, so it is updating and
    written as a ``changelog``; it has no time attribute."""
    updating = [r for r in pool if r.updating and r.of("key")]
    if not updating or rng.random() >= UPDATING_JOIN_SHARE:
        return None
    one = rng.choice(updating)
    others = [r for r in pool if r.of("key") and r is not one]
    two = rng.choice(others) if others else one
    left, right = (one, two) if rng.random() < 0.5 else (two, one)
    kind = rng.choice(("", "", "LEFT ", "FULL "))
    lk, rk = rng.choice(left.of("key")).name, rng.choice(right.of("key")).name
    items = [f"l.{lk} AS k{n}"]
    cols = [Col(f"k{n}", "key")]
    for side, rel in (("l", left), ("r", right)):
        if rel.of("val"):
            items.append(f"{side}.{rng.choice(rel.of('val')).name} AS {side}v{n}")
            cols.append(Col(f"{side}v{n}", "val"))
    joined = f"FROM {left.name} AS l {kind}JOIN {right.name} AS r ON l.{lk} = r.{rk}"
    if rng.random() < AGGREGATED_JOIN_SHARE:
        return _aggregated_join(rng, name, output, left, right, joined, lk, n,
                                one.gated or two.gated, kind == "FULL ")
    sql = f"SELECT {', '.join(items)}\n{joined};"
    rel = Rel(name, tuple(cols), updating=True, gated=one.gated or two.gated, united=True,
              paired=True)
    return ViewDraw(name, "join_updating", (left.name, right.name), sql, output, rel,
                    "changelog")


def _union_or_reader(rng: random.Random, name: str, output: bool, pool: list[Rel],
                     n: int) -> ViewDraw | None:
    """Most times after a UNION ALL with an updating branch or a regular join of an
    updating view, a reader of it: a GROUP BY taking its retractions back, or a filter
    passing them on; else at times such a union (:func:`_updating_union`) or join
    (:func:`_updating_join`); None: another form."""
    united = [r for r in pool if r.united]
    if united and rng.random() < 0.8:
        reader = _grouped if rng.random() < 0.8 else _filter
        return reader(rng, name, output, rng.choice(united), n)
    return (_updating_union(rng, name, output, pool, n)
            or _updating_join(rng, name, output, pool, n))


# --- OVER aggregates, window Top-N, SESSION windows -----------------------------------------

#: The shares of the aggregate and GROUP BY draws (of views that read no updating view)
#: drawn instead as an OVER aggregate, a window Top-N and a SESSION window aggregate: the
#: forms Flink SQL users stack over windows (docs/language.md), each over a relation whose
#: rows are insert-only. Each holds state as those aggregates do, so a reader of one reads
#: it through a stage boundary, in a query of its own, as it would read an aggregate: the
#: program keeps about as many queries (the CI case's time is its queries' starts).
OVER_SHARE = 0.1
TOP_N_SHARE = 0.1
SESSION_SHARE = 0.1
OVER_CALLS = ("COUNT(*)", "SUM({v})", "MIN({v})", "MAX({v})", "COUNT({v})")


def _passed_on(src: Rel, kept: set[str]) -> list[Col]:
    """``src``'s columns as a view that ranks or frames its rows passes them on: the time
    attributes named in ``kept`` stay ones, every other is a plain TIMESTAMP (its rows are
    written after their step, below the waterline: docs/language.md)."""
    return [c if c.kind != "time" or c.name in kept else Col(c.name, "stamp") for c in src.cols]


def _window_tvf(rng: random.Random, src: str, time: str) -> str:
    """A TUMBLE of 1-6 s or a HOP of slide 1-3 s and 2-3 slides on ``time``."""
    if rng.random() < 0.6:
        return f"TUMBLE(TABLE {src}, DESCRIPTOR({time}), INTERVAL '{rng.randint(1, 6)}' SECOND)"
    slide = rng.randint(1, 3)
    return (f"HOP(TABLE {src}, DESCRIPTOR({time}), INTERVAL '{slide}' SECOND, "
            f"INTERVAL '{slide * rng.randint(2, 3)}' SECOND)")


def _over(rng: random.Random, name: str, output: bool, src: Rel, n: int) -> ViewDraw:
    """An OVER aggregate (docs/language.md, "OVER aggregates"; semantics.md): every column
    of an insert-only relation and 1-3 of COUNT(*), COUNT/SUM/MIN/MAX of a BIGINT over
    each row's frame, PARTITION BY a key, a BIGINT or nothing, ORDER BY a time attribute
    that is no window start; a frame of RANGE 0-6 s (with or without BETWEEN), RANGE
    UNBOUNDED or none, or, over a table or filters of one (whose rows of equal time both
    sides take in one arrival order), ROWS 0-3 or UNBOUNDED; the window inline or named
    in a WINDOW clause; a drawn WHERE. Each row is written once, final, when the
    waterline passes it: insert-only and gated; the ORDER BY column stays a time
    attribute, the others do not."""
    time = rng.choice([c for c in src.of("time") if not c.start]).name
    keys, vals = src.of("key"), src.of("val")
    roll = rng.random()
    if keys and roll < 0.6:
        partition = f"PARTITION BY {rng.choice(keys).name} "
    elif vals and roll < 0.75:
        partition = f"PARTITION BY {rng.choice(vals).name} "
    else:
        partition = ""
    roll = rng.random()
    if src.arrival and roll < 0.3:
        preceding = rng.choice((str(rng.randint(0, 3)), "UNBOUNDED"))
        frame = f" ROWS BETWEEN {preceding} PRECEDING AND CURRENT ROW"
    elif roll < 0.75:
        amount = rng.randint(0, 6)
        frame = rng.choice((f" RANGE BETWEEN INTERVAL '{amount}' SECOND PRECEDING AND "
                            "CURRENT ROW", f" RANGE INTERVAL '{amount}' SECOND PRECEDING"))
    elif roll < 0.9:
        frame = " RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
    else:
        frame = ""  # RANGE UNBOUNDED, SQL's default
    window = f"{partition}ORDER BY {time}{frame}"
    named = rng.random() < 0.3
    items = [c.name for c in src.cols]
    cols = _passed_on(src, {time})
    calls = [c for c in OVER_CALLS if vals or "{v}" not in c]
    for j, call in enumerate(rng.sample(calls, rng.randint(1, min(3, len(calls))))):
        alias = f"o{n}_{j}"
        over = f"OVER w{n}" if named else f"OVER ({window})"
        items.append(f"{call.format(v=rng.choice(vals).name if vals else '')} {over} AS {alias}")
        cols.append(Col(alias, "val"))
    where = _where(rng, src)
    sql = (f"SELECT {', '.join(items)}\nFROM {src.name}"
           + (f"\nWHERE {where}" if where else "")
           + (f"\nWINDOW w{n} AS ({window})" if named else "") + ";")
    return ViewDraw(name, "over", (src.name,), sql, output,
                    Rel(name, tuple(cols), gated=True))


def _ranking(rng: random.Random, partition: list[str], order: list[str], n: int) -> tuple[str, str]:
    """A ROW_NUMBER() (2 in 3) or RANK() OVER the window partition, each ORDER BY key
    DESC (2 in 3) or ASC, named ``r<n>``; and the limit on it: ``r<n> <= N``, ``r<n> < N +
    1`` or ``r<n> = 1``, N from 1 to 3."""
    function = rng.choice(("ROW_NUMBER", "ROW_NUMBER", "RANK"))
    keys = ", ".join(f"{c} {rng.choice(('DESC', 'DESC', 'ASC'))}" for c in order)
    ranked = f"{function}() OVER (PARTITION BY {', '.join(partition)} ORDER BY {keys}) AS r{n}"
    limit = rng.randint(1, 3)
    return ranked, rng.choice((f"r{n} <= {limit}", f"r{n} < {limit + 1}", f"r{n} = 1"))


def _order(rng: random.Random, first: str, others: list[str]) -> list[str]:
    """``first``, and at times (2 in 5) a second ORDER BY key of ``others``."""
    rest = [c for c in others if c != first]
    return [first, rng.choice(rest)] if rest and rng.random() < 0.4 else [first]


def _top_n(rng: random.Random, name: str, output: bool, pool: list[Rel], n: int) -> ViewDraw | None:
    """A window Top-N (docs/language.md, "Window Top-N"): the best 1-3 rows of each window
    (and at times of each key), ranked in a subquery and limited in the view's WHERE, over
    an earlier view's windows (an EMIT AFTER WATERMARK or SESSION aggregate's final rows, a
    Top-N's: 1 in 3 when there is one), an EMIT AFTER WATERMARK aggregate written as a
    subquery (2 in 5 of the others) or a TUMBLE or HOP of an insert-only relation. Its
    rows are written once, final, when their window completes: insert-only and gated;
    the window's columns stay time attributes, other time columns do not.

    A filter of such rows passes their window end on (:attr:`Rel.window_end`), so a Top-N
    of a filter of an aggregate's final rows is drawn too."""
    windowed = [r for r in pool if r.window_end and r.of("val") and not r.updating]
    if windowed and rng.random() < 0.35:
        return _top_n_of_view(rng, name, output, rng.choice(windowed), n)
    src = _pick(rng, pool, lambda r: bool(r.of("time") and r.of("val")) and not r.updating)
    if src is None:
        return None
    if rng.random() < 0.4:
        return _top_n_of_aggregate(rng, name, output, src, n)
    return _top_n_of_rows(rng, name, output, src, n)


def _top_n_of_rows(rng: random.Random, name: str, output: bool, src: Rel, n: int) -> ViewDraw:
    """A Top-N of a window function's rows: the rows of a TUMBLE or HOP of ``src`` on one
    of its time attributes (a drawn WHERE), PARTITION BY the window and at times a key,
    ORDER BY a BIGINT and at times another column; every column of ``src`` and the window
    (``ws<n>``, ``we<n>``), the rank at times."""
    time = rng.choice(src.of("time")).name
    tvf = _window_tvf(rng, src.name, time)
    partition = ["window_start", "window_end"]
    keys = src.of("key")
    if keys and rng.random() < 0.5:
        partition.append(rng.choice(keys).name)
    order = _order(rng, rng.choice(src.of("val")).name,
                   [c.name for c in src.cols if c.kind in ("key", "val", "time")])
    ranked, limit = _ranking(rng, partition, order, n)
    columns = [c.name for c in src.cols]
    inner_where = _where(rng, src) if rng.random() < 0.5 else None
    shown = rng.random() < 0.4
    items = [f"window_start AS ws{n}", f"window_end AS we{n}", *columns,
             *([f"r{n}"] if shown else [])]
    cols = [Col(f"ws{n}", "time", start=True), Col(f"we{n}", "time"), *_passed_on(src, set()),
            *([Col(f"r{n}", "val")] if shown else [])]
    sql = (f"SELECT {', '.join(items)}\nFROM (\n"
           f"  SELECT window_start, window_end, {', '.join(columns)},\n    {ranked}\n"
           f"  FROM TABLE({tvf})"
           + (f"\n  WHERE {inner_where}" if inner_where else "")
           + f")\nWHERE {limit};")
    return ViewDraw(name, "top_n", (src.name,), sql, output,
                    Rel(name, tuple(cols), gated=True, window_end=f"we{n}"))


def _top_n_of_aggregate(rng: random.Random, name: str, output: bool, src: Rel,
                        n: int) -> ViewDraw:
    """A Top-N of an EMIT AFTER WATERMARK aggregate written as its subquery (its windows'
    final rows, S18): a TUMBLE or HOP of ``src`` grouped by the window and a key (7 in 10)
    and at times a BIGINT too, 1-2 of COUNT(*), COUNT/SUM/MIN/MAX of a BIGINT, a drawn
    WHERE; ranked by an aggregate, per window (and per key when grouped by a BIGINT too,
    at times)."""
    time = rng.choice(src.of("time")).name
    tvf = _window_tvf(rng, src.name, time)
    keys, vals = src.of("key"), src.of("val")
    group: list[str] = []
    if keys and rng.random() < 0.7:
        group.append(rng.choice(keys).name)
        if rng.random() < 0.3:
            group.append(rng.choice(vals).name)
    calls = [c for c in AGG_CALLS if c != "COUNT({v})"]
    aggregates = []
    for j, call in enumerate(rng.sample(calls, rng.randint(1, 2))):
        aggregates.append((f"{call.format(v=rng.choice(vals).name)} AS a{n}_{j}", f"a{n}_{j}"))
    partition = ["window_start", "window_end"]
    if len(group) == 2 and rng.random() < 0.5:
        partition.append(group[0])
    names = [a for _, a in aggregates]
    order = _order(rng, rng.choice(names), names + group)
    ranked, limit = _ranking(rng, partition, order, n)
    where = _where(rng, src)
    columns = [*group, *names]
    shown = rng.random() < 0.4
    sql = (f"SELECT ws{n}, we{n}, {', '.join(columns)}" + (f", r{n}" if shown else "")
           + "\nFROM (\n"
           f"  SELECT window_start AS ws{n}, window_end AS we{n}, {', '.join(columns)},\n"
           f"    {ranked}\n"
           f"  FROM (SELECT window_start, window_end, "
           f"{', '.join([*group, *(a for a, _ in aggregates)])}\n"
           f"        FROM TABLE({tvf})\n"
           + (f"        WHERE {where}\n" if where else "")
           + f"        GROUP BY {', '.join(['window_start', 'window_end', *group])}))\n"
           f"WHERE {limit};")
    by_name = {c.name: c for c in src.cols}
    cols = [Col(f"ws{n}", "time", start=True), Col(f"we{n}", "time"),
            *(by_name[g] for g in group), *(Col(a, "val") for a in names),
            *([Col(f"r{n}", "val")] if shown else [])]
    return ViewDraw(name, "top_n", (src.name,), sql, output,
                    Rel(name, tuple(cols), gated=True, window_end=f"we{n}"))


def _top_n_of_view(rng: random.Random, name: str, output: bool, src: Rel, n: int) -> ViewDraw:
    """A Top-N of an earlier view's windows (an EMIT AFTER WATERMARK or SESSION
    aggregate's final rows, a Top-N's), PARTITION BY its window end (and its window start
    at times, and a key at times), ORDER BY a BIGINT and at times another column; its
    columns passed on, the rank at times, a drawn WHERE before ranking."""
    end = src.window_end
    assert end is not None
    starts = [c.name for c in src.of("time") if c.start]
    partition = [*(starts[:1] if starts and rng.random() < 0.5 else []), end]
    keys = src.of("key")
    if keys and rng.random() < 0.4:
        partition.append(rng.choice(keys).name)
    order = _order(rng, rng.choice(src.of("val")).name,
                   [c.name for c in src.cols if c.kind in ("key", "val")])
    ranked, limit = _ranking(rng, partition, order, n)
    columns = [c.name for c in src.cols]
    where = _where(rng, src) if rng.random() < 0.4 else None
    shown = rng.random() < 0.4
    sql = (f"SELECT {', '.join(columns)}" + (f", r{n}" if shown else "")
           + f"\nFROM (SELECT {', '.join(columns)},\n    {ranked}\n  FROM {src.name}"
           + (f"\n  WHERE {where}" if where else "") + f")\nWHERE {limit};")
    cols = [*_passed_on(src, {end, *starts}), *([Col(f"r{n}", "val")] if shown else [])]
    return ViewDraw(name, "top_n", (src.name,), sql, output,
                    Rel(name, tuple(cols), gated=True, window_end=end))


def _session(rng: random.Random, name: str, output: bool, src: Rel, n: int) -> ViewDraw:
    """A SESSION window aggregate (docs/language.md, L4; semantics.md "Windows") over a
    table, a filter or a UNION ALL (insert-only): sessions of a gap of 1-4 s on one of its
    time attributes, per a key (4 in 5, spelled in PARTITION BY 3 in 4) or over all rows;
    GROUP BY the window and that key, 1-3 of COUNT(*), COUNT/SUM/MIN/MAX of a BIGINT, a
    drawn WHERE (a row it drops neither extends nor links a session); EMIT AFTER
    WATERMARK. ``window_end`` (``we<n>``) is a time attribute, ``window_start``
    (``ws<n>``, kept at times) is not (a session open long ago may still close)."""
    time = rng.choice(src.of("time")).name
    keys = src.of("key")
    key = rng.choice(keys).name if keys and rng.random() < 0.8 else None
    spelled = f" PARTITION BY {key}" if key and rng.random() < 0.75 else ""
    tvf = (f"SESSION(TABLE {src.name}{spelled}, DESCRIPTOR({time}), "
           f"INTERVAL '{rng.randint(1, 4)}' SECOND)")
    items = [f"window_end AS we{n}"]
    cols = [Col(f"we{n}", "time")]
    if rng.random() < 0.6:
        items.insert(0, f"window_start AS ws{n}")
        cols.insert(0, Col(f"ws{n}", "stamp"))
    group = ["window_start", "window_end"]
    if key:
        items.append(key)
        group.append(key)
        cols.append(Col(key, "key"))
    sql = _final_windows_sql(rng, src, n, items, cols, group, tvf)
    return ViewDraw(name, "session", (src.name,), sql, output,
                    Rel(name, tuple(cols), gated=True, window_end=f"we{n}"))


def _stacked(rng: random.Random, name: str, output: bool, pool: list[Rel],
             n: int) -> ViewDraw | None:
    """In place of an aggregate or a GROUP BY, at times (:data:`OVER_SHARE`,
    :data:`TOP_N_SHARE`, :data:`SESSION_SHARE`) an OVER aggregate, a window Top-N or a
    SESSION aggregate over an insert-only relation that fits; None: the form drawn."""
    roll = rng.random()
    if roll < OVER_SHARE:
        src = _pick(rng, pool, lambda r: not r.updating
                    and any(not c.start for c in r.of("time")))
        return _over(rng, name, output, src, n) if src else None
    roll -= OVER_SHARE
    if roll < TOP_N_SHARE:
        return _top_n(rng, name, output, pool, n)
    roll -= TOP_N_SHARE
    if roll < SESSION_SHARE:
        src = _pick(rng, pool, lambda r: bool(r.of("time")) and not r.updating
                    and (r.is_table or r.form in ("filter", "union")))
        return _session(rng, name, output, src, n) if src else None
    return None


def _pick(rng: random.Random, pool: list[Rel], ok: Any, prefer_view: bool = True) -> Rel | None:
    fits = [r for r in pool if ok(r)]
    if not fits:
        return None
    views = [r for r in fits if not r.is_table]
    if views and prefer_view and rng.random() < 0.75:
        return rng.choice(views)
    return rng.choice(fits)


def draw_stack(rng: random.Random, stack: int, tables: list[Rel]) -> Stack:
    """Up to four views, each of a drawn form over earlier views of the stack or tables."""
    views: list[ViewDraw] = []
    pool = list(tables)
    count = rng.choice((2, 3, 3, 4, 4))
    for j in range(count):
        name = f"s{stack}v{j}"
        n = stack * 10 + j
        output = j == count - 1 or rng.random() < 0.5
        updating = [r for r in pool if r.updating]
        for _ in range(20):
            drawn = _union_or_reader(rng, name, output, pool, n)
            if drawn is not None:
                break
            form = rng.choice(FORMS)
            if updating and rng.random() < 0.6:
                # A reader of an updating view: a filter, or an aggregate taking its
                # retractions back, windowed at times on one of its time attributes (the
                # forms the compiler lets read one, S18).
                timed = [r for r in updating if r.of("time")]
                src = rng.choice(timed if timed and rng.random() < 0.7 else updating)
                readers = [_filter, _grouped, *([_aggregate] if src.of("time") else [])]
                drawn = rng.choice(readers)(rng, name, output, src, n)
            elif form in ("aggregate", "group") and (
                    stacked := _stacked(rng, name, output, pool, n)) is not None:
                drawn = stacked
            elif form == "filter":
                src = _pick(rng, pool, lambda r: bool(r.cols))
                drawn = _filter(rng, name, output, src, n) if src else None
            elif form == "aggregate":
                src = _pick(rng, pool, lambda r: bool(r.of("time")))
                drawn = _aggregate(rng, name, output, src, n) if src else None
            elif form == "group":
                src = _pick(rng, pool, lambda r: bool(r.of("key") or r.of("val")))
                drawn = _grouped(rng, name, output, src, n) if src else None
            elif form == "join":
                ok = (lambda r: bool(r.of("time") and r.of("key")) and not r.updating)  # noqa: E731
                left = _pick(rng, pool, ok)
                right = _pick(rng, pool, ok, prefer_view=False)
                if left and right and rng.random() < 0.5:
                    left, right = right, left
                drawn = _join(rng, name, output, left, right, n) if left and right else None
            else:
                ok = (lambda r: bool(r.of("time") and r.of("val")) and not r.updating)  # noqa: E731
                one = _pick(rng, pool, ok)
                two = _pick(rng, pool, ok, prefer_view=False)
                drawn = _union(rng, name, output, one, two, n) if one and two else None
            if drawn is not None:
                break
        assert drawn is not None
        drawn.rel = replace(drawn.rel, form=drawn.form)
        views.append(drawn)
        pool.append(drawn.rel)
    # A view no later view of its stack reads is an output (a LOCAL one would go unseen).
    for index, view in enumerate(views):
        if not any(view.name in later.sources for later in views[index + 1:]):
            view.output = True
    return Stack(views)


# --- keeping what runs --------------------------------------------------------------------------

_NAMES = re.compile(r"\b(s\d+v\d+|__in_\w+|__out_\w+|[a-z]+\d+(_\d+)?)\b")


def reason(message: str) -> str:
    """A refusal or compile error without its view and column names and numbers, so equal
    causes count together."""
    text = message.split("\n")[0]
    text = re.sub(r"^[^:]*:\d+:\d+:\s*", "", text)
    text = _NAMES.sub("<name>", text)
    return re.sub(r"\d+", "<n>", text)[:160]


def _check(lateness: dict[str, int], views: list[ViewDraw]) -> list[tuple[str, str]]:
    """Why the program of these views cannot run on Spark: per refusal the view it names
    (empty if none) and the reason; empty if it runs."""
    topics = {n: n for n in [*lateness, *(t + ".dlq" for t in lateness)]}
    text = program_text(lateness, views, topics)
    try:
        circuit = compile_text("composed.sql", text)
    except ProgramError as exc:
        return [("", "compile: " + reason(str(exc)))]
    try:
        composed = compose(circuit)
    except ProgramError as exc:  # a boundary's reader that does not compile
        return [("", "compose: " + reason(str(exc)))]
    found = []
    for diagnostic in composed.refused:
        named = re.match(r"view (\S+?):", diagnostic.message)
        view = named.group(1).removeprefix("__out_") if named else ""
        found.append((view, "refused: " + reason(diagnostic.message)))
    return found


# --- inputs -------------------------------------------------------------------------------------


def _rows(rng: random.Random, lateness: int, now: int, top: int, count: int,
          late: int) -> tuple[list[tuple[int, str, Any]], int, int]:
    """One table's rows of a step: out of order within LATENESS around ``now``, ``late`` of
    them below the waterline the step starts with (``top - lateness``), at times one row
    exactly on it."""
    now += rng.randint(2, 6)
    records: list[tuple[int, str, Any]] = []
    for i in range(count):
        if i < late and top > -(10**9):
            ts = top - lateness - rng.randint(1, 4)
        elif i == late and top > -(10**9) and rng.random() < 0.5:
            ts = top - lateness  # exactly the waterline the step starts with: on time (S5)
        else:
            ts = now - rng.randint(0, lateness)
        row = {"ts": BASE_MS + ts * S, "k": rng.choice(KEYS), "v": rng.randint(0, 9)}
        records.append((rng.randrange(2), "row", row))
    rng.shuffle(records)
    for _, _, row in records:
        top = max(top, (row["ts"] - BASE_MS) // S)
    return records, now, top


def generate(seed: int, compositions: int, steps: int = 2, rows_per_step: int = 8,
             tables: int = 2) -> Composed:
    """A program of stacks with ``compositions`` or more views over views (each stack kept
    only if the program with it compiles and composes), over ``tables`` tables, and its
    input: ``steps`` steps of rows, then a step with a punctuation :data:`FINAL_AHEAD_S`
    ahead (:meth:`Composed.flush_step` repeats it)."""
    rng = random.Random(seed)
    names = ["ta", "tb"][:tables]
    lateness = {t: rng.choice((1, 2, 3, 4)) for t in names}
    table_rels = [Rel(t, (Col("ts", "time"), Col("k", "key"), Col("v", "val")), True,
                      arrival=True) for t in names]
    kept: list[Stack] = []
    skipped: Counter[str] = Counter()
    drawn = 0
    while True:
        while sum(s.compositions for s in kept) < compositions:
            drawn += 1
            if drawn > compositions * 20:
                raise AssertionError(f"only {len(kept)} stacks run: {skipped}")
            stack = draw_stack(rng, drawn, table_rels)
            alone = _check(lateness, stack.views)
            if alone:
                skipped[alone[0][1]] += 1
                continue
            kept.append(stack)
        # Each stack runs alone; together they share the tables' queries, which may refuse
        # what one stack alone does not: the stacks of the views named are skipped.
        together = _check(lateness, [v for s in kept for v in s.views])
        if not together:
            break
        dropped = 0
        for view, why in together:
            holding = [s for s in kept if any(v.name == view for v in s.views)]
            if holding:
                skipped["beside the other stacks, " + why] += 1
                kept.remove(holding[0])
                dropped += 1
        if not dropped:
            raise AssertionError(f"the stacks run alone, not together: {together}")
    input_steps = draw_input(rng, lateness, steps, rows_per_step)
    composed_program = Composed(seed, lateness, kept, input_steps, drawn, skipped)
    topics = {n: n for n in composed_program.topic_names()}
    circuit = compile_text("composed.sql", composed_program.program(topics))
    composed_program.boundaries = compose(circuit).boundaries
    return composed_program


def draw_input(rng: random.Random, lateness: dict[str, int], steps: int,
               rows_per_step: int) -> list[Step]:
    """The input of the tables of ``lateness`` (seconds per table): ``steps`` steps of rows,
    then a step of late and on-time rows and a punctuation :data:`FINAL_AHEAD_S` ahead."""
    now = {t: rng.randint(5, 10) for t in lateness}
    top = {t: -(10**9) for t in lateness}
    input_steps: list[Step] = []
    for index in range(steps):
        step = Step()
        for t in lateness:
            late = rng.randint(1, 2) if index > 0 else 0
            count = rng.randint(rows_per_step // 2, rows_per_step)
            step.records[t], now[t], top[t] = _rows(rng, lateness[t], now[t], top[t], count, late)
        input_steps.append(step)
    bound = BASE_MS + (max(now.values()) + FINAL_AHEAD_S) * S
    final = Step()
    for t in lateness:
        # Late rows (dead letters of their table), at times one exactly on the waterline
        # the step starts with (on time, S5), rows on time (which change groups that
        # changed before: retractions), then the punctuation.
        count = rng.randint(1, 2)
        late, _, _ = _rows(rng, lateness[t], now[t], top[t], count + rng.randint(2, 4), count)
        final.records[t] = [*late, (0, "punctuation", bound)]
    input_steps.append(final)
    return input_steps


def _final_windows_sql(rng: random.Random, src: Rel, n: int, items: list[str],
                       cols: list[Col], group: list[str], tvf: str) -> str:
    """The SELECT of an EMIT AFTER WATERMARK aggregate of ``tvf``'s windows: ``items`` and
    ``group`` so far, then 1-3 drawn aggregate calls (added to ``items`` and ``cols``) and a
    drawn WHERE."""
    vals = src.of("val")
    calls = [c for c in AGG_CALLS if vals or "{v}" not in c]
    for j, call in enumerate(rng.sample(calls, rng.randint(1, min(3, len(calls))))):
        alias = f"a{n}_{j}"
        items.append(f"{call.format(v=rng.choice(vals).name if vals else '')} AS {alias}")
        cols.append(Col(alias, "val"))
    where = _where(rng, src)
    return (f"SELECT {', '.join(items)}\nFROM TABLE({tvf})\n"
            + (f"WHERE {where}\n" if where else "")
            + f"GROUP BY {', '.join(group)}\nEMIT AFTER WATERMARK;")
