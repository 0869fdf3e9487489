"""`dledger check` verifies a node's snapshots (written here with the real SnapshotStore):
a damaged one is a problem naming its directory (exit 1), good ones are counted, nothing
is written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import BinaryIO

import pytest

import dledger
from dledger.cli.snapshot_check import inspect_snapshots
from dledger.codes import DLedgerError
from dledger.entry import MAGIC_NORMAL, Entry
from dledger.kv import KVStateMachine
from dledger.kv import commands as kv
from dledger.statemachine.snapshot import SnapshotStore
from dledger.statemachine.snapshot_manager import SnapshotManager
from tests.unit.test_store_tools import CONFIG, run

pytestmark = pytest.mark.unit


def save(store: SnapshotStore, index: int, data: bytes) -> Path:
    writer = store.begin_save()
    writer.write(data)
    return store.root / writer.commit(index, 1).path.name


def kv_snapshot(store: SnapshotStore, index: int) -> Path:
    machine = KVStateMachine()
    machine.on_apply([Entry(k, 1, 0, MAGIC_NORMAL, kv.put(b"k%d" % k, b"v" * k)) for k in range(index + 1)])
    machine.on_snapshot_capture()
    writer = store.begin_save()
    machine.on_snapshot_save(writer)
    return writer.commit(index, 1).path


@pytest.fixture
def node(tmp_path: Path) -> Path:
    node = tmp_path / "dledger-n0"
    with dledger.open_log(node, CONFIG) as log:
        log.append_many([b"entry %d" % i for i in range(40)])
    return node


def listing(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


def test_valid_snapshots_are_counted(node: Path) -> None:
    store = SnapshotStore(node)
    save(store, 9, b"first")
    kv_snapshot(store, 19)
    before = listing(node)
    result = run("check", str(node))
    assert result.exit_code == 0, result.output
    assert "2 valid, newest 19 (term 1," in result.output and result.output.rstrip().endswith("healthy")
    report = json.loads(run("check", "--json", str(node)).output)
    assert report["healthy"] is True and report["snapshots"].startswith("2 valid, newest 19")
    assert listing(node) == before  # nothing written


def test_a_store_without_snapshots_says_none(node: Path) -> None:
    report = json.loads(run("check", "--json", str(node)).output)
    assert report["snapshots"] == "none" and report["healthy"] is True
    assert not (node / "snapshot").exists()  # check creates nothing


def _flip_data(path: Path) -> None:
    data = bytearray((path / "data").read_bytes())
    data[len(data) // 2] ^= 0x40
    (path / "data").write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_flip_data, "CRC-32"),
        (lambda p: (p / "data").write_bytes((p / "data").read_bytes()[:-3]), "bytes, snapshot_meta says"),
        (lambda p: (p / "data").unlink(), "no data"),
        (lambda p: (p / "snapshot_meta").unlink(), "no snapshot_meta"),
        (lambda p: (p / "snapshot_meta").write_text("{not json"), "is not JSON"),
    ],
)
def test_a_damaged_snapshot_is_reported_with_its_path(node: Path, damage: object, message: str) -> None:
    store = SnapshotStore(node)
    kv_snapshot(store, 9)
    bad = kv_snapshot(store, 29)
    damage(bad)  # type: ignore[operator]
    result = run("check", str(node))
    assert result.exit_code == 1
    assert f"problem: snapshot {bad} is damaged" in result.stderr and message in result.stderr
    assert "1 valid, newest 9" in result.stdout
    assert result.stderr.rstrip().splitlines()[-1] == f"error: 1 problem in {node} (listed above)"
    report = json.loads(run("check", "--json", str(node)).stdout)
    assert report["healthy"] is False and any(str(bad) in p for p in report["problems"])


def test_saves_cut_short_and_java_metas_are_notes(node: Path) -> None:
    store = SnapshotStore(node)
    java = node / "snapshot" / "snapshot_5"
    java.mkdir()
    (java / "snapshot_meta").write_text('{"lastIncludedIndex":5,"lastIncludedTerm":1}')
    (java / "data").write_bytes(b"java")
    store.begin_save().write(b"half")  # a save in progress: tmp/
    result = run("check", str(node))
    assert result.exit_code == 0, result.output
    assert "no checksum (a Java DLedger meta)" in result.output
    assert "a snapshot save in progress or cut short" in result.output
    assert "1 valid, newest 5 (term 1, size unknown)" in result.output


def compacted(tmp_path: Path) -> Path:
    """A node whose log starts at 30 (entries 0..29 compacted away)."""
    node = tmp_path / "dledger-n0"
    with dledger.open_log(node, CONFIG) as log:
        log.append_many([b"entry %d" % i for i in range(40)])
        assert log.reset(29, log.get(29).term) == 30
    return node


class Machine:
    """A state machine that takes snapshots and loads any."""

    def on_apply(self, entries: list[Entry]) -> None:
        """Nothing to apply."""

    def on_snapshot_capture(self) -> None:
        """Nothing to capture."""

    def on_snapshot_save(self, writer: BinaryIO) -> None:
        """Nothing to save."""

    def on_snapshot_load(self, reader: BinaryIO) -> None:
        """Anything loads."""


def server_refuses(node: Path, begin: int) -> str:
    """Why a starting member refuses this node's snapshots (its store, then its load)."""
    with pytest.raises((OSError, DLedgerError)) as refused:
        SnapshotManager(SnapshotStore(node), Machine(), threshold=10).load_newest(begin)
    return str(refused.value)


def server_starts(node: Path, begin: int) -> None:
    SnapshotManager(SnapshotStore(node), Machine(), threshold=10).load_newest(begin)


@pytest.mark.parametrize("snapshots", [[], [9], [9, 28]])
def test_a_compacted_log_no_valid_snapshot_covers_is_a_problem(tmp_path: Path, snapshots: list[int]) -> None:
    node = compacted(tmp_path)
    store = SnapshotStore(node)
    for index in snapshots:
        save(store, index, b"old")
    if not snapshots:
        shutil.rmtree(node / "snapshot")  # deleted
    result = run("check", str(node))
    assert result.exit_code == 1, result.output
    assert "problem: the log starts at index 30 (its prefix compacted)" in result.stderr
    assert "refuses to start (LOAD_SNAPSHOT_ERROR" in result.stderr
    assert "log starts at index 30" in server_refuses(node, 30)


def test_a_compacted_log_a_snapshot_covers_is_healthy(tmp_path: Path) -> None:
    node = compacted(tmp_path)
    store = SnapshotStore(node)
    save(store, 9, b"too old")
    save(store, 29, b"covers")
    result = run("check", str(node))
    assert result.exit_code == 0, result.output
    server_starts(node, 30)


def test_a_log_compacted_to_its_end_needs_a_snapshot_too(tmp_path: Path) -> None:
    """begin -1, end 39: the first live index is 40 (as a member computes it)."""
    node = tmp_path / "dledger-n0"
    with dledger.open_log(node, CONFIG) as log:
        log.append_many([b"entry %d" % i for i in range(40)])
        log.reset(39, log.get(39).term)
        assert (log.begin_index, log.end_index) == (-1, 39)
    result = run("check", str(node))
    assert result.exit_code == 1 and "the log starts at index 40" in result.stderr, result.output
    assert "log starts at index 40" in server_refuses(node, 40)
    assert any("starts at index 40" in p for p in inspect_snapshots(node, -1, 39).problems)
    save(SnapshotStore(node), 39, b"covers")
    assert run("check", str(node)).exit_code == 0
    server_starts(node, 40)


def test_a_prefix_deleted_by_retention_without_snapshots_is_a_note(tmp_path: Path) -> None:
    """No snapshot was ever taken and no reset dropped the prefix (time retention
    deleted old segments, as Java's CleanSpaceService does): a plain log is fine."""
    found = inspect_snapshots(tmp_path, 58)
    assert found.problems == [] and any("are gone (retention)" in n for n in found.notes)
    assert inspect_snapshots(tmp_path, -1, -1).notes == [] and inspect_snapshots(tmp_path, 0).notes == []


@pytest.mark.parametrize("kind", ["file", "dangling link"])
def test_a_snapshot_path_that_is_not_a_directory_is_a_problem(node: Path, kind: str) -> None:
    root = node / "snapshot"
    if kind == "file":
        root.write_bytes(b"not a directory")
    else:
        root.symlink_to(node / "gone")
    result = run("check", str(node))
    assert result.exit_code == 1, result.output
    assert f"problem: {root} is " in result.stderr and "refuses to start" in result.stderr
    assert "File exists" in server_refuses(node, 0)


def test_a_link_to_a_snapshot_directory_is_followed_as_a_member_does(node: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    save(SnapshotStore(elsewhere), 9, b"nine")
    (node / "snapshot").symlink_to(elsewhere / "snapshot")
    result = run("check", str(node))
    assert result.exit_code == 0 and "1 valid, newest 9" in result.output, result.output
    assert SnapshotStore(node).indexes() == [9]


def test_what_a_member_ignores_is_a_note(node: Path) -> None:
    store = SnapshotStore(node)
    save(store, 9, b"nine")
    (store.root / "snapshot_800").symlink_to(store.root / "snapshot_9")
    (store.root / "snapshot_9999").write_bytes(b"a file")
    result = run("check", str(node))
    assert result.exit_code == 0, result.output
    assert f"{store.root / 'snapshot_800'} is a symbolic link: ignored" in result.output
    assert f"{store.root / 'snapshot_9999'} is not a directory: ignored" in result.output
    assert "1 valid, newest 9" in result.output
    assert store.indexes() == [9]  # what the member lists


def test_an_unreadable_snapshot_directory_is_a_problem(node: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every directory")
    root = node / "snapshot"
    root.mkdir()
    root.chmod(0)
    try:
        result = run("check", str(node))
    finally:
        root.chmod(0o755)
    assert result.exit_code == 1 and "cannot read" in result.stderr
