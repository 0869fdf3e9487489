"""`--state-machine NAME` (YAML `stateMachine`): naming, loading and the one-line usage
errors of `dledger server` and `dledger cluster` (the real processes: tests/e2e/
test_state_machine_option.py)."""

from __future__ import annotations

import faulthandler
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dledger.cli.main import main
from dledger.config import ConfigError, DLedgerConfig
from dledger.kv import KVStateMachine
from dledger.statemachine.loader import load_state_machine, resolve_factory

pytestmark = pytest.mark.unit

USER_MODULE = """
from dledger.kv import KVStateMachine

class Holder:
    @staticmethod
    def make():
        return KVStateMachine()

def make():
    return KVStateMachine()

def broken():
    raise RuntimeError("no database")

def not_a_machine():
    return 42

not_callable = 7

def exiting():
    raise SystemExit(0)

def exiting_bare():
    import sys
    sys.exit()

def interrupted():
    raise KeyboardInterrupt
"""


@pytest.fixture
def user_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "user_machines.py").write_text(USER_MODULE)
    (tmp_path / "bad_import.py").write_text("raise ImportError('a dependency is missing')\n")
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("user_machines", "bad_import", "exits_on_import"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_kv_and_user_factories_load(user_modules: None) -> None:
    assert isinstance(load_state_machine("kv"), KVStateMachine)
    first, second = load_state_machine("kv"), load_state_machine("kv")
    assert first is not second  # a fresh machine each time
    assert isinstance(load_state_machine("user_machines:make"), KVStateMachine)
    assert isinstance(load_state_machine("user_machines:Holder.make"), KVStateMachine)
    assert callable(resolve_factory("user_machines:broken"))  # resolving does not call it


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nope", "unknown state machine 'nope': expected kv or package.module:factory"),
        ("user_machines", "unknown state machine"),
        ("user_machines:", "unknown state machine"),
        ("a b:c", "unknown state machine"),
        ("no_such_module_here:make", "cannot import no_such_module_here: ModuleNotFoundError"),
        ("bad_import:make", "cannot import bad_import: ImportError: a dependency is missing"),
        ("user_machines:missing", "user_machines has no callable missing"),
        ("user_machines:not_callable", "has no callable not_callable"),
        ("user_machines:broken", "the factory failed: RuntimeError: no database"),
        ("user_machines:not_a_machine", "the factory returned int, without on_apply"),
        ("user_machines:exiting", "the factory failed: it called sys.exit(0)"),
        ("user_machines:exiting_bare", "the factory failed: it called sys.exit(None)"),
        ("exits_on_import:make", "cannot import exits_on_import: it called sys.exit(3)"),
    ],
)
def test_bad_names_are_config_errors(user_modules: None, name: str, message: str) -> None:
    with pytest.raises(ConfigError, match="state machine") as info:
        load_state_machine(name)
    assert message in str(info.value)


def test_a_keyboard_interrupt_in_the_factory_goes_through(user_modules: None) -> None:
    with pytest.raises(KeyboardInterrupt):
        load_state_machine("user_machines:interrupted")


@pytest.mark.parametrize(
    ("name", "message"),
    [("user_machines:exiting", "it called sys.exit(0)"), ("exits_on_import:make", "it called sys.exit(3)")],
)
def test_a_machine_calling_sys_exit_is_a_one_line_usage_error(
    user_modules: None, started: list[dict[str, Any]], name: str, message: str
) -> None:
    """Not a silent exit with the status the user code chose (0 looked like success)."""
    result = CliRunner().invoke(main, ["server", "--state-machine", name])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1 and message in result.stderr
    assert started == []


def test_the_config_checks_the_form_of_the_name() -> None:
    assert DLedgerConfig(state_machine="kv").state_machine == "kv"
    assert DLedgerConfig(state_machine="pkg.mod:factory").state_machine == "pkg.mod:factory"
    assert DLedgerConfig().state_machine is None
    with pytest.raises(ConfigError, match="unknown state machine 'kv2'"):
        DLedgerConfig(state_machine="kv2")


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    import dledger.allocator
    import dledger.server

    seen: list[dict[str, Any]] = []

    class Recorder:
        def __init__(self, config: DLedgerConfig, **kwargs: Any) -> None:
            seen.append({"config": config, **kwargs})

        def run_until_signal(self) -> None:
            pass

    monkeypatch.setattr(dledger.server, "DLedgerServer", Recorder)
    monkeypatch.setattr(faulthandler, "register", lambda *_, **__: None)
    monkeypatch.setattr(dledger.allocator, "keep_freed_memory", lambda: None)
    return seen


def test_server_passes_the_named_machine(started: list[dict[str, Any]], tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["server", "-s", str(tmp_path), "--state-machine", "kv"])
    assert result.exit_code == 0, result.output
    assert started[0]["config"].state_machine == "kv"
    assert isinstance(started[0]["state_machine"], KVStateMachine)
    plain = CliRunner().invoke(main, ["server", "-s", str(tmp_path)])
    assert plain.exit_code == 0 and started[1]["state_machine"] is None


def test_server_takes_the_machine_from_the_yaml_file(started: list[dict[str, Any]], tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("stateMachine: kv\n")
    assert CliRunner().invoke(main, ["server", "-c", str(config)]).exit_code == 0
    assert isinstance(started[0]["state_machine"], KVStateMachine)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--state-machine", "nope"], "unknown state machine 'nope'"),
        (["--state-machine", "no_such_module_here:f"], "cannot import no_such_module_here"),
        (["--state-machine", "dledger.kv:nothing"], "dledger.kv has no callable nothing"),
    ],
)
@pytest.mark.parametrize("command", ["server", "cluster"])
def test_a_bad_name_is_a_one_line_usage_error(
    started: list[dict[str, Any]], command: str, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, [command, *args])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [result.stderr.strip()] and message in result.stderr
    assert result.stderr.startswith("error: ") and "Traceback" not in result.output
    assert started == []


def test_a_bad_name_in_the_yaml_file_is_a_one_line_usage_error(started: list[dict[str, Any]], tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("stateMachine: nope\n")
    result = CliRunner().invoke(main, ["server", "-c", str(config)])
    assert (
        result.exit_code == 2
        and result.stderr == "error: unknown state machine 'nope': expected kv or package.module:factory\n"
    )
    assert started == []


def test_cluster_passes_the_machine_to_every_member(monkeypatch: pytest.MonkeyPatch) -> None:
    import dledger.cli.cluster_runner

    given: list[list[str]] = []

    class Runner:
        def __init__(self, **kwargs: Any) -> None:
            given.append(list(kwargs["extra_args"]))

        def run(self) -> int:
            return 0

    monkeypatch.setattr(dledger.cli.cluster_runner, "LocalCluster", Runner)
    assert CliRunner().invoke(main, ["cluster", "--state-machine", "kv"]).exit_code == 0
    assert given[-1][-2:] == ["--state-machine", "kv"]
    assert CliRunner().invoke(main, ["cluster"]).exit_code == 0
    assert "--state-machine" not in given[-1]


def test_make_run_uses_the_kv_machine() -> None:
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    run = makefile.split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert "dledger cluster" in run and "--state-machine kv" in run


def test_an_embedded_server_loads_the_machine_its_config_names(tmp_path: Path) -> None:
    from dledger.server import DLedgerServer

    server = DLedgerServer(DLedgerConfig(store_base_dir=str(tmp_path), state_machine="kv"))
    assert isinstance(server.state_machine, KVStateMachine)
    assert DLedgerServer(DLedgerConfig(store_base_dir=str(tmp_path))).state_machine is None
    mine = KVStateMachine()
    assert DLedgerServer(DLedgerConfig(state_machine="kv"), state_machine=mine).state_machine is mine
    with pytest.raises(ConfigError, match="no callable"):
        DLedgerServer(DLedgerConfig(state_machine="dledger.kv:nothing"))
