"""The `abort` marker: a node knows at startup whether its last run ended cleanly, and
after an unclean end with async flush it holds its vote (dledger.raft.vote_hold)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dledger.config import DLedgerConfig, member_store_config
from dledger.node import DLedgerNode
from dledger.store.abort_marker import ABORT_FILE, AbortMarker
from dledger.store.membership import clear_rejoin

pytestmark = pytest.mark.unit

PEERS3 = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"


def test_the_marker_tells_a_clean_end_from_an_unclean_one(tmp_path: Path) -> None:
    marker = AbortMarker(tmp_path / "dledger-n0")
    assert marker.arm() is False  # a new member
    assert marker.path.exists()
    assert AbortMarker(tmp_path / "dledger-n0").arm() is True  # started again without clear()
    marker.clear()
    assert not marker.path.exists()
    marker.clear()  # idempotent
    assert marker.arm() is False


@pytest.mark.parametrize(
    ("crashed", "then", "may_have_lost"),
    [("async", "sync", True), ("sync", "async", False), ("sync", "sync", False), ("async", "async", True)],
)
def test_the_crashed_runs_flush_mode_decides_not_the_next_ones(
    tmp_path: Path, crashed: str, then: str, may_have_lost: bool
) -> None:
    """Helper K: the hold after a crash followed the new run's flush mode, so a member
    that crashed in async mode (and may have lost acknowledged entries) and was restarted
    with --flush-mode sync did not hold its vote."""
    AbortMarker(tmp_path, crashed).arm()  # the run that crashes: no clear()
    assert AbortMarker(tmp_path, then).arm() is may_have_lost


def test_a_marker_that_names_no_flush_mode_counts_as_async(tmp_path: Path) -> None:
    (tmp_path / ABORT_FILE).write_bytes(b"")  # an older version's, or cut short by the crash
    assert AbortMarker(tmp_path, "sync").arm() is True
    (tmp_path / ABORT_FILE).write_bytes(b"flushMode=sy")
    assert AbortMarker(tmp_path, "sync").arm() is True


def _node(tmp_path: Path, flush_mode: str = "async") -> DLedgerNode:
    config = DLedgerConfig(
        group="g",
        self_id="n0",
        peers=PEERS3,
        store_base_dir=str(tmp_path),
        store=member_store_config(flush_mode=flush_mode, data_file_size=1 << 20, index_file_size=32 * 4096),
    )
    return DLedgerNode(config)


@pytest.mark.parametrize(("flush_mode", "holds"), [("async", True), ("sync", False)])
def test_a_node_holds_its_vote_after_an_unclean_end_in_async_mode(tmp_path: Path, flush_mode: str, holds: bool) -> None:
    first = _node(tmp_path, flush_mode)
    assert first.core.elector.vote_hold.kind == "founding"  # a new member asks its peers first
    marker = tmp_path / "dledger-n0" / ABORT_FILE
    assert marker.exists()
    first.shutdown()
    assert not marker.exists()  # a clean end
    clear_rejoin(tmp_path / "dledger-n0")  # as if it had founded the group with its peers

    clean = _node(tmp_path, flush_mode)
    assert not clean.core.elector.vote_hold.active
    clean.store.close()  # the process dies: no shutdown(), the marker stays

    after_crash = _node(tmp_path, flush_mode)
    try:
        assert after_crash.core.elector.vote_hold.active is holds
    finally:
        after_crash.shutdown()
    assert not marker.exists()


def test_a_member_that_crashed_in_async_mode_holds_when_restarted_in_sync_mode(tmp_path: Path) -> None:
    first = _node(tmp_path, "async")
    first.shutdown()
    clear_rejoin(tmp_path / "dledger-n0")  # as if it had founded the group with its peers
    crashed = _node(tmp_path, "async")
    crashed.store.close()  # the process dies in async mode
    after = _node(tmp_path, "sync")
    try:
        assert after.core.elector.vote_hold.active and after.core.elector.vote_hold.kind == "unclean"
    finally:
        after.shutdown()
