"""Helper F1 with real server processes: two members lose their directories while the
third is down and are started with `--initial-cluster-state new`, so they found the group
again (nobody who answers knows it existed). The third comes back holding the entries it
committed in the earlier history.

Before (4735e49, measured in docs/OPERATIONS.md "Two histories of one group"): both
histories began in term 0 and the third took the new entries after its own, a log of
neither, without a word; where the terms differed, it and the leader looped COMPARE /
TRUNCATE / APPEND at about half a core each, also without a word. Now each founding has
terms of its own, the third refuses the new leader and keeps its log, both say so once,
and the two others go on writing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import E2ECluster, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

MakeCluster = Callable[..., E2ECluster]


def _bodies(cluster: E2ECluster, member_id: str) -> list[bytes]:
    return [body for _, _, body in cluster.read_all(member_id) if body]  # without NOOPs


def _log(cluster: E2ECluster, member_id: str) -> str:
    path = cluster.members[member_id].log_path
    assert isinstance(path, Path)
    return path.read_text(errors="replace")


def test_a_member_of_an_earlier_founding_keeps_its_log_and_the_others_go_on(make_cluster: MakeCluster) -> None:
    cluster = make_cluster()
    old = [b"old-%d" % k for k in range(20)]
    for body in old:
        cluster.append([body])
    cluster.wait_converged(list(cluster.members), at_least=len(old) - 1)
    for member_id in cluster.members:
        assert cluster.stop(member_id) == 0
    for member_id in ("n0", "n1"):
        cluster.wipe(member_id)
    cluster.initial_cluster_state = "new"  # the slip: the group existed
    for member_id in ("n0", "n1"):
        cluster.restart(member_id)
    new = [b"new-%d" % k for k in range(40)]
    for body in new:
        cluster.append([body])
    cluster.restart("n2")
    eventually(
        lambda: "its log is not this member's history" in _log(cluster, "n2") or None,
        60,
        "n2 to say why it does not follow the new leader",
    )
    eventually(
        lambda: any("follower n2" in _log(cluster, m) for m in ("n0", "n1")) or None,
        60,
        "the leader to say that n2 is left behind",
    )
    cluster.append([b"later"])  # the two others go on
    assert _bodies(cluster, "n2") == old  # kept: nothing truncated, nothing taken after it
    leader, _ = cluster.leader(exclude=("n2",))
    assert _bodies(cluster, leader) == [*new, b"later"]
    assert "--initial-cluster-state existing" in _log(cluster, "n2")  # the way out
