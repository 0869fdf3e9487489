"""dledger.allocator: a server process keeps freed buffers for reuse."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dledger import allocator

pytestmark = pytest.mark.unit

PROBE = """
import ctypes, sys
from dledger import allocator
applied = allocator.keep_freed_memory() if sys.argv[1] == "tuned" else False
buffer = bytearray(8 << 20)
address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
for line in open("/proc/self/maps"):
    start, end = (int(x, 16) for x in line.split()[0].split("-"))
    if start <= address < end:
        print(applied, line.split()[-1] != "[heap]")
"""
"""Prints whether the settings were applied and whether an 8 MiB buffer lies outside the
heap (in a mapping of its own, unmapped again when freed)."""


def _probe(mode: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, env={"PATH": "", **env}
    )
    return result.stdout.strip()


def test_an_8_mib_buffer_comes_from_the_heap_once_tuned() -> None:
    assert _probe("default") == "False True"  # glibc's default: a mapping of its own
    assert _probe("tuned") == "True False"  # from the heap: freeing it keeps the pages


def test_the_user_s_own_malloc_settings_win() -> None:
    assert _probe("tuned", MALLOC_MMAP_THRESHOLD_="131072") == "False True"


def test_it_reports_a_c_library_without_mallopt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator.ctypes.util, "find_library", lambda _: "libdoes-not-exist.so")
    assert allocator.keep_freed_memory() is False
