"""The stores under benchmark behind one interface: dledger's MmapLogStore and the baselines
(raw mmap copy, lmdb, rocksdict, sqlite3).

Every baseline runs at the durability of dledger's async mode (survives a process crash,
not a power loss) in its fastest configuration for an append-only log:
lmdb `writemap=True, sync=False, metasync=False` and MDB_APPEND puts; RocksDB defaults
(WAL on, no sync per write) in raw mode; sqlite WAL with `synchronous=OFF`, integer rowid keys.
"""

from __future__ import annotations

import mmap
import os
import shutil
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from functools import partial
from itertools import count, pairwise
from pathlib import Path
from typing import Any

import lmdb
import numpy as np
from rocksdict import Options, Rdict, WriteBatch

from bench._common import (
    BATCH,
    DATA_FILE_SIZE,
    INDEX_FILE_SIZE,
    SCAN_CHUNK,
    TERM,
    WARM_AHEAD_BYTES,
    WARM_SETTLE_S,
    Workload,
    chunks,
    count_in_chunks,
    drain,
    encode_log,
    key,
    make_bodies,
    page_round,
)

Target = Callable[[], None]


class Backend(ABC):
    """One store. `open` gives an empty store; the writers return the timed closure of one
    round (all inputs precomputed) and look the store up when called, so a reopen between
    rounds is fine."""

    rounds: int = 5
    """Measured rounds per append benchmark."""
    warmup_rounds: int = 0
    """Unmeasured rounds first (on the same store when it is not fresh per round)."""
    fresh_per_round: bool = True
    """Open a new, empty store before every round (else one store grows across rounds)."""

    @abstractmethod
    def open(self, path: Path) -> None:
        """Create an empty store under the (not yet existing) directory `path`."""

    @abstractmethod
    def close(self) -> None:
        """Release the store (its files are deleted by the caller)."""

    def prepare(self) -> None:  # noqa: B027 - optional hook
        """Untimed step before each round."""

    @abstractmethod
    def single_writer(self, w: Workload) -> Target:
        """Append `w.count` records, one per commit / transaction."""

    @abstractmethod
    def batch_writer(self, w: Workload) -> Target:
        """Append `w.count` records, `BATCH` per commit / transaction / WriteBatch."""

    @abstractmethod
    def getter(self) -> Callable[[Any], bytes]:
        """Point read returning the body, called with the items of `read_keys`."""

    @abstractmethod
    def read_keys(self, indexes: Sequence[int]) -> list[Any]:
        """`getter` arguments for log indexes `indexes`."""

    @abstractmethod
    def scan(self) -> int:
        """Read every row in order, `SCAN_CHUNK` rows at a time; returns the row count."""


class Dledger(Backend):
    """dledger's MmapLogStore (CRC on). Warm: one store growing across rounds, one warm-up
    round, and the warm-ahead window pre-touched (`wait_warm`) before each round. Cold:
    warm-ahead off and a fresh store for every round."""

    def __init__(self, warm: bool = True, flush_mode: str = "async") -> None:
        self.warm = warm
        self.flush_mode = flush_mode
        self.fresh_per_round = not warm
        self.rounds = 20 if warm else 7
        self.warmup_rounds = 1 if warm else 0
        self.store: Any = None
        self.threads: list[Any] = []

    def open(self, path: Path) -> None:
        from dledger.service_thread import start_passes
        from dledger.store.mmap_store import MmapLogStore, StoreConfig

        cfg = StoreConfig(
            data_file_size=DATA_FILE_SIZE,
            index_file_size=INDEX_FILE_SIZE,
            flush_mode=self.flush_mode,
            write_crc=True,
            warm_ahead_bytes=WARM_AHEAD_BYTES if self.warm else 0,
        )
        self.store = MmapLogStore.open(str(path / "dledger-n0"), cfg)
        self.store.term = TERM
        self.threads = start_passes(self.store.periodic_passes())  # flush, warm-ahead, retention

    def close(self) -> None:
        for thread in self.threads:
            thread.stop()
        self.threads = []
        self.store.close()
        self.store = None

    def prepare(self) -> None:
        if self.warm:
            self.store.wait_warm()
            # wait_warm returns at once while the background warm thread is still pre-faulting
            # a window it has claimed: give it time to finish
            time.sleep(WARM_SETTLE_S)

    def single_writer(self, w: Workload) -> Target:
        bodies = make_bodies(w.size, w.count)
        return lambda: drain(self.store.append, bodies)

    def batch_writer(self, w: Workload) -> Target:
        batches = chunks(make_bodies(w.size, w.count), BATCH)
        return lambda: drain(self.store.append_many, batches)

    def getter(self) -> Callable[[Any], bytes]:
        return self.store.get_body  # type: ignore[no-any-return]

    def read_keys(self, indexes: Sequence[int]) -> list[Any]:
        return list(indexes)

    def scan(self) -> int:
        read_columns = self.store.read_columns
        index, last, rows = self.store.begin_index, self.store.end_index, 0
        while index <= last:
            n = read_columns(index, SCAN_CHUNK, 1 << 30).count
            rows += n
            index += n
        return rows


class RawMmap(Backend):
    """The physical limit: memcpy of the pre-encoded records (48-byte header with CRC + body)
    into a preallocated, pre-touched shared file mapping; no index, no encoding, no CRC."""

    rounds = 10
    fresh_per_round = False

    def __init__(self) -> None:
        self.path: Path | None = None
        self.mm: mmap.mmap | None = None
        self.view: memoryview | None = None
        self.starts: list[int] = []

    def open(self, path: Path) -> None:
        path.mkdir(parents=True)
        self.path = path

    def _map(self, w: Workload) -> tuple[list[bytes], list[int]]:
        """Map and pre-touch a file holding `w`'s records; returns (records, starts)."""
        assert self.path is not None and self.mm is None
        records, self.starts = encode_log(w.size, w.count)
        size = page_round(self.starts[-1])
        with open(self.path / "raw.log", "w+b") as f:
            f.truncate(size)
            self.mm = mmap.mmap(f.fileno(), size)
        touch = np.frombuffer(self.mm, dtype=np.uint8)
        touch.fill(0)
        del touch
        self.view = memoryview(self.mm)
        return records, self.starts

    def close(self) -> None:
        if self.view is not None:
            self.view.release()
            self.view = None
        if self.mm is not None:
            self.mm.close()
            self.mm = None

    def single_writer(self, w: Workload) -> Target:
        records, starts = self._map(w)
        slices = [slice(a, b) for a, b in pairwise(starts)]
        assert self.view is not None
        return partial(drain, self.view.__setitem__, slices, records)

    def batch_writer(self, w: Workload) -> Target:
        records, starts = self._map(w)
        blobs = [b"".join(records[i : i + BATCH]) for i in range(0, len(records), BATCH)]
        slices = [slice(starts[i], starts[min(i + BATCH, w.count)]) for i in range(0, w.count, BATCH)]
        assert self.view is not None
        return partial(drain, self.view.__setitem__, slices, blobs)

    def getter(self) -> Callable[[Any], bytes]:
        assert self.mm is not None
        return self.mm.__getitem__  # type: ignore[return-value]

    def read_keys(self, indexes: Sequence[int]) -> list[Any]:
        return [slice(self.starts[i] + 48, self.starts[i + 1]) for i in indexes]

    def scan(self) -> int:
        assert self.mm is not None
        n = len(self.starts) - 1
        for i in range(0, n, SCAN_CHUNK):
            self.mm[self.starts[i] : self.starts[min(i + SCAN_CHUNK, n)]]
        return n


class Lmdb(Backend):
    """lmdb with writemap, no sync; keys appended in order (MDB_APPEND)."""

    def __init__(self) -> None:
        self.env: Any = None
        self.rtxn: Any = None

    def open(self, path: Path) -> None:
        self.env = lmdb.open(str(path), map_size=4 << 30, sync=False, metasync=False, writemap=True)

    def close(self) -> None:
        if self.rtxn is not None:
            self.rtxn.abort()
            self.rtxn = None
        self.env.close()
        self.env = None

    def _put_one(self, k: bytes, v: bytes) -> None:
        with self.env.begin(write=True) as txn:
            txn.put(k, v, append=True)

    def single_writer(self, w: Workload) -> Target:
        keys = [key(i) for i in range(w.count)]
        bodies = make_bodies(w.size, w.count)
        return lambda: drain(self._put_one, keys, bodies)

    def batch_writer(self, w: Workload) -> Target:
        batches = chunks([(key(i), b) for i, b in enumerate(make_bodies(w.size, w.count))], BATCH)

        def run() -> None:
            for batch in batches:
                with self.env.begin(write=True) as txn:
                    txn.cursor().putmulti(batch, append=True)

        return run

    def getter(self) -> Callable[[Any], bytes]:
        if self.rtxn is None:
            self.rtxn = self.env.begin()
        return self.rtxn.get  # type: ignore[no-any-return]

    def read_keys(self, indexes: Sequence[int]) -> list[Any]:
        return [key(i) for i in indexes]

    def scan(self) -> int:
        with self.env.begin() as txn:
            return count_in_chunks(txn.cursor().iternext(keys=False, values=True))


class Rocks(Backend):
    """RocksDB through rocksdict in raw mode (bytes keys and values, no pickling)."""

    def __init__(self) -> None:
        self.db: Any = None

    def open(self, path: Path) -> None:
        self.db = Rdict(str(path), Options(raw_mode=True))

    def close(self) -> None:
        self.db.close()
        self.db = None

    def single_writer(self, w: Workload) -> Target:
        keys = [key(i) for i in range(w.count)]
        bodies = make_bodies(w.size, w.count)
        return lambda: drain(self.db.put, keys, bodies)

    def batch_writer(self, w: Workload) -> Target:
        keys = chunks([key(i) for i in range(w.count)], BATCH)
        bodies = chunks(make_bodies(w.size, w.count), BATCH)

        def run() -> None:
            for ks, bs in zip(keys, bodies, strict=True):
                wb = WriteBatch(raw_mode=True)
                drain(wb.put, ks, bs)
                self.db.write(wb)

        return run

    def getter(self) -> Callable[[Any], bytes]:
        return self.db.get  # type: ignore[no-any-return]

    def read_keys(self, indexes: Sequence[int]) -> list[Any]:
        return [key(i) for i in indexes]

    def scan(self) -> int:
        return count_in_chunks(self.db.values())


class Sqlite(Backend):
    """sqlite3, WAL journal, synchronous=OFF, `idx INTEGER PRIMARY KEY` (the rowid)."""

    INSERT = "INSERT INTO log (idx, body) VALUES (?, ?)"
    SELECT = "SELECT body FROM log WHERE idx = ?"

    def __init__(self) -> None:
        self.con: Any = None

    def open(self, path: Path) -> None:
        path.mkdir(parents=True)
        self.con = sqlite3.connect(path / "log.db", isolation_level=None)
        self.con.execute("PRAGMA journal_mode=WAL")
        self.con.execute("PRAGMA synchronous=OFF")
        self.con.execute("CREATE TABLE log (idx INTEGER PRIMARY KEY, body BLOB NOT NULL)")

    def close(self) -> None:
        self.con.close()
        self.con = None

    def single_writer(self, w: Workload) -> Target:
        rows = list(enumerate(make_bodies(w.size, w.count)))
        return lambda: drain(partial(self.con.execute, self.INSERT), rows)  # autocommit: one txn per row

    def batch_writer(self, w: Workload) -> Target:
        batches = chunks(list(enumerate(make_bodies(w.size, w.count))), BATCH)

        def run() -> None:
            for batch in batches:
                self.con.execute("BEGIN")
                self.con.executemany(self.INSERT, batch)
                self.con.execute("COMMIT")

        return run

    def getter(self) -> Callable[[Any], bytes]:
        execute, select = self.con.execute, self.SELECT
        return lambda params: execute(select, params).fetchone()[0]  # type: ignore[no-any-return]

    def read_keys(self, indexes: Sequence[int]) -> list[Any]:
        return [(i,) for i in indexes]

    def scan(self) -> int:
        cur = self.con.execute("SELECT body FROM log ORDER BY idx")
        rows = 0
        while batch := cur.fetchmany(SCAN_CHUNK):
            rows += len(batch)
        return rows


APPEND_BACKENDS: dict[str, Callable[[], Backend]] = {
    "dledger-warm": partial(Dledger, warm=True),
    "dledger-cold": partial(Dledger, warm=False),
    "mmap-raw": RawMmap,
    "lmdb": Lmdb,
    "rocksdict": Rocks,
    "sqlite": Sqlite,
}
READ_BACKENDS: dict[str, Callable[[], Backend]] = {
    "dledger": Dledger,
    "mmap-raw": RawMmap,
    "lmdb": Lmdb,
    "rocksdict": Rocks,
    "sqlite": Sqlite,
}


def run_rounds(benchmark: Any, backend: Backend, root: Path, make_target: Callable[[Backend], Target]) -> None:
    """`benchmark.pedantic` over `backend.rounds` rounds of the target `make_target` builds
    (built once, untimed); reopens an empty store under `root` between rounds when the
    backend wants a fresh one, and closes the store at the end."""
    dirs = (root / f"round-{k}" for k in count())
    current = next(dirs)
    backend.open(current)
    target = make_target(backend)
    first = True

    def setup() -> None:
        nonlocal current, first
        if backend.fresh_per_round and not first:
            backend.close()
            shutil.rmtree(current)
            current = next(dirs)
            backend.open(current)
        first = False
        backend.prepare()

    try:
        benchmark.pedantic(
            target, setup=setup, rounds=backend.rounds, warmup_rounds=backend.warmup_rounds, iterations=1
        )
    finally:
        backend.close()
        shutil.rmtree(current, ignore_errors=True)


def fdatasync_writer(path: Path, w: Workload, batch: int, records_per_sync: int) -> Callable[[], None]:
    """The sync-mode baseline: `w`'s encoded records written `batch` per os.write to the plain
    file `path` (the caller deletes it between rounds), one os.fdatasync per `records_per_sync`
    records."""
    records, _ = encode_log(w.size, w.count)
    blobs = [b"".join(records[i : i + batch]) for i in range(0, len(records), batch)]
    every = records_per_sync // batch

    def run() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            for k, blob in enumerate(blobs, 1):
                os.write(fd, blob)
                if k % every == 0:
                    os.fdatasync(fd)
            os.fdatasync(fd)
        finally:
            os.close(fd)

    return run
