"""Tidemark's own operators on ``transformWithStateInPandas`` (ADR 0017, ADR 0019): what the
join operator (app/runtime/operators/join_operator.py) and the OVER operator
(app/runtime/operators/over_operator.py) share.

- **Slots.** Rows are grouped by a slot, a hash of their key (``k``, the key values as JSON)
  into :data:`SLOTS`, and the operator runs with no time mode (Spark drops and times out
  nothing).
- **Probes.** Each table's probe rows (the step's maxima, punctuation included, ADR 0001)
  are copied to every slot (:func:`probe_wire`), so every slot is called in every step that
  reads the table and computes the table's waterline w(t) itself by the step sink's rule (S3,
  :func:`advance_waterlines` over :func:`app.circuit.waterline.next_waterline`).
- **Wire rows.** One schema for every row an operator reads (:data:`WIRE`): ``slot``,
  ``side`` (an operator's own name for the row's input; ``P`` for a probe), ``k``, ``t``
  (the row's time in the column's unit, ms for a TIMESTAMP; a probe's: its table's step
  maximum), ``tbl`` (a probe's table), ``pt`` and ``of`` (arrival: Kafka partition and
  offset), ``row`` (the input's columns as Spark's ``to_json``, given back by ``from_json``)
  and ``vals`` (values the operator computes with, :func:`value_sql`, read back exactly by
  :func:`decode_values` in the reference evaluator's representation).
- **State.** A slot's state is one JSON document (value state ``slot``, one string column
  ``doc``), so it does not depend on Python's pickle; it is checkpointed with the step's
  offsets, so a replayed step starts from the state the first run started from (S15).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from functools import reduce
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import StringType, StructField, StructType

from app.circuit.ir import SqlType
from app.circuit.waterline import next_waterline

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "SLOTS",
    "SlotStep",
    "advance_waterlines",
    "decode_value",
    "decode_values",
    "encode_value",
    "is_set",
    "keyed_slot",
    "probe_wire",
    "run_slots",
    "value_sql",
    "wire_row",
]

#: How many groups an operator's state is spread over (part of the checkpoint's state
#: layout: a slot's rows are found by this number).
SLOTS = 16

_STATE = StructType([StructField("doc", StringType())])

#: One step of one slot: its output rows and its new state document, from its state
#: document before the step (None at first) and the step's wire rows (dicts).
SlotStep = Callable[
    [dict[str, Any] | None, list[dict[str, Any]]], tuple[list[tuple[Any, ...]], dict[str, Any]]
]


class _Slot(StatefulProcessor):
    """One slot: loads its document, runs ``step``, stores the new document."""

    def __init__(self, step: SlotStep, columns: Sequence[str]) -> None:
        self.step = step
        self.columns = list(columns)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("slot", _STATE)

    def handleInputRows(  # noqa: N802 - Spark's name
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        import pandas as pd

        frame = pd.concat(list(rows), ignore_index=True)
        stored = self.state.get() if self.state.exists() else None
        doc = json.loads(stored[0]) if stored is not None else None
        out, doc = self.step(doc, frame.to_dict("records"))
        self.state.update((json.dumps(doc, separators=(",", ":")),))
        if out:
            yield pd.DataFrame(out, columns=self.columns)

    def close(self) -> None:
        return None


def run_slots(wire: Sequence[DataFrame], step: SlotStep, out: StructType) -> DataFrame:
    """The rows ``step`` writes over the union of the ``wire`` rows, grouped by slot."""
    return reduce(DataFrame.unionByName, wire).groupBy("slot").transformWithStateInPandas(
        _Slot(step, out.fieldNames()), out, "Append", "None"
    )


def keyed_slot(key: Column) -> Column:
    """The slot of a row by its key as JSON (a NULL key: a slot too)."""
    return F.pmod(F.xxhash64(key), F.lit(SLOTS)).cast("int")


def wire_row(
    slot: Column, side: str, key: Column, time: Column, row: Column, vals: Column
) -> list[Column]:
    """The :data:`WIRE` columns of an input row (arrival from ``_partition``/``_offset``)."""
    return [
        slot.alias("slot"),
        F.lit(side).alias("side"),
        key.alias("k"),
        time.cast("long").alias("t"),
        F.lit(None).cast("string").alias("tbl"),
        F.col("_partition").cast("long").alias("pt"),
        F.col("_offset").cast("long").alias("of"),
        row.alias("row"),
        vals.alias("vals"),
    ]


def probe_wire(probes: DataFrame, table: str) -> DataFrame:
    """A table's probe rows (one column ``t``, the step's maximum) copied to every slot."""
    return probes.select(
        F.explode(F.sequence(F.lit(0), F.lit(SLOTS - 1))).alias("slot"),
        F.lit("P").alias("side"),
        F.lit(None).cast("string").alias("k"),
        F.col("t").cast("long").alias("t"),
        F.lit(table).alias("tbl"),
        F.lit(0).cast("long").alias("pt"),
        F.lit(0).cast("long").alias("of"),
        F.lit(None).cast("string").alias("row"),
        F.lit(None).cast("string").alias("vals"),
    )


def advance_waterlines(
    waterlines: dict[str, int | None], rows: Sequence[Mapping[str, Any]],
    lateness: Mapping[str, int],
) -> None:
    """S3 for each table of ``lateness`` (by its ``tbl`` name) over the step's probe rows."""
    for table, amount in lateness.items():
        tops = [int(r["t"]) for r in rows if r["side"] == "P" and r["tbl"] == table
                and is_set(r["t"])]
        if tops:
            waterlines[table] = next_waterline(waterlines[table], max(tops), amount)


def is_set(value: Any) -> bool:
    """Not NULL (pandas gives NaN or None for a NULL)."""
    if value is None:
        return False
    if isinstance(value, str | bytes | int):
        return True
    if isinstance(value, float):
        return value == value  # NaN is the one float unequal to itself
    import pandas as pd

    return not pd.isna(value)


def value_sql(column: str, kind: SqlType) -> Column:
    """One column's value on the wire: times as epoch ms or days, integers and text as they
    are, every other type as text that :func:`decode_value` reads back exactly."""
    quoted = F.col(f"`{column}`")
    if kind.name == "TIMESTAMP":
        return F.expr(f"unix_millis(`{column}`)")
    if kind.name == "DATE":
        return F.expr(f"unix_date(`{column}`)")
    if kind.name in ("INT", "BIGINT", "VARCHAR"):
        return quoted
    if kind.name == "VARBINARY":
        return F.base64(quoted)
    return quoted.cast("string")


def decode_values(text: str | None, types: Mapping[str, str]) -> dict[str, Any]:
    """The values of a row's ``vals`` (JSON of :func:`value_sql` columns) by column, in the
    reference evaluator's representation (app/circuit/scalar.py)."""
    return {
        name: decode_value(value, types[name])
        for name, value in (json.loads(text) if text else {}).items()
    }


def decode_value(value: Any, kind: str) -> Any:
    """One wire or state value of SQL type ``kind`` as the reference evaluator holds it."""
    if value is None or kind in ("VARCHAR", "TIMESTAMP", "DATE", "INT", "BIGINT"):
        return value
    if kind == "BOOLEAN":
        return value in ("true", True)
    if kind == "DECIMAL":
        return Decimal(value)
    if kind in ("REAL", "DOUBLE"):
        return float(value)
    return base64.b64decode(value)


def encode_value(value: Any, kind: str) -> Any:
    """:func:`decode_value`'s inverse: a JSON value (a string for decimals, doubles, booleans
    and bytes, so each is read back exactly)."""
    if value is None or kind in ("VARCHAR", "TIMESTAMP", "DATE", "INT", "BIGINT"):
        return value
    if kind == "BOOLEAN":
        return "true" if value else "false"
    if kind in ("DECIMAL", "REAL", "DOUBLE"):
        return str(value) if kind == "DECIMAL" else repr(float(value))
    return base64.b64encode(value).decode("ascii")
