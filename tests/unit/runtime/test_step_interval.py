"""How often each table's query steps (app.runtime.service.step_interval_ms)."""

from __future__ import annotations

from app.config import Settings, parse_duration_ms
from app.runtime.service import POLLED_INTERVAL_MS, step_interval_ms


def test_the_default_runs_steps_back_to_back_like_plain_spark() -> None:
    assert parse_duration_ms(Settings.model_fields["trigger_interval"].default) == 0
    # The service's interval is its settings' (Service.settings.trigger_interval_ms).
    assert Settings.model_construct().trigger_interval_ms == 0
    assert step_interval_ms(0, polled=False, once=False) == 0


def test_a_configured_interval_spaces_the_steps_out() -> None:
    assert step_interval_ms(2000, polled=False, once=False) == 2000


def test_once_runs_tables_without_after_delay_back_to_back() -> None:
    assert step_interval_ms(2000, polled=False, once=True) == 0


def test_after_delay_tables_never_spin() -> None:
    """They step even without input (processing-time timeouts): back to back would keep a
    core busy while idle, so interval 0 means POLLED_INTERVAL_MS for them, --once too."""
    for once in (False, True):
        assert step_interval_ms(0, polled=True, once=once) == POLLED_INTERVAL_MS > 0
        assert step_interval_ms(500, polled=True, once=once) == 500
