"""The checkpoint store on both backends (ADR 0025): a local directory, and a bucket of a real
S3-compatible server (S3Proxy, tests/local_s3proxy.py). Whole writes, names, deletes, and
"written once": of many writers racing to create one file, exactly one wins and its content
stays (the sink id's rule, S15)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from app.errors import StateError
from app.runtime.store import CheckpointStore, join, parent, store_at


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A checkpoint location on each backend."""
    if request.param == "local":
        return str(tmp_path / "ck")
    served: Any = request.getfixturevalue("object_store")
    return str(served.url("ck"))


def test_a_written_file_reads_back_whole_and_is_replaced_whole(root: str) -> None:
    store = store_at(root)
    location = join(root, "t", "tidemark", "waterlines", "3.json")
    assert store.read_text(location) is None
    assert not store.exists(location)
    store.write(location, '{"ts": 1}')
    assert store.read_text(location) == '{"ts": 1}'
    store.write(location, b'{"ts": 2}', durable=False)
    assert store.read_bytes(location) == b'{"ts": 2}'
    assert store.exists(location)


def test_names_lists_files_and_directories_one_level_deep(root: str) -> None:
    store = store_at(root)
    assert store.names(join(root, "nothing")) == []
    for name in ("1.json", "2.json", "sub/3.json"):
        store.write(join(root, "w", name), name)
    assert sorted(store.names(join(root, "w"))) == ["1.json", "2.json", "sub"]
    store.delete(join(root, "w", "1.json"))
    store.delete(join(root, "w", "1.json"))  # gone already: no error
    assert sorted(store.names(join(root, "w"))) == ["2.json", "sub"]


def test_create_writes_once_and_keeps_the_first_content_s15(root: str) -> None:
    store = store_at(root)
    location = join(root, "t", "tidemark", "sink-id")
    assert store.create(location, "first")
    assert not store.create(location, "second")
    assert store.read_text(location) == "first"


def _race(store: CheckpointStore, location: str, writers: int) -> list[bool]:
    results: list[bool] = [False] * writers
    gate = threading.Barrier(writers)

    def claim(i: int) -> None:
        gate.wait()
        results[i] = store.create(location, f"writer {i}")

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.parametrize("round_", range(5))
def test_of_writers_racing_to_create_one_file_exactly_one_wins_s15(
    root: str, round_: int
) -> None:
    store = store_at(root)
    location = join(root, f"race-{round_}", "sink-id")
    results = _race(store, location, 8)
    assert results.count(True) == 1, results
    winner = results.index(True)
    assert store.read_text(location) == f"writer {winner}"


def test_join_and_parent_keep_the_scheme() -> None:
    assert join("s3a://b/p", "t", "x.json") == "s3a://b/p/t/x.json"
    assert parent("s3a://b/p/t/x.json") == "s3a://b/p/t"
    assert join("/ck", "t") == "/ck/t"
    assert parent("/ck/t") == "/ck"


def test_a_missing_bucket_is_a_state_error_that_says_to_create_it(
    object_store: Any,
) -> None:
    location = f"s3a://{object_store.bucket}-missing/ck/sink-id"
    with pytest.raises(StateError, match="NoSuchBucket: create the bucket"):
        store_at(location).write(location, "x")


def test_wrong_credentials_are_a_state_error_naming_the_setting(
    object_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDEMARK_S3_SECRET_ACCESS_KEY", "wrong")
    location = object_store.url("ck", "sink-id")
    with pytest.raises(StateError, match="TIDEMARK_S3_SECRET_ACCESS_KEY"):
        store_at(location).write(location, "x")


