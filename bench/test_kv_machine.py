"""The key-value state machine on its own (no log, no network): PUTs applied per second
with and without a snapshot being saved on another thread at the same time (same run),
the save's and the load's throughput, and the capture's cost.

Run: `.venv/bin/python -m pytest bench/test_kv_machine.py --benchmark-only -p no:randomly -s`.
"""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import pytest

from dledger.entry import MAGIC_NORMAL, Entry
from dledger.kv import KVStateMachine
from dledger.kv import commands as c

KEYS = 500_000
VALUE = b"v" * 100
BATCH = 1024


def _entries(first: int, count: int, value: bytes) -> list[Entry]:
    return [Entry(first + k, 1, 0, MAGIC_NORMAL, c.put(b"key%08d" % k, value)) for k in range(count)]


@pytest.fixture(scope="module")
def loaded() -> KVStateMachine:
    machine = KVStateMachine()
    entries = _entries(0, KEYS, VALUE)
    for k in range(0, KEYS, BATCH):
        machine.on_apply(entries[k : k + BATCH])
    return machine


def _apply(machine: KVStateMachine, entries: list[Entry]) -> float:
    start = time.perf_counter()
    for k in range(0, len(entries), BATCH):
        machine.on_apply(entries[k : k + BATCH])
    return len(entries) / (time.perf_counter() - start)


def test_kv_apply_with_and_without_a_concurrent_save(benchmark: Any, loaded: KVStateMachine) -> None:
    """PUT/s alone, then while a save of the whole map runs (interleaved rounds)."""
    updates = _entries(KEYS, 100_000, b"w" * 100)
    alone, during = [], []

    def round_() -> None:
        alone.append(_apply(loaded, updates))
        loaded.on_snapshot_capture()
        saver = threading.Thread(target=loaded.on_snapshot_save, args=(io.BytesIO(),))
        saver.start()
        during.append(_apply(loaded, updates))
        saver.join()

    benchmark.pedantic(round_, rounds=3, iterations=1)
    print(f"\nkv apply: {max(alone):,.0f} PUT/s alone, {max(during):,.0f} PUT/s during a save ({KEYS:,} keys)")


def test_kv_snapshot_save_load_and_capture(benchmark: Any, loaded: KVStateMachine) -> None:
    """MB/s of a save (no writes meanwhile) and of a load; the capture's µs."""
    results: dict[str, float] = {}

    def round_() -> None:
        start = time.perf_counter()
        loaded.on_snapshot_capture()
        results["capture_us"] = (time.perf_counter() - start) * 1e6
        out = io.BytesIO()
        start = time.perf_counter()
        loaded.on_snapshot_save(out)
        results["save_mb_s"] = out.tell() / (time.perf_counter() - start) / 1e6
        data = out.getvalue()
        start = time.perf_counter()
        KVStateMachine().on_snapshot_load(io.BytesIO(data))
        results["load_mb_s"] = len(data) / (time.perf_counter() - start) / 1e6
        results["mb"] = len(data) / 1e6

    benchmark.pedantic(round_, rounds=3, iterations=1)
    print(
        f"\nkv snapshot of {results['mb']:.0f} MB: capture {results['capture_us']:.1f} us, "
        f"save {results['save_mb_s']:.0f} MB/s, load {results['load_mb_s']:.0f} MB/s"
    )
