"""The files of one snapshot: `snapshot_meta` (JSON), `data`, their checksums and the
durable steps that publish a finished snapshot directory (see docs/FORMAT.md, "Snapshots").

Layout under `<node dir>/snapshot/` (DLedger 0.3.2+): `snapshot_<lastIncludedIndex>/`
holding `snapshot_meta` and `data`; `tmp/` for a snapshot being saved, `install_tmp/`
for one being received.

`snapshot_meta` is DLedger's JSON, `{"lastIncludedIndex":N,"lastIncludedTerm":T}`, to
which we add `crc32` (zlib's CRC-32 of `data`), `size` (its length in bytes) and
`metaCrc32` (the CRC-32 of the other four keys rendered compactly in this order), so a
damaged `data` or `snapshot_meta` is detected. A meta with only DLedger's two keys (what
Java writes) is read too; such a snapshot cannot be verified: it is used as long as its
`data` file exists (`SnapshotMeta.verified` is False).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dledger.checksum import crc32

SNAPSHOT_DIR = "snapshot"
TMP_DIR = "tmp"
INSTALL_TMP_DIR = "install_tmp"
META_FILE = "snapshot_meta"
DATA_FILE = "data"
DIR_PREFIX = "snapshot_"
MAX_INDEX = (1 << 63) - 1

_JAVA_KEYS = frozenset({"lastIncludedIndex", "lastIncludedTerm"})
_OUR_KEYS = _JAVA_KEYS | {"crc32", "size", "metaCrc32"}
_READ_CHUNK = 1 << 20
STREAM_WINDOW = 16 << 20
"""Snapshot data is read and received through the page cache in windows of this many
bytes, each dropped from the cache once the next one is done (`drop_cached`)."""


class DamagedSnapshotError(Exception):
    """A snapshot directory that must not be loaded (missing file, bad JSON, checksum)."""


@dataclass(frozen=True)
class SnapshotMeta:
    """The contents of `snapshot_meta`.

    Attributes:
        last_included_index: the last log index the snapshot covers (DLedger's key).
        last_included_term: that entry's term (DLedger's key).
        crc32: zlib's CRC-32 of `data`; None for a meta written by Java DLedger.
        size: the length of `data` in bytes; None for a meta written by Java DLedger.
    """

    last_included_index: int
    last_included_term: int
    crc32: int | None = None
    size: int | None = None

    @property
    def verified(self) -> bool:
        """True when the meta carries our checksum of `data` (written by dledger-py)."""
        return self.crc32 is not None

    def _fields(self) -> dict[str, Any]:
        return {
            "lastIncludedIndex": self.last_included_index,
            "lastIncludedTerm": self.last_included_term,
            "crc32": self.crc32,
            "size": self.size,
        }

    def to_json(self) -> bytes:
        """The file's bytes: compact JSON with DLedger's keys first, then ours."""
        fields = self._fields()
        if not self.verified:
            java = {k: fields[k] for k in ("lastIncludedIndex", "lastIncludedTerm")}
            return json.dumps(java, separators=(",", ":")).encode("ascii")
        fields["metaCrc32"] = _meta_crc(fields)
        return json.dumps(fields, separators=(",", ":")).encode("ascii")

    @classmethod
    def from_json(cls, raw: bytes) -> SnapshotMeta:
        """Parse `snapshot_meta`.

        Raises:
            DamagedSnapshotError: not JSON, keys other than exactly DLedger's two or
                exactly ours, a value that is not an integer in range, or a `metaCrc32`
                that does not match.
        """
        try:
            document = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise DamagedSnapshotError(f"{META_FILE} is not JSON: {exc}") from None
        if not isinstance(document, dict) or set(document) not in (_JAVA_KEYS, _OUR_KEYS):
            keys = sorted(document) if isinstance(document, dict) else type(document).__name__
            raise DamagedSnapshotError(f"{META_FILE} has unexpected keys {keys}")
        for key, value in document.items():
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INDEX:
                raise DamagedSnapshotError(f"{META_FILE}: {key} is {value!r}, not an integer 0..2^63-1")
        index, term = document["lastIncludedIndex"], document["lastIncludedTerm"]
        meta = cls(index, term, document.get("crc32"), document.get("size"))
        if meta.verified:
            expected = _meta_crc(meta._fields())
            if document["metaCrc32"] != expected or meta.crc32 is None or meta.crc32 > 0xFFFFFFFF:
                raise DamagedSnapshotError(f"{META_FILE}: metaCrc32 {document['metaCrc32']} != {expected}")
        return meta


def _meta_crc(fields: dict[str, Any]) -> int:
    return zlib.crc32(json.dumps(fields, separators=(",", ":")).encode("ascii"))


def data_checksum(path: Path) -> tuple[int, int]:
    """(CRC-32, size) of a file, read in 1 MiB pieces."""
    with open(path, "rb", buffering=0) as fh:
        return _checksum(fh)


def _checksum(fh: io.RawIOBase) -> tuple[int, int]:
    crc, size = 0, 0
    buffer = bytearray(_READ_CHUNK)
    view = memoryview(buffer)
    while n := fh.readinto(buffer):
        crc = crc32(view[:n], crc)
        size += n
    return crc, size


def open_regular(path: Path) -> io.FileIO:
    """`path` open for reading, refused unless it is a regular file (after symlinks).

    The file is opened with O_NONBLOCK and checked with fstat before anything is read:
    a FIFO, a socket or a device in a snapshot's place never blocks the caller.

    Raises:
        DamagedSnapshotError: it exists but is not a regular file.
        OSError: it cannot be opened (FileNotFoundError when missing).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise DamagedSnapshotError(f"{path.name} is not a regular file ({_file_kind(mode)})")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return io.FileIO(fd, "rb", closefd=True)


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file"


def read_meta(directory: Path) -> SnapshotMeta:
    """Parse `directory/snapshot_meta`, read only when it is a regular file.

    Raises:
        DamagedSnapshotError: missing, not a regular file, or not a valid meta.
        OSError: it cannot be read.
    """
    try:
        with open_regular(directory / META_FILE) as fh:
            raw = fh.readall()
    except FileNotFoundError:
        raise DamagedSnapshotError(f"no {META_FILE}") from None
    return SnapshotMeta.from_json(raw)


def drop_cached(fd: int, start: int, end: int) -> None:
    """Tell the kernel that bytes [start, end) of the open file `fd` will not be read
    again soon: their clean pages leave the page cache and their dirty ones are queued
    for write-back now (Linux's POSIX_FADV_DONTNEED; a no-op where it does not exist).

    Snapshot data is written once and read once, front to back: dropping it behind the
    stream keeps a 1 GiB install or load from pushing the log's hot pages out of the
    page cache, and an install's final fsync from having a gigabyte to write back at
    once (docs/BENCHMARKS.md, "InstallSnapshot and the page cache").
    """
    if end > start and hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)


class _DropBehindFileIO(io.FileIO):
    """A file read from front to back that drops what it read from the page cache a
    window at a time (`drop_cached`); seeking back reads the bytes from disk again."""

    _dropped_to = 0

    def readinto(self, buffer: Any) -> int | None:
        n = super().readinto(buffer)
        if n:
            position = self.tell()
            if position - self._dropped_to >= STREAM_WINDOW:
                drop_cached(self.fileno(), self._dropped_to, position)
                self._dropped_to = position
        return n

    def readall(self) -> bytes:
        out = bytearray()
        buffer = bytearray(_READ_CHUNK)
        while n := self.readinto(buffer):
            out += memoryview(buffer)[:n]
        return bytes(out)


class SnapshotReader(io.BufferedReader):
    """A snapshot's `data`, open for reading (what `on_snapshot_load(reader)` gets).

    The bytes read leave the page cache behind the reader (a window of
    `STREAM_WINDOW` at a time): a load reads its snapshot once.

    Attributes:
        meta: the snapshot's `SnapshotMeta`.
    """

    def __init__(self, path: Path, meta: SnapshotMeta) -> None:
        super().__init__(_DropBehindFileIO(path, "rb"), buffer_size=_READ_CHUNK)
        self.meta = meta


@dataclass(frozen=True)
class Snapshot:
    """A published snapshot that verified when it was found.

    Attributes:
        path: its directory, `snapshot_<index>`.
        meta: its `snapshot_meta`.
    """

    path: Path
    meta: SnapshotMeta

    @property
    def index(self) -> int:
        """lastIncludedIndex."""
        return self.meta.last_included_index

    @property
    def term(self) -> int:
        """lastIncludedTerm."""
        return self.meta.last_included_term

    @property
    def data_path(self) -> Path:
        """The `data` file."""
        return self.path / DATA_FILE

    def open(self) -> SnapshotReader:
        """A reader of `data` (close it when done)."""
        return SnapshotReader(self.data_path, self.meta)


def snapshot_index(name: str) -> int | None:
    """N for a directory named `snapshot_<N>` (decimal digits as Java's Long.toString
    writes them: no sign, no leading zero), else None."""
    digits = name[len(DIR_PREFIX) :]
    if not name.startswith(DIR_PREFIX) or not digits.isascii() or not digits.isdigit() or len(digits) > 19:
        return None
    if digits != "0" and digits.startswith("0"):
        return None
    value = int(digits)
    return value if value <= MAX_INDEX else None


def verify(directory: Path, index: int) -> Snapshot:
    """Check a `snapshot_<index>` directory: meta parses, names `index`, and `data`
    matches its checksum (or, for a Java meta, exists). Either file being something else
    than a regular file (a FIFO, a directory, a device) is damage: it is never read.

    Raises:
        DamagedSnapshotError: why it must not be loaded.
    """
    meta = read_meta(directory)
    if meta.last_included_index != index:
        raise DamagedSnapshotError(f"{META_FILE} says lastIncludedIndex {meta.last_included_index}")
    try:
        with open_regular(directory / DATA_FILE) as fh:
            if not meta.verified:
                return Snapshot(directory, meta)
            size = os.fstat(fh.fileno()).st_size
            if size != meta.size:
                raise DamagedSnapshotError(f"{DATA_FILE} has {size} bytes, {META_FILE} says {meta.size}")
            crc, _size = _checksum(fh)
    except FileNotFoundError:
        raise DamagedSnapshotError(f"no {DATA_FILE}") from None
    if crc != meta.crc32:
        raise DamagedSnapshotError(f"{DATA_FILE} CRC-32 {crc:#010x}, {META_FILE} says {meta.crc32:#010x}")
    return Snapshot(directory, meta)


class FileOps:
    """The file-system calls that change a node's snapshot files, in one place.

    Every file and directory the snapshot store creates, syncs, renames or deletes goes
    through the active `FileOps` (`file_ops()`), so a test can observe each durable step
    (the simulation's power-loss model, tests/sim/snapshot_disk.py, swaps in its own
    with `set_file_ops`). This class is what production uses: plain POSIX calls.
    """

    def open_new(self, path: Path) -> int:
        """Create (or truncate) `path` for writing; returns the file descriptor."""
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def fsync(self, fd: int, path: Path) -> None:
        """Make the data of the open file `fd` (at `path`) durable."""
        os.fsync(fd)

    def fsync_path(self, path: Path, directory: bool = False) -> None:
        """fsync a file or a directory by path."""
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mkdir(self, path: Path) -> None:
        """Create the directory `path` (its parent is not synced)."""
        path.mkdir()

    def replace(self, source: Path, target: Path) -> None:
        """Rename `source` to `target` (atomically; the parent is not synced)."""
        os.replace(source, target)

    def remove_tree(self, path: Path) -> bool:
        """Delete a directory tree (or a file or link in its place) and fsync its
        parent; False when nothing was there."""
        if not os.path.lexists(path):
            return False
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        self.fsync_path(path.parent, directory=True)
        return True


_file_ops = FileOps()


def file_ops() -> FileOps:
    """The `FileOps` the snapshot store uses now."""
    return _file_ops


def set_file_ops(ops: FileOps) -> FileOps:
    """Make the snapshot store use `ops` from now on; returns the previous one (for
    tests: production never calls this)."""
    global _file_ops
    previous, _file_ops = _file_ops, ops
    return previous


def fsync_path(path: Path, directory: bool = False) -> None:
    """fsync a file or a directory by path (through `file_ops()`)."""
    _file_ops.fsync_path(path, directory)


def remove_tree(path: Path) -> bool:
    """Delete a directory tree (or a file or link in its place) and fsync its parent;
    False when nothing was there (through `file_ops()`)."""
    return _file_ops.remove_tree(path)


def publish(work_dir: Path, root: Path, index: int, term: int, checksum: tuple[int, int] | None = None) -> Snapshot:
    """Turn a directory holding a complete `data` into `root/snapshot_<index>`: checksum
    `data` (unless the caller knows its (CRC-32, size): an install checked them as the
    bytes arrived), write `snapshot_meta`, fsync both files and the work directory, rename it and
    fsync `root`. A crash at any step leaves either no `snapshot_<index>` or a whole one
    (the work directory is removed when the store next opens).

    The caller makes sure no valid `snapshot_<index>` exists; a damaged one is replaced.

    Raises:
        OSError: a step failed (the snapshot may or may not have been published).
    """
    ops = _file_ops
    data = work_dir / DATA_FILE
    ops.fsync_path(data)
    crc, size = data_checksum(data) if checksum is None else checksum
    meta = SnapshotMeta(index, term, crc, size)
    meta_path = work_dir / META_FILE
    with io.FileIO(ops.open_new(meta_path), "wb") as fh:
        fh.write(meta.to_json())
        ops.fsync(fh.fileno(), meta_path)
    ops.fsync_path(work_dir, directory=True)
    target = root / f"{DIR_PREFIX}{index}"
    ops.remove_tree(target)
    ops.replace(work_dir, target)
    ops.fsync_path(root, directory=True)
    return Snapshot(target, meta)
