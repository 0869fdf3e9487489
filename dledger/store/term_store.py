"""FileTermStore: the `currterm` file (`currTerm`, `voteLeader`), written atomically and
fsynced before a vote is granted or a new term is used."""

from __future__ import annotations

import os
from pathlib import Path

from dledger.codes import CorruptStoreError, DLedgerError, ResponseCode
from dledger.store import kvfile
from dledger.store.checkpoint import MAX_VALUE, StoreFileError, load_term
from dledger.store.layout import CURRTERM_FILE

__all__ = ["CURRTERM_FILE", "MAX_STORED_TERM", "FileTermStore"]

MAX_STORED_TERM = MAX_VALUE
"""The highest term a `currterm` file may hold (`dledger.raft.messages.MAX_TERM`: the
store layer does not import the Raft layer; tests/raft checks that both agree)."""


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

        `currterm.bak` serves only when `currterm` is missing (a crash between the two
        renames of an atomic write). A file that exists but holds no valid term
        (unreadable, not a number, negative, above MAX_STORED_TERM) is refused, never
        replaced by the older `.bak` nor read as term 0: forgetting the term or the vote
        of a live member could let it vote twice in one term.

        Raises:
            CorruptStoreError: naming the file that holds no valid term.
        """
        try:
            loaded = load_term(self.path)
        except StoreFileError as exc:
            raise CorruptStoreError(
                str(exc.path),
                0,
                f"{exc.problem}; the member cannot start without its term and vote "
                "(restore the file, or remove the member's directory and let it rejoin as a new member)",
            ) from None
        return loaded if loaded is not None else (0, None)

    def persist(self, term: int, vote_for: str | None) -> None:
        """Write term and vote durably (temp file, fsync, rename, fsync of the directory).

        Raises:
            ValueError: `term` is outside 0..MAX_STORED_TERM (nothing is written).
            DLedgerError: DISK_ERROR when the file could not be written (a failed or
                full disk): the member then neither moves to `term` nor grants the vote.
        """
        if not 0 <= term <= MAX_STORED_TERM:
            raise ValueError(f"term {term} is outside 0..{MAX_STORED_TERM}; not stored")
        try:
            kvfile.write_atomic(self.path, {"currTerm": str(term), "voteLeader": vote_for or ""})
        except OSError as exc:
            raise DLedgerError(
                ResponseCode.DISK_ERROR, f"cannot store term {term} in {self.path}: {exc.strerror or exc}"
            ) from exc
