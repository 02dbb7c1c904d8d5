"""The old/new alternation's arguments (loadtests.alternate)."""

import pytest

from loadtests.alternate import _events


def test_events_per_workload() -> None:
    assert _events(["d=1000000", "e=250000"]) == {"d": 1_000_000, "e": 250_000}
    assert _events([]) == {}


@pytest.mark.parametrize("bad", ["d", "d=", "d=1e6", "=5"])
def test_events_refuses_what_is_not_workload_equals_count(bad: str) -> None:
    with pytest.raises(SystemExit, match="workload=count"):
        _events([bad])


def test_a_run_too_short_for_a_steady_rate_counts_its_whole_run_rate() -> None:
    from loadtests.alternate import _steady

    assert _steady({"steady_events_per_s": 120_000.0, "events_per_s": 90_000.0}) == 120_000.0
    assert _steady({"steady_events_per_s": None, "events_per_s": 90_000.0}) == 90_000.0
