"""The S14 waterline of every output view, from its query's table waterlines, in one place.

A query's waterline map holds its tables' LATENESS columns (``"<column>"`` for a query of one
table, ``"<table>.<column>"`` for several) and its views' own LATENESS columns. An output
view's waterline is one of those, or a key of its own: a UNION ALL's or JOIN's column, the
minimum of its inputs each less its lag (S16, S17, ``merged``), or a derived time attribute,
the steps of its base key's waterline (S10, ``derived``). The step sink's driver (headers and
metrics) and the writing tasks of a one-job step (ADR 0008) both complete the map here.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.circuit.waterline import WaterlineStep, derived_waterline, merged_waterline

__all__ = ["DerivedInput", "MergedInput", "view_waterlines"]

#: A key of the map and how far below it a merged waterline follows it (``w - lag``).
MergedInput = tuple[str, int]
#: A key of the map and the steps of a derived time attribute over its waterline.
DerivedInput = tuple[str, tuple[WaterlineStep, ...]]


def view_waterlines(
    waterlines: Mapping[str, int | None],
    units: Mapping[str, str],
    merged: Mapping[str, tuple[MergedInput, ...]],
    derived: Mapping[str, DerivedInput],
) -> tuple[dict[str, int | None], dict[str, str]]:
    """The map with every ``derived`` key whose base is a key of ``waterlines`` (a table's
    derived attribute, an input of a merged key), then every ``merged`` key, then every other
    ``derived`` key (whose base is a merged key), and each key's unit."""
    out = dict(waterlines)
    out_units = dict(units)
    later = {key: entry for key, entry in derived.items() if entry[0] not in waterlines}
    for key, (base, steps) in derived.items():
        if key not in later:
            out[key] = derived_waterline(steps, out.get(base))
            out_units[key] = out_units[base]
    for key, inputs in merged.items():
        out[key] = merged_waterline(
            None if (w := out.get(k)) is None else w - lag for k, lag in inputs
        )
        out_units[key] = out_units[inputs[0][0]]
    for key, (base, steps) in later.items():
        out[key] = derived_waterline(steps, out.get(base))
        out_units[key] = out_units[base]
    return out, out_units
