"""``'dead_letter.connect-headers' = 'true'``: a table's dead letters carry Kafka Connect's
``__connect.errors.*`` headers after the S6 ones, so tools that read Connect's dead-letter
queues read Tidemark's too; ``show`` lists them with neither the S6 headers nor the record's
own."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.connectors.sink.headers import dead_letter_headers
from app.connectors.sink.record import (
    LATE_COLUMN,
    LATE_VALUE,
    LATE_WATERLINE,
    MESSAGE,
    REASON,
    REL,
    SRC_OFFSET,
    SRC_PARTITION,
)
from app.dead_letters.records import DeadLetter
from app.errors import ProgramError
from app.program.compile import compile_program
from app.runtime.planner.waterline_keys import table_units

PROGRAM = """
CREATE TABLE clicks (ts BIGINT NOT NULL LATENESS 10) WITH ('topic' = 'in'{options});
"""


def _table_units(tmp_path: Path, options: str) -> dict[str, object]:
    path = tmp_path / "p.sql"
    path.write_text(PROGRAM.format(options=options))
    return table_units(compile_program(path).table("clicks"))


def _row(reason: str, message: str) -> dict[str, object]:
    return {REASON: reason, MESSAGE: message, REL: "clicks", SRC_PARTITION: 2, SRC_OFFSET: 41,
            LATE_COLUMN: None, LATE_VALUE: None, LATE_WATERLINE: None}


def test_connect_headers_follow_the_s6_ones_when_the_table_asks(tmp_path: Path) -> None:
    table = _table_units(tmp_path, ", 'dead_letter.connect-headers' = 'true'")
    headers = dead_letter_headers(_row("malformed", "not a JSON object"), table)
    assert [k for k, _ in headers[:6]] == [
        "tidemark.error.reason", "tidemark.error.message", "tidemark.source.topic",
        "tidemark.source.partition", "tidemark.source.offset", "tidemark.table",
    ]
    assert headers[6:] == [
        ("__connect.errors.topic", b"in"),
        ("__connect.errors.partition", b"2"),
        ("__connect.errors.offset", b"41"),
        ("__connect.errors.connector.name", b"clicks"),
        ("__connect.errors.task.id", b"0"),
        ("__connect.errors.stage", b"VALUE_CONVERTER"),
        ("__connect.errors.class.name", b"tidemark.LateGate"),
        ("__connect.errors.exception.class.name", b"tidemark.malformed"),
        ("__connect.errors.exception.message", b"not a JSON object"),
    ]
    stages = {
        reason: dict(dead_letter_headers(_row(reason, message), table))[
            "__connect.errors.stage"
        ]
        for reason, message in (("late", "ts = 1 is below"), ("invalid", "key: not 8 bytes"))
    }
    assert stages == {"late": b"TRANSFORMATION", "invalid": b"KEY_CONVERTER"}


def test_without_the_option_a_dead_letter_has_the_s6_headers_alone(tmp_path: Path) -> None:
    for options in ("", ", 'dead_letter.connect-headers' = 'false'"):
        headers = dead_letter_headers(_row("malformed", "x"), _table_units(tmp_path, options))
        assert not [k for k, _ in headers if k.startswith("__connect.")], options


def test_a_bad_value_is_an_error_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ProgramError) as caught:
        _table_units(tmp_path, ", 'dead_letter.connect-headers' = 'yes'")
    text = str(caught.value.diagnostics[0])
    assert "'dead_letter.connect-headers' is 'yes'" in text and "write 'true'" in text


def test_show_lists_neither_s6_nor_connect_headers_as_the_records_own(tmp_path: Path) -> None:
    table = _table_units(tmp_path, ", 'dead_letter.connect-headers' = 'true'")
    own = (("origin", b"feed"),)
    letter = DeadLetter("in.dlq", 0, 0, 1, None, b"{",
                        (*own, *dead_letter_headers(_row("malformed", "x"), table)))
    assert letter.own_headers() == own
    assert letter.reason == "malformed" and letter.source == ("in", 2, 41)
