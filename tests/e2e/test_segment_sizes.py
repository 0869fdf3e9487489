"""Segment sizes with real server processes (helper B's report).

- A member's store keeps the segment sizes of its files when the server is started
  with other ones: before, `dledger server` (1 GiB by default) on a store `dledger
  cluster` made (64 MiB) refused to start, pointing at `--repair`, or grew a lone
  segment to 1 GiB, after which `dledger cluster` could not start that member.
- A new member given another size than the group's (a replaced disk started with the
  defaults) is refused by the leader's first push, and both say why. Before, its
  positions matched the leader's until the leader's first segment end, then the two
  looped without a word at ~0.4 of a core each, and a leader of another size committed
  nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import E2ECluster, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

MakeCluster = Callable[..., E2ECluster]
MIB = 1 << 20


def _log(cluster: E2ECluster, member_id: str) -> str:
    path = cluster.members[member_id].log_path
    assert isinstance(path, Path)
    return path.read_text(errors="replace")


def _data_sizes(cluster: E2ECluster, member_id: str) -> set[int]:
    data = cluster.store_base_dir / f"dledger-{member_id}" / "data"
    return {f.stat().st_size for f in data.iterdir()}


def test_stores_keep_their_sizes_and_a_member_of_another_size_is_refused(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(extra_args=["--segment-size", "2MiB"])
    first = [b"a-%d" % k + b"x" * 20_000 for k in range(150)]  # 3 MB: past the first segment end
    for k in range(0, len(first), 10):
        cluster.append(first[k : k + 10])
    cluster.wait_converged(list(cluster.members), at_least=len(first) - 1)

    # every member restarted with another configured size keeps its files' size
    cluster.extra_args += ["--segment-size", "1MiB"]
    for member_id in cluster.members:
        assert cluster.stop(member_id) == 0
        cluster.restart(member_id)
        assert "keeps the segment sizes it was made with: 2097152 data" in _log(cluster, member_id)
    second = [b"b-%d" % k + b"x" * 20_000 for k in range(100)]
    for k in range(0, len(second), 10):
        cluster.append(second[k : k + 10])
    cluster.wait_converged(list(cluster.members), at_least=len(first) + len(second) - 1)
    assert all(_data_sizes(cluster, m) == {2 * MIB} for m in cluster.members)

    # a replaced disk started with another size (1 MiB) is refused, and says why
    assert cluster.stop("n2") == 0
    cluster.wipe("n2")
    cluster.initial_cluster_state = "existing"
    cluster.restart("n2")
    eventually(lambda: "this member's are 1048576 bytes" in _log(cluster, "n2") or None, 60, "n2 to say why it refuses")
    eventually(
        lambda: (
            any("follower n2 refuses this leader: its data segments" in _log(cluster, m) for m in ("n0", "n1")) or None
        ),
        60,
        "the leader to say that n2 is left behind",
    )
    cluster.append([b"later"])  # the two others go on
    leader, _ = cluster.leader(exclude=("n2",))
    assert [body for _, _, body in cluster.read_all(leader)][-1] == b"later"
    assert cluster.read_all("n2") == []  # it took nothing at positions that are not the group's
