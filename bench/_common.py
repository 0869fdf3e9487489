"""Shared helpers of the benchmarks: workloads, record encoding, the results table, and
the end of the child processes the service benchmarks start."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from itertools import islice
from typing import Any, TypeVar

T = TypeVar("T")


def reap(processes: Iterable[subprocess.Popen[Any]], timeout_s: float = 10.0) -> None:
    """Wait for each process to exit (told to already), killing one still running after
    `timeout_s`."""
    for process in processes:
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


BATCH = 1000
"""Records per transaction / WriteBatch / `append_many` call in the batched benchmarks."""
SCAN_CHUNK = 4096
"""Rows per `read_columns` call (and per chunk for the baselines' scans)."""
TERM = 1

DATA_FILE_SIZE = 256 << 20
INDEX_FILE_SIZE = 32 << 20
WARM_AHEAD_BYTES = 64 << 20
"""Each warm round writes less than this, so `wait_warm()` covers the whole round."""
WARM_SETTLE_S = 0.1
"""Pause after `wait_warm()` before a warm round (see `Dledger.prepare`)."""

HEADER = struct.Struct(">iiqqqiiii")  # DLedger's 48-byte entry header
MAGIC_NORMAL = 1


@dataclass(frozen=True)
class Workload:
    """Appends of `count` bodies of `size` bytes per measured round."""

    label: str
    size: int
    count: int

    @property
    def bytes_per_round(self) -> int:
        """Encoded bytes (header + body) one round appends."""
        return self.count * (HEADER.size + self.size)


SIZES: tuple[Workload, ...] = (
    Workload("128B", 128, 200_000),
    Workload("1KiB", 1024, 40_000),
    Workload("4KiB", 4096, 10_000),
)
READ_WORKLOAD = Workload("128B", 128, 200_000)
SYNC_THREADS = 8
SYNC_BATCH = 100
SYNC_WORKLOAD = Workload("1KiB", 1024, SYNC_THREADS * 70 * SYNC_BATCH)

assert all(w.bytes_per_round < WARM_AHEAD_BYTES for w in (*SIZES, READ_WORKLOAD, SYNC_WORKLOAD))


@cache
def make_bodies(size: int, count: int) -> list[bytes]:
    """`count` distinct random bodies of `size` bytes (cached: the same bytes for every store)."""
    blob = random.Random(size * 7919 + count).randbytes(size * count)
    return [blob[i * size : (i + 1) * size] for i in range(count)]


def key(index: int) -> bytes:
    """The KV stores' key of log index `index`: 8-byte big-endian."""
    return index.to_bytes(8, "big")


def chunks(seq: Sequence[T], size: int) -> list[list[T]]:
    """`seq` cut into lists of `size` items (the last one may be shorter)."""
    return [list(seq[i : i + size]) for i in range(0, len(seq), size)]


def drain(fn: Callable[..., object], *iterables: Iterable[Any]) -> None:
    """Call `fn` on every item (zipped over `iterables`) with the least interpreter overhead;
    every store is driven through this same loop."""
    deque(map(fn, *iterables), maxlen=0)


def run_in_threads(worker: Callable[[int], object], threads: int) -> None:
    """Run worker(0), ..., worker(threads - 1) at once, one thread each; re-raises the
    first error once all have ended."""
    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(worker, k) for k in range(threads)]:
            future.result()


def count_in_chunks(it: Iterable[object], size: int = SCAN_CHUNK) -> int:
    """Consume `it` `size` rows at a time (a batched scan); returns the number of rows."""
    it = iter(it)
    rows = 0
    while n := len(list(islice(it, size))):
        rows += n
    return rows


@cache
def encode_log(size: int, count: int) -> tuple[list[bytes], list[int]]:
    """The DLedger encoding (48-byte header with body CRC, then the body) of `make_bodies`,
    laid out back to back from position 0: (records, start position of each record + the end)."""
    records: list[bytes] = []
    starts = [0]
    for index, body in enumerate(make_bodies(size, count)):
        total = HEADER.size + len(body)
        crc = zlib.crc32(body)
        crc -= (crc >> 31) << 32  # the header stores a signed Java int
        records.append(HEADER.pack(MAGIC_NORMAL, total, index, TERM, starts[-1], 0, 0, crc, len(body)) + body)
        starts.append(starts[-1] + total)
    return records, starts


def random_order(count: int, seed: int = 42) -> list[int]:
    """A fixed random permutation of range(count) (the random-read index list)."""
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return order


def page_round(n: int) -> int:
    """`n` rounded up to a whole number of pages."""
    page = os.sysconf("SC_PAGE_SIZE")
    return -(-n // page) * page


# ------------------------------------------------------------------------ results table


@dataclass(frozen=True)
class Rate:
    """Entries/s of one benchmark: from the median round time and from the fastest round."""

    median: float
    best: float


RESULTS: dict[str, dict[str, Rate]] = {}
"""group -> implementation -> rate, filled by `record` and printed by conftest.py."""


def record(benchmark: Any, group: str, impl: str, entries: int) -> Rate | None:
    """Store entries/s (median round; `entries_per_s_best`: fastest round) in `extra_info`
    and `RESULTS`."""
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # --benchmark-disable: the target ran once, untimed
        return None
    rate = Rate(entries / stats.stats.median, entries / stats.stats.min)
    benchmark.extra_info["entries_per_round"] = entries
    benchmark.extra_info["entries_per_s"] = round(rate.median)
    benchmark.extra_info["entries_per_s_best"] = round(rate.best)
    RESULTS.setdefault(group, {})[impl] = rate
    return rate


def is_dledger(impl: str) -> bool:
    """True for the implementations under test (the rest are baselines)."""
    return impl.startswith("dledger")


def results_table(results: dict[str, dict[str, Rate]]) -> list[str]:
    """Markdown table: every implementation's entries/s per group (median and best round),
    and for the dledger rows the ratio of medians against each baseline of the same group."""
    baselines = sorted({i for g in results.values() for i in g if not is_dledger(i)})
    head = ["group", "implementation", "entries/s (median)", "best round", *(f"vs {b}" for b in baselines)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for group in sorted(results):
        impls = results[group]
        for impl in sorted(impls, key=lambda i: (not is_dledger(i), i)):
            rate = impls[impl]
            ratios = [
                f"{rate.median / impls[b].median:.2f}x" if is_dledger(impl) and b in impls else "" for b in baselines
            ]
            cells = [group, impl, f"{rate.median:,.0f}", f"{rate.best:,.0f}", *ratios]
            lines.append("| " + " | ".join(cells) + " |")
    return lines
