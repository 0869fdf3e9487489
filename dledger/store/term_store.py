"""FileTermStore: the `currterm` file (`currTerm`, `voteLeader`), written atomically and
fsynced before a vote is granted or a new term is used."""

from __future__ import annotations

import os
from pathlib import Path

from dledger.codes import CorruptStoreError
from dledger.store import kvfile
from dledger.store.layout import CURRTERM_FILE

__all__ = ["CURRTERM_FILE", "MAX_STORED_TERM", "FileTermStore"]

MAX_STORED_TERM = 1 << 62
"""The highest term a `currterm` file may hold (`dledger.raft.messages.MAX_TERM`: the
store layer does not import the Raft layer; tests/raft checks that both agree)."""


def _readable(path: Path) -> bool:
    """Whether kvfile.read takes its values from `path` itself (not its .bak)."""
    try:
        return bool(kvfile.parse(path.read_text("ascii")))
    except (OSError, UnicodeDecodeError):
        return False


class FileTermStore:
    """Durable current term and vote in `<node_dir>/currterm` (DLedger's format).

    Args:
        node_dir: the member's store directory (`<storeBaseDir>/dledger-<selfId>`).
    """

    def __init__(self, node_dir: str | os.PathLike[str]) -> None:
        self.path = Path(node_dir) / CURRTERM_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def load(self) -> tuple[int, str | None]:
        """The persisted (term, vote); (0, None) for a new member.

        As for every `key=value` file, `currterm.bak` serves when `currterm` is missing or
        unreadable (see `dledger.store.kvfile.read`). A file that reads but whose
        `currTerm` is missing, not a number, negative or above MAX_STORED_TERM is refused:
        forgetting the term or the vote of a live member could let it vote twice in one
        term, so it is never replaced by a guess.

        Raises:
            CorruptStoreError: the file (named in the message) holds no valid term.
        """
        bak = self.path.with_name(self.path.name + ".bak")
        values = kvfile.read(self.path)
        if values is None:
            if self.path.exists() or bak.exists():
                raise CorruptStoreError(str(self.path), 0, "unreadable and without a readable .bak; no term to use")
            return 0, None
        raw = values.get("currTerm")
        try:
            term = int(raw) if raw is not None else None
        except ValueError:
            term = None
        if term is None or not 0 <= term <= MAX_STORED_TERM:
            source = self.path if _readable(self.path) else bak
            raise CorruptStoreError(
                str(source),
                0,
                f"currTerm={raw!r} is not a term in 0..{MAX_STORED_TERM}; "
                "the member cannot start without its term and vote (restore the file or its .bak)",
            )
        vote = kvfile.read_str(values, "voteLeader") or None
        return term, vote

    def persist(self, term: int, vote_for: str | None) -> None:
        """Write term and vote durably (temp file, fsync, rename, fsync of the directory).

        Raises:
            ValueError: `term` is outside 0..MAX_STORED_TERM (nothing is written).
        """
        if not 0 <= term <= MAX_STORED_TERM:
            raise ValueError(f"term {term} is outside 0..{MAX_STORED_TERM}; not stored")
        kvfile.write_atomic(self.path, {"currTerm": str(term), "voteLeader": vote_for or ""})
