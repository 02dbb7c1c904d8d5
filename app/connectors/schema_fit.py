"""Whether a schema registered for an output can carry the view's rows (``use.latest.version``).

With ``auto.register.schemas = false`` and ``use.latest.version = true`` an output's records
are written with the subject's latest registered schema, not the view's own, so a consumer
of that subject reads them as the schema its owners agreed on. Every row of the view must
then be a value of that schema; :func:`fit_problems` says why not, checked once at start,
before anything is written. The registered schema is the writer here and the view's schema
describes the values it is handed, so the rules are Avro's resolution rules read from the
other side (``app/connectors/confluent_avro.py`` applies them to inputs):

- every column needs a field of the same name (a record's fields are matched by name, in any
  order); a field no column fills needs a default, which every record then carries;
- a nullable column needs a field that takes null (a union with ``"null"``);
- a column's type must fit a branch of its field: the same primitive, or a wider number
  (``int`` into ``long``, ``float`` or ``double``; ``long`` into ``float`` or ``double``;
  ``float`` into ``double``), or the same logical type (``timestamp-millis``, ``date``; a
  decimal of the same scale and at least the column's precision). A logical type on one side
  only is refused: the bytes would fit, the meaning would not (epoch milliseconds read as a
  plain long, say).

A bare key (``{"type": T}``, ``'key.format'``) is checked the same way against a registered
primitive. Nested records, arrays, maps, enums and fixed fields other than decimals carry no
column of Tidemark's types, so a field of one is a problem unless it has a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["describe", "fit_problems", "writer_schema"]

_WIDER: dict[str, tuple[str, ...]] = {
    "int": ("int", "long", "float", "double"),
    "long": ("long", "float", "double"),
    "float": ("float", "double"),
    "double": ("double",),
    "boolean": ("boolean",),
    "string": ("string",),
    "bytes": ("bytes",),
}


def writer_schema(registered: Any) -> dict[str, Any]:
    """A registered schema as the encoders take it: a record as it is, a primitive (``"long"``,
    as registries keep a bare key's) as ``{"type": "long"}``."""
    if isinstance(registered, str):
        return {"type": registered}
    if isinstance(registered, dict):
        return dict(registered)
    raise ValueError("a union is no schema of a Kafka key or value Tidemark writes")


def _branches(kind: Any) -> list[Any]:
    return list(kind) if isinstance(kind, list) else [kind]


def _shape(kind: Any) -> tuple[str, str | None, dict[str, Any]]:
    """(Avro type name, logical type, the type's attributes) of one non-union type."""
    if isinstance(kind, str):
        return kind, None, {}
    if isinstance(kind, dict):
        base = kind.get("type")
        if isinstance(base, dict | list):
            return _shape(base)
        logical = kind.get("logicalType")
        return str(base), str(logical) if logical is not None else None, kind
    return "union", None, {}


def describe(kind: Any) -> str:
    """An Avro type as messages show it: ``long``, ``timestamp-millis``, ``decimal(10, 2)``,
    ``[null, string]``."""
    if isinstance(kind, list):
        return "[" + ", ".join(describe(b) for b in kind) + "]"
    base, logical, attributes = _shape(kind)
    if logical == "decimal":
        return f"decimal({attributes.get('precision')}, {attributes.get('scale', 0)})"
    return logical or base


def _branch_fits(ours: Any, theirs: Any) -> bool:
    """Whether every value of the non-null type ``ours`` is a value of ``theirs``."""
    base, logical, attributes = _shape(ours)
    their_base, their_logical, their_attributes = _shape(theirs)
    if logical != their_logical:
        return False
    if logical == "decimal":
        return (
            their_base in ("bytes", "fixed")
            and their_attributes.get("scale", 0) == attributes.get("scale", 0)
            and int(their_attributes.get("precision", 0)) >= int(attributes.get("precision", 0))
        )
    return their_base in _WIDER.get(base, ())


def _type_problem(name: str, ours: Any, theirs: Any) -> str | None:
    """Why the registered field type ``theirs`` cannot hold column ``name`` of type ``ours``."""
    our_branches = _branches(ours)
    their_branches = _branches(theirs)
    nullable = "null" in our_branches
    if nullable and "null" not in their_branches:
        return (
            f"column {name} may be NULL but the field is {describe(theirs)}, which takes no"
            " null"
        )
    for branch in (b for b in our_branches if b != "null"):
        if not any(_branch_fits(branch, b) for b in their_branches if b != "null"):
            return (
                f"column {name} is {describe(branch)}, which field {name} of type"
                f" {describe(theirs)} cannot hold"
            )
    return None


def fit_problems(registered: Any, ours: Mapping[str, Any]) -> list[str]:
    """Why a registered schema cannot carry the values of ``ours`` (the view's record schema,
    or a bare key's ``{"type": T}``); empty when every value fits."""
    try:
        theirs = writer_schema(registered)
    except ValueError as exc:
        return [str(exc)]
    if ours.get("type") != "record":
        problem = _type_problem("(the key)", _bare(ours), _bare(theirs))
        return [] if problem is None else [problem]
    if theirs.get("type") != "record":
        return [f"it is a {describe(_bare(theirs))}, not a record of the view's columns"]
    fields = {str(f.get("name")): f for f in theirs.get("fields", ()) if isinstance(f, dict)}
    problems: list[str] = []
    columns = {str(f["name"]): f for f in ours.get("fields", ())}
    for name, column in columns.items():
        field = fields.get(name)
        if field is None:
            problems.append(f"it has no field {name} for column {name}")
            continue
        problem = _type_problem(name, column["type"], field.get("type"))
        if problem is not None:
            problems.append(problem)
    for name, field in fields.items():
        if name not in columns and "default" not in field:
            problems.append(f"field {name} has no default and the view has no column {name}")
    return problems


def _bare(schema: Mapping[str, Any]) -> Any:
    """A bare schema's type: ``{"type": "long"}`` is ``"long"``; a logical type stays whole."""
    if set(schema) == {"type"}:
        return schema["type"]
    return dict(schema)
