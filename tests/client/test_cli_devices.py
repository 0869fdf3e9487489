"""A device or an endless file given where a body, a config, a PEM or a tokens file
belongs is refused once it passes its limit, with one line, instead of being read whole
into memory (helper D: `append -f /dev/full` reached 7.9 GB in 6 s and ignored Ctrl-C;
`server -c /dev/full` 4.6 GB in 3 s)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from click.testing import CliRunner

from dledger.bounded import read_bounded
from dledger.cli.main import main
from tests.client.fake_ledger import FakeCluster

pytestmark = pytest.mark.unit


def run(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), input=stdin)
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


def test_read_bounded_reads_up_to_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_bounded(path, 10) == b"x" * 10
    with pytest.raises(OSError) as err:
        read_bounded(path, 9)
    assert err.value.errno == errno.EFBIG
    with pytest.raises(OSError) as err:
        read_bounded("/dev/zero", 1 << 20)
    assert err.value.errno == errno.EFBIG and "a device or an endless file" in str(err.value)


def test_a_body_from_an_endless_file_or_stdin_is_refused(fake: FakeCluster) -> None:
    code, _, err = run("append", "-f", "/dev/zero", "-p", fake.peers)
    assert (code, err) == (1, "error: more than 4,194,256 bytes (a device or an endless file?) (/dev/zero)\n")
    code, _, err = run("append", "-", "-p", fake.peers, stdin=b"\0" * (5 << 20))  # one line of 5 MiB
    assert (code, err) == (1, "error: cannot read stdin: a line of more than 4,194,256 bytes (a body's limit)\n")
    assert fake.log.bodies == []  # nothing was appended


def test_settings_tls_and_tokens_from_a_device_are_refused(tmp_path: Path) -> None:
    code, _, err = run("server", "-c", "/dev/zero", "-p", "n0-127.0.0.1:1", "-s", str(tmp_path))
    assert code == 2 and "cannot read config file /dev/zero: more than 16,777,216 bytes" in err
    code, _, err = run("certs", "token", "t", "-f", "/dev/zero")
    assert code == 1 and "more than 16,777,216 bytes" in err
