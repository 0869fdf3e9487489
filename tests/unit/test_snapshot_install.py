"""SnapshotInstall: receiving a snapshot in chunks into install_tmp/ (CRC per chunk, next
offset only, resume after a broken stream, whole-file check, superseding)."""

from __future__ import annotations

import itertools
import os
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.codes import DLedgerError, ResponseCode
from dledger.statemachine.snapshot import SnapshotStore
from dledger.statemachine.snapshot_files import Snapshot
from dledger.statemachine.snapshot_install import SnapshotInstall
from tests.unit.test_snapshot_store import content, save

pytestmark = pytest.mark.unit

PAYLOAD = os.urandom(100_000)


def chunks(data: bytes, size: int) -> list[tuple[int, bytes, int]]:
    return [(at, data[at : at + size], zlib.crc32(data[at : at + size])) for at in range(0, len(data), size)]


def send(install: SnapshotInstall, data: bytes, size: int = 8192, start: int = 0) -> None:
    for offset, chunk, crc in chunks(data, size):
        if offset >= start:
            install.write_chunk(offset, chunk, crc)


def finish(install: SnapshotInstall, data: bytes) -> Snapshot:
    return install.finish(install.last_index, install.last_term, zlib.crc32(data), len(data))


def store_with_old(tmp_path: Path) -> SnapshotStore:
    store = SnapshotStore(tmp_path)
    save(store, 5, 1, b"old")
    return store


def test_chunks_in_order_install_the_snapshot(tmp_path: Path) -> None:
    store = store_with_old(tmp_path)
    install = store.begin_install(100, 3)
    send(install, PAYLOAD)
    assert install.resume_offset() == len(PAYLOAD)
    snapshot = finish(install, PAYLOAD)
    assert snapshot.path == store.root / "snapshot_100"
    assert not (store.root / "install_tmp").exists() and not install.active
    assert content(SnapshotStore(tmp_path).latest()) == (100, 3, PAYLOAD)
    assert snapshot.meta.verified and snapshot.meta.size == len(PAYLOAD)


def test_a_chunk_with_a_bad_crc_is_refused_and_nothing_is_lost(tmp_path: Path) -> None:
    store = store_with_old(tmp_path)
    install = store.begin_install(100, 3)
    send(install, PAYLOAD[:40_000])
    damaged = bytearray(PAYLOAD[40_000:48_192])
    damaged[7] ^= 0x10
    with pytest.raises(DLedgerError, match="chunk at offset 40000: CRC-32") as info:
        install.write_chunk(40_000, bytes(damaged), zlib.crc32(PAYLOAD[40_000:48_192]))
    assert info.value.code == ResponseCode.INSTALL_SNAPSHOT_ERROR
    assert install.resume_offset() == 40_000
    assert (store.root / "install_tmp" / "data").read_bytes() == PAYLOAD[:40_000]
    rest = PAYLOAD[40_000:]
    for at in range(0, len(rest), 8192):
        piece = rest[at : at + 8192]
        install.write_chunk(40_000 + at, piece, zlib.crc32(piece))
    assert content(finish(install, PAYLOAD)) == (100, 3, PAYLOAD)


@pytest.mark.parametrize("offset", [0, 8191, 8193, 100_000])
def test_a_chunk_not_at_the_next_offset_is_refused(tmp_path: Path, offset: int) -> None:
    store = store_with_old(tmp_path)
    install = store.begin_install(100, 3)
    send(install, PAYLOAD[:8192])
    piece = PAYLOAD[offset : offset + 100]
    with pytest.raises(DLedgerError, match=f"chunk at offset {offset}, expected 8192") as info:
        install.write_chunk(offset, piece, zlib.crc32(piece))
    assert info.value.code == ResponseCode.INSTALL_SNAPSHOT_ERROR
    assert install.resume_offset() == 8192
    assert (store.root / "install_tmp" / "data").read_bytes() == PAYLOAD[:8192]


def test_a_broken_stream_resumes_from_the_last_good_offset(tmp_path: Path) -> None:
    store = store_with_old(tmp_path)
    first = store.begin_install(100, 3)
    send(first, PAYLOAD[:50_000], size=10_000)
    del first  # the stream broke; the sender comes back and asks where to restart
    again = store.begin_install(100, 3)
    assert again.resume_offset() == 50_000
    with pytest.raises(DLedgerError, match="received 50000 of 100000 bytes: resume from 50000"):
        finish(again, PAYLOAD)  # finishing early keeps what arrived
    rest = PAYLOAD[50_000:]
    for at in range(0, len(rest), 10_000):
        piece = rest[at : at + 10_000]
        again.write_chunk(50_000 + at, piece, zlib.crc32(piece))
    assert content(finish(again, PAYLOAD)) == (100, 3, PAYLOAD)


def test_a_whole_file_checksum_mismatch_drops_the_install(tmp_path: Path) -> None:
    store = store_with_old(tmp_path)
    install = store.begin_install(100, 3)
    send(install, PAYLOAD)
    with pytest.raises(DLedgerError, match="install dropped") as info:
        install.finish(100, 3, zlib.crc32(PAYLOAD) ^ 1, len(PAYLOAD))
    assert info.value.code == ResponseCode.INSTALL_SNAPSHOT_ERROR
    assert not (store.root / "install_tmp").exists() and not install.active
    assert content(store.latest()) == (5, 1, b"old") and store.indexes() == [5]
    with pytest.raises(DLedgerError, match="has ended"):
        install.write_chunk(len(PAYLOAD), b"x", zlib.crc32(b"x"))
    fresh = store.begin_install(100, 3)  # a new install starts from zero
    assert fresh is not install and fresh.resume_offset() == 0


def test_more_bytes_than_the_sender_announces_drop_the_install(tmp_path: Path) -> None:
    store = store_with_old(tmp_path)
    install = store.begin_install(100, 3)
    send(install, PAYLOAD)
    with pytest.raises(DLedgerError, match="install dropped"):
        install.finish(100, 3, zlib.crc32(PAYLOAD[:-1]), len(PAYLOAD) - 1)
    assert store.indexes() == [5]


def test_finish_for_another_index_or_term_is_refused(tmp_path: Path) -> None:
    store = store_with_old(tmp_path)
    install = store.begin_install(100, 3)
    send(install, PAYLOAD)
    for index, term in ((101, 3), (100, 4)):
        with pytest.raises(DLedgerError, match="but installing \\(100, 3\\)") as info:
            install.finish(index, term, zlib.crc32(PAYLOAD), len(PAYLOAD))
        assert info.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert content(finish(install, PAYLOAD)) == (100, 3, PAYLOAD)


def test_a_newer_install_supersedes_an_older_one_in_progress(tmp_path: Path) -> None:
    store = store_with_old(tmp_path)
    older = store.begin_install(100, 3)
    send(older, PAYLOAD[:20_000])
    newer = store.begin_install(200, 4)
    assert newer.resume_offset() == 0 and not older.active
    with pytest.raises(DLedgerError, match="superseded") as info:
        older.write_chunk(20_000, b"x", zlib.crc32(b"x"))
    assert info.value.code == ResponseCode.NEWER_INSTALL_SNAPSHOT_REQUEST_EXIST
    with pytest.raises(DLedgerError) as info:
        finish(older, PAYLOAD)
    assert info.value.code == ResponseCode.NEWER_INSTALL_SNAPSHOT_REQUEST_EXIST
    for index, term in ((150, 4), (200, 5)):  # an older one (or the same index in another term) is refused
        with pytest.raises(DLedgerError, match="installing snapshot 200") as info:
            store.begin_install(index, term)
        assert info.value.code == ResponseCode.NEWER_INSTALL_SNAPSHOT_REQUEST_EXIST
    send(newer, PAYLOAD)
    assert content(finish(newer, PAYLOAD)) == (200, 4, PAYLOAD)
    assert store.indexes() == [200, 5]


def test_an_install_not_newer_than_the_latest_snapshot_is_refused(tmp_path: Path) -> None:
    store = store_with_old(tmp_path)
    for index in (5, 3):
        with pytest.raises(DLedgerError, match="snapshot 5 exists already") as info:
            store.begin_install(index, 1)
        assert info.value.code == ResponseCode.INSTALL_SNAPSHOT_ERROR
    install = store.begin_install(50, 1)
    send(install, PAYLOAD)
    writer = store.begin_save()  # a save overtakes the install while it is in flight
    writer.write(b"saved")
    writer.commit(60, 1)
    with pytest.raises(DLedgerError, match="snapshot 60 exists already") as info:
        finish(install, PAYLOAD)
    assert info.value.code == ResponseCode.INSTALL_SNAPSHOT_ERROR
    assert not (store.root / "install_tmp").exists()
    assert content(store.latest()) == (60, 1, b"saved")


def test_abort_and_reopen_remove_install_tmp(tmp_path: Path) -> None:
    store = store_with_old(tmp_path)
    install = store.begin_install(100, 3)
    send(install, PAYLOAD[:10_000])
    install.abort()
    assert not (store.root / "install_tmp").exists() and not install.active
    again = store.begin_install(100, 3)
    assert again is not install and again.resume_offset() == 0
    send(again, PAYLOAD[:10_000])
    reopened = SnapshotStore(tmp_path)  # a restart: a half-received install is gone
    assert not (reopened.root / "install_tmp").exists()
    assert content(reopened.latest()) == (5, 1, b"old")


@pytest.mark.parametrize("index, term", [(-1, 0), (0, -2), (1 << 63, 1), (True, 1)])
def test_out_of_range_install_arguments_are_refused(tmp_path: Path, index: int, term: int) -> None:
    store = store_with_old(tmp_path)
    with pytest.raises(DLedgerError, match="out of range") as info:
        store.begin_install(index, term)
    assert info.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert not (store.root / "install_tmp").exists()


def test_a_failing_chunk_write_cuts_back_to_the_last_good_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_with_old(tmp_path)
    install = store.begin_install(100, 3)
    send(install, PAYLOAD[:8192])
    real = os.pwrite

    def half_then_fail(fd: int, data: bytes | memoryview, offset: int) -> int:
        real(fd, bytes(data)[:100], offset)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", half_then_fail)
    piece = PAYLOAD[8192:16384]
    with pytest.raises(DLedgerError, match="No space left") as info:
        install.write_chunk(8192, piece, zlib.crc32(piece))
    monkeypatch.undo()
    assert info.value.code == ResponseCode.DISK_ERROR
    assert install.resume_offset() == 8192
    assert (store.root / "install_tmp" / "data").read_bytes() == PAYLOAD[:8192]
    send(install, PAYLOAD, start=8192)
    assert content(finish(install, PAYLOAD)) == (100, 3, PAYLOAD)


@pytest.mark.property
@settings(max_examples=40, deadline=None)
@given(
    data=st.binary(max_size=5000),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=8),
    breaks=st.lists(st.integers(min_value=0, max_value=10), max_size=3),
)
def test_any_chunking_and_stream_breaks_install_the_same_bytes(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, cuts: list[int], breaks: list[int]
) -> None:
    store = SnapshotStore(tmp_path_factory.mktemp("node"))
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    pieces = list(itertools.pairwise(bounds))
    install = store.begin_install(7, 2)
    sent = 0
    for number, (start, end) in enumerate(pieces):
        if number in breaks:  # the stream breaks: the sender asks where to go on
            install = store.begin_install(7, 2)
            assert install.resume_offset() == start
        sent = install.write_chunk(start, data[start:end], zlib.crc32(data[start:end]))
    assert sent == len(data)
    assert content(finish(install, data)) == (7, 2, data)
