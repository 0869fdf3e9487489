"""Biased fault episodes: short scripted-but-random fault sequences the random simulation
starts now and then, aimed at the states where Raft's safety rules matter. Independent
random faults reach them rarely (with the Figure 8 rule removed from the commit decision,
all 240 CI seeds of the unbiased schedules passed).

- `StaleLeader` (Raft's Figure 8 family): the leader L and possibly one follower are cut
  off while L takes client appends that reach only that minority; another member M leads
  the rest, takes appends of its own and is cut off at once; the old side rejoins and
  someone (often L, with the longer log of the older term) leads a new term holding
  entries of older terms not yet committed; within a few milliseconds that leader crashes
  or is cut off, and M (its log ends in the newer term) returns. An older-term entry
  committed by counting replicas would be replaced here.
- `ShortLog`: a follower S is cut off (or its flush stalls) while the leader commits
  appends; then a member holding those entries goes down (power loss where the scenario
  has it, with a stalled flush so its unflushed tail is long; else a process crash), the
  leader is crashed or cut off, and S rejoins with its short log. A vote for S (or a
  member that lost the entries voting at once, R1) elects a leader without them.
- `LostDisk` (issue 17's finding L1, where the scenario allows it): a follower S is cut
  off while the leader L commits appends with the others; then L crashes (and stays down
  for a while), another follower W loses its disk (it comes back empty, told its group
  exists) and S rejoins. W's vote for S would elect a leader without what L and W had.

Every choice comes from the simulation's `rng`, so a seed still replays exactly. While an
episode runs it owns the partitions (the random partition, crash and power-loss faults
pause); the message weather, flush stalls, crashes inside msync and client load go on.
Each phase has a deadline, so an episode that does not reach its state just ends (healed).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING

from dledger.store.membership import load_identity

if TYPE_CHECKING:
    from tests.sim.harness import SimNode, Simulation

EPISODES_PER_SECOND = 1.0
"""How often an episode starts (when none runs): soon after the cluster is back in a state to start one."""


def leader_of(sim: Simulation, among: list[str] | None = None) -> SimNode | None:
    """The member with the highest term that believes it leads (among `among`)."""
    best = None
    for node in sim.nodes.values():
        if node.core is None or not node.core.member_state.is_leader:
            continue
        if among is not None and node.node_id not in among:
            continue
        if best is None or node.core.member_state.current_term > best.core.member_state.current_term:  # type: ignore[union-attr]
            best = node
    return best


class Episode:
    """A small state machine advanced once per step by the simulation; `step` returns
    False when it is over (the network is then healed)."""

    name = "episode"

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.rng = sim.rng
        self.ids = list(sim.nodes)
        self.phase = 0
        self.deadline = sim.now + 2000
        self.wait_steps = 0
        self.quiet: set[str] = set()  # members the simulation's clients leave alone for now

    def log(self, what: str) -> None:
        self.sim.log(f"[{self.name}] {what}")

    def cut(self, group: list[str]) -> None:
        """Partition `group` from everyone else (replaces the current partition)."""
        self.sim.net.heal()
        rest = [i for i in self.ids if i not in group]
        self.sim.net.partition(group, rest)
        self.sim.stats.partitions += 1
        self.log(f"cut {group} | {rest}")

    def appends(self, node: SimNode, requests: int) -> None:
        for _ in range(requests):
            if node.up:
                self.sim.append(node, [self.sim._body() for _ in range(self.rng.randint(1, 8))])

    def next_phase(self, ms: int) -> None:
        self.phase += 1
        self.deadline = self.sim.now + ms

    def step(self) -> bool:
        if self.sim.now >= self.deadline:
            self.log(f"phase {self.phase} ran out of time")
            return False
        return self.advance()

    def advance(self) -> bool:
        raise NotImplementedError


class StaleLeader(Episode):
    """See the module docstring (Figure 8 family)."""

    name = "stale-leader"

    def __init__(self, sim: Simulation, leader: SimNode) -> None:
        super().__init__(sim)
        self.old = leader
        minority = [leader.node_id]
        others = [i for i in self.ids if i != leader.node_id]
        if sim.scenario.majority - 1 > 1 and self.rng.random() < 0.6:
            minority.append(self.rng.choice(others))  # 5 members: the old entries reach two
        self.minority = minority
        self.cut(minority)
        self.appends(leader, self.rng.randint(1, 4))
        self.new: SimNode | None = None
        self.lead: SimNode = leader
        self.ends: dict[str, int] = {}

    def advance(self) -> bool:
        sim, rng = self.sim, self.rng
        if self.phase == 0:  # the rest elects M
            rest = [i for i in self.ids if i not in self.minority]
            m = leader_of(sim, rest)
            if m is None:
                if rng.random() < 0.1:
                    self.appends(self.old, 1)
                return True
            self.new = m
            self.appends(m, rng.randint(1, 3))
            self.wait_steps = rng.choice((0, 0, 1, 2))  # sometimes M's entries reach someone
            self.next_phase(1000)
            return True
        if self.phase == 1:  # M is cut off alone, the old side rejoins
            if self.wait_steps > 0:
                self.wait_steps -= 1
                return True
            assert self.new is not None
            self.cut([self.new.node_id])
            # the next leader gets no client entry of its own term: it pushes only older ones
            self.quiet = {i for i in self.ids if i != self.new.node_id}
            self.next_phase(2500)
            return True
        if self.phase == 2:  # someone leads a new term without M: it holds older-term entries
            assert self.new is not None
            others = [i for i in self.ids if i != self.new.node_id]
            lead = leader_of(sim, others)
            if lead is None or lead.core is None or lead.core.member_state.current_term <= self.new.max_term:
                return True
            self.lead = lead
            self.ends = {n.node_id: n.store.end_index for n in sim.nodes.values() if n.store is not None}
            self.wait_steps = -1
            self.next_phase(1000)
            return True
        if self.phase == 3:  # ... a follower receives some of them; the leader dies or is cut off; M returns
            lead = self.lead
            if self.wait_steps < 0:
                grown = [
                    n
                    for n in sim.nodes.values()
                    if n is not lead
                    and n is not self.new
                    and n.store is not None
                    and n.store.end_index > self.ends.get(n.node_id, 1 << 62)
                ]
                if not grown:
                    return True
                self.wait_steps = rng.choice((0, 1, 1, 2, 3))
            if self.wait_steps > 0:
                self.wait_steps -= 1
                return True
            self.quiet = set()
            if lead.up and rng.random() < 0.5:
                self.log(f"{lead.node_id} process crash")
                sim.stats.crashes += 1
                sim._take_down(lead, power_loss=False, restart_in=rng.choice((100, 400, 1000)))
                sim.net.heal()
            else:
                self.cut([lead.node_id])
            self.next_phase(rng.choice((800, 1500, 2500)))
            return True
        return True  # phase 4: let M's side elect, until the deadline


class ShortLog(Episode):
    """See the module docstring (members restarting with short logs)."""

    name = "short-log"

    def __init__(self, sim: Simulation, leader: SimNode) -> None:
        super().__init__(sim)
        self.leader = leader
        followers = [n for n in sim.nodes.values() if n is not leader]
        self.lagging = self.rng.choice(followers)
        self.cut([self.lagging.node_id])
        self.appends(leader, self.rng.randint(2, 5))
        for node in followers:
            if node is not self.lagging and node.up:
                node.next_flush_ms = max(node.next_flush_ms, sim.now + self.rng.choice((50, 200, 400)))
        self.next_phase(self.rng.choice((100, 300, 600)))
        self.phase = 0

    def advance(self) -> bool:
        sim, rng = self.sim, self.rng
        if self.phase == 0:
            if rng.random() < 0.15:
                self.appends(self.leader, 1)
            if sim.now + sim.STEP_MS < self.deadline:
                return True
            # the holders of the new entries go down; the lagging member rejoins
            holders = [n for n in sim.nodes.values() if n is not self.lagging and n.up]
            count = rng.randint(1, max(1, len(holders) - sim.scenario.majority + 2))
            victims = rng.sample(holders, min(count, len(holders)))
            power = sim.scenario.power_loss != "none" and len(holders) > 1
            single = sim.scenario.power_loss == "single"
            cut_leader = self.leader.up and rng.random() < 0.7
            if power and rng.random() < 0.7:
                # one member loses power (never a majority: with the others crashed as well,
                # every holder would hold until max_vote_hold_ms, issue 17 #2); the leader
                # is cut off instead of crashed
                follower = [v for v in holders if v is not self.leader]
                victims = [rng.choice(follower)] if single or len(follower) < 2 else rng.sample(follower, 2)
                victims = victims[: sim.scenario.majority - 1]
                sim.lose_power(victims, restart_in=rng.choice((0, 50, 200)))
                cut_leader = self.leader.up
            else:
                for v in victims:
                    self.log(f"{v.node_id} process crash")
                    sim.stats.crashes += 1
                    sim._take_down(v, power_loss=False, restart_in=rng.choice((0, 50, 200, 1000)))
            sim.net.heal()
            if cut_leader:
                self.cut([self.leader.node_id])
            self.next_phase(rng.choice((500, 1000, 2000)))
            return True
        return True  # phase 1: the short logs meet, until the deadline


def wipe_state(rng: random.Random, others: list[Path]) -> str:
    """How a member that lost its disk is started: `existing`, or half of the time `new`
    (an operator's slip), which the member must see through by asking the others. That
    works when the others have heard a leader (see dledger.raft.vote_hold: a lost disk
    and members that never heard one can found the group again), so only then."""
    state: str = rng.choice(("existing", "new"))
    heard = all((identity := load_identity(d)) is not None and identity.leader_seen for d in others)
    return state if heard else "existing"


class LostDisk(Episode):
    """See the module docstring (a member that lost its disk)."""

    name = "lost-disk"

    def __init__(self, sim: Simulation, leader: SimNode) -> None:
        super().__init__(sim)
        self.leader = leader
        followers = [n for n in sim.nodes.values() if n is not leader]
        self.stale = self.rng.choice(followers)
        self.cut([self.stale.node_id])
        self.appends(leader, self.rng.randint(2, 5))
        self.next_phase(self.rng.choice((100, 300, 600)))
        self.phase = 0

    def advance(self) -> bool:
        sim, rng = self.sim, self.rng
        if self.phase == 0:
            if sim.now + sim.STEP_MS < self.deadline:
                return True
            wiped = rng.choice([n for n in sim.nodes.values() if n is not self.leader and n is not self.stale])
            if self.leader.up:
                self.log(f"{self.leader.node_id} process crash")
                sim.stats.crashes += 1
                sim._take_down(self.leader, power_loss=False, restart_in=rng.choice((500, 1500, 3000)))
            if wiped.up:
                sim._take_down(wiped, power_loss=False, restart_in=rng.choice((0, 50, 200)))
            wiped.wipe(wipe_state(rng, [n.dir for n in sim.nodes.values() if n is not wiped]))
            sim.net.heal()
            self.next_phase(4000)
            return True
        return True  # phase 1: the stale member and the empty one meet, until the deadline


def start_episode(sim: Simulation) -> Episode | None:
    """Maybe start an episode (None when there is no leader to start from)."""
    leader = leader_of(sim)
    if leader is None or not all(
        n.core is not None and not n.core.elector.vote_hold.active for n in sim.nodes.values()
    ):
        return None  # everyone up and free to vote: else the episode's elections cannot happen
    kinds: list[type[StaleLeader | ShortLog | LostDisk]] = [StaleLeader, ShortLog]
    if sim.scenario.disk_loss:
        kinds.append(LostDisk)
    episode = sim.rng.choice(kinds)(sim, leader)
    episode.log("starts")
    return episode
