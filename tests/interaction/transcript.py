"""A readable transcript of a scripted cluster run: role changes, truncations, commits
and the script's own steps, one line each, stamped with the simulated time."""

from __future__ import annotations

from typing import Any

from dledger.codes import ResponseCode
from dledger.raft.log import LogStore
from dledger.raft.member_state import Role
from tests.raft.cluster import Cluster


class Transcript:
    """Records what happens in `c` after every step (the cluster's `step` is wrapped).

    Lines look like `t=  130ms n1 LEADER term=2`, `t=  415ms n2 truncated 7..9` or
    `t=  500ms commit n0=12 n1=12 n2=12`.
    """

    def __init__(self, c: Cluster) -> None:
        self.c = c
        self.lines: list[str] = []
        self._seen: dict[str, tuple[Role, int, str | None, bool]] = {}
        self._hooked: set[int] = set()
        inner_step = c.step

        def step() -> None:
            inner_step()
            self.observe()

        c.step = step  # type: ignore[method-assign]
        self.observe()

    def line(self, text: str) -> None:
        """Add `text` at the current time."""
        self.lines.append(f"t={self.c.now:>5}ms {text}")

    note = line

    def _hook(self, node_id: str, store: LogStore) -> None:
        if id(store) in self._hooked:
            return
        self._hooked.add(id(store))
        truncate = store.truncate

        def recording_truncate(from_index: int) -> None:
            end = store.end_index
            truncate(from_index)
            if from_index <= end:
                self.line(f"{node_id} truncated {from_index}..{end}")

        store.truncate = recording_truncate  # type: ignore[method-assign]

    def observe(self) -> None:
        """Record every member whose role, term, leader or liveness changed."""
        for node_id, member in self.c.members.items():
            self._hook(node_id, member.store)
            ms = member.core.member_state
            state = (ms.role, ms.current_term, ms.leader_id, member.alive)
            if self._seen.get(node_id) == state:
                continue
            self._seen[node_id] = state
            if not member.alive:
                self.line(f"{node_id} down")
            elif ms.role is Role.FOLLOWER:
                self.line(f"{node_id} FOLLOWER term={ms.current_term} leader={ms.leader_id}")
            else:
                self.line(f"{node_id} {ms.role.value} term={ms.current_term}")

    def commits(self) -> None:
        """Record every member's committed index."""
        values = " ".join(f"{n}={m.core.member_state.committed_index}" for n, m in self.c.members.items())
        self.line(f"commit {values}")

    def logs(self) -> None:
        """Record every member's log as (index:term) pairs, NOOPs as `index:term*`."""
        for node_id, member in self.c.members.items():
            store = member.store
            cells = []
            for e in store.get_range(max(store.begin_index, 0), store.end_index + 1):
                cells.append(f"{e.index}:{e.term}{'*' if e.is_noop else ''}")
            self.lines.append(f"         {node_id} log {' '.join(cells) or '-'}")

    def result(self, what: str, fut: Any) -> None:
        """Record how a future ended."""
        if not fut.done():
            self.line(f"{what}: pending")
        elif fut.exception() is not None:
            self.line(f"{what}: {fut.exception().code.name}")
        else:
            value = fut.result()
            code = getattr(value, "code", None)
            self.line(f"{what}: {value if code is None else ResponseCode(code).name}")

    def text(self) -> str:
        return "\n".join(self.lines)


def expect(transcript: Transcript, expected: str) -> None:
    """Compare the transcript with an expected block (indentation and blank edges ignored)."""
    want = "\n".join(line.strip() for line in expected.strip().splitlines())
    got = "\n".join(line.strip() for line in transcript.text().splitlines())
    assert got == want, f"transcript differs; got:\n{got}"
