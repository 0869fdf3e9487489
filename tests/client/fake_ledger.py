"""A scriptable fake of the `dledger.v1.Ledger` service: real gRPC servers on 127.0.0.1
(one per fake member) over one shared in-memory log, so client behaviour under
redirects, refused connections, deadlines and broken streams is deterministic.

Script a member's next append answers with `FakeMember.script(...)`: each action is
consumed by one Append request (or one request of an AppendStream).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import grpc

from dledger.codes import ResponseCode
from dledger.proto import dledger_pb2 as pb
from dledger.proto import dledger_pb2_grpc as pb_grpc
from dledger.transport.grpc_server import SERVER_OPTIONS


@dataclass
class Action:
    """One scripted answer to an append.

    Attributes:
        kind: "code" (answer `code`), "abort" (end the call with gRPC `status` and
            `details`), "hang" (never answer: the client's deadline passes),
            "not_leader" (NOT_LEADER naming `hint`, or no hint when it is None).
        append: append the bodies first (the write happened, the answer is lost/bad).
    """

    kind: str
    code: int = 0
    status: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    details: str = ""
    append: bool = False
    hint: str | None = None


@dataclass
class FakeLog:
    """The group's shared state."""

    members: dict[str, str] = field(default_factory=dict)
    leader: str | None = None
    term: int = 1
    bodies: list[bytes] = field(default_factory=list)
    terms: list[int] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def append(self, bodies: list[bytes]) -> int:
        with self.cond:
            first = len(self.bodies)
            self.bodies.extend(bodies)
            self.terms.extend([self.term] * len(bodies))
            self.cond.notify_all()
            return first


class FakeMember(pb_grpc.LedgerServicer):
    """One fake member: a servicer plus its gRPC server.

    Args:
        log: the shared state.
        node_id: this member's id.
        page: at most this many entries per Get answer / ReadCommitted batch.
    """

    def __init__(self, log: FakeLog, node_id: str, page: int = 1000) -> None:
        self.vote_hold = ""  # what Metadata says this member holds its vote for
        self.store_health = ""  # what Metadata says of its store ("": it takes writes)
        self.machine_health = ""  # what Metadata says of its state machine ("": it applies)
        self.snapshot_index = -1  # what Metadata says of its newest snapshot
        self.own_view: tuple[str, int, str | None] | None = None
        """(role, term, leader) Metadata says instead of the group's (a member astray)."""
        self.answers_as: str | None = None
        """Another member id this member has (as if the peers list named the wrong one)."""
        self.log = log
        self.node_id = node_id
        self.page = page
        self.actions: list[Action] = []
        self.append_requests: list[list[bytes]] = []
        self.stream_batches: list[int] = []
        self.streams_opened = 0
        self.stream_received = 0
        self.gate = threading.Event()
        self.gate.set()
        self.unary_gate = threading.Event()
        """Append and Get calls wait here (clear it to hold them; `held` counts them)."""
        self.unary_gate.set()
        self.held = 0
        self.get_requests: list[tuple[int, int]] = []
        self.known_commit: int | None = None
        """Get answers as a member that knows only this commit index (one restarted)."""
        self.metadata_refusal: Action | None = None
        """Metadata answers with this instead ("code": `code` with `details` as its message;
        "abort": gRPC `status` and `details`)."""
        self.break_read_after: int | None = None
        self.lock = threading.Lock()
        self.server: Any = None
        self.port = 0

    # -- lifecycle

    def start(self, port: int = 0) -> int:
        """Serve on 127.0.0.1:`port` (0: a free one); returns the port."""
        server = grpc.server(ThreadPoolExecutor(16), options=list(SERVER_OPTIONS))
        pb_grpc.add_LedgerServicer_to_server(self, server)
        self.port = server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        self.server = server
        return self.port

    def stop(self) -> None:
        """Stop serving (calls get connection refused afterwards)."""
        if self.server is not None:
            self.server.stop(0).wait()
            self.server = None

    def script(self, *actions: Action) -> None:
        """Queue answers for the next appends."""
        with self.lock:
            self.actions.extend(actions)

    # -- helpers

    def _header(self, out: Any, code: int) -> Any:
        out.code = int(code)
        out.term = self.log.term
        if self.log.leader is not None:
            out.leader_id = self.log.leader
            out.leader_address = self.log.members[self.log.leader]
        return out

    def _answer_append(self, request: Any, context: Any) -> Any:
        bodies = list(request.bodies)
        with self.lock:
            self.append_requests.append(bodies)
            action = self.actions.pop(0) if self.actions else None
        out = pb.AppendResponse(request_id=request.request_id)
        if action is not None:
            first = self.log.append(bodies) if action.append else -1
            if action.kind == "code":
                if action.code == ResponseCode.SUCCESS:
                    out.first_index, out.count = first, len(bodies)
                return self._header(out, action.code)
            if action.kind == "abort":
                context.abort(action.status, action.details)
            if action.kind == "hang":
                deadline = context.time_remaining()
                time.sleep(min(deadline if deadline is not None else 30.0, 30.0) + 0.05)
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "hung")
            if action.kind == "not_leader":
                out.code, out.term = int(ResponseCode.NOT_LEADER), self.log.term
                if action.hint is not None:
                    out.leader_id, out.leader_address = action.hint, self.log.members[action.hint]
                return out
        if self.log.leader != self.node_id:
            return self._header(out, ResponseCode.NOT_LEADER)
        if not bodies:
            return self._header(out, ResponseCode.REQUEST_WITH_EMPTY_BODYS)
        out.first_index, out.count = self.log.append(bodies), len(bodies)
        return self._header(out, ResponseCode.SUCCESS)

    # -- the service

    def _hold(self) -> None:
        """Wait at `unary_gate`, counted in `held` meanwhile."""
        with self.lock:
            self.held += 1
        self.unary_gate.wait()
        with self.lock:
            self.held -= 1

    def Append(self, request: Any, context: Any) -> Any:
        self._hold()
        return self._answer_append(request, context)

    def AppendStream(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
        # read ahead like the real server, so pipelined requests arrive before answers
        with self.lock:
            self.streams_opened += 1
        pending: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def read() -> None:
            try:
                for request in request_iterator:
                    with self.lock:
                        self.stream_received += 1
                        self.stream_batches.append(len(request.bodies))
                    pending.put(request)
            except Exception:  # the call ended
                pass
            finally:
                pending.put(None)

        threading.Thread(target=read, daemon=True).start()
        while (request := pending.get()) is not None:
            self.gate.wait()
            yield self._answer_append(request, context)

    def Get(self, request: Any, context: Any) -> Any:
        with self.lock:
            self.get_requests.append((request.index, request.count))
        self._hold()
        out = pb.GetResponse()
        with self.log.cond:
            committed = len(self.log.bodies) - 1
            if self.known_commit is not None:
                committed = min(committed, self.known_commit)
            if request.index < 0 or request.index > committed:
                out.committed_index = committed
                return self._header(out, ResponseCode.INDEX_OUT_OF_RANGE)
            stop = min(committed + 1, request.index + min(max(request.count, 1), self.page))
            for i in range(request.index, stop):
                out.entries.add(index=i, term=self.log.terms[i], pos=i * 100, magic=1, body=self.log.bodies[i])
            out.committed_index = committed
        return self._header(out, ResponseCode.SUCCESS)

    def ReadCommitted(self, request: Any, context: Any) -> Iterator[Any]:
        next_index = request.from_index
        end = request.to_index if request.HasField("to_index") else None
        limit = min(request.max_batch_count or self.page, self.page)
        sent = 0
        while end is None or next_index < end:
            with self.log.cond:
                if next_index >= len(self.log.bodies):
                    if not request.follow:
                        return
                    self.log.cond.wait(0.05)
                    if not context.is_active():
                        return
                    continue
                stop = min(len(self.log.bodies), next_index + limit, end if end is not None else 1 << 62)
                bodies = self.log.bodies[next_index:stop]
                terms = self.log.terms[next_index:stop]
                committed = len(self.log.bodies) - 1
            if self.break_read_after is not None and sent >= self.break_read_after:
                context.abort(grpc.StatusCode.UNAVAILABLE, "Socket closed")
            out = pb.ReadCommittedResponse(committed_index=committed)
            out.batch.index.extend(range(next_index, stop))
            out.batch.term.extend(terms)
            out.batch.pos.extend(i * 100 for i in range(next_index, stop))
            offsets = [0]
            for body in bodies:
                offsets.append(offsets[-1] + len(body))
            out.batch.offsets.extend(offsets)
            out.batch.bodies = b"".join(bodies)
            yield self._header(out, ResponseCode.SUCCESS)
            sent += 1
            next_index = stop

    def Metadata(self, request: Any, context: Any) -> Any:
        own_id = self.answers_as or self.node_id
        out = pb.MetadataResponse(group="default", self_id=own_id)
        refusal = self.metadata_refusal
        if refusal is None and request.remote_id not in ("", own_id):
            refusal = Action("code", code=ResponseCode.UNKNOWN_MEMBER, details=f"this member is '{own_id}'")
        if refusal is not None and refusal.kind == "abort":
            context.abort(refusal.status, refusal.details)
        if refusal is not None:
            out.message = refusal.details
            return self._header(out, refusal.code)
        out.role = "LEADER" if self.log.leader == self.node_id else "FOLLOWER"
        for member_id, address in self.log.members.items():
            out.peers[member_id] = address
            out.members.add(
                id=member_id,
                address=address,
                role="LEADER" if member_id == self.log.leader else "FOLLOWER",
                snapshot_index=self.snapshot_index if member_id == self.node_id else -1,
            )
        with self.log.cond:
            out.end_index = out.committed_index = len(self.log.bodies) - 1
            out.begin_index = 0 if self.log.bodies else -1
        out.vote_hold = self.vote_hold
        out.store_health = self.store_health
        out.machine_health = self.machine_health
        self._header(out, ResponseCode.SUCCESS)
        if self.own_view is not None:
            (out.role, out.term, leader) = self.own_view
            out.ClearField("leader_id")
            if leader is not None:
                out.leader_id = leader
        return out

    def LeadershipTransfer(self, request: Any, context: Any) -> Any:
        out = pb.LeadershipTransferResponse(group="default", local_id=self.node_id)
        if self.log.leader != self.node_id:
            return self._header(out, ResponseCode.NOT_LEADER)
        if request.transferee_id not in self.log.members:
            return self._header(out, ResponseCode.UNKNOWN_MEMBER)
        self.log.leader = request.transferee_id
        self.log.term += 1
        return self._header(out, ResponseCode.SUCCESS)


class FakeCluster:
    """`n` fake members (n0, n1, ...) sharing one log; n0 leads at first.

    Args:
        n: members.
        page: entries per Get answer / ReadCommitted batch.
    """

    def __init__(self, n: int = 3, page: int = 1000) -> None:
        self.log = FakeLog()
        self.members = {f"n{k}": FakeMember(self.log, f"n{k}", page) for k in range(n)}
        for node_id, member in self.members.items():
            self.log.members[node_id] = f"127.0.0.1:{member.start()}"
        self.log.leader = "n0"

    @property
    def peers(self) -> str:
        """The group in DLedger's peers format."""
        return ";".join(f"{node_id}-{address}" for node_id, address in self.log.members.items())

    def __getitem__(self, node_id: str) -> FakeMember:
        return self.members[node_id]

    def restart(self, node_id: str) -> None:
        """Start a stopped member again on its port."""
        self.members[node_id].start(self.members[node_id].port)

    def close(self) -> None:
        for member in self.members.values():
            member.gate.set()
            member.unary_gate.set()
            member.stop()
