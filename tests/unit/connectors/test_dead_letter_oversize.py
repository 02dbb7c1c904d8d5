"""A dead letter larger than its topic takes is cut to fit, saying so (app/connectors/sink/
oversize.py)."""

from __future__ import annotations

import hashlib

from app.connectors.sink.oversize import fit_dead_letter, record_size

S6 = [("tidemark.error.reason", b"malformed"), ("tidemark.table", b"reading")]


def _headers(found: list[tuple[str, bytes]]) -> dict[str, bytes]:
    return dict(found)


def test_a_dead_letter_that_fits_is_left_as_it_is() -> None:
    headers = [("origin", b"x"), *S6]
    key, value, out = fit_dead_letter(b"k", b"v" * 1000, headers, 1, 1048576)
    assert (key, value, out) == (b"k", b"v" * 1000, headers)


def test_an_oversized_value_is_cut_to_fit_with_its_size_and_hash() -> None:
    original = bytes(range(256)) * 8192  # 2 MiB
    headers = [("origin", b"x"), *S6]
    key, value, out = fit_dead_letter(b"k", original, headers, 1, 1048576)
    assert key == b"k" and value is not None and original.startswith(value)
    assert 1048576 - 2048 < record_size(key, value, out) <= 1048576
    found = _headers(out)
    assert found["tidemark.error.truncated"] == b"value"
    assert found["tidemark.error.original.size"] == b"2097152"
    assert found["tidemark.error.original.sha256"] == hashlib.sha256(original).hexdigest().encode()
    assert out[:3] == headers  # the record's own headers and S6's stay, in order


def test_headers_and_then_the_key_go_when_cutting_the_value_is_not_enough() -> None:
    headers = [("origin", b"h" * 5000), *S6]
    key, value, out = fit_dead_letter(b"k" * 3000, b"v" * 9000, headers, 1, 4096)
    found = _headers(out)
    assert found["tidemark.error.truncated"] == b"value,headers"
    assert "origin" not in found and found["tidemark.error.reason"] == b"malformed"
    assert record_size(key, value, out) <= 4096 and key == b"k" * 3000
    key, value, out = fit_dead_letter(b"k" * 9000, b"v", S6, 0, 4096)
    assert _headers(out)["tidemark.error.truncated"] == b"value,key"
    assert value == b"" and key is not None and 0 < len(key) < 9000
    assert record_size(key, value, out) <= 4096
