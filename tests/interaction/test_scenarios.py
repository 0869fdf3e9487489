"""Scripted cluster scenarios whose expected outcome is a readable transcript (see
transcript.py): election, replication, conflicting logs truncated, leader step-down,
partition and heal, leadership transfer. Deterministic: ManualClock, fixed seeds, the
in-memory network; a change in behaviour shows up as a changed line."""

from __future__ import annotations

import pytest

from dledger.codes import DLedgerError
from tests.interaction.transcript import Transcript, expect
from tests.raft.cluster import Cluster

pytestmark = pytest.mark.interaction


def test_election() -> None:
    c = Cluster(3, seed=1)
    t = Transcript(c)
    c.elect()
    c.run_for(1000)  # heartbeats keep it stable
    t.commits()
    expect(
        t,
        """
        t=    0ms n0 CANDIDATE term=0
        t=    0ms n1 CANDIDATE term=0
        t=    0ms n2 CANDIDATE term=0
        t=   90ms n1 CANDIDATE term=1
        t=  100ms n0 CANDIDATE term=1
        t=  100ms n2 CANDIDATE term=1
        t=  125ms n1 LEADER term=1
        t=  135ms n0 FOLLOWER term=1 leader=n1
        t=  135ms n2 FOLLOWER term=1 leader=n1
        t= 1135ms commit n0=-1 n1=-1 n2=-1
    """,
    )


def test_replication() -> None:
    c = Cluster(3, seed=2)
    t = Transcript(c)
    leader = c.elect()
    t.note(f"append 3 entries to {leader}, then a batch of 5")
    f1 = c.append(b"a", b"b", b"c")
    f2 = c.append(*[b"x"] * 5)
    c.run_until(lambda: f1.done() and f2.done())
    t.result("first append", f1)
    t.result("second append", f2)
    c.run_for(100)
    t.commits()
    t.logs()
    expect(
        t,
        """
        t=    0ms n0 CANDIDATE term=0
        t=    0ms n1 CANDIDATE term=0
        t=    0ms n2 CANDIDATE term=0
        t=   65ms n2 CANDIDATE term=1
        t=   70ms n1 CANDIDATE term=1
        t=   75ms n0 CANDIDATE term=1
        t=   85ms n1 LEADER term=1
        t=   95ms n0 FOLLOWER term=1 leader=n1
        t=   95ms n2 FOLLOWER term=1 leader=n1
        t=   95ms append 3 entries to n1, then a batch of 5
        t=  145ms first append: 2
        t=  145ms second append: 7
        t=  245ms commit n0=7 n1=7 n2=7
                 n0 log 0:1 1:1 2:1 3:1 4:1 5:1 6:1 7:1
                 n1 log 0:1 1:1 2:1 3:1 4:1 5:1 6:1 7:1
                 n2 log 0:1 1:1 2:1 3:1 4:1 5:1 6:1 7:1
    """,
    )


def test_conflicting_logs_truncated() -> None:
    c = Cluster(3, seed=6)
    t = Transcript(c)
    old = c.elect()
    f = c.append(b"committed")
    c.run_until(f.done)
    c.run_for(100)
    t.note(f"isolate {old}; it appends 2 entries nobody receives")
    c.net.isolate(old)
    lost = [c.append(b"lost-1", via=old), c.append(b"lost-2", via=old)]
    c.run_until(lambda: c.leader() not in (None, old))
    t.note("append 3 entries to the new leader")
    f2 = c.append(b"new-1", b"new-2", b"new-3")
    c.run_until(f2.done)
    t.logs()
    t.note("heal")
    c.net.heal()
    c.run_until(
        lambda: (
            len({c.core(n).member_state.committed_index for n in c.ids}) == 1 and c.core(old).member_state.is_follower
        )
    )
    t.result("lost-1", lost[0])
    t.result("lost-2", lost[1])
    t.commits()
    t.logs()
    expect(
        t,
        """
        t=    0ms n0 CANDIDATE term=0
        t=    0ms n1 CANDIDATE term=0
        t=    0ms n2 CANDIDATE term=0
        t=   90ms n1 CANDIDATE term=1
        t=   90ms n2 CANDIDATE term=1
        t=  100ms n0 CANDIDATE term=1
        t=  125ms n1 LEADER term=1
        t=  135ms n0 FOLLOWER term=1 leader=n1
        t=  135ms n2 FOLLOWER term=1 leader=n1
        t=  285ms isolate n1; it appends 2 entries nobody receives
        t=  540ms n0 CANDIDATE term=1
        t=  540ms n2 CANDIDATE term=1
        t=  545ms n1 CANDIDATE term=1
        t=  560ms n2 CANDIDATE term=2
        t=  570ms n0 CANDIDATE term=2
        t=  595ms n2 LEADER term=2
        t=  595ms append 3 entries to the new leader
        t=  605ms n0 FOLLOWER term=2 leader=n2
                 n0 log 0:1 1:2 2:2 3:2
                 n1 log 0:1 1:1 2:1
                 n2 log 0:1 1:2 2:2 3:2
        t=  655ms heal
        t=  710ms n1 CANDIDATE term=2
        t=  805ms n1 FOLLOWER term=2 leader=n2
        t=  850ms n1 truncated 1..2
        t=  900ms lost-1: TERM_CHANGED
        t=  900ms lost-2: TERM_CHANGED
        t=  900ms commit n0=3 n1=3 n2=3
                 n0 log 0:1 1:2 2:2 3:2
                 n1 log 0:1 1:2 2:2 3:2
                 n2 log 0:1 1:2 2:2 3:2
    """,
    )


def test_leader_step_down() -> None:
    c = Cluster(3, seed=3)
    t = Transcript(c)
    old = c.elect()
    others = [n for n in c.ids if n != old]
    t.note(f"cut {old} off from {' '.join(others)}")
    c.net.isolate(old)
    pending = c.append(b"never", via=old)
    c.run_until(lambda: c.core(old).member_state.is_candidate and c.leader() not in (None, old))
    t.result("append on the cut-off leader", pending)
    t.note("heal")
    c.net.heal()
    c.run_until(lambda: c.core(old).member_state.is_follower)
    c.run_for(300)
    t.commits()
    expect(
        t,
        """
        t=    0ms n0 CANDIDATE term=0
        t=    0ms n1 CANDIDATE term=0
        t=    0ms n2 CANDIDATE term=0
        t=   85ms n0 CANDIDATE term=1
        t=   95ms n1 CANDIDATE term=1
        t=   95ms n2 CANDIDATE term=1
        t=  120ms n0 LEADER term=1
        t=  130ms n1 FOLLOWER term=1 leader=n0
        t=  130ms n2 FOLLOWER term=1 leader=n0
        t=  130ms cut n0 off from n1 n2
        t=  425ms n0 CANDIDATE term=1
        t=  435ms n1 CANDIDATE term=1
        t=  435ms n2 CANDIDATE term=1
        t=  665ms n1 CANDIDATE term=2
        t=  675ms n2 CANDIDATE term=2
        t=  700ms n1 LEADER term=2
        t=  700ms append on the cut-off leader: TERM_CHANGED
        t=  700ms heal
        t=  710ms n2 FOLLOWER term=2 leader=n1
        t=  715ms n0 CANDIDATE term=2
        t=  810ms n0 FOLLOWER term=2 leader=n1
        t=  855ms n0 truncated 0..0
        t= 1110ms commit n0=-1 n1=-1 n2=-1
    """,
    )


def test_partition_and_heal() -> None:
    c = Cluster(5, seed=4)
    t = Transcript(c)
    leader = c.elect()
    f = c.append(b"before")
    c.run_until(f.done)
    minority = [leader, next(n for n in c.ids if n != leader)]
    majority = [n for n in c.ids if n not in minority]
    t.note(f"partition {' '.join(minority)} | {' '.join(majority)}")
    c.net.partition(minority, majority)
    stuck = c.append(b"minority", via=leader)
    c.run_until(lambda: c.leader() in majority)
    ok = c.append(b"majority")
    c.run_until(ok.done)
    t.result("append in the minority", stuck)
    t.result("append in the majority", ok)
    t.commits()
    t.note("heal")
    c.net.heal()
    c.run_until(lambda: len({c.core(n).member_state.committed_index for n in c.ids}) == 1 and c._all_follow())
    t.result("append in the minority", stuck)
    t.commits()
    t.logs()
    expect(
        t,
        """
        t=    0ms n0 CANDIDATE term=0
        t=    0ms n1 CANDIDATE term=0
        t=    0ms n2 CANDIDATE term=0
        t=    0ms n3 CANDIDATE term=0
        t=    0ms n4 CANDIDATE term=0
        t=   85ms n1 CANDIDATE term=1
        t=   95ms n0 CANDIDATE term=1
        t=   95ms n2 CANDIDATE term=1
        t=   95ms n3 CANDIDATE term=1
        t=   95ms n4 CANDIDATE term=1
        t=  120ms n1 LEADER term=1
        t=  130ms n0 FOLLOWER term=1 leader=n1
        t=  130ms n2 FOLLOWER term=1 leader=n1
        t=  130ms n3 FOLLOWER term=1 leader=n1
        t=  130ms n4 FOLLOWER term=1 leader=n1
        t=  180ms partition n1 n0 | n2 n3 n4
        t=  435ms n2 CANDIDATE term=1
        t=  435ms n3 CANDIDATE term=1
        t=  435ms n4 CANDIDATE term=1
        t=  440ms n1 CANDIDATE term=1
        t=  605ms n2 CANDIDATE term=2
        t=  615ms n3 CANDIDATE term=2
        t=  615ms n4 CANDIDATE term=2
        t=  640ms n2 LEADER term=2
        t=  650ms n3 FOLLOWER term=2 leader=n2
        t=  650ms n4 FOLLOWER term=2 leader=n2
        t=  685ms n0 CANDIDATE term=1
        t=  700ms append in the minority: TERM_CHANGED
        t=  700ms append in the majority: 2
        t=  700ms commit n0=0 n1=0 n2=2 n3=-1 n4=-1
        t=  700ms heal
        t=  755ms n0 CANDIDATE term=2
        t=  755ms n1 CANDIDATE term=2
        t=  850ms n0 FOLLOWER term=2 leader=n2
        t=  850ms n1 FOLLOWER term=2 leader=n2
        t=  895ms n0 truncated 1..1
        t=  895ms n1 truncated 1..1
        t=  915ms append in the minority: TERM_CHANGED
        t=  915ms commit n0=2 n1=2 n2=2 n3=2 n4=2
                 n0 log 0:1 1:2* 2:2
                 n1 log 0:1 1:2* 2:2
                 n2 log 0:1 1:2* 2:2
                 n3 log 0:1 1:2* 2:2
                 n4 log 0:1 1:2* 2:2
    """,
    )


def test_leadership_transfer() -> None:
    c = Cluster(3, seed=5)
    t = Transcript(c)
    leader = c.elect()
    f = c.append(b"a", b"b")
    c.run_until(f.done)
    c.run_for(100)
    transferee = next(n for n in c.ids if n != leader)
    t.note(f"transfer {leader} -> {transferee}")
    fut = c.core(leader).leadership_transfer(transferee, c.now)
    try:
        c.append(b"refused")
    except DLedgerError as exc:
        t.note(f"append during the transfer: {exc.code.name}")
    c.run_until(fut.done)
    t.result("transfer", fut)
    f2 = c.append(b"c")
    c.run_until(f2.done)
    c.run_for(100)
    t.commits()
    t.logs()
    expect(
        t,
        """
        t=    0ms n0 CANDIDATE term=0
        t=    0ms n1 CANDIDATE term=0
        t=    0ms n2 CANDIDATE term=0
        t=  100ms n2 CANDIDATE term=1
        t=  105ms n1 CANDIDATE term=1
        t=  110ms n0 CANDIDATE term=1
        t=  120ms n1 LEADER term=1
        t=  130ms n0 FOLLOWER term=1 leader=n1
        t=  130ms n2 FOLLOWER term=1 leader=n1
        t=  280ms transfer n1 -> n0
        t=  280ms append during the transfer: LEADER_TRANSFERRING
        t=  290ms n0 CANDIDATE term=2
        t=  295ms n1 CANDIDATE term=1
        t=  300ms n2 CANDIDATE term=1
        t=  305ms n1 CANDIDATE term=2
        t=  305ms n2 CANDIDATE term=2
        t=  330ms n0 LEADER term=2
        t=  335ms transfer: SUCCESS
        t=  340ms n1 FOLLOWER term=2 leader=n0
        t=  340ms n2 FOLLOWER term=2 leader=n0
        t=  490ms commit n0=2 n1=2 n2=2
                 n0 log 0:1 1:1 2:2
                 n1 log 0:1 1:1 2:2
                 n2 log 0:1 1:1 2:2
    """,
    )
