"""sync flush mode's waits in a member (`DLedgerNode`): a follower answers a push once its
copy is durable; the leader flushes its own copy while the pushes travel and then lets
the quorum check count it (`QuorumAckChecker.count_durable_only`, the Raft thesis
§10.2.1). The flushes run outside the core's lock: in the thread that appended, or on
one "ack" thread for the answers that are not ready at once and a new leader's NOOP."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from dledger.codes import DLedgerError
from dledger.raft.log import LogStore

log = logging.getLogger(__name__)

T = TypeVar("T")


class SyncDurability:
    """The flushes of a sync-mode member.

    Args:
        store: the member's log.
        commit_pass: runs the quorum check under the core's lock (after the leader's own
            flush, which may have been all a commit waited for).
        name: the member's id (for logs and the thread's name).
    """

    def __init__(self, store: LogStore, commit_pass: Callable[[], None], name: str) -> None:
        self.store = store
        self.commit_pass = commit_pass
        self.name = name
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"dledger-ack-{name}")

    def shutdown(self) -> None:
        """Finish the queued flushes and stop the thread."""
        self._pool.shutdown(wait=True)

    def after_durable(self, answer: Future[T]) -> Future[T]:
        """A follower's answer to an APPEND, released once its copy is on disk."""
        store = self.store
        if answer.done():
            store.wait_durable()
            return answer
        durable: Future[T] = Future()

        def finish(done: Future[T]) -> None:
            try:
                result = done.result()
                store.wait_durable()
                durable.set_result(result)
            except BaseException as exc:
                durable.set_exception(exc)

        answer.add_done_callback(lambda f: self._pool.submit(finish, f))
        return durable

    def leader_copy(self, future: Future[int] | None = None) -> None:
        """On the leader, after the pushes went out: make its copy durable, then run the
        commit pass unless `future` (the append's) is done already. A failed flush fails
        the store (DISK_ERROR, logged here); the entries are out already, so the future,
        not an error here, tells whether they commit."""
        try:
            self.store.wait_durable()
        except DLedgerError as exc:
            log.error("%s: the leader's copy is not durable: %s", self.name, exc)
            return
        if future is None or not future.done():
            self.commit_pass()

    def leader_copy_soon(self) -> None:
        """`leader_copy` on the ack thread: a new leader's NOOP (or any entry appended
        without a client waiting) commits once flushed; flush it now, not at the next
        flush pass."""
        with contextlib.suppress(RuntimeError):  # shut down meanwhile
            self._pool.submit(self.leader_copy)
