"""FileTermStore: the `currterm` file (`currTerm`, `voteLeader`), written atomically and
fsynced before a vote is granted or a new term is used."""

from __future__ import annotations

import os
from pathlib import Path

from dledger.codes import DLedgerError, ResponseCode
from dledger.store import kvfile
from dledger.store.checkpoint import load_term
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
        """The persisted (term, vote); (0, None) for a new member.

        Raises:
            DLedgerError: DISK_ERROR when `currterm` exists but does not hold a valid
                term (garbage, a term beyond 2^62): never read as term 0.
        """
        try:
            loaded = load_term(self.path)
        except ValueError as exc:
            raise DLedgerError(
                ResponseCode.DISK_ERROR,
                f"invalid term file {exc}; refusing to start with an unknown term "
                "(restore the file, or remove the member's directory and let it rejoin as a new member)",
            ) from None
        return loaded if loaded is not None else (0, None)

    def persist(self, term: int, vote_for: str | None) -> None:
        """Write term and vote durably (temp file, fsync, rename, fsync of the directory)."""
        kvfile.write_atomic(self.path, {"currTerm": str(term), "voteLeader": vote_for or ""})
