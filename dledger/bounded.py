"""Reading a file the user names, within a limit: a device or an endless file
(`/dev/zero`, `/dev/full`) given where a config, a PEM, a tokens file or a body belongs
is refused once it passes the limit instead of being read whole into memory (helper D:
`dledger append -f /dev/full` reached 7.9 GB in 6 s and ignored Ctrl-C)."""

from __future__ import annotations

import errno
import os
from typing import BinaryIO

SMALL_FILE_BYTES = 16 << 20
"""The limit for the small files of ours a user names: YAML settings, PEM certificates
and keys, tokens files."""


def read_bounded(path: str | os.PathLike[str], limit: int = SMALL_FILE_BYTES) -> bytes:
    """The bytes of `path`, at most `limit` of them.

    Raises:
        OSError: the file cannot be read, or (EFBIG) it holds more than `limit` bytes.
    """
    with open(path, "rb") as stream:
        return read_stream_bounded(stream, limit, os.fspath(path))


def read_stream_bounded(stream: BinaryIO, limit: int, name: str) -> bytes:
    """What `stream` holds, at most `limit` bytes (`name` for the error).

    Raises:
        OSError: EFBIG when the stream holds more than `limit` bytes.
    """
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"more than {limit:,} bytes (a device or an endless file?)", name)
    return data
