"""Generated programs and steps for the Spark-vs-reference differential tests.

One :class:`Scenario` is a program of two tables and many generated aggregate views (the
*cases*), plus the steps fed to both runtimes. Everything derives from one integer seed through
:class:`random.Random`, so a failure is reproduced from the seed printed with it.

What the generator aims at (SPEC S3-S13):

- out-of-order rows, and rows below the waterline (late, S5), including rows *equal* to the
  waterline (on time by S5, the boundary a runtime gets wrong first);
- HOP windows of 1-4 slides (the compiler requires whole slides), TUMBLE windows with an
  offset (S9);
- NULLs in every nullable column (COUNT(x), SUM, MIN/MAX, ARG_MAX/ARG_MIN skip them);
- a few keys and many keys (``u`` has 40 values);
- WHERE before and HAVING after the aggregate, every EMIT form the Spark runtime runs and every
  format the compiler accepts for it (L5, L6);
- punctuations (S4) and malformed records (S7) between the rows.

DOUBLE values are multiples of 0.25 so SUM is exact in binary; AVG is compared with a relative
tolerance.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

BASE_MS = 1_700_000_000_000
S = 1000

#: The aggregate calls a case draws from (SPEC L3), as SQL over the tables' columns.
AGGREGATES = (
    "COUNT(*)",
    "COUNT(x)",
    "COUNT(DISTINCT k)",
    "COUNT(DISTINCT x)",
    "SUM(x)",
    "SUM(d)",
    "MIN(x)",
    "MAX(x)",
    "MIN(k)",
    "MAX(d)",
    "MAX(ts)",
    "AVG(x)",
    "AVG(d)",
    "ARG_MAX(k, x)",
    "ARG_MIN(ts, d)",
    "ARG_MAX(u, d)",
    "ARG_MIN(x, u)",
)
#: The calls Spark's native aggregation computes exactly
#: (app/runtime/operators/native_aggregate.py): AFTER WATERMARK views drawing only from these run
#: natively, the rest on the shared operator.
NATIVE_AGGREGATES = tuple(
    a for a in AGGREGATES if "DISTINCT" not in a and "d)" not in a and "(d" not in a
)
WHERES = (None, None, "x > 0", "x IS NOT NULL", "k <> 'b'", "d < 2.5 OR x IS NULL")
HAVINGS = (None, None, None, "COUNT(*) >= 2", "SUM(x) > 3", "MAX(x) IS NOT NULL")
WINDOWED_KEYS = (
    ("window_start", "window_end", "k"),
    ("window_end", "k"),
    ("window_start", "u"),
    ("window_end",),
    ("window_start", "window_end", "k", "u"),
)
UNWINDOWED_KEYS = (("k",), ("u",))
#: WHERE clauses of the stateless views a source task computes over Arrow (ADR 0007):
#: comparisons of strings, integers and timestamps, three-valued AND/OR/NOT, IS [NOT] NULL.
SLICE_WHERES = (
    "x > 0",
    "x IS NOT NULL",
    "k <> 'b'",
    "(x > 2 AND k = 'a') OR u <= 10",
    "NOT (x < 3)",
    "k = 'a' OR k IS NULL",
    "u >= 20 AND x <> 4",
    "-2 < x AND NOT (k IS NULL OR k > 'b')",
    "ts >= TIMESTAMP '2023-11-14 22:13:30'",
)
#: (EMIT clause, formats the compiler accepts for it: L5/L6)
WINDOWED_EMITS = (
    ("", ("upsert", "changelog")),
    ("EMIT STREAM", ("changelog", "upsert")),
    ("EMIT AFTER WATERMARK", ("upsert", "changelog", "append")),
    ("EMIT STREAM AFTER WATERMARK", ("changelog", "upsert")),
)
UNWINDOWED_EMITS = (("", ("upsert", "changelog")), ("EMIT STREAM", ("changelog",)))
#: (windowed, EMIT clause with ``{d}`` for the delay in seconds, format): every AFTER DELAY
#: form with every format the compiler accepts for it (L5, L6); AFTER WATERMARK AND AFTER DELAY
#: needs a window, so the unwindowed views take the two plain delay forms.
DELAY_FORMS = (
    *(
        (True, emit, fmt)
        for emit, formats in (
            ("EMIT AFTER DELAY INTERVAL '{d}' SECOND", ("upsert", "changelog")),
            ("EMIT STREAM AFTER DELAY INTERVAL '{d}' SECOND", ("changelog", "upsert")),
            (
                "EMIT AFTER WATERMARK AND AFTER DELAY INTERVAL '{d}' SECOND",
                ("upsert", "changelog", "append"),
            ),
            (
                "EMIT STREAM AFTER WATERMARK AND AFTER DELAY INTERVAL '{d}' SECOND",
                ("changelog", "upsert"),
            ),
        )
        for fmt in formats
    ),
    *(
        (False, emit, fmt)
        for emit in (
            "EMIT AFTER DELAY INTERVAL '{d}' SECOND",
            "EMIT STREAM AFTER DELAY INTERVAL '{d}' SECOND",
        )
        for fmt in ("upsert", "changelog")
    ),
)


@dataclass(frozen=True)
class Case:
    """One generated view: its name, table and CREATE VIEW text (topic left as ``{topic}``)."""

    name: str
    table: str
    sql: str
    emit: str
    fmt: str


@dataclass
class Step:
    """One step's input per table, in (partition, offset) order per partition.

    Each record is ``(partition, kind, payload)``: kind ``row`` (payload a row dict with
    TIMESTAMP as epoch ms), ``malformed`` (payload bytes) or ``punctuation`` (bound, epoch ms).
    """

    records: dict[str, list[tuple[int, str, Any]]] = field(default_factory=dict)


@dataclass
class Scenario:
    seed: int
    lateness_s: dict[str, int]
    cases: list[Case]
    steps: list[Step]
    stateless: dict[str, str]
    #: Each table declares ``PRIMARY KEY (u)`` (the versioned side of a temporal join).
    keyed: bool = False
    #: Tables that declare ``pt AS PROCTIME()`` (:func:`_proctime_views`).
    proctime: tuple[str, ...] = ()

    def program(self, topics: dict[str, str]) -> str:
        """The program text; ``topics`` maps table names, ``<table>.dlq`` and view names."""
        parts = []
        for table, lateness in self.lateness_s.items():
            parts.append(
                f"CREATE TABLE {table} (\n"
                f"    ts TIMESTAMP NOT NULL LATENESS INTERVAL '{lateness}' SECOND,\n"
                f"    k  VARCHAR,\n    u  BIGINT NOT NULL,\n    x  BIGINT,\n    d  DOUBLE"
                + (",\n    pt AS PROCTIME()" if table in self.proctime else "")
                + (",\n    PRIMARY KEY (u) NOT ENFORCED\n" if self.keyed else "\n")
                + f") WITH ('topic' = '{topics[table]}', "
                f"'dead_letter' = '{topics[table + '.dlq']}');"
            )
        for name, sql in self.stateless.items():
            parts.append(sql.format(topic=topics[name]))
        for case in self.cases:
            parts.append(case.sql.format(topic=topics[case.name]))
        return "\n\n".join(parts) + "\n"

    def describe(self) -> str:
        """Seed, program and steps, printed when a comparison fails."""
        lines = [f"seed={self.seed}", self.program({n: n for n in self._topic_names()})]
        for index, step in enumerate(self.steps, 1):
            lines.append(f"-- step {index}")
            for table, records in step.records.items():
                for partition, kind, payload in records:
                    shown = payload
                    if kind == "row":
                        shown = {**payload, "ts": (payload["ts"] - BASE_MS) / S}
                    elif kind == "punctuation":
                        shown = (payload - BASE_MS) / S
                    lines.append(f"   {table} p{partition} {kind} {shown}")
        return "\n".join(lines)

    def _topic_names(self) -> list[str]:
        return [
            *self.lateness_s,
            *(t + ".dlq" for t in self.lateness_s),
            *self.stateless,
            *(c.name for c in self.cases),
        ]

    def topic_names(self) -> list[str]:
        return self._topic_names()


def _case(
    rng: random.Random,
    name: str,
    table: str,
    native: bool = False,
    delay: tuple[bool, str, str] | None = None,
) -> Case:
    """One view. ``delay`` (windowed, EMIT clause, format) fixes whether it has a window, its
    EMIT and its format instead of drawing them; without it the draws are exactly the ones the
    seeds of docs/differential.md were run with (keep their order: a seed is a bug report)."""
    windowed = delay[0] if delay is not None else native or rng.random() < 0.85
    if windowed:
        if rng.random() < 0.5:
            size = rng.choice((3, 5, 10))
            offset = rng.choice((0, 0, 2))
            tvf = f"TUMBLE(TABLE {table}, DESCRIPTOR(ts), INTERVAL '{size}' SECOND"
            tvf += f", INTERVAL '{offset}' SECOND)" if offset else ")"
        else:
            slide = rng.choice((2, 3, 5))
            size = slide * rng.choice((1, 2, 3, 4))
            tvf = (
                f"HOP(TABLE {table}, DESCRIPTOR(ts), INTERVAL '{slide}' SECOND, "
                f"INTERVAL '{size}' SECOND)"
            )
        source = f"TABLE({tvf})"
        keys = rng.choice(WINDOWED_KEYS)
        if delay is None:
            emit, formats = rng.choice(WINDOWED_EMITS[2:] if native else WINDOWED_EMITS)
    else:
        source = table
        keys = rng.choice(UNWINDOWED_KEYS)
        if delay is None:
            emit, formats = rng.choice(UNWINDOWED_EMITS)
    if delay is None:
        fmt = rng.choice(formats)
    else:
        emit, fmt = delay[1], delay[2]
    calls = rng.sample(NATIVE_AGGREGATES if native else AGGREGATES, rng.randint(2, 6))
    select = [*keys, *(f"{call} AS a{i}" for i, call in enumerate(calls))]
    where = rng.choice(WHERES)
    having = rng.choice(HAVINGS)
    sql = (
        f"CREATE VIEW {name} WITH ('topic' = '{{topic}}', 'format' = '{fmt}') AS\n"
        f"SELECT {', '.join(select)}\nFROM {source}\n"
        + (f"WHERE {where}\n" if where else "")
        + f"GROUP BY {', '.join(keys)}"
        + (f"\nHAVING {having}" if having else "")
        + (f"\n{emit}" if emit else "")
        + ";"
    )
    return Case(name, table, sql, emit or "default", fmt)


def _slice_views(rng: random.Random, table: str) -> dict[str, str]:
    """Three output views of ``table`` with drawn WHERE clauses, the last over a local view
    that renames a column: filters and plain columns only (ADR 0007)."""
    views = {
        f"sa{i}": (
            f"CREATE VIEW sa{i} WITH ('topic' = '{{topic}}', 'format' = 'append') AS\n"
            f"SELECT ts, k, u, x FROM {table} WHERE {rng.choice(SLICE_WHERES)};"
        )
        for i in range(2)
    }
    views["sa_chain"] = (
        f"CREATE LOCAL VIEW la AS SELECT ts, k AS kk, x FROM {table} "
        f"WHERE {rng.choice(SLICE_WHERES)};\n"
        "CREATE VIEW sa_chain WITH ('topic' = '{topic}', 'format' = 'append') AS\n"
        "SELECT kk, ts FROM la WHERE kk <> 'c' OR kk IS NULL;"
    )
    return views


def _row(rng: random.Random, ts_s: int) -> dict[str, Any]:
    return {
        "ts": BASE_MS + ts_s * S,
        "k": rng.choice((None, "a", "b", "c", "a")),
        "u": rng.randrange(40),
        "x": None if rng.random() < 0.2 else rng.randint(-3, 9),
        "d": None if rng.random() < 0.2 else rng.randint(-8, 20) * 0.25,
    }


MALFORMED = b"\x02not avro\xff"

#: UNION ALL shapes (SPEC S17): each branch's SELECT list over a table (or its TUMBLE), the
#: union's column names, and a WHERE for a view that reads the union. ``{tvf}`` is the branch's
#: window; shapes without it read the table itself.
UNION_SHAPES: tuple[tuple[str, str, str, bool], ...] = (
    ("ts, k, u, x", "ts, k, u, x", "x > 2 OR k = 'a'", False),
    ("ts, u + x AS ux, d", "ts, ux, d", "ux IS NOT NULL", False),
    ("ts AS t2, k", "t2, k", "k IS NOT NULL", False),
    ("k, x", "k, x", "k <> 'b' OR k IS NULL", False),
    ("window_start, window_end, k, u", "window_start, window_end, k, u", "u < 20", True),
    ("window_end, x * 2 AS x2", "window_end, x2", "x2 > 0", True),
)


#: Equality keys of a generated join (``k`` is nullable: a NULL key matches nothing).
JOIN_KEYS = ("l.k = r.k", "l.u = r.u", "l.k = r.k AND l.u = r.u", "l.k = r.k")
#: Residual conditions of a generated join, and WHEREs over its rows.
JOIN_RESIDUALS = (None, None, "l.x < r.x", "l.x + r.x > 4")
JOIN_WHERES = (None, None, "r.x IS NOT NULL", "l.u < 30 OR r.k = 'a'")
#: A generated interval join's kind: INNER, or an OUTER one (run by Tidemark's own operator).
JOIN_KINDS = ("", "", "LEFT ", "RIGHT ", "FULL ")
#: Conditions of an OUTER interval join besides keys and bound: conjuncts of one side
#: (evaluated on each side's rows in Spark) and of both (on each pair, in the operator).
OUTER_RESIDUALS = (
    None,
    "r.x > 0",
    "l.k = 'a' AND r.d IS NOT NULL",
    "l.x < 3",
    "l.x < r.x",
    "l.x + r.x > 4 AND r.d IS NOT NULL",
)


def _join_views(rng: random.Random, count: int, tables: list[str]) -> dict[str, str]:
    """``count`` interval join output views of the two tables (SPEC S16), either side first:
    INNER or LEFT, RIGHT or FULL OUTER (whose unmatched rows wait for the other side's
    waterline), with a drawn residual (of an OUTER one, conjuncts of one or both sides), drawn
    keys, bound (seconds before and after) and WHERE;
    every other one read by an output view with a filter."""
    views: dict[str, str] = {}
    for i in range(count):
        left, right = tables if rng.random() < 0.5 else tables[::-1]
        before, after = rng.choice((0, 2, 5)), rng.choice((0, 3, 6))
        kind = rng.choice(JOIN_KINDS)
        residual = rng.choice(JOIN_RESIDUALS if not kind else OUTER_RESIDUALS)
        where = rng.choice(JOIN_WHERES)
        sql = (
            f"CREATE VIEW jn{i} WITH ('topic' = '{{topic}}', 'format' = 'append') AS\n"
            "SELECT l.ts, l.k, l.u, r.x AS rx, r.ts AS rts\n"
            f"FROM {left} AS l {kind}JOIN {right} AS r\n"
            f"  ON {rng.choice(JOIN_KEYS)}\n"
            f" AND r.ts BETWEEN l.ts - INTERVAL '{before}' SECOND"
            f" AND l.ts + INTERVAL '{after}' SECOND"
            + (f"\n AND {residual}" if residual else "")
            + (f"\nWHERE {where}" if where else "")
            + ";"
        )
        views[f"jn{i}"] = sql
        if i % 2 == 1:
            views[f"jr{i}"] = (
                f"CREATE VIEW jr{i} WITH ('topic' = '{{topic}}', 'format' = 'append') AS\n"
                f"SELECT rts, u, rx FROM jn{i} WHERE rx > 0 OR k = 'b';"
            )
    return views


def _temporal_join_views(rng: random.Random, count: int, tables: list[str]) -> dict[str, str]:
    """``count`` temporal joins of the two tables (SPEC S16, ``FOR SYSTEM_TIME AS OF``),
    either table the versioned one (both declare ``PRIMARY KEY (u)``): INNER or LEFT, with a
    drawn residual and WHERE; every other one read by an output view with a filter."""
    views: dict[str, str] = {}
    for i in range(count):
        left, right = tables if rng.random() < 0.5 else tables[::-1]
        kind = rng.choice(("", "LEFT "))
        residual = rng.choice((None, "l.k = r.k", *JOIN_RESIDUALS[2:]))
        where = rng.choice(JOIN_WHERES)
        views[f"jt{i}"] = (
            f"CREATE VIEW jt{i} WITH ('topic' = '{{topic}}', 'format' = 'append') AS\n"
            "SELECT l.ts, l.k, l.u, r.x AS rx, r.ts AS rts\n"
            f"FROM {left} AS l {kind}JOIN {right} FOR SYSTEM_TIME AS OF l.ts AS r\n"
            "  ON l.u = r.u"
            + (f" AND {residual}" if residual else "")
            + (f"\nWHERE {where}" if where else "")
            + ";"
        )
        if i % 2 == 1:
            views[f"jq{i}"] = (
                f"CREATE VIEW jq{i} WITH ('topic' = '{{topic}}', 'format' = 'append') AS\n"
                f"SELECT ts, u, rx FROM jt{i} WHERE rx > 0 OR rts IS NULL;"
            )
    return views


def _window_join_views(rng: random.Random, count: int, tables: list[str]) -> dict[str, str]:
    """``count`` window joins of the two tables (SPEC S16): each side windowed in a local view
    by the same TUMBLE or HOP (one side's WHERE and columns drawn), joined on
    ``window_start``, ``window_end`` and drawn keys, with a drawn residual; INNER, or LEFT,
    RIGHT or FULL OUTER (on Tidemark's join operator)."""
    views: dict[str, str] = {}
    for i in range(count):
        left, right = tables if rng.random() < 0.5 else tables[::-1]
        size = rng.choice((2, 3, 4))
        if rng.random() < 0.3:
            window = (
                f"HOP(TABLE {{t}}, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '{size}' SECOND)"
            )
        else:
            window = f"TUMBLE(TABLE {{t}}, DESCRIPTOR(ts), INTERVAL '{size}' SECOND)"
        where = rng.choice((None, *SLICE_WHERES))
        residual = rng.choice(JOIN_RESIDUALS)
        keys = rng.choice(JOIN_KEYS)
        kind = rng.choice(JOIN_KINDS)
        if kind:
            # Over the columns the right view keeps.
            residual = rng.choice((None, "r.x > 0", "l.k = 'a' AND r.u < 20", "l.x < r.x"))
        # The local views' SQL goes with their reader's (an entry is one output view).
        views[f"jw{i}"] = (
            f"CREATE LOCAL VIEW wl{i} AS SELECT * FROM TABLE({window.format(t=left)});\n"
            f"CREATE LOCAL VIEW wr{i} AS SELECT window_start, window_end, k, u, x "
            f"FROM TABLE({window.format(t=right)})" + (f" WHERE {where}" if where else "")
            + ";\n"
            f"CREATE VIEW jw{i} WITH ('topic' = '{{topic}}', 'format' = 'append') AS\n"
            "SELECT l.window_start, l.window_end, l.ts, l.k, r.x AS rx\n"
            f"FROM wl{i} AS l {kind}JOIN wr{i} AS r\n"
            "  ON l.window_start = r.window_start AND l.window_end = r.window_end"
            f" AND {keys}"
            + (f" AND {residual}" if residual else "")
            + ";"
        )
    return views


def _regular_join_views(rng: random.Random, count: int, tables: list[str]) -> dict[str, str]:
    """``count`` INNER joins of the two tables without a time bound (SPEC S16: every row is
    kept, an L7 warning), on ``u`` (and ``k``), either side first, with a drawn residual."""
    views: dict[str, str] = {}
    for i in range(count):
        left, right = tables if rng.random() < 0.5 else tables[::-1]
        keys = rng.choice(("l.u = r.u", "l.u = r.u AND l.k = r.k"))
        residual = rng.choice(JOIN_RESIDUALS)
        views[f"jg{i}"] = (
            f"CREATE VIEW jg{i} WITH ('topic' = '{{topic}}', 'format' = 'append') AS\n"
            "SELECT l.ts, l.u, r.k AS rk, r.x AS rx\n"
            f"FROM {left} AS l JOIN {right} AS r ON {keys}"
            + (f" AND {residual}" if residual else "")
            + ";"
        )
    return views


def _union_views(rng: random.Random, count: int, tables: list[str]) -> dict[str, str]:
    """``count`` UNION ALL output views of 2-3 branches over ``tables`` (the first over
    both), each branch with a drawn WHERE; every other one read by an output view with a
    filter, the union then local half the time (SPEC S17, S18)."""
    views: dict[str, str] = {}
    for i in range(count):
        select, names, reader_where, windowed = rng.choice(UNION_SHAPES)
        sources = list(tables) if i == 0 else [rng.choice(tables) for _ in range(2)]
        if rng.random() < 0.3:
            sources.append(rng.choice(tables))
        size = rng.choice((3, 5))
        branches = []
        for table in sources:
            source = (
                f"TABLE(TUMBLE(TABLE {table}, DESCRIPTOR(ts), INTERVAL '{size}' SECOND))"
                if windowed
                else table
            )
            where = rng.choice((None, *SLICE_WHERES))
            branches.append(
                f"SELECT {select} FROM {source}" + (f" WHERE {where}" if where else "")
            )
        body = "\nUNION ALL\n".join(branches) + ";"
        if i % 2 == 0:
            views[f"un{i}"] = (
                f"CREATE VIEW un{i} WITH ('topic' = '{{topic}}', 'format' = 'append') AS\n{body}"
            )
            continue
        local = rng.random() < 0.5
        head = f"CREATE LOCAL VIEW un{i} AS" if local else (
            f"CREATE VIEW un{i} WITH ('topic' = '{{topic}}', 'format' = 'append') AS"
        )
        reader = (
            f"CREATE VIEW ur{i} WITH ('topic' = '{{topic}}', 'format' = 'append') AS\n"
            f"SELECT {names} FROM un{i} WHERE {reader_where};"
        )
        if local:
            views[f"ur{i}"] = f"{head}\n{body}\n{reader}"
        else:
            # Both are output views; the union's own SQL goes with its reader's.
            views[f"un{i}"] = f"{head}\n{body}"
            views[f"ur{i}"] = reader
    return views


def _union_aggregate_views(rng: random.Random, count: int, tables: list[str]) -> dict[str, str]:
    """``count`` windowed EMIT AFTER WATERMARK aggregates over a local UNION ALL of both
    tables (SPEC S11, S17), the views Spark's own aggregation runs over the union: each
    branch with a drawn WHERE, the second one read through a local filter view half the
    time; TUMBLE (with an offset half the time) or HOP of 1-3 s slides on the union's
    ``ts``; COUNT, SUM, MIN and MAX calls drawn from the native ones (no ARG_MAX/ARG_MIN:
    their ties are broken by arrival, which is per table); keys drawn; every format."""
    views: dict[str, str] = {}
    calls = [c for c in NATIVE_AGGREGATES if not c.startswith("ARG")]
    for i in range(count):
        sql = []
        sources = list(tables)
        if rng.random() < 0.5:
            sql.append(
                f"CREATE LOCAL VIEW uf{i} AS\nSELECT ts, k, u, x FROM {tables[1]} "
                f"WHERE {rng.choice(SLICE_WHERES)};"
            )
            sources[1] = f"uf{i}"
        branches = []
        for source in sources:
            where = rng.choice((None, *SLICE_WHERES))
            branches.append(
                f"SELECT ts, k, u, x FROM {source}" + (f" WHERE {where}" if where else "")
            )
        sql.append(f"CREATE LOCAL VIEW ua{i} AS\n" + "\nUNION ALL\n".join(branches) + ";")
        slide = rng.randint(1, 3)
        tvf = rng.choice((
            f"TUMBLE(TABLE ua{i}, DESCRIPTOR(ts), INTERVAL '{slide * 2}' SECOND)",
            f"TUMBLE(TABLE ua{i}, DESCRIPTOR(ts), INTERVAL '{slide * 2}' SECOND, "
            f"INTERVAL '{slide}' SECOND)",
            f"HOP(TABLE ua{i}, DESCRIPTOR(ts), INTERVAL '{slide}' SECOND, "
            f"INTERVAL '{slide * 2}' SECOND)",
        ))
        keys = rng.choice((("window_start", "window_end", "k"), ("window_end",),
                           ("window_start", "window_end", "u")))
        picked = rng.sample(calls, rng.randint(1, 3))
        aggregates = ", ".join(f"{call} AS a{j}" for j, call in enumerate(picked))
        where = rng.choice((None, "x > 0", "k <> 'b'"))
        fmt = rng.choice(("append", "upsert", "changelog"))
        sql.append(
            f"CREATE VIEW ug{i} WITH ('topic' = '{{topic}}', 'format' = '{fmt}') AS\n"
            f"SELECT {', '.join(keys)}, {aggregates}\nFROM TABLE({tvf})\n"
            + (f"WHERE {where}\n" if where else "")
            + f"GROUP BY {', '.join(keys)}\nEMIT AFTER WATERMARK;"
        )
        views[f"ug{i}"] = "\n".join(sql)
    return views


#: A cascade's first level: (aggregate, its name) pairs it draws from (COUNT, SUM, MIN and
#: MAX, the aggregates whose final rows feed the next level natively), and the next levels'
#: aggregates of each (SPEC S18).
CASCADE_CALLS = (
    ("COUNT(*)", "n", ("SUM(n)", "MAX(n)")),
    ("COUNT(x)", "cx", ("SUM(cx)", "MIN(cx)")),
    ("SUM(x)", "sx", ("SUM(sx)", "MIN(sx)", "COUNT(sx)")),
    ("MIN(x)", "mnx", ("MIN(mnx)",)),
    ("MAX(x)", "mxx", ("MAX(mxx)", "COUNT(*)")),
    ("MAX(ts)", "mts", ("MAX(mts)", "MIN(mts)")),
)


def _cascade_level(
    name: str, head: str, source: str, time: str, tvf: str, keys: tuple[str, ...],
    calls: list[str], end: str, where: str | None, emit_end: bool
) -> str:
    """One level: a window on ``time`` of ``source``, grouped by its window and ``keys``."""
    window = "window_end AS " + end if emit_end else "window_start, window_end"
    return (
        f"{head} AS\nSELECT {window}, {', '.join((*keys, *calls))}\n"
        f"FROM TABLE({tvf.format(source=source, time=time)})\n"
        + (f"WHERE {where}\n" if where else "")
        + f"GROUP BY {', '.join(('window_start', 'window_end', *keys))}\n"
        f"EMIT AFTER WATERMARK;"
    )


#: Keys a generated SESSION aggregate forms its sessions per (its GROUP BY keys besides the
#: window's), and whether it spells them in PARTITION BY.
SESSION_KEYS = ((), ("k",), ("u",), ("k", "u"))


def _session_cases(rng: random.Random, count: int, tables: list[str]) -> list[Case]:
    """``count`` SESSION aggregates (SPEC L4, S9; Spark's own ``session_window``): a gap of
    1-6 seconds, sessions per drawn keys (with or without PARTITION BY), exactly computable
    aggregates, a drawn WHERE and HAVING, EMIT AFTER WATERMARK in every format."""
    cases = []
    for i in range(count):
        table = tables[i % 2]
        keys = rng.choice(SESSION_KEYS)
        gap = rng.randint(1, 6)
        partition = f" PARTITION BY ({', '.join(keys)})" if keys and rng.random() < 0.5 else ""
        window = rng.choice((("window_start", "window_end"), ("window_end",)))
        calls = rng.sample(NATIVE_AGGREGATES, rng.randint(2, 5))
        where, having = rng.choice(WHERES), rng.choice(HAVINGS)
        fmt = rng.choice(("append", "upsert", "changelog"))
        group = [*keys, *window]
        sql = (
            f"CREATE VIEW se{i} WITH ('topic' = '{{topic}}', 'format' = '{fmt}') AS\n"
            f"SELECT {', '.join([*group, *(f'{c} AS a{j}' for j, c in enumerate(calls))])}\n"
            f"FROM TABLE(SESSION(TABLE {table}{partition}, DESCRIPTOR(ts), "
            f"INTERVAL '{gap}' SECOND))\n"
            + (f"WHERE {where}\n" if where else "")
            + f"GROUP BY {', '.join(group)}"
            + (f"\nHAVING {having}" if having else "")
            + "\nEMIT AFTER WATERMARK;"
        )
        cases.append(Case(f"se{i}", table, sql, "EMIT AFTER WATERMARK", fmt))
    return cases


#: Keys of a generated CUMULATE aggregate besides its window's, and its window's keys (a
#: CUMULATE's windows of one start differ in their ends: window_end is always one).
CUMULATE_KEYS = ((), ("k",), ("u",), ("k", "u"))
CUMULATE_WINDOW_KEYS = (("window_start", "window_end"), ("window_end",))


def _cumulate_cases(rng: random.Random, count: int, tables: list[str]) -> list[Case]:
    """``count`` CUMULATE aggregates (SPEC L4, S9; the state operator): a step of 1-3 seconds,
    a max size of 1-4 steps, an offset or none, drawn keys besides ``window_end``, any
    aggregate, a drawn WHERE and HAVING; case ``i`` takes the EMIT form and format
    ``(i + r) % 9`` of :data:`WINDOWED_EMITS` (``r`` drawn), so 9 cases cover them all."""
    forms = [(emit, fmt) for emit, formats in WINDOWED_EMITS for fmt in formats]
    rotation = rng.randrange(len(forms))
    cases = []
    for i in range(count):
        table = tables[i % 2]
        step = rng.randint(1, 3)
        size = step * rng.choice((1, 2, 3, 4, 4))
        offset = rng.choice((0, 0, rng.randrange(size)))
        keys = [*rng.choice(CUMULATE_KEYS), *rng.choice(CUMULATE_WINDOW_KEYS)]
        calls = rng.sample(AGGREGATES, rng.randint(2, 5))
        where, having = rng.choice(WHERES), rng.choice(HAVINGS)
        emit, fmt = forms[(i + rotation) % len(forms)]
        tvf = (f"CUMULATE(TABLE {table}, DESCRIPTOR(ts), INTERVAL '{step}' SECOND, "
               f"INTERVAL '{size}' SECOND" + (f", INTERVAL '{offset}' SECOND)" if offset else ")"))
        sql = (
            f"CREATE VIEW cu{i} WITH ('topic' = '{{topic}}', 'format' = '{fmt}') AS\n"
            f"SELECT {', '.join([*keys, *(f'{c} AS a{j}' for j, c in enumerate(calls))])}\n"
            f"FROM TABLE({tvf})\n"
            + (f"WHERE {where}\n" if where else "")
            + f"GROUP BY {', '.join(keys)}"
            + (f"\nHAVING {having}" if having else "")
            + (f"\n{emit}" if emit else "")
            + ";"
        )
        cases.append(Case(f"cu{i}", table, sql, emit or "default", fmt))
    return cases


#: Derived time attributes of ``ts`` a generated view groups or windows by (SPEC S10,
#: docs/semantics.md): shifts of a few seconds, and CEIL/FLOOR to a minute of a shifted ts (the
#: tables' times are ``BASE_MS`` + 0-60 s, ``BASE_MS`` 20 s past a minute, so a shift of 15-35 s
#: crosses a minute within a run; ``INTERVAL '15' SECOND TO MINUTE`` would read as an interval
#: span, hence the parentheses).
DERIVED_KEYS = (
    "ts + INTERVAL '{a}' SECOND",
    "ts - INTERVAL '{a}' SECOND",
    "CEIL((ts + INTERVAL '{b}' SECOND) TO MINUTE)",
    "FLOOR((ts + INTERVAL '{b}' SECOND) TO MINUTE)",
    "DATE_TRUNC('MINUTE', ts - INTERVAL '{a}' SECOND + INTERVAL '{b}' SECOND)",
    "CEIL(ts TO SECOND) + INTERVAL '{a}' SECOND",
)


def _derived_cases(rng: random.Random, count: int, tables: list[str]) -> list[Case]:
    """``count`` aggregates by a derived time attribute (the state operator): even cases
    group by one (:data:`DERIVED_KEYS`) and a drawn key, complete once its waterline passes
    the group's value; odd cases read a local view computing one as ``t2`` and window on it
    (TUMBLE or HOP), complete once its waterline reaches the window's end. Case ``i`` takes
    the EMIT form and format ``(i + r) % 9`` of :data:`WINDOWED_EMITS` (``r`` drawn), any
    aggregate, a drawn WHERE and HAVING."""
    forms = [(emit, fmt) for emit, formats in WINDOWED_EMITS for fmt in formats]
    rotation = rng.randrange(len(forms))
    cases = []
    for i in range(count):
        table = tables[i % 2]
        derived = rng.choice(DERIVED_KEYS).format(a=rng.randint(1, 5), b=rng.choice((15, 25, 35)))
        others = list(rng.choice(((), ("k",), ("u",))))
        calls = rng.sample(AGGREGATES, rng.randint(2, 5))
        where, having = rng.choice(WHERES), rng.choice(HAVINGS)
        emit, fmt = forms[(i + rotation) % len(forms)]
        local = ""
        if i % 2 == 0:
            select = [f"{derived} AS tk", *others]
            group = [derived, *others]
            source = table
        else:
            # Without ts when no aggregate reads it: the watermarked column then rides along
            # hidden (app/runtime/operators/view_frame.py).
            columns = "k, u, x, d, ts" if any("ts" in c for c in calls) else "k, u, x, d"
            local = (f"CREATE LOCAL VIEW dt{i} AS\nSELECT {derived} AS t2, {columns} "
                     f"FROM {table};\n")
            size = rng.choice((2, 3, 5))
            tvf = rng.choice((
                f"TUMBLE(TABLE dt{i}, DESCRIPTOR(t2), INTERVAL '{size}' SECOND)",
                f"HOP(TABLE dt{i}, DESCRIPTOR(t2), INTERVAL '{size}' SECOND, "
                f"INTERVAL '{size * 2}' SECOND)",
            ))
            select = ["window_start", "window_end", *others]
            group = select
            source = f"TABLE({tvf})"
        sql = (
            local
            + f"CREATE VIEW dv{i} WITH ('topic' = '{{topic}}', 'format' = '{fmt}') AS\n"
            f"SELECT {', '.join([*select, *(f'{c} AS a{j}' for j, c in enumerate(calls))])}\n"
            f"FROM {source}\n"
            + (f"WHERE {where}\n" if where else "")
            + f"GROUP BY {', '.join(group)}"
            + (f"\nHAVING {having}" if having else "")
            + (f"\n{emit}" if emit else "")
            + ";"
        )
        cases.append(Case(f"dv{i}", table, sql, emit or "default", fmt))
    return cases


#: The table of the processing-time views (:func:`_proctime_views`): a query of its own, so
#: its views are compared with a reference fed that query's steps and batch times.
PROCTIME_TABLE = "ev_p"


def _proctime_views(rng: random.Random, count: int) -> tuple[dict[str, str], list[Case]]:
    """Processing time over :data:`PROCTIME_TABLE` (seed 004): two stateless views reading
    ``pt`` and NOW() (append, and changelog, whose ``ptime`` is the same batch time), and
    ``count`` aggregates windowed on ``pt`` (TUMBLE or HOP of 1-3 seconds, so windows close
    between steps by batch time alone), drawn keys, aggregates, WHERE and HAVING; case ``i``
    takes the EMIT form and format ``(i + r) % 9`` of :data:`WINDOWED_EMITS` (``r`` drawn)."""
    table = PROCTIME_TABLE
    stateless = {
        "pp_rows": (
            "CREATE VIEW pp_rows WITH ('topic' = '{topic}', 'format' = 'append') AS\n"
            f"SELECT ts, k, u, pt, NOW() AS seen FROM {table} WHERE x > 2;"
        ),
        "pp_log": (
            "CREATE VIEW pp_log WITH ('topic' = '{topic}', 'format' = 'changelog') AS\n"
            f"SELECT k, x, CURRENT_TIMESTAMP AS seen FROM {table} WHERE ts <= NOW();"
        ),
    }
    forms = [(emit, fmt) for emit, formats in WINDOWED_EMITS for fmt in formats]
    rotation = rng.randrange(len(forms))
    cases = []
    for i in range(count):
        if rng.random() < 0.5:
            tvf = f"TUMBLE(TABLE {table}, DESCRIPTOR(pt), INTERVAL '{rng.randint(1, 3)}' SECOND)"
        else:
            slide = rng.randint(1, 2)
            tvf = (f"HOP(TABLE {table}, DESCRIPTOR(pt), INTERVAL '{slide}' SECOND, "
                   f"INTERVAL '{slide * rng.choice((1, 2))}' SECOND)")
        keys = rng.choice(WINDOWED_KEYS)
        calls = rng.sample(AGGREGATES, rng.randint(2, 5))
        where, having = rng.choice(WHERES), rng.choice(HAVINGS)
        emit, fmt = forms[(i + rotation) % len(forms)]
        sql = (
            f"CREATE VIEW pp{i} WITH ('topic' = '{{topic}}', 'format' = '{fmt}') AS\n"
            f"SELECT {', '.join([*keys, *(f'{c} AS a{j}' for j, c in enumerate(calls))])}\n"
            f"FROM TABLE({tvf})\n"
            + (f"WHERE {where}\n" if where else "")
            + f"GROUP BY {', '.join(keys)}"
            + (f"\nHAVING {having}" if having else "")
            + (f"\n{emit}" if emit else "")
            + ";"
        )
        cases.append(Case(f"pp{i}", table, sql, emit or "default", fmt))
    return stateless, cases


def _table_step(
    rng: random.Random,
    lateness: int,
    now: int,
    top: int,
    rows_per_step: int,
    punctuations: bool,
) -> tuple[list[tuple[int, str, Any]], int, int]:
    """One table's records of one step, and its ``now`` and ``top`` after it (seconds)."""
    now += rng.randint(1, 9)
    records: list[tuple[int, str, Any]] = []
    for _ in range(rng.randint(rows_per_step // 2, rows_per_step)):
        roll = rng.random()
        if roll < 0.1 and top > -(10**9):
            # exactly the waterline the step starts with (on time, S5) or just below
            ts = top - lateness - rng.choice((0, 0, 1))
        elif roll < 0.25:
            ts = now - rng.randint(lateness + 1, lateness + 15)  # likely late
        else:
            ts = now + rng.randint(-4, 3)  # out of order around "now"
        records.append((rng.randrange(2), "row", _row(rng, ts)))
    if rng.random() < 0.3:
        records.insert(rng.randrange(len(records) + 1), (rng.randrange(2), "malformed", MALFORMED))
    if rng.random() < 0.3 and punctuations:
        bound = BASE_MS + (now + rng.randint(0, 6)) * S
        records.insert(rng.randrange(len(records) + 1), (rng.randrange(2), "punctuation", bound))
    for _, kind, payload in records:
        if kind == "row":
            top = max(top, (payload["ts"] - BASE_MS) // S)
        elif kind == "punctuation":
            top = max(top, (payload - BASE_MS) // S)
    return records, now, top


#: What a generated OVER view partitions by, and the aggregates it draws from (L3 without
#: DISTINCT and ARG_*: the OVER catalog).
OVER_PARTITIONS = ((), ("k",), ("u",), ("k", "u"), ("x IS NULL",))
OVER_AGGREGATES = (
    "COUNT(*)",
    "COUNT(x)",
    "SUM(x)",
    "SUM(d)",
    "MIN(x)",
    "MAX(d)",
    "MAX(ts)",
    "MIN(k)",
    "AVG(x)",
    "AVG(d)",
)


def _over_frame(rng: random.Random) -> str:
    """A frame an OVER view may have (docs/language.md): RANGE or ROWS, bounded or not, or
    none (RANGE UNBOUNDED, SQL's default)."""
    return rng.choice((
        f"RANGE BETWEEN INTERVAL '{rng.randint(0, 6)}' SECOND PRECEDING AND CURRENT ROW",
        f"RANGE BETWEEN INTERVAL '{rng.randint(1, 6)}' SECOND PRECEDING AND CURRENT ROW",
        f"ROWS BETWEEN {rng.randint(0, 4)} PRECEDING AND CURRENT ROW",
        "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
        "",
    ))


def _over_cases(rng: random.Random, count: int, tables: list[str]) -> list[Case]:
    """``count`` OVER views (docs/semantics.md; the OVER operator, ADR 0019): drawn PARTITION
    BY, frame and 2-4 aggregates, a drawn WHERE, the window written inline on each aggregate
    or named in a WINDOW clause; written as 'append' once the waterline passes each row."""
    cases = []
    for i in range(count):
        table = tables[i % 2]
        keys = rng.choice(OVER_PARTITIONS)
        frame = _over_frame(rng)
        window = " ".join(
            part for part in (f"PARTITION BY {', '.join(keys)}" if keys else "", "ORDER BY ts",
                              frame) if part
        )
        calls = rng.sample(OVER_AGGREGATES, rng.randint(2, 4))
        named = rng.random() < 0.5
        over = "OVER w" if named else f"OVER ({window})"
        where = rng.choice(WHERES)
        sql = (
            f"CREATE VIEW ov{i} WITH ('topic' = '{{topic}}', 'format' = 'append') AS\n"
            f"SELECT ts, k, u, x, {', '.join(f'{c} {over} AS a{j}' for j, c in enumerate(calls))}"
            f"\nFROM {table}"
            + (f"\nWHERE {where}" if where else "")
            + (f"\nWINDOW w AS ({window})" if named else "")
            + ";"
        )
        cases.append(Case(f"ov{i}", table, sql, "default", "append"))
    return cases


def _cascade_views(rng: random.Random, count: int, table: str) -> dict[str, str]:
    """``count`` cascades of windows over ``table`` (SPEC S18): a local EMIT AFTER WATERMARK
    aggregate by window and a key, an output view windowed on its window end (TUMBLE or HOP)
    aggregating its columns, and every other cascade a third level between the two."""
    views: dict[str, str] = {}
    for i in range(count):
        key = rng.choice(("k", "u", "k"))
        picked = rng.sample(CASCADE_CALLS, rng.randint(2, 4))
        first = [f"{call} AS {alias}" for call, alias, _ in picked]
        size = rng.choice((1, 2, 3))
        where = rng.choice((None, "x > 0", "k <> 'b'"))
        sql = [
            _cascade_level(
                f"cl{i}", f"CREATE LOCAL VIEW cl{i}", table, "ts",
                f"TUMBLE(TABLE {{source}}, DESCRIPTOR({{time}}), INTERVAL '{size}' SECOND)",
                (key,), first, "e1", where, True,
            )
        ]
        nxt = [f"{rng.choice(calls)} AS {alias}" for _, alias, calls in picked]
        source, time = f"cl{i}", "e1"
        if i % 2 == 1:
            mid = size * rng.choice((2, 3))
            sql.append(
                _cascade_level(
                    f"cm{i}", f"CREATE LOCAL VIEW cm{i}", source, time,
                    f"TUMBLE(TABLE {{source}}, DESCRIPTOR({{time}}), INTERVAL '{mid}' SECOND)",
                    (key,), nxt, "e2", None, True,
                )
            )
            nxt = [f"{rng.choice(calls)} AS {alias}" for _, alias, calls in picked]
            source, time = f"cm{i}", "e2"
        slide = rng.choice((2, 3, 4))
        tvf = rng.choice((
            f"TUMBLE(TABLE {{source}}, DESCRIPTOR({{time}}), INTERVAL '{slide * 2}' SECOND)",
            f"HOP(TABLE {{source}}, DESCRIPTOR({{time}}), INTERVAL '{slide}' SECOND, "
            f"INTERVAL '{slide * 2}' SECOND)",
        ))
        fmt = rng.choice(("append", "append", "upsert", "changelog"))
        keys = rng.choice(((key,), ()))
        sql.append(
            _cascade_level(
                f"cs{i}", f"CREATE VIEW cs{i} WITH ('topic' = '{{topic}}', 'format' = "
                f"'{fmt}')", source, time, tvf, keys, nxt, "", None, False,
            )
        )
        views[f"cs{i}"] = "\n".join(sql)
    return views


#: Aggregates of a Top-N's input aggregate (Spark's native ones, plain row values).
TOP_N_AGGREGATES = ("COUNT(*) AS c", "SUM(x) AS s", "MAX(x) AS m", "MIN(u) AS lo")


def _top_n_views(rng: random.Random, count: int, tables: list[str]) -> dict[str, str]:
    """``count`` window Top-N views (docs/language.md, ADR 0020), every other one over a
    window function's rows (ROW_NUMBER, ORDER BY keys in one direction: Spark's held form)
    and the others over an EMIT AFTER WATERMARK aggregate written as a subquery or a WITH
    query (ROW_NUMBER or RANK, keys in any directions: ranked per step); N from 1 to 3,
    PARTITION BY the window and maybe ``k``, TUMBLE or HOP, a drawn WHERE, the rank
    selected or not. Each aggregate filters on ``u <> 1000 + i``, which no row fails: two
    equal aggregations in one query share Spark's exchange, and the second then writes a
    step later."""
    views: dict[str, str] = {}
    for i in range(count):
        table = rng.choice(tables)
        size = rng.choice((2, 3, 5))
        tvf = rng.choice((
            f"TUMBLE(TABLE {table}, DESCRIPTOR(ts), INTERVAL '{size}' SECOND)",
            f"HOP(TABLE {table}, DESCRIPTOR(ts), INTERVAL '{size}' SECOND, "
            f"INTERVAL '{size * 2}' SECOND)",
        ))
        limit = rng.randint(1, 3)
        limit_sql = rng.choice((f"rn <= {limit}", f"rn < {limit + 1}", f"{limit} >= rn"))
        if limit == 1 and rng.random() < 0.3:
            limit_sql = "rn = 1"
        keyed = rng.random() < 0.5
        partition = "window_start, window_end" + (", k" if keyed else "")
        if i % 2 == 0:
            down = rng.choice((" DESC", ""))
            order = rng.choice((f"x{down}", f"x{down}, u{down}", f"d{down}", f"u{down}"))
            where = rng.choice((None, "x > 0", "k <> 'b'"))
            shown = rng.choice(("ts, k, u, x, window_end, rn", "k, x, d, window_start"))
            sql = (
                f"CREATE VIEW tn{i} WITH ('topic' = '{{topic}}') AS\n"
                f"SELECT {shown} FROM (\n"
                f"  SELECT *, ROW_NUMBER() OVER (PARTITION BY {partition} ORDER BY {order}) "
                f"AS rn\n  FROM TABLE({tvf})"
                + (f"\n  WHERE {where}" if where else "")
                + f")\nWHERE {limit_sql};"
            )
        else:
            fn = rng.choice(("ROW_NUMBER", "RANK"))
            calls = rng.sample(TOP_N_AGGREGATES, rng.randint(2, 3))
            names = [c.split(" AS ")[1] for c in calls]
            order = ", ".join(f"{n}{rng.choice((' DESC', '', ' DESC'))}"
                              for n in rng.sample(names, rng.randint(1, 2)))
            group = "k" if keyed else rng.choice(("k", "u"))
            aggregate = (
                f"SELECT window_start, window_end, {group}, {', '.join(calls)}\n"
                f"  FROM TABLE({tvf}) WHERE u <> {1000 + i}\n"
                f"  GROUP BY window_start, window_end, {group}"
            )
            ranked = (f"SELECT *, {fn}() OVER (PARTITION BY {partition} ORDER BY {order}) "
                      "AS rn FROM")
            head = f"CREATE VIEW tn{i} WITH ('topic' = '{{topic}}') AS\n"
            if rng.random() < 0.5:
                sql = (head + f"SELECT * FROM (\n  {ranked} (\n  {aggregate}))\n"
                       f"WHERE {limit_sql};")
            else:
                sql = (head + f"WITH sums AS (\n  {aggregate})\n"
                       f"SELECT window_end, {group}, {names[0]}, rn FROM ({ranked} sums)\n"
                       f"WHERE {limit_sql} AND window_end IS NOT NULL;")
        views[f"tn{i}"] = sql
    return views


def generate(
    seed: int,
    cases: int,
    steps: int = 5,
    rows_per_step: int = 24,
    punctuations: bool = True,
    native: bool = False,
    delay: bool = False,
    delay_s: int = 20,
    slice_views: bool = False,
    bare: tuple[str, ...] = (),
    unions: int = 0,
    joins: int = 0,
    cascades: int = 0,
    regular_joins: int = 0,
    window_joins: int = 0,
    union_aggregates: int = 0,
    temporal_joins: int = 0,
    sessions: int = 0,
    cumulates: int = 0,
    derived: int = 0,
    proctimes: int = 0,
    top_ns: int = 0,
    overs: int = 0,
) -> Scenario:
    """A scenario of ``cases`` generated views over two tables ``ev_a``/``ev_b``; ``native``:
    only windowed AFTER WATERMARK views with exactly computable aggregates (the views Spark's
    own aggregation runs), so the native path is compared case by case; ``delay``: only
    ``EMIT ... AFTER DELAY INTERVAL 'delay_s' SECOND`` views, case ``i`` taking form ``i`` of
    :data:`DELAY_FORMS` in turn (so ``cases >= len(DELAY_FORMS)`` covers every form and
    format), windows, keys, aggregates, WHERE and HAVING drawn as for the other cases;
    ``slice_views``: ``ev_a``'s stateless views are the ones a source task computes over
    Arrow (:func:`_slice_views`, ADR 0007; give ``cases=0`` so no aggregate keeps ``ev_a`` in
    the streaming query), while ``ev_b``'s stay with Spark; ``bare``: tables with no
    stateless view (their output views are the generated cases alone); ``unions``: that many
    UNION ALL views over both tables, some read by another view (:func:`_union_views`), drawn
    from a generator of their own so the other draws stay the seeds'; ``joins``: that many
    interval joins of the two tables, INNER or OUTER (:func:`_join_views`), drawn the same way;
    ``cascades``: that many cascades of windows over ``ev_a`` (:func:`_cascade_views`), and
    ``regular_joins``: that many joins without a time bound (:func:`_regular_join_views`),
    ``window_joins``: that many window joins (:func:`_window_join_views`), and
    ``union_aggregates``: that many native aggregates over a UNION ALL of both tables
    (:func:`_union_aggregate_views`), ``temporal_joins``: that many temporal joins
    (:func:`_temporal_join_views`, both tables keyed by ``u``), ``sessions``: that many
    SESSION aggregates (:func:`_session_cases`, cases after the drawn ones), and
    ``cumulates``: that many CUMULATE aggregates (:func:`_cumulate_cases`, cases after those),
    ``derived``: that many aggregates by a derived time attribute (:func:`_derived_cases`,
    cases after those), ``proctimes``: a third table :data:`PROCTIME_TABLE` with ``pt AS
    PROCTIME()``, its rows and two stateless views, and that many aggregates windowed on ``pt``
    (:func:`_proctime_views`, cases after those), ``top_ns``: that many window Top-N views
    (:func:`_top_n_views`), and ``overs``: that many OVER views (:func:`_over_cases`, cases
    after those), drawn the same way."""
    rng = random.Random(seed)
    lateness = {"ev_a": rng.choice((0, 2, 4)), "ev_b": rng.choice((3, 6, 10))}
    tables = list(lateness)
    forms = [(w, emit.format(d=delay_s), fmt) for w, emit, fmt in DELAY_FORMS]
    generated = [
        _case(rng, f"v{i:03d}", tables[i % 2], native, forms[i % len(forms)] if delay else None)
        for i in range(cases)
    ]
    stateless = {
        f"s_{t}": (
            f"CREATE VIEW s_{t} WITH ('topic' = '{{topic}}', 'format' = 'append') AS\n"
            f"SELECT ts, k, u, x * 2 AS x2 FROM {t} WHERE x > 4;"
        )
        for t in tables
        if (not slice_views or t != "ev_a") and t not in bare
    }
    if slice_views:
        stateless.update(_slice_views(rng, "ev_a"))
    if unions:
        # Drawn after every other draw, so the seeds of the other tests are unchanged.
        stateless.update(_union_views(random.Random(seed * 7919 + unions), unions, tables))
    if joins:
        stateless.update(_join_views(random.Random(seed * 104729 + joins), joins, tables))
    if regular_joins:
        stateless.update(
            _regular_join_views(random.Random(seed * 32452843 + regular_joins), regular_joins,
                                tables)
        )
    if window_joins:
        stateless.update(
            _window_join_views(random.Random(seed * 49979687 + window_joins), window_joins,
                               tables)
        )
    if union_aggregates:
        stateless.update(
            _union_aggregate_views(random.Random(seed * 86028121 + union_aggregates),
                                   union_aggregates, tables)
        )
    if temporal_joins:
        stateless.update(
            _temporal_join_views(random.Random(seed * 67867967 + temporal_joins),
                                 temporal_joins, tables)
        )
    if cascades:
        stateless.update(
            _cascade_views(random.Random(seed * 15485863 + cascades), cascades, "ev_a")
        )
    if top_ns:
        stateless.update(_top_n_views(random.Random(seed * 373587883 + top_ns), top_ns, tables))
    if sessions:
        generated += _session_cases(random.Random(seed * 179424673 + sessions), sessions, tables)
    if cumulates:
        generated += _cumulate_cases(
            random.Random(seed * 275604541 + cumulates), cumulates, tables
        )
    if derived:
        generated += _derived_cases(random.Random(seed * 982451653 + derived), derived, tables)
    if overs:
        generated += _over_cases(random.Random(seed * 334214459 + overs), overs, tables)
    scenario_steps = []
    now = {t: rng.randint(0, 10) for t in tables}
    top = {t: -(10**9) for t in tables}
    for _ in range(steps):
        step = Step()
        for t in tables:
            step.records[t], now[t], top[t] = _table_step(
                rng, lateness[t], now[t], top[t], rows_per_step, punctuations
            )
        scenario_steps.append(step)
    if proctimes:
        prng = random.Random(seed * 373587883 + proctimes)
        views, cases_p = _proctime_views(prng, proctimes)
        stateless.update(views)
        generated += cases_p
        lateness[PROCTIME_TABLE] = prng.choice((0, 2, 4))
        now_p, top_p = prng.randint(0, 10), -(10**9)
        for step in scenario_steps:
            step.records[PROCTIME_TABLE], now_p, top_p = _table_step(
                prng, lateness[PROCTIME_TABLE], now_p, top_p, rows_per_step, punctuations
            )
    return Scenario(
        seed,
        lateness,
        generated,
        scenario_steps,
        stateless,
        keyed=temporal_joins > 0,
        proctime=(PROCTIME_TABLE,) if proctimes else (),
    )
