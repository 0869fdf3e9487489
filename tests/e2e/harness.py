"""E2E harness: real `dledger server` processes on free loopback ports, a raw gRPC client,
and the checks of an acknowledged-append history."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

import grpc

from dledger.cli.cluster_runner import LocalCluster
from dledger.cli.server_cmds import EXIT_ADDRESS_IN_USE, server_command_line
from dledger.transport.convert import columns_from_pb, pb, pb_grpc

T = TypeVar("T")

HEARTBEAT_MS = 500
ELECTION_S = 15.0
"""Upper bound for an election on a loaded 2-core machine (3 missed 500 ms beats + votes)."""
SERVER_ARGS = ["--heartbeat-ms", str(HEARTBEAT_MS), "--segment-size", "8MiB", "--log-level", "INFO"]
RPC_S = 5.0


def eventually(check: Callable[[], T | None], timeout_s: float, what: str, poll_s: float = 0.05) -> T:
    """Poll `check` until it returns something other than None/False; fail after
    `timeout_s` naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(poll_s)


def free_ports(count: int) -> list[int]:
    """`count` distinct ports that were free a moment ago (the caller retries a race)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class E2ECluster(LocalCluster):
    """A LocalCluster of real server processes for tests (logs in files, ports picked
    free, startup retried when a port was taken in between)."""

    def __init__(self, workdir: Path, nodes: int = 3, extra_args: list[str] | None = None) -> None:
        self.workdir = workdir
        self._nodes = nodes
        super().__init__(
            nodes=nodes,
            group="e2e",
            host="127.0.0.1",
            base_port=0,
            ports=free_ports(nodes),
            store_base_dir=workdir / "data",
            extra_args=[*SERVER_ARGS, *(extra_args or [])],
            command_line=server_command_line,
            log_dir=workdir / "logs",
        )

    def launch(self, attempts: int = 5) -> E2ECluster:
        """Start every member and wait until each answers Metadata; on a port race pick
        new ports and start again."""
        for _attempt in range(attempts):
            self.start_all()
            if self._wait_up():
                return self
            self.shutdown(timeout_s=5)
            fresh = free_ports(self._nodes)
            for member, port in zip(self.members.values(), fresh, strict=True):
                member.port = port
            self.peers = ";".join(f"{m.id}-{self.host}:{m.port}" for m in self.members.values())
        raise AssertionError(f"cluster did not start:\n{self.logs_tail()}")

    def _wait_up(self) -> bool:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            codes = [m.process.poll() for m in self.members.values() if m.process is not None]
            if any(code is not None for code in codes):
                if EXIT_ADDRESS_IN_USE in codes and "is already in use" in self.logs_tail(5):
                    return False  # a port race: `launch` picks new ports
                raise AssertionError(f"a member exited during startup ({codes}):\n{self.logs_tail()}")
            if all(self.metadata(member_id, 1.0) is not None for member_id in self.members):
                return True
            time.sleep(0.1)
        raise AssertionError(f"members did not answer within 30 s:\n{self.logs_tail()}")

    def restart(self, member_id: str) -> None:
        """Start a stopped member again on its port and wait until it answers."""
        self.start(member_id)
        member = self.members[member_id]

        def answers() -> Any | None:
            assert member.alive, f"{member_id} exited after restart:\n{self.logs_tail()}"
            return self.metadata(member_id, 1.0)

        eventually(answers, 30, f"{member_id} to answer after restart")

    def logs_tail(self, lines: int = 40) -> str:
        """Every member's process state and the end of its log (for failure messages);
        a negative status is the signal that ended it."""
        parts = []
        for member in self.members.values():
            process = member.process
            state = "not started" if process is None else f"pid {process.pid}, status {process.poll()}"
            text = ""
            if member.log_path is not None and member.log_path.exists():
                text = "\n".join(member.log_path.read_text(errors="replace").splitlines()[-lines:])
            parts.append(f"----- {member.id} ({state}) -----\n{text}")
        return "\n".join(parts)

    # -- client side

    def stub(self, member_id: str) -> Any:
        return pb_grpc.LedgerStub(self.channel(member_id))

    def peer_stub(self, member_id: str) -> Any:
        return pb_grpc.PeerStub(self.channel(member_id))

    def leader(self, timeout_s: float = ELECTION_S, exclude: tuple[str, ...] = ()) -> tuple[str, int]:
        """(id, term) of the current leader, waiting for an election if needed."""
        found = self.wait_leader(timeout_s, exclude)
        assert found is not None, f"no leader within {timeout_s} s:\n{self.logs_tail()}"
        return found

    def wait_settled(self, timeout_s: float = ELECTION_S) -> dict[str, Any]:
        """Every member's Metadata answer, once they all name the same leader and term,
        that leader is the only LEADER (a member that timed out during an election can be
        a CANDIDATE for a moment after another one won) and no member holds its vote."""

        def settled() -> dict[str, Any] | None:
            answers = {m: self.metadata(m, RPC_S) for m in self.members}
            if any(a is None for a in answers.values()):
                return None
            views = {(a.leader_id, a.term) for a in answers.values()}
            roles = sorted(a.role for a in answers.values())
            holding = any(a.vote_hold for a in answers.values())  # a new member may still catch up
            if len(views) == 1 and roles == ["FOLLOWER"] * (len(answers) - 1) + ["LEADER"] and not holding:
                return answers
            return None

        return eventually(settled, timeout_s, "one leader that every member follows", poll_s=0.1)

    def append(self, bodies: list[bytes], timeout_s: float = 20.0) -> Any:
        """Append through whoever leads (following NOT_LEADER hints); the SUCCESS answer."""

        def attempt() -> Any | None:
            leader = self.find_leader()
            if leader is None:
                return None
            with suppress(grpc.RpcError):
                answer = self.stub(leader[0]).Append(pb.AppendRequest(bodies=bodies), timeout=RPC_S)
                if answer.code == 200:
                    return answer
            return None

        return eventually(attempt, timeout_s, f"an append of {len(bodies)} bodies", poll_s=0.1)

    def committed(self, member_id: str) -> int:
        answer = self.metadata(member_id, RPC_S)
        assert answer is not None, f"{member_id} does not answer"
        return int(answer.committed_index)

    def read_all(self, member_id: str, to_index: int | None = None) -> list[tuple[int, int, bytes]]:
        """(index, term, body) of every committed entry on a member from index 0."""
        request = pb.ReadCommittedRequest(from_index=0)
        if to_index is not None:
            request.to_index = to_index
        rows: list[tuple[int, int, bytes]] = []
        for answer in self.stub(member_id).ReadCommitted(request, timeout=30):
            assert answer.code == 200, answer
            batch = columns_from_pb(answer.batch)
            rows.extend((int(batch.index[k]), int(batch.term[k]), batch.body(k)) for k in range(batch.count))
        return rows

    def wait_converged(self, members: list[str], at_least: int, timeout_s: float = 60) -> int:
        """Wait until every member's committed index is >= `at_least` and all are equal;
        returns it."""

        def check() -> int | None:
            values = {self.committed(m) for m in members}
            if len(values) == 1 and min(values) >= at_least:
                return values.pop()
            return None

        return eventually(check, timeout_s, f"{members} to commit up to >= {at_least} and agree", poll_s=0.1)


def random_body(tag: str, k: int, size: int = 64) -> bytes:
    """A unique body: the tag and sequence number, padded with random bytes."""
    head = f"{tag}-{k}:".encode()
    return head + random.randbytes(max(0, size - len(head)))
