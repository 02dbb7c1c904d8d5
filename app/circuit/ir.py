"""The circuit IR: the seam between the compiler and every runtime.

A compiled program is a :class:`Circuit`: input :class:`Table` s bound to Kafka topics and
:class:`View` s, each a straight pipeline of operators over one input (a table or an earlier
view), or a :class:`UnionAll` of several such pipelines (SPEC S17). Everything is a frozen
dataclass so a circuit can be hashed, compared in tests and printed by ``explain`` without
surprises. Nothing here imports pyspark: the reference evaluator
(:mod:`app.circuit.reference`) and the Spark runtime (:mod:`app.runtime`) both read this IR,
which is what lets tests prove the runtime right against the oracle.

Units: TIMESTAMP values are epoch milliseconds once they leave Avro (``*_ms`` fields), and a
LATENESS ``amount`` is in the column's own unit (milliseconds for TIMESTAMP, plain integers for
INT/BIGINT), so the waterline formula of SPEC S3 is one subtraction for every type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from app.circuit.metadata import CHANGELOG_FORMATS

#: Field metadata of an IR field added after plans were first fingerprinted: a value equal
#: to the field's default is left out of plan digests
#: (:func:`app.runtime.planner.plan_fingerprint.plain_value`), so a program that does not use the
#: field keeps the digest it had before the field existed.
OMIT_DEFAULT: dict[str, str] = {"digest": "omit-default"}

__all__ = [
    "AggCall",
    "Aggregate",
    "Call",
    "Case",
    "Cast",
    "Circuit",
    "Column",
    "ColumnRef",
    "Computed",
    "Derivation",
    "DELETION_COLUMN",
    "Diagnostic",
    "EmitPolicy",
    "Expr",
    "Filter",
    "HELD",
    "Join",
    "JoinAsOf",
    "JoinBound",
    "JoinSide",
    "JoinTime",
    "LATEST",
    "Lateness",
    "Literal_",
    "OMIT_DEFAULT",
    "Operator",
    "Output",
    "Over",
    "Position",
    "Project",
    "SortKey",
    "SqlType",
    "StateBound",
    "Table",
    "TimeAttribute",
    "TimeStep",
    "TopN",
    "UnionAll",
    "UnionBranch",
    "View",
    "ViewLateness",
    "Window",
    "column_names",
    "column_refs",
    "conjuncts",
    "substitute",
]


@dataclass(frozen=True)
class Position:
    """Where something is in the program file (1-based line and column), for SPEC L7."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Diagnostic:
    """One error or warning of SPEC L7: where, what is wrong, and the fix when one exists."""

    severity: Literal["error", "warning"]
    position: Position
    message: str
    fix: str | None = None

    def __str__(self) -> str:
        text = f"{self.position}: {self.severity}: {self.message}"
        return f"{text}; {self.fix}" if self.fix else text


TypeName = Literal[
    "BOOLEAN", "INT", "BIGINT", "REAL", "DOUBLE", "DECIMAL", "VARCHAR", "DATE", "TIMESTAMP",
    "VARBINARY",
]


@dataclass(frozen=True)
class SqlType:
    """A column type of SPEC L1. ``precision``/``scale`` only for DECIMAL."""

    name: TypeName
    nullable: bool = True
    precision: int | None = None
    scale: int | None = None

    def __str__(self) -> str:
        base: str = self.name
        if self.name == "DECIMAL":
            base = f"DECIMAL({self.precision}, {self.scale})"
        return base if self.nullable else f"{base} NOT NULL"

    def with_nullable(self, nullable: bool) -> SqlType:
        return SqlType(self.name, nullable, self.precision, self.scale)


@dataclass(frozen=True)
class Column:
    name: str
    type: SqlType
    #: Of a table column read from the Kafka record rather than its value (``METADATA FROM
    #: 'key'``, app/circuit/metadata.py): the metadata key (``timestamp``, ``partition``,
    #: ``offset``, ``key`` or ``headers.<name>``). None for a value column and for every view
    #: column. A metadata column is no field of the table's value schema.
    metadata: str | None = None
    #: ``name AS PROCTIME()`` (app/circuit/processing_time.py): a table column whose value is
    #: the batch time of the step its row arrives in; no field of the value schema either.
    processing_time: bool = field(default=False, metadata=OMIT_DEFAULT)
    #: ``name AS expr`` (app/circuit/computed_columns.py): a table column computed from the
    #: record's other columns when it is decoded, before the late gate; no field of the
    #: value schema. None for every other column.
    computed: Computed | None = field(default=None, metadata=OMIT_DEFAULT)


# ---------------------------------------------------------------------------------------------
# Scalar expressions. Every node carries its result type; names are already resolved against
# the operator's input columns (lower-case).


@dataclass(frozen=True)
class ColumnRef:
    name: str
    type: SqlType


@dataclass(frozen=True)
class Literal_:
    """A constant. TIMESTAMP literals are epoch ms, DATE literals days since epoch,
    DECIMAL literals :class:`decimal.Decimal`, intervals are folded into BIGINT ms."""

    value: Any
    type: SqlType


@dataclass(frozen=True)
class Call:
    """An operator or scalar function, by upper-case SQL name (``+``, ``=``, ``AND``,
    ``IS NULL``, ``LIKE``, ``UPPER``, ``COALESCE``, ...)."""

    fn: str
    args: tuple[Expr, ...]
    type: SqlType


@dataclass(frozen=True)
class Cast:
    expr: Expr
    type: SqlType


@dataclass(frozen=True)
class Case:
    whens: tuple[tuple[Expr, Expr], ...]
    else_: Expr | None
    type: SqlType


Expr = ColumnRef | Literal_ | Call | Cast | Case


@dataclass(frozen=True)
class Computed:
    """A computed table column's expression over the table's other columns (never another
    computed one), and its text as written (for dead letters and ``explain``)."""

    expr: Expr
    written: str


def column_names(expr: Expr) -> list[str]:
    """The names of the columns ``expr`` reads, in order (repeated as often as read)."""
    return [ref.name for ref in column_refs(expr)]


def column_refs(expr: Expr) -> list[ColumnRef]:
    """The column references of ``expr`` (with their types), in order."""
    if isinstance(expr, ColumnRef):
        return [expr]
    if isinstance(expr, Call):
        return [r for a in expr.args for r in column_refs(a)]
    if isinstance(expr, Cast):
        return column_refs(expr.expr)
    if isinstance(expr, Case):
        refs = [r for c, v in expr.whens for r in column_refs(c) + column_refs(v)]
        return refs + (column_refs(expr.else_) if expr.else_ is not None else [])
    return []


def substitute(expr: Expr, mapping: Callable[[Expr], Expr | None]) -> Expr:
    """``expr`` with every subexpression for which ``mapping`` gives an expression replaced
    by it (outermost first)."""
    replaced = mapping(expr)
    if replaced is not None:
        return replaced
    if isinstance(expr, Call):
        return Call(expr.fn, tuple(substitute(a, mapping) for a in expr.args), expr.type)
    if isinstance(expr, Cast):
        return Cast(substitute(expr.expr, mapping), expr.type)
    if isinstance(expr, Case):
        return Case(tuple((substitute(c, mapping), substitute(v, mapping))
                          for c, v in expr.whens),
                    substitute(expr.else_, mapping) if expr.else_ is not None else None,
                    expr.type)
    return expr


def conjuncts(expr: Expr) -> list[Expr]:
    """The operands of ``expr``'s top-level ANDs (``[expr]`` for any other expression)."""
    if isinstance(expr, Call) and expr.fn == "AND":
        return [c for arg in expr.args for c in conjuncts(arg)]
    return [expr]


# ---------------------------------------------------------------------------------------------
# Operators of a view's pipeline, applied in order to the view's input rows.


@dataclass(frozen=True)
class Filter:
    """WHERE (before aggregation) or HAVING (after it)."""

    predicate: Expr


@dataclass(frozen=True)
class Project:
    """The SELECT list: output column name and expression, in output order."""

    outputs: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True)
class Window:
    """TUMBLE, HOP, CUMULATE or SESSION of SPEC L4/S9 on a time attribute; adds
    ``window_start``/``window_end`` (TIMESTAMP NOT NULL, or the column's integer type for
    INT/BIGINT time columns). For TUMBLE, ``slide == size``. Sizes are in the time column's
    unit (ms for TIMESTAMP). For CUMULATE, ``slide`` is the step and ``size`` the max size (a
    whole number of steps): windows ``[s, s + k * step)`` sharing the start ``s`` of a TUMBLE
    of ``size``, so ``window_end`` alone tells them apart. For SESSION, ``size == slide`` is
    the gap: a group's rows (its GROUP BY keys other than the window's) whose times are less
    than the gap apart form one session ``[first, last + gap)``, known only once the waterline
    reaches its end (docs/semantics.md)."""

    kind: Literal["TUMBLE", "HOP", "CUMULATE", "SESSION"]
    time_column: str
    size: int
    slide: int
    offset: int = 0
    #: The time column is a processing-time attribute (``AS PROCTIME()``, forwarded): the
    #: window is complete in the first step whose batch time reaches its end.
    processing_time: bool = field(default=False, metadata=OMIT_DEFAULT)


@dataclass(frozen=True)
class AggCall:
    """One aggregate of SPEC L3: COUNT (no args = COUNT(*)), SUM, MIN, MAX, AVG, ARG_MAX,
    ARG_MIN (args = (value, by))."""

    fn: str
    args: tuple[Expr, ...]
    distinct: bool
    type: SqlType


@dataclass(frozen=True)
class Aggregate:
    """GROUP BY: output rows are the key columns then the aggregates, by these names."""

    keys: tuple[tuple[str, Expr], ...]
    aggregates: tuple[tuple[str, AggCall], ...]


@dataclass(frozen=True)
class UnionBranch:
    """One SELECT of a UNION ALL: its input and its stateless pipeline
    ``[Window] [Filter] Project``, whose Project names the union's columns (the first
    branch's names), so every branch's rows have the same shape."""

    source: str
    operators: tuple[Operator, ...]


@dataclass(frozen=True)
class UnionAll:
    """SPEC S17: the rows of every branch, in step order (arrival order: steps, then tables
    in program order, then rows). Always a view's only operator; the view's ``sources`` are
    the branches' sources, in branch order."""

    branches: tuple[UnionBranch, ...]


@dataclass(frozen=True)
class JoinSide:
    """One input of a :class:`Join`: the relation, the alias that qualifies its columns, and
    its column names. In the joined row a column is ``<alias>.<column>``."""

    source: str
    alias: str
    columns: tuple[str, ...]

    def qualified(self, column: str) -> str:
        return f"{self.alias}.{column}"


@dataclass(frozen=True)
class JoinBound:
    """The time bound of an interval or window join (SPEC S16), in the time columns' unit:
    ``left.left_column + lower <= right.right_column <= left.left_column + upper``.
    Column names are unqualified side columns; a window join is ``lower == upper == 0`` on
    both sides' ``window_end``."""

    left_column: str
    right_column: str
    lower: int
    upper: int


@dataclass(frozen=True)
class JoinAsOf:
    """The times of a temporal join (SPEC S16, ``right FOR SYSTEM_TIME AS OF
    left.probe_column``): a left (probe) row at ``x`` is matched with the version of its
    key in ``right`` (a table with a PRIMARY KEY) whose time is the greatest value ``<= x``.
    Column names are unqualified side columns. ``version_column`` is the versioned table's
    first LATENESS column, whose waterline releases the probe rows; None AS OF a
    processing-time attribute (S13, Flink's processing-time temporal join): a version's
    time is then the batch time of the step it arrives in, and a probe row, whose time is
    its step's, is written in that step with the latest version its key has after the
    step's versions. ``probe_column`` None: AS OF ``PROCTIME()`` (RisingWave's form), each
    probe row at its own step's batch time (``version_column`` is None too)."""

    probe_column: str | None
    version_column: str | None

    @property
    def processing_time(self) -> bool:
        return self.version_column is None


@dataclass(frozen=True)
class Join:
    """SPEC S16: the rows of ``left`` and ``right`` whose ``keys`` are equal (a NULL key
    matches nothing), within ``bound``, and for which ``residual`` is TRUE. Always a view's
    first operator; the view's ``sources`` are ``(left.source, right.source)``.

    ``form``: 'interval' (a bound between two row-time attributes), 'window' (equal
    ``window_end`` of two windowed relations), 'regular' (no bound: state is never freed)
    or 'temporal' (``as_of`` set, ``bound`` None: each left row is matched with one version
    of ``right``, once ``right``'s waterline passes its time; ``keys`` cover ``right``'s
    PRIMARY KEY, in key order, each right expression a key column; ``kind`` is inner or left).
    ``kind``: an outer side's row without a match is emitted, padded with NULLs, once the
    other side's waterline proves no match can come; of a regular join, at once, and
    retracted when its first match comes (:attr:`pads_at_once`). Keys and residual are
    expressions over the joined row's qualified names; each key is (left expression, right
    expression)."""

    kind: Literal["inner", "left", "right", "full"]
    form: Literal["interval", "window", "regular", "temporal"]
    left: JoinSide
    right: JoinSide
    keys: tuple[tuple[Expr, Expr], ...]
    residual: Expr | None
    bound: JoinBound | None
    as_of: JoinAsOf | None = field(default=None, metadata=OMIT_DEFAULT)
    #: A side is an updating relation (S18): its rows come as changes, retractions among
    #: them (only a join without a time bound reads one; the compiler's rule).
    reads_changes: bool = field(default=False, metadata=OMIT_DEFAULT)

    @property
    def as_of_shown(self) -> str:
        """A temporal join's AS OF time as written: the probe side's column, or PROCTIME()."""
        assert self.as_of is not None
        column = self.as_of.probe_column
        return "PROCTIME()" if column is None else self.left.qualified(column)

    @property
    def pads_at_once(self) -> bool:
        """An OUTER join without a time bound (S16, S18): no waterline can prove a row
        unmatched, so a row without a match is written padded with NULLs at once and
        retracted when its first match comes; its view is updating."""
        return self.form == "regular" and self.kind != "inner"

    @property
    def per_key(self) -> bool:
        """A join without a time bound that is OUTER or reads changes (S16, S18): each
        side's rows per key as a Z-set (a retracted row leaves), and each step the touched
        keys' rows after less before (app/circuit/regular_join.py). An INNER join of
        insert-only rows writes the same pairs, each when its second row arrives."""
        return self.form == "regular" and (self.kind != "inner" or self.reads_changes)


@dataclass(frozen=True)
class SortKey:
    """One ORDER BY key of a :class:`TopN`. NULL is the smallest value (Spark's order):
    first ascending, last descending."""

    expr: Expr
    descending: bool


@dataclass(frozen=True)
class TopN:
    """Window Top-N (Flink's ``ROW_NUMBER()``/``RANK() OVER (PARTITION BY window_start,
    window_end ... ORDER BY ...)`` read with ``WHERE rownum <= limit``): per partition of the
    input rows, the rows ranked ``<= limit``, each with its rank as column ``rank_column``
    (after the input's columns). ``partition`` includes ``window_end``, the input column
    that is a window end (a time attribute): a partition is complete, written and freed once
    ``w(window_end) >= window_end`` (S11, S12), as an EMIT AFTER WATERMARK group.

    ``function``: ROW_NUMBER numbers a partition's rows 1, 2, ...; RANK gives tied rows one
    rank (1, 1, 3, ...), so more than ``limit`` rows can pass. Rows equal on every ORDER BY
    key are ordered by all their columns, in column order, in the direction of the last
    ORDER BY key (:mod:`app.circuit.ranking`): ROW_NUMBER's tie rule, independent of
    arrival order."""

    function: Literal["ROW_NUMBER", "RANK"]
    partition: tuple[Expr, ...]
    order: tuple[SortKey, ...]
    limit: int
    rank_column: str
    window_end: str


@dataclass(frozen=True)
class Over:
    """OVER aggregates (Flink's OVER aggregation, SQLstream's windowed aggregation): every
    input row gets the value of each aggregate over its frame, the rows of its partition
    (equal ``partition`` values) ordered by ``order_column``, an ascending time attribute of
    the input. Adds the aggregates' columns (by their names) to the row; a Project follows.

    ``frame`` 'range': the rows with time in ``[t - preceding, t]``, the row's peers (equal
    time) included; 'rows': the row and its ``preceding`` predecessors in (time, arrival)
    order. ``preceding`` None is UNBOUNDED PRECEDING; it is in the time column's unit for
    'range' and a row count for 'rows'. A row at ``t`` is written once the waterline of
    ``order_column`` passes it (``w > t``), with its final values (docs/semantics.md)."""

    partition: tuple[Expr, ...]
    order_column: str
    frame: Literal["range", "rows"]
    preceding: int | None
    aggregates: tuple[tuple[str, AggCall], ...]


Operator = Filter | Project | Window | Aggregate | UnionAll | Join | TopN | Over


# ---------------------------------------------------------------------------------------------
# Time, emission, output and state facts computed by the compiler's analysis passes.


@dataclass(frozen=True)
class Lateness:
    """LATENESS on a table column (SPEC L2), in the column's unit."""

    column: str
    amount: int


@dataclass(frozen=True)
class ViewLateness:
    """The statement form ``LATENESS view.column INTERVAL ...`` (SPEC L2, decoding case)."""

    view: str
    column: str
    amount: int
    position: Position


@dataclass(frozen=True)
class TimeStep:
    """One monotone non-decreasing step of a derived time attribute (docs/semantics.md):
    ``shift`` adds ``amount`` (in the column's unit: ``c + INTERVAL``, ``c - INTERVAL``,
    ``c + 5`` on an integer column); ``floor`` and ``ceil`` round a TIMESTAMP down or up to
    a ``unit`` boundary (``FLOOR(c TO unit)``, ``DATE_TRUNC(unit, c)``, ``CEIL(c TO unit)``).
    A row at or above a waterline ``w`` maps to a value at or above the step of ``w``, so the
    step of a waterline is the waterline of the stepped column."""

    op: Literal["shift", "floor", "ceil"]
    amount: int = 0
    unit: str = ""


@dataclass(frozen=True)
class Derivation:
    """How a derived time attribute's waterline follows another's: ``steps`` applied in order
    to the waterline of the attribute's ``table``.``source_column`` (the whole composition,
    ``source``'s own steps first); ``source`` is the attribute of the column the expression
    reads, for explain."""

    source: TimeAttribute
    steps: tuple[TimeStep, ...]


@dataclass(frozen=True)
class TimeAttribute:
    """A view column that carries a waterline (SPEC S10) and where that waterline comes from:
    ``table``.``source_column`` (a table LATENESS column) or, for ``kind == 'view_lateness'``,
    the view column's own LATENESS. For window columns ``w(window_end) = w(c)``. A
    ``derived`` column (a monotone expression of one time attribute, :class:`TimeStep`) and
    the window columns of a window on one carry the :attr:`derivation` that turns the waterline
    of ``table``.``source_column`` into their own
    (:func:`app.circuit.waterline.attribute_waterline`)."""

    column: str
    table: str
    source_column: str
    kind: Literal["forwarded", "window_start", "window_end", "view_lateness", "derived"]
    #: Of a UNION ALL column (then ``table`` is the union view, ``source_column`` the
    #: column): each branch's time attribute at that position; the waterline is their
    #: minimum (S17, SQLstream's merge). Empty for every other column.
    merged: tuple[TimeAttribute, ...] = ()
    #: Of a JOIN output column (then ``table`` is the join view, ``source_column`` the
    #: column): its own side's time attribute, held back by the other side's (S16).
    join: JoinTime | None = None
    derivation: Derivation | None = field(default=None, metadata=OMIT_DEFAULT)

    @property
    def steps(self) -> tuple[TimeStep, ...]:
        """The steps from the waterline of ``table``.``source_column`` to this column's."""
        return self.derivation.steps if self.derivation is not None else ()


@dataclass(frozen=True)
class JoinTime:
    """Where a join output column's waterline comes from (SPEC S10, S16): its own side's
    time attribute ``own``, held back by ``other``, the other side's bound column, so that a
    match or an unmatched row found later is never below it:
    ``w = min(w(own), w(other) - lag)``, ``lag`` in the column's unit."""

    own: TimeAttribute
    other: TimeAttribute
    lag: int
    side: Literal["left", "right"]


@dataclass(frozen=True)
class EmitPolicy:
    """SPEC L5/S12. Default (no EMIT clause): stream=False, after_watermark=False."""

    stream: bool = False
    after_watermark: bool = False
    delay_ms: int | None = None


@dataclass(frozen=True)
class Output:
    """An output view's Kafka binding (SPEC L6/S13). Schemas are Avro schemas as parsed JSON;
    ``key_columns`` are the GROUP BY columns of an ``upsert`` or ``changelog`` aggregate (in the
    order of the view's ``'key'`` when it names them), or the columns of the view's ``'key'``;
    ``key_schema`` is None without any (a null Kafka key). ``changelog`` value schemas include
    undo/ptime/ver."""

    topic: str
    format: Literal["upsert", "changelog", "append"]
    key_columns: tuple[str, ...]
    key_schema: dict[str, Any] | None
    value_schema: dict[str, Any]
    #: How keys and values are encoded: ``json-registry`` (JSON objects of the JSON Schema
    #: registered for the fields, framed by confluent-kafka's JSONSerializer),
    #: ``protobuf-confluent`` (messages of the Protobuf file registered for the fields, framed
    #: by confluent-kafka's ProtobufSerializer), ``avro`` (schemaless), ``avro-confluent`` (framed
    #: with the schema ids the registry gave ``<topic>-key`` and ``<topic>-value``),
    #: ``json`` (JSON objects of the same fields, app/connectors/json_encoder.py) or
    #: ``debezium-json`` (a ``changelog`` or ``append`` view's changes as Debezium change
    #: events of those objects, keys as ``json``; app/connectors/debezium_encoder.py) or
    #: ``raw`` (the one column of ``value_schema`` as Kafka's Java serializers write it, a
    #: NULL a null value; keys of a declared ``key_format`` only).
    encoding: Literal["avro", "avro-confluent", "json", "json-registry",
                      "protobuf-confluent", "debezium-json", "raw"] = "avro"
    #: An ``avro-confluent`` output's schema registry client settings (the view's
    #: ``'schema-registry.url'``, completed by ``tidemark run`` as a table's are).
    schema_registry: dict[str, str] | None = None
    #: The registered schema ids of an ``avro-confluent`` output, set by ``tidemark run``
    #: once at start (None until then).
    key_schema_id: int | None = None
    value_schema_id: int | None = None
    #: The topic's settings when Tidemark creates it (the view's ``'partitions'``,
    #: ``'replicas'`` and ``'retention'``); None: the ``topic_*`` settings, else the input
    #: topic's partition count and the broker's defaults. ``retention_ms`` -1: no time limit.
    partitions: int | None = None
    replicas: int | None = None
    retention_ms: int | None = None
    #: A stage boundary's internal topic (SPEC S19, ADR 0023): ``append`` rows read back by a
    #: later query as a :attr:`Table.stage_input` table, each step followed by a punctuation
    #: that carries the view's waterlines.
    stage_output: bool = field(default=False, metadata=OMIT_DEFAULT)
    #: Flink's ``'properties.bootstrap.servers'`` of the table an INSERT INTO writes: the
    #: cluster the program names, which ``tidemark run`` checks is its own (S15).
    bootstrap_servers: str | None = field(default=None, metadata=OMIT_DEFAULT)
    #: A declared key format (``'key.format'``): ``raw`` (one column's plain bytes, as
    #: Kafka's Java serializers write them), ``avro``, ``avro-confluent`` (framed with the id
    #: of ``<topic>-key``) or ``json``, of ``key_schema``, which is then the same for equal
    #: key columns in every view (a primitive ``{"type": T}`` for a bare value). None: the
    #: record ``<view>_key`` in the value's ``encoding``.
    key_format: str | None = field(default=None, metadata=OMIT_DEFAULT)
    #: The names of the key's fields, one per key column in its order, where they are not
    #: the columns' names: the columns without Flink's ``'key.fields-prefix'`` of the table
    #: an INSERT INTO writes. Empty: each field is named as its column.
    key_fields: tuple[str, ...] = field(default=(), metadata=OMIT_DEFAULT)
    #: The view's own Confluent serializer options of an ``avro-confluent`` output, as
    #: (name, value) pairs: ``auto.register.schemas``, ``use.latest.version`` ('true' or
    #: 'false'), ``key.subject.name.strategy``, ``value.subject.name.strategy`` (a strategy's
    #: bare class name), ``key.subject``, ``value.subject`` (a subject named outright, in
    #: the strategy's place). The service's ``schema_registry`` settings give the others.
    serializer: tuple[tuple[str, str], ...] = field(default=(), metadata=OMIT_DEFAULT)
    #: The subjects the key and value schemas were found under, set by ``tidemark run`` at
    #: start with the schema ids (None until then).
    key_subject: str | None = field(default=None, metadata=OMIT_DEFAULT)
    value_subject: str | None = field(default=None, metadata=OMIT_DEFAULT)


@dataclass(frozen=True)
class StateBound:
    """SPEC S11: what state the view holds and when it is freed.
    ``kind``: 'none' (stateless), 'window' (freed by a waterline: a group once
    w(window_end) >= window_end; a join's row once the other side's waterline passes its
    bound), 'unbounded' (GROUP BY without a time attribute key, or a join without a time
    bound: grows forever, a warning)."""

    kind: Literal["none", "window", "unbounded"]
    window_end_column: str | None = None
    description: str = ""


@dataclass(frozen=True)
class Table:
    """An input bound to a Kafka topic (SPEC L1). ``avro_schema`` is the value schema the
    records are decoded with (from the 'schema' file, or derived from the columns)."""

    name: str
    columns: tuple[Column, ...]
    topic: str
    #: How record values are decoded; ``debezium-json``: Debezium change events of a keyed
    #: table (:attr:`changelog`); ``json-registry``: JSON Schema records of a registry;
    #: ``protobuf-confluent``: Protobuf records of a registry.
    format: Literal["avro", "avro-confluent", "json", "json-registry", "protobuf-confluent",
                    "raw", "debezium-json", "debezium-avro-confluent"]
    avro_schema: dict[str, Any]
    dead_letter_topic: str
    lateness: tuple[Lateness, ...]
    max_future_ms: int | None
    position: Position
    #: An ``avro-confluent`` or ``json-registry`` table's schema registry client settings:
    #: ``url`` (the table's
    #: ``'schema-registry.url'``, else ``tidemark run``'s setting) and, with credentials,
    #: ``basic.auth.user.info``; ``tidemark run`` completes them from its settings.
    schema_registry: dict[str, str] | None = None
    #: Where a new checkpoint starts reading the topic (``'scan.startup.mode'``): at each
    #: partition's first record, at its end, or at the first record whose Kafka timestamp is
    #: at least ``startup_timestamp_ms``. A checkpoint with offsets continues from them.
    startup_mode: Literal["earliest-offset", "latest-offset", "timestamp"] = "earliest-offset"
    startup_timestamp_ms: int | None = None
    #: ``PRIMARY KEY (...) NOT ENFORCED``: NOT NULL columns, in declared order, that make
    #: the table a versioned table of a temporal join (S16): its rows read as the versions
    #: of each key over the table's first LATENESS column. Not enforced: the table stays
    #: insert-only (S2), every row of a key is one more version; keyed by its Kafka key, a
    #: tombstone ends its key's version (:attr:`deletes_by_tombstone`). Empty: no key.
    primary_key: tuple[str, ...] = field(default=(), metadata=OMIT_DEFAULT)
    #: A stage boundary's table (SPEC S19, ADR 0023): it reads the internal topic of the view
    #: it is named after, and its LATENESS columns (amount 0) move only by the punctuations
    #: that view's query writes after each step (the view's waterlines), never by row values.
    stage_input: str | None = field(default=None, metadata=OMIT_DEFAULT)
    #: Of a stage boundary's table, its time attributes derived from a LATENESS column (a
    #: ``window_start`` beside its ``window_end``, app/program/stages.py).
    derived_attributes: tuple[TimeAttribute, ...] = field(default=(), metadata=OMIT_DEFAULT)
    #: Flink's ``'properties.bootstrap.servers'``: the cluster the program names for the
    #: table's topic, which ``tidemark run`` checks is its own (S15: one cluster).
    bootstrap_servers: str | None = field(default=None, metadata=OMIT_DEFAULT)
    #: ``'key.format'``: how the Kafka key is decoded (``raw``, ``avro``, ``avro-confluent``
    #: or ``json``), into the columns of ``key_fields`` (``'key.fields'``, in the key's field
    #: order). Those of them with ``metadata == "key"`` take their values from the key; the
    #: others (Flink's ``'value.fields-include' = 'ALL'``) from the value, the key only
    #: checked. A key that does not decode is a dead letter. None: no key format (a
    #: ``METADATA FROM 'key'`` column is the key's bytes or UTF-8 text).
    key_format: str | None = field(default=None, metadata=OMIT_DEFAULT)
    key_fields: tuple[str, ...] = field(default=(), metadata=OMIT_DEFAULT)
    #: The key's Avro schema: a record of ``key_fields``, or for one field read as a bare
    #: value (``raw``; ``avro`` and ``avro-confluent`` of a primitive writer schema) that
    #: field's type as ``{"type": T}``.
    key_schema: dict[str, Any] | None = field(default=None, metadata=OMIT_DEFAULT)
    #: ``'dead_letter.connect-headers' = 'true'``: each dead letter also carries Kafka
    #: Connect's ``__connect.errors.*`` headers (the source coordinates, stage, reason and
    #: message under Connect's names), for tools that read Connect's dead-letter queues.
    dead_letter_connect_headers: bool = field(default=False, metadata=OMIT_DEFAULT)
    #: Of a stage boundary's table of an updating view (S18, S19): its records are the
    #: view's changelog, each row's ``undo`` saying whether it retracts the row.
    retractions: bool = field(default=False, metadata=OMIT_DEFAULT)
    #: Flink's ``'connector' = 'upsert-kafka'`` input: keyed by its Kafka key (its PRIMARY
    #: KEY, :attr:`deletes_by_tombstone`), each record an upsert of its key and a tombstone
    #: its deletion, so a :attr:`changelog` table (ADR 0030).
    upserts: bool = field(default=False, metadata=OMIT_DEFAULT)

    @property
    def deletes_by_tombstone(self) -> bool:
        """The table's PRIMARY KEY is its Kafka key (one column ``METADATA FROM 'key'``): a
        tombstone (a null value) is the deletion of its key at its time, as on a compacted
        topic, which ends the key's last version for a temporal join (S16)."""
        return (len(self.primary_key) == 1 or self.key_format is not None) and bool(
            self.primary_key) and all(self.column(k).metadata == "key" for k in self.primary_key)

    @property
    def changelog(self) -> bool:
        """The table's records are changes of a keyed table: Debezium change events
        (``'format' = 'debezium-json'``), whose creates and updates are versions of their key
        and a delete event the deletion of its key (ADR 0028), or upserts by Kafka key
        (:attr:`upserts`), a tombstone deleting. Views other than a temporal join read it as
        its latest row per key, the generated view ``<table>.latest`` (ADR 0030)."""
        return self.format in CHANGELOG_FORMATS or self.upserts

    @property
    def deletes_keys(self) -> bool:
        """Records of the table may delete keys: its tombstones
        (:attr:`deletes_by_tombstone`) or its delete events (:attr:`changelog`). A deletion
        ends its key's last version for a temporal join (S16) and, of a changelog table,
        takes its key out of the view of its latest row per key (ADR 0030); it reaches no
        other view."""
        return self.deletes_by_tombstone or self.changelog

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(name)


#: The column a row of an updating relation's changes carries on Spark, true when the row
#: retracts one written before (S18; a changelog's ``undo``).
RETRACTION_COLUMN = "_undo"

#: The column the view of a changelog table's latest row per key (:attr:`View.reads_deletions`,
#: ADR 0030) reads beside the table's columns: true for a deletion of the key (a delete
#: event, a tombstone), whose value columns are NULL; false for a row. No other view sees
#: deletions but a temporal join, which reads them as versions without a row (ADR 0018).
DELETION_COLUMN = "_tidemark_deleted"

#: The aggregate of that view: ``LATEST(value, by)`` is ``value`` of the row with the greatest
#: ``by`` (the table's first LATENESS column), ties going to the *latest* row in arrival
#: order, as a later version of a key at the same time replaces it for a temporal join
#: (S16). Generated by the compiler only (no program names it); never retracted.
LATEST = "LATEST"

#: The aggregate of an upsert view over updating rows (ADR 0032): ``HELD(i, c1, ..., cn)`` is
#: ``c<i+1>`` of the group's latest-added row still held, its rows a Z-set of whole rows
#: ``(c1, ..., cn)`` (a retraction takes one copy back). A key whose rows are all taken back
#: has none (its group is deleted). Generated by the compiler only.
HELD = "HELD"


@dataclass(frozen=True)
class View:
    """A view (SPEC L3): ``sources`` are the tables or earlier views it reads (one, or one per
    branch of a :class:`UnionAll`), ``operators`` run in order over its rows, ``columns`` is
    the output schema, ``key`` the GROUP BY output columns (the upsert key; empty for stateless
    views). ``output`` is None for local views."""

    name: str
    sources: tuple[str, ...]
    operators: tuple[Operator, ...]
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    time_attributes: tuple[TimeAttribute, ...]
    emit: EmitPolicy
    output: Output | None
    state: StateBound
    position: Position
    lateness: tuple[ViewLateness, ...] = ()

    @property
    def source(self) -> str:
        """The one relation a single-input view reads. A UNION ALL or JOIN view reads several:
        use ``sources``; asking it for one is a mistake, never answered with one input."""
        if len(self.sources) != 1:
            what = "a JOIN" if self.join is not None else "a UNION ALL"
            raise ValueError(f"view {self.name} is {what} of {', '.join(self.sources)}: "
                             "read view.sources")
        return self.sources[0]

    @property
    def join(self) -> Join | None:
        """The view's JOIN (its first operator), or None."""
        return next((op for op in self.operators if isinstance(op, Join)), None)

    @property
    def over(self) -> Over | None:
        """The view's OVER aggregates, or None."""
        return next((op for op in self.operators if isinstance(op, Over)), None)

    @property
    def union(self) -> UnionAll | None:
        """The view's UNION ALL (its only operator), or None."""
        return next((op for op in self.operators if isinstance(op, UnionAll)), None)

    @property
    def top_n(self) -> TopN | None:
        """The view's window Top-N, or None."""
        return next((op for op in self.operators if isinstance(op, TopN)), None)

    @property
    def is_stateless(self) -> bool:
        return not any(isinstance(op, Aggregate | TopN) for op in self.operators)

    @property
    def reads_deletions(self) -> bool:
        """The view is a changelog table's latest row per key (ADR 0030): its aggregate
        reads the table's deletions too, each as a row whose :data:`DELETION_COLUMN` is
        true."""
        return any(isinstance(op, Aggregate) and any(call.fn == LATEST
                                                     for _, call in op.aggregates)
                   for op in self.operators)

    @property
    def holds_changes(self) -> bool:
        """An updating aggregate with EMIT AFTER DELAY: it writes a group's change up to d
        after the step it is known, so after the waterline may have passed the group. Its
        columns are no time attributes for its readers (S10, S11: none of their groups could
        be freed on them)."""
        return (self.emit.delay_ms is not None and not self.emit.after_watermark
                and any(isinstance(op, Aggregate) for op in self.operators))


@dataclass(frozen=True)
class Circuit:
    """A whole compiled program. ``views`` are in dependency order."""

    program: str
    tables: tuple[Table, ...]
    views: tuple[View, ...]
    warnings: tuple[Diagnostic, ...] = field(default=())
    #: The program's text, which the planner compiles again with stage boundaries
    #: (app/runtime/planner/compose.py); empty for a circuit made without one.
    text: str = field(default="", compare=False, repr=False)
    #: How the program reads where Flink SQL and Tidemark differ (docs/semantics.md, Flink
    #: dialect): ``flink`` when its tables name a ``'connector'`` (or SET
    #: ``'tidemark.dialect'`` says so). The compiler applies it; the IR it builds is the same.
    dialect: Literal["tidemark", "flink"] = "tidemark"

    def table(self, name: str) -> Table:
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(name)

    def view(self, name: str) -> View:
        for view in self.views:
            if view.name == name:
                return view
        raise KeyError(name)

    def root_table(self, relation: str) -> Table:
        """The table a view (or table) ultimately reads through single-input views.

        Raises:
            ValueError: the relation reads a UNION ALL (several inputs); see
                :meth:`union_upstream`.
        """
        seen = relation
        while True:
            try:
                return self.table(seen)
            except KeyError:
                seen = self.view(seen).source

    def updating(self, relation: str) -> bool:
        """S18: the relation's rows are updated, so its readers see retractions: an
        aggregate without EMIT AFTER WATERMARK, a stage boundary's table of one
        (:attr:`Table.retractions`), a stateless view of an updating relation, a UNION
        ALL with a branch over one (S17: it passes every branch's changes on), a JOIN of
        one (S16: only a join without a time bound reads one; each pair's change has the
        product of its rows' weights), or an OUTER join without a time bound of any input
        (it retracts its padded rows, :attr:`Join.pads_at_once`)."""
        if any(t.name == relation for t in self.tables):
            return self.table(relation).retractions
        view = self.view(relation)
        if any(isinstance(op, Aggregate) for op in view.operators):
            return not view.emit.after_watermark
        if view.join is not None and view.join.pads_at_once:
            return True
        if view.union is not None or view.join is not None:
            return any(self.updating(source) for source in view.sources)
        if not view.is_stateless:
            return False
        return self.updating(view.source)

    def join_upstream(self, relation: str) -> str | None:
        """The nearest JOIN view ``relation`` is or reads (through any views), or None."""
        pending = [relation]
        while pending:
            name = pending.pop(0)
            if any(t.name == name for t in self.tables):
                continue
            view = self.view(name)
            if view.join is not None:
                return view.name
            pending.extend(view.sources)
        return None

    def union_upstream(self, relation: str) -> str | None:
        """The nearest UNION ALL view ``relation`` is or reads (through any views), or None."""
        pending = [relation]
        while pending:
            name = pending.pop(0)
            if any(t.name == name for t in self.tables):
                continue
            view = self.view(name)
            if len(view.sources) > 1 or view.union is not None:
                return view.name
            pending.extend(view.sources)
        return None
