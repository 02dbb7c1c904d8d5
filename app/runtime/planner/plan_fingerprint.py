"""The plan fingerprint: what a checkpoint's state depends on, as one canonical document.

A checkpoint holds state that only the plan that made it can read correctly: Spark's state
operators in the order of the query's branches, the shared Python operator's pickled groups
keyed by ``(view, key)`` (ADR 0003), and each table's waterlines (S3). Spark checks none of the
facts below: a changed window size, a new aggregate view or a larger LATENESS runs on an old
checkpoint and silently gives wrong results. So the plan is described as a JSON document
(:func:`plan_fingerprint`), stored with the checkpoint, and compared by ``tidemark run`` before
Spark starts (:func:`compare_plans`, docs/adr/0015-checkpoint-compatibility-guard.md).

The document holds, per table, its topic, columns, value schema, LATENESS, dead-letter topic
and query; per view, its query (the IR, as a digest, and readable windows, keys, aggregates and
EMIT), its output binding, where it is computed and which state operator holds its state; per
query, its state layout (its stateful operators in Spark's order) and step shape; and the
Tidemark ``major.minor`` version. It holds nothing that does not reach a step: no file path, no
line number (a comment or a moved statement changes nothing), no registry URL or credential.
Its :attr:`PlanFingerprint.digest` is the SHA-256 of its canonical JSON text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from decimal import Decimal
from typing import Any

from app import __version__
from app.circuit.explain import duration_text, emit_clause, expr_text
from app.circuit.ir import (
    OMIT_DEFAULT,
    AggCall,
    Aggregate,
    Circuit,
    Column,
    Expr,
    Position,
    SqlType,
    View,
    Window,
)
from app.runtime.planner.physical import PhysicalPlan, QueryPlan, physical_plan

__all__ = [
    "FINGERPRINT_FORMAT",
    "PlanChange",
    "PlanComparison",
    "PlanFingerprint",
    "canonical_json",
    "compare_plans",
    "plan_fingerprint",
    "state_version",
]

#: The version of the document's shape. A document of a newer shape is never compared (the
#: rules below do not know its fields): ``tidemark run`` refuses it.
FINGERPRINT_FORMAT = 1


def state_version(version: str = __version__) -> str:
    """``major.minor`` of a Tidemark version: the formats of the state it writes (pickled
    groups, step files) change only with it, so a patch release continues any checkpoint."""
    parts = version.split(".")
    return ".".join(parts[:2])


def canonical_json(document: Mapping[str, Any]) -> str:
    """The one text of a document that its digest is computed over: sorted keys, no spaces,
    ASCII."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical_json({"v": plain_value(value)}).encode()).hexdigest()


def plain_value(value: Any) -> Any:
    """A JSON value for an IR or plan value: dataclasses as objects tagged with their class
    (their :class:`Position` left out: where a statement is in the file changes no plan;
    so is a field marked :data:`~app.circuit.ir.OMIT_DEFAULT` that holds its default),
    tuples as lists, decimals and bytes as text."""
    if is_dataclass(value) and not isinstance(value, type):
        data = {
            f.name: plain_value(getattr(value, f.name))
            for f in fields(value)
            if not isinstance(getattr(value, f.name), Position)
            and not (f.metadata == OMIT_DEFAULT and getattr(value, f.name) == f.default)
        }
        return {"node": type(value).__name__, **data}
    if isinstance(value, tuple | list):
        return [plain_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain_value(v) for k, v in value.items()}
    if isinstance(value, Decimal):
        return f"decimal:{value}"
    if isinstance(value, bytes):
        return f"bytes:{value.hex()}"
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return f"{type(value).__name__}:{value}"


@dataclass(frozen=True)
class PlanFingerprint:
    """The plan's canonical document and its digest (hex SHA-256 of :func:`canonical_json`)."""

    document: dict[str, Any]
    digest: str

    @classmethod
    def of(cls, document: dict[str, Any]) -> PlanFingerprint:
        return cls(document, hashlib.sha256(canonical_json(document).encode()).hexdigest())


def _columns_of(circuit: Circuit, relation: str) -> tuple[Column, ...]:
    try:
        return circuit.table(relation).columns
    except KeyError:
        return circuit.view(relation).columns


def _column_type(circuit: Circuit, relation: str, column: str) -> SqlType | None:
    return next((c.type for c in _columns_of(circuit, relation) if c.name == column), None)


def _window_entry(window: Window, unit_type: SqlType | None) -> dict[str, Any]:
    size = duration_text(window.size, unit_type)
    if window.kind == "TUMBLE":
        text = f"TUMBLE {size} on {window.time_column}"
    elif window.kind == "CUMULATE":
        step = duration_text(window.slide, unit_type)
        text = f"CUMULATE {size} by {step} on {window.time_column}"
    elif window.kind == "SESSION":
        text = f"SESSION gap {size} on {window.time_column}"
    else:
        text = f"HOP {size} every {duration_text(window.slide, unit_type)} on {window.time_column}"
    if window.offset:
        text += f" offset {duration_text(window.offset, unit_type)}"
    return {
        "kind": window.kind,
        "time_column": window.time_column,
        "size": window.size,
        "slide": window.slide,
        "offset": window.offset,
        "text": text,
    }


def _windows(circuit: Circuit, view: View) -> list[dict[str, Any]]:
    found = []
    for op in view.operators:
        if isinstance(op, Window):
            found.append(_window_entry(op, _column_type(circuit, view.sources[0], op.time_column)))
    if view.union is not None:
        for branch in view.union.branches:
            for op in branch.operators:
                if isinstance(op, Window):
                    unit = _column_type(circuit, branch.source, op.time_column)
                    found.append(_window_entry(op, unit))
    return found


def _agg_text(call: AggCall) -> str:
    if call.fn == "COUNT" and not call.args:
        return "COUNT(*)"
    inner = ", ".join(expr_text(a) for a in call.args)
    return f"{call.fn}({'DISTINCT ' if call.distinct else ''}{inner})"


def _key_text(name: str, expr: Expr) -> str:
    text = expr_text(expr)
    return name if text == name else f"{text} AS {name}"


def _view_ir(view: View) -> dict[str, Any]:
    """What a view computes, without where it is written: its inputs, operators, own
    LATENESS and EMIT (a reader of an AFTER WATERMARK view sees final rows only, S18)."""
    return {
        "sources": list(view.sources),
        "operators": plain_value(view.operators),
        "lateness": [[v.column, v.amount] for v in view.lateness],
        "emit": plain_value(view.emit),
    }


def _upstream_views(circuit: Circuit, view: View) -> list[str]:
    """The views ``view`` reads through any views, sorted by name."""
    tables = {t.name for t in circuit.tables}
    found: set[str] = set()
    pending = list(view.sources)
    while pending:
        name = pending.pop()
        if name in tables or name in found:
            continue
        found.add(name)
        pending.extend(circuit.view(name).sources)
    return sorted(found)


def _state_operator(query: QueryPlan, view: str) -> str | None:
    """The name of the stateful operator that holds ``view``'s state, as in the query's
    layout (:func:`_state_layout`), or None for a stateless view."""
    entry = next(v for v in query.views if v.view == view)
    if entry.placement == "native":
        return f"native {view}"
    if entry.placement == "state_operator":
        return "python"
    if entry.state in ("join", "join_operator", "unbounded") and " JOIN " in entry.source:
        return f"join {view}"
    if entry.state == "over_operator":
        return f"over {view}"
    return None


def _state_layout(query: QueryPlan) -> list[dict[str, Any]]:
    """The query's stateful operators in the order Spark numbers them (its branches'
    order, :attr:`~app.runtime.planner.physical.QueryPlan.state_operators`), each with the views
    whose state it holds; the one Python operator serves every ``state_operator`` view."""
    layout: list[dict[str, Any]] = []
    outputs = [v for v in query.views if v.output]
    for v in outputs:
        if v.placement == "native":
            layout.append({"kind": "native", "views": [v.view]})
        elif v.placement == "jvm":
            # Its joins and OVER operators in circuit order (the layout of checkpoints
            # written so far).
            for w in query.views:
                operator = _state_operator(query, w.view) if w.view in v.operators else None
                if operator in (f"join {w.view}", f"over {w.view}"):
                    assert operator is not None
                    layout.append({"kind": operator.split(" ")[0], "views": [w.view]})
    # Its groups are keyed by (view, key): the order of its views is no part of its layout.
    python = sorted(v.view for v in query.views if v.placement == "state_operator")
    if python:
        layout.append({"kind": "python", "views": python})
    return layout


def _table_entry(circuit: Circuit, plan: PhysicalPlan, name: str) -> dict[str, Any]:
    table = circuit.table(name)
    return {
        "topic": table.topic,
        "format": table.format,
        "columns": [
            f"{c.name} {c.type}" + (f" METADATA FROM '{c.metadata}'" if c.metadata else "")
            for c in table.columns
        ],
        "value_schema": _digest(table.avro_schema),
        "lateness": {
            lateness.column: {
                "amount": lateness.amount,
                "text": duration_text(lateness.amount, table.column(lateness.column).type),
            }
            for lateness in table.lateness
        },
        "dead_letter": table.dead_letter_topic,
        "max_future_ms": table.max_future_ms,
        "query": plan.query_of(name).name,
        **({} if table.key_format is None else {"key_format": table.key_format}),
    }


def _view_entry(circuit: Circuit, plan: PhysicalPlan, view: View) -> dict[str, Any]:
    query = plan.query_of(view.name)
    placed = plan.placement(view.name)
    aggregate = next((op for op in view.operators if isinstance(op, Aggregate)), None)
    output = view.output
    return {
        "query": query.name,
        "sources": list(view.sources),
        "placement": placed.placement,
        "state": placed.state,
        "state_operator": _state_operator(query, view.name),
        "ir": _digest(_view_ir(view)),
        "upstream": _digest(
            {name: _view_ir(circuit.view(name)) for name in _upstream_views(circuit, view)}
        ),
        "windows": _windows(circuit, view),
        "keys": [] if aggregate is None else [_key_text(n, e) for n, e in aggregate.keys],
        "aggregates": (
            [] if aggregate is None else [_agg_text(c) for _, c in aggregate.aggregates]
        ),
        "emit": emit_clause(view) or "default",
        "lateness": {
            v.column: {"amount": v.amount, "text": duration_text(v.amount, None)}
            for v in view.lateness
        },
        "columns": [f"{c.name} {c.type}" for c in view.columns],
        "output": None
        if output is None
        else {
            "topic": output.topic,
            "format": output.format,
            "encoding": output.encoding,
            "key_columns": list(output.key_columns),
            # Only when declared, so a plan recorded before key formats compares equal.
            **({} if output.key_format is None else {"key_format": output.key_format}),
            # Only when they are not the key columns' names ('key.fields-prefix').
            **({} if not output.key_fields else {"key_fields": list(output.key_fields)}),
        },
    }


def plan_fingerprint(circuit: Circuit, plan: PhysicalPlan | None = None) -> PlanFingerprint:
    """The fingerprint of ``circuit`` run by ``plan`` (its physical plan when not given)."""
    plan = plan if plan is not None else physical_plan(circuit)
    document = {
        "fingerprint_format": FINGERPRINT_FORMAT,
        "tidemark": state_version(),
        "tables": {t.name: _table_entry(circuit, plan, t.name) for t in circuit.tables},
        "views": {v.name: _view_entry(circuit, plan, v) for v in circuit.views},
        "queries": {
            q.name: {
                "tables": list(q.tables),
                "watermark": q.watermark,
                "step_shape": q.shape,
                "writing_stage": q.writing_stage,
                "state_operators": _state_layout(q),
            }
            for q in plan.queries
        },
    }
    return PlanFingerprint.of(document)


# ---------------------------------------------------------------------------------------------
# The rules: which differences a checkpoint's state can follow (ADR 0015).


@dataclass(frozen=True)
class PlanChange:
    """One difference between the checkpoint's plan and the program's: what it is about
    (``view hourly``), what changed, and whether the checkpoint's state can follow it."""

    subject: str
    text: str
    compatible: bool

    def __str__(self) -> str:
        return f"{self.subject}: {self.text}"


@dataclass(frozen=True)
class PlanComparison:
    """The verdict of :func:`compare_plans`: every change found, and what the checkpoint's
    state keeps (each table's waterlines and offsets, each stateful view's state) when the
    program may continue it."""

    changes: tuple[PlanChange, ...]
    kept: tuple[str, ...]

    @property
    def compatible(self) -> bool:
        return all(c.compatible for c in self.changes)

    @property
    def refused(self) -> tuple[PlanChange, ...]:
        return tuple(c for c in self.changes if not c.compatible)

    @property
    def accepted(self) -> tuple[PlanChange, ...]:
        return tuple(c for c in self.changes if c.compatible)


def _stateful(entry: Mapping[str, Any]) -> bool:
    return entry.get("state_operator") is not None or entry.get("state", "none") != "none"


def _lateness_change(
    subject: str, was: Mapping[str, Any], now: Mapping[str, Any], why: str
) -> PlanChange:
    """A LATENESS change of a table or a view: never one a checkpoint can follow."""
    before = _list_text([f"{c} {v['text']}" for c, v in sorted(was["lateness"].items())])
    after = _list_text([f"{c} {v['text']}" for c, v in sorted(now["lateness"].items())])
    return PlanChange(subject, f"LATENESS {before} -> {after} ({why})", False)


def _list_text(values: list[Any]) -> str:
    return ", ".join(str(v) for v in values) if values else "none"


def _compare_tables(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    stateful_queries: set[str],
    new_queries: set[str],
) -> list[PlanChange]:
    changes: list[PlanChange] = []
    for name in sorted(old.keys() - new.keys()):
        changes.append(
            PlanChange(
                f"table {name}",
                "removed (its offsets and waterlines are in the "
                "checkpoint, and the views that read it are gone)",
                False,
            )
        )
    for name in sorted(new.keys() - old.keys()):
        alone = new[name]["query"] in new_queries
        changes.append(
            PlanChange(
                f"table {name}",
                f"added, topic {new[name]['topic']}"
                + (
                    ", in a query of new tables: it starts at its 'scan.startup.mode'"
                    if alone
                    else f" (it would join query {new[name]['query']}, whose checkpoint has "
                    "no offsets or waterlines for it)"
                ),
                alone,
            )
        )
    for name in sorted(old.keys() & new.keys()):
        was, now = old[name], new[name]
        subject = f"table {name}"
        if was["topic"] != now["topic"]:
            changes.append(
                PlanChange(
                    subject,
                    f"topic {was['topic']} -> {now['topic']} (the checkpoint's "
                    "offsets are the old topic's)",
                    False,
                )
            )
        if was["lateness"] != now["lateness"]:
            changes.append(
                _lateness_change(
                    subject,
                    was,
                    now,
                    "the waterlines kept with the checkpoint were moved with the old one; a "
                    "larger LATENESS would be ignored until the data passes it",
                )
            )
        if was["columns"] != now["columns"]:
            held = now["query"] in stateful_queries
            changes.append(
                PlanChange(
                    subject,
                    f"columns ({_list_text(was['columns'])}) -> "
                    f"({_list_text(now['columns'])})"
                    + (
                        " (its query holds state built from the old rows)"
                        if held
                        else " (its query holds no state: new rows are read with them)"
                    ),
                    not held,
                )
            )
        if was["query"] != now["query"]:
            changes.append(
                PlanChange(
                    subject,
                    f"query {was['query']} -> {now['query']} (its offsets and "
                    "state are in the old query's checkpoint)",
                    False,
                )
            )
        for key, what in (
            ("format", "format"),
            ("value_schema", "value schema"),
            ("dead_letter", "dead-letter topic"),
            ("max_future_ms", "max_future (ms)"),
        ):
            if was[key] != now[key] and key != "value_schema":
                changes.append(PlanChange(subject, f"{what} {was[key]} -> {now[key]}", True))
            elif was[key] != now[key]:
                changes.append(
                    PlanChange(
                        subject,
                        "value schema changed (new records are decoded with the new one)",
                        True,
                    )
                )
    return changes


def _compare_view(name: str, was: Mapping[str, Any], now: Mapping[str, Any]) -> list[PlanChange]:
    subject = f"view {name}"
    changes: list[PlanChange] = []
    held = _stateful(was) or _stateful(now)
    reason = " (its state is kept per window)" if held else ""
    windows = ([w["text"] for w in was["windows"]], [w["text"] for w in now["windows"]])
    if was["windows"] != now["windows"]:
        changes.append(
            PlanChange(
                subject,
                f"window {_list_text(windows[0])} -> {_list_text(windows[1])}" + reason,
                not held,
            )
        )
    if was["lateness"] != now["lateness"]:
        changes.append(
            _lateness_change(
                subject,
                was,
                now,
                "its waterline is kept with the checkpoint, moved with the old one",
            )
        )
    state_reason = " (its state holds the old groups and accumulators)"
    if was["keys"] != now["keys"]:
        changes.append(
            PlanChange(
                subject,
                f"GROUP BY {_list_text(was['keys'])} -> {_list_text(now['keys'])}" + state_reason,
                not held,
            )
        )
    if was["aggregates"] != now["aggregates"]:
        changes.append(
            PlanChange(
                subject,
                f"aggregates {_list_text(was['aggregates'])} -> "
                f"{_list_text(now['aggregates'])}" + state_reason,
                not held,
            )
        )
    if was["emit"] != now["emit"]:
        changes.append(
            PlanChange(
                subject,
                f"{was['emit']} -> {now['emit']}"
                + (" (its state holds what was emitted and what is pending)" if held else ""),
                not held,
            )
        )
    if was["state_operator"] != now["state_operator"] and held:
        changes.append(
            PlanChange(
                subject,
                f"state operator {was['state_operator'] or 'none'} -> "
                f"{now['state_operator'] or 'none'} (its state is in the old one)",
                False,
            )
        )
    if not changes and was["ir"] != now["ir"]:
        changes.append(
            PlanChange(
                subject,
                "its query changed (WHERE, SELECT, JOIN or its inputs)"
                + (
                    " (its state was built by the old one)"
                    if held
                    else ": new rows follow the new query"
                ),
                not held,
            )
        )
    if was["upstream"] != now["upstream"] and held:
        changes.append(
            PlanChange(
                subject,
                "a view it reads changed (its state was built from the old view's rows)",
                False,
            )
        )
    old_out, new_out = was["output"], now["output"]
    if old_out != new_out:
        if old_out is None or new_out is None:
            what = "now written to topic " + new_out["topic"] if new_out else "no longer written"
            changes.append(PlanChange(subject, what, True))
        else:
            for key in ("topic", "encoding", "key_columns"):
                if old_out[key] != new_out[key]:
                    changes.append(
                        PlanChange(subject, f"output {key} {old_out[key]} -> {new_out[key]}", True)
                    )
            old_fields = old_out.get("key_fields", old_out["key_columns"])
            new_fields = new_out.get("key_fields", new_out["key_columns"])
            if old_out["key_columns"] == new_out["key_columns"] and old_fields != new_fields:
                changes.append(
                    PlanChange(subject, f"output key fields {old_fields} -> {new_fields}", True)
                )
            old_key, new_key = old_out.get("key_format"), new_out.get("key_format")
            if old_key != new_key and old_out["topic"] == new_out["topic"]:
                changes.append(
                    PlanChange(
                        subject,
                        f"output key format {old_key or 'record'} -> {new_key or 'record'} on "
                        f"topic {new_out['topic']} (its records of a key would have two keys: "
                        "an upsert topic would keep both, and consumers partitioned by the old "
                        "bytes would miss the new; write the new key to a new topic)",
                        False,
                    )
                )
            if old_out["format"] != new_out["format"]:
                changes.append(
                    PlanChange(
                        subject,
                        f"output format {old_out['format']} -> "
                        f"{new_out['format']}"
                        + (
                            " (its state holds the changelog "
                            "versions and last rows of the old format)"
                            if held
                            else ""
                        ),
                        not held,
                    )
                )
    return changes


def compare_plans(old: Mapping[str, Any], new: Mapping[str, Any]) -> PlanComparison:
    """Whether a checkpoint made by the plan ``old`` (a stored document) can be continued by
    the plan ``new``, and why: the rules of ADR 0015. Refused: anything that changes what a
    stateful operator holds or how it is laid out (a stateful view added to a query that
    exists, removed or redefined: its window, keys, aggregates, EMIT or inputs), a LATENESS,
    a table removed, moved to another topic or added to a query that exists, the
    ``major.minor`` version. Compatible, and said: stateless views added, removed or changed,
    tables added in queries of their own (with their views), output topics and encodings,
    dead-letter topics, ``max_future``, the columns of a table whose query holds no state."""
    if old.get("fingerprint_format") != new["fingerprint_format"]:
        change = PlanChange(
            "checkpoint",
            f"its plan is recorded in format {old.get('fingerprint_format')}, this Tidemark "
            f"reads format {new['fingerprint_format']}",
            False,
        )
        return PlanComparison((change,), ())
    changes: list[PlanChange] = []
    if old["tidemark"] != new["tidemark"]:
        changes.append(
            PlanChange(
                "tidemark",
                f"version {old['tidemark']} -> {new['tidemark']} (the state "
                "formats change with major.minor)",
                False,
            )
        )
    old_views, new_views = old["views"], new["views"]
    stateful_queries = {q for q, query in new["queries"].items() if query["state_operators"]} | {
        q for q, query in old["queries"].items() if query["state_operators"]
    }
    # A query whose tables are all new starts from scratch: nothing of it is in the checkpoint.
    new_queries = {
        q
        for q, query in new["queries"].items()
        if not any(t in old["tables"] for t in query["tables"])
    }
    changes.extend(_compare_tables(old["tables"], new["tables"], stateful_queries, new_queries))
    for name in sorted(old_views.keys() - new_views.keys()):
        held = _stateful(old_views[name])
        changes.append(
            PlanChange(
                f"view {name}",
                "removed"
                + (
                    " (its state is in the checkpoint, in "
                    f"state operator {old_views[name]['state_operator']})"
                    if held
                    else ""
                ),
                not held,
            )
        )
    for name in sorted(new_views.keys() - old_views.keys()):
        fresh = new_views[name]["query"] in new_queries
        held = _stateful(new_views[name]) and not fresh
        changes.append(
            PlanChange(
                f"view {name}",
                "added"
                + (
                    " (it holds state: it would start empty "
                    "and emit partial windows as if complete)"
                    if held
                    else ", over new tables: it starts with them"
                    if fresh
                    else ", stateless: it computes from the next step on"
                ),
                not held,
            )
        )
    for name in sorted(old_views.keys() & new_views.keys()):
        changes.extend(_compare_view(name, old_views[name], new_views[name]))
    refused_queries = {
        new_views.get(c.subject[5:], old_views.get(c.subject[5:], {})).get("query")
        for c in changes
        if not c.compatible and c.subject.startswith("view ")
    }
    for name in sorted(old["queries"].keys() & new["queries"].keys()):
        was, now = old["queries"][name], new["queries"][name]
        if was["tables"] != now["tables"]:
            changes.append(
                PlanChange(
                    f"query {name}",
                    f"tables {_list_text(was['tables'])} -> "
                    f"{_list_text(now['tables'])} (Spark's checkpoint is the old "
                    "sources')",
                    False,
                )
            )
        if name in refused_queries:
            continue
        layout = (_layout_text(was["state_operators"]), _layout_text(now["state_operators"]))
        if layout[0] != layout[1]:
            changes.append(
                PlanChange(
                    f"query {name}",
                    f"state operators {layout[0]} -> {layout[1]} "
                    "(Spark finds state by the operators' order)",
                    False,
                )
            )
        elif now["state_operators"] and (
            (was["step_shape"], was["writing_stage"]) != (now["step_shape"], now["writing_stage"])
        ):
            changes.append(
                PlanChange(
                    f"query {name}",
                    f"step shape {was['step_shape']} -> "
                    f"{now['step_shape']} (the query's stateful plan is built another "
                    "way)",
                    False,
                )
            )
    kept: list[str] = []
    refused_views = {c.subject[5:] for c in changes if not c.compatible}
    for name in sorted(old["tables"].keys() & new["tables"].keys()):
        kept.append(f"table {name}: offsets and waterlines")
    for name in sorted(old_views.keys() & new_views.keys()):
        if _stateful(new_views[name]) and name not in refused_views:
            kept.append(f"view {name}: its state ({new_views[name]['state_operator']})")
    return PlanComparison(tuple(changes), tuple(kept))


def _layout_text(layout: list[Mapping[str, Any]]) -> str:
    if not layout:
        return "none"
    return "[" + ", ".join(f"{op['kind']} {'+'.join(op['views'])}" for op in layout) + "]"
