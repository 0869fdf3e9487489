"""The Python workers that read keep freed buffers for reuse (`keep_worker_memory`):
once per process, with the worker's trim threshold, and glibc's own settings win."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dledger.spark import source

pytestmark = pytest.mark.spark

PROBE = """
import ctypes
from dledger.spark.source import keep_worker_memory
keep_worker_memory()
buffer = bytearray(8 << 20)
address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
for line in open("/proc/self/maps"):
    start, end = (int(x, 16) for x in line.split()[0].split("-"))
    if start <= address < end:
        print(line.split()[-1] == "[heap]")
"""


def _probe(**env: str) -> str:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, env=env)
    return result.stdout.strip()


def test_a_reading_worker_takes_read_buffers_from_the_heap() -> None:
    assert _probe(PATH="", PYTHONPATH=":".join(sys.path)) == "True"
    assert _probe(PATH="", PYTHONPATH=":".join(sys.path), MALLOC_MMAP_THRESHOLD_="131072") == "False"


def test_once_per_process_with_the_worker_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(source, "_worker_memory_kept", False)
    monkeypatch.setattr(source.allocator, "keep_freed_memory", lambda trim: calls.append(trim) or True)
    source.keep_worker_memory()
    source.keep_worker_memory()
    assert calls == [64 << 20]
