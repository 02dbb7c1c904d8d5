"""A side starts on an idle machine, or after the timeout (loadtests.bench.wait_quiet)."""

from __future__ import annotations

from loadtests.bench import wait_quiet


def test_waits_until_a_reading_is_below_the_threshold() -> None:
    readings = iter([80.0, 35.0, 4.0, 90.0])
    waited, last = wait_quiet(lambda: next(readings), threshold=10.0, timeout=60.0)
    assert last == 4.0
    assert next(readings) == 90.0  # no reading after the quiet one
    assert waited < 60.0


def test_gives_up_after_the_timeout_and_says_how_busy_it_was() -> None:
    waited, last = wait_quiet(lambda: 95.0, threshold=10.0, timeout=0.0)
    assert (waited, last) == (0.0, 95.0)


def test_reads_the_machine_itself_by_default() -> None:
    waited, last = wait_quiet(threshold=101.0, timeout=5.0)  # every reading is below 101%
    assert 0.0 <= last <= 100.0
    assert waited >= 0.9  # psutil.cpu_percent over one second
