"""Reading `checkpoint` (committedIndex, endIndex) and `currterm` (currTerm, voteLeader)
with validation: recovery trusts only what parses.

A file is valid when it holds its keys as decimal integers in range (for `checkpoint`:
-1 <= committedIndex, endIndex <= 2^62, committedIndex then clamped to endIndex as Java
DLedger can leave it past the end, DLedger #316; for `currterm`: 0 <= currTerm <= 2^62). An
invalid or missing file falls back to its `.bak` (the previous version, which every
atomic write keeps); when neither is valid the value is unknown, and the caller decides
what that means (recovery then cuts nothing on its own, see recovery.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dledger.store import kvfile
from dledger.store.layout import CHECKPOINT_FILE

MAX_VALUE = 1 << 62
"""The largest index or term a store file may hold (int64 with headroom, as the Raft
layer's MAX_TERM / MAX_INDEX)."""


class StoreFileError(ValueError):
    """A `checkpoint` or `currterm` file that exists but is invalid.

    Attributes:
        path: the file.
        problem: what is wrong with it.
    """

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True)
class CheckpointInfo:
    """The checkpoint recovery uses.

    Attributes:
        committed, end: committedIndex and endIndex (-1, -1 when unknown).
        source: the file they came from (`checkpoint` or `checkpoint.bak`), "" when
            neither is valid.
        rejected: one line per file that exists but is invalid (why), for `check`.
    """

    committed: int
    end: int
    source: str
    rejected: tuple[str, ...]

    @property
    def known(self) -> bool:
        """True when a valid checkpoint (or its .bak) was found."""
        return bool(self.source)


def _parse_int(values: dict[str, str], key: str, low: int, high: int) -> int:
    raw = values.get(key)
    if raw is None:
        raise ValueError(f"{key} is missing")
    if not raw.lstrip("-").isdigit() or len(raw) > 20:
        raise ValueError(f"{key}={raw!r} is not an integer")
    value = int(raw)
    if not low <= value <= high:
        raise ValueError(f"{key}={value} is out of range [{low}, {high}]")
    return value


def _read_values(path: Path) -> dict[str, str] | None:
    """The key=value pairs of `path`; None when it does not exist. Raises ValueError
    when it cannot be read as such a file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"unreadable: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("not a text file") from None
    values = kvfile.parse(text)
    if not values:
        raise ValueError("empty" if not text.strip() else "no key=value line")
    return values


def parse_checkpoint(values: dict[str, str]) -> tuple[int, int]:
    """(committed, end) of checkpoint values, committed at most end. Raises ValueError
    when they are invalid."""
    end = _parse_int(values, "endIndex", -1, MAX_VALUE)
    committed = _parse_int(values, "committedIndex", -1, MAX_VALUE)
    # Java DLedger can leave committedIndex past endIndex after a truncate (DLedger
    # #316): what is committed and present ends at endIndex
    return min(committed, end), end


def load_checkpoint(node_dir: str | os.PathLike[str]) -> CheckpointInfo:
    """The valid checkpoint of `node_dir`: `checkpoint`, else `checkpoint.bak`, else
    unknown. Never writes."""
    target = Path(node_dir) / CHECKPOINT_FILE
    rejected: list[str] = []
    for candidate in (target, target.with_name(target.name + ".bak")):
        try:
            values = _read_values(candidate)
            if values is None:
                continue
            committed, end = parse_checkpoint(values)
        except ValueError as exc:
            rejected.append(f"{candidate.name}: {exc}")
            continue
        return CheckpointInfo(committed, end, candidate.name, tuple(rejected))
    return CheckpointInfo(-1, -1, "", tuple(rejected))


def load_term(path: Path) -> tuple[int, str | None] | None:
    """(currTerm, voteLeader) from `path`, or from its `.bak` when `path` is missing
    (Java's shutdown race); None when neither exists.

    A `path` that exists but is invalid is refused, not replaced by the `.bak`: the
    older version may lack the vote of the current term, and a member that forgets
    its vote can vote twice in one term.

    Raises:
        StoreFileError: naming the file and what is wrong with it.
    """
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            values = _read_values(candidate)
            if values is None:
                continue
            term = _parse_int(values, "currTerm", 0, MAX_VALUE)
        except ValueError as exc:
            raise StoreFileError(candidate, str(exc)) from None
        return term, values.get("voteLeader") or None
    return None
