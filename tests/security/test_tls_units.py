"""Identities, roles, TLS settings, `dledger certs init` and the plaintext rule, without
a running group."""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dledger.cli.main import main
from dledger.cli.server_cmds import load_config_file
from dledger.cli.tls_options import refuse_plaintext
from dledger.client import DLedgerClient
from dledger.client.members import Members
from dledger.clock import ManualClock
from dledger.config import ConfigError, DLedgerConfig
from dledger.security.certs import CertPlan, CertsError, issue_member_cert, write_dev_certs
from dledger.security.identity import Identity, identity_from_uris, identity_of
from dledger.security.tls import TlsConfig, TlsError, is_loopback, issued_by, key_matches
from dledger.security.watch import RECHECK_S, FileWatch
from dledger.transport.grpc_client import GrpcTransport

pytestmark = pytest.mark.security


@pytest.mark.parametrize(
    ("uris", "expected"),
    [
        (["dledger://g/n0"], Identity("member", "n0", "g")),
        (["dledger-client://alice", "dledger-role:write"], Identity("client", "alice", "", "write")),
        (["dledger-client://bob"], Identity("client", "bob", "", "")),
        (["dledger-client://bob", "dledger-role:root"], Identity("client", "bob", "", "")),
        (["dledger://g/n0", "dledger://g/n1"], Identity("unknown")),
        (["dledger://g/n0", "dledger-client://alice"], Identity("unknown")),
        (["dledger://g/n0", "dledger-role:admin"], Identity("unknown")),
        (["dledger-client://a", "dledger-role:read", "dledger-role:admin"], Identity("unknown")),
        (["dledger://g"], Identity("unknown")),
        (["dledger://g/a/b"], Identity("unknown")),
        (["https://example.org"], Identity("unknown")),
        ([], Identity("unknown")),
    ],
)
def test_identity_from_san_uris(uris: list[str], expected: Identity) -> None:
    assert identity_from_uris(uris) == expected


def test_roles_decide_the_ledger_methods() -> None:
    allowed = {
        role: {
            m
            for m in ("Get", "ReadCommitted", "Metadata", "Append", "AppendStream", "LeadershipTransfer", "Other")
            if Identity("client", "c", "", role).may_call_ledger(m)
        }
        for role in ("read", "write", "admin", "")
    }
    assert allowed["read"] == {"Get", "ReadCommitted", "Metadata"}
    assert allowed["write"] == {"Get", "ReadCommitted", "Metadata", "Append", "AppendStream"}
    assert allowed["admin"] == allowed["write"] | {"LeadershipTransfer", "Other"}
    assert allowed[""] == set()
    assert Identity("member", "n0", "g").may_call_ledger("Metadata")
    assert not Identity("member", "n0", "g").may_call_ledger("Append")
    assert not Identity("unknown").may_call_ledger("Get")


def test_a_call_without_a_certificate_is_nobody() -> None:
    assert identity_of({"transport_security_type": [b"insecure"]}) == Identity("unknown")


def test_tls_settings_are_all_or_nothing(tmp_path: Path) -> None:
    assert TlsConfig.from_options(None, None, None) is None
    with pytest.raises(TlsError, match="missing --tls-key, --tls-ca"):
        TlsConfig.from_options("c.crt", None, "")
    with pytest.raises(ConfigError, match="tls_ca missing"):
        DLedgerConfig(peers="n0-127.0.0.1:1", tls_cert="c", tls_key="k")
    assert not DLedgerConfig(peers="n0-127.0.0.1:1").tls_enabled


def test_unreadable_or_non_pem_files_are_named(tmp_path: Path) -> None:
    write_dev_certs(tmp_path, CertPlan("g", ("n0",)))
    good = TlsConfig.in_directory(tmp_path, "n0")
    assert [len(x) > 0 for x in good.read()] == [True, True, True]
    with pytest.raises(TlsError, match=r"cannot read the TLS certificate .*nope\.crt"):
        TlsConfig(str(tmp_path / "nope.crt"), good.key, good.ca).read()
    (tmp_path / "junk").write_bytes(b"\x00\x01binary")
    with pytest.raises(TlsError, match=r"CA .*junk is not a PEM file"):
        TlsConfig(good.cert, good.key, str(tmp_path / "junk")).read()


def test_yaml_keys_set_the_tls_files(tmp_path: Path) -> None:
    path = tmp_path / "member.yaml"
    path.write_text("group: g\nselfId: n0\ntlsCert: /x/n0.crt\ntlsKey: /x/n0.key\ntlsCa: /x/ca.crt\n")
    assert load_config_file(path) == {
        "group": "g",
        "self_id": "n0",
        "tls_cert": "/x/n0.crt",
        "tls_key": "/x/n0.key",
        "tls_ca": "/x/ca.crt",
    }


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:1", True),
        ("127.9.9.9:1", True),
        ("localhost:1", True),
        ("[::1]:1", True),
        ("0.0.0.0:1", False),
        ("10.1.2.3:1", False),
        ("example.org:1", False),
    ],
)
def test_loopback_addresses(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def test_plaintext_off_loopback_needs_insecure(capsys: pytest.CaptureFixture[str]) -> None:
    refuse_plaintext("127.0.0.1:1", tls_on=False, insecure=False)
    refuse_plaintext("0.0.0.0:1", tls_on=True, insecure=False)
    refuse_plaintext("0.0.0.0:1", tls_on=False, insecure=True)
    with pytest.raises(SystemExit) as info:
        refuse_plaintext("0.0.0.0:1", tls_on=False, insecure=False)
    assert info.value.code == 2
    assert "refusing to listen on 0.0.0.0:1 without TLS" in capsys.readouterr().err


def test_dev_certs_refuse_to_overwrite(tmp_path: Path) -> None:
    plan = CertPlan("g", ("n0", "n1"), {"alice": "write"})
    written = write_dev_certs(tmp_path, plan)
    assert sorted(p.name for p in written) == sorted(plan.files())
    assert os.stat(tmp_path / "n0.key").st_mode & 0o777 == 0o600
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(CertsError, match=r"already holds ca\.crt"):
        write_dev_certs(tmp_path, plan)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    write_dev_certs(tmp_path, plan, force=True)
    assert (tmp_path / "ca.crt").read_bytes() != before["ca.crt"]


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (CertPlan("g", ()), "no members"),
        (CertPlan("g", ("n0", "n0")), "twice"),
        (CertPlan("g/h", ("n0",)), "bad name"),
        (CertPlan("g", ("n0\n",)), "bad name"),
        (CertPlan("g", ("n0",), hosts=("a b",)), "bad host"),
        (CertPlan("g", ("n0",), hosts=("",)), "bad host"),
        (CertPlan("g", ("n0",), hosts=("*",)), "bad host"),
        (CertPlan("g", ("n0",), hosts=("999.1.1.1",)), "bad host"),
        (CertPlan("g", ("n0",), hosts=("\udcff",)), "bad host"),
        (CertPlan("g", ("n0",), hosts=("-x.example",)), "bad host"),
        (CertPlan("g", ("n0",), hosts=("x" * 64 + ".example",)), "bad host"),
        (CertPlan("g", ("n0",), {"a": "root"}), "role 'root'"),
        (CertPlan("g", ("n0",), days=0), "at least 1 day"),
    ],
)
def test_bad_cert_plans(tmp_path: Path, plan: CertPlan, message: str) -> None:
    with pytest.raises(CertsError, match=message):
        write_dev_certs(tmp_path / "out", plan)
    assert not (tmp_path / "out").exists()


def test_certs_that_cannot_all_be_written_leave_none_behind(tmp_path: Path) -> None:
    """A full disk left an empty ca.crt, and the corrected rerun then needed --force."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "n0.key").symlink_to(tmp_path / "missing" / "n0.key")  # its write fails, after the CA's
    with pytest.raises(CertsError, match="cannot write certificates"):
        write_dev_certs(out, CertPlan("g", ("n0",)))
    assert list(out.iterdir()) == []
    write_dev_certs(out, CertPlan("g", ("n0",)))  # the rerun needs no --force


def test_issue_member_cert_needs_the_ca(tmp_path: Path) -> None:
    with pytest.raises(CertsError, match="cannot read the CA"):
        issue_member_cert(tmp_path, "g", "n3")
    write_dev_certs(tmp_path, CertPlan("g", ("n0",)))
    assert issue_member_cert(tmp_path, "g", "n3").name == "n3.crt"
    with pytest.raises(CertsError, match="exists"):
        issue_member_cert(tmp_path, "g", "n3")


def test_certs_init_command(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "tls"
    first = runner.invoke(main, ["certs", "init", str(out), "-g", "g", "-m", "n0,n1", "--client", "ops:admin"])
    assert first.exit_code == 0, first.output
    assert "wrote 8 files" in first.output and "ops (admin)" in first.output
    assert sorted(p.name for p in out.iterdir()) == sorted(CertPlan("g", ("n0", "n1"), {"ops": "admin"}).files())
    again = runner.invoke(main, ["certs", "init", str(out), "-g", "g", "-m", "n0,n1", "--client", "ops:admin"])
    assert again.exit_code == 1 and "use --force" in again.output
    forced = runner.invoke(main, ["certs", "init", str(out), "-m", "2", "--force"])
    assert forced.exit_code == 0 and "admin (admin), writer (write), reader (read)" in forced.output
    listed = runner.invoke(main, ["certs", "init", str(tmp_path / "j"), "-m", "n0", "--client", "ops:write", "--json"])
    summary = json.loads(listed.stdout)
    assert listed.exit_code == 0 and summary["members"] == ["n0"] and summary["clients"] == {"ops": "write"}
    assert sorted(Path(f).name for f in summary["files"]) == sorted(p.name for p in (tmp_path / "j").iterdir())


@pytest.mark.parametrize(
    "args",
    [
        ["--client", "bob:root"],
        ["--client", "a", "--client", "a:write"],
        ["-m", "0"],
        ["-m", ","],
        ["-g", "a/b"],
        ["--days", "0"],
    ],
)
def test_certs_init_usage_errors(tmp_path: Path, args: list[str]) -> None:
    result = CliRunner().invoke(main, ["certs", "init", str(tmp_path / "tls"), *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "tls").exists()


def test_client_commands_want_all_three_tls_files(tmp_path: Path) -> None:
    runner = CliRunner()
    partial = runner.invoke(main, ["status", "--tls-cert", str(tmp_path / "c.crt")])
    assert partial.exit_code == 2 and "missing --tls-key, --tls-ca" in partial.output
    env = {"DLEDGER_TLS_CERT": "x.crt", "DLEDGER_TLS_KEY": "x.key", "DLEDGER_TLS_CA": str(tmp_path / "none")}
    unreadable = runner.invoke(main, ["get", "0"], env=env)
    assert unreadable.exit_code == 2 and "cannot read the TLS certificate x.crt" in unreadable.output


def test_every_client_command_has_the_tls_options() -> None:
    commands = ["append", "get", "status", "leadership-transfer", "bench"]
    assert isinstance(main, click.Group)
    for name in commands:
        command = main.commands[name]
        options = {opt for p in command.params for opt in getattr(p, "opts", [])}
        assert {"--tls-cert", "--tls-key", "--tls-ca"} <= options, name


# -- files read again when they change


class _Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_a_file_watch_reports_each_change_once_and_looks_at_most_once_per_interval(tmp_path: Path) -> None:
    a, b, clock = tmp_path / "a", tmp_path / "b", _Clock()
    a.write_text("1")
    watch = FileWatch([a, b], clock)  # b is missing: a state of its own
    assert not watch.changed()
    a.write_text("22")
    assert not watch.changed()  # looked too recently
    clock.now += RECHECK_S
    assert watch.changed() and not watch.changed()
    clock.now += RECHECK_S
    assert not watch.changed()  # nothing new
    b.write_text("now here")
    clock.now += RECHECK_S
    assert watch.changed()
    b.unlink()
    clock.now += RECHECK_S
    assert watch.changed()


def test_a_key_that_is_not_the_certificates_is_refused(tmp_path: Path) -> None:
    make = CertPlan("g", ("n0", "n1"), {})
    write_dev_certs(tmp_path, make)
    n0, n1 = TlsConfig.in_directory(tmp_path, "n0"), TlsConfig.in_directory(tmp_path, "n1")
    cert, key, _ = n0.read()
    assert key_matches(cert, key) and not key_matches(cert, n1.read()[1])
    assert not key_matches(b"-----BEGIN CERTIFICATE-----\ngarbage\n", key)
    assert n0.read_matching()[0] == cert
    half_rotated = TlsConfig(n0.cert, n1.key, n0.ca)  # the new key is there, the new certificate not yet
    with pytest.raises(TlsError, match="is not the key of the certificate"):
        half_rotated.read_matching()
    with pytest.raises(TlsError, match="is not the key of the certificate"):
        half_rotated.server_credentials()
    config = DLedgerConfig(  # a member's peer transport checks the same at start
        group="g", self_id="n0", peers="n0-127.0.0.1:20911;n1-127.0.0.1:20912", store_base_dir=str(tmp_path),
        tls_cert=half_rotated.cert, tls_key=half_rotated.key, tls_ca=half_rotated.ca,
    )  # fmt: skip
    with pytest.raises(TlsError, match="is not the key of the certificate"):
        GrpcTransport(config)


def test_a_member_keeps_its_peer_credentials_while_a_rotation_is_half_done(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_dev_certs(tmp_path, CertPlan("g", ("n0", "n1"), {}))
    tls = TlsConfig.in_directory(tmp_path, "n0")
    config = DLedgerConfig(
        group="g",
        self_id="n0",
        peers="n0-127.0.0.1:20911;n1-127.0.0.1:20912",
        store_base_dir=str(tmp_path),
        tls_cert=tls.cert,
        tls_key=tls.key,
        tls_ca=tls.ca,
    )
    transport = GrpcTransport(config)
    try:
        before = transport._credentials
        good_key = Path(tls.key).read_bytes()
        Path(tls.key).write_bytes((tmp_path / "n1.key").read_bytes())  # the new key, not yet its certificate
        with caplog.at_level(logging.ERROR, logger="dledger.transport.grpc_client"):
            transport._renew_credentials()
        assert transport._credentials is before
        assert "is not the key of the certificate" in caplog.text and "keep the TLS files read before" in caplog.text
        Path(tls.key).write_bytes(good_key)
        transport._renew_credentials()
        assert transport._credentials is not before  # whole again: taken
    finally:
        transport.close()


def test_a_client_takes_rotated_files_for_new_channels_and_keeps_them_while_half_done(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_dev_certs(tmp_path, CertPlan("g", ("n0", "n1"), {"writer": "write"}))
    tls = TlsConfig.in_directory(tmp_path, "client-writer")
    clock = ManualClock(1_000_000)
    members = Members("n0-127.0.0.1:20911;n1-127.0.0.1:20912", "g", 5.0, clock, tls)
    try:
        first = members.stubs("127.0.0.1:20911")
        good_key = Path(tls.key).read_bytes()
        Path(tls.key).write_bytes((tmp_path / "n1.key").read_bytes())  # a new key, its certificate not yet there
        assert members.stubs("127.0.0.1:20911") is first  # not looked at again within RECHECK_S
        clock.advance(int(RECHECK_S * 1000))
        with caplog.at_level(logging.ERROR, logger="dledger.client.members"):
            assert members.stubs("127.0.0.1:20911") is first
        assert "is not the key of the certificate" in caplog.text and "keep the TLS files read before" in caplog.text
        Path(tls.key).write_bytes(good_key)  # whole again (a real rotation writes a new pair)
        clock.advance(int(RECHECK_S * 1000))
        renewed = members.stubs("127.0.0.1:20911")
        assert renewed is not first and members.stubs("127.0.0.1:20911") is renewed
    finally:
        members.close()
    with pytest.raises(TlsError, match="is not the key of the certificate"):  # refused at once, not at a handshake
        Members("n0-127.0.0.1:20911", "g", 5.0, clock, TlsConfig(tls.cert, str(tmp_path / "n1.key"), tls.ca))


def reissue(directory: Path, name: str, start: datetime.datetime, end: datetime.datetime) -> None:
    """Replace `name`.crt/.key in `directory` by a certificate of the directory's CA valid
    from `start` to `end` (a test's expired or future certificate)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ca_cert = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.load_pem_x509_certificate((directory / f"{name}.crt").read_bytes()).subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    (directory / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (directory / f"{name}.key").write_bytes(pem)


def test_a_certificate_outside_its_validity_is_refused_and_one_near_its_end_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every handshake with an expired certificate fails: a member, its peer transport,
    a client and a rotation refuse it when they read it, saying so, instead of starting
    and then failing every connection."""
    write_dev_certs(tmp_path, CertPlan("g", ("n0",), {}))
    tls = TlsConfig.in_directory(tmp_path, "n0")
    cert_pem = Path(tls.cert).read_bytes()
    from cryptography import x509

    parsed = x509.load_pem_x509_certificate(cert_pem)
    end, start = parsed.not_valid_after_utc, parsed.not_valid_before_utc
    with caplog.at_level(logging.WARNING, logger="dledger.security.tls"):
        tls.read_matching(now=end - datetime.timedelta(days=15))
        assert caplog.text == ""  # more than 14 days left: nothing to say
        tls.read_matching(now=end - datetime.timedelta(days=2))
        assert f"the TLS certificate {tls.cert} expires at {end:%Y-%m-%d %H:%M} UTC, in 2.0 days" in caplog.text
        caplog.clear()
        tls.read_matching(now=end - datetime.timedelta(days=1))
        assert caplog.text == ""  # once a process for one certificate (a Spark executor reads it every task)
    assert tls.read_matching(now=start)[0] == cert_pem and tls.read_matching(now=end)[0] == cert_pem  # edges hold
    with pytest.raises(TlsError, match=rf"{tls.cert} expired at {end:%Y-%m-%d %H:%M} UTC"):
        tls.read_matching(now=end + datetime.timedelta(seconds=1))
    with pytest.raises(TlsError, match=r"is not valid before .* UTC \(is this clock right\?\)"):
        tls.read_matching(now=start - datetime.timedelta(seconds=1))

    now = datetime.datetime.now(datetime.UTC)
    reissue(tmp_path, "n0", now - datetime.timedelta(days=30), now - datetime.timedelta(days=1))
    with pytest.raises(TlsError, match="expired at"):
        tls.server_credentials()
    with pytest.raises(TlsError, match="expired at"):
        DLedgerClient("n0-127.0.0.1:1", "g", tls=tls)
    config = DLedgerConfig(
        group="g", self_id="n0", peers="n0-127.0.0.1:20911", store_base_dir=str(tmp_path),
        tls_cert=tls.cert, tls_key=tls.key, tls_ca=tls.ca,
    )  # fmt: skip
    with pytest.raises(TlsError, match="expired at"):
        GrpcTransport(config)


def test_a_members_metrics_say_when_its_certificate_expires_and_follow_a_rotation(tmp_path: Path) -> None:
    """`dledger_tls_certificate_expiry_timestamp_seconds`, read at scrape time from the
    member's certificate file: the figure an alert on a running member needs (the
    warning of `check_validity` comes only when the files are read)."""
    import urllib.request

    from dledger.server import DLedgerServer
    from tests.security.conftest import free_ports

    write_dev_certs(tmp_path, CertPlan("g", ("n0",), {}))
    tls = TlsConfig.in_directory(tmp_path, "n0")
    port, metrics_port = free_ports(2)
    config = DLedgerConfig(
        group="g", self_id="n0", peers=f"n0-127.0.0.1:{port}", store_base_dir=str(tmp_path / "store"),
        tls_cert=tls.cert, tls_key=tls.key, tls_ca=tls.ca,
    )  # fmt: skip

    def scraped() -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as page:
            text = page.read().decode()
        line = next(x for x in text.splitlines() if x.startswith("dledger_tls_certificate_expiry_timestamp_seconds{"))
        assert f'path="{tls.cert}"' in line and 'self_id="n0"' in line
        return float(line.rsplit(" ", 1)[1])

    def expiry() -> float:
        from cryptography import x509

        return x509.load_pem_x509_certificate(Path(tls.cert).read_bytes()).not_valid_after_utc.timestamp()

    server = DLedgerServer(config, metrics_port=metrics_port).start()
    try:
        assert scraped() == expiry()
        now = datetime.datetime.now(datetime.UTC)
        reissue(tmp_path, "n0", now - datetime.timedelta(days=1), now + datetime.timedelta(days=40))
        assert scraped() == expiry() != 0
    finally:
        server.shutdown()


def test_a_client_key_that_is_not_its_certificates_is_a_usage_error(tmp_path: Path) -> None:
    """Before: exit 1, `error: TlsError: ...`, the form of an unexpected exception."""
    write_dev_certs(tmp_path, CertPlan("g", ("n0", "n1"), {}))
    n0, n1 = TlsConfig.in_directory(tmp_path, "n0"), TlsConfig.in_directory(tmp_path, "n1")
    argv = ["status", "-p", "n0-127.0.0.1:1", "--tls-cert", n0.cert, "--tls-key", n1.key, "--tls-ca", n0.ca]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, result.output
    assert f"the TLS key {n1.key} is not the key of the certificate {n0.cert}" in result.output
    assert "TlsError" not in result.output


def test_a_certificate_that_its_ca_did_not_sign_is_refused(tmp_path: Path) -> None:
    """Helper K: a member whose certificate came from another CA than its --tls-ca
    started and sat isolated, every handshake failing on both sides, with no log line."""
    write_dev_certs(tmp_path / "a", CertPlan("g", ("n0", "n1"), {}))
    write_dev_certs(tmp_path / "b", CertPlan("g", ("n0", "n1"), {}))
    own = TlsConfig.in_directory(tmp_path / "a", "n0")
    cert, _, ca = own.read()
    other_ca = TlsConfig.in_directory(tmp_path / "b", "n0").ca
    assert issued_by(cert, ca) and not issued_by(cert, Path(other_ca).read_bytes())
    assert issued_by(cert + ca, Path(other_ca).read_bytes())  # an issuer sent along in the chain counts
    assert not issued_by(b"-----BEGIN CERTIFICATE-----\ngarbage\n", ca)
    mixed = TlsConfig(own.cert, own.key, other_ca)
    message = f"the TLS certificate {own.cert} is not signed by the CA {other_ca}"
    with pytest.raises(TlsError, match=re.escape(message)):
        mixed.read_matching()
    config = DLedgerConfig(  # a member's peer transport checks it at start
        group="g", self_id="n0", peers="n0-127.0.0.1:20911;n1-127.0.0.1:20912", store_base_dir=str(tmp_path),
        tls_cert=mixed.cert, tls_key=mixed.key, tls_ca=mixed.ca,
    )  # fmt: skip
    with pytest.raises(TlsError, match="is not signed by the CA"):
        GrpcTransport(config)
    argv = ["status", "-p", "n0-127.0.0.1:1", "--tls-cert", own.cert, "--tls-key", own.key, "--tls-ca", other_ca]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2 and message in result.output and "TlsError" not in result.output
