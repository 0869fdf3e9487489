"""The chaos harness's own parts, without a cluster (fast: part of the default suite):
the start options it passes, the torn-tail damage, the runner's refusals and table."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dledger.embedded import open_log
from dledger.store import StoreConfig, load_checkpoint
from tests.chaos import procs
from tests.chaos.checker import Verdict
from tests.chaos.history import History
from tests.chaos.netns import SANDBOX_ENV, Network
from tests.chaos.procs import ChaosCluster, torn_range
from tests.chaos.run import main, table


@pytest.fixture
def flags(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The options `dledger server --help` lists, as the test sets them."""
    listed: set[str] = set()
    monkeypatch.setattr(procs, "server_flags", lambda: frozenset(listed))
    return listed


def test_first_start_is_new_later_ones_existing_and_repair_after_damage(tmp_path: Path, flags: set[str]) -> None:
    flags.update({"--initial-cluster-state", "--repair"})
    cluster = ChaosCluster(tmp_path, History(), flush="sync")
    args = cluster.server_args("n1")
    assert args[args.index("--initial-cluster-state") + 1] == "new"
    assert "--repair" not in args and args[args.index("--flush-mode") + 1] == "sync"
    cluster.lives["n1"] = 1  # started once
    cluster.repair_next.add("n1")
    args = cluster.server_args("n1")
    assert args[args.index("--initial-cluster-state") + 1] == "existing" and "--repair" in args
    assert args.count("--initial-cluster-state") == 1  # whatever LocalCluster itself passes


def test_an_option_and_its_value_are_dropped() -> None:
    args = ["-i", "n0", "--initial-cluster-state", "new", "--x", "--initial-cluster-state=existing", "-s", "d"]
    assert procs._without_option(args, "--initial-cluster-state") == ["-i", "n0", "--x", "-s", "d"]


def test_without_the_options_members_start_as_before(tmp_path: Path, flags: set[str]) -> None:
    cluster = ChaosCluster(tmp_path, History(), flush="async")
    cluster.lives["n0"] = 2
    cluster.repair_next.add("n0")
    args = cluster.server_args("n0")
    assert "--initial-cluster-state" not in args and "--repair" not in args


def test_the_torn_tail_reaches_below_the_committed_index(tmp_path: Path) -> None:
    node_dir = tmp_path / "dledger-n0"
    log = open_log(node_dir, StoreConfig(data_file_size=8 << 20, index_file_size=1 << 20))
    for k in range(3000):
        log.append(f"c0-{k}".encode() * 8)
    log.close()
    assert load_checkpoint(node_dir).committed == 2999
    start, end, path = torn_range(node_dir)
    assert end - start >= 64 << 10 and path.name == "00000000000000000000"
    with open(path, "r+b") as segment:
        segment.seek(start)
        segment.write(random.Random(0).randbytes(end - start))
    with pytest.raises(Exception, match="below the committed index 2999"):
        open_log(node_dir)


def test_a_store_without_data_cannot_be_torn(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    with pytest.raises(RuntimeError, match="has no data segment"):
        torn_range(tmp_path)


def test_a_running_member_cannot_be_torn_or_wiped(tmp_path: Path) -> None:
    cluster = ChaosCluster(tmp_path, History(), flush="async")

    class Running:
        def poll(self) -> None:
            return None

    cluster.members["n0"].process = Running()  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match="n0 is running"):
        cluster.tear_tail("n0")
    with pytest.raises(RuntimeError, match="n0 is running"):
        cluster.wipe("n0")
    cluster.members["n0"].process = None


def test_namespaces_are_built_only_inside_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SANDBOX_ENV, raising=False)
    with pytest.raises(RuntimeError, match="inside the sandbox"):
        Network(["n0", "n1", "n2"])
    monkeypatch.setenv(SANDBOX_ENV, "1")
    monkeypatch.setenv("DLEDGER_CHAOS_DROP", "iptables-legacy")
    with pytest.raises(ValueError, match="must be nft or route"):
        Network(["n0"])
    monkeypatch.setenv("DLEDGER_CHAOS_DROP", "route")
    network = Network(["n0", "n1"])
    assert network.method == "route" and network.address("n1") == "10.77.0.11"
    assert network.exec_prefix("n1") == ["ip", "netns", "exec", "chaos-n1"]


def test_an_unknown_schedule_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--schedules", "leader-kill,meteor"])
    assert exit_info.value.code == 2
    assert "unknown schedules ['meteor']" in capsys.readouterr().err


def test_the_table_has_a_row_per_schedule_and_mode_and_totals() -> None:
    verdicts = [
        Verdict("leader-kill", "async", acked=10, unavailability=[1.0, 3.0]),
        Verdict("leader-kill", "async", acked=5, unavailability=[2.0]),
        Verdict("wipe-rejoin", "sync", acked=7, lost=3, unavailability=[None]),
        Verdict("partition-leader", "sync", note="SKIPPED: not root"),
    ]
    rows = table(verdicts).splitlines()
    leader = next(r for r in rows if r.startswith("leader-kill"))
    assert leader.split()[:6] == ["leader-kill", "async", "2", "2", "15", "0"]
    assert leader.split()[-2:] == ["2.00", "3.00"]
    wipe = next(r for r in rows if r.startswith("wipe-rejoin"))
    assert wipe.split()[2:4] == ["1", "0"] and wipe.split()[6] == "3"
    assert "SKIPPED: not root" in next(r for r in rows if r.startswith("partition-leader"))
    assert rows[-1].split()[:4] == ["total", "4", "2", "22"]  # a skipped run is no pass
