"""A dead letter read back: the S6 headers the sink writes are the ones parsed."""

from __future__ import annotations

from typing import Any

from app.connectors.sink.headers import format_time_value
from app.dead_letters.records import DeadLetter, iso_ms, time_sort_key

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def test_a_late_dead_letters_headers_are_read_as_the_sink_writes_them(letter: Any) -> None:
    late = letter("late", 1, 7, late=("ts", T0 - 5_000, T0))
    assert late.is_dead_letter
    assert (late.reason, late.table, late.message) == ("late", "reading", "a late record")
    assert late.source == ("readings", 1, 47)
    assert late.late == ("ts", format_time_value(T0 - 5_000, "ms"), format_time_value(T0, "ms"))
    assert late.own_headers() == (("origin", b"feed"),)
    assert late.coordinates == "readings.dlq/1/7"


def test_other_reasons_have_no_late_details_and_integer_columns_keep_integers(
    letter: Any,
) -> None:
    assert letter("malformed").late is None
    counted = letter("late", late=("seq", 17, 40), unit="integer")
    assert counted.late == ("seq", "17", "40")
    first = letter("late", late=("ts", T0, None))
    assert first.late is not None and first.late[2] == "-infinity"


def test_the_last_occurrence_of_a_header_wins(letter: Any) -> None:
    """A record refused again after a replay carries two sets of S6 headers: the newest last."""
    older = letter("late", late=("ts", T0 - 1, T0))
    again = DeadLetter(older.topic, 0, 9, None, None, None,
                       (*older.headers, ("tidemark.error.reason", b"invalid")))
    assert again.reason == "invalid"
    assert again.header("missing") is None


def test_a_record_without_the_reason_header_is_not_a_dead_letter() -> None:
    plain = DeadLetter("t", 0, 0, None, b"k", b"v", (("origin", b"x"),))
    assert not plain.is_dead_letter and plain.table is None
    assert plain.source == (None, None, None)


def test_times_are_spelled_and_ordered_like_the_sinks() -> None:
    for ms in (0, T0, T0 + 999, -1):
        assert iso_ms(ms) == format_time_value(ms, "ms")
    spelled = [format_time_value(v, "ms") for v in (T0 + 10, T0 - 10, T0)]
    assert sorted(spelled, key=time_sort_key) == [format_time_value(v, "ms")
                                                  for v in (T0 - 10, T0, T0 + 10)]
    assert sorted(["10", "-infinity", "9", "-3"], key=time_sort_key) == [
        "-infinity", "-3", "9", "10"]
