"""DLedgerClient, Producer and the client commands (`dledger append/get/status/
leadership-transfer/bench`) against real `dledger server` processes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from dledger.client import DLedgerClient
from dledger.codes import DLedgerError, ResponseCode
from tests.e2e.harness import E2ECluster, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def dledger(
    cluster: E2ECluster, *args: str, stdin: str | None = None, peers: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the `dledger` CLI in a child process against `cluster` (or `peers`)."""
    command = [sys.executable, "-c", "from dledger.cli.main import main; main()", *args]
    command += ["-p", peers or cluster.peers, "-g", "e2e"]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120)


def test_client_appends_and_reads_back(shared_cluster: E2ECluster) -> None:
    with DLedgerClient(shared_cluster.peers, "e2e") as client:
        first = client.append(b"hello")
        second = client.append_many([b"a", b"b", b"c"])  # the index of b"a"
        assert second == first + 1
        last = second + 2
        assert [e.body for e in client.get(first, count=4)] == [b"hello", b"a", b"b", b"c"]
        assert client.leader is not None
        leader = client.leader.node_id
        assert client.metadata().node_id == leader
        # every member serves the committed entries once it learns the commit
        for node_id in client.peers:
            entries = eventually(
                lambda n=node_id: (
                    client.get(first, count=4, node_id=n) if client.metadata(n).committed_index >= last else None
                ),
                10,
                f"{node_id} to commit {last}",
            )
            assert [e.body for e in entries] == [b"hello", b"a", b"b", b"c"]
        batches = list(client.read_committed(first, to_index=last + 1))
        assert [b.body(k) for b in batches for k in range(b.count)] == [b"hello", b"a", b"b", b"c"]
        assert [e.body for e in client.iterate(first, last + 1)] == [b"hello", b"a", b"b", b"c"]
        with pytest.raises(DLedgerError) as info:
            client.get(last + 1_000_000)
        assert info.value.code is ResponseCode.INDEX_OUT_OF_RANGE


def test_producer_streams_in_order(shared_cluster: E2ECluster) -> None:
    with DLedgerClient(shared_cluster.peers, "e2e") as client:
        with client.producer(linger_ms=2, max_batch_count=500) as producer:
            futures = [producer.send(b"p%05d" % k) for k in range(5000)]
            assert producer.flush(60)
        indexes = [f.result(0) for f in futures]
        assert indexes == list(range(indexes[0], indexes[0] + 5000))  # no resend: send order kept
        bodies = [b.body(k) for b in client.read_committed(indexes[0], indexes[-1] + 1) for k in range(b.count)]
        assert bodies == [b"p%05d" % k for k in range(5000)]


def test_read_committed_follow_sees_new_appends(shared_cluster: E2ECluster) -> None:
    with DLedgerClient(shared_cluster.peers, "e2e") as client:
        start = client.append(b"f0")
        stream = client.read_committed(start, to_index=start + 3, follow=True)
        first = next(stream)
        assert first.body(0) == b"f0"
        client.append_many([b"f1", b"f2"])
        rest = [b.body(k) for b in stream for k in range(b.count)]
        assert [first.body(k) for k in range(first.count)] + rest == [b"f0", b"f1", b"f2"]


def test_cli_append_get_status_and_bench(shared_cluster: E2ECluster) -> None:
    done = dledger(shared_cluster, "append", "hello-cli", "--json")
    assert done.returncode == 0, done.stderr
    index = json.loads(done.stdout)["first_index"]
    got = dledger(shared_cluster, "get", str(index))
    assert got.returncode == 0 and got.stdout == f"{index}\tterm {got.stdout.split()[2]}\thello-cli\n"

    lines = dledger(shared_cluster, "append", "-", stdin="x\ny\nz\n")
    assert lines.returncode == 0 and lines.stdout.startswith("appended 3 entries at indexes ")
    many = dledger(shared_cluster, "append", "--count", "2500", "--body-size", "100", "--json")
    assert many.returncode == 0 and json.loads(many.stdout)["count"] == 2500

    status = dledger(shared_cluster, "status", "--json")
    assert status.returncode == 0, status.stderr
    rows = json.loads(status.stdout)
    assert sorted(r["id"] for r in rows) == ["n0", "n1", "n2"]
    assert [r["role"] for r in rows].count("LEADER") == 1
    table = dledger(shared_cluster, "status")
    assert table.returncode == 0 and "LEADER" in table.stdout and "committed" in table.stdout
    misnamed = dledger(shared_cluster, "status", peers=shared_cluster.peers.replace("n2-", "n9-"))
    assert misnamed.returncode == 1 and "n9 refused" in misnamed.stderr  # (n2 may lead: "no leader" then)
    assert "n9: UNKNOWN_MEMBER: this member is 'n2', not 'n9'" in misnamed.stdout

    for mode in ("single", "batch", "stream"):
        bench = dledger(shared_cluster, "bench", "-m", mode, "-c", "2", "-b", "100", "-d", "1", "--json")
        assert bench.returncode == 0, bench.stderr
        result = json.loads(bench.stdout)
        assert result["entries"] > 0 and result["failed"] == 0 and result["indeterminate"] == 0
        assert result["latency_ms"]["p50"] > 0

    missing = dledger(shared_cluster, "get", "999999999")
    assert missing.returncode == 1 and missing.stderr.startswith("error: INDEX_OUT_OF_RANGE (410)")
    assert missing.stderr.count("\n") == 1


def test_cli_leadership_transfer_and_unreachable_member(make_cluster: Callable[..., E2ECluster]) -> None:
    cluster = make_cluster(3)
    leader, _term = cluster.leader()
    with DLedgerClient(cluster.peers, "e2e") as client:
        last = client.append_many([b"t"] * 10) + 9
        target = next(n for n in cluster.members if n != leader)
        moved = eventually(
            lambda: (r := dledger(cluster, "leadership-transfer", "--to", target)).returncode == 0 and r,
            30,
            f"a transfer to {target}",
            poll_s=0.5,
        )
        assert moved.stdout.startswith(f"{target} leads now (term ")
        assert cluster.leader()[0] == target
        after = client.append(b"after transfer")  # the client follows the new leader
        assert after > last, (last, after, [(e.index, e.term, e.body) for e in client.get(0, 20)])

        follower = next(n for n in cluster.members if n not in (leader, target))
        cluster.kill(follower)
        status = dledger(cluster, "status", "--json")
        assert status.returncode == 1  # the table is printed, the exit status says a member is down
        assert status.stderr == f"error: {follower} unreachable: 2 of 3 members answered\n"
        rows = {r["id"]: r for r in json.loads(status.stdout)}
        assert rows[follower]["role"] == "UNREACHABLE" and rows[target]["role"] == "LEADER"
        assert client.append(b"two of three") > after  # a majority still commits
