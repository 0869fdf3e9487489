"""Where `dledger append` takes its bodies from, and how it groups them into requests.

`stdin_batches` makes `tail -f log | dledger append -` work: lines are appended as they
arrive, each request carrying what is already there (up to the batch size), never
waiting for more input or for EOF.
"""

from __future__ import annotations

import errno
import os
import queue
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from dledger.bounded import read_bounded
from dledger.config import MAX_APPEND_BYTES
from dledger.entry import HEADER_SIZE, MAX_ENTRY_SIZE

MAX_BODY = MAX_ENTRY_SIZE - HEADER_SIZE
"""The largest body a member accepts (DLedger's 4 MiB entry limit, header included): a
file or a line longer than that is refused as it is read, not held whole in memory."""

_EOF = None
_POLL_S = 0.2
"""How long the waiting main thread sleeps between checks (so Ctrl-C is taken)."""


def generated_bodies(count: int, body_size: int | None) -> Iterator[bytes]:
    """`entry-0`, `entry-1`... (cut or repeated to `body_size` bytes when given)."""
    for k in range(count):
        text = f"entry-{k}".encode()
        yield text if body_size is None else (text * (body_size // max(1, len(text)) + 1))[:body_size]


def file_bodies(paths: Iterable[Path]) -> Iterator[bytes]:
    """The content of each file as one body (OSError EFBIG past MAX_BODY bytes)."""
    for path in paths:
        yield read_bounded(path, MAX_BODY)


def batches(bodies: Iterable[bytes], size: int, max_bytes: int = MAX_APPEND_BYTES) -> Iterator[list[bytes]]:
    """`bodies` in lists of at most `size` bodies and `max_bytes` body bytes (a member
    refuses a request of more; a body larger than `max_bytes` goes alone). Lazy: one
    batch is held at a time, `bodies` is read only as far as it is needed."""
    batch: list[bytes] = []
    held = 0
    for body in bodies:
        if batch and held + len(body) > max_bytes:
            yield batch
            batch, held = [], 0
        batch.append(body)
        held += len(body)
        if len(batch) >= size:
            yield batch
            batch, held = [], 0
    if batch:
        yield batch


def _chunks(stream: BinaryIO) -> Iterator[bytes]:
    """What `stream` has, as it arrives. From its file descriptor when it has one: a
    daemon thread blocked in a buffered read holds the buffer's lock, and the
    interpreter aborts when it exits then (Ctrl-C during `append -`)."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):  # not a file (tests' in-memory stdin)
        yield from iter(stream.readline, b"")
        return
    while chunk := os.read(fd, 1 << 16):
        yield chunk


def _read_lines(stream: BinaryIO, lines: queue.Queue[bytes | OSError | None]) -> None:
    try:
        rest = b""
        for chunk in _chunks(stream):
            *complete, rest = (rest + chunk).split(b"\n")
            for line in complete:
                lines.put(line.removesuffix(b"\r"))
            if len(rest) > MAX_BODY + 1:  # + its \r
                raise OSError(errno.EFBIG, f"a line of more than {MAX_BODY:,} bytes (a body's limit)")
        if rest:
            lines.put(rest)
    except (OSError, ValueError) as exc:  # unreadable stdin: the main thread reports it
        lines.put(exc if isinstance(exc, OSError) else OSError(str(exc)))
    lines.put(_EOF)


def stdin_batches(stream: BinaryIO, size: int, max_bytes: int = MAX_APPEND_BYTES) -> Iterator[list[bytes]]:
    """The lines of `stream` (without their line end) in lists of at most `size` lines
    and `max_bytes` bytes (a longer line goes alone), each yielded as soon as one line
    is there: a batch is the first line that arrives plus whatever else has already
    arrived. A reader thread takes the lines, so the caller (the main thread) is never
    stuck in a read and sees Ctrl-C.

    Raises:
        OSError: stdin cannot be read (after the lines read before the failure).
    """
    lines: queue.Queue[bytes | OSError | None] = queue.Queue(maxsize=max(size * 4, 1024))
    threading.Thread(target=_read_lines, args=(stream, lines), name="stdin-lines", daemon=True).start()
    held: list[bytes | OSError | None] = []  # taken off the queue, not in a batch yet
    while True:
        if held:
            first = held.pop()
        else:
            try:
                first = lines.get(timeout=_POLL_S)
            except queue.Empty:
                continue
        if first is _EOF:
            return
        if isinstance(first, OSError):
            raise OSError(f"cannot read stdin: {first.strerror or first}")
        batch, batch_bytes = [first], len(first)
        while len(batch) < size:
            try:
                line = lines.get_nowait()
            except queue.Empty:
                break
            if line is _EOF or isinstance(line, OSError) or batch_bytes + len(line) > max_bytes:
                held.append(line)  # the next batch starts with it (or the stream ends)
                break
            batch.append(line)
            batch_bytes += len(line)
        yield batch


__all__ = ["batches", "file_bodies", "generated_bodies", "stdin_batches"]
