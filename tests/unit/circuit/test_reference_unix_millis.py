"""UNIX_MILLIS(ts), a TIMESTAMP's epoch milliseconds (docs/language.md, Expressions and
functions), from SQL text in both dialects through the reference evaluator, and the Spark SQL
it renders to. sqlglot reads ``UNIX_MILLIS(...)`` as its own node (``exp.UnixMillis``), not as
an anonymous function, so the compiler maps that node to the catalog's UNIX_MILLIS.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from app.circuit import functions as fn
from app.circuit.ir import Circuit, Project
from app.circuit.reference import StepInput, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program

KAFKA = ("'connector' = 'kafka', 'topic' = '{topic}', "
         "'properties.bootstrap.servers' = 'localhost:9092', 'format' = 'json'")

TIDEMARK = """
CREATE TABLE bid (
    bidtime TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND,
    paid    TIMESTAMP,
    price   INT NOT NULL
) WITH ('topic' = 'bids');
CREATE VIEW epochs WITH ('topic' = 'epochs') AS
SELECT UNIX_MILLIS(bidtime) AS epoch_ms,
       unix_millis(paid) - UNIX_MILLIS(bidtime) AS wait_ms,
       TIMESTAMP_MILLIS(UNIX_MILLIS(bidtime) + 1000) AS a_second_later
FROM bid
WHERE UNIX_MILLIS(bidtime) >= 0;
"""

FLINK = f"""
CREATE TABLE bid (
    bidtime TIMESTAMP(3),
    paid    TIMESTAMP_LTZ(3),
    price   INT,
    WATERMARK FOR bidtime AS bidtime - INTERVAL '1' SECOND
) WITH ({KAFKA.format(topic='bids')});
CREATE TABLE epochs (epoch_ms BIGINT, wait_ms BIGINT, a_second_later TIMESTAMP(3))
WITH ({KAFKA.format(topic='epochs')});
INSERT INTO epochs
SELECT UNIX_MILLIS(bidtime), unix_millis(paid) - UNIX_MILLIS(bidtime),
       TIMESTAMP_MILLIS(UNIX_MILLIS(bidtime) + 1000)
FROM bid
WHERE UNIX_MILLIS(bidtime) >= 0;
"""

EIGHT = int(dt.datetime(2020, 4, 15, 8, 5, tzinfo=dt.UTC).timestamp() * 1000)


def outputs(circuit: Circuit) -> list[dict[str, Any]]:
    steps = [StepInput({"bid": [{"bidtime": EIGHT, "paid": EIGHT + 2500, "price": 4},
                                {"bidtime": EIGHT + 60_000, "paid": None, "price": 2}]})]
    return [dict(r.value) for result in evaluate(circuit, steps)
            for r in result.outputs["epochs"]]


@pytest.mark.parametrize("text", [TIDEMARK, FLINK], ids=["tidemark", "flink"])
def test_l3_unix_millis_is_a_timestamps_epoch_milliseconds(text: str) -> None:
    circuit = compile_program("unix_millis.sql", text=text)
    assert [(c.name, c.type.name) for c in circuit.view("epochs").columns] == [
        ("epoch_ms", "BIGINT"), ("wait_ms", "BIGINT"), ("a_second_later", "TIMESTAMP")]
    assert outputs(circuit) == [
        {"epoch_ms": EIGHT, "wait_ms": 2500, "a_second_later": EIGHT + 1000},
        {"epoch_ms": EIGHT + 60_000, "wait_ms": None, "a_second_later": EIGHT + 61_000}]


@pytest.mark.parametrize("text", [TIDEMARK, FLINK], ids=["tidemark", "flink"])
def test_s8_unix_millis_renders_to_sparks_unix_millis(text: str) -> None:
    view = compile_program("unix_millis.sql", text=text).view("epochs")
    project = next(op for op in view.operators if isinstance(op, Project))
    epoch, wait, later = (fn.to_spark_sql(expr) for _, expr in project.outputs)
    assert epoch == "unix_millis(`bidtime`)"
    assert wait == "try_subtract(unix_millis(`paid`), unix_millis(`bidtime`))"
    assert "THEN TIMESTAMP_MILLIS(try_add(unix_millis(`bidtime`), CAST(1000 AS BIGINT))) END" \
        in later


def test_l7_the_cast_errors_fix_compiles_as_it_says() -> None:
    """CAST(ts AS BIGINT) is refused with UNIX_MILLIS(ts) as its fix: the fix compiles."""
    cast = TIDEMARK.replace("UNIX_MILLIS(bidtime) AS epoch_ms", "CAST(bidtime AS BIGINT) AS "
                            "epoch_ms")
    with pytest.raises(ProgramError) as info:
        compile_program("unix_millis.sql", text=cast)
    first = info.value.diagnostics[0]
    assert first.message == "cannot CAST TIMESTAMP to BIGINT"
    assert first.fix == "UNIX_MILLIS(ts) is a TIMESTAMP's epoch milliseconds"
    compile_program("unix_millis.sql", text=TIDEMARK)


@pytest.mark.parametrize("argument, message, fix", [
    ("price", "UNIX_MILLIS needs a TIMESTAMP, not INT",
     "give UNIX_MILLIS a TIMESTAMP; TIMESTAMP_MILLIS(ms) is the TIMESTAMP of epoch "
     "milliseconds"),
    ("'2020-04-15 08:05:00'", "UNIX_MILLIS needs a TIMESTAMP, not VARCHAR",
     "write UNIX_MILLIS(CAST(s AS TIMESTAMP)) to read a time from text"),
], ids=["int", "text"])
def test_l7_unix_millis_of_another_type_is_refused_with_a_fix(argument: str, message: str,
                                                                fix: str) -> None:
    text = TIDEMARK.replace("UNIX_MILLIS(bidtime) AS epoch_ms",
                            f"UNIX_MILLIS({argument}) AS epoch_ms")
    with pytest.raises(ProgramError) as info:
        compile_program("unix_millis.sql", text=text)
    first = info.value.diagnostics[0]
    assert (first.position.line, first.position.column) == (8, 8)
    assert (first.message, first.fix) == (message, fix)


def test_l7_unix_millis_without_its_argument_is_named() -> None:
    text = TIDEMARK.replace("UNIX_MILLIS(bidtime) AS epoch_ms", "UNIX_MILLIS() AS epoch_ms")
    with pytest.raises(ProgramError) as info:
        compile_program("unix_millis.sql", text=text)
    first = info.value.diagnostics[0]
    assert first.message.endswith("UNIX_MILLIS is missing its this argument (wrong number of "
                                  "arguments)")
    assert first.fix == ("give UNIX_MILLIS all its arguments (docs/language.md, Expressions "
                         "and functions)")
