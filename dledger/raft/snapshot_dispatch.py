"""The dispatcher's INSTALL_SNAPSHOT state (a mixin of `EntryDispatcher`), without I/O.

After a snapshot the leader's log starts above its first entries (`LogStore.reset`).
The lowest entry a COMPARE can name is its *floor*: the entry just before the first
live one when its term is known (the log starts at 0, or that entry is the snapshot's
last one), else the first live one. A follower whose match point lies below the floor
cannot be sent the entries after it; the dispatcher then moves to INSTALL_SNAPSHOT and
asks (one `InstallSnapshotRequest` without data, the control request in flight) for
the latest snapshot to be streamed; the node's sender streams it in chunks under the
same per-follower quota as pushes. On SUCCESS the follower's log starts after the
snapshot's last index: the dispatcher COMPAREs from there. Any failure goes back to
COMPARE after a pause, which decides again (a stream cut short resumes where the
follower's `install_tmp/` ends). Without a snapshot the dispatcher stays in COMPARE
(as DLedger, which logs and loops).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.log import LogStore, first_readable
from dledger.raft.member_state import MemberState
from dledger.raft.messages import InstallSnapshotRequest, InstallSnapshotResponse, RequestOrResponse

log = logging.getLogger(__name__)

INSTALL_SNAPSHOT_TIMEOUT_MS = 120_000
"""How long the dispatcher waits for an install's answer before it asks again (the
node's sender gives each stream as long)."""
INSTALL_RETRY_MS = 100
"""Pause before COMPARE runs again after a failed install."""

SnapshotSource = Callable[[], "tuple[int, int] | None"]
"""() -> (lastIncludedIndex, lastIncludedTerm) of the leader's newest snapshot, or None."""


class InstallSnapshotMixin:
    """Floor, terms at the floor and the INSTALL_SNAPSHOT state of an EntryDispatcher."""

    config: DLedgerConfig
    store: LogStore
    member_state: MemberState
    peer_id: str
    term: int
    write_index: int
    _retry_at_ms: int
    _gone_said = -2  # the first readable index last named in the "entries are gone" warning
    _latest_snapshot: SnapshotSource | None
    installing: tuple[int, int] | None

    def control_timeout_ms(self, request: RequestOrResponse) -> int:
        """How long a control request in flight is awaited before it goes again."""
        if isinstance(request, InstallSnapshotRequest):
            return INSTALL_SNAPSHOT_TIMEOUT_MS
        return self.config.max_push_timeout_ms

    def _snapshot(self) -> tuple[int, int] | None:
        return self._latest_snapshot() if self._latest_snapshot is not None else None

    def floor_index(self) -> int:
        """The lowest index a COMPARE may name as the previous entry (-1: none below 0)."""
        begin = self.store.begin_index
        if begin < 0:
            return self.store.end_index  # empty after a reset: only its end is known
        if begin == 0:
            return -1
        snapshot = self._snapshot()
        return begin - 1 if snapshot is not None and snapshot[0] == begin - 1 else begin

    def _term_at(self, index: int) -> int:
        """The term of `index` (-1 below 0 or where it is no longer known)."""
        store = self.store
        if index < 0:
            return -1
        begin = store.begin_index
        if begin >= 0 and begin <= index <= store.end_index:
            return store.term_at(index)
        if begin < 0 and index == store.end_index:
            return store.end_term
        snapshot = self._snapshot()
        return snapshot[1] if snapshot is not None and snapshot[0] == index else -1

    def readable_from(self) -> int:
        """The first index whose entry can be read (end + 1 when the log is empty)."""
        return first_readable(self.store)

    def _start_install(self, now_ms: int) -> bool:
        """Move to INSTALL_SNAPSHOT when the leader has a snapshot; False (and a pause
        before the next COMPARE) when it has none."""
        snapshot = self._snapshot()
        if snapshot is None:
            first = self.readable_from()
            if first != self._gone_said:  # once per first index, not at every retry (10 a second)
                self._gone_said = first
                log.warning(
                    "follower %s needs entries below %d, which are gone, and there is no snapshot to install "
                    "(asking again every %d ms)",
                    self.peer_id,
                    first,
                    INSTALL_RETRY_MS,
                )
            self._retry_at_ms = now_ms + INSTALL_RETRY_MS
            return False
        self._enter_install()
        self.installing = snapshot
        return True

    def _enter_install(self) -> None:
        raise NotImplementedError

    def _install_request(self) -> InstallSnapshotRequest:
        assert self.installing is not None
        index, term = self.installing
        return InstallSnapshotRequest(
            **self.member_state.request_header(self.peer_id),
            term=self.term,
            last_included_index=index,
            last_included_term=term,
        )

    def _on_install(self, resp: InstallSnapshotResponse | None, now_ms: int) -> int | None:
        """Handle the install's answer; returns the index to COMPARE from (the follower's
        log now ends at the snapshot's last index) or None after a failure (a pause
        first)."""
        self.installing = None
        if resp is None or resp.code != ResponseCode.SUCCESS:
            code = "no answer" if resp is None else ResponseCode.of(resp.code).name
            log.info("install of a snapshot on %s failed (%s); comparing again", self.peer_id, code)
            self._retry_at_ms = now_ms + INSTALL_RETRY_MS
            return None
        return resp.last_included_index
