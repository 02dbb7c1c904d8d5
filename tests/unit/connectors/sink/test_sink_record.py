"""The sink record's shape is defined once (app/connectors/sink/record.py) and derived
everywhere else.

Spark's schema of the rows the writers hand the sink (``mapInArrow``,
``applyInPandasWithState``) is Spark's own mapping of the Arrow schema; every writer builds
rows of exactly that schema; the source columns a dead letter is made of have their sink
columns' types; a field added to the Arrow schema alone reaches the Spark schema and the
writers' batches; and no other module spells the field list or the headers type.
"""

from __future__ import annotations

import ast
import re
import types
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StringType, StructField

from app.connectors.kafka_source import META_COLUMNS, TABLE_GATE, arrow_schema
from app.connectors.late_gate import SourceColumn, SourceSpec
from app.connectors.sink import record as sink_record
from app.connectors.sink.record import (
    HEADERS_TYPE,
    SINK_COLUMNS,
    SINK_RECORD,
    SINK_SCHEMA,
    SINK_STRUCT,
    sink_batch,
    spark_ddl,
    spark_sql_type,
)
from app.runtime.operators import aggregate
from app.runtime.step.encode import ViewEncoding, output_batch
from app.runtime.step.query_writes import SourceSide
from app.runtime.step.sink_rows import arrow_dead_letters

ROOT = Path(__file__).resolve().parents[4]
SPEC = SourceSpec(
    "t",
    "in",
    (SourceColumn("ts", "timestamp", False), SourceColumn("n", "int64", True)),
    {},
    (("ts", 1000),),
    None,
    "t.dlq",
)
ENCODING = ViewEncoding(
    "v",
    "out",
    "append",
    ["n"],
    [],
    {"type": "record", "name": "r", "fields": [{"name": "n", "type": ["null", "long"]}]},
    None,
)


def _source_batch() -> pa.RecordBatch:
    """A slice's rows as the source hands them over: a late row, an accepted row, a probe."""
    return pa.RecordBatch.from_pylist(
        [
            {
                "n": 1,
                "_kind": "late",
                "_message": "below the waterline",
                "_late_column": "ts",
                "_late_value": 5,
                "_late_waterline": 9,
                "_key": b"k",
                "_value": b"v",
                "_headers": [{"key": "h", "value": b"x"}],
                "_partition": 3,
                "_offset": 44,
                "_step": 2,
            },
            {"n": 2, "_kind": "ok", "_partition": 3, "_offset": 45, "_step": 2},
            {"_kind": "probe", "_partition": 3, "_step": 2, "_accepted": 1},
        ],
        schema=arrow_schema(SPEC),
    )


def test_the_spark_schema_is_sparks_mapping_of_the_arrow_schema() -> None:
    assert from_arrow_schema(SINK_RECORD) == SINK_STRUCT
    assert spark_ddl(SINK_STRUCT) == SINK_SCHEMA
    assert SINK_COLUMNS == tuple(SINK_RECORD.names) == tuple(SINK_STRUCT.names)
    assert SINK_SCHEMA.split(", ")[0] == "kind string"
    assert all(field.nullable for field in SINK_RECORD)


def test_spark_sql_types_are_spelled_as_spark_spells_them() -> None:
    assert [spark_sql_type(t) for t in (pa.string(), pa.binary(), pa.int32(), pa.int64())] == [
        "string",
        "binary",
        "int",
        "bigint",
    ]
    assert spark_sql_type(HEADERS_TYPE) == "array<struct<key:string,value:binary>>"


def test_every_writer_builds_the_sink_record() -> None:
    source = _source_batch()
    written = {
        "output_batch": output_batch(ENCODING, [b"k", None], [b"v1", b"v2"]),
        "arrow_dead_letters": arrow_dead_letters(source, "t", "t.dlq"),
    }
    for name, batch in written.items():
        assert batch.schema == SINK_RECORD, name
        assert from_arrow_schema(batch.schema) == SINK_STRUCT, name
    assert written["arrow_dead_letters"].num_rows == 1


def test_the_shared_operators_frames_convert_to_the_sink_record() -> None:
    plan = types.SimpleNamespace(encoding=ENCODING)
    row = {"n": 7, "_undo": False, "_ver": 0, "_delete": False}
    frame = aggregate._sink_frame(plan, [row, row], 5)  # type: ignore[arg-type]
    assert tuple(frame.columns) == SINK_COLUMNS
    batch = pa.RecordBatch.from_pandas(frame, schema=SINK_RECORD, preserve_index=False)
    assert batch.column("kind").to_pylist() == ["output", "output"]
    assert batch.column("headers").null_count == 2


def test_the_source_tasks_dead_letter_files_hold_sink_records(tmp_path: Path) -> None:
    side = SourceSide("t", ("ts",), str(tmp_path), dead_letter_topic="t.dlq")
    list(side.tee([_source_batch()], {}, step=2, partition=0))
    with pa.ipc.open_stream((tmp_path / "2-0.dead.arrow").read_bytes()) as stream:
        assert stream.schema == SINK_RECORD
        assert sum(batch.num_rows for batch in stream) == 1


def test_the_columns_a_dead_letter_takes_from_the_source_have_its_types() -> None:
    schema = arrow_schema(SPEC)
    declared = dict(META_COLUMNS)
    for sink, source in TABLE_GATE.items():
        assert schema.field(source).type == SINK_RECORD.field(sink).type, source
        assert declared[source] == spark_sql_type(SINK_RECORD.field(sink).type), source


def _extended_module() -> types.ModuleType:
    """record.py with one field appended to SINK_RECORD's list and nothing else changed,
    run as a fresh module."""
    path = Path(sink_record.__file__)
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["SINK_RECORD"]
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.args[0], ast.List)
        ):
            added = ast.parse('pa.field("origin", pa.string())', mode="eval").body
            node.value.args[0].elts.append(added)
            break
    else:
        raise AssertionError("SINK_RECORD is no longer a pa.schema([...]) assignment")
    module = types.ModuleType("sink_record_extended")
    exec(compile(ast.fix_missing_locations(tree), str(path), "exec"), module.__dict__)  # noqa: S102
    return module


def test_a_field_added_to_the_arrow_schema_alone_reaches_spark_and_the_writers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extended = _extended_module()
    assert extended.SINK_SCHEMA == SINK_SCHEMA + ", origin string"
    assert extended.SINK_STRUCT.fields[-1] == StructField("origin", StringType(), True)
    assert extended.SINK_COLUMNS == (*SINK_COLUMNS, "origin")
    # The Arrow writers build their batches through sink_batch, so they follow the schema.
    monkeypatch.setattr(sink_record, "SINK_RECORD", extended.SINK_RECORD)
    monkeypatch.setattr(sink_record, "SINK_COLUMNS", extended.SINK_COLUMNS)
    for batch in (
        output_batch(ENCODING, [b"k"], [b"v"]),
        arrow_dead_letters(_source_batch(), "t", "t.dlq"),
    ):
        assert batch.schema == extended.SINK_RECORD
        assert batch.column("origin").null_count == batch.num_rows


def test_sink_batch_refuses_a_column_the_record_does_not_have() -> None:
    with pytest.raises(KeyError, match="origin"):
        sink_batch(1, {"origin": ["x"]})


#: Sink record columns no other shape of the app has (the summary rows share kind, rel,
#: topic and reason; headers are key/value pairs; offsets and logs have a step and a message;
#: every Kafka record has headers, which a dead letter shown to a user lists by that name).
_OWN = frozenset(SINK_COLUMNS) - {"kind", "rel", "topic", "reason", "key", "value"}
_OWN -= {"step", "message", "headers"}
_DDL = re.compile(rf"\b({'|'.join(sorted(_OWN))})\s+[a-z]")


def _spellings(path: Path) -> list[str]:
    """Where a module names a sink record column other than to read it (``row["..."]``), or
    spells a column's type or the headers type."""
    tree = ast.parse(path.read_text())
    read = {
        id(node.slice)
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
    }
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        if id(node) in docstrings:
            continue
        text = node.value
        if text in _OWN and id(node) not in read:
            found.append(f"{path}:{node.lineno}: {text!r}")
        elif _DDL.search(text) or "struct<key:string,value:binary>" in text:
            found.append(f"{path}:{node.lineno}: {text!r}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("pa.struct", "pyarrow.struct"):
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_other_module_spells_the_sink_record() -> None:
    own = Path(sink_record.__file__).resolve()
    modules = sorted([*(ROOT / "app").rglob("*.py"), *(ROOT / "loadtests").rglob("*.py")])
    assert len(modules) > 20
    found = [line for path in modules if path.resolve() != own for line in _spellings(path)]
    assert found == []


def test_the_spelling_check_finds_a_spelled_copy(tmp_path: Path) -> None:
    copy = tmp_path / "copy.py"
    copy.write_text(
        'SCHEMA = "kind string, src_partition int"\n'
        'HEADERS = "array<struct<key:string,value:binary>>"\n'
        'ROW = {"late_value": None}\n'
        "FIELD = pa.struct([])\n"
        'READ = row["late_value"]\n'
    )
    assert [line.split(":")[1] for line in _spellings(copy)] == ["1", "2", "3", "4"]
