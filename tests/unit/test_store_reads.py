"""The compiled point-read path: CRC-32 of every small size, verification on reads, and
reads during multi-step changes."""

from __future__ import annotations

import random
import threading
import zlib
from pathlib import Path

import pytest

from dledger import _store_py
from dledger._native import impl
from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import HEADER_SIZE
from dledger.store.mmap_store import MmapLogStore, StoreConfig

pytestmark = pytest.mark.unit

SMALL = StoreConfig(data_file_size=8192, index_file_size=1024, warm_ahead_bytes=0, checkpoint_interval_ms=10**9)


def test_crc32_of_every_small_length_and_alignment_matches_zlib() -> None:
    # covers the short path for small inputs (32..288 bytes where the CPU has it) and
    # its neighbours on both sides
    rng = random.Random(5)
    blob = rng.randbytes(700)
    view = memoryview(blob)
    for n in range(0, 601):
        for start in (0, 1, 7, 16, 33, 63):
            data = view[start : start + n] if start + n <= len(blob) else view[:n]
            assert impl.crc32(data) == zlib.crc32(data), (n, start)
    for n in (32, 33, 100, 128, 255, 256, 287, 288, 289):
        for fill in (b"\x00", b"\xff"):
            assert impl.crc32(fill * n) == zlib.crc32(fill * n) == _store_py.crc32(fill * n)


def test_reads_verify_the_crc_of_every_body_size(tmp_path: Path) -> None:
    rng = random.Random(9)
    bodies = [rng.randbytes(n) for n in range(0, 301)]
    with MmapLogStore.open(tmp_path, SMALL) as store:
        store.term = 1
        for body in bodies:
            store.append(body)
        damaged = {n for n in range(1, 301) if n % 7 == 0 or n in (32, 128, 288)}
        for n in damaged:
            entry = store.get(n)
            at = entry.pos + HEADER_SIZE + rng.randrange(n)
            byte = store.data_list.table.read(at, 1)[0]
            store.data_list.table.write(at, bytes([byte ^ (1 << rng.randrange(8))]))
        for n, body in enumerate(bodies):
            if n in damaged:
                for read in (store.get, store.get_body):
                    with pytest.raises(DLedgerError) as info:
                        read(n)
                    assert info.value.code == ResponseCode.DISK_ERROR
                    assert "CRC" in str(info.value)
            else:
                assert store.get_body(n) == body
                entry = store.get(n)
                assert (entry.body, entry.index, entry.body_crc) == (body, n, _store_py._crc_field(body))
        store.verify_crc = False
        assert store.get_body(128) != bodies[128]  # unchecked: the damaged bytes


def test_reads_of_old_segments_and_out_of_range(tmp_path: Path) -> None:
    with MmapLogStore.open(tmp_path, SMALL) as store:
        store.term = 1
        bodies = [bytes([i % 251]) * (i % 90) for i in range(400)]
        store.append_many(bodies)
        assert store.data_list.table.count > 3 and store.index_list.table.count > 3
        for i in (0, 1, 57, 200, 398, 399):
            assert store.get_body(i) == bodies[i] == store.get(i).body
        for i in (-1, 400, 10**12):
            with pytest.raises(DLedgerError) as info:
                store.get_body(i)
            assert info.value.code == ResponseCode.INDEX_OUT_OF_RANGE


def test_point_reads_wait_for_a_multi_step_change(tmp_path: Path) -> None:
    """Between _acquire and _release (truncate, reset, recovery, retention) a read takes
    the lock instead of reading under the GIL alone, so it never sees a half-done change."""
    with MmapLogStore.open(tmp_path, SMALL) as store:
        store.term = 1
        store.append_many([b"a", b"b", b"c"])
        assert store.exclusive == 0
        results: list[object] = []

        def read() -> None:
            try:
                results.append(store.get_body(2))
            except DLedgerError as exc:
                results.append(exc.code)

        store._acquire()
        try:
            assert store.exclusive == 1
            reader = threading.Thread(target=read)
            reader.start()
            reader.join(0.2)
            assert reader.is_alive() and not results  # waiting for the lock
            store._set_state(0, 1, 1, int(store.get_locked(2).pos))  # drop entry 2
        finally:
            store._release()
        reader.join()
        assert store.exclusive == 0
        assert results == [ResponseCode.INDEX_OUT_OF_RANGE]  # it read the log after the change
