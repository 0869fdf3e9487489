"""A leader whose store failed (a failed msync: it takes no write until reopened) hands
leadership to the follower closest to its log, and a member whose store failed does not
stand for election. Before, such a leader kept leading while every append failed with
DISK_ERROR, for as long as it ran, though two healthy members were there (helper C's
full-disk sweep, where a failed checkpoint write failed the store)."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from dledger._native import impl
from dledger.codes import DLedgerError, ResponseCode
from dledger.raft.member_state import Role
from dledger.store.mmap_store import MmapLogStore
from tests.raft.cluster import Cluster, MmapStores

pytestmark = pytest.mark.interaction


def fail_store(cluster: Cluster, node_id: str) -> None:
    store = cluster.core(node_id).member_state.store
    assert isinstance(store, MmapLogStore)
    store._fail(OSError(errno.EIO, "Input/output error"))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_leader_whose_store_failed_hands_leadership_over(
    tmp_path: Path, seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = Cluster(3, seed=seed, stores=MmapStores(tmp_path))
    try:
        old = cluster.elect()
        first = cluster.append(b"before")
        cluster.run_until(first.done)
        with caplog.at_level(logging.ERROR, logger="dledger.raft.transfer"):
            fail_store(cluster, old)
            failed_in = cluster.core(old).member_state.current_term
            cluster.run_until(lambda: cluster.leader() not in (None, old))
        new = cluster.leader()
        assert new is not None and cluster.role(old) is not Role.LEADER
        assert [r.getMessage() for r in caplog.records if r.name == "dledger.raft.transfer"] == [
            f"{old}: its store failed ([Errno 5] Input/output error): hands leadership over to {new}"
        ]
        after = cluster.append(b"after")  # the two healthy members commit it
        cluster.run_until(after.done)
        assert cluster.bodies(new)[-2:] == [b"before", b"after"]
        cluster.run_for(5_000)  # the failed member never stands, so it never leads again
        assert cluster.leader() == new
        term, vote = cluster.core(old).member_state.term_store.load()
        assert vote != old or term == failed_in  # nor voted for itself after its store failed
    finally:
        cluster.close()


def test_appends_to_a_leader_whose_store_failed_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    """Until it has handed over, such a leader refused appends with DISK_ERROR, which
    clients take as an unknown outcome; nothing is written, so the refusal is definite:
    LEADER_TRANSFERRING, which clients retry."""
    cluster = Cluster(3, seed=1, stores=MmapStores(tmp_path))
    try:
        leader = cluster.elect()
        fail_store(cluster, leader)
        core = cluster.core(leader)
        end = core.store.end_index
        with pytest.raises(DLedgerError) as info:
            core.append_requests([[b"x"]], cluster.now)
        assert info.value.code == ResponseCode.LEADER_TRANSFERRING and "its store failed" in str(info.value)
        assert core.store.end_index == end
    finally:
        cluster.close()


@pytest.mark.parametrize("seed", range(6))
def test_a_follower_whose_store_failed_does_not_stand(tmp_path: Path, seed: int) -> None:
    """The leader dies; of its two followers only the healthy one may stand (without the
    rule the failed one won in some of these seeds, and led a group that took no write)."""
    cluster = Cluster(3, seed=seed, stores=MmapStores(tmp_path))
    try:
        leader = cluster.elect()
        failed, healthy = (m for m in cluster.ids if m != leader)
        fail_store(cluster, failed)
        cluster.kill(leader)
        terms = cluster.core(failed).member_state.term_store
        stood = []
        cluster.run_until(lambda: stood.append(terms.load()[1] == failed) or cluster.leader() is not None)
        assert cluster.leader() == healthy and not any(stood)  # it never voted for itself
    finally:
        cluster.close()


def test_a_batch_the_store_fails_half_way_is_cut_back(tmp_path: Path) -> None:
    """No room for the next segment half way through a coalesced batch left its first
    entries appended, and they replicated and committed, while every client of the batch
    was told DISK_FULL, which clients take as "nothing appended" (a retry duplicated
    them). What the failed call appended is now cut back before anything is pushed."""
    from dledger.codes import DLedgerError, ResponseCode

    cluster = Cluster(3, seed=5, stores=MmapStores(tmp_path))
    try:
        leader = cluster.elect()
        store = cluster.core(leader).member_state.store
        end = store.end_index
        real = store.append_many

        def half_then_full(bodies: list[bytes], magic: int = 1) -> int:
            real(bodies[: len(bodies) // 2], magic)
            raise DLedgerError(ResponseCode.DISK_FULL, "no space to create segment")

        store.append_many = half_then_full  # type: ignore[method-assign]
        with pytest.raises(DLedgerError) as err:
            cluster.members[leader].driver.append_requests([[b"a", b"b"], [b"c", b"d"]], cluster.now)
        assert err.value.code == ResponseCode.DISK_FULL and store.end_index == end
        store.append_many = real  # type: ignore[method-assign]
        cluster.append(b"after")
        cluster.run_until(lambda: all(cluster.bodies(n)[-1:] == [b"after"] for n in cluster.ids))
        assert all(b"a" not in cluster.bodies(n) and b"b" not in cluster.bodies(n) for n in cluster.ids)
    finally:
        cluster.close()


def test_a_batch_that_cannot_be_cut_back_is_an_unknown_outcome(tmp_path: Path) -> None:
    """When the cut-back fails too, the prefix may still commit: the error is DISK_ERROR,
    which clients take as "outcome unknown", never DISK_FULL ("nothing appended")."""
    cluster = Cluster(3, seed=6, stores=MmapStores(tmp_path))
    try:
        leader = cluster.elect()
        store = cluster.core(leader).member_state.store
        real = store.append_many

        def half_then_full(bodies: list[bytes], magic: int = 1) -> int:
            real(bodies[: len(bodies) // 2], magic)
            raise DLedgerError(ResponseCode.DISK_FULL, "no space to create segment")

        def no_truncate(_from_index: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        store.append_many = half_then_full  # type: ignore[method-assign]
        store.truncate = no_truncate  # type: ignore[method-assign]
        with pytest.raises(DLedgerError) as err:
            cluster.members[leader].driver.append_requests([[b"a", b"b"]], cluster.now)
        assert err.value.code == ResponseCode.DISK_ERROR
        assert "the entries appended before it could not be cut back" in str(err.value)
    finally:
        cluster.close()


def fill_disk(cluster: Cluster, node_id: str) -> None:
    store = cluster.core(node_id).member_state.store
    assert isinstance(store, MmapLogStore)
    store.state = impl.STATE_DISK_FULL  # what the disk check sets above 90 % (dledger.store.clean)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_leader_whose_disk_is_full_hands_leadership_to_a_follower_with_space(tmp_path: Path, seed: int) -> None:
    """Such a leader kept leading and every append got DISK_FULL, though its followers
    had space (helper G #8). A follower whose disk is full refuses to take over."""
    cluster = Cluster(3, seed=seed, stores=MmapStores(tmp_path))
    try:
        old = cluster.elect()
        full_follower, spacious = (m for m in cluster.ids if m != old)
        fill_disk(cluster, full_follower)
        fill_disk(cluster, old)
        cluster.run_until(lambda: cluster.leader() not in (None, old))
        assert cluster.leader() == spacious
        cluster.core(full_follower).member_state.store.state = impl.STATE_OK  # space came back there
        after = cluster.append(b"after")  # the two members with space commit it
        cluster.run_until(after.done)
        assert cluster.bodies(spacious)[-1:] == [b"after"]
    finally:
        cluster.close()


def test_a_group_whose_every_disk_is_full_keeps_its_leader(tmp_path: Path) -> None:
    cluster = Cluster(3, seed=3, stores=MmapStores(tmp_path))
    try:
        leader = cluster.elect()
        term = cluster.core(leader).member_state.current_term
        for member in cluster.ids:
            fill_disk(cluster, member)
        cluster.run_for(5_000)
        assert cluster.leader() == leader and cluster.core(leader).member_state.current_term == term
        with pytest.raises(DLedgerError) as full:
            cluster.core(leader).append_requests([[b"x"]], cluster.now)
        assert full.value.code == ResponseCode.DISK_FULL
    finally:
        cluster.close()
