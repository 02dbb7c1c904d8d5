"""The source's columnar path gives exactly the rows of the per-record path (S2-S7).

The per-record path classifies each message with ``LateGate.classify`` (the gate's definition,
pinned by test_late_gate_bad_input.py). The columnar path decodes a chunk with numpy and asks
the gate only about the rows it cannot pass as plain ``ok``. Both run here, without a broker,
over the same real ``confluent_kafka.Message`` objects: valid, late, future, out-of-range,
garbage, mutated and cut records, nulls, punctuation, headers. Every column of every row must
be equal (dead letters' reasons, messages, original bytes, headers; the probe's maxima).
"""

from __future__ import annotations

import io
import math
import os
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.connectors.avro_codec import AvroCodec
from app.connectors.avro_columns import ColumnarDecoder
from app.connectors.kafka_source import KafkaPartitionSlice, decode_slice
from app.connectors.late_gate import SourceSpec
from app.program.compile import compile_program
from app.runtime.operators.source import source_spec

NOW = 1_800_000_000_000

#: Every column type the columnar path reads, nullable and NOT NULL, two LATENESS columns.
PROGRAM = """
CREATE TABLE reading (
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    seq     BIGINT NOT NULL LATENESS 100,
    qty     INT,
    small   INT NOT NULL,
    day     DATE,
    label   VARCHAR,
    name    VARCHAR NOT NULL,
    blob    VARBINARY,
    ok      BOOLEAN,
    ratio   REAL,
    amount  DOUBLE NOT NULL
) WITH ('topic' = 'in', 'max_future' = INTERVAL '1' HOUR);
"""
WATERLINES: dict[str, int | None] = {"ts": NOW - 5_000, "seq": 1_000}


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> SourceSpec:
    path = tmp_path_factory.mktemp("columnar") / "p.sql"
    path.write_text(PROGRAM)
    return source_spec(compile_program(path).table("reading"))


def _slice(waterlines: dict[str, int | None] = WATERLINES) -> KafkaPartitionSlice:
    return KafkaPartitionSlice(3, 0, 10**6, 7, NOW, dict(waterlines))


def _rows(batches: Sequence[pa.RecordBatch]) -> list[str]:
    """Each row as text: NaN equals NaN, -0.0 differs from 0.0. fastavro's EOFError names
    its reader object by address ("<_io.BytesIO object at 0x...>"), which differs between
    any two decodes, old code or new, so the address is left out."""
    return [
        re.sub(r" at 0x[0-9a-f]+>", " at 0x>", repr(row))
        for row in pa.Table.from_batches(batches).to_pylist()
    ]


def _both(spec: SourceSpec, msgs: list[Any], part: KafkaPartitionSlice | None = None) -> None:
    """Both paths agree, with and without the accepted rows' Kafka payload (ok_payload); the
    lean rows are the full ones with the ``ok`` rows' key, value, headers and timestamp NULL."""
    part = part or _slice()
    fast = list(decode_slice(spec, part, msgs))
    slow = list(decode_slice(spec, part, msgs, columnar=False))
    assert _rows(fast) == _rows(slow)
    assert fast[-1].num_rows == 1 and fast[-1].column("_kind")[0].as_py() == "probe"
    lean_spec = replace(spec, ok_payload=False)
    lean = list(decode_slice(lean_spec, part, msgs))
    assert _rows(lean) == _rows(list(decode_slice(lean_spec, part, msgs, columnar=False)))
    expected = pa.Table.from_batches(fast).to_pylist()
    for row in expected:
        if row["_kind"] == "ok":
            row.update(_key=None, _value=None, _headers=None, _timestamp=None)
    assert _rows(lean) == _rows([pa.RecordBatch.from_pylist(expected, schema=fast[0].schema)])


def _messages(values: Sequence[bytes | None], headers: Sequence[Any] | None = None) -> list[Any]:
    return [
        Message(
            topic="in",
            partition=3,
            offset=100 + i,
            key=None if i % 7 == 0 else str(i).encode(),
            value=v,
            headers=headers[i] if headers else None,
            # Most with a timestamp (a dead letter keeps it, S6), some without.
            timestamp=(TIMESTAMP_CREATE_TIME, NOW - 1000 * i) if i % 5 else (0, 0),
        )
        for i, v in enumerate(values)
    ]


def _record(i: int, **changes: Any) -> dict[str, Any]:
    return {
        "ts": NOW - 9_000 + 7 * i,
        "seq": 990 + i,
        "qty": None if i % 3 == 0 else i - 50,
        "small": i,
        "day": 19_000 + i,
        "label": None if i % 4 == 0 else f"l{i}\u00e9" if i % 5 == 0 else f"l{i}",
        "name": f"n{i}",
        "blob": None if i % 2 else bytes([i % 256]) * (i % 5),
        "ok": None if i % 6 == 0 else i % 2 == 0,
        "ratio": None if i % 8 == 0 else i / 3,
        "amount": i * 1.5,
        **changes,
    }


def _writer(spec: SourceSpec, loose: bool = False) -> Callable[[dict[str, Any]], bytes]:
    """Encodes records with the table's schema, or (``loose``) with every field nullable and
    ints written as longs, so NULLs in NOT NULL columns and values beyond INT can be sent."""
    schema = dict(spec.avro_schema)
    if loose:
        fields = []
        for f in schema["fields"]:
            kind = f["type"][-1] if isinstance(f["type"], list) else f["type"]
            kind = "long" if kind == "int" else kind
            if isinstance(kind, dict) and kind.get("type") == "int":
                kind = "long"
            fields.append({**f, "type": ["null", kind]})
        schema = {**schema, "fields": fields}
    parsed = fastavro.parse_schema(schema)

    def write(record: dict[str, Any]) -> bytes:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, record)
        return buffer.getvalue()

    return write


def test_every_kind_of_record_gives_the_same_rows_on_both_paths_s4_s7(spec: SourceSpec) -> None:
    write, loose = _writer(spec), _writer(spec, loose=True)
    good = write(_record(1))
    values: list[bytes | None] = [write(_record(i)) for i in range(300)]
    values += [
        write(_record(400, ts=NOW - 60_000)),  # late on ts
        write(_record(401, seq=5)),  # late on seq
        write(_record(402, ts=NOW + 2 * 3_600_000)),  # future
        write(_record(403, ts=NOW - 5_000, seq=1_000)),  # equal to the waterline: on time
        loose(_record(404, small=2**40)),  # beyond INT
        loose(_record(405, ts=2**62)),  # beyond TIMESTAMP
        loose(_record(406, day=2**35)),  # beyond DATE
        loose(_record(407, amount=None)),  # NULL in NOT NULL, written nullable
        loose(_record(408)),  # a nullable writer, no nulls: malformed for the table's reader
        b"",
        b"\x00\xff\xfe not avro",
        good[:-1],
        good + b"\x00",
        good[:5],
        None,  # punctuation, or malformed without a bound header
        None,
        b"\xff" * 12,  # a varint longer than 10 bytes
        write(_record(409, label="\ud800".encode("utf-8", "surrogatepass").decode("latin-1"))),
    ]
    raw = bytearray(good)
    raw[raw.index(b"n1") - 1] = 0x7F  # a string length past the end
    values.append(bytes(raw))
    headers: list[Any] = [None] * len(values)
    headers[-5] = [("tidemark.bound", b"1800000100000"), ("origin", b"x")]
    headers[3] = [("produce_ms", b"\x00" * 8), ("empty", None)]
    _both(spec, _messages(values, headers))


def test_a_slice_of_only_punctuation_still_ends_with_its_probe_s4(spec: SourceSpec) -> None:
    msgs = _messages([None, None], [[("tidemark.bound.ts", b"1800000200000")], None])
    _both(spec, msgs)
    probe = list(decode_slice(spec, _slice(), msgs))[-1].to_pylist()[0]
    assert probe["_kind"] == "probe" and probe["_accepted"] == 0
    assert probe["ts"].timestamp() * 1000 == 1_800_000_200_000
    # No bound for seq: its probe is the highest value of the earlier steps, w(t-1) + L.
    assert probe["seq"] == 1_000 + 100


def test_the_probe_is_never_below_the_earlier_steps_highest_value_s3(spec: SourceSpec) -> None:
    """A slice of late and old rows only: its probe is w(t-1) + L per column (what every
    earlier step reached), so Spark's watermark of the run, which takes the highest probe of
    its own steps, is the table's waterline after a restart too (ADR 0013)."""
    write = _writer(spec)
    msgs = _messages([write(_record(i)) for i in range(10)])  # ts 1 s below w, seq 990-999
    batches = list(decode_slice(spec, _slice(), msgs))
    assert {r["_kind"] for b in batches[:-1] for r in b.to_pylist()} == {"late"}
    probe = batches[-1].to_pylist()[0]
    assert probe["ts"].timestamp() * 1000 == WATERLINES["ts"] + 10_000
    assert probe["seq"] == 1_000 + 100


def test_without_waterlines_nothing_is_late_and_the_maxima_cover_ok_and_late_rows_s3(
    spec: SourceSpec,
) -> None:
    write = _writer(spec)
    msgs = _messages([write(_record(i)) for i in range(50)] + [write(_record(99, seq=-7))])
    _both(spec, msgs, _slice({}))
    _both(spec, msgs, _slice({"ts": None, "seq": 2**62}))  # every row late
    batches = list(decode_slice(spec, _slice({"seq": 800}), msgs))
    probe = batches[-1].to_pylist()[0]
    assert probe["seq"] == 990 + 49  # the late row (seq=-7) does not lower the maximum
    assert probe["_accepted"] == sum(
        b.column("_kind").to_pylist().count("ok") for b in batches[:-1]
    )


def test_the_decoder_agrees_with_fastavro_on_every_value_it_calls_clean(
    spec: SourceSpec,
) -> None:
    write = _writer(spec)
    codec = AvroCodec(spec.avro_schema)
    decoder = ColumnarDecoder(spec.avro_schema)
    assert decoder.supported
    values = [write(_record(i)) for i in range(40)] + [b"\x02", b"", b"\x00" * 30]
    names = [c.name for c in spec.columns]
    decoded = decoder.decode(values, names)
    assert decoded.clean[:40].all() and not decoded.clean[40:].any()
    for i in range(40):
        row = codec.decode(values[i])
        for name in names:
            field = decoded.fields[name]
            cell: Any = None
            if not field.null[i]:
                array = field.array
                cell = array[i].as_py() if array is not None else field.numbers()[i].item()
            expected = row[name]
            if isinstance(expected, float) and field.kind == "float":
                expected = struct.unpack("<f", struct.pack("<f", expected))[0]
            assert cell == expected or (math.isnan(cell) and math.isnan(expected)), name


def test_schemas_with_decimals_or_nested_types_keep_the_per_record_path(tmp_path: Path) -> None:
    path = tmp_path / "p.sql"
    path.write_text(
        "CREATE TABLE t (ts TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND, "
        "price DECIMAL(5, 2)) WITH ('topic' = 't');"
    )
    table_spec = source_spec(compile_program(path).table("t"))
    assert not ColumnarDecoder(table_spec.avro_schema).supported
    nested = {
        "type": "record",
        "name": "r",
        "fields": [{"name": "a", "type": {"type": "array", "items": "long"}}],
    }
    assert not ColumnarDecoder(nested).supported
    # ... and still give their rows.
    from decimal import Decimal

    codec = AvroCodec(table_spec.avro_schema)
    msgs = _messages([codec.encode({"ts": NOW, "price": Decimal("1.25")}), b"\x01"])
    rows = pa.Table.from_batches(list(decode_slice(table_spec, _slice({}), msgs))).to_pylist()
    assert [r["_kind"] for r in rows] == ["ok", "malformed", "probe"]


def _mutate(data: bytes, draw: Callable[..., Any]) -> bytes:
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data)))
        choice = draw(st.sampled_from(["flip", "cut", "insert"]))
        if choice == "flip" and at < len(data):
            data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
        elif choice == "cut":
            data = data[:at]
        else:
            data = data[:at] + draw(st.binary(max_size=6)) + data[at:]
    return data


_HEADERS = st.one_of(
    st.none(),
    st.lists(
        st.tuples(
            st.sampled_from(["tidemark.bound", "tidemark.bound.seq", "tidemark.bound.x", "o"]),
            st.one_of(st.none(), st.sampled_from([b"1800000000000", b"12", b"x"])),
        ),
        max_size=2,
    ),
)


def test_generated_and_mutated_chunks_give_the_same_rows_on_both_paths(spec: SourceSpec) -> None:
    """Hypothesis: chunks of valid, loosely written, mutated and random values. A longer run:
    ``TIDEMARK_FUZZ_EXAMPLES=5000 .venv/bin/pytest tests/unit/connectors/test_columnar_source.py``.
    """
    write, loose = _writer(spec), _writer(spec, loose=True)
    longs = st.integers(-(2**63), 2**63 - 1)
    records = st.fixed_dictionaries(
        {
            "ts": st.one_of(longs, st.integers(NOW - 20_000, NOW + 7_200_000)),
            "seq": st.one_of(longs, st.integers(900, 1_100)),
            "qty": st.one_of(st.none(), longs),
            "small": st.one_of(st.none(), longs, st.integers(-5, 5)),
            "day": st.one_of(st.none(), longs),
            "label": st.one_of(st.none(), st.text(max_size=8)),
            "name": st.one_of(st.none(), st.text(max_size=8)),
            "blob": st.one_of(st.none(), st.binary(max_size=8)),
            "ok": st.one_of(st.none(), st.booleans()),
            "ratio": st.one_of(st.none(), st.floats(width=32)),
            "amount": st.one_of(st.none(), st.floats()),
        }
    )

    examples = int(os.environ.get("TIDEMARK_FUZZ_EXAMPLES", "150"))

    @settings(
        max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        values: list[bytes | None] = []
        headers: list[Any] = []
        for _ in range(data.draw(st.integers(1, 12))):
            source = data.draw(
                st.sampled_from(["valid", "valid", "loose", "mutated", "random", "null"])
            )
            value: bytes | None
            if source == "random":
                value = data.draw(st.binary(max_size=60))
            elif source == "null":
                value = None
            else:
                record = data.draw(records)
                try:
                    value = (write if source != "loose" else loose)(record)
                except (ValueError, TypeError, OverflowError, struct.error):
                    value = loose(record)
                if source == "mutated":
                    value = _mutate(value, data.draw)
            values.append(value)
            headers.append(data.draw(_HEADERS))
        _both(spec, _messages(values, headers))

    check()


def test_a_narrow_source_hands_spark_the_table_and_query_columns_only(spec: SourceSpec) -> None:
    """ADR 0008's queries read no dead-letter column: their source declares, and
    hands Spark, the table's columns and QUERY_META only, in the full schema's order."""
    from app.connectors.kafka_source import QUERY_META, arrow_schema, source_schema

    full, narrow = arrow_schema(spec), arrow_schema(spec, narrow=True)
    table = [c.name for c in spec.columns]
    assert narrow.names == table + list(QUERY_META)
    assert [n for n in full.names if n in narrow.names] == narrow.names
    for name in narrow.names:
        assert narrow.field(name) == full.field(name)
    declared = [part.split("`")[1] for part in source_schema(spec, narrow=True).split(", ")]
    assert declared == narrow.names
    write = _writer(spec)
    batches = list(decode_slice(spec, _slice(), _messages([write(_record(i)) for i in range(5)])))
    assert all(batch.select(narrow.names).schema.equals(narrow) for batch in batches)
