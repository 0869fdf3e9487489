"""Process-wide malloc settings for a server process.

A member allocates and frees buffers of up to several MiB per request (gRPC messages,
runs of entries pushed to followers). With glibc's defaults such a buffer is often a
fresh mmap: its pages are faulted in and zeroed, and freeing it unmaps them again (with
TLB shootdowns to the other cores). On VMs whose free memory goes back to the host,
first-touch memory costs 7-12 us per page, so at 100 k entries/s of 1 KiB this took about
a third of the leader's CPU. Keeping freed memory in the heap lets the next buffer reuse
it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""mallopt parameters (glibc's malloc.h)."""

MMAP_THRESHOLD_BYTES = 64 << 20
"""Allocations below this come from the heap, not from their own mmap."""
TRIM_THRESHOLD_BYTES = 256 << 20
"""Free memory at the top of the heap is returned to the kernel only beyond this."""

ENV_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
"""glibc's own environment settings: when the user set one, it is left as it is."""


def keep_freed_memory(trim_threshold: int = TRIM_THRESHOLD_BYTES) -> bool:
    """Make glibc's malloc keep freed buffers of up to MMAP_THRESHOLD_BYTES for reuse
    instead of unmapping them (a process holds up to `trim_threshold` bytes of free heap
    more than it would). Call once, early, in a server process (or a worker process that
    exists to run dledger's code, such as a Spark Python worker reading a log); a library
    must not.

    Args:
        trim_threshold: free memory at the top of the heap beyond this goes back to the
            kernel (default TRIM_THRESHOLD_BYTES).

    Returns:
        True when the settings were applied; False on a C library without `mallopt`
        (musl, macOS) or when MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ is set.
    """
    if any(name in os.environ for name in ENV_SETTINGS):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))
    if not applied:
        log.debug("mallopt refused the thresholds; keeping the C library's defaults")
    return applied
