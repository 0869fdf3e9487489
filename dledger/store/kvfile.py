"""DLedger's small `key=value` metadata files (`checkpoint`, `currterm`), written atomically,
and the durable file operations of the store's marker files (`abort`).

Java writes `f.tmp`, copies the old `f` to `f.bak`, deletes `f` and renames; nothing is
fsynced. We keep the same files (so Java can read ours and we can read Java's) but make
each step durable: write `f.tmp`, fsync it, keep the previous version as `f.bak`, rename
over `f`, fsync the directory. A crash at any point leaves `f` or `f.bak` whole.
"""

from __future__ import annotations

import os
from pathlib import Path

from dledger.store import failpoints


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory so a rename or a new file in it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: str | os.PathLike[str], data: bytes) -> None:
    """Create or replace `path` with `data` and fsync it (not its directory entry: a new
    file also needs `fsync_dir` of its directory to survive a crash)."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def remove_durably(path: str | os.PathLike[str]) -> None:
    """Delete `path` and fsync its directory; nothing when it does not exist."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    fsync_dir(Path(path).parent)


def render(values: dict[str, str]) -> str:
    """`key=value` lines in the given order, each ending in a newline."""
    return "".join(f"{key}={value}\n" for key, value in values.items())


def parse(text: str) -> dict[str, str]:
    """Parse `key=value` lines as java.util.Properties would for these files
    (comments with # or !, blank lines ignored; no escapes are ever written)."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def write_atomic(path: str | os.PathLike[str], values: dict[str, str]) -> None:
    """Replace `path` with `values`, durably and atomically (old version kept as .bak)."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    write_synced(tmp, render(values).encode("ascii"))
    failpoints.hit(f"{target.name}_tmp_written")
    if target.exists():
        write_synced(target.with_name(target.name + ".bak"), target.read_bytes())
    os.replace(tmp, target)
    fsync_dir(target.parent)


def read(path: str | os.PathLike[str]) -> dict[str, str] | None:
    """The values in `path`, falling back to `path.bak` when `path` is missing or
    unreadable (Java's shutdown race can leave only the .bak); None when neither is."""
    target = Path(path)
    for candidate in (target, target.with_name(target.name + ".bak")):
        try:
            text = candidate.read_text("ascii")
        except (OSError, UnicodeDecodeError):
            continue
        values = parse(text)
        if values:
            return values
    return None


def read_str(values: dict[str, str] | None, key: str, default: str = "") -> str:
    """A value, or `default` when missing."""
    return default if values is None else values.get(key, default)


def read_int(values: dict[str, str] | None, key: str, default: int) -> int:
    """An integer value, or `default` when missing or not a number."""
    if values is None or key not in values:
        return default
    try:
        return int(values[key])
    except ValueError:
        return default
