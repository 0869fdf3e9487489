"""Recovery never cuts data on a guess (issue 16, finding 5).

A store of 1,000 entries (one 1 MiB data segment, body CRCs on) is closed, its
`checkpoint` / `currterm` damaged, sometimes one body byte flipped, and reopened. With
a valid checkpoint (or `.bak`) recovery knows what is committed; without one, a damaged
entry is a CorruptStoreError naming file and offset and no byte of the store changes.
`dledger check` reports the same, and `dledger check --repair --yes` cuts only then.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from dledger.cli.main import main as cli
from dledger.codes import CorruptStoreError, DLedgerError
from dledger.embedded import open_log
from dledger.store import StoreConfig
from dledger.store.checkpoint import load_checkpoint
from dledger.store.mmap_store import MmapLogStore
from dledger.store.term_store import FileTermStore

pytestmark = pytest.mark.faults

N = 1000
DATA, INDEX = 1 << 20, 64 * 1024  # one data segment: recovery scans entry 500
CONFIG = StoreConfig(data_file_size=DATA, index_file_size=INDEX, write_crc=True, verify_crc=True)


def body(i: int) -> bytes:
    return hashlib.sha256(f"entry-{i}".encode()).digest()


def build(node: Path) -> Path:
    with open_log(node, CONFIG) as log:
        log.append_many([body(i) for i in range(N)])
    # a second close leaves checkpoint and checkpoint.bak both whole, as a running store does
    with open_log(node, CONFIG):
        pass
    return node


def snapshot(node: Path) -> dict[str, bytes]:
    return {str(p.relative_to(node)): p.read_bytes() for p in sorted(node.rglob("*")) if p.is_file()}


def flip_body_byte(node: Path, index: int) -> None:
    with MmapLogStore.open(node, StoreConfig(data_file_size=DATA, index_file_size=INDEX, read_only=True)) as store:
        entry = store.get(index)
    start = entry.pos - entry.pos % DATA
    path = node / "data" / f"{start:020d}"
    raw = bytearray(path.read_bytes())
    raw[entry.pos - start + 48 + 3] ^= 0x40  # the header is 48 bytes; a body byte
    path.write_bytes(bytes(raw))


def all_entries_read_back(node: Path) -> None:
    with MmapLogStore.open(node, StoreConfig(data_file_size=DATA, index_file_size=INDEX)) as store:
        assert (store.begin_index, store.end_index) == (0, N - 1)
        for i in range(N):
            assert store.get(i).body == body(i)


@pytest.fixture
def node(tmp_path: Path) -> Path:
    return build(tmp_path / "dledger-n0")


def test_finding_5_garbage_checkpoint_and_a_flipped_byte_cut_nothing(node: Path) -> None:
    (node / "checkpoint").write_bytes(b"\x00\xffgarbage\x13")
    (node / "checkpoint.bak").unlink()
    flip_body_byte(node, 500)
    before = snapshot(node)
    with pytest.raises(CorruptStoreError) as info:
        MmapLogStore.open(node, CONFIG)
    assert "/data/" in info.value.path
    assert info.value.offset >= 0 and "no valid checkpoint" in info.value.message
    assert snapshot(node) == before  # nothing cut, nothing rewritten
    result = CliRunner().invoke(cli, ["check", str(node)])
    assert result.exit_code == 1, result.output
    assert "healthy" not in result.output
    assert snapshot(node) == before


@pytest.mark.parametrize(
    "damage",
    ["garbage", "empty", "committed_beyond_end", "missing_with_bak", "missing_without_bak", "non_numeric"],
)
def test_checkpoint_corruption_matrix_clean_log(node: Path, damage: str) -> None:
    cp, bak = node / "checkpoint", node / "checkpoint.bak"
    if damage == "garbage":
        cp.write_bytes(b"\x89PNG\r\n\x1a\n")
    elif damage == "empty":
        cp.write_bytes(b"")
    elif damage == "committed_beyond_end":
        cp.write_text("committedIndex=5000\nendIndex=999\n")
    elif damage == "missing_with_bak":
        cp.unlink()
    elif damage == "missing_without_bak":
        cp.unlink()
        bak.unlink()
    else:
        cp.write_text("committedIndex=abc\nendIndex=999\n")
    info = load_checkpoint(node)
    if damage == "missing_without_bak":
        assert not info.known and info.rejected == ()
    elif damage == "committed_beyond_end":  # Java leaves this after a truncate: clamped
        assert (info.source, info.committed, info.end, info.rejected) == ("checkpoint", N - 1, N - 1, ())
    else:
        assert info.known and info.source == "checkpoint.bak" and (info.committed, info.end) == (N - 1, N - 1)
        assert len(info.rejected) == (0 if damage == "missing_with_bak" else 1)
    all_entries_read_back(node)


@pytest.mark.parametrize("damage", ["garbage", "negative", "missing_without_bak"])
def test_unknown_committed_index_refuses_to_cut(node: Path, damage: str) -> None:
    for name in ("checkpoint", "checkpoint.bak"):
        if damage == "garbage":
            (node / name).write_text("not a checkpoint at all")
        elif damage == "negative":
            (node / name).write_text("committedIndex=-7\nendIndex=999\n")
        else:
            (node / name).unlink()
    flip_body_byte(node, 700)
    before = snapshot(node)
    with pytest.raises(CorruptStoreError, match="nothing was cut"):
        MmapLogStore.open(node, CONFIG)
    with pytest.raises(CorruptStoreError):
        MmapLogStore.open(node, StoreConfig(data_file_size=DATA, index_file_size=INDEX, read_only=True))
    assert snapshot(node) == before


@pytest.mark.parametrize("checkpoint", ["garbage", "committedIndex=5000\nendIndex=999\n"])
def test_known_committed_index_above_the_damage_still_refuses(node: Path, checkpoint: str) -> None:
    """A valid .bak (or a committed index past the end, clamped to it) says everything
    is committed: the damaged entry is below it."""
    (node / "checkpoint").write_text(checkpoint)
    flip_body_byte(node, 500)
    before = snapshot(node)
    with pytest.raises(CorruptStoreError, match="committed index 999"):
        MmapLogStore.open(node, CONFIG)
    assert snapshot(node) == before


def test_repair_shows_the_cut_then_cuts_when_confirmed(node: Path) -> None:
    for name in ("checkpoint", "checkpoint.bak"):
        (node / name).unlink()
    flip_body_byte(node, 500)
    before = snapshot(node)
    runner = CliRunner()
    declined = runner.invoke(cli, ["check", "--repair", str(node)], input="n\n")
    assert declined.exit_code == 1, declined.output
    assert "would cut" in declined.output and "500" in declined.output and "999" in declined.output
    assert snapshot(node) == before
    done = runner.invoke(cli, ["check", "--repair", "--yes", str(node)])
    assert done.exit_code == 0, done.output
    with MmapLogStore.open(node, CONFIG) as store:
        assert (store.begin_index, store.end_index) == (0, 499)
        assert [store.get(i).body for i in range(500)] == [body(i) for i in range(500)]
    assert CliRunner().invoke(cli, ["check", str(node)]).exit_code == 0


@pytest.mark.parametrize("content", [b"garbage", b"currTerm=9223372036854775808\nvoteLeader=n0\n", b""])
def test_currterm_garbage_is_refused_not_read_as_zero(tmp_path: Path, content: bytes) -> None:
    terms = FileTermStore(tmp_path)
    terms.persist(7, "n1")
    terms.persist(9, "n2")
    (tmp_path / "currterm").write_bytes(content)
    with pytest.raises(DLedgerError, match="currterm"):
        terms.load()
    assert (tmp_path / "currterm").read_bytes() == content  # nothing rewritten
    assert (tmp_path / "currterm.bak").read_text() == "currTerm=7\nvoteLeader=n1\n"


def test_currterm_missing_falls_back_to_bak(tmp_path: Path) -> None:
    terms = FileTermStore(tmp_path)
    terms.persist(7, "n1")
    terms.persist(9, "n2")
    (tmp_path / "currterm").unlink()
    assert terms.load() == (7, "n1")
    (tmp_path / "currterm.bak").unlink()
    assert terms.load() == (0, None)
