"""Fuzzing the command line: random argument lists over the real `dledger` command tree
(each command's own option names mixed with hostile values) must end with exit status
0, 1 or 2, never a traceback, and a failure must say why in one `error:` line.

In-process with click's CliRunner against a fake Ledger cluster (DLEDGER_PEERS), with
the parts that would run for good replaced: `server` and `cluster` stop once their
options are checked, `bench` does not load, `demo` writes to no store, `certs init`
writes no certificates. Subcommands (`certs token`, `kv put`, ...) are fuzzed too. A
command that still waits (`get --follow`, a member that never answers with a huge
--timeout) is interrupted after a budget, which then allows exit status 130 too. A
handful of hostile command lines also run as real processes.

DLEDGER_FUZZ_EXAMPLES sets the number of in-process examples (default 400).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dledger.cli import bench_cmd, demo
from dledger.cli.cluster_runner import LocalCluster
from dledger.cli.loadgen import BenchConfig, BenchResult
from dledger.cli.main import main
from dledger.security import certs
from dledger.server import DLedgerServer
from tests.client.fake_ledger import FakeCluster

pytestmark = pytest.mark.security

EXAMPLES = int(os.environ.get("DLEDGER_FUZZ_EXAMPLES", "400"))
BUDGET_S = 3
"""Seconds an example may run before it is interrupted (a cut-off, not a speed check)."""

HOSTILE = [
    "",
    " ",
    "-",
    "--",
    "0",
    "1",
    "-1",
    "65536",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "1" * 400,
    "nan",
    "inf",
    "-inf",
    "1e400",
    "0x10",
    "1.5",
    "64MiB",
    "-1g",
    "n0-127.0.0.1:99999",
    "n0-127.0.0.1",
    "n0-a,b:1",
    "n0-h:1;n0-h:2",
    "n0-[::1]:1",
    "n0-127.0.0.1:1",
    "n1",
    "n7",
    "é\u202e",
    "%s%n",
    "../../etc/passwd",
    "/dev/null",
    "/",
]


class _Budget(Exception):
    pass


def _edges(param: click.Parameter) -> list[str]:
    """Values at and past the edges of what `param` takes."""
    kind = param.type
    if isinstance(kind, click.IntRange | click.FloatRange):
        edges = [kind.min, kind.max]
        found = [str(e) for e in edges if e is not None]
        found += [str(e + d) for e in edges if e is not None for d in (-1, 1)]
        return [*found, "nan", "inf", "-inf", "1e400", str(2**63), str(-(2**63) - 1), "0", "-0.0"]
    if isinstance(kind, click.Choice):
        return [*map(str, kind.choices), "", "NOPE"]
    if kind.name in ("integer", "float"):
        return ["nan", "-1", "0", str(2**64), "1e400"]
    return []


def _commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    """Every command under `group` by its words ("append", "certs token", ...)."""
    for name, command in group.commands.items():
        yield prefix + name, command
        if isinstance(command, click.Group):
            yield from _commands(command, f"{prefix}{name} ")


def _command_tree() -> dict[str, dict[str, list[str]]]:
    """Every command and subcommand: its option names, each with the values at its edges."""
    tree: dict[str, dict[str, list[str]]] = {}
    for name, command in _commands(main):
        options: dict[str, list[str]] = {"--help": []}
        for param in command.params:
            edges = _edges(param)
            if isinstance(param, click.Option):
                for opt in [*param.opts, *param.secondary_opts]:
                    options[opt] = edges
            else:
                options[""] = edges  # an argument: its values go bare
        tree[name] = options
    return tree


TREE = _command_tree()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeCluster]:
    cluster = FakeCluster(3)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Paths worth giving as values: a binary file, YAML, a directory, nothing."""
    base = tmp_path_factory.mktemp("fuzz-files")
    binary = base / "binary"
    binary.write_bytes(bytes(range(256)) * 4)
    yaml = base / "config.yaml"
    yaml.write_text("selfId: n0\npeers: n0-127.0.0.1:99999\nmappedFileSizeForEntryData: -5\n")
    nested = base / "nested.yaml"
    nested.write_text("[" * 5000)
    return [str(binary), str(yaml), str(nested), str(base), str(base / "missing")]


@pytest.fixture(scope="module")
def patched() -> Iterator[None]:
    """Replace what would run for good (serve, load, write a store) with stand-ins."""
    patch = pytest.MonkeyPatch()

    def no_serving(self: DLedgerServer, grace_s: float = 2.0) -> int:
        return 0

    def no_bench(client: Any, config: BenchConfig, *_: Any) -> BenchResult:
        return BenchResult(config, elapsed_s=0.5, requests=1, entries=1, latency_ms={"p50": 1.0})

    class NoLog:
        begin_index = end_index = 0

        def __init__(self, *_: Any) -> None:
            pass

        def __enter__(self) -> NoLog:
            return self

        def __exit__(self, *_: Any) -> None:
            pass

        def wait_warm(self) -> None:
            pass

        def append(self, body: bytes) -> None:
            pass

        def get_body(self, index: int) -> bytes:
            return b""

        def get(self, index: int) -> Any:
            return type("E", (), {"index": 0, "term": 0, "pos": 0, "size": 48})()

    patch.setattr(DLedgerServer, "run_until_signal", no_serving)
    patch.setattr(LocalCluster, "run", lambda self: 0)
    patch.setattr(bench_cmd, "run_bench", no_bench)
    patch.setattr(demo, "open_log", NoLog)
    # `certs init DIR` / `cluster --tls -s DIR` would write certificates anywhere a value points
    patch.setattr(certs, "write_dev_certs", lambda directory, plan, force=False: [])
    try:
        yield
    finally:
        patch.undo()


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def invoke(argv: list[str], env: dict[str, str]) -> tuple[int, str, str, bool]:
    """Run `dledger ARGV` in-process within the budget; (status, stdout, stderr, cut)."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(BUDGET_S)
    try:
        result = CliRunner().invoke(main, argv, env=env)
        cut = signal.alarm(0) == 0
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"dledger {argv!r} raised {result.exception!r}") from result.exception
    return result.exit_code, result.stdout, result.stderr, cut


def check_outcome(argv: list[str], code: int, out: str, err: str, cut: bool) -> None:
    """The contract: 0/1/2 (130 when cut), no traceback, failures say why."""
    allowed = {0, 1, 2, 130} if cut else {0, 1, 2}
    assert code in allowed, (argv, code, out[-500:], err[-500:])
    assert "Traceback" not in out and "Traceback" not in err, (argv, err[-2000:])
    if code == 1 and not cut:
        assert err.strip(), (argv, out[-500:])
        last = err.strip().splitlines()[-1]
        assert last.startswith(("error: ", "Error: ", "interrupted", "Aborted!")), (argv, err)
    if code == 2:
        assert "Error" in err or "error" in err, (argv, err)


def argv_strategy(values: list[str]) -> st.SearchStrategy[list[str]]:
    value = st.one_of(
        st.sampled_from(values),
        st.text(max_size=24),
        st.integers(-(2**70), 2**70).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
    )

    def for_command(name: str) -> st.SearchStrategy[list[str]]:
        options = TREE[name]

        def with_value(opt: str) -> st.SearchStrategy[list[str]]:
            edges = options[opt]
            fitting = st.sampled_from(edges) if edges else value
            pair = st.one_of(fitting, fitting, value).map(lambda v: [opt, v] if opt else [v])
            return pair if edges or not opt else st.one_of(pair, st.just([opt]))

        chunk = st.sampled_from(sorted(options)).flatmap(with_value)
        return st.lists(chunk, max_size=5).map(lambda chunks: [*name.split(), *(t for c in chunks for t in c)])

    return st.one_of(
        st.sampled_from(sorted(TREE)).flatmap(for_command),
        st.lists(st.one_of(st.sampled_from(["-v", "--version", "-h", "nope"]), value), max_size=4),
    )


def test_random_argv_in_process_keeps_the_exit_contract(
    fake: FakeCluster, files: list[str], patched: None, tmp_path: Path
) -> None:
    env = {"DLEDGER_PEERS": fake.peers, "DLEDGER_GROUP": "default"}
    values = [*HOSTILE, fake.peers, *files]
    cwd = os.getcwd()
    os.chdir(tmp_path)  # `demo` and `cluster` default to ./.dledger-data

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(argv_strategy(values))
    def fuzz(argv: list[str]) -> None:
        code, out, err, cut = invoke(argv, env)
        check_outcome(argv, code, out, err, cut)

    try:
        fuzz()
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize(
    "argv",
    [
        ["get", "9223372036854775808"],
        ["get", "--timeout", "nan"],
        ["append", "x", "-p", "n0-127.0.0.1:99999"],
        ["status", "-p", "n0-127.0.0.1:1", "--timeout", "0.2"],
        ["demo", "--count", "0"],
        ["server", "-i", "n0", "-p", "n0-127.0.0.1:1;n1-127.0.0.1:1"],
        ["leadership-transfer", "-t", "n0", "--term", "-1"],
        ["nope", "--what"],
    ],
)
def test_hostile_command_lines_as_real_processes(argv: list[str], files: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dledger.cli.main", *argv, *(["-c", files[0]] if argv[0] == "server" else [])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    check_outcome(argv, done.returncode, done.stdout, done.stderr, cut=False)
    assert done.returncode != 0
