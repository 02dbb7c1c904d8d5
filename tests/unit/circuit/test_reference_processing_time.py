"""Processing time (seed 004, SPEC S10, S11, S12, S13, S15) in the reference evaluator, from
SQL text, step by step.

Processing time is the step's batch time (``StepInput.batch_time_ms``, the changelog
``ptime``): a ``pt AS PROCTIME()`` column is the batch time of the step its row arrives in;
NOW() is the batch time of the step that evaluates it. A window on ``pt`` is complete in the
first step whose batch time reaches its end, with or without input. Times are on 2024-01-01
UTC; clicks' event time ``ts`` has LATENESS 5 seconds. Expected outputs are written by hand.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from circuit_builders import at

from app.circuit.ir import Circuit
from app.circuit.reference import StepInput, evaluate
from app.program.compile import compile_program

TABLE = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,
    usr VARCHAR NOT NULL,
    pt  AS PROCTIME()
) WITH ('topic' = 'clicks');
"""


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=TABLE + text)


def click(ts: str, usr: str) -> dict[str, Any]:
    return {"ts": at(ts), "usr": usr}


#: Batch times 8:00:10, 8:00:50, 8:01:05 (no input), 8:01:30, 8:02:00 (no input). Step 2's
#: bob at 7:59:00 is late for ts (w = 8:00:00 - 5 s after step 1).
STEPS = [
    StepInput({"clicks": [click("8:00", "ann"), click("8:00:02", "bob")]},
              batch_time_ms=at("8:00:10")),
    StepInput({"clicks": [click("8:00:40", "ann"), click("7:59", "bob")]},
              batch_time_ms=at("8:00:50")),
    StepInput({}, batch_time_ms=at("8:01:05")),
    StepInput({"clicks": [click("8:01:20", "cat")]}, batch_time_ms=at("8:01:30")),
    StepInput({}, batch_time_ms=at("8:02")),
]


def values(text: str, view: str, steps: list[StepInput] = STEPS) -> list[list[Any]]:
    results = evaluate(compile_sql(text), steps)
    return [[r.value for r in result.outputs[view]] for result in results]


def window(start: str, end: str, n: int) -> dict[str, Any]:
    return {"window_start": at(start), "window_end": at(end), "clicks": n}


PER_MINUTE = """
CREATE VIEW per_minute WITH ('topic' = 'per_minute'{fmt}) AS
SELECT window_start, window_end, COUNT(*) AS clicks
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(pt), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end
{emit};
"""


def test_s13_proctime_column_and_now_are_the_batch_time_of_the_rows_step() -> None:
    written = values("CREATE VIEW stamped WITH ('topic' = 'stamped') AS "
                     "SELECT usr, pt, NOW() AS seen_at, CURRENT_TIMESTAMP AS c, "
                     "LOCALTIMESTAMP AS l, PROCTIME() AS p FROM clicks;", "stamped")

    def stamped(usr: str, batch: str) -> dict[str, Any]:
        t = at(batch)
        return {"usr": usr, "pt": t, "seen_at": t, "c": t, "l": t, "p": t}

    assert written == [
        [stamped("ann", "8:00:10"), stamped("bob", "8:00:10")],
        [stamped("ann", "8:00:50")],  # bob is late for ts
        [],
        [stamped("cat", "8:01:30")],
        [],
    ]


def test_s8_now_in_where_is_evaluated_in_the_step_the_row_arrives_in() -> None:
    # Rows whose event time is at most 30 s behind the step's batch time.
    written = values("CREATE VIEW fresh WITH ('topic' = 'fresh') AS SELECT usr FROM clicks "
                     "WHERE ts >= NOW() - INTERVAL '30' SECOND;", "fresh")
    assert written == [[{"usr": "ann"}, {"usr": "bob"}], [{"usr": "ann"}], [], [{"usr": "cat"}], []]


def test_s11_default_emit_proctime_window_updates_then_frees_once_batch_time_passes() -> None:
    circuit = compile_sql(PER_MINUTE.format(fmt="", emit=""))
    results = evaluate(circuit, STEPS)
    assert [[r.value for r in x.outputs["per_minute"]] for x in results] == [
        [window("8:00", "8:01", 2)],
        [window("8:00", "8:01", 3)],
        [],  # 8:01:05 >= 8:01: window 8:00 is complete and freed
        [window("8:01", "8:02", 1)],
        [],
    ]
    assert [x.state_rows["per_minute"] for x in results] == [1, 1, 0, 1, 0]
    # S14: a processing-time attribute publishes no waterline.
    assert {x.view_waterlines["per_minute"] for x in results} == {None}


def test_s12_after_watermark_processing_time_window_is_written_by_the_clock() -> None:
    written = values(PER_MINUTE.format(fmt=", 'format' = 'append'", emit="EMIT AFTER WATERMARK"),
                     "per_minute")
    # Both final rows come in steps without input: the batch time alone closes the window.
    assert written == [[], [], [window("8:00", "8:01", 3)], [], [window("8:01", "8:02", 1)]]


def test_s12_changelog_of_a_processing_time_window_carries_the_steps_ptime() -> None:
    written = values(PER_MINUTE.format(fmt="", emit="EMIT STREAM AFTER WATERMARK"),
                     "per_minute")
    assert written[2] == [{**window("8:00", "8:01", 3), "undo": False,
                           "ptime": at("8:01:05"), "ver": 0}]


def test_s11_window_end_at_the_batch_time_completes_in_that_step() -> None:
    steps = [StepInput({"clicks": [click("8:00", "ann")]}, batch_time_ms=at("8:00:59") + 999),
             StepInput({}, batch_time_ms=at("8:01"))]
    written = values(PER_MINUTE.format(fmt=", 'format' = 'append'", emit="EMIT AFTER WATERMARK"),
                     "per_minute", steps)
    assert written == [[], [window("8:00", "8:01", 1)]]


def test_s10_forwarded_proctime_stays_a_time_attribute_an_expression_of_it_does_not() -> None:
    circuit = compile_sql(
        "CREATE LOCAL VIEW named AS SELECT usr, pt AS arrived, pt + INTERVAL '1' SECOND AS "
        "later FROM clicks;\n"
        "CREATE VIEW per_user WITH ('topic' = 'per_user', 'format' = 'append') AS "
        "SELECT usr, window_end, COUNT(*) AS clicks "
        "FROM TABLE(TUMBLE(TABLE named, DESCRIPTOR(arrived), INTERVAL '1' MINUTE)) "
        "GROUP BY usr, window_end EMIT AFTER WATERMARK;")
    assert [a.column for a in circuit.view("named").time_attributes] == ["arrived"]
    results = evaluate(circuit, STEPS)
    assert [[r.value for r in x.outputs["per_user"]] for x in results] == [
        [], [],
        [{"usr": "ann", "window_end": at("8:01"), "clicks": 2},
         {"usr": "bob", "window_end": at("8:01"), "clicks": 1}],
        [], [{"usr": "cat", "window_end": at("8:02"), "clicks": 1}],
    ]


def test_s18_now_over_final_rows_is_the_step_that_releases_them() -> None:
    written = values(
        PER_MINUTE.format(fmt=", 'format' = 'append'", emit="EMIT AFTER WATERMARK")
        + "CREATE VIEW seen WITH ('topic' = 'seen') AS "
        "SELECT window_end, clicks, NOW() AS released FROM per_minute;", "seen")
    assert written[2] == [{"window_end": at("8:01"), "clicks": 3, "released": at("8:01:05")}]
    assert written[4] == [{"window_end": at("8:02"), "clicks": 1, "released": at("8:02")}]


def test_s15_a_replayed_step_gives_the_same_records() -> None:
    text = (PER_MINUTE.format(fmt="", emit="EMIT STREAM")
            + "CREATE VIEW stamped WITH ('topic' = 'stamped') AS "
            "SELECT usr, NOW() AS seen_at FROM clicks;")
    first = evaluate(compile_sql(text), STEPS)
    again = evaluate(compile_sql(text), STEPS)
    assert [x.outputs for x in first] == [x.outputs for x in again]
    assert first[0].outputs["stamped"][0].value == {"usr": "ann", "seen_at": at("8:00:10")}


def test_l4_hop_on_proctime_closes_each_window_by_batch_time() -> None:
    written = values(
        "CREATE VIEW hops WITH ('topic' = 'hops', 'format' = 'append') AS "
        "SELECT window_start, window_end, COUNT(*) AS clicks "
        "FROM TABLE(HOP(TABLE clicks, DESCRIPTOR(pt), INTERVAL '30' SECOND, "
        "INTERVAL '1' MINUTE)) GROUP BY window_start, window_end EMIT AFTER WATERMARK;",
        "hops")
    assert written == [
        [],
        [window("7:59:30", "8:00:30", 2)],  # 8:00:50 >= 8:00:30
        [window("8:00", "8:01", 3)],
        [window("8:00:30", "8:01:30", 1)],  # ann of step 2 only; cat is in 8:01:30's windows
        [window("8:01", "8:02", 1)],
    ]


def test_language_doc_processing_time_example_runs() -> None:
    """docs/language.md's processing-time example: per_minute counts by pt, stamped writes
    NOW() as the batch time of each row's step."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "language.md").read_text("utf-8")
    section = doc[doc.index("## Processing time"):doc.index("## Expressions and functions")]
    example = re.search(r"```sql\n(CREATE TABLE clicks.*?)```", section, re.S)
    assert example is not None
    results = evaluate(compile_program("doc.sql", text=example[1]), STEPS)
    assert [[r.value for r in x.outputs["per_minute"]] for x in results] == [
        [window("8:00", "8:01", 2)], [window("8:00", "8:01", 3)], [],
        [window("8:01", "8:02", 1)], []]
    assert [[r.value for r in x.outputs["stamped"]] for x in results][1] == [
        {"usr": "ann", "ts": at("8:00:40"), "seen_at": at("8:00:50")}]


def test_l4_cumulate_on_proctime_writes_each_window_once_batch_time_reaches_its_end() -> None:
    written = values(
        "CREATE VIEW running WITH ('topic' = 'running', 'format' = 'append') AS "
        "SELECT window_start, window_end, COUNT(*) AS clicks "
        "FROM TABLE(CUMULATE(TABLE clicks, DESCRIPTOR(pt), INTERVAL '30' SECOND, "
        "INTERVAL '1' MINUTE)) GROUP BY window_start, window_end EMIT AFTER WATERMARK;",
        "running")
    assert written == [
        [],
        [window("8:00", "8:00:30", 2)],  # 8:00:50 >= 8:00:30; ann of step 2 is after it
        [window("8:00", "8:01", 3)],
        [],  # cat at 8:01:30 is in [8:01, 8:02) only: [8:01, 8:01:30) holds no row
        [window("8:01", "8:02", 1)],
    ]


#: NOW() in HAVING and the SELECT list of an aggregate: batch times 8:00:10, 8:00:20 (no
#: input), 8:00:30.
SETTLING = [
    StepInput({"clicks": [click("8:00", "ann"), click("8:00:08", "bob")]},
              batch_time_ms=at("8:00:10")),
    StepInput({}, batch_time_ms=at("8:00:20")),
    StepInput({"clicks": [click("8:00:29", "ann")]}, batch_time_ms=at("8:00:30")),
]


def test_s12_now_in_having_and_an_aggregates_select_is_the_step_that_changes_the_group() -> None:
    """Default EMIT: a group is recomputed, HAVING and its SELECT list with it, in the steps
    whose rows change it, so NOW() there is the batch time of the step that writes the row
    (its changelog ``ptime``). A step without the group's rows leaves it as it is (bob's
    HAVING, true by 8:00:20's batch time, is not evaluated again: Flink's group aggregate
    too computes a group only when its rows come)."""
    written = values(
        "CREATE VIEW settled WITH ('topic' = 'settled', 'format' = 'changelog') AS "
        "SELECT usr, COUNT(*) AS clicks, NOW() AS at_ FROM clicks GROUP BY usr "
        "HAVING MAX(ts) <= NOW() - INTERVAL '5' SECOND;", "settled", SETTLING)

    def row(usr: str, clicks: int, batch: str, undo: bool, ptime: str, ver: int) -> dict[str, Any]:
        return {"usr": usr, "clicks": clicks, "at_": at(batch), "undo": undo,
                "ptime": at(ptime), "ver": ver}

    assert written == [
        [row("ann", 1, "8:00:10", False, "8:00:10", 0)],  # bob: 8:00:08 > 8:00:05
        [],
        # ann's 8:00:29 > 8:00:25: HAVING fails, and her row is taken back.
        [row("ann", 1, "8:00:10", True, "8:00:30", 1)],
    ]


def test_s12_now_in_an_after_watermark_aggregate_is_its_last_changes_step() -> None:
    """EMIT AFTER WATERMARK: the final row is the group as its last change left it, NOW()
    included: the batch time of the step of the window's last row, not of the later step
    that completes the window and writes it (on Spark that step is one later still for an
    event-time window, which the value does not depend on)."""
    text = """
CREATE VIEW by_ts WITH ('topic' = 'by_ts', 'format' = 'append') AS
SELECT window_end, COUNT(*) AS clicks, NOW() AS changed_at
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_end HAVING MAX(ts) < NOW() EMIT AFTER WATERMARK;
CREATE VIEW by_pt WITH ('topic' = 'by_pt', 'format' = 'append') AS
SELECT window_end, COUNT(*) AS clicks, NOW() AS changed_at
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(pt), INTERVAL '1' MINUTE))
GROUP BY window_end EMIT AFTER WATERMARK;
"""
    results = evaluate(compile_sql(text), STEPS)

    def final(end: str, clicks: int, changed: str) -> dict[str, Any]:
        return {"window_end": at(end), "clicks": clicks, "changed_at": at(changed)}

    # [8:00, 8:01) by ts is complete once cat (8:01:20) moves w(ts) to 8:01:15, in step 4;
    # its last row, ann at 8:00:40, came in step 2 (8:00:50).
    assert [[r.value for r in x.outputs["by_ts"]] for x in results] == [
        [], [], [], [final("8:01", 3, "8:00:50")], []]
    # By pt, [8:00, 8:01) completes by the clock in the step without input at 8:01:05.
    assert [[r.value for r in x.outputs["by_pt"]] for x in results] == [
        [], [], [final("8:01", 3, "8:00:50")], [], [final("8:02", 1, "8:01:30")]]
