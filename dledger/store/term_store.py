"""FileTermStore: the `currterm` file (`currTerm`, `voteLeader`), written atomically and
fsynced before a vote is granted or a new term is used."""

from __future__ import annotations

import os
from pathlib import Path

from dledger.store import kvfile
from dledger.store.layout import CURRTERM_FILE

__all__ = ["CURRTERM_FILE", "FileTermStore"]


class FileTermStore:
    """Durable current term and vote in `<node_dir>/currterm` (DLedger's format).

    Args:
        node_dir: the member's store directory (`<storeBaseDir>/dledger-<selfId>`).
    """

    def __init__(self, node_dir: str | os.PathLike[str]) -> None:
        self.path = Path(node_dir) / CURRTERM_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def load(self) -> tuple[int, str | None]:
        """The persisted (term, vote); (0, None) for a new member."""
        values = kvfile.read(self.path)
        term = kvfile.read_int(values, "currTerm", 0)
        vote = kvfile.read_str(values, "voteLeader") or None
        return term, vote

    def persist(self, term: int, vote_for: str | None) -> None:
        """Write term and vote durably (temp file, fsync, rename, fsync of the directory)."""
        kvfile.write_atomic(self.path, {"currTerm": str(term), "voteLeader": vote_for or ""})
