"""Peers strings (`parse_peers`, used by every command and the server) are validated in
full: ids, hosts, ports, duplicates; the CLI reports a bad one as a usage error."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dledger.cli.main import main
from dledger.config import ConfigError, DLedgerConfig, parse_address, parse_peers

pytestmark = pytest.mark.unit


def test_good_peers_keep_their_order_and_hosts_with_dashes() -> None:
    assert parse_peers(" n0-127.0.0.1:20911 ; n1-my-host.example:1;n_2.a-[::1]:65535;") == {
        "n0": "127.0.0.1:20911",
        "n1": "my-host.example:1",
        "n_2.a": "[::1]:65535",
    }
    assert parse_address("[::1]:20911") == ("[::1]", 20911)


@pytest.mark.parametrize(
    ("peers", "says"),
    [
        ("", "no peers"),
        (" ; ;", "no peers"),
        ("n0", "expected <id>-<host>:<port>"),
        ("-127.0.0.1:1", "expected <id>-<host>:<port>"),
        ("n0-", "expected <id>-<host>:<port>"),
        ("n0-127.0.0.1:99999", "bad port 99999"),
        ("n0-127.0.0.1:0", "bad port 0"),
        ("n0-127.0.0.1:-1", "bad port"),
        ("n0-127.0.0.1:+80", "bad port"),
        ("n0-127.0.0.1:1" + "0" * 5000, "bad port"),
        ("n0-127.0.0.1:٣", "bad port"),
        ("n0-127.0.0.1", "expected <host>:<port>"),
        ("n0-127.0.0.1:", "bad port"),
        ("n0-:20911", "expected <host>:<port>"),
        ("n0-a,b:1", "bad host 'a,b'"),
        ("n0-a b:1", "bad host 'a b'"),
        ("n0-::1:1", "bad host '::1'"),
        ("n0-[zz]:1", "bad host '[zz]'"),
        ("n 0-h:1", "bad peer id 'n 0'"),
        ("n/0-h:1", "bad peer id 'n/0'"),
        ("n0-h:1;n0-k:2", "duplicate peer id 'n0'"),
        ("n0-h:1;n1-H:1", "the same address"),
    ],
)
def test_bad_peers_are_refused_with_a_clear_message(peers: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_peers(peers)
    assert says in str(info.value)


def test_the_cli_and_the_server_config_refuse_bad_peers_as_usage_errors() -> None:
    for peers in ("n0-127.0.0.1:99999", "n0-127.0.0.1", "n0-a,b:1", "n0-h:1;n1-h:1"):
        result = CliRunner().invoke(main, ["append", "x", "-p", peers])
        assert result.exit_code == 2 and "--peers" in result.stderr, result.stderr
        assert "Traceback" not in result.output
        with pytest.raises(ConfigError):
            DLedgerConfig(self_id="n0", peers=peers)
    result = CliRunner().invoke(main, ["server", "-i", "n0", "-p", "n0-127.0.0.1:99999", "-s", "/nonexistent/x"])
    assert result.exit_code == 2 and "bad port 99999" in result.stderr
    result = CliRunner().invoke(main, ["server", "-i", "n0", "-p", "n0-127.0.0.1:1", "--listen", "0.0.0.0"])
    assert result.exit_code == 2 and "--listen" in result.stderr
