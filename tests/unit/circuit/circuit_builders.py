"""Hand-built circuits and step inputs for the reference evaluator's tests.

The compiler builds the same IR from SQL; these builders let the oracle's tests state a circuit
exactly (one operator per SQL clause) and keep working whatever the compiler's state.
Times are written as ``"8:07"`` on 2024-01-01 UTC and turned into epoch ms by :func:`at`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from app.circuit.ir import (
    AggCall,
    Aggregate,
    Circuit,
    Column,
    ColumnRef,
    EmitPolicy,
    Expr,
    Filter,
    Lateness,
    Operator,
    Output,
    Position,
    Project,
    SqlType,
    StateBound,
    Table,
    TimeAttribute,
    View,
    ViewLateness,
    Window,
)
from app.circuit.reference import OutputRecord, Punctuation, StepInput, StepResult

HERE = Position("test.sql", 1, 1)
DAY = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS

TIMESTAMP = SqlType("TIMESTAMP", nullable=False)
BIGINT = SqlType("BIGINT", nullable=False)
BIGINT_NULL = SqlType("BIGINT")
INT_NULL = SqlType("INT")
VARCHAR = SqlType("VARCHAR")
DOUBLE = SqlType("DOUBLE")
MONEY = SqlType("DECIMAL", True, 10, 2)


def at(clock: str, day: dt.datetime = DAY) -> int:
    """Epoch ms of ``"H:MM"`` (or ``"H:MM:SS"``) on the test day."""
    parts = [int(p) for p in clock.split(":")]
    hours, minutes, seconds = (parts + [0, 0])[:3]
    moment = day + dt.timedelta(hours=hours, minutes=minutes, seconds=seconds)
    return int(moment.timestamp() * 1000)


def money(amount: str | int) -> Decimal:
    return Decimal(str(amount)).quantize(Decimal("0.01"))


def ref(name: str, type_: SqlType) -> ColumnRef:
    return ColumnRef(name, type_)


def make_table(
    name: str,
    columns: Sequence[Column],
    lateness: Mapping[str, int] | None = None,
    max_future_ms: int | None = None,
) -> Table:
    return Table(
        name=name,
        columns=tuple(columns),
        topic=name,
        format="avro",
        avro_schema={},
        dead_letter_topic=f"{name}.dlq",
        lateness=tuple(Lateness(c, amount) for c, amount in (lateness or {}).items()),
        max_future_ms=max_future_ms,
        position=HERE,
    )


def make_view(
    name: str,
    source: str,
    operators: Sequence[Operator],
    columns: Sequence[Column],
    *,
    key: Sequence[str] = (),
    time_attributes: Sequence[TimeAttribute] = (),
    emit: EmitPolicy | None = None,
    fmt: str | None = None,
    lateness: Sequence[tuple[str, int]] = (),
) -> View:
    """A view; ``fmt`` None makes it local, else an output on topic ``name``."""
    output = None
    if fmt is not None:
        output = Output(
            topic=name,
            format=fmt,  # type: ignore[arg-type]
            key_columns=tuple(key) if fmt != "append" else (),
            key_schema=None,
            value_schema={},
        )
    is_windowed = any(isinstance(op, Window) for op in operators)
    has_agg = any(isinstance(op, Aggregate) for op in operators)
    state = StateBound("none")
    if has_agg:
        state = StateBound("window", "window_end") if is_windowed else StateBound("unbounded")
    return View(
        name=name,
        sources=(source,),
        operators=tuple(operators),
        columns=tuple(columns),
        key=tuple(key),
        time_attributes=tuple(time_attributes),
        emit=emit or EmitPolicy(),
        output=output,
        state=state,
        position=HERE,
        lateness=tuple(ViewLateness(name, c, amount, HERE) for c, amount in lateness),
    )


def agg(fn: str, *args: Expr, type_: SqlType, distinct: bool = False) -> AggCall:
    return AggCall(fn, tuple(args), distinct, type_)


def circuit(tables: Iterable[Table], views: Iterable[View]) -> Circuit:
    return Circuit("test.sql", tuple(tables), tuple(views))


def tumble(column: str, size: int, offset: int = 0) -> Window:
    return Window("TUMBLE", column, size, size, offset)


def hop(column: str, slide: int, size: int, offset: int = 0) -> Window:
    return Window("HOP", column, size, slide, offset)


def window_attributes(table: str, column: str) -> tuple[TimeAttribute, ...]:
    return (
        TimeAttribute("window_start", table, column, "window_start"),
        TimeAttribute("window_end", table, column, "window_end"),
    )


def grouped(
    keys: Sequence[tuple[str, Expr]],
    aggregates: Sequence[tuple[str, AggCall]],
    *,
    having: Expr | None = None,
    project: Sequence[tuple[str, Expr]] | None = None,
) -> list[Operator]:
    ops: list[Operator] = [Aggregate(tuple(keys), tuple(aggregates))]
    if having is not None:
        ops.append(Filter(having))
    if project is not None:
        ops.append(Project(tuple(project)))
    return ops


# ---------------------------------------------------------------------------------------------
# Reading results.


def records(results: Iterable[StepResult], view: str) -> list[OutputRecord]:
    return [r for result in results for r in result.outputs.get(view, ())]


def values(results: Iterable[StepResult], view: str) -> list[dict[str, Any] | None]:
    return [None if r.value is None else dict(r.value) for r in records(results, view)]


def materialize(results: Iterable[StepResult], view: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The table an upsert consumer holds after reading the records (tombstones delete)."""
    table: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records(results, view):
        assert record.key is not None, "materialize() is for keyed (upsert) outputs"
        key = tuple(record.key.values())
        if record.value is None:
            table.pop(key, None)
        else:
            table[key] = dict(record.value)
    return table


# ---------------------------------------------------------------------------------------------
# Seed 001's data set (paper section 4), as steps. Each line is one step at its processing
# time; "WM -> x" is a punctuation with bound x + LATENESS_MS, which puts the waterline at x.

LATENESS_MS = 10 * MINUTE_MS

DATA_SET: list[tuple[str, tuple[Any, ...]]] = [
    ("8:07", ("wm", "8:05")),
    ("8:08", ("insert", "8:07", 2, "A")),
    ("8:12", ("insert", "8:11", 3, "B")),
    ("8:13", ("insert", "8:05", 4, "C")),
    ("8:14", ("wm", "8:08")),
    ("8:15", ("insert", "8:09", 5, "D")),
    ("8:16", ("wm", "8:12")),
    ("8:17", ("insert", "8:13", 1, "E")),
    ("8:18", ("insert", "8:17", 6, "F")),
    ("8:21", ("wm", "8:20")),
]


def paper_steps(table: str = "bid", price: Callable[[int], Any] = money) -> list[StepInput]:
    steps = []
    for ptime, event in DATA_SET:
        if event[0] == "wm":
            bound = at(event[1]) + LATENESS_MS
            steps.append(StepInput({}, at(ptime), punctuations={table: [Punctuation(bound)]}))
        else:
            _, bidtime, amount, item = event
            row = {"bidtime": at(bidtime), "price": price(amount), "item": item}
            steps.append(StepInput({table: [row]}, at(ptime)))
    return steps
