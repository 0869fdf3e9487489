"""The layout of a node directory (DLedger's `storeBaseDir/dledger-<selfId>`).

    dledger-<selfId>/
        data/<20-digit start offset>     data segments (entries and blanks)
        index/<20-digit start offset>    index segments (32-byte units)
        checkpoint, checkpoint.bak       committedIndex, endIndex (key=value)
        currterm, currterm.bak           currTerm, voteLeader
        reset                            ours: the last prefix reset (Java ignores it)
        abort                            ours: present while a member runs

Only names and lookups live here: nothing in this module opens, maps or writes a file.
"""

from __future__ import annotations

DATA_DIR = "data"
INDEX_DIR = "index"
CHECKPOINT_FILE = "checkpoint"
RESET_FILE = "reset"  # ours: beforeBeginIndex/Term of the last prefix reset (Java ignores it)
CURRTERM_FILE = "currterm"
ABORT_FILE = "abort"

NAME_DIGITS = 20
"""Segment files are named by their start offset in the log, zero-padded to 20 digits."""


def offset_to_name(offset: int) -> str:
    """DLedgerUtils.offset2FileName: the offset in decimal, zero-padded to 20 digits."""
    return f"{offset:0{NAME_DIGITS}d}"


def is_segment_name(name: str) -> bool:
    """True for a 20-digit segment file name."""
    return len(name) == NAME_DIGITS and name.isdigit()
