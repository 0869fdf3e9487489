"""The fault schedules of the chaos suite. Each runs against a launched cluster with the
workload going, records its faults in the history (`measure=True` where unavailability
counts from) and leaves every member it could bring back running.

- `leader-kill`: SIGKILL the leader, restart it `down_s` later (each round).
- `majority-kill`: SIGKILL the leader and a follower, restart both `down_s` later.
- `double-kill` (issue 17, finding 2): SIGKILL leader A, restart it 2 s later; once a
  new leader B leads (a term above A's; A again if it won after its restart), SIGKILL B
  and restart it 2 s later.
- `sigstop`: SIGSTOP the leader for `stop_s`, then SIGCONT.
- `wipe-rejoin` (issue 17, finding 1): 100 acks; SIGSTOP follower S; 300 more acks;
  SIGKILL leader L and follower W; delete W's node directory; SIGCONT S; start W with an
  empty store; then start L again.
- `wipe-new`: the same, but W is started with `--initial-cluster-state new`, as if its
  group were new (an operator's slip): it must find out from its peers that the group
  exists, and rejoin.
- `torn-tail` (issue 17, finding 3): SIGKILL the leader, overwrite its last data
  segment from below the checkpoint's committed entry to the end, restart it
  (`--repair` when the server has it): it must come back.
- `partition-leader`: cut the leader off from both followers for `stop_s` (namespaces).
- `partition-bridge`: cut the leader from one follower; the other sees both halves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.chaos.history import History
from tests.chaos.netns import Network
from tests.chaos.procs import ChaosCluster
from tests.chaos.workload import Workload

ELECTION_WAIT_S = 120.0
"""How long a schedule waits for a leader it needs (a loaded 2-core machine)."""
ACK_WAIT_S = 120.0


@dataclass(frozen=True)
class Settings:
    """Durations of a run (seconds) and how often a schedule repeats its fault."""

    run_s: float = 4.0
    """Load before each fault."""
    down_s: float = 2.0
    """How long a killed member stays down."""
    stop_s: float = 5.0
    """How long a SIGSTOP or a partition lasts (above the 1.5 s election timeout)."""
    rounds: int = 1
    settle_s: float = 3.0
    """Load after the last fault, before the final read."""


@dataclass
class Context:
    """What a schedule acts on."""

    cluster: ChaosCluster
    workload: Workload
    history: History
    settings: Settings
    network: Network | None = None

    def leader(self, exclude: tuple[str, ...] = ()) -> str:
        """The current leader (waiting for one)."""
        found = self.cluster.wait_leader(ELECTION_WAIT_S, exclude)
        if found is None:
            raise ScheduleError(f"no leader (other than {exclude}) within {ELECTION_WAIT_S:.0f} s")
        return found[0]

    def leader_and_term(self) -> tuple[str, int]:
        """The current leader and its term (waiting for one)."""
        found = self.cluster.wait_leader(ELECTION_WAIT_S)
        if found is None:
            raise ScheduleError(f"no leader within {ELECTION_WAIT_S:.0f} s")
        return found

    def leader_after(self, term: int) -> str:
        """The first leader of a term above `term` (any member, the old leader too)."""
        deadline = time.monotonic() + ELECTION_WAIT_S
        while time.monotonic() < deadline:
            found = self.cluster.find_leader()
            if found is not None and found[1] > term:
                return found[0]
            time.sleep(0.05)
        raise ScheduleError(f"no leader of a term above {term} within {ELECTION_WAIT_S:.0f} s")

    def followers(self, leader: str) -> list[str]:
        """The other members, in id order."""
        return [m for m in self.cluster.members if m != leader]

    def load(self, seconds: float) -> None:
        """Let the workload run (this paces the faults)."""
        time.sleep(seconds)


class ScheduleError(RuntimeError):
    """A schedule could not go on (recorded in the history; the run's verdict fails)."""


def leader_kill(ctx: Context) -> None:
    for _ in range(ctx.settings.rounds):
        ctx.load(ctx.settings.run_s)
        leader = ctx.leader()
        ctx.cluster.sigkill(leader, measure=True)
        ctx.load(ctx.settings.down_s)
        ctx.cluster.restart(leader)


def majority_kill(ctx: Context) -> None:
    for _ in range(ctx.settings.rounds):
        ctx.load(ctx.settings.run_s)
        leader = ctx.leader()
        follower = ctx.followers(leader)[0]
        ctx.cluster.sigkill(leader)
        ctx.cluster.sigkill(follower)
        ctx.load(ctx.settings.down_s)
        ctx.cluster.restart(leader)
        ctx.cluster.restart(follower, measure=True)


def double_kill(ctx: Context) -> None:
    for _ in range(ctx.settings.rounds):
        ctx.load(ctx.settings.run_s)
        first, term = ctx.leader_and_term()
        ctx.cluster.sigkill(first, measure=True)
        ctx.load(2.0)
        ctx.cluster.restart(first)
        second = ctx.leader_after(term)  # A itself when it won again after its restart
        ctx.cluster.sigkill(second, measure=True)
        ctx.load(2.0)
        ctx.cluster.restart(second, measure=True)


def sigstop(ctx: Context) -> None:
    for _ in range(ctx.settings.rounds):
        ctx.load(ctx.settings.run_s)
        leader = ctx.leader()
        ctx.cluster.pause(leader, measure=True)
        ctx.load(ctx.settings.stop_s)
        ctx.cluster.resume(leader)


def wipe_rejoin(ctx: Context, state: str = "existing") -> None:
    """Issue 17, finding 1, step by step (the 300 entries L and W acknowledged while S was
    stopped must survive S's bid for leadership with the wiped W's vote); W is started
    with `--initial-cluster-state` `state`."""
    if not ctx.workload.wait_acked(100, ACK_WAIT_S):
        raise ScheduleError("100 appends were not acknowledged")
    leader = ctx.leader()
    stale, wiped = ctx.followers(leader)
    ctx.cluster.pause(stale)
    if not ctx.workload.wait_acked(300, ACK_WAIT_S):
        raise ScheduleError("300 appends were not acknowledged with one follower stopped")
    ctx.cluster.sigkill(leader)
    ctx.cluster.sigkill(wiped)
    ctx.cluster.wipe(wiped)
    if state == "new":
        ctx.cluster.found_next.add(wiped)
    ctx.cluster.resume(stale)
    ctx.cluster.restart(wiped)
    elected = ctx.cluster.wait_leader(ctx.settings.stop_s * 2)  # S may win here with W's vote (today's bug)
    ctx.history.event(f"leader before {leader} is back: {elected[0] if elected else 'none'}")
    ctx.cluster.restart(leader, measure=True)


def torn_tail(ctx: Context) -> None:
    for round_ in range(ctx.settings.rounds):
        ctx.load(ctx.settings.run_s)
        leader = ctx.leader()
        ctx.cluster.sigkill(leader, measure=True)
        ctx.cluster.tear_tail(leader, seed=round_)
        if not ctx.cluster.restart(leader):
            raise ScheduleError(f"{leader} did not come back after its torn tail")


def _partition(ctx: Context, pairs: Callable[[str, list[str]], list[tuple[str, str]]], what: str) -> None:
    assert ctx.network is not None, "a partition schedule needs the network namespaces"
    for _ in range(ctx.settings.rounds):
        ctx.load(ctx.settings.run_s)
        leader = ctx.leader()
        cut = pairs(leader, ctx.followers(leader))
        ctx.network.partition(cut)
        ctx.history.event(f"partition ({what}): drop {cut}", measure=True)
        ctx.load(ctx.settings.stop_s)
        ctx.network.heal()
        ctx.history.event("heal", measure=True)


def partition_leader(ctx: Context) -> None:
    _partition(ctx, lambda leader, others: [(leader, o) for o in others], "isolated leader")


def partition_bridge(ctx: Context) -> None:
    _partition(ctx, lambda leader, others: [(leader, others[1])], "bridge: the first follower sees both halves")


SCHEDULES: dict[str, Callable[[Context], None]] = {
    "leader-kill": leader_kill,
    "majority-kill": majority_kill,
    "double-kill": double_kill,
    "sigstop": sigstop,
    "wipe-rejoin": wipe_rejoin,
    "wipe-new": lambda ctx: wipe_rejoin(ctx, "new"),
    "torn-tail": torn_tail,
    "partition-leader": partition_leader,
    "partition-bridge": partition_bridge,
}
NEEDS_NETWORK = frozenset({"partition-leader", "partition-bridge"})
NEEDS_FLAG = {"wipe-rejoin": "--initial-cluster-state", "wipe-new": "--initial-cluster-state", "torn-tail": "--repair"}
"""Schedules that lose data or stay down on a server without these options (issue 17)."""
