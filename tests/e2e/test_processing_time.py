"""Processing time on Spark, through the real broker, with real time (seed 004; S11-S13, S15).

Processing time is the step's recorded batch time (Spark's batch timestamp in its offset log):
a ``pt AS PROCTIME()`` column is the batch time of the step its row arrives in, NOW() the batch
time of the step that evaluates it, and a TUMBLE window on ``pt`` is complete in the first step
whose batch time reaches its end, which Spark runs without input (by the clock).

TUMBLE 10 s on ``pt``, trigger interval 1 s, the service running continuously. Input: a warm-up
row (Spark's first step is slow), then three rows in one record batch; then no input until a
step's batch time has passed the end of the second row batch's window. Every record of every
view is compared with the reference evaluator fed the steps Spark ran (rows by offset range,
batch times from the offset log), and the clock's part is checked by hand: the window's final
row is written in a step without input whose batch time (its ``ptime``) is at or after the
window's end, and the step before it is before the end.

The same on a table with no LATENESS column at all (``taps``): no Spark watermark, its
TUMBLE windows on ``pt`` (default EMIT and EMIT AFTER WATERMARK) and an aggregate without a
time key run on the state operator's processing-time timeouts alone.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from clocked_run import ClockedRun
from spark_offset_log import Batch

pytestmark = pytest.mark.e2e

S = 1000
SIZE_S = 10

PROGRAM = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,
    usr VARCHAR NOT NULL,
    pt  AS PROCTIME()
) WITH ('topic' = '{topic}');

CREATE VIEW stamped WITH ('topic' = '{stamped}') AS
SELECT usr, ts, pt, NOW() AS seen_at, CURRENT_TIMESTAMP AS c FROM clicks;

CREATE VIEW logged WITH ('topic' = '{logged}', 'format' = 'changelog') AS
SELECT usr, NOW() AS seen_at FROM clicks WHERE ts <= NOW();

CREATE LOCAL VIEW gated AS SELECT usr, ts, NOW() AS seen_at FROM clicks;
LATENESS gated.ts INTERVAL '5' SECOND;
CREATE VIEW gated_out WITH ('topic' = '{gated_out}') AS SELECT usr, seen_at FROM gated;

CREATE VIEW per_window WITH ('topic' = '{per_window}') AS
SELECT window_start, window_end, COUNT(*) AS clicks
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(pt), INTERVAL '{size}' SECOND))
GROUP BY window_start, window_end
EMIT STREAM AFTER WATERMARK;

CREATE VIEW per_user WITH ('topic' = '{per_user}') AS
SELECT usr, window_start, window_end, COUNT(*) AS clicks
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(pt), INTERVAL '{size}' SECOND))
GROUP BY usr, window_start, window_end;
"""
VIEWS = ("stamped", "logged", "gated_out", "per_window", "per_user")


UNTIMED = """
CREATE TABLE taps (
    usr VARCHAR NOT NULL,
    pt  AS PROCTIME()
) WITH ('topic' = '{topic}');

CREATE VIEW seen WITH ('topic' = '{seen}') AS SELECT usr, pt FROM taps;

CREATE VIEW taps_final WITH ('topic' = '{taps_final}', 'format' = 'changelog') AS
SELECT window_start, window_end, COUNT(*) AS taps
FROM TABLE(TUMBLE(TABLE taps, DESCRIPTOR(pt), INTERVAL '{size}' SECOND))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;

CREATE VIEW taps_per_user WITH ('topic' = '{taps_per_user}') AS
SELECT usr, window_start, window_end, COUNT(*) AS taps
FROM TABLE(TUMBLE(TABLE taps, DESCRIPTOR(pt), INTERVAL '{size}' SECOND))
GROUP BY usr, window_start, window_end;

CREATE VIEW taps_total WITH ('topic' = '{taps_total}') AS
SELECT usr, COUNT(*) AS taps FROM taps GROUP BY usr;
"""
UNTIMED_VIEWS = ("seen", "taps_final", "taps_per_user", "taps_total")
#: Upsert views: their records are compared per key, in order.
UPSERT = ("per_user", "taps_per_user", "taps_total")


class Run(ClockedRun):
    """The program's service running on real time (:class:`ClockedRun`)."""

    def __init__(self, kafka: Any, tmp_path: Path, program: str, table: str,
                 topics: dict[str, str]) -> None:
        super().__init__(kafka, tmp_path, program.format(size=SIZE_S, **topics), table, topics)

    def produce(self, rows: list[tuple[int, str]]) -> None:
        """Rows (event time ms, user) to partition 0, in order, as one record batch (a
        table without an event-time column gets the user alone)."""
        timed = "ts" in {c.name for c in self.circuit.table(self.table).columns}
        self.produce_rows(
            [{"ts": ts, "usr": usr} if timed else {"usr": usr} for ts, usr in rows],
            partition=0,
        )

    def until_closed_by_the_clock(self, final_view: str) -> tuple[int, int]:
        """A warm-up row (Spark's first step is slow), then three rows in one record batch,
        then no input until ``final_view`` has written the final row of the rows' window:
        (the batch time of the rows' step, the end of its window)."""
        self.service.start()
        try:
            now_ms = int(time.time() * 1000)
            self.produce([(now_ms, "w")])
            self.wait("warm-up read", lambda: self.read_all() >= 0)
            now_ms = int(time.time() * 1000)
            self.produce([(now_ms - 2 * S, "a"), (now_ms - S, "b"), (now_ms, "a")])
            warm = self.read_all()
            self.wait("rows read", lambda: self.read_all() > warm)
            read = self.read_all()
            t_read = next(b.time_ms for b in self.batches() if b.batch_id == read)
            end = _window_end(t_read)
            # No more input: the window of the rows' step must close by the clock alone.
            self.wait(
                "a step past the window's end",
                lambda: any(b.time_ms >= end + 2 * S for b in self.batches()),
                seconds=120,
            )
            self.wait(
                "the window's final row",
                lambda: any(v and v["window_end"] == end for _, v in self.records(final_view)),
                seconds=60,
            )
        finally:
            self.service.stop()
        return t_read, end

    def assert_as_the_reference(self, views: tuple[str, ...], batches: list[Batch]) -> None:
        """Every record of every view equals the oracle's fed Spark's steps."""
        results = self.reference(batches)
        for view in views:
            got, want = self.records(view), self.expected(view, results)
            if view in UPSERT:  # per key, the values in order
                assert sorted(map(repr, got)) == sorted(map(repr, want)), (view, got, want)
            else:
                assert got == want, (view, got, want)

    def assert_final_by_the_clock(self, view: str, batches: list[Batch], end: int,
                                  pts: list[int]) -> None:
        """The window ending at ``end`` is written once, final, in the first step whose batch
        time reaches its end, a step that read no input; ``pts``: every row's PROCTIME."""
        by_time = {b.time_ms: b for b in batches}
        finals = [v for _, v in self.records(view) if v["window_end"] == end]
        assert len(finals) == 1
        final = finals[0]
        counted = "clicks" if "clicks" in final else "taps"
        assert final[counted] == sum(1 for pt in pts if end - SIZE_S * S <= pt < end)
        assert final[counted] >= 3 and not final["undo"]
        written = by_time[final["ptime"]]
        assert written.time_ms >= end
        before = [b for b in batches if b.batch_id < written.batch_id]
        assert before and before[-1].time_ms < end
        assert written.ends == before[-1].ends, "the closing step read no input"


def _window_end(ms: int) -> int:
    return (ms // (SIZE_S * S) + 1) * SIZE_S * S


def test_proctime_and_now_are_sparks_batch_time_and_windows_close_by_the_clock_s11_s13(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    topics = {"topic": unique_topic("in"), **{v: unique_topic(v) for v in VIEWS}}
    kafka.create_topic(topics["topic"], partitions=1)
    run = Run(kafka, tmp_path, PROGRAM, "clicks", topics)
    t_read, end = run.until_closed_by_the_clock("per_window")
    batches = run.batches()

    # Every record of every view equals the oracle's fed Spark's steps: pt and NOW() are the
    # batch time of each row's step, the windows those batch times put the rows in.
    run.assert_as_the_reference(VIEWS, batches)

    by_time = {b.time_ms: b for b in batches}
    stamped = [v for _, v in run.records("stamped")]
    assert [v["usr"] for v in stamped] == ["w", "a", "b", "a"]
    for value in stamped:
        assert value["pt"] == value["seen_at"] == value["c"]
        assert value["pt"] in by_time  # a batch time of Spark's offset log
    assert {v["pt"] for v in stamped[1:]} == {t_read}
    # changelog: NOW() is the ptime Spark writes for the same step.
    for _, value in run.records("logged"):
        assert value["seen_at"] == value["ptime"]

    # By the clock: the window of the rows' step is written once, final, in the first step
    # whose batch time reaches its end; no input came in that step.
    run.assert_final_by_the_clock("per_window", batches, end, [v["pt"] for v in stamped])


def test_proctime_windows_of_a_table_without_lateness_close_by_the_clock_s11(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """No LATENESS column, so no Spark watermark: the windows on ``pt`` complete by the
    step's batch time alone, in every EMIT form, beside an aggregate without a time key."""
    topics = {"topic": unique_topic("in"), **{v: unique_topic(v) for v in UNTIMED_VIEWS}}
    kafka.create_topic(topics["topic"], partitions=1)
    run = Run(kafka, tmp_path, UNTIMED, "taps", topics)
    assert run.service.physical.queries[0].watermark is None
    t_read, end = run.until_closed_by_the_clock("taps_final")
    batches = run.batches()

    run.assert_as_the_reference(UNTIMED_VIEWS, batches)

    seen = [v for _, v in run.records("seen")]
    assert [v["usr"] for v in seen] == ["w", "a", "b", "a"]
    assert {v["pt"] for v in seen[1:]} == {t_read}
    run.assert_final_by_the_clock("taps_final", batches, end, [v["pt"] for v in seen])
    # Default EMIT: each user's window updated in the rows' step, nothing more at its close.
    latest = {(k["usr"], k["window_end"]): v for k, v in run.records("taps_per_user")}
    assert latest[("a", end)]["taps"] == 2 and latest[("b", end)]["taps"] == 1
    totals = {k["usr"]: v["taps"] for k, v in run.records("taps_total")}
    assert totals == {"w": 1, "a": 2, "b": 1}


NOW_AFTER_AGGREGATE = """
CREATE TABLE clicks (
    ts  TIMESTAMP NOT NULL LATENESS INTERVAL '2' SECOND,
    usr VARCHAR NOT NULL
) WITH ('topic' = '{topic}');

CREATE VIEW closed WITH ('topic' = '{closed}', 'format' = 'append') AS
SELECT window_start, window_end, COUNT(*) AS clicks, NOW() AS changed_at
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '{size}' SECOND))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;

CREATE VIEW settled WITH ('topic' = '{settled}', 'format' = 'changelog') AS
SELECT usr, COUNT(*) AS clicks, MAX(ts) AS last_ts, CURRENT_TIMESTAMP AS seen_at
FROM clicks GROUP BY usr
HAVING MAX(ts) <= NOW();
"""


def test_now_in_having_and_an_aggregates_select_list_is_its_last_changes_batch_time_s12(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """NOW() after an aggregate, on the state operator: the batch time of the step of the
    group's last change. ``settled`` (default EMIT) writes in that step, so NOW() is its
    ``ptime``; HAVING reads it there (a user whose latest ``ts`` is ahead of the step's batch
    time is taken back). ``closed`` (EMIT AFTER WATERMARK on ``ts``) writes a window's final
    row in a later step, once the waterline passes its end, with NOW() of the step that read
    its last row. Input: a warm-up row 30 s behind the clock; two rows 25 s behind it; then
    a row of ``a`` 2 s behind it and a row of ``b`` 20 s ahead of it, which moves the
    waterline past the earlier windows' ends."""
    views = ("closed", "settled")
    topics = {"topic": unique_topic("in"), **{v: unique_topic(v) for v in views}}
    kafka.create_topic(topics["topic"], partitions=1)
    run = ClockedRun(kafka, tmp_path, NOW_AFTER_AGGREGATE.format(size=SIZE_S, **topics),
                     "clicks", topics)

    def produce(rows: list[tuple[int, str]]) -> int:
        """The rows as one record batch; the step that read them."""
        before = run.read_all()
        run.produce_rows([{"ts": ts, "usr": usr} for ts, usr in rows], partition=0)
        run.wait("rows read", lambda: run.read_all() > before)
        return run.read_all()

    run.service.start()
    try:
        # The warm-up and step a's rows lie at least a window before step b's, so some
        # window's last row is read before step b, however fast the steps come.
        produce([(int(time.time() * 1000) - 30 * S, "w")])
        now_ms = int(time.time() * 1000)
        step_a = produce([(now_ms - 25 * S, "a"), (now_ms - 24 * S, "b")])
        now_ms = int(time.time() * 1000)
        step_b = produce([(now_ms - 2 * S, "a"), (now_ms + 20 * S, "b")])
        ahead = now_ms + 20 * S
        ends = {_window_end(row["ts"]) for _, _, row in run.placed if row["ts"] != ahead}
        run.wait("the windows' final rows",
                 lambda: len(run.records("closed")) >= len(ends), seconds=60)
    finally:
        run.service.stop()
    batches = run.batches()
    results = run.reference(batches)

    # Every record equals the oracle's fed Spark's steps (across keys in any order).
    for view in views:
        got, want = run.records(view), run.expected(view, results)
        assert sorted(map(repr, got)) == sorted(map(repr, want)), (view, got, want)

    by_id = {b.batch_id: b for b in batches}
    offsets = {o: row for _, o, row in run.placed}

    def read_in(offset: int) -> int:
        """The batch time of the step that read the record at ``offset``."""
        previous = 0
        for batch in batches:
            if previous <= offset < batch.ends.get(0, 0):
                return batch.time_ms
            previous = batch.ends.get(0, 0)
        raise AssertionError(offset)

    # settled: NOW() (seen_at) is the batch time of the step that wrote the row, its ptime,
    # a step that read the user's rows; b, 20 s ahead in step_b, fails HAVING: taken back.
    settled = [v for _, v in run.records("settled")]
    for value in settled:
        if not value["undo"]:
            assert value["seen_at"] == value["ptime"]
            assert value["last_ts"] <= value["seen_at"]
    t_a, t_b = by_id[step_a].time_ms, by_id[step_b].time_ms
    by_user = {u: [(v["undo"], v["clicks"], v["ptime"]) for v in settled if v["usr"] == u]
               for u in ("a", "b")}
    assert by_user == {"a": [(False, 1, t_a), (True, 1, t_b), (False, 2, t_b)],
                       "b": [(False, 1, t_a), (True, 1, t_b)]}

    # closed: each window once, final, with NOW() = the batch time of the step that read its
    # last row, before the step whose waterline completed it.
    closed = {v["window_end"]: v for _, v in run.records("closed")}
    assert set(closed) == ends
    for end, value in closed.items():
        rows = [o for o, row in offsets.items() if _window_end(row["ts"]) == end]
        assert value["clicks"] == len(rows)
        assert value["changed_at"] == max(read_in(o) for o in rows)
        assert value["changed_at"] <= t_b
    assert any(v["changed_at"] < t_b for v in closed.values()), "a final row written later"


MIXED = """
CREATE TABLE taps (
    usr VARCHAR NOT NULL,
    ts  TIMESTAMP NOT NULL,
    pt  AS PROCTIME()
) WITH ('topic' = '{topic}');

CREATE VIEW taps_final WITH ('topic' = '{taps_final}', 'format' = 'changelog') AS
SELECT window_start, window_end, COUNT(*) AS taps
FROM TABLE(TUMBLE(TABLE taps, DESCRIPTOR(pt), INTERVAL '{size}' SECOND))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;

CREATE LOCAL VIEW timed AS SELECT usr, ts FROM taps;
LATENESS timed.ts INTERVAL '5' SECOND;

CREATE VIEW per_min WITH ('topic' = '{per_min}', 'format' = 'append') AS
SELECT window_start, window_end, usr, COUNT(*) AS taps
FROM TABLE(TUMBLE(TABLE timed, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, usr EMIT AFTER WATERMARK;
"""
MINUTE = 60 * S


@pytest.mark.slow  # ~1.5 min: `-m slow -k event_time_window_of_a_views_lateness`
def test_proctime_windows_beside_an_event_time_window_of_a_views_lateness_s11_s19(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """One table, two waterlines: ``taps_final``'s windows on ``pt`` close by the batch time,
    ``per_min``'s on ``timed.ts`` (the view's own LATENESS) by that view's waterline. Spark
    keeps one watermark per query, so the planner reads ``timed`` through a stage boundary
    (ADR 0023) and ``per_min`` runs in a query of its own; ``taps_final`` closes by the
    clock as it does alone. A last row two minutes ahead moves ``timed``'s waterline past
    the earlier rows' minutes."""
    views = ("taps_final", "per_min")
    topics = {"topic": unique_topic("in"), **{v: unique_topic(v) for v in views}}
    kafka.create_topic(topics["topic"], partitions=1)
    run = Run(kafka, tmp_path, MIXED, "taps", topics)
    queries = run.service.physical.queries
    assert [q.tables for q in queries] == [("taps",), ("__in_timed",)]
    assert queries[0].watermark is None and queries[1].watermark == "__in_timed.ts"
    run.service.start()
    try:
        now_ms = int(time.time() * 1000)
        run.produce([(now_ms, "w")])
        run.wait("warm-up read", lambda: run.read_all() >= 0)
        warm = run.read_all()
        now_ms = int(time.time() * 1000)
        run.produce([(now_ms - 2 * S, "a"), (now_ms - S, "b"), (now_ms, "a")])
        run.wait("rows read", lambda: run.read_all() > warm)
        t_read = next(b.time_ms for b in run.batches() if b.batch_id == run.read_all())
        end = _window_end(t_read)
        run.produce([(now_ms + 2 * MINUTE, "z")])
        timed = [row for _, _, row in run.placed if row["usr"] != "z"]
        minutes = Counter(((row["ts"] // MINUTE + 1) * MINUTE, row["usr"]) for row in timed)
        run.wait("a step past the window's end",
                 lambda: any(b.time_ms >= end + 2 * S for b in run.batches()), seconds=120)
        run.wait("per_min's minutes",
                 lambda: len(run.records("per_min")) >= len(minutes), seconds=120)
    finally:
        run.service.stop()
    batches = run.batches()
    results = run.reference(batches)
    # taps_final: every record as the oracle's fed Spark's steps, the window closed by the
    # clock; per_min: the oracle's rows (a step of the later query may write them later).
    run.assert_as_the_reference(("taps_final",), batches)
    finals = {v["window_end"]: v for _, v in run.records("taps_final")}
    assert finals[end]["ptime"] >= end and finals[end]["taps"] >= 3
    got = Counter(repr(v) for _, v in run.records("per_min"))
    assert got == Counter(repr(v) for _, v in run.expected("per_min", results))
    by_hand = Counter({(v["window_end"], v["usr"]): v["taps"]
                       for _, v in run.records("per_min")})
    assert by_hand == minutes

