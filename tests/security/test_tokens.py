"""Bearer tokens on the members' client-only ports: the tokens file, real in-process TLS
members serving a client port next to their mutual-TLS one, and the CLI (`certs token`,
`--token` / DLEDGER_TOKEN, `server --client-address`)."""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import grpc
import pytest

from dledger.client import DLedgerClient
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import ConfigError, DLedgerConfig
from dledger.security.probe import tls_mismatch, wants_certificate
from dledger.security.tls import TlsConfig
from dledger.security.tokens import TokenFile, TokenFileError, TokenStore, add_token, token_digest
from dledger.security.watch import RECHECK_S
from dledger.transport.convert import pb, pb_grpc
from dledger.transport.grpc_client import open_channel
from dledger.transport.grpc_server import ServiceLimits
from tests.e2e.harness import eventually, free_ports
from tests.e2e.test_cli import Running
from tests.security.test_tls_cli import dledger, tls_args
from tests.security.tls_support import GROUP, TlsGroup, make_certs, wait_for

pytestmark = pytest.mark.security


# -- the tokens file


def test_a_tokens_file_maps_tokens_to_names_and_roles(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    writer = add_token(path, "app", "write")
    reader = add_token(path, "dash.board", "read")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert writer not in text and reader not in text  # only digests are kept
    store = TokenStore.load(path)
    assert len(store) == 2
    assert store.identity(writer) == store.caller([("authorization", f"Bearer {writer}")])
    who = store.identity(writer)
    assert who is not None and (who.kind, who.name, who.role) == ("client", "app", "write")
    assert store.caller({"authorization": f"bearer {reader}"}).role == "read"  # type: ignore[union-attr]
    assert store.identity(writer + "x") is None
    assert store.caller([("authorization", writer)]) is None  # no Bearer scheme
    assert store.caller([]) is None


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("app write", "expected 'name role sha256', got 2 fields"),
        ("app root " + "a" * 64, "bad role 'root'"),
        ("a/b read " + "a" * 64, "bad client name"),
        ("app read " + "A" * 64, "SHA-256 in 64 lowercase hex digits"),
        ("app read plaintext-token", "SHA-256 in 64 lowercase hex digits"),
    ],
)
def test_a_malformed_tokens_file_names_the_line(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "tokens"
    path.write_text("# comment\n\nok read " + token_digest("t") + "  # trailing comment\n" + line + "\n")
    with pytest.raises(TokenFileError, match=f"tokens:4: .*{problem}"):
        TokenStore.load(path)
    with pytest.raises(TokenFileError):  # nothing is added to a file the members could not load
        add_token(path, "more", "read")
    assert path.read_text().count("\n") == 4


def test_a_token_listed_twice_or_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    digest = token_digest("same")
    path.write_text(f"a read {digest}\nb write {digest}")
    with pytest.raises(TokenFileError, match="listed twice"):
        TokenStore.load(path)
    with pytest.raises(TokenFileError, match="cannot read the tokens file"):
        TokenStore.load(tmp_path / "missing")


def test_a_token_is_added_on_a_line_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"a read {token_digest('x')}")  # no newline at the end
    made = add_token(path, "b", "admin")
    store = TokenStore.load(path)
    assert store.identity("x") is not None and store.identity(made) is not None


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _auth(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def test_a_changed_tokens_file_is_read_again_within_the_recheck_interval(tmp_path: Path) -> None:
    path, clock = tmp_path / "tokens", FakeClock()
    first = add_token(path, "first", "write")
    tokens = TokenFile(path, clock)
    second = add_token(path, "second", "read")  # added while the member runs
    assert tokens.caller(_auth(second)) is None  # not looked at again yet
    clock.now += RECHECK_S
    assert tokens.caller(_auth(second)).name == "second" and tokens.reloads == 1  # type: ignore[union-attr]
    lines = path.read_text().splitlines()
    path.write_text("\n".join(line for line in lines if not line.startswith("first ")) + "\n")  # revoked
    assert tokens.caller(_auth(first)).name == "first"  # type: ignore[union-attr]
    clock.now += RECHECK_S
    assert tokens.caller(_auth(first)) is None and tokens.caller(_auth(second)) is not None
    clock.now += 10 * RECHECK_S
    assert tokens.caller(_auth(second)) is not None and tokens.reloads == 2  # unchanged: not read again
    path.write_text("")
    clock.now += RECHECK_S
    assert tokens.caller(_auth(second)) is None and len(tokens) == 0  # an empty file revokes every token


@pytest.mark.parametrize("damage", ["malformed", "deleted", "unreadable"])
def test_a_tokens_file_broken_while_running_keeps_the_tokens_read_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    path, clock = tmp_path / "tokens", FakeClock()
    kept = add_token(path, "kept", "write")
    tokens = TokenFile(path, clock)
    good = path.read_text()
    if damage == "malformed":
        path.write_text(good + "half-written line\n")
    elif damage == "deleted":
        path.unlink()
    else:
        path.write_bytes(b"\xff\xfe not utf-8\n")
    clock.now += RECHECK_S
    with caplog.at_level(logging.ERROR, logger="dledger.security.tokens"):
        assert tokens.caller(_auth(kept)).name == "kept"  # type: ignore[union-attr]
        clock.now += RECHECK_S
        tokens.caller(_auth(kept))  # the same broken file: not logged again
    errors = [r.getMessage() for r in caplog.records]
    assert len(errors) == 1 and "the 1 tokens read before stay in force" in errors[0], errors
    assert tokens.reloads == 0
    path.write_text(good)  # repaired: read again
    os.utime(path, ns=(1, 1))  # a new modification time even within the clock's resolution
    clock.now += RECHECK_S
    assert tokens.caller(_auth(kept)) is not None and tokens.reloads == 1


def test_a_client_port_needs_tls_and_a_tokens_file(tmp_path: Path) -> None:
    base = {"self_id": "n0", "peers": "n0-127.0.0.1:20911", "store_base_dir": str(tmp_path)}
    with pytest.raises(ConfigError, match="both client_address and tokens_file"):
        DLedgerConfig(**base, client_address="127.0.0.1:20912")
    with pytest.raises(ConfigError, match="needs TLS"):
        DLedgerConfig(**base, client_address="127.0.0.1:20912", tokens_file=str(tmp_path / "t"))
    with pytest.raises(ValueError, match="only sent over TLS"):
        DLedgerClient("n0-127.0.0.1:20911", token="t")
    tls = {"tls_cert": "c", "tls_key": "k", "tls_ca": "a", "tokens_file": str(tmp_path / "t")}
    with pytest.raises(ConfigError, match="has this member's own port"):  # was "port already in use"
        DLedgerConfig(**base, **tls, client_address="127.0.0.1:20911")


# -- members serving a client port

STREAM_SHARE = 3
"""The streams of one method one caller may hold, set in the members' config (the
default is 12)."""


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("tls"))


class Tokens(NamedTuple):
    """A tokens file and the token of each role in it (client `<role>-app`)."""

    file: Path
    by_role: dict[str, str]


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Tokens:
    path = tmp_path_factory.mktemp("tokens") / "tokens"
    return Tokens(path, {role: add_token(path, f"{role}-app", role) for role in ("read", "write", "admin")})


@pytest.fixture
def group(tmp_path: Path, certs: Path, tokens: Tokens) -> Iterator[TlsGroup]:
    made = TlsGroup(tmp_path / "store", certs, tokens_file=tokens.file, max_streams_per_caller=STREAM_SHARE)
    try:
        yield made
    finally:
        made.close()


def token_client(group: TlsGroup, token: str) -> DLedgerClient:
    tls = TlsConfig.ca_only(str(group.certs / "ca.crt"))
    return DLedgerClient(group.client_peers, GROUP, 10.0, tls=tls, token=token)


def raw_channel(group: TlsGroup, node_id: str, token: str | None) -> grpc.Channel:
    """A channel to `node_id`'s client port: server-side TLS, `token` (if any), no certificate."""
    tls = TlsConfig.ca_only(str(group.certs / "ca.crt"))
    return open_channel(group.client_addresses[node_id], credentials=tls.channel_credentials(token))


def test_roles_of_tokens_decide_what_a_client_may_call(group: TlsGroup, tokens: Tokens) -> None:
    leader = group.leader()
    with token_client(group, tokens.by_role["write"]) as writer:
        result = writer.append_batch([b"a", b"b"])
        assert [e.body for e in writer.get(result.first_index, 2)] == [b"a", b"b"]
        with writer.producer(idempotent=True) as producer:  # InitProducer, then AppendStream
            for k in range(20):
                producer.send(b"streamed-%d" % k)
            assert producer.flush(30) and producer.stats.acked == 20, producer.stats
        with pytest.raises(DLedgerError, match="PERMISSION_DENIED"):
            writer.leadership_transfer(next(i for i in group.ids if i != leader))
    with token_client(group, tokens.by_role["read"]) as reader:
        assert reader.get(result.first_index)[0].body == b"a"
        with pytest.raises(DLedgerError, match="PERMISSION_DENIED"):
            reader.append(b"forbidden")
    assert max(group.metadata(i).end_index for i in group.ids) >= result.first_index + 21
    with token_client(group, tokens.by_role["read"]) as reader, pytest.raises(DLedgerError, match="PERMISSION_DENIED"):
        reader.init_producer()
    target = next(i for i in group.ids if i != leader)
    with token_client(group, tokens.by_role["admin"]) as admin:
        admin.leadership_transfer(target)
    wait_for(lambda: group.leader() == target, "the transfer")


def test_a_raft_log_query_needs_a_token_that_may_append(group: TlsGroup, tokens: Tokens) -> None:
    leader = group.leader()
    end = group.servers[leader].node.status().end_index  # type: ignore[union-attr]
    query = pb.QueryRequest(requests=[b"get"], mode=pb.QueryRequest.RAFT_LOG)
    with raw_channel(group, leader, tokens.by_role["read"]) as channel:
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.LedgerStub(channel).Query(query, timeout=10)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "client read-app (read): a RAFT_LOG query appends entries" in info.value.details()
    with raw_channel(group, leader, tokens.by_role["write"]) as channel:
        answer = pb_grpc.LedgerStub(channel).Query(query, timeout=10)
        assert answer.code == ResponseCode.UNSUPPORTED  # past the role check; these members run no state machine
    assert group.servers[leader].node.status().end_index == end  # type: ignore[union-attr]


@pytest.mark.parametrize("token", [None, "not-a-token"])
def test_a_missing_or_unknown_token_is_unauthenticated(group: TlsGroup, token: str | None) -> None:
    group.leader()
    with raw_channel(group, "n0", token) as channel:
        stub = pb_grpc.LedgerStub(channel)
        for call in (
            lambda: stub.Metadata(pb.MetadataRequest(), timeout=5),
            lambda: stub.Append(pb.AppendRequest(group=GROUP, bodies=[b"x"]), timeout=5),
        ):
            with pytest.raises(grpc.RpcError) as info:
                call()
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert info.value.details().startswith("a client without a certificate: no valid bearer token")
    assert group.servers["n0"].grpc is not None and group.servers["n0"].grpc.guard.refused >= 2  # type: ignore[union-attr]
    if token is not None:  # the client library: every member's refusal, not a network error after its timeout
        with token_client(group, token) as client, pytest.raises(DLedgerError) as refused:
            client.append(b"x")
        assert refused.value.code is ResponseCode.ACCESS_DENIED
        assert "refused by n0, n1, n2: UNAUTHENTICATED" in refused.value.message


def test_a_token_removed_from_the_file_is_refused_without_a_restart(tmp_path: Path, certs: Path) -> None:
    path = tmp_path / "tokens"
    leaked, kept = add_token(path, "leaked", "write"), add_token(path, "kept", "write")
    group = TlsGroup(tmp_path / "store", certs, tokens_file=path)
    try:
        leader = group.leader()

        def metadata_code(token: str) -> grpc.StatusCode:
            with raw_channel(group, leader, token) as channel:
                try:
                    pb_grpc.LedgerStub(channel).Metadata(pb.MetadataRequest(), timeout=10)
                except grpc.RpcError as exc:
                    return exc.code()  # type: ignore[no-any-return]
                return grpc.StatusCode.OK

        assert metadata_code(leaked) == grpc.StatusCode.OK
        path.write_text("".join(line for line in path.read_text().splitlines(True) if not line.startswith("leaked ")))
        # every member reads the file again on a call, within RECHECK_S of the change
        for node_id in group.ids:
            with raw_channel(group, node_id, leaked) as channel:
                stub = pb_grpc.LedgerStub(channel)

                def refused(stub: pb_grpc.LedgerStub = stub) -> bool:
                    try:
                        stub.Metadata(pb.MetadataRequest(), timeout=10)
                    except grpc.RpcError as exc:
                        return exc.code() == grpc.StatusCode.UNAUTHENTICATED
                    return False

                wait_for(refused, f"{node_id} refusing the revoked token")
        with token_client(group, kept) as client:  # the other token still works, writes included
            assert client.append(b"after the revocation") >= 0
        assert metadata_code(leaked) == grpc.StatusCode.UNAUTHENTICATED
    finally:
        group.close()


@pytest.mark.parametrize("role", ["write", "admin"])
def test_the_client_port_refuses_the_peer_service(group: TlsGroup, tokens: Tokens, role: str) -> None:
    leader = group.leader()
    before = [(s.node.term, s.node.leader_id) for s in group.servers.values() if s.node is not None]
    with raw_channel(group, leader, tokens.by_role[role]) as channel:
        stub = pb_grpc.PeerStub(channel)
        forged = [
            ("HeartBeat", pb.HeartBeatRequest(group=GROUP, local_id="n9", leader_id="n9", term=1 << 40)),
            ("Vote", pb.VoteRequest(group=GROUP, local_id=leader, leader_id=leader, term=1 << 40)),
            ("Push", pb.PushEntryRequest(group=GROUP, local_id=leader, leader_id=leader, term=1 << 40, type=2)),
        ]
        for method, request in forged:
            with pytest.raises(grpc.RpcError) as info:
                getattr(stub, method)(request, timeout=5)
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "only members" in info.value.details()
    after = [(s.node.term, s.node.leader_id) for s in group.servers.values() if s.node is not None]
    assert after == before


def test_a_token_does_not_open_the_mutual_tls_port(group: TlsGroup, tokens: Tokens) -> None:
    leader = group.leader()
    tls = TlsConfig.ca_only(str(group.certs / "ca.crt"))
    with open_channel(group.address(leader), credentials=tls.channel_credentials(tokens.by_role["admin"])) as channel:
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.LedgerStub(channel).Metadata(pb.MetadataRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE  # the handshake wants a certificate


def test_a_token_client_at_the_member_ports_gets_a_hint(group: TlsGroup, tokens: Tokens) -> None:
    group.leader()
    member_ports = dict(item.split("-", 1) for item in group.peers.split(";"))
    wait = 10.0  # a bound for a loaded machine, not a speed check
    assert wants_certificate(group.address("n0"), wait) is True
    assert wants_certificate(group.client_addresses["n0"], wait) is False
    hint = tls_mismatch(member_ports, using_tls=True, settings="S", timeout_s=wait, with_certificate=False)
    assert hint is not None and hint.startswith("n0 (") and "want a client certificate" in hint
    assert "--client-address" in hint
    assert tls_mismatch(group.client_addresses, True, "S", wait, with_certificate=False) is None
    assert tls_mismatch(member_ports, using_tls=True, settings="S", timeout_s=wait) is None  # certificates: no hint
    ca = str(group.certs / "ca.crt")
    done = dledger("get", "-g", GROUP, "-p", group.peers, "--tls-ca", ca, "--timeout", "2", "0",
                   env={"DLEDGER_TOKEN": tokens.by_role["read"]})  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "hint: n0 (" in done.stderr and "client ports" in done.stderr, done.stderr


# -- the command line


def test_certs_token_prints_a_token_once(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    made = dledger("certs", "token", "app", "--role", "write", "-f", str(path))
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert TokenStore.load(path).identity(token).role == "write"  # type: ignore[union-attr]
    for args in (["app", "--role", "root"], ["a b"]):
        bad = dledger("certs", "token", *args, "-f", str(path))
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    path.write_text("garbage\n")
    broken = dledger("certs", "token", "app", "-f", str(path))
    assert broken.returncode == 1 and broken.stderr.count("\n") == 1 and "tokens:1" in broken.stderr, broken.stderr


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_a_server_with_a_client_port_serves_token_clients(tmp_path: Path, certs: Path) -> None:
    tokens_file = tmp_path / "tokens"
    writer = add_token(tokens_file, "app", "write")
    reader = add_token(tokens_file, "dash", "read")
    port, client_port = free_ports(2)
    peers = f"n0-127.0.0.1:{port}"
    client_options = ["--client-address", f"127.0.0.1:{client_port}", "--tokens-file", str(tokens_file)]
    member = ["-g", GROUP, "-i", "n0", "-p", peers, "-s", str(tmp_path / "data"), *tls_args(certs, "n0")]
    server = Running(["server", *member, *client_options], tmp_path)
    try:
        client_peers = f"n0-127.0.0.1:{client_port}"
        common = ["-g", GROUP, "-p", client_peers, "--tls-ca", str(certs / "ca.crt"), "--timeout", "20"]
        as_writer = {"DLEDGER_TOKEN": writer}
        appended = eventually(
            lambda: (r := dledger("append", *common, "--json", "hello", env=as_writer)).returncode == 0 and r,
            60,
            "an append through the client port",
        )
        index = json.loads(appended.stdout)["first_index"]
        got = dledger("get", *common, "--json", str(index), env={"DLEDGER_TOKEN": reader})
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout.splitlines()[0])["body"] == "hello"
        refused = dledger("append", *common, "--token", reader, "no")
        assert refused.returncode == 1 and "PERMISSION_DENIED" in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
        no_ca = dledger("append", "-g", GROUP, "-p", client_peers, "--token", writer, "x")
        assert no_ca.returncode == 2 and "--tls-ca" in no_ca.stderr, no_ca.stderr
    finally:
        if server.process.poll() is None:
            server.process.terminate()
            server.process.wait(60)
    assert server.process.returncode == 0


def test_server_checks_the_client_port_settings(tmp_path: Path, certs: Path) -> None:
    port, client_port = free_ports(2)
    args = ["server", "-g", GROUP, "-i", "n0", "-p", f"n0-127.0.0.1:{port}", "-s", str(tmp_path / "data")]
    client = ["--client-address", f"127.0.0.1:{client_port}"]
    missing_file = dledger(*args, *tls_args(certs, "n0"), *client, "--tokens-file", str(tmp_path / "none"))
    assert missing_file.returncode == 2 and "cannot read the tokens file" in missing_file.stderr
    no_tokens = dledger(*args, *tls_args(certs, "n0"), *client)
    assert no_tokens.returncode == 2 and "both --client-address and --tokens-file" in no_tokens.stderr
    plaintext = dledger(*args, *client, "--tokens-file", str(tmp_path / "none"))
    assert plaintext.returncode == 2 and "needs TLS" in plaintext.stderr
    assert missing_file.stderr.count("\n") == 1  # one `error:` line
    assert not any("Traceback" in done.stderr for done in (missing_file, no_tokens, plaintext))
    assert not os.path.exists(tmp_path / "data" / "dledger-n0" / "data")


def test_one_token_holds_at_most_its_share_of_a_members_read_streams(group: TlsGroup, tokens: Tokens) -> None:
    """A caller with the read role cannot keep every other reader out of a member by
    opening following streams: past its share (`max_streams_per_caller`, here from the
    members' config) it is refused (and told why), while another token still gets in."""
    leader = group.leader()
    with token_client(group, tokens.by_role["write"]) as writer:
        writer.append(b"one")
    share = STREAM_SHARE
    assert group.servers[leader].grpc.limits.max_streams_per_caller == share != ServiceLimits().max_streams_per_caller
    follow = pb.ReadCommittedRequest(group=GROUP, from_index=0, follow=True)
    with (
        raw_channel(group, leader, tokens.by_role["read"]) as hog,
        raw_channel(group, leader, tokens.by_role["write"]) as other,
    ):
        held = []
        for _ in range(share):
            stream = pb_grpc.LedgerStub(hog).ReadCommitted(follow, timeout=30)
            next(stream)  # open, and holding a slot
            held.append(stream)
        with pytest.raises(grpc.RpcError) as info:
            next(pb_grpc.LedgerStub(hog).ReadCommitted(follow, timeout=30))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert info.value.details() == (
            f"too many open streams: client read-app (read) holds {share} ReadCommitted streams, "
            "as many as one caller may"
        )
        stream = pb_grpc.LedgerStub(other).ReadCommitted(follow, timeout=30)
        assert next(stream).code == ResponseCode.SUCCESS  # another token still reads
        for call in (*held, stream):
            call.cancel()


@pytest.mark.parametrize("token", ["a\nb", "\udcff", "two words"])
def test_a_token_that_cannot_be_sent_is_a_usage_error(certs: Path, token: str) -> None:
    """gRPC sends the token in a header: a non-ASCII one printed a gRPC traceback, one
    with a newline a NETWORK_ERROR that blamed the members (helper D)."""
    from click.testing import CliRunner

    from dledger.cli.main import main

    args = ["append", "-p", "n0-127.0.0.1:1", "--tls-ca", str(certs / "ca.crt"), "--token", token, "x"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "not a token: printable ASCII without spaces" in result.stderr
    assert "Traceback" not in result.output
