"""The append lock: a single append skips the mutex only when nobody holds it, so it
never runs beside a multi-step change or beside an append that writes without the GIL."""

from __future__ import annotations

import threading
import time
from itertools import pairwise
from pathlib import Path

import pytest

from dledger.store.mmap_store import MmapLogStore, StoreConfig

pytestmark = pytest.mark.unit

CONFIG = StoreConfig(data_file_size=1 << 22, index_file_size=1 << 16, warm_ahead_bytes=0, checkpoint_interval_ms=10**9)
BIG = 100 * 1024  # copied without the GIL (>= 64 KiB)


@pytest.mark.parametrize("data_writes", ["mmap", "pwrite"])
def test_appends_wait_for_a_multi_step_change(tmp_path: Path, data_writes: str) -> None:
    with MmapLogStore.open(tmp_path, StoreConfig(**{**CONFIG.__dict__, "data_writes": data_writes})) as store:
        store.term = 1
        store.append_many([b"a", b"b", b"c"])
        appended: list[int] = []
        store._acquire()
        try:
            writer = threading.Thread(target=lambda: appended.append(store.append(b"d")))
            writer.start()
            writer.join(0.2)
            assert writer.is_alive() and not appended  # waiting for the lock
            store._set_state(0, 1, 1, int(store.get_locked(2).pos))  # drop entry 2 meanwhile
        finally:
            store._release()
        writer.join()
        assert appended == [2]  # appended after the change, where the log ends now
        assert [store.get_body(i) for i in range(3)] == [b"a", b"b", b"d"]


@pytest.mark.parametrize("data_writes", ["mmap", "pwrite"])
def test_small_appends_beside_appends_written_without_the_gil(tmp_path: Path, data_writes: str) -> None:
    smalls = [b"s%06d" % k for k in range(20_000)]
    bigs = [bytes([k % 251]) * BIG for k in range(150)]
    errors: list[BaseException] = []

    with MmapLogStore.open(tmp_path, StoreConfig(**{**CONFIG.__dict__, "data_writes": data_writes})) as store:
        store.term = 1
        start = threading.Barrier(2)

        def run(bodies: list[bytes]) -> None:
            try:
                start.wait()
                for k, body in enumerate(bodies):
                    store.append(body)
                    if k % 50 == 0:
                        time.sleep(0)  # let the other writer in: the small appends then
                        # run while a big append copies without the GIL
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(b,)) for b in (smalls, bigs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert store.end_index == len(smalls) + len(bigs) - 1
        got = [store.get_body(i) for i in range(store.end_index + 1)]
        assert [b for b in got if len(b) < BIG] == smalls  # each writer's entries, whole and in order
        assert [b for b in got if len(b) == BIG] == bigs
        entries = [store.get(i) for i in range(store.end_index + 1)]
        for prev, entry in pairwise(entries):
            assert entry.pos >= prev.pos + prev.size  # no two entries overlap
