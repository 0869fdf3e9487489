"""Member ids on the command line follow the rule `--peers` applies (letters, digits,
'_' and '.'; no '-'): `certs init -m` refuses what `server` and `--peers` would refuse,
and `server -i` says why an id is bad instead of that it is not in the peers."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dledger.cli.main import main

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("members", "said"),
    [
        ("n-0", "'-' is not allowed in ids"),
        ("-1", "'-' is not allowed in ids"),
        ("3,", "an empty member id"),
        ("n0,,n1", "an empty member id"),
        ("n0,n0", "given twice"),
        ("n0,n/1", "use letters, digits, '_' and '.'"),
    ],
)
def test_certs_init_refuses_ids_the_peers_refuse(tmp_path: Path, members: str, said: str) -> None:
    result = CliRunner().invoke(main, ["certs", "init", str(tmp_path / "tls"), "-m", members])
    assert result.exit_code == 2 and "'--members'" in result.stderr and said in result.stderr, result.output
    assert not (tmp_path / "tls").exists()


def test_certs_init_takes_ids_the_peers_take(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["certs", "init", str(tmp_path / "tls"), "-m", "a_1;b.2", "--json"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "tls" / "a_1.crt").exists() and (tmp_path / "tls" / "b.2.crt").exists()


def test_server_says_a_dash_is_not_allowed_in_its_id(tmp_path: Path) -> None:
    args = ["server", "-i", "n-0", "-p", "n-0-127.0.0.1:26990", "-s", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "'--id'" in result.stderr and "'-' is not allowed in ids" in result.stderr
    assert "not in peers" not in result.stderr and list(tmp_path.iterdir()) == []
