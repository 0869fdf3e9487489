"""The layout of a node directory (DLedger's `storeBaseDir/dledger-<selfId>`).

    dledger-<selfId>/
        data/<20-digit start offset>     data segments (entries and blanks)
        index/<20-digit start offset>    index segments (32-byte units)
        checkpoint, checkpoint.bak       committedIndex, endIndex (key=value)
        currterm, currterm.bak           currTerm, voteLeader
        reset                            ours: the last prefix reset (Java ignores it)
        abort                            ours: present while a member runs
        lock                             ours: flock'ed by the one writer (pid=...)
        locallog                         ours: written by dledger.open_log when it creates a store

Names and lookups live here (the segment sizes a store's files show, too), and the making
of a store's directory: nothing in this module opens, maps or writes a file.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import StoreConfig
from dledger.config_bounds import STORE_BOUNDS
from dledger.entry import INDEX_UNIT_SIZE

DATA_DIR = "data"
INDEX_DIR = "index"
CHECKPOINT_FILE = "checkpoint"
RESET_FILE = "reset"  # ours: beforeBeginIndex/Term of the last prefix reset (Java ignores it)
CURRTERM_FILE = "currterm"
ABORT_FILE = "abort"
LOCK_FILE = "lock"  # ours: the writer's flock (see store/lock.py; Java ignores it)
LOCAL_LOG_FILE = "locallog"  # ours: this store was created by open_log (every entry is committed)
IDENTITY_FILE = "identity"  # ours: the group id and this member's incarnation (store/membership.py)
REJOIN_FILE = "rejoin"  # ours: present while the member must catch up before it votes (store/membership.py)
NODE_DIR_PREFIX = "dledger-"

NAME_DIGITS = 20
"""Segment files are named by their start offset in the log, zero-padded to 20 digits."""


def offset_to_name(offset: int) -> str:
    """DLedgerUtils.offset2FileName: the offset in decimal, zero-padded to 20 digits."""
    return f"{offset:0{NAME_DIGITS}d}"


def is_segment_name(name: str) -> bool:
    """True for a 20-digit segment file name."""
    return len(name) == NAME_DIGITS and name.isdigit()


def resolve_node_dir(path: str | os.PathLike[str]) -> Path:
    """The node directory (`dledger-<selfId>`, holding data/, index/, checkpoint) for
    `path`: `path` itself, or the single `dledger-*` directory inside a storeBaseDir.

    Returns `path` itself when it is neither (a new store is created there).

    Raises:
        DLedgerError: UNEXPECTED_ARGUMENT when `path` holds several node directories.
    """
    root = Path(path)
    if (root / DATA_DIR).is_dir() or (root / CHECKPOINT_FILE).exists() or (root / INDEX_DIR).is_dir():
        return root
    if root.is_dir():
        nodes = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(NODE_DIR_PREFIX))
        if len(nodes) == 1:
            return nodes[0]
        if len(nodes) > 1:
            names = ", ".join(p.name for p in nodes)
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"{root} holds several node directories: {names}")
    return root


def holds_store(node_dir: str | os.PathLike[str]) -> bool:
    """True when `node_dir` is a directory with a data/ or index/ directory or a
    checkpoint in it (what an existing store leaves)."""
    node = Path(node_dir)
    return node.is_dir() and any((node / name).exists() for name in (DATA_DIR, INDEX_DIR, CHECKPOINT_FILE))


def infer_segment_sizes(node_dir: str | os.PathLike[str]) -> tuple[int | None, int | None]:
    """Segment sizes (data, index) of an existing store, read off its files (the size of
    the largest file; None where there are none)."""
    data, index = (_segment_sizes(Path(node_dir, sub)) for sub in (DATA_DIR, INDEX_DIR))
    return max(data, default=None), max(index, default=None)


def _segment_sizes(directory: Path) -> list[int]:
    """The sizes of the segment files in `directory` (none when it does not exist)."""
    files = directory.glob("[0-9]" * NAME_DIGITS) if directory.is_dir() else ()
    return [f.stat().st_size for f in files]


def sized_config(
    node_dir: str | os.PathLike[str],
    data_file_size: int | None = None,
    index_file_size: int | None = None,
    read_only: bool = False,
) -> StoreConfig:
    """The default options with the segment sizes given, else those of the files already
    in `node_dir` (an existing store must be opened with its own sizes), else the defaults."""
    data_size, index_size = infer_segment_sizes(node_dir)
    defaults = StoreConfig()
    return StoreConfig(
        data_file_size=data_file_size or data_size or defaults.data_file_size,
        index_file_size=index_file_size or index_size or defaults.index_file_size,
        read_only=read_only,
    )


def keep_store_sizes(
    node_dir: str | os.PathLike[str], config: StoreConfig, *, trust_lone_data: bool = True
) -> StoreConfig:
    """`config` with the segment sizes of the store in `node_dir` (a store's segments all
    have one size, fixed when it was made; its entries' positions depend on it), read off
    the largest file. A change is logged. A size no store is made with (an index not of
    whole 32-byte units, data below 64 bytes) is a damaged file's: `config`'s stands.

    `trust_lone_data=False` (a member): a lone data segment shorter than `config`'s may be
    a cut file, so `config`'s size stands and recovery extends that file, as before.
    Taking a cut file's size set a member's segments apart from its group's, and a
    follower writes each entry at its leader's position: it never caught up."""
    data_sizes = _segment_sizes(Path(node_dir, DATA_DIR))
    found = max(data_sizes, default=0)  # the largest data file (0: none)
    data_size, index_size = found, max(_segment_sizes(Path(node_dir, INDEX_DIR)), default=0)
    trusted = trust_lone_data or len(data_sizes) > 1
    if data_size < STORE_BOUNDS["data_file_size"][0] or (not trusted and data_size < config.data_file_size):
        data_size = config.data_file_size
    if not index_size or index_size % INDEX_UNIT_SIZE:
        index_size = config.index_file_size
    sized = replace(config, data_file_size=data_size, index_file_size=index_size)
    if sized != config:
        data = f"{data_size} data" + ("" if found in (0, data_size) else f" (its lone {found}-byte one extended)")
        logging.getLogger(__name__).info("%s keeps its segment sizes: %s, %d index bytes", node_dir, data, index_size)
    return sized


def make_store_dir(node_dir: Path) -> None:
    """Create a writable store directory `node_dir` (and its parents) if missing.

    Raises:
        DLedgerError: DISK_ERROR when it is not a directory, cannot be made (a file in
            its path, no permission) or is not writable.
    """
    if node_dir.exists() and not node_dir.is_dir():
        raise DLedgerError(ResponseCode.DISK_ERROR, f"{node_dir} is not a directory")
    try:
        node_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DLedgerError(ResponseCode.DISK_ERROR, f"cannot create {node_dir}: {exc.strerror or exc}") from exc
    if not os.access(node_dir, os.W_OK):
        raise DLedgerError(ResponseCode.DISK_ERROR, f"{node_dir} is not writable")
