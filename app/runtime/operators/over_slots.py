"""The rules of one slot of the OVER operator (ADR 0019), in plain Python: what
:mod:`app.runtime.operators.over_operator` runs in each slot's call. The processor Spark
unpickles names this module, so it imports nothing of the Spark plan (the driver runs the
processor's pre-init in a fresh Python process each time a query starts)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.circuit.ir import Over
from app.circuit.over import Held, OverPartition
from app.runtime.operators.slot_operator import (
    advance_waterlines,
    decode_value,
    encode_value,
    is_set,
)

__all__ = ["OverOperatorSpec", "rows_held", "step_slot"]


@dataclass(frozen=True)
class OverOperatorSpec:
    """What a slot's call needs: the Over, the LATENESS (in the ORDER BY column's unit) of
    the table column it forwards, and the SQL type names of each aggregate's argument
    (``""`` for COUNT(*)) and result."""

    over: Over
    lateness: int
    arg_types: tuple[str, ...]
    result_types: tuple[str, ...]

    @classmethod
    def of(cls, over: Over, lateness: int) -> OverOperatorSpec:
        return cls(
            over,
            lateness,
            tuple(call.args[0].type.name if call.args else "" for _, call in over.aggregates),
            tuple(call.type.name for _, call in over.aggregates),
        )


def step_slot(
    spec: OverOperatorSpec, doc: dict[str, Any] | None, rows: list[dict[str, Any]]
) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    """One step of one slot: the rows written (``row``, ``res``) and the new state, from the
    state before the step and the step's wire rows (side ``O`` for a row, ``P`` a probe)."""
    doc = doc or {"w": {"T": None}, "step": 0, "parts": {}}
    doc["step"] += 1
    advance_waterlines(doc["w"], rows, {"T": spec.lateness})

    def encode(index: int, value: Any) -> Any:
        return encode_value(value, spec.arg_types[index])

    def decode(index: int, value: Any) -> Any:
        return decode_value(value, spec.arg_types[index])

    parts = {
        key: OverPartition.from_doc(spec.over, part, decode)
        for key, part in doc["parts"].items()
    }
    arrivals = sorted((r for r in rows if r["side"] == "O"), key=lambda r: (r["pt"], r["of"]))
    for r in arrivals:
        given = json.loads(r["vals"]) if is_set(r["vals"]) else {}
        args = tuple(
            (decode(i, given.get(f"a{i}")),) if spec.arg_types[i] else ()
            for i in range(len(spec.arg_types))
        )
        seq = [doc["step"], int(r["pt"]), int(r["of"])]
        parts.setdefault(r["k"], OverPartition()).add(Held(int(r["t"]), seq, args, r["row"]))
    out: list[tuple[Any, ...]] = []
    names = [name for name, _ in spec.over.aggregates]
    for part in parts.values():
        for payload, values in part.release(spec.over, doc["w"]["T"]):
            results = {
                name: encode_value(value, kind)
                for name, value, kind in zip(names, values, spec.result_types, strict=True)
            }
            out.append((payload, json.dumps(results, separators=(",", ":"))))
    doc["parts"] = {key: part.to_doc(encode) for key, part in parts.items() if not part.empty}
    return out, doc


def rows_held(doc: dict[str, Any]) -> int:
    """The rows a slot's state document holds (S11), as the reference evaluator counts them
    (:attr:`app.circuit.over.OverPartition.rows_held`: running aggregates count as one)."""
    return sum(
        len(part["written"]) + len(part["waiting"]) + (part["running"] is not None)
        for part in doc["parts"].values()
    )
