"""`dledger check` verifies a node's snapshots (written here with the real SnapshotStore):
a damaged one is a problem naming its directory (exit 1), good ones are counted, nothing
is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import dledger
from dledger.entry import MAGIC_NORMAL, Entry
from dledger.kv import KVStateMachine
from dledger.kv import commands as kv
from dledger.statemachine.snapshot import SnapshotStore
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


def test_a_snapshot_behind_a_compacted_log_is_a_note(tmp_path: Path) -> None:
    node = tmp_path / "dledger-n0"
    with dledger.open_log(node, CONFIG) as log:
        log.append_many([b"entry %d" % i for i in range(40)])
        assert log.reset(29, log.get(29).term) == 30
    store = SnapshotStore(node)
    save(store, 9, b"old")
    result = run("check", str(node))
    assert "entries 10..29 are in neither" in result.output, result.output


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
