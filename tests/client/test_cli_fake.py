"""The client commands (append, get, status, leadership-transfer, bench) against the fake
Ledger servers: output, JSON, one-line errors and exit statuses (0 ok, 1 failed, 2 usage)."""

from __future__ import annotations

import json

import grpc
import pytest
from click.testing import CliRunner

from dledger.cli.main import main
from dledger.client.types import Target, metadata_from_pb
from dledger.codes import ResponseCode
from dledger.transport.convert import pb
from tests.client.fake_ledger import Action, FakeCluster

pytestmark = pytest.mark.unit


def run(fake: FakeCluster, *args: str, stdin: str | None = None, timeout_s: float = 10) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [*args, "-p", fake.peers, "--timeout", str(timeout_s)], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_append_a_body_then_get_it(fake: FakeCluster) -> None:
    assert run(fake, "append", "hello") == (0, "appended at index 0\n", "")
    assert run(fake, "append", "-d", "world") == (0, "appended at index 1\n", "")
    code, out, _ = run(fake, "get", "0", "--count", "5")
    assert code == 0 and out == "0\tterm 1\thello\n1\tterm 1\tworld\n"
    code, out, _ = run(fake, "get", "-i", "1", "--json")
    assert code == 0 and json.loads(out) == {
        "index": 1,
        "term": 1,
        "pos": 100,
        "magic": 1,
        "body_crc": 0,
        "body": "world",
    }


def test_append_count_stdin_and_file_batches(fake: FakeCluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(fake, "append", "--count", "25", "--body-size", "16", "--batch-size", "10", "--json")
    assert code == 0 and json.loads(out) == {"first_index": 0, "last_index": 24, "count": 25, "contiguous": True}
    assert fake["n0"].append_requests[-3:] and [len(r) for r in fake["n0"].append_requests] == [10, 10, 5]
    assert all(len(b) == 16 for b in fake.log.bodies)
    assert run(fake, "append", "x", "--count", "3")[1] == "appended 3 entries at indexes 25..27\n"
    assert run(fake, "append", "-", stdin="a\nb\nc\n")[1] == "appended 3 entries at indexes 28..30\n"
    path = tmp_path / "blob.bin"
    path.write_bytes(b"\x00\xff")
    assert run(fake, "append", "--file", str(path))[0] == 0
    assert fake.log.bodies[28:] == [b"a", b"b", b"c", b"\x00\xff"]
    raw = CliRunner().invoke(main, ["get", "28", "-c", "4", "--raw", "-p", fake.peers])
    assert raw.exit_code == 0 and raw.stdout_bytes == b"a\nb\nc\n\x00\xff\n"
    assert run(fake, "get", "31")[1] == "31\tterm 1\tbase64:AP8=\n"


def test_an_append_interleaved_with_another_writer_does_not_claim_its_indexes(
    fake: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each request's entries are consecutive, the requests need not be: before, two
    concurrent `--count 20000` runs each said "at indexes A..B" of a span of 33,100."""
    own = fake.log.append

    def with_another_writer(bodies: list[bytes]) -> int:
        own([b"theirs"])  # another client's entry lands first
        return own(bodies)

    monkeypatch.setattr(fake.log, "append", with_another_writer)
    code, out, _ = run(fake, "append", "x", "--count", "4", "--batch-size", "2")
    assert (code, out) == (0, "appended 4 entries between indexes 1 and 5, among other writers' entries\n")
    code, out, _ = run(fake, "append", "x", "--count", "4", "--batch-size", "2", "--json")
    assert json.loads(out) == {"first_index": 7, "last_index": 11, "count": 4, "contiguous": False}
    code, out, _ = run(fake, "append", "x", "--count", "2", "--batch-size", "2")
    assert out == "appended 2 entries at indexes 13..14\n"  # one request: consecutive


def test_usage_errors_exit_2(fake: FakeCluster) -> None:
    assert run(fake, "append")[0] == 2
    assert run(fake, "append", "a", "-d", "b")[0] == 2
    assert run(fake, "append", "-", "--count", "2")[0] == 2
    result = CliRunner().invoke(main, ["append", "x", "-p", "n0"])
    assert result.exit_code == 2 and "--peers" in result.stderr
    assert run(fake, "get", "-5")[0] == 2
    assert run(fake, "leadership-transfer")[0] == 2
    assert run(fake, "get", "0", "--node", "n9")[0] == 2


def test_failures_exit_1_with_one_line_naming_the_code(fake: FakeCluster) -> None:
    code, out, err = run(fake, "get", "7")
    assert code == 1 and out == ""
    assert err.startswith("error: INDEX_OUT_OF_RANGE (410)") and err.count("\n") == 1
    fake["n0"].script(Action("code", code=ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, append=True))
    code, _, err = run(fake, "append", "x")
    assert code == 1 and err.startswith("error: WAIT_QUORUM_ACK_TIMEOUT (502)") and "outcome unknown" in err
    assert err.count("\n") == 1
    for node_id in fake.log.members:  # a mistyped group: said at once, not a network error after --timeout
        fake[node_id].metadata_refusal = Action("code", code=ResponseCode.UNKNOWN_GROUP, details="not 'nosuch'")
    code, _, err = run(fake, "append", "x", timeout_s=30)
    assert code == 1 and err == "error: UNKNOWN_GROUP (400): refused by n0, n1, n2: UNKNOWN_GROUP: not 'nosuch'\n"


def test_status_table_and_json_show_unreachable_members(fake: FakeCluster) -> None:
    run(fake, "append", "x")
    code, out, err = run(fake, "status")
    assert (code, err) == (0, "") and "LEADER" in out and "UNREACHABLE" not in out
    fake["n1"].stop()
    code, out, err = run(fake, "status")
    assert code == 1 and err == "error: n1 unreachable: 2 of 3 members answered\n"
    assert "LEADER" in out and "FOLLOWER" in out and "UNREACHABLE" in out
    code, out, _ = run(fake, "status", "--json")
    assert code == 1
    rows = {r["id"]: r for r in json.loads(out)}
    assert rows["n0"]["role"] == "LEADER" and rows["n0"]["lag"] == 0
    assert rows["n1"]["reachable"] is False and rows["n1"]["lag"] is None
    fake.close()
    code, _, err = run(fake, "status")
    assert code == 1 and "NETWORK_ERROR (302)" in err


def test_status_shows_a_member_that_holds_its_vote(fake: FakeCluster) -> None:
    fake["n2"].vote_hold = "rejoin"
    code, out, _ = run(fake, "status")
    assert code == 0 and "holds vote: rejoin" in out
    code, out, _ = run(fake, "status", "--json")
    rows = {r["id"]: r for r in json.loads(out)}
    assert (rows["n2"]["vote_hold"], rows["n0"]["vote_hold"]) == ("rejoin", "")


def test_status_shows_a_member_whose_store_takes_no_write(fake: FakeCluster) -> None:
    """A member whose store failed (or whose disk is full) showed as healthy, with
    status exit 0, while every write to it failed (helper C)."""
    fake["n1"].store_health = "failed: [Errno 5] Input/output error"
    code, out, err = run(fake, "status")
    assert code == 1 and err == "error: the store of n1 (failed) takes no write\n"
    assert "store takes no write" in out and "n1: store failed: [Errno 5] Input/output error" in out
    code, out, _ = run(fake, "status", "--json")
    rows = {r["id"]: r for r in json.loads(out)}
    assert (rows["n1"]["store"], rows["n0"]["store"]) == ("failed: [Errno 5] Input/output error", "")


def test_status_shows_a_member_whose_state_machine_stopped(fake: FakeCluster) -> None:
    """A member whose state machine stopped after an apply error showed as healthy, with
    status exit 0, while it answered no read (helper F #2c)."""
    fake["n2"].machine_health = "ValueError: bad command at 7"
    code, out, err = run(fake, "status")
    assert code == 1 and err == "error: the state machine of n2 stopped\n"
    assert "(state machine stopped)" in out and "n2: state machine stopped: ValueError: bad command at 7" in out
    code, out, _ = run(fake, "status", "--json")
    rows = {r["id"]: r for r in json.loads(out)}
    assert (rows["n2"]["machine"], rows["n0"]["machine"]) == ("ValueError: bad command at 7", "")


def test_status_fails_while_a_member_does_not_follow_the_leader(fake: FakeCluster) -> None:
    """Helper K: a member that changed its address, or refuses its leader's pushes, showed
    as healthy (status exit 0) while it was out of the group for good."""
    fake["n2"].own_view = ("CANDIDATE", 9, None)
    code, out, err = run(fake, "status")
    assert code == 1 and err == "error: n2 (CANDIDATE, term 9, sees no leader) does not follow leader n0 (term 1)\n"
    assert "CANDIDATE" in out
    fake["n1"].own_view = ("FOLLOWER", 0, "n0")  # an older term's view
    code, _, err = run(fake, "status")
    assert code == 1 and err.startswith("error: n1 (FOLLOWER, term 0, sees leader n0), n2 (CANDIDATE, term 9")
    assert err.endswith(" do not follow leader n0 (term 1)\n")
    fake["n1"].own_view = fake["n2"].own_view = None
    assert run(fake, "status")[0] == 0


def test_status_refuses_another_member_at_a_members_address(fake: FakeCluster) -> None:
    """Helper K: a member renamed (or another group's) answering at a member's address
    showed under its own name, and status exited 0."""
    fake["n2"].answers_as = "n5"
    code, out, err = run(fake, "status")
    assert code == 1 and err == "error: n2 refused: 2 of 3 members answered\n"
    assert "REFUSED" in out and "n2: UNKNOWN_MEMBER: this member is 'n5'" in out
    code, out, _ = run(fake, "status", "--json")
    rows = {r["id"]: r for r in json.loads(out)}
    assert (rows["n2"]["role"], rows["n2"]["reachable"]) == ("REFUSED", True) and "n5" in rows["n2"]["error"]


def test_status_shows_each_members_last_snapshot_index(fake: FakeCluster) -> None:
    code, out, _ = run(fake, "status")
    assert code == 0 and "snapshot" not in out  # no snapshot anywhere: no column
    fake["n0"].snapshot_index, fake["n2"].snapshot_index = 4242, 4100
    code, out, _ = run(fake, "status")
    assert code == 0 and "snapshot" in out and "4242" in out and "4100" in out
    code, out, _ = run(fake, "status", "--json")
    rows = {r["id"]: r for r in json.loads(out)}
    assert [rows[n]["snapshot_index"] for n in ("n0", "n1", "n2")] == [4242, -1, 4100]


def test_a_member_that_does_not_say_its_snapshot_index_has_none() -> None:
    """Helper N: status showed `snapshot 0` for members of a version before snapshots
    (a missing field read as 0, which is a snapshot at index 0)."""
    message = pb.MetadataResponse(self_id="n0", role="FOLLOWER")
    message.members.add(id="n0", address="a:1", role="FOLLOWER", match_index=-1)  # an older member's
    message.members.add(id="n1", address="b:1", role="LEADER", match_index=-1, snapshot_index=0)
    meta = metadata_from_pb(Target("n0", "a:1"), message)
    assert [m.snapshot_index for m in meta.members] == [-1, 0] and meta.snapshot_index == -1


def test_leadership_transfer(fake: FakeCluster) -> None:
    assert run(fake, "leadership-transfer", "--to", "n2") == (0, "n2 leads now (term 2)\n", "")
    code, _, err = run(fake, "leadership-transfer", "-t", "n7")
    assert code == 2 and "n7" in err


def test_bench_json_reports_rates_and_latency(fake: FakeCluster) -> None:
    # what the report says, not how fast it ran: with a 60 s budget per body a loaded
    # machine makes the run slower, never failed (the fake cluster refuses nothing)
    committed = 0
    for mode, bodies_per_request in (("single", 1), ("batch", 10), ("stream", None)):
        args = ("bench", "--mode", mode, "-c", "2", "-b", "10", "-s", "32", "-d", "0.3", "--json")
        code, out, _ = run(fake, *args, timeout_s=60)
        assert code == 0, out
        result = json.loads(out)
        assert result["failed"] == 0 and result["indeterminate"] == 0 and result["first_error"] is None
        assert result["entries"] > 0 and result["elapsed_s"] >= 0.3  # every thread offers at least once
        if bodies_per_request is None:
            assert result["entries"] == result["requests"]  # every body the producer took was committed
        else:
            assert result["entries"] == result["requests"] * bodies_per_request
        assert result["entries_per_s"] == pytest.approx(result["entries"] / result["elapsed_s"], abs=0.051)
        assert result["mib_per_s"] == pytest.approx(result["entries"] / result["elapsed_s"] * 32 / 2**20, abs=6e-4)
        latency = result["latency_ms"]
        assert set(latency) == {"p50", "p90", "p99", "p999", "max", "mean", "samples"}
        assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["p999"] <= latency["max"]
        assert 0 < latency["samples"] <= result["requests"]  # stream mode samples every 64th body
        if bodies_per_request is not None:
            assert latency["samples"] == result["requests"]
        committed += result["entries"]
    assert len(fake.log.bodies) == committed and all(len(b) == 32 for b in fake.log.bodies)


def test_bench_prints_a_table(fake: FakeCluster) -> None:
    code, out, _ = run(fake, "bench", "-m", "batch", "-c", "1", "-d", "0.2", "-b", "5")
    assert code == 0 and "entries/s" in out and "latency p50" in out


def test_a_bench_nobody_answers_prints_only_its_error(fake: FakeCluster) -> None:
    for node_id in ("n0", "n1", "n2"):
        fake[node_id].stop()
    code, out, err = run(fake, "bench", "-m", "single", "-c", "1", "-d", "0.2", timeout_s=1)
    assert (code, out) == (1, "")  # no progress bar's empty line: stdout is not a terminal
    assert err.startswith("error: ") and err.count("\n") == 1


def test_status_tells_members_that_refuse_this_client_from_unreachable_ones(fake: FakeCluster) -> None:
    """Before, a revoked token showed every member UNREACHABLE and ended `no member
    answered`, although each had answered UNAUTHENTICATED."""
    fake["n2"].metadata_refusal = Action(
        "abort", status=grpc.StatusCode.UNAUTHENTICATED, details="no valid bearer token"
    )
    code, out, err = run(fake, "status")
    assert code == 1 and err == "error: n2 refused: 2 of 3 members answered\n"
    assert "REFUSED" in out and "UNREACHABLE" not in out and "n2: UNAUTHENTICATED: no valid bearer token" in out
    for node_id in ("n0", "n1"):
        fake[node_id].metadata_refusal = Action("abort", status=grpc.StatusCode.PERMISSION_DENIED, details="a role")
    code, out, err = run(fake, "status")
    assert code == 1 and err == "error: every member refused this client: PERMISSION_DENIED: a role\n"
    fake["n0"].metadata_refusal = fake["n1"].metadata_refusal = None
    fake["n1"].stop()
    code, out, err = run(fake, "status")
    assert code == 1 and err == "error: n1 unreachable, n2 refused: 1 of 3 members answered\n"
