"""The steps' own files (app/runtime/step/step_files.py, app/runtime/step/slice_cache.py): w(t-1) is
the newest waterline file below the step, every file is written whole, and a file that cannot
be read or written is a StateError that names it and says what to check."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import app.runtime.store.local as local_store
from app.connectors.kafka_source import KafkaPartitionSlice
from app.errors import StateError, TidemarkError
from app.runtime.step.slice_cache import SliceCache
from app.runtime.step.step_files import (
    KEEP_FINGERPRINTS,
    PLANNED_SLICES,
    begin_step,
    forget_steps_before,
    load_waterlines,
    planned_slices,
    record_planned_slices,
    store_waterlines,
    write_atomically,
)


def test_w_t_minus_1_is_the_newest_stored_waterline_below_the_step(tmp_path: Path) -> None:
    state = str(tmp_path)
    assert load_waterlines(state, 5) == {}
    store_waterlines(state, 2, {"ts": 100, "seq": None})
    store_waterlines(state, 4, {"ts": 300, "seq": 7})
    assert load_waterlines(state, 2) == {}
    assert load_waterlines(state, 3) == {"ts": 100, "seq": None}
    assert load_waterlines(state, 4) == {"ts": 100, "seq": None}
    assert load_waterlines(state, 5) == {"ts": 300, "seq": 7}
    assert load_waterlines(state, 1 << 62) == {"ts": 300, "seq": 7}


def test_only_the_newest_waterline_files_are_kept(tmp_path: Path) -> None:
    for step in range(1, 8):
        store_waterlines(str(tmp_path), step, {"ts": step}, keep=3)
    names = sorted(p.name for p in (tmp_path / "waterlines").iterdir())
    assert names == ["5.json", "6.json", "7.json"]


def test_planned_slices_come_back_in_their_order(tmp_path: Path) -> None:
    assert planned_slices(str(tmp_path)) == []
    slices = [
        KafkaPartitionSlice(2, 10, 20, 3, 1_000, {"ts": 5}),
        KafkaPartitionSlice(0, 0, 4, 3, 1_000, {"ts": 5}),
    ]
    record_planned_slices(str(tmp_path), slices)
    assert [vars(s) for s in planned_slices(str(tmp_path))] == [vars(s) for s in slices]
    record_planned_slices(str(tmp_path), [])
    assert planned_slices(str(tmp_path)) == []


def test_a_file_is_replaced_whole_and_no_temporary_file_stays(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b.json"
    write_atomically(path, "old")
    write_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    assert [p.name for p in path.parent.iterdir()] == ["b.json"]


def test_old_steps_files_are_forgotten(tmp_path: Path) -> None:
    for name in ("1-0.json", "2-0.json", "3-1.json", "3-1.dead.arrow", "notes.json"):
        (tmp_path / name).write_text("")
    forget_steps_before(tmp_path, 3, ".json")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "3-1.dead.arrow",
        "3-1.json",
        "notes.json",
    ]


def _blocked(tmp_path: Path) -> Path:
    """A state directory that cannot be made: a file stands where its parent should be."""
    (tmp_path / "file").write_text("")
    return tmp_path / "file" / "state"


def test_an_unwritable_state_dir_names_the_waterline_file(tmp_path: Path) -> None:
    state = _blocked(tmp_path)
    with pytest.raises(StateError) as raised:
        store_waterlines(str(state), 3, {"ts": 1})
    text = str(raised.value)
    assert str(state / "waterlines" / "3.json") in text
    assert "check" in text and "writable" in text
    assert isinstance(raised.value.__cause__, OSError)
    assert isinstance(raised.value, TidemarkError)


def test_an_unwritable_state_dir_names_the_planned_slices_file(tmp_path: Path) -> None:
    state = _blocked(tmp_path)
    with pytest.raises(StateError, match=str(state / PLANNED_SLICES)):
        record_planned_slices(str(state), [KafkaPartitionSlice(0, 0, 1, 1, 0, {})])


def test_an_unreadable_waterline_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "waterlines" / "4.json").mkdir(parents=True)  # a directory, not a file
    with pytest.raises(StateError, match=str(tmp_path / "waterlines" / "4.json")):
        load_waterlines(str(tmp_path), 5)


def _decoded(part: KafkaPartitionSlice, reads: list[int]) -> Iterator[pa.RecordBatch]:
    reads.append(part.step)
    yield pa.RecordBatch.from_pylist([{"x": part.start}, {"x": part.end}])


def test_a_cached_slice_is_read_once_and_served_from_the_file(tmp_path: Path) -> None:
    cache = SliceCache(str(tmp_path))
    cache.directory = tmp_path / "cache"
    part = KafkaPartitionSlice(1, 10, 20, 4, 0, {"ts": 1})
    reads: list[int] = []
    first = list(cache.read(part, lambda: _decoded(part, reads)))
    again = list(cache.read(part, lambda: _decoded(part, reads)))
    assert reads == [4]
    assert [b.to_pylist() for b in again] == [b.to_pylist() for b in first]
    other = KafkaPartitionSlice(1, 10, 20, 4, 0, {"ts": 2})  # another w(t-1): another slice
    list(cache.read(other, lambda: _decoded(other, reads)))
    assert reads == [4, 4]
    later = KafkaPartitionSlice(1, 20, 30, 4 + SliceCache.KEEP_STEPS + 1, 0, {})
    list(cache.read(later, lambda: _decoded(later, reads)))
    assert [p.name.split("-")[0] for p in cache.directory.iterdir()] == [str(later.step)]
    cache.clear()
    assert not cache.directory.exists()


def test_an_unwritable_slice_cache_names_its_file(tmp_path: Path) -> None:
    cache = SliceCache(str(tmp_path))
    cache.directory = _blocked(tmp_path)
    part = KafkaPartitionSlice(1, 10, 20, 4, 0, {})
    with pytest.raises(StateError) as raised:
        list(cache.read(part, lambda: _decoded(part, [])))
    assert str(cache.directory) in str(raised.value) and "4-1-10-20-" in str(raised.value)
    assert isinstance(raised.value.__cause__, OSError)


def test_waterline_files_hold_plain_json(tmp_path: Path) -> None:
    store_waterlines(str(tmp_path), 9, {"b": None, "a": 5})
    assert json.loads((tmp_path / "waterlines" / "9.json").read_text()) == {"a": 5, "b": None}


def test_a_batch_begun_again_with_its_fingerprint_goes_on_s15(tmp_path: Path) -> None:
    state = str(tmp_path)
    assert begin_step(state, 7, "aa11") is None
    assert begin_step(state, 7, "aa11") is None  # a replay of the same step
    assert (tmp_path / "step-fingerprints" / "7").read_text() == "aa11"


def test_a_batch_begun_again_with_another_fingerprint_is_told_the_first_s15(
    tmp_path: Path,
) -> None:
    state = str(tmp_path)
    begin_step(state, 7, "aa11")
    assert begin_step(state, 7, "bb22") == "aa11"
    # Nothing recorded over it: the run that wrote the step still finds its own.
    assert begin_step(state, 7, "aa11") is None


def test_only_the_newest_step_fingerprints_are_kept(tmp_path: Path) -> None:
    for batch in range(KEEP_FINGERPRINTS + 5):
        begin_step(str(tmp_path), batch, f"{batch:04x}")
    kept = sorted(int(p.name) for p in (tmp_path / "step-fingerprints").iterdir())
    assert kept == list(range(5, KEEP_FINGERPRINTS + 5))


def test_step_files_are_fsynced_file_and_directory_before_the_step_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the protocol depends on survives a machine crash, not only a process crash: the
    data before the rename, the directory after it. A probe for the step's own writers,
    written again by every attempt, skips both."""
    synced: list[str] = []
    real_fsync = local_store.os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(local_store.os, "fsync", fsync)
    store_waterlines(str(tmp_path), 3, {"ts": 1})
    directory = tmp_path / "waterlines"
    assert synced[0].startswith(str(directory / ".3.json."))  # the data, before the rename
    assert synced[1] == str(directory)
    synced.clear()
    write_atomically(tmp_path / "probe.json", "[]", durable=False)
    assert synced == []
