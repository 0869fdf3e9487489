"""CRC-32 of large buffers (zlib's polynomial and values), computed by the compiled core.

The compiled `dledger._store` runs it with libdeflate's folding loop (about 3.5 times
zlib's speed here: 14 GB/s against 4 GB/s on 1 MiB pieces) or zlib when libdeflate was
not found at build time; the pure-Python twin uses zlib. Snapshots check and send their
data with it, so a 1 GiB install spends about 0.1 s on checksums instead of 0.5 s.
"""

from __future__ import annotations

from typing import Any

from dledger._native import impl


def crc32(data: Any, value: int = 0) -> int:
    """The CRC-32 of `data` (any buffer), or, with `value`, the CRC-32 of earlier bytes
    continued over `data`: `crc32(b, crc32(a)) == crc32(a + b)`, as with `zlib.crc32`.

    Raises:
        OverflowError: `value` is not in 0..2^32-1.
    """
    return impl.crc32(data, value)
