"""Which dead letters a command takes: offsets, Kafka time, reason, table, partition."""

from __future__ import annotations

from typing import Any

import pytest

from app.dead_letters.records import DeadLetter
from app.dead_letters.selection import Selection, parse_time
from app.errors import ConfigError

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def test_times_are_iso_epoch_ms_or_a_duration_before_now() -> None:
    assert parse_time("--since", "2026-01-01T00:00:00Z") == T0
    assert parse_time("--since", "2026-01-01T01:00:00+01:00") == T0
    assert parse_time("--since", "2026-01-01T00:00:00") == T0, "UTC when no offset"
    assert parse_time("--since", str(T0)) == T0
    assert parse_time("--since", "2h", now_ms=T0) == T0 - 7_200_000
    assert parse_time("--since", "90s", now_ms=T0) == T0 - 90_000
    assert parse_time("--since", "1d", now_ms=T0) == T0 - 86_400_000
    with pytest.raises(ConfigError, match="--until 'yesterday' is not a time"):
        parse_time("--until", "yesterday")


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"reasons": ["late", "dropped"]}, "--reason dropped"),
        ({"from_offset": -1}, "--from-offset -1"),
        ({"from_offset": 5, "to_offset": 4}, "--to-offset 4 is below --from-offset 5"),
        ({"limit": 0}, "--limit 0"),
        ({"partitions": [-2]}, "--partition -2"),
        ({"since": "2026-01-02", "until": "2026-01-01"}, "is not after --since"),
    ],
)
def test_bad_options_name_themselves(options: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        Selection.of(**options)


def test_offsets_bound_every_partition_both_ends_included() -> None:
    selection = Selection.of(from_offset=3, to_offset=5)
    assert selection.offset_range(0, 100) == (3, 6)
    assert selection.offset_range(4, 5) == (4, 5), "within what the partition holds"
    start, end = selection.offset_range(10, 20)
    assert start >= end, "a partition that starts after --to-offset is read not at all"
    assert Selection().offset_range(7, 9) == (7, 9)


def test_time_bounds_include_since_and_exclude_until(letter: Any) -> None:
    selection = Selection.of(since=str(T0), until=str(T0 + 1000))
    assert selection.matches(letter("late", timestamp_ms=T0))
    assert selection.matches(letter("late", timestamp_ms=T0 + 999))
    assert not selection.matches(letter("late", timestamp_ms=T0 + 1000))
    assert not selection.matches(letter("late", timestamp_ms=T0 - 1))
    assert not selection.matches(letter("late", timestamp_ms=None)), "no time, not in range"
    assert Selection().matches(letter("late", timestamp_ms=None))


def test_reason_table_and_partition_take_any_value_given(letter: Any) -> None:
    selection = Selection.of(reasons=["late", "Future"], tables=["reading"], partitions=[1])
    assert selection.matches(letter("late", partition=1))
    assert selection.matches(letter("future", partition=1))
    assert not selection.matches(letter("malformed", partition=1))
    assert not selection.matches(letter("late", partition=0))
    assert not selection.matches(letter("late", partition=1, table="other"))
    assert selection.reads_partition(1) and not selection.reads_partition(0)


def test_a_record_without_s6_headers_is_in_range_but_never_selected() -> None:
    plain = DeadLetter("t", 0, 4, T0, None, b"v", ())
    assert Selection().in_range(plain)
    assert not Selection().matches(plain)


def test_a_selection_says_what_it_takes() -> None:
    assert Selection().describe() == "every dead letter"
    text = Selection.of(reasons=["late"], from_offset=2, since=str(T0), limit=5).describe()
    assert text == "reason late, offsets 2.., timestamp 2026-01-01T00:00:00.000Z.., first 5"
    text = Selection.of(reasons=["late"], include_replayed=False).describe()
    assert text == "reason late, no replayed records"


def test_without_include_replayed_a_replayed_record_refused_again_is_left_out(
    letter: Any,
) -> None:
    first = letter("late", 0, 3)
    again = letter("late", 0, 4, own=(("origin", b"feed"),
                                      ("tidemark.replayed-from", b"readings.dlq/0/3")))
    assert first.replayed_from is None
    assert again.replayed_from == "readings.dlq/0/3"
    guarded = Selection.of(include_replayed=False)
    assert guarded.matches(again) and guarded.leaves_out_replay(again)
    assert guarded.matches(first) and not guarded.leaves_out_replay(first)
    # summary and show take every dead letter (the default)
    assert not Selection.of().leaves_out_replay(again)
