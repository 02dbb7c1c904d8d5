"""SESSION windows (SPEC L4, S9, S11) in the reference evaluator, from SQL text, step by step.

A user's clicks at most the gap (10 minutes) apart form one session ``[first, last + gap)``
(Flink's and Spark's rule: a click at a session's end joins it); a session is final once
the waterline of its time column passes its end (a future row is at or above the
waterline, too far to join it), and only then written (EMIT AFTER WATERMARK) and freed.
clicks has LATENESS 1 minute. Expected outputs are written by hand.
"""

from __future__ import annotations

from typing import Any

import pytest
from circuit_builders import at

from app.circuit.ir import Circuit
from app.circuit.reference import Punctuation, StepInput, evaluate
from app.circuit.windows import sessions
from app.errors import ProgramError
from app.program.compile import compile_program
from app.program.lexer import CompileFailure

TABLE = """
CREATE TABLE clicks (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    usr  VARCHAR NOT NULL,
    url  VARCHAR
) WITH ('topic' = 'clicks');
"""

VISITS = """
CREATE VIEW visits WITH ('topic' = 'visits') AS
SELECT usr, window_start, window_end, COUNT(*) AS clicks, MAX(url) AS last_url
FROM TABLE(SESSION(TABLE clicks PARTITION BY usr, DESCRIPTOR(ts), INTERVAL '10' MINUTE))
{where}
GROUP BY usr, window_start, window_end
EMIT AFTER WATERMARK;
"""


def compile_sql(text: str) -> Circuit:
    return compile_program("test.sql", text=TABLE + text)


def visits(where: str = "") -> Circuit:
    return compile_sql(VISITS.format(where=where))


def click(clock: str, usr: str, url: str | None = None) -> dict[str, Any]:
    return {"ts": at(clock), "usr": usr, "url": url}


def visit(usr: str, start: str, end: str, clicks: int, last_url: str | None) -> dict[str, Any]:
    return {"usr": usr, "window_start": at(start), "window_end": at(end), "clicks": clicks,
            "last_url": last_url}


def test_s9_sessions_split_where_neighbours_are_a_gap_or_more_apart() -> None:
    assert sessions([0, 9, 19, 30], 10) == [(0, 29, 3), (30, 40, 1)]
    assert sessions([], 10) == []
    with pytest.raises(ValueError, match="positive"):
        sessions([1], 0)


def test_s11_a_session_is_written_once_the_waterline_reaches_its_end() -> None:
    """ann clicks at 8:00, 8:05 and (out of order) 8:03: one session [8:00, 8:15). bob's
    8:02 click is a session [8:02, 8:12). Step 2's 8:14 click moves w to 8:13: bob's session
    is final (w > 8:12); ann's is not (a click at 8:13..8:15 would extend it). Step 3's
    8:20 click (w = 8:19) closes ann's, and that click starts a new session of ann's,
    final once w passes 8:30."""
    results = evaluate(visits(), [
        StepInput({"clicks": [click("8:00", "ann", "a"), click("8:05", "ann", "c"),
                              click("8:03", "ann", "b"), click("8:02", "bob", "x")]}),
        StepInput({"clicks": [click("8:14", "cid")]}),
        StepInput({"clicks": [click("8:20", "ann", "d")]}),
        StepInput({}, punctuations={"clicks": [Punctuation(at("8:31"))]}),
        StepInput({}, punctuations={"clicks": [Punctuation(at("8:32"))]}),
    ])
    assert [[r.value for r in x.outputs["visits"]] for x in results] == [
        [],
        [visit("bob", "8:02", "8:12", 1, "x")],
        [visit("ann", "8:00", "8:15", 3, "c")],
        [visit("cid", "8:14", "8:24", 1, None)],
        [visit("ann", "8:20", "8:30", 1, "d")],
    ]
    # Held: the rows of open sessions, and no group once written.
    assert [x.state_rows["visits"] for x in results] == [4, 4, 2, 1, 0]
    assert [x.view_waterlines["visits"] for x in results] == [
        at("8:04"), at("8:13"), at("8:19"), at("8:30"), at("8:31")]


def test_s9_a_row_between_two_sessions_merges_them() -> None:
    """8:00 and 8:11 are two sessions, [8:00, 8:10) and [8:11, 8:21), while w = 8:10; an
    8:10 click (on time: equal to w; at the first one's end, so it joins it) links them."""
    results = evaluate(visits(), [
        StepInput({"clicks": [click("8:00", "ann"), click("8:11", "ann")]}),
        StepInput({"clicks": [click("8:10", "ann")]}),
        StepInput({}, punctuations={"clicks": [Punctuation(at("8:23"))]}),
    ])
    assert [[r.value for r in x.outputs["visits"]] for x in results] == [
        [], [], [visit("ann", "8:00", "8:21", 3, None)]]


def test_s9_sessions_are_formed_by_the_rows_where_keeps() -> None:
    """As Flink's window aggregation and Spark's session_window: WHERE comes first, so a
    filtered-out click neither extends nor links a session."""
    results = evaluate(visits("WHERE url IS NOT NULL"), [
        StepInput({"clicks": [click("8:00", "ann", "a"), click("8:08", "ann"),
                              click("8:15", "ann", "b")]}),
        StepInput({}, punctuations={"clicks": [Punctuation(at("8:40"))]}),
    ])
    # The first closes at once: w = 8:14 after step 1.
    assert [[r.value for r in x.outputs["visits"]] for x in results] == [
        [visit("ann", "8:00", "8:10", 1, "a")], [visit("ann", "8:15", "8:25", 1, "b")]]


def test_s18_a_view_over_sessions_reads_each_final_once() -> None:
    """window_end of a SESSION view keeps w = w(ts) (a session not yet written ends at or
    after w): a TUMBLE over it counts the sessions ending in each hour."""
    circuit = compile_sql("""
CREATE LOCAL VIEW ends AS
SELECT usr, window_start AS began, window_end AS ended, COUNT(*) AS clicks
FROM TABLE(SESSION(TABLE clicks PARTITION BY usr, DESCRIPTOR(ts), INTERVAL '10' MINUTE))
GROUP BY usr, window_start, window_end
EMIT AFTER WATERMARK;

CREATE VIEW per_hour WITH ('topic' = 'per_hour', 'format' = 'append') AS
SELECT window_end AS hour_end, COUNT(*) AS sessions
FROM TABLE(TUMBLE(TABLE ends, DESCRIPTOR(ended), INTERVAL '1' HOUR))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;
""")
    assert [a.column for a in circuit.view("ends").time_attributes] == ["ended"]
    results = evaluate(circuit, [
        StepInput({"clicks": [click("8:00", "ann"), click("8:30", "bob")]}),
        StepInput({}, punctuations={"clicks": [Punctuation(at("9:05"))]}),
    ])
    assert [r.value for r in results[1].outputs["per_hour"]] == [
        {"hour_end": at("9:00"), "sessions": 2}]


def test_s16_a_join_of_session_ends_keeps_a_row_a_session_ending_at_the_waterline_matches(
) -> None:
    """A session closes once the waterline passes its end, so one not yet written may end
    at the waterline itself, not only above it (as a TUMBLE's end is). ann's sessions end at
    8:10 (written in step 2, w = 8:11) and 8:22; after step 3 w = 8:22 exactly, and the 8:22
    session is written in step 4. Its partner, the 8:10 session (8:10 is within
    [8:22 - 12 min, 8:22 - 1 min]), must still be held then: a floor of w + 1 for the later
    side freed it after step 3 and lost the pair."""
    circuit = compile_sql("""
CREATE LOCAL VIEW ends AS
SELECT usr, window_end AS ended, COUNT(*) AS clicks
FROM TABLE(SESSION(TABLE clicks PARTITION BY usr, DESCRIPTOR(ts), INTERVAL '10' MINUTE))
GROUP BY usr, window_start, window_end
EMIT AFTER WATERMARK;

CREATE VIEW follows WITH ('topic' = 'follows', 'format' = 'append') AS
SELECT l.usr AS usr, l.ended AS later, r.ended AS earlier
FROM ends AS l LEFT JOIN ends AS r
  ON l.usr = r.usr
 AND r.ended BETWEEN l.ended - INTERVAL '12' MINUTE AND l.ended - INTERVAL '1' MINUTE;
""")
    results = evaluate(circuit, [
        StepInput({"clicks": [click("8:00", "ann")]}),
        StepInput({"clicks": [click("8:12", "ann"), click("8:12", "cid")]}),
        StepInput({"clicks": [click("8:23", "cid")]}),
        StepInput({}, punctuations={"clicks": [Punctuation(at("9:00"))]}),
    ])

    def row(usr: str, later: str, earlier: str | None) -> dict[str, Any]:
        return {"usr": usr, "later": at(later), "earlier": None if earlier is None
                else at(earlier)}

    written = [sorted((r.value for r in x.outputs["follows"]), key=repr) for x in results]
    assert written == [
        [],
        [row("ann", "8:10", None)],
        [],
        sorted([row("ann", "8:22", "8:10"), row("cid", "8:22", None),
                row("cid", "8:33", "8:22")], key=repr),
    ]


@pytest.mark.parametrize(("view", "message"), [
    (VISITS.format(where="").replace("EMIT AFTER WATERMARK", ""),
     "SESSION windows, which are known only once they close"),
    ("""CREATE VIEW v WITH ('topic' = 'v') AS SELECT usr, window_start FROM TABLE(SESSION(
TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE));""", "only an aggregate can read it"),
    ("""CREATE VIEW v WITH ('topic' = 'v') AS SELECT usr, window_start, COUNT(*) AS n FROM
TABLE(SESSION(TABLE clicks PARTITION BY usr, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY usr, window_start EMIT AFTER WATERMARK;""", "must GROUP BY window_end"),
    ("""CREATE VIEW v WITH ('topic' = 'v') AS SELECT url, window_end, COUNT(*) AS n FROM
TABLE(SESSION(TABLE clicks PARTITION BY usr, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY url, window_end EMIT AFTER WATERMARK;""", "must name the GROUP BY keys"),
    ("""CREATE VIEW v WITH ('topic' = 'v') AS SELECT window_end, COUNT(*) AS n FROM
TABLE(SESSION(TABLE clicks, DESCRIPTOR(ts), INTERVAL '0' MINUTE))
GROUP BY window_end EMIT AFTER WATERMARK;""", "gap must be positive"),
])
def test_l7_session_windows_are_refused_with_a_fix(view: str, message: str) -> None:
    with pytest.raises((CompileFailure, ProgramError), match=message):
        compile_sql(view)
