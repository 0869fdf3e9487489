"""SnapshotStore: DLedger's layout, save / load round trip, crash safety of a commit at
every step, damage detection with fallback to an older snapshot, retention, Java metas."""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import Entry
from dledger.statemachine import SnapshottingStateMachine, StateMachine
from dledger.statemachine.snapshot import SnapshotStore
from dledger.statemachine.snapshot_files import Snapshot, SnapshotMeta

pytestmark = pytest.mark.unit


def save(store: SnapshotStore, index: int, term: int, data: bytes) -> Snapshot:
    writer = store.begin_save()
    writer.write(data)
    return writer.commit(index, term)


def content(snapshot: Snapshot | None) -> tuple[int, int, bytes] | None:
    if snapshot is None:
        return None
    with snapshot.open() as reader:
        return snapshot.index, snapshot.term, reader.read()


def test_save_and_load_round_trip_in_dledgers_layout(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    payload = os.urandom(3 * 1024 * 1024 + 17)
    saved = save(store, 41, 3, payload)
    assert saved.path == tmp_path / "snapshot" / "snapshot_41"
    assert sorted(p.name for p in saved.path.iterdir()) == ["data", "snapshot_meta"]
    meta = json.loads((saved.path / "snapshot_meta").read_bytes())
    assert (meta["lastIncludedIndex"], meta["lastIncludedTerm"], meta["size"]) == (41, 3, len(payload))
    assert not (tmp_path / "snapshot" / "tmp").exists()
    assert content(SnapshotStore(tmp_path).latest()) == (41, 3, payload)


class DictMachine:
    """A snapshotting state machine: a dict, pickled."""

    def __init__(self) -> None:
        self.state: dict[int, bytes] = {}
        self.captured: dict[int, bytes] = {}

    def on_apply(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.state[entry.index] = entry.body

    def on_snapshot_capture(self) -> None:
        self.captured = dict(self.state)  # the values are immutable: a shallow copy is a view

    def on_snapshot_save(self, writer: BinaryIO) -> None:
        pickle.dump(self.captured, writer)

    def on_snapshot_load(self, reader: BinaryIO) -> None:
        self.state = pickle.load(reader)


class PlainMachine:
    def on_apply(self, entries: Sequence[Entry]) -> None:
        pass


def test_state_machine_hooks_round_trip_and_plain_machines_stay_valid(tmp_path: Path) -> None:
    machine = DictMachine()
    machine.state = {k: bytes([k]) * k for k in range(50)}
    assert isinstance(machine, SnapshottingStateMachine)
    assert isinstance(PlainMachine(), StateMachine) and not isinstance(PlainMachine(), SnapshottingStateMachine)
    store = SnapshotStore(tmp_path)
    writer = store.begin_save()
    machine.on_snapshot_capture()
    machine.state[99] = b"applied after the capture"
    machine.on_snapshot_save(writer)
    del machine.state[99]
    writer.commit(49, 1)
    fresh = DictMachine()
    latest = SnapshotStore(tmp_path).latest()
    assert latest is not None
    with latest.open() as reader:
        assert reader.meta.last_included_index == 49
        fresh.on_snapshot_load(reader)
    assert fresh.state == machine.state


def test_leftover_tmp_and_install_tmp_are_removed_at_open(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    save(SnapshotStore(tmp_path), 5, 1, b"five")
    for name in ("tmp", "install_tmp"):
        (tmp_path / "snapshot" / name).mkdir()
        (tmp_path / "snapshot" / name / "data").write_bytes(b"half written")
    (tmp_path / "snapshot" / "tmp" / "snapshot_meta").write_bytes(SnapshotMeta(9, 1, 0, 0).to_json())
    with caplog.at_level(logging.WARNING):
        store = SnapshotStore(tmp_path)
    assert sorted(p.name for p in store.root.iterdir()) == ["snapshot_5"]
    assert "cut short" in caplog.text
    assert content(store.latest()) == (5, 1, b"five")


class Crash(Exception):
    pass


def crash_images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> list[Path]:
    """Commit snapshot 10 over snapshot 5 once per call of os.<name>, "crashing" at that
    call: the node directory as it is just before the call is copied aside (what a
    crash there leaves on disk, everything before it having been made durable) and the
    call raises. Returns the copies."""
    images: list[Path] = []
    real: Callable[..., Any] = getattr(os, name)
    for k in range(20):
        node = tmp_path / f"node{k}"
        store = SnapshotStore(node)
        save(store, 5, 1, b"old state")
        writer = store.begin_save()
        writer.write(b"new state" * 1000)
        calls = [0]

        def step(*args: Any, node: Path = node, k: int = k, calls: list[int] = calls) -> Any:
            calls[0] += 1
            if calls[0] == k + 1:
                shutil.copytree(node, tmp_path / f"image{k}", symlinks=True)
                raise Crash(f"crash at {name} call {k + 1}")
            return real(*args)

        monkeypatch.setattr(os, name, step)
        try:
            writer.commit(10, 2)
        except (Crash, DLedgerError):
            images.append(tmp_path / f"image{k}")
        else:
            break
        finally:
            monkeypatch.setattr(os, name, real)
    return images


@pytest.mark.parametrize("call", ["fsync", "replace"])
def test_a_crash_at_every_step_of_a_commit_leaves_the_old_or_the_new_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    images = crash_images(tmp_path, monkeypatch, call)
    assert len(images) == (4 if call == "fsync" else 1)  # fsyncs: data, meta, tmp dir, root after the rename
    outcomes = set()
    for image in images:
        latest = content(SnapshotStore(image).latest())
        assert latest in ((5, 1, b"old state"), (10, 2, b"new state" * 1000))
        assert latest is not None
        outcomes.add(latest[0])
        assert not (image / "snapshot" / "tmp").exists()
    assert outcomes == ({5, 10} if call == "fsync" else {5})


def test_a_failed_commit_raises_disk_error_and_keeps_the_old_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SnapshotStore(tmp_path)
    save(store, 5, 1, b"old")
    writer = store.begin_save()
    writer.write(b"new")

    def fail(*_args: Any) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(DLedgerError, match="publishing snapshot 10") as info:
        writer.commit(10, 2)
    monkeypatch.undo()
    assert info.value.code == ResponseCode.DISK_ERROR
    assert content(store.latest()) == (5, 1, b"old")
    assert not (store.root / "tmp").exists()
    save(store, 10, 2, b"new")  # the store takes the next save
    assert content(store.latest()) == (10, 2, b"new")


def flip(path: Path, position: int, mask: int = 0x01) -> None:
    raw = bytearray(path.read_bytes())
    raw[position] ^= mask
    path.write_bytes(bytes(raw))


def test_a_flipped_byte_in_data_is_detected_and_the_older_snapshot_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SnapshotStore(tmp_path)
    save(store, 5, 1, b"older" * 100)
    newest = save(store, 9, 1, b"newer" * 100)
    for position in (0, 250, 499):
        flip(newest.data_path, position, 0x80)
        with caplog.at_level(logging.WARNING):
            assert content(store.latest()) == (5, 1, b"older" * 100)
        assert "snapshot_9 is damaged" in caplog.text and "CRC-32" in caplog.text
        flip(newest.data_path, position, 0x80)
        assert content(store.latest()) == (9, 1, b"newer" * 100)


def test_truncated_or_missing_data_or_meta_is_skipped(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    save(store, 5, 1, b"older")
    newest = save(store, 9, 1, b"newer data")
    with open(newest.data_path, "r+b") as fh:
        fh.truncate(4)
    assert content(store.latest()) == (5, 1, b"older")
    newest.data_path.unlink()
    assert content(store.latest()) == (5, 1, b"older")
    (newest.path / "snapshot_meta").unlink()
    assert content(store.latest()) == (5, 1, b"older")


def test_every_single_bit_flip_in_the_meta_is_detected(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path, max_reserved=2)
    save(store, 5, 1, b"older")
    newest = save(store, 9, 4, b"newer")
    meta = newest.path / "snapshot_meta"
    size = len(meta.read_bytes())
    for position in range(size):
        for bit in range(8):
            flip(meta, position, 1 << bit)
            assert content(store.latest()) == (5, 1, b"older"), (position, bit, meta.read_bytes())
            flip(meta, position, 1 << bit)
    assert content(store.latest()) == (9, 4, b"newer")


def test_retention_keeps_the_newest_valid_snapshots(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    for index in range(1, 7):
        save(store, index * 10, 1, b"%d" % index)
    assert store.indexes() == [60, 50, 40]
    flip(store.root / "snapshot_60" / "data", 0)
    save(store, 70, 2, b"7")
    assert store.indexes() == [70, 50, 40]  # the damaged 60 is not one of the three kept
    assert [s.index for s in store.snapshots()] == [70, 50, 40]
    one = SnapshotStore(tmp_path / "one", max_reserved=1)
    for index in (1, 2, 3):
        save(one, index, 1, b"x")
    assert one.indexes() == [3]


def test_a_save_not_newer_than_the_latest_is_refused_and_nothing_is_lost(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    save(store, 10, 2, b"ten")
    for index in (10, 4):
        with pytest.raises(DLedgerError, match="snapshot 10 exists already") as info:
            save(store, index, 2, b"other")
        assert info.value.code == ResponseCode.UNEXPECTED_ARGUMENT
        assert not (store.root / "tmp").exists()
    assert store.indexes() == [10] and content(store.latest()) == (10, 2, b"ten")


def test_a_damaged_snapshot_at_the_same_index_is_replaced(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    damaged = save(store, 10, 2, b"ten")
    flip(damaged.data_path, 1)
    save(store, 10, 2, b"ten again")
    assert content(store.latest()) == (10, 2, b"ten again")


def test_one_save_at_a_time_abort_and_bad_arguments(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    save(store, 3, 1, b"three")
    writer = store.begin_save()
    with pytest.raises(DLedgerError, match="already being saved"):
        store.begin_save()
    writer.write(b"dropped")
    writer.abort()
    assert not (store.root / "tmp").exists()
    writer.abort()  # a second abort does nothing
    with pytest.raises(DLedgerError, match="already ended"):
        writer.commit(9, 1)
    for index, term in ((-1, 1), (9, -1), (1 << 63, 1)):
        with pytest.raises(DLedgerError, match="out of range") as info:
            save(store, index, term, b"x")
        assert info.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert store.indexes() == [3] and content(store.latest()) == (3, 1, b"three")
    with pytest.raises(ValueError, match="max_reserved"):
        SnapshotStore(tmp_path, max_reserved=0)


def test_a_state_machine_failing_in_save_leaves_the_old_snapshot(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    save(store, 3, 1, b"three")
    writer = store.begin_save()
    try:
        writer.write(b"partial")
        raise RuntimeError("state machine failed")
    except RuntimeError:
        writer.abort()
    assert content(SnapshotStore(tmp_path).latest()) == (3, 1, b"three")


def java_snapshot(root: Path, index: int, meta: bytes | None, data: bytes | None) -> None:
    directory = root / "snapshot" / f"snapshot_{index}"
    directory.mkdir(parents=True)
    if meta is not None:
        (directory / "snapshot_meta").write_bytes(meta)
    if data is not None:
        (directory / "data").write_bytes(data)


def test_java_written_metas_are_read_unverified_and_dledgers_load_error_case(tmp_path: Path) -> None:
    # DLedger's SnapshotManagerTest.testLoadErrorSnapshot: 10 has no data, 9 no meta, 8 is whole
    java_snapshot(tmp_path, 10, b'{"lastIncludedIndex":10,"lastIncludedTerm":1}', None)
    java_snapshot(tmp_path, 9, None, b"90")
    java_snapshot(tmp_path, 8, b'{"lastIncludedIndex":8,"lastIncludedTerm":1}', b"80")
    java_snapshot(tmp_path, 7, b'{"lastIncludedTerm":1,"lastIncludedIndex":7}', b"70")
    store = SnapshotStore(tmp_path)
    latest = store.latest()
    assert content(latest) == (8, 1, b"80")
    assert latest is not None and not latest.meta.verified and latest.meta.crc32 is None
    assert [s.index for s in store.snapshots()] == [8, 7]


@pytest.mark.parametrize(
    "meta",
    [
        b'{"lastIncludedIndex":6,"lastIncludedTerm":1}',  # names another index
        b'{"lastIncludedIndex":8}',
        b'{"lastIncludedIndex":8,"lastIncludedTerm":1,"extra":2}',
        b'{"lastIncludedIndex":8,"lastIncludedTerm":true}',
        b'{"lastIncludedIndex":8,"lastIncludedTerm":-1}',
        b'{"lastIncludedIndex":8.0,"lastIncludedTerm":1}',
        b"[8, 1]",
        b"\xff\xfe",
        b"",
    ],
)
def test_bad_metas_are_skipped(tmp_path: Path, meta: bytes) -> None:
    java_snapshot(tmp_path, 8, meta, b"80")
    java_snapshot(tmp_path, 3, b'{"lastIncludedIndex":3,"lastIncludedTerm":1}', b"30")
    assert content(SnapshotStore(tmp_path).latest()) == (3, 1, b"30")


def test_other_names_in_the_snapshot_directory_are_ignored(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    save(store, 3, 1, b"three")
    for name in ("snapshot_", "snapshot_x1", "snapshot_-4", "snapshot_007", "snapshot_99999999999999999999", "notes"):
        (store.root / name).mkdir()
    (store.root / "snapshot_77").write_bytes(b"a file, not a directory")
    (store.root / "snapshot_8").symlink_to(store.root / "snapshot_3")
    assert store.indexes() == [3]
    assert content(store.latest()) == (3, 1, b"three")
    save(store, 4, 1, b"four")  # retention leaves what is not a snapshot alone
    assert {"notes", "snapshot_007", "snapshot_77", "snapshot_8"} <= {p.name for p in store.root.iterdir()}


def test_a_file_in_place_of_tmp_is_removed_at_open(tmp_path: Path) -> None:
    (tmp_path / "snapshot").mkdir()
    (tmp_path / "snapshot" / "tmp").write_bytes(b"junk")
    (tmp_path / "snapshot" / "install_tmp").symlink_to(tmp_path)
    store = SnapshotStore(tmp_path)
    assert list(store.root.iterdir()) == [] and tmp_path.is_dir()
    save(store, 1, 1, b"one")
    assert content(store.latest()) == (1, 1, b"one")


@pytest.mark.property
@settings(max_examples=60, deadline=None)
@given(data=st.binary(min_size=1, max_size=3000), position=st.integers(min_value=0), bit=st.integers(0, 7))
def test_any_bit_flip_in_data_falls_back_to_the_older_snapshot(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, position: int, bit: int
) -> None:
    store = SnapshotStore(tmp_path_factory.mktemp("node"))
    save(store, 1, 1, b"older")
    newest = save(store, 2, 1, data)
    flip(newest.data_path, position % len(data), 1 << bit)
    assert content(store.latest()) == (1, 1, b"older")


def test_the_writer_is_a_binary_file(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    writer = store.begin_save()
    assert isinstance(writer, io.BufferedIOBase) and writer.writable()
    writer.writelines([b"a", b"b"])
    writer.close()  # a state machine may close it
    assert content(writer.commit(1, 1)) == (1, 1, b"ab")


def test_an_unchanged_snapshot_is_read_once_and_a_changed_one_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader streams its newest snapshot to every follower that needs it: data whose
    checksum the store computed as it published it is not read again before every
    stream, unless the file changed since; a store that did not publish it (a restart)
    verifies it once."""
    import dledger.statemachine.snapshot as snapshot_module

    store = SnapshotStore(tmp_path)
    newest = save(store, 9, 1, b"newer" * 100)
    checks: list[Path] = []
    real = snapshot_module.verify
    monkeypatch.setattr(snapshot_module, "verify", lambda d, i: checks.append(d) or real(d, i))
    assert [s.index for s in store.snapshots()] == [9] and content(store.latest()) == (9, 1, b"newer" * 100)
    assert not checks  # checksummed as it was published
    reopened = SnapshotStore(tmp_path)
    assert [s.index for s in reopened.snapshots()] == [9] and [s.index for s in reopened.snapshots()] == [9]
    assert len(checks) == 1  # verified once
    assert reopened.is_valid(9) and len(checks) == 1  # the same check, not a second read
    flip(newest.data_path, 3, 0x80)  # a new write: read again, found damaged
    assert reopened.latest() is None and store.latest() is None and len(checks) == 3
    assert not store.is_valid(9) and len(checks) == 4
