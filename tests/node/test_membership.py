"""A member's place in its group on disk (dledger.store.membership) with real threaded
nodes on real stores: the identity a founding member writes, a member that lost its disk
rejoining a running group (`initial_cluster_state="existing"`), and a damaged committed
tail cut by `repair=True` (issue 17, finding 3)."""

from __future__ import annotations

import dataclasses
import errno
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from dledger.codes import CorruptStoreError, DLedgerError, ResponseCode
from dledger.node import DLedgerNode
from dledger.store import MmapLogStore, load_checkpoint
from dledger.store.membership import derive_group_id, load_identity, load_rejoin, write_identity
from tests.e2e.harness import free_ports
from tests.node.conftest import STORE, NodeCluster, wait_until
from tests.security.test_tls_cli import dledger as run_cli

Factory = Callable[..., NodeCluster]


def _fill(cluster: NodeCluster, count: int) -> int:
    leader = cluster.leader()
    last = -1
    for k in range(count):
        last = leader.append([f"entry-{k}".encode()]).result(timeout=15)
    wait_until(lambda: all(n.status().committed_index >= last for n in cluster.nodes.values()), what="replication")
    return last


def _stop_a_follower(cluster: NodeCluster) -> tuple[str, Path]:
    """Stop a member that does not lead; its id and store directory."""
    victim = next(n for n in cluster.ids if not cluster.nodes[n].is_leader)
    cluster.stop(victim)
    return victim, cluster.base / f"dledger-{victim}"


def _repair_cut_off(cluster: NodeCluster, victim: str) -> DLedgerNode:
    """Start `victim` with `repair=True` while nobody can reach it, so that its marker
    and hold are seen before it catches up (which can take milliseconds and removes
    the marker); `cluster.net.heal()` lets it catch up."""
    cluster.net.isolate(victim, [n for n in cluster.ids if n != victim])
    return cluster.start(victim, repair=True)


def _caught_up(cluster: NodeCluster, node: DLedgerNode, index: int) -> None:
    wait_until(lambda: node.status().committed_index >= index, what="the member to catch up")
    wait_until(lambda: not node.core.elector.vote_hold.pending, what="the hold to end")
    # the elector ends the hold first and then has the marker removed: wait for both
    wait_until(lambda: node.membership.rejoin is None, what="the rejoin marker to go")


def test_founding_members_write_one_group_id(cluster_factory: Factory) -> None:
    cluster = cluster_factory()
    cluster.leader()
    ids = {load_identity(cluster.base / f"dledger-{n}") for n in cluster.ids}
    assert {i.group_id for i in ids if i} == {derive_group_id("g", cluster.ids)}
    assert len({i.incarnation for i in ids if i}) == 3
    # each asked the others first (a `founding` marker); it goes once founded or caught up
    wait_until(
        lambda: all(load_rejoin(cluster.base / f"dledger-{n}") is None for n in cluster.ids),
        what="the founding markers to go",
    )

    # each remembers that it followed (or was) a leader: a member that lost its disk learns from it
    def all_seen() -> bool:
        identities = [load_identity(cluster.base / f"dledger-{n}") for n in cluster.ids]
        return all(i is not None and i.leader_seen for i in identities)

    wait_until(all_seen, what="every member to record that it saw a leader")


def test_a_member_that_lost_its_disk_rejoins_without_voting_until_caught_up(cluster_factory: Factory) -> None:
    cluster = cluster_factory()
    last = _fill(cluster, 20)
    victim = next(n for n in cluster.ids if not cluster.nodes[n].is_leader)
    old = load_identity(cluster.base / f"dledger-{victim}")
    cluster.stop(victim)
    node_dir = cluster.base / f"dledger-{victim}"
    shutil.rmtree(node_dir)  # the disk is gone
    node = cluster.start(victim, initial_cluster_state="existing")
    assert node.core.elector.vote_hold.kind == "rejoin"
    _caught_up(cluster, node, last)
    assert node.status().vote_hold == ""
    assert load_rejoin(node_dir) is None
    new = load_identity(node_dir)
    assert old is not None and new is not None
    assert new.group_id == old.group_id and new.incarnation != old.incarnation  # adopted from the leader
    assert [e.body for e in node.get(0, last + 1)] == [e.body for e in cluster.leader().get(0, last + 1)]


def test_a_member_that_lost_its_whole_directory_and_is_started_new_rejoins(cluster_factory: Factory) -> None:
    """Identity gone too, and started with the default `new`: before, it founded again
    and voted with an empty log. It asks its peers first, finds their entries, and
    rejoins."""
    cluster = cluster_factory()
    last = _fill(cluster, 20)
    leader = cluster.leader().config.self_id
    victim = next(n for n in cluster.ids if n != leader)
    node_dir = cluster.base / f"dledger-{victim}"
    cluster.stop(victim)
    shutil.rmtree(node_dir)
    cluster.net.isolate(victim, [leader])  # it hears the other follower only, which holds the entries
    node = cluster.start(victim)  # initial_cluster_state "new"
    assert node.config.initial_cluster_state == "new"
    wait_until(lambda: node.status().vote_hold == "rejoin", what="the member to find its group")
    marker = load_rejoin(node_dir)
    assert marker is not None and not marker.founding  # a restart now starts it as a rejoin
    cluster.net.heal()
    _caught_up(cluster, node, last)
    assert load_rejoin(node_dir) is None and node.status().vote_hold == ""
    assert [e.body for e in node.get(0, last + 1)] == [e.body for e in cluster.leader().get(0, last + 1)]


def test_a_founding_member_that_found_its_group_existing_still_holds_after_a_restart(
    cluster_factory: Factory,
) -> None:
    cluster = cluster_factory()
    _fill(cluster, 3)
    leader = cluster.leader()
    victim = next(n for n in cluster.ids if n != leader.config.self_id)
    node_dir = cluster.base / f"dledger-{victim}"
    cluster.stop(victim)
    shutil.rmtree(node_dir)
    cluster.net.isolate(victim, [n for n in cluster.ids if n != victim])  # nobody answers it
    node = cluster.start(victim)
    marker = load_rejoin(node_dir)
    assert marker is not None and marker.founding and node.status().vote_hold == "founding"
    cluster.stop(victim)
    cluster.net.heal()
    node = cluster.start(victim)
    wait_until(lambda: (m := load_rejoin(node_dir)) is None or not m.founding, what="the group found to exist")
    _caught_up(cluster, node, leader.status().end_index)


def test_a_rejoining_member_still_holds_after_a_restart(cluster_factory: Factory) -> None:
    cluster = cluster_factory(1)  # alone: nobody can bring it up to date
    cluster.stop("n0")
    node_dir = cluster.base / "dledger-n0"
    shutil.rmtree(node_dir)
    node = cluster.start("n0", initial_cluster_state="existing")
    cluster.stop("n0")  # a single member never holds: the marker is what matters here
    marker = load_rejoin(node_dir)
    assert marker is not None and marker.catch_up_index == -1
    assert node.membership.identity.group_id == ""


@pytest.mark.parametrize(
    ("field", "value", "states", "message"),
    [
        ("member_id", "n1", ("new",), "store of member 'n1', not 'n2'"),
        ("group", "other", ("new", "existing"), "store of group 'other', not 'g'.*--initial-cluster-state existing"),
    ],
)
def test_a_store_of_another_member_or_group_is_refused(
    cluster_factory: Factory, field: str, value: str, states: tuple[str, ...], message: str
) -> None:
    cluster = cluster_factory()
    cluster.leader()
    cluster.stop("n2")
    node_dir = cluster.base / "dledger-n2"
    ident = load_identity(node_dir)
    assert ident is not None and (ident.member_id, ident.group) == ("n2", "g")
    write_identity(node_dir, dataclasses.replace(ident, **{field: value}))
    for state in states:  # refused, and the store's lock released each time
        with pytest.raises(DLedgerError, match=message):
            cluster.start("n2", initial_cluster_state=state)


@pytest.mark.parametrize(
    "peers",
    [
        "n2-127.0.0.1:30002",  # a list cut down to itself (a typo, `dledger cluster -n 1` on the directory)
        "n1-127.0.0.1:30001;n2-127.0.0.1:30002",
        "n0-127.0.0.1:30000;n1-127.0.0.1:30001;n2-127.0.0.1:30002;n3-127.0.0.1:30003",
    ],
)
def test_a_member_started_with_another_member_list_is_refused(cluster_factory: Factory, peers: str) -> None:
    """Helper K: a member whose peers list named only itself started as a group of one,
    elected itself and acknowledged writes (clients with the group's list found it
    too) that the group never got: lost once the list came back. Its identity holds the
    group id its founding members derived from their ids: another member list is refused.
    New addresses for the same members are not."""
    cluster = cluster_factory()
    cluster.leader()
    cluster.stop("n2")
    with pytest.raises(DLedgerError, match="founded with other members than the peers given") as err:
        cluster.start("n2", peers=peers)
    assert err.value.code == ResponseCode.ILLEGAL_MEMBER_STATE and "n2" not in cluster.nodes
    moved = "n0-127.0.0.1:31000;n1-127.0.0.1:31001;n2-127.0.0.1:31002"
    node = cluster.start("n2", peers=moved)  # the store's lock was released, and addresses may change
    wait_until(lambda: node.status().leader_id is not None, what="n2 to follow the leader")


def _damage_last_entry(node_dir: Path) -> None:
    """Flip a byte in the header of the last entry of the last data segment."""
    segment = sorted((node_dir / "data").iterdir())[-1]
    data = bytearray(segment.read_bytes())
    end = len(data.rstrip(b"\0"))
    pos = 0
    while pos < end:  # walk the entries: 4-byte magic, 4-byte size
        size = int.from_bytes(data[pos + 4 : pos + 8], "big")
        if pos + size >= end:
            break
        pos += size
    data[pos + 9] ^= 0xFF  # inside the index field: the header no longer matches
    segment.write_bytes(bytes(data))


def test_a_damaged_committed_tail_is_cut_by_repair_and_caught_up(cluster_factory: Factory) -> None:
    cluster = cluster_factory()
    last = _fill(cluster, 30)
    victim, node_dir = _stop_a_follower(cluster)
    committed = load_checkpoint(node_dir).committed
    assert committed == last
    _damage_last_entry(node_dir)
    with pytest.raises(CorruptStoreError, match="below the committed index"):
        cluster.start(victim)
    assert victim not in cluster.nodes  # nothing started
    node = _repair_cut_off(cluster, victim)
    marker = load_rejoin(node_dir)
    assert marker is not None and marker.catch_up_index == committed
    assert node.store.end_index < last  # cut back
    assert node.core.elector.vote_hold.active and node.status().vote_hold == "rejoin"
    cluster.net.heal()
    _caught_up(cluster, node, last)
    assert load_rejoin(node_dir) is None
    assert [e.body for e in node.get(0, last + 1)] == [f"entry-{k}".encode() for k in range(last + 1)]


def test_a_repair_cut_short_after_its_cut_still_leaves_the_member_holding(
    cluster_factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marker used to be written after the cut: a repair that died between the two
    (a full disk failed the marker's write, helper C; a kill) left a log cut below its
    committed index and a member free to vote. Now it is written before recovery cuts."""
    cluster = cluster_factory()
    last = _fill(cluster, 30)
    victim, node_dir = _stop_a_follower(cluster)
    committed = load_checkpoint(node_dir).committed
    _damage_last_entry(node_dir)

    def no_space(store: MmapLogStore, _reason: str) -> None:
        store.close()  # the process ends: its lock goes
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("dledger.node_store.mark_repaired", no_space)  # dies after the cut
    with pytest.raises(OSError):
        cluster.start(victim, repair=True)
    marker = load_rejoin(node_dir)
    assert marker is not None and marker.catch_up_index == committed
    monkeypatch.undo()
    node = cluster.start(victim)  # the cut log opens as it is, and the member holds
    assert node.store.end_index < last and node.status().vote_hold == "rejoin"
    _caught_up(cluster, node, last)
    assert load_rejoin(node_dir) is None


def test_a_repair_that_cuts_nothing_leaves_no_marker(cluster_factory: Factory) -> None:
    cluster = cluster_factory()
    _fill(cluster, 10)
    victim, node_dir = _stop_a_follower(cluster)
    node = cluster.start(victim, repair=True)  # nothing is damaged
    assert load_rejoin(node_dir) is None and node.status().vote_hold == ""


def test_the_server_names_repair_and_check_repair_marks_the_member(cluster_factory: Factory) -> None:
    """The CLI side of finding 3: `dledger server` refuses the damaged store with a message
    naming `--repair`; `dledger check --repair` cuts it and marks the member as rejoining."""
    cluster = cluster_factory()
    _fill(cluster, 10)
    victim, node_dir = _stop_a_follower(cluster)
    _damage_last_entry(node_dir)
    recorded = load_checkpoint(node_dir).committed
    port = free_ports(1)[0]
    refused = run_cli("server", "-i", victim, "-p", f"{victim}-127.0.0.1:{port}", "-s", str(cluster.base))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "below the committed index" in refused.stderr and "dledger server --repair" in refused.stderr
    repaired = run_cli("check", "--repair", "--yes", str(node_dir))
    assert repaired.returncode == 0, repaired.stderr
    marker = load_rejoin(node_dir)
    assert marker is not None and marker.catch_up_index == recorded
    assert load_checkpoint(node_dir).committed == recorded - 1  # the damaged last entry was cut


def test_a_damaged_checkpoint_takes_the_same_repair_path(cluster_factory: Factory) -> None:
    """Neither checkpoint file valid and a damaged entry: nothing says what is committed,
    so the member does not start; `repair=True` cuts and rejoins without a recorded index."""
    cluster = cluster_factory()
    last = _fill(cluster, 20)
    victim, node_dir = _stop_a_follower(cluster)
    for name in ("checkpoint", "checkpoint.bak"):
        (node_dir / name).write_bytes(b"\x00garbage")
    _damage_last_entry(node_dir)
    with pytest.raises(CorruptStoreError, match="no valid checkpoint"):
        cluster.start(victim)
    node = _repair_cut_off(cluster, victim)
    marker = load_rejoin(node_dir)
    assert marker is not None and marker.catch_up_index == -1
    assert node.core.elector.vote_hold.active
    cluster.net.heal()
    _caught_up(cluster, node, last)
    assert load_rejoin(node_dir) is None


def _lose_segments(cluster: NodeCluster) -> tuple[int, str, Path]:
    """Fill the log, stop a follower and delete its data and index segments; returns
    the last index filled, the follower and its directory."""
    last = _fill(cluster, 20)
    victim, node_dir = _stop_a_follower(cluster)
    for name in ("data", "index"):
        shutil.rmtree(node_dir / name)
    return last, victim, node_dir


def test_a_member_whose_log_files_are_gone_but_identity_kept_rejoins(cluster_factory: Factory) -> None:
    """Only the log was lost (data, index and checkpoint; the identity, the term and the
    snapshots stay): before, the member started as if nothing happened and its empty log
    voted for anyone, so a candidate without acknowledged entries could lead. Now it
    holds its vote (a rejoin) until a leader brought it back."""
    cluster = cluster_factory()
    last, victim, node_dir = _lose_segments(cluster)
    for name in ("checkpoint", "checkpoint.bak"):
        (node_dir / name).unlink(missing_ok=True)
    node = cluster.start(victim)  # not told `existing`: the identity tells
    marker = load_rejoin(node_dir)
    assert marker is not None and "its log is gone" in marker.reason
    assert node.core.elector.vote_hold.kind == "rejoin" and node.status().vote_hold == "rejoin"
    _caught_up(cluster, node, last)
    assert [e.body for e in node.get(0, last + 1)] == [f"entry-{k}".encode() for k in range(last + 1)]


def test_a_member_whose_currterm_is_gone_holds_its_vote_until_a_leader_brought_it_back(
    cluster_factory: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    """`currterm` and `currterm.bak` gone, the log kept (helper A): before, the member
    started in term 0 without its vote and said nothing; it could vote a second time in
    a term it had voted in. Now it holds its vote (a rejoin) and says why."""
    cluster = cluster_factory()
    last = _fill(cluster, 20)
    victim, node_dir = _stop_a_follower(cluster)
    for name in ("currterm", "currterm.bak"):
        (node_dir / name).unlink(missing_ok=True)
    with caplog.at_level("WARNING", logger="dledger.node_store"):
        node = cluster.start(victim)
    assert any("no currterm (nor currterm.bak)" in r.message for r in caplog.records)
    marker = load_rejoin(node_dir)
    assert marker is not None and "term and vote are gone" in marker.reason
    assert node.core.elector.vote_hold.kind == "rejoin" and node.status().vote_hold == "rejoin"
    _caught_up(cluster, node, last)
    assert load_rejoin(node_dir) is None and (node_dir / "currterm").exists()


def test_repair_of_a_store_whose_data_is_gone_rejoins(cluster_factory: Factory) -> None:
    """Data and index lost, the checkpoint kept: the start is refused naming --repair,
    and repair (which could not cut an empty log before: the hint was a dead end) starts
    the member empty, holding its vote until it caught up to what it had committed."""
    cluster = cluster_factory()
    last, victim, node_dir = _lose_segments(cluster)
    with pytest.raises(CorruptStoreError, match="no data segments, but entries up to"):
        cluster.start(victim)
    node = _repair_cut_off(cluster, victim)
    marker = load_rejoin(node_dir)
    assert marker is not None and marker.catch_up_index == last
    assert node.core.elector.vote_hold.kind == "rejoin"
    cluster.net.heal()
    _caught_up(cluster, node, last)
    assert [e.body for e in node.get(0, last + 1)] == [f"entry-{k}".encode() for k in range(last + 1)]


def test_an_unclean_restart_says_why_it_holds_its_vote(
    cluster_factory: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    """Helper A: the async unclean-restart hold said nothing until it ended (60 s later)."""
    cluster = cluster_factory()
    victim, node_dir = _stop_a_follower(cluster)
    (node_dir / "abort").write_bytes(b"")  # as a crashed run leaves it
    with caplog.at_level("WARNING", logger="dledger.node_store"):
        cluster.start(victim)
    [said] = [r.message for r in caplog.records if "did not end cleanly" in r.message]
    assert "holds its vote until it caught up with a leader" in said and "at most" in said
    assert "(or its abort marker does not say how: an older version's)" in said  # helper N: it said "async"


def test_a_member_keeps_the_segment_sizes_its_store_was_made_with(cluster_factory: Factory) -> None:
    """Helper K: one restart with a bigger segment size extended a lone data segment for
    good, and the member refused every leader's pushes after it (SEGMENT_SIZE_MISMATCH).
    The identity records the sizes the store was made with; a member opens it with them."""
    cluster = cluster_factory()
    _fill(cluster, 5)
    victim, node_dir = _stop_a_follower(cluster)
    made = load_identity(node_dir)
    sizes = (STORE["data_file_size"], STORE["index_file_size"])
    assert made is not None and (made.data_file_size, made.index_file_size) == sizes
    [segment] = (node_dir / "data").iterdir()
    bigger = dataclasses.replace(cluster.config(victim).store, data_file_size=2 * sizes[0])
    node = cluster.start(victim, store=bigger)
    assert node.store.config.data_file_size == sizes[0] and segment.stat().st_size == sizes[0]
    last = _fill(cluster, 5)  # it takes its leader's pushes
    wait_until(lambda: node.status().committed_index >= last, what="the member to follow")

    cluster.stop(victim)
    with segment.open("r+b") as f:
        f.truncate(sizes[0] // 2)  # a cut lone segment, and a configured size that matches it
    smaller = dataclasses.replace(bigger, data_file_size=sizes[0] // 2)
    node = cluster.start(victim, store=smaller)
    assert node.store.config.data_file_size == sizes[0] and segment.stat().st_size == sizes[0]  # extended back

    cluster.stop(victim)
    write_identity(node_dir, dataclasses.replace(made, data_file_size=0, index_file_size=0))  # an older file
    cluster.start(victim)
    again = load_identity(node_dir)
    assert again is not None and (again.data_file_size, again.index_file_size) == sizes  # recorded now
