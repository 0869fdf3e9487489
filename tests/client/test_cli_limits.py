"""CLI requests stay within what a member takes, and the CLI's edges: `append` splits its
batches by bytes too (16 MiB a request) and builds them one at a time, `bench` caps its
batch by bytes and never paces past --duration."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from dledger.cli.append_input import batches, stdin_batches
from dledger.cli.loadgen import _pace
from dledger.cli.main import main
from dledger.clock import ManualClock
from dledger.config import MAX_APPEND_BYTES
from tests.client.fake_ledger import FakeCluster

pytestmark = pytest.mark.unit

BIG = 4_194_256
"""The largest body `append --body-size` takes: four fit in 16 MiB, five do not."""


def run(fake: FakeCluster, *args: str, timeout_s: float = 30) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [*args, "-p", fake.peers, "--timeout", str(timeout_s)])
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


def request_bytes(fake: FakeCluster) -> list[int]:
    return [sum(map(len, r)) for r in fake["n0"].append_requests]


def test_batches_cut_by_bytes_and_read_the_bodies_lazily() -> None:
    endless = batches(itertools.repeat(b"x" * 10), 1000, max_bytes=25)
    assert [next(endless) for _ in range(2)] == [[b"x" * 10] * 2] * 2  # never reads on to the 1000th body
    assert list(batches([b"a" * 30, b"b", b"c"], 10, max_bytes=25)) == [[b"a" * 30], [b"b", b"c"]]
    assert list(batches([b"a", b"b", b"c"], 2)) == [[b"a", b"b"], [b"c"]]


def test_stdin_batches_cut_by_bytes_too() -> None:
    import io

    lines = b"".join(b"%d%s\n" % (i, b"y" * 9) for i in range(6))
    got = list(stdin_batches(io.BytesIO(lines), 100, max_bytes=25))
    assert [len(b) for b in got] == [2, 2, 2] and b"".join(itertools.chain(*got)).count(b"y") == 54


def test_append_splits_generated_bodies_by_bytes(fake: FakeCluster) -> None:
    code, out, err = run(fake, "append", "-c", "5", "--body-size", str(BIG), "--json")
    assert code == 0, err
    assert json.loads(out) == {"first_index": 0, "last_index": 4, "count": 5, "contiguous": True}
    assert [len(r) for r in fake["n0"].append_requests] == [4, 1]
    assert max(request_bytes(fake)) <= MAX_APPEND_BYTES


def test_append_records_split_by_their_encoded_bytes(fake: FakeCluster) -> None:
    # 65,536 values of 256 bytes are exactly 16 MiB: as records (key, timestamp) they are more
    args = ("append", "-c", "65536", "--body-size", "256", "-b", "65536", "--key", "k", "--json")
    code, _, err = run(fake, *args)
    assert code == 0, err
    assert len(fake.log.bodies) == 65536 and len(fake["n0"].append_requests) == 2
    assert max(request_bytes(fake)) <= MAX_APPEND_BYTES


def test_append_file_with_count_is_a_usage_error(fake: FakeCluster, tmp_path: Path) -> None:
    path = tmp_path / "body"
    path.write_bytes(b"x")
    code, _, err = run(fake, "append", "-f", str(path), "-c", "3")
    assert code == 2 and "--count does not go with --file" in err and fake.log.bodies == []
    assert "not with --file" in CliRunner().invoke(main, ["append", "--help"]).stdout


def test_bench_caps_its_batch_by_bytes(fake: FakeCluster) -> None:
    args = ("bench", "-m", "batch", "-c", "1", "-d", "0.1", "-s", str(BIG), "-b", "8", "--json")
    code, out, err = run(fake, *args, timeout_s=60)
    assert code == 0, err
    assert json.loads(out)["config"]["batch_size"] == 4 and "4 bodies per request" in err
    assert {len(r) for r in fake["n0"].append_requests} == {4}


def test_pacing_ends_with_the_run() -> None:
    stop = threading.Event()
    clock = ManualClock(1000)
    assert _pace(clock, 1000, 0, 0.001, stop)  # the first request is due at once
    stop.set()
    assert not _pace(clock, 1000, 1, 1e-300, stop)  # due in ~forever: the end of the run ends the wait
    assert _pace(clock, 0, 1, 0.0, stop)  # no rate: no pacing


@pytest.mark.parametrize("mode", ["single", "stream"])
def test_bench_rate_does_not_outlast_the_duration(fake: FakeCluster, mode: str) -> None:
    # with --rate 0.1 the second request of the thread is due 10 s (stream: 640 s) after
    # the start: the run ends at --duration all the same
    args = ("bench", "-m", mode, "-c", "1", "-d", "0.2", "--rate", "0.1", "--json")
    code, out, err = run(fake, *args)
    assert code == 0, err
    assert json.loads(out)["elapsed_s"] < 5
