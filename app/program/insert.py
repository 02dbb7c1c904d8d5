"""``INSERT INTO table SELECT ...`` (Flink SQL): a query's rows conformed to a table's columns.

Flink writes a query into a table by position: the i-th column of the query is the table's
i-th column, under the table's name and type. The compiler builds the output view that
``CREATE VIEW table WITH ('topic' = ...) AS SELECT ...`` builds (docs/language.md); this
module only renames the query's columns and casts those whose type widens into the table's,
on the planned query, so the view's output schema is the table's declared columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from app.circuit.ir import Cast, Column, Diagnostic, Expr, Position, Project, SqlType, UnionAll
from app.program.lexer import CompileFailure
from app.program.query import PlannedQuery

__all__ = ["conform"]

#: Numeric types a value widens into without loss of its integer part (Flink's implicit
#: casts on INSERT): to the right of each is where it may go.
_WIDENS = {
    "INT": ("BIGINT", "DECIMAL", "REAL", "DOUBLE"),
    "BIGINT": ("DECIMAL", "DOUBLE"),
    "DECIMAL": ("DECIMAL", "DOUBLE"),
    "REAL": ("DOUBLE",),
}


def _same(mine: SqlType, theirs: SqlType) -> bool:
    return mine.with_nullable(True) == theirs.with_nullable(True)


def conform(planned: PlannedQuery, columns: Sequence[Column], table: str,
            position: Position) -> tuple[PlannedQuery, list[Diagnostic]]:
    """``planned`` with its columns renamed to ``columns`` (the table's, in order) and cast
    where their types differ; a query column that may be NULL in a NOT NULL column is a
    warning (Flink's job fails at the first NULL; Tidemark writes it).

    Raises:
        CompileFailure: another number of columns, or a type that does not widen.
    """
    if len(planned.columns) != len(columns):
        raise CompileFailure(position, f"INSERT INTO {table} writes {len(planned.columns)} "
                             f"columns, but {table} has {len(columns)}: "
                             + ", ".join(c.name for c in columns),
                             "select one value per column of the table, in its order")
    warnings: list[Diagnostic] = []
    renamed: dict[str, str] = {}
    casts: dict[str, SqlType] = {}
    out: list[Column] = []
    for index, (mine, theirs) in enumerate(zip(planned.columns, columns, strict=True)):
        where = (planned.column_positions[index] if index < len(planned.column_positions)
                 else position)
        renamed[mine.name] = theirs.name
        if not _same(mine.type, theirs.type):
            if theirs.type.name not in _WIDENS.get(mine.type.name, ()):
                shown = str(theirs.type.with_nullable(True))
                raise CompileFailure(where, f"column {index + 1} of INSERT INTO {table} "
                                     f"({mine.name}) is {mine.type.with_nullable(True)}, but "
                                     f"{table}.{theirs.name} is {shown}",
                                     f"CAST it: CAST({mine.name} AS {shown}) AS {theirs.name}")
            casts[theirs.name] = theirs.type.with_nullable(mine.type.nullable)
        if mine.type.nullable and not theirs.type.nullable:
            warnings.append(Diagnostic(
                "warning", where, f"column {table}.{theirs.name} is NOT NULL, but the value "
                f"INSERT INTO {table} writes there ({mine.name}) may be NULL: Tidemark writes "
                "the NULL (the column is nullable in the output schema), where Flink's job "
                "would fail", f"filter the NULLs out (WHERE {mine.name} IS NOT NULL) or "
                f"COALESCE them"))
        nullable = mine.type.nullable or theirs.type.nullable
        out.append(Column(theirs.name, theirs.type.with_nullable(nullable)))

    def project(op: Project) -> Project:
        outputs: list[tuple[str, Expr]] = []
        for name, expr in op.outputs:
            new = renamed[name]
            outputs.append((new, Cast(expr, casts[new]) if new in casts else expr))
        return Project(tuple(outputs))

    operators = list(planned.operators)
    last = operators[-1]
    if isinstance(last, UnionAll):
        branches = []
        for branch in last.branches:
            final = branch.operators[-1]
            assert isinstance(final, Project)
            branches.append(replace(branch, operators=(*branch.operators[:-1],
                                                       project(final))))
        operators[-1] = UnionAll(tuple(branches))
    else:
        assert isinstance(last, Project)
        operators[-1] = project(last)

    def name(column: str) -> str:
        return renamed.get(column, column)

    # A UNION ALL's or a JOIN's own attribute names its column as its source, in the view.
    attrs = tuple(replace(a, column=name(a.column),
                          source_column=(name(a.source_column) if a.table == table
                                         else a.source_column))
                  for a in planned.time_attributes if name(a.column) not in casts)
    window_key = (None if planned.window_key is None
                  else (name(planned.window_key[0]), planned.window_key[1]))
    time_key = (None if planned.time_key is None
                else (name(planned.time_key[0]), planned.time_key[1]))
    return replace(planned, operators=operators, columns=out,
                   key=tuple(name(k) for k in planned.key), time_attributes=attrs,
                   window_key=window_key, time_key=time_key,
                   key_selected={k: name(v) for k, v in planned.key_selected.items()}), warnings
