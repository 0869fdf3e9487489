"""RaftDriver: the loop around one RaftCore, written once for every shell.

`RaftCore` decides; a shell owns threads, clocks and sockets. Between the two sits the
same loop in every shell: run a service pass, send the requests it returns, feed each
answer back through `RaftCore.on_response`, and then run or wake the passes the event
moved. `RaftDriver` is that loop (etcd's `rawnode`, with the shells in the role of
`rafttest`): the threaded node (`dledger.node`), the deterministic cluster
(`tests/raft/cluster.py`), the seeded simulation (`tests/sim/harness.py`) and the core
benchmark all drive their cores through it.

It is I/O-free: outbound requests leave through the `send` hook, and the shell hands each
answer (or None: no answer) back to `on_response`. What an event moved is reported to the
`wake` hook by pass name: a threaded shell wakes that pass's thread; a stepped shell runs
every pass each step and ignores it. An *eager* driver (the threaded node) runs the
latency-critical follow-ups at once in the caller's thread instead of waking: a follower
handles a push as it arrives, and a push's answer lets that peer's dispatcher send the
next one (the pipeline of in-flight pushes stays full). Not thread-safe, like the core:
a threaded shell calls it under the core's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future

from dledger.raft.core import RaftCore
from dledger.raft.elector import Outbound
from dledger.raft.messages import (
    HeartBeatRequest,
    InstallSnapshotRequest,
    LeadershipTransferResponse,
    PushEntryRequest,
    ReadIndexRequest,
    RequestOrResponse,
)

ELECTOR = "elector"
"""The state maintainer's pass: votes, heartbeats, leadership transfer."""
HANDLER = "handler"
"""The entry handler's pass: the follower's queued pushes."""
QUORUM = "quorum"
"""The quorum-ack checker's pass: the commit index and client futures."""
DISPATCH_PREFIX = "dispatch:"

IDLE_WAIT_MS = 1_000
"""How long a threaded shell's pass sleeps when it has nothing to do and no timer runs
(`RaftDriver.idle_wait`): only an event can give it work then, and that event wakes it.
The driver wakes the entry handler for a queued push; the shell wakes a new leader's
dispatchers and quorum pass (the node's `_step`)."""
MAX_HANDLER_STEPS_PER_PASS = 10_000
"""How many queued pushes `tick` lets the entry handler process in one step."""

SendHook = Callable[[Outbound], None]
"""Send this request to its target; the shell calls `on_response` with the answer."""
WakeHook = Callable[[str], None]
"""The pass of this name has work: run it soon."""


def dispatch_pass(peer_id: str) -> str:
    """The name of the dispatcher pass of `peer_id`."""
    return DISPATCH_PREFIX + peer_id


def _nobody(_name: str) -> None:
    """The wake hook of a shell that runs every pass each step."""


class RaftDriver:
    """Drives one `RaftCore`: its service passes, its peer traffic and client appends.

    Args:
        core: the member's core.
        send: where outbound requests go.
        wake: told the name of a pass an event gave work (default: nobody).
        eager: run the follow-ups of an event at once, in the caller's thread (a
            threaded shell): an incoming push's handling, the next push after an
            answer, a group of one's commit, a transfer's elector pass. Otherwise they
            are left to their passes (a stepped shell runs every pass each step).
    """

    def __init__(self, core: RaftCore, send: SendHook, wake: WakeHook = _nobody, *, eager: bool = False) -> None:
        self.core = core
        self._send = send
        self._wake = wake
        self.eager = eager
        self._peers_by_pass = {dispatch_pass(peer): peer for peer in core.dispatchers}
        self.passes: tuple[str, ...] = (ELECTOR, HANDLER, QUORUM, *self._peers_by_pass)
        """Every pass's name: the elector, handler and quorum passes, then one
        dispatcher pass per peer in peer order."""

    def _emit(self, out: list[Outbound]) -> None:
        for outbound in out:
            self._send(outbound)

    # -- the service passes

    def elector_pass(self, now_ms: int) -> None:
        """The state maintainer's pass; sends its votes, heartbeats and transfers."""
        self._emit(self.core.tick_elector(now_ms))

    def dispatcher_pass(self, peer_id: str, now_ms: int) -> int | None:
        """The pass of `peer_id`'s dispatcher (nothing unless leader); sends its pushes.

        Returns:
            The milliseconds left of a hold on a small backlog, when the pass holds one
            (run it again then); `IDLE_WAIT_MS` when not leader; else None.
        """
        dispatcher = self.core.dispatchers.get(peer_id)
        if dispatcher is None or not self.core.member_state.is_leader:
            return IDLE_WAIT_MS
        self._emit(self.core.tick_dispatcher(peer_id, now_ms))
        hold_until = dispatcher.hold_until_ms
        return hold_until - now_ms if hold_until > now_ms else None

    def handler_pass(self, now_ms: int, budget: int | None = None) -> int:
        """The entry handler's pass: queued pushes until none is left or `budget` ran
        (None: no limit). Returns how many ran."""
        steps = 0
        while (budget is None or steps < budget) and self.core.tick_handler(now_ms):
            steps += 1
        return steps

    def idle_wait(self, name: str) -> int | None:
        """How long the thread of pass `name` may sleep now: `IDLE_WAIT_MS` for the
        entry handler with no push queued, and for a follower's quorum pass; None (its
        usual interval) for the others, whose timers run (the dispatcher pass says for
        itself)."""
        if name == HANDLER:
            return None if self.core.handler.pending_count() else IDLE_WAIT_MS
        if name == QUORUM and not self.core.member_state.is_leader:
            return IDLE_WAIT_MS
        return None

    def quorum_pass(self, now_ms: int) -> bool:
        """The quorum-ack checker's pass; True when the commit index moved."""
        return self.core.tick_quorum(now_ms)

    def run_pass(self, name: str, now_ms: int, handler_budget: int | None = None) -> None:
        """Run the pass called `name` (one of `passes`); `handler_budget` as in
        `handler_pass`."""
        if name == ELECTOR:
            self.elector_pass(now_ms)
        elif name == HANDLER:
            self.handler_pass(now_ms, handler_budget)
        elif name == QUORUM:
            self.quorum_pass(now_ms)
        else:
            self.dispatcher_pass(self._peers_by_pass[name], now_ms)

    def tick(self, now_ms: int) -> None:
        """Every pass once, as one step of a stepped shell: the elector, the handler (at
        most `MAX_HANDLER_STEPS_PER_PASS` pushes), then, as leader, every dispatcher and
        the quorum check; the requests of the step go out after all of them."""
        core = self.core
        out = core.tick_elector(now_ms)
        self.handler_pass(now_ms, MAX_HANDLER_STEPS_PER_PASS)
        if core.member_state.is_leader:
            for peer in core.dispatchers:
                out += core.tick_dispatcher(peer, now_ms)
            core.tick_quorum(now_ms)
        self._emit(out)

    def dispatch(self, peer_id: str, now_ms: int) -> None:
        """A pass of `peer_id`'s dispatcher outside its own schedule (new entries, an
        answer). When it begins to hold a small backlog its pass is woken, to send the
        backlog when the hold ends."""
        dispatcher = self.core.dispatchers.get(peer_id)
        if dispatcher is None:
            return
        held_before = dispatcher.hold_until_ms
        self._emit(self.core.tick_dispatcher(peer_id, now_ms))
        if held_before < 0 <= dispatcher.hold_until_ms:
            self._wake(dispatch_pass(peer_id))

    def dispatch_all(self, now_ms: int) -> None:
        """`dispatch` to every peer (what to push now)."""
        for peer in self.core.dispatchers:
            self.dispatch(peer, now_ms)

    # -- peer traffic

    def deliver(self, request: RequestOrResponse, now_ms: int) -> Future[RequestOrResponse]:
        """Answer a request from a peer; an eager driver handles a push at once, so that
        the answer is usually done when this returns."""
        answer = self.core.handle_request(request, now_ms)
        if isinstance(request, ReadIndexRequest):
            self._emit(self.core.tick_reads(now_ms))
        elif isinstance(request, PushEntryRequest):
            if self.eager:
                self.handler_pass(now_ms)
            if not self.eager or self.core.handler.pending_count():
                self._wake(HANDLER)  # an eager driver's pass left pushes queued: their timeouts
        return answer

    def on_response(
        self, target_id: str, request: RequestOrResponse, response: RequestOrResponse | None, now_ms: int
    ) -> bool:
        """Feed back the answer of `target_id` to `request` (None: no answer). Returns
        True when it acknowledged entries (the commit check has run already).

        A push's answer frees room in that peer's pipeline (an eager leader sends the
        next push at once); any other answer is the elector's business.
        """
        acked = self.core.on_response(target_id, request, response, now_ms)
        if isinstance(request, HeartBeatRequest):
            self._emit(self.core.tick_reads(now_ms))  # the next round, for reads that came meanwhile
        if isinstance(request, InstallSnapshotRequest):
            self._wake(dispatch_pass(target_id))
        elif not isinstance(request, PushEntryRequest):
            self._wake(ELECTOR)
        elif not self.eager:
            self._wake(dispatch_pass(target_id))
        elif self.core.member_state.is_leader:
            self.dispatch(target_id, now_ms)
        return acked

    # -- client operations

    def append(self, bodies: Sequence[bytes], now_ms: int) -> Future[int]:
        """`append_requests` of one request."""
        return self.append_requests([bodies], now_ms)[0]

    def append_requests(
        self, requests: Sequence[Sequence[bytes]], now_ms: int, magics: Sequence[int] | None = None
    ) -> list[Future[int]]:
        """Leader append of client requests (see `RaftCore.append_requests`, whose
        errors it raises). No answer will come to a group of one: an eager driver
        commits its entries at once, otherwise the quorum pass is woken. The pushes go
        out with `dispatch_all` or the dispatcher passes."""
        futures = self.core.append_requests(requests, now_ms, magics)
        self._commit_alone(now_ms)
        return futures

    def append_noop(self, now_ms: int) -> int:
        """Leader append of a NOOP of its term (see `RaftCore.append_noop`, whose errors
        it raises); returns its index. Pushed like `append_requests`' entries."""
        index = self.core.append_noop()
        self._commit_alone(now_ms)
        return index

    def _commit_alone(self, now_ms: int) -> None:
        """After a leader append: a group of one commits without an answer (an eager
        driver at once, otherwise the quorum pass is woken)."""
        if len(self.core.member_state.peer_ids) == 1:
            if self.eager:
                self.quorum_pass(now_ms)
            else:
                self._wake(QUORUM)

    def read_index(self, now_ms: int) -> Future[int]:
        """Queue a ReadIndex read as the leader (see `RaftCore.read_index`, whose errors
        it raises) and start its round at once when none is in flight."""
        future = self.core.read_index(now_ms)
        self._emit(self.core.tick_reads(now_ms))
        return future

    def leadership_transfer(self, transferee_id: str, now_ms: int) -> Future[LeadershipTransferResponse]:
        """Start handing leadership to `transferee_id` (see `RaftCore.leadership_transfer`);
        an eager driver runs the elector pass that sends the transfer at once."""
        answer = self.core.leadership_transfer(transferee_id, now_ms)
        if self.eager:
            self.elector_pass(now_ms)
        else:
            self._wake(ELECTOR)
        return answer
