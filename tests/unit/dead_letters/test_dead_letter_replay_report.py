"""The replay's ledger records and what a replay reports (the Kafka part: the e2e test)."""

from __future__ import annotations

from typing import Any

from app.dead_letters.replay import (
    LedgerEntry,
    ReplayReport,
    ledger_key,
    ledger_topic,
    replayed_targets,
    transactional_id,
)

T0 = 1_767_225_600_000


def test_a_ledger_entry_survives_its_json() -> None:
    entry = LedgerEntry("readings.dlq/1/7", "fix", T0, "abc", times=3)
    assert LedgerEntry.from_json(entry.to_json()) == entry
    assert b'"replayed_at":"2026-01-01T00:00:00.000Z"' in entry.to_json()


def test_names_of_the_ledger_its_keys_and_the_transactional_id() -> None:
    assert ledger_topic("readings.dlq") == "readings.dlq.replays"
    assert ledger_key("readings.dlq/1/7", "fix") == "readings.dlq/1/7>fix"
    assert transactional_id("readings.dlq") == "tidemark-replay-readings.dlq"


def test_the_ledger_says_where_each_dead_letter_went() -> None:
    entries = [LedgerEntry("d/0/1", "fix", T0, "a"), LedgerEntry("d/0/1", "other", T0, "b"),
               LedgerEntry("d/0/2", "fix", T0, "a")]
    ledger = {ledger_key(e.dead_letter, e.target): e for e in entries}
    assert replayed_targets(ledger) == {"d/0/1": ["fix", "other"], "d/0/2": ["fix"]}


def test_a_second_replay_says_what_was_already_replayed(letter: Any) -> None:
    report = ReplayReport("readings.dlq", "fix", "new", forced=False, dry_run=False)
    for offset in (3, 4, 5, 9):
        report.already.append((letter("late", 0, offset), LedgerEntry(
            f"readings.dlq/0/{offset}", "fix", T0, "first")))
    report.already.append((letter("late", 1, 2), LedgerEntry("readings.dlq/1/2", "fix", T0,
                                                               "first")))
    text = report.to_text()
    assert "skipped: 5 dead letter(s) already replayed to fix:\n" in text
    assert "  partition 0 offset(s) 3..5, 9 (4), by replay first at 2026-01-01T00:00:00.000Z\n" \
        in text
    assert "  partition 1 offset(s) 2 (1), by replay first" in text
    assert "(--force writes them again)" in text and "nothing written to fix" in text


def test_a_replay_reports_what_it_wrote_and_a_dry_run_what_it_would(letter: Any) -> None:
    done = ReplayReport("readings.dlq", "fix", "r1", forced=False, dry_run=False, written=1200,
                        transactions=3)
    assert done.to_text() == (
        "replayed 1200 dead letter(s) of readings.dlq to fix in 3 transaction(s) (replay r1,"
        " recorded in readings.dlq.replays)\n"
    )
    dry = ReplayReport("readings.dlq", "fix", "r2", forced=False, dry_run=True)
    dry.would_write = [letter("late", 0, o) for o in range(20)]
    assert dry.to_text().startswith(
        "dry run: would replay 20 dead letter(s) of readings.dlq to fix\n"
        "  partition 0 offset(s) 0..19 (20)\n"
    )


def test_a_replay_says_which_replayed_records_refused_again_it_left_out() -> None:
    report = ReplayReport("readings.dlq", "fix", "r3", forced=False, dry_run=False, written=2,
                          transactions=1)
    report.replays = [(0, 7), (0, 8), (0, 9), (2, 1)]
    assert report.to_text() == (
        "replayed 2 dead letter(s) of readings.dlq to fix in 1 transaction(s) (replay r3,"
        " recorded in readings.dlq.replays)\n"
        "left out: 4 dead letter(s) of records a replay wrote that were refused again:\n"
        "  partition 0 offset(s) 7..9 (3)\n"
        "  partition 2 offset(s) 1 (1)\n"
        "  (a replay does not send them round again; --include-replayed takes them)\n"
    )
