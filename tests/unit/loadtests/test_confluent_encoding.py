"""``python -m loadtests.bench --encodings avro avro-confluent``: the second run of a workload
reads and writes the Confluent wire format, with the same program otherwise."""

from __future__ import annotations

import pytest

from app.program.compile import compile_text
from loadtests.bench import _label, parse_args
from loadtests.side import program_text

SPEC = {"workload": "a", "topic": "bench.a.in", "out": "bench.a.out"}


def test_the_confluent_program_reads_and_writes_avro_confluent() -> None:
    plain = compile_text("a.sql", program_text(SPEC))
    framed = compile_text("a.sql", program_text({**SPEC, "encoding": "avro-confluent"}))
    assert [t.format for t in plain.tables] == ["avro"]
    assert [t.format for t in framed.tables] == ["avro-confluent"]
    plain_out, framed_out = plain.view("big").output, framed.view("big").output
    assert plain_out is not None and framed_out is not None
    assert (plain_out.encoding, framed_out.encoding) == ("avro", "avro-confluent")
    assert framed_out.value_schema == plain_out.value_schema
    assert framed.tables[0].avro_schema == plain.tables[0].avro_schema


def test_the_encodings_option() -> None:
    args = parse_args(["--workload", "a", "--encodings", "avro", "avro-confluent"])
    assert args.encodings == ["avro", "avro-confluent"]
    assert parse_args(["--workload", "a"]).encodings == ["avro"]
    with pytest.raises(SystemExit):
        parse_args(["--workload", "a", "--encodings", "json"])


def test_a_confluent_runs_label_names_its_encoding() -> None:
    run = {"side": "tidemark", "master": "local[2]", "partitions": 2}
    assert _label({**run, "encoding": "avro-confluent"}) == "tidemark\navro-confluent\nlocal[2]\n2p"
    assert _label(run) == "tidemark\nlocal[2]\n2p"
