"""SPEC S6: late rows are logged in powers of ten per table, every one at debug level."""

from __future__ import annotations

import io
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.observability.logging import (
    LateRowLog,
    configure_logging,
    get_logger,
    log_dead_letters,
    powers_of_ten_between,
    step_context,
)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_s6_powers_of_ten_between_examples() -> None:
    assert powers_of_ten_between(0, 0) == []
    assert powers_of_ten_between(0, 1) == [1]
    assert powers_of_ten_between(0, 9) == [1]
    assert powers_of_ten_between(0, 150) == [1, 10, 100]
    assert powers_of_ten_between(1, 10) == [10]
    assert powers_of_ten_between(10, 99) == []
    assert powers_of_ten_between(99, 1000) == [100, 1000]
    assert powers_of_ten_between(5, 3) == []


@given(st.lists(st.integers(min_value=0, max_value=3000), max_size=30))
def test_s6_any_split_into_steps_logs_each_power_of_ten_exactly_once(steps: list[int]) -> None:
    logged: list[int] = []
    total = 0
    for count in steps:
        logged += powers_of_ten_between(total, total + count)
        total += count
    assert logged == [10**k for k in range(6) if 10**k <= total]


def test_s6_late_rows_get_full_detail_at_powers_of_ten_and_debug_for_each() -> None:
    out = io.StringIO()
    configure_logging("json", "DEBUG", stream=out)
    log = LateRowLog()
    rows = [{"column": "date_time", "value": i, "waterline": 1000, "offset": i} for i in range(12)]
    assert log.log_step("purchase", rows) == [1, 10]
    assert log.log_step("purchase", rows[:3]) == []
    assert log.log_step("other", rows[:1]) == [1]
    assert log.seen("purchase") == 15
    events = lines(out)
    detailed = [e for e in events if e["level"] == "warning"]
    assert [(e["table"], e["late_ordinal"], e["offset"]) for e in detailed] == [
        ("purchase", 1, 0), ("purchase", 10, 9), ("other", 1, 0)]
    assert detailed[0]["column"] == "date_time" and detailed[0]["waterline"] == 1000
    debug = [e for e in events if e["level"] == "debug"]
    assert [e["late_ordinal"] for e in debug if e["table"] == "purchase"] == list(range(1, 16))


def test_s6_runtime_may_pass_only_the_detail_rows_with_the_step_count() -> None:
    out = io.StringIO()
    configure_logging("json", "INFO", stream=out)
    log = LateRowLog()
    log.log_step("purchase", [{"offset": 0}, {"offset": 1}, {"offset": 2}])
    positions = log.detail_positions("purchase", 200)
    assert positions == [6, 96]  # the 10th and 100th late rows of the table
    log.log_step("purchase", {p: {"offset": 3 + p} for p in positions}, count=200)
    events = lines(out)
    assert [(e["late_ordinal"], e["offset"]) for e in events] == [(1, 0), (10, 9), (100, 99)]
    assert all(e["level"] == "warning" for e in events)


def test_s6_every_dead_letter_reason_is_logged_with_its_count_in_step_context() -> None:
    out = io.StringIO()
    configure_logging("json", "INFO", stream=out)
    with step_context(7, table="purchase"):
        log_dead_letters(get_logger("tidemark.sink"), "purchase",
                         {"late": 4, "malformed": 1, "invalid": 0})
    log_dead_letters(get_logger(), "purchase", {"future": 2})
    events = lines(out)
    assert [(e["reason"], e["count"], e.get("step")) for e in events] == [
        ("late", 4, 7), ("malformed", 1, 7), ("future", 2, None)]
    assert events[0]["event"] == "dead_letters" and events[0]["logger"] == "tidemark.sink"
    assert "timestamp" in events[0]


def test_console_format_renders_readable_lines() -> None:
    out = io.StringIO()
    configure_logging("console", "INFO", stream=out)
    get_logger().info("query_started", query="purchase")
    text = out.getvalue()
    assert "query_started" in text and "query=purchase" in text
    assert not text.lstrip().startswith("{")


def test_standard_library_warnings_come_out_as_json_too() -> None:
    import logging

    out = io.StringIO()
    configure_logging("json", "INFO", stream=out)
    logging.getLogger("py4j.clientserver").warning("connection reset")
    logging.getLogger("py4j.clientserver").info("chatter below WARNING is dropped")
    events = lines(out)
    assert len(events) == 1
    assert events[0]["event"] == "connection reset" and events[0]["logger"] == "py4j.clientserver"
