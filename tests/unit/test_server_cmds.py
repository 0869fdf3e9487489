"""`dledger server` option handling: sizes, DLedger YAML files, precedence, --help, and the
options and YAML keys derived from the config dataclasses."""

from __future__ import annotations

import dataclasses
import faulthandler
from pathlib import Path

import click
import pytest
import yaml  # type: ignore[import-untyped]
from click.testing import CliRunner

from dledger.cli.cluster_runner import store_args
from dledger.cli.main import main
from dledger.cli.server_cmds import (
    build_config,
    file_settings,
    format_size,
    index_segment_size,
    load_config_file,
    parse_size,
    setting_fields,
    store_options,
)
from dledger.config import DLedgerConfig, StoreConfig, member_store_config

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "value"),
    [("123", 123), ("4k", 4096), ("4 KiB", 4096), ("64MiB", 64 << 20), ("1g", 1 << 30), ("2TB", 2 << 40)],
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "lots", "-5", "1.5g", "4 XB"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_dledger_yaml_keys_and_proxy_form(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "configs:\n"
        "  - {group: g1, selfId: n0, peers: 'n0-h:1;n1-h:2', storeBaseDir: /s, preferredLeaderId: n1}\n"
        "  - {group: g1, selfId: n1, peers: 'n0-h:1;n1-h:2', storeBaseDir: /s, peerPushQuota: 1048576,\n"
        "     enableBatchPush: true, heartBeatTimeIntervalMs: '700', flushMode: sync, javaCompat: 'true'}\n"
    )
    settings = load_config_file(path, self_id="n1")
    assert settings == {
        "group": "g1",
        "self_id": "n1",
        "peers": "n0-h:1;n1-h:2",
        "store_base_dir": "/s",
        "peer_push_quota": 1048576,
        "heart_beat_time_interval_ms": 700,
        "flush_mode": "sync",
        "java_compat": True,
    }
    assert "enableBatchPush" in capsys.readouterr().err
    assert load_config_file(path, self_id="n0")["preferred_leader_ids"] == "n1"
    with pytest.raises(click.UsageError, match="exactly one"):
        load_config_file(path)


def test_flat_yaml_and_bad_files(tmp_path: Path) -> None:
    flat = tmp_path / "flat.yaml"
    flat.write_text(
        "group: g2\nself_id: n3\npeers: n3-h:9\nmappedFileSizeForEntryData: 16MiB\nreleaseBehindBytes: 64MiB\n"
    )
    assert load_config_file(flat) == {
        "group": "g2",
        "self_id": "n3",
        "peers": "n3-h:9",
        "data_file_size": 16 << 20,
        "release_behind_bytes": 64 << 20,
    }
    for text in ("- a list\n", "key: [unclosed\n", "maxHeartBeatLeak: many\n"):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(click.UsageError):
            load_config_file(bad)


def test_options_override_the_file_and_segment_sizes_follow() -> None:
    config = build_config(
        {"group": "file", "self_id": "n0", "peers": "n0-h:1", "heart_beat_time_interval_ms": 900},
        {"group": "cli", "heart_beat_time_interval_ms": None, "data_file_size": 8 << 20},
    )
    assert (config.group, config.heart_beat_time_interval_ms) == ("cli", 900)
    assert config.store.index_file_size == 8 << 20
    assert index_segment_size(1 << 30) == 160 << 20
    assert index_segment_size(1000) == 1 << 20
    with pytest.raises(click.UsageError, match="not in peers"):
        build_config({}, {"self_id": "n9"})


def test_help_of_both_commands() -> None:
    runner = CliRunner()
    server_help = runner.invoke(main, ["server", "--help"])
    assert server_help.exit_code == 0
    for option in ("--group", "--id", "--peers", "--store-base-dir", "--read-only-data-store-dirs",
                   "--peer-push-throttle-point", "--peer-push-quotas", "--preferred-leader-id", "--config-file",
                   "--metrics-port", "--flush-mode", "--heartbeat-ms", "--segment-size",
                   "--release-behind"):  # fmt: skip
        assert option in server_help.output
    cluster_help = runner.invoke(main, ["cluster", "--help"])
    assert cluster_help.exit_code == 0 and "resumes" in cluster_help.output
    assert "--nodes" in cluster_help.output and "--config-file" in cluster_help.output
    for command in ("server", "cluster"):  # a heartbeat past Java's int of milliseconds: usage, before any member
        refused = runner.invoke(main, [command, "--heartbeat-ms", str(2**31)])
        assert refused.exit_code == 2 and "--heartbeat-ms" in refused.output, refused.output


def test_server_options_and_malloc_tuning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import dledger.allocator
    import dledger.server

    started: list[DLedgerConfig] = []
    tuned: list[bool] = []

    class Recorder:
        def __init__(self, config: DLedgerConfig, **_: object) -> None:
            started.append(config)

        def run_until_signal(self) -> None:
            pass

    monkeypatch.setattr(dledger.server, "DLedgerServer", Recorder)
    monkeypatch.setattr(faulthandler, "register", lambda *_, **__: None)  # CliRunner's stderr has no fileno
    monkeypatch.setattr(dledger.allocator, "keep_freed_memory", lambda: tuned.append(True))
    args = ["server", "-s", str(tmp_path), "--segment-size", "16MiB", "--release-behind", "64MiB"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert started[0].store.data_file_size == 16 << 20
    assert started[0].store.release_behind_bytes == 64 << 20
    assert tuned == [True]  # the server process keeps freed buffers (dledger.allocator)
    assert CliRunner().invoke(main, [*args[:-1], "lots"]).exit_code == 2


# DLedger's documented YAML keys (DLedgerConfig.java's fields; /work/shared/reference/DLEDGER.md
# section 2), with the setting each one sets. `preferredLeaderId` is DLedger's deprecated alias.
DLEDGER_YAML_KEYS: dict[str, tuple[str, object, object]] = {
    "group": ("group", "g9", "g9"),
    "selfId": ("self_id", "n1", "n1"),
    "peers": ("peers", "n0-h:1;n1-h:2", "n0-h:1;n1-h:2"),
    "storeBaseDir": ("store_base_dir", "/data", "/data"),
    "readOnlyDataStoreDirs": ("read_only_data_store_dirs", "", ""),  # empty only: multi-path is refused
    "storeType": ("store_type", "MEMORY", "MEMORY"),
    "dataStorePath": ("data_store_path", "", ""),
    "peerPushThrottlePoint": ("peer_push_throttle_point", "100MiB", 100 << 20),
    "peerPushQuota": ("peer_push_quota", 1048576, 1048576),
    "maxPendingRequestsNum": ("max_pending_requests_num", 50, 50),
    "maxWaitAckTimeMs": ("max_wait_ack_time_ms", 900, 900),
    "maxPushTimeOutMs": ("max_push_timeout_ms", 700, 700),
    "enableLeaderElector": ("enable_leader_elector", False, False),
    "heartBeatTimeIntervalMs": ("heart_beat_time_interval_ms", 500, 500),
    "maxHeartBeatLeak": ("max_heart_beat_leak", 5, 5),
    "minVoteIntervalMs": ("min_vote_interval_ms", 200, 200),
    "maxVoteIntervalMs": ("max_vote_interval_ms", 800, 800),
    "fileReservedHours": ("store.file_reserved_hours", 24, 24),
    "deleteWhen": ("store.delete_when", "03", "03"),
    "diskSpaceRatioToCheckExpired": ("store.disk_space_ratio_to_check_expired", 0.6, 0.6),
    "diskSpaceRatioToForceClean": ("store.disk_space_ratio_to_force_clean", 0.8, 0.8),
    "enableDiskForceClean": ("store.enable_disk_force_clean", "false", False),
    "flushFileInterval": ("store.flush_file_interval_ms", 20, 20),
    "checkPointInterval": ("store.checkpoint_interval_ms", 5000, 5000),
    "mappedFileSizeForEntryData": ("store.data_file_size", "16MiB", 16 << 20),
    "mappedFileSizeForEntryIndex": ("store.index_file_size", 4194304, 4 << 20),
    "preferredLeaderIds": ("preferred_leader_ids", "n0", "n0"),
    "preferredLeaderId": ("preferred_leader_ids", "n0", "n0"),
    "maxLeadershipTransferWaitIndex": ("max_leadership_transfer_wait_index", 10, 10),
    "minTakeLeadershipVoteIntervalMs": ("min_take_leadership_vote_interval_ms", 10, 10),
    "maxTakeLeadershipVoteIntervalMs": ("max_take_leadership_vote_interval_ms", 50, 50),
    "leadershipTransferWaitTimeout": ("leadership_transfer_wait_timeout_ms", 2000, 2000),
    "enableFastAdvanceCommitIndex": ("enable_fast_advance_commit_index", False, False),
}
# ours: camelCase for our settings, and the snake_case names a file could use before the
# storage settings moved to DLedgerConfig.store (they keep loading)
OUR_YAML_KEYS: dict[str, tuple[str, object, object]] = {
    "flushMode": ("store.flush_mode", "sync", "sync"),
    "javaCompat": ("store.java_compat", "true", True),
    "releaseBehindBytes": ("store.release_behind_bytes", "64MiB", 64 << 20),
    "maxVoteHoldMs": ("max_vote_hold_ms", 1000, 1000),
    "heartbeatMs": ("heart_beat_time_interval_ms", 500, 500),
    "peerPushQuotas": ("peer_push_quota", 1048576, 1048576),
    "flush_mode": ("store.flush_mode", "sync", "sync"),
    "java_compat": ("store.java_compat", True, True),
    "release_behind_bytes": ("store.release_behind_bytes", 1 << 20, 1 << 20),
    "flush_file_interval_ms": ("store.flush_file_interval_ms", 20, 20),
    "check_point_interval_ms": ("store.checkpoint_interval_ms", 5000, 5000),
    "checkPointIntervalMs": ("store.checkpoint_interval_ms", 5000, 5000),
    "mapped_file_size_for_entry_data": ("store.data_file_size", "16MiB", 16 << 20),
    "mapped_file_size_for_entry_index": ("store.index_file_size", 4194304, 4 << 20),
    "file_reserved_hours": ("store.file_reserved_hours", 24, 24),
    "delete_when": ("store.delete_when", "03", "03"),
    "data_file_size": ("store.data_file_size", "16MiB", 16 << 20),
    "checkpoint_interval_ms": ("store.checkpoint_interval_ms", 5000, 5000),
    "stateMachine": ("state_machine", "kv", "kv"),
}


@pytest.mark.parametrize("key", [*DLEDGER_YAML_KEYS, *OUR_YAML_KEYS])
def test_every_yaml_key_sets_its_setting(key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, value, expected = {**DLEDGER_YAML_KEYS, **OUR_YAML_KEYS}[key]
    file = tmp_path / "c.yaml"
    file.write_text(yaml.safe_dump({"selfId": "n1", "peers": "n0-h:1;n1-h:2", key: value}))
    config = build_config(load_config_file(file), {})
    owner: object = config
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    assert getattr(owner, name) == expected
    assert capsys.readouterr().err == ""  # nothing ignored


def test_dledger_keys_we_do_not_support_are_reported_and_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("group: g\nenablePushToFollower: true\nconfigFilePath: /x\nenableBatchPush: true\n")
    assert load_config_file(file) == {"group": "g"}
    err = capsys.readouterr().err
    assert all(key in err for key in ("enablePushToFollower", "configFilePath", "enableBatchPush"))


def test_setting_names_are_unambiguous() -> None:
    names = setting_fields()
    assert names["mapped_file_size_for_entry_data"].name == "data_file_size"
    assert names["self_id"].name == "self_id" and "store" not in names
    member_names = {f.name for f in dataclasses.fields(DLedgerConfig)}
    assert member_names.isdisjoint(f.name for f in dataclasses.fields(StoreConfig))  # build_config splits by name


def test_a_store_field_with_metadata_is_a_cli_option_and_a_yaml_key() -> None:
    @dataclasses.dataclass(frozen=True)
    class WithKnob(StoreConfig):
        knob_bytes: int = dataclasses.field(
            default=4096, metadata={"yaml": "knobSize", "cli": "--knob", "help": "A new knob.", "size": True}
        )

    seen: list[dict[str, object]] = []

    @click.command()
    @store_options(store_cls=WithKnob)
    def command(**store: object) -> None:
        seen.append(store)

    runner = CliRunner()
    help_text = runner.invoke(command, ["--help"]).output
    assert "--knob SIZE" in help_text and "A new knob.  [default: 4KiB]" in help_text
    assert "--segment-size SIZE" in help_text and "[default: 1GiB]" in help_text
    assert runner.invoke(command, ["--knob", "8k", "--flush-mode", "sync"]).exit_code == 0
    assert seen[-1] == {"data_file_size": None, "flush_mode": "sync", "release_behind_bytes": None, "knob_bytes": 8192}
    assert file_settings({"knobSize": "1MiB", "knob_bytes": 5}, "test", WithKnob) == {"knob_bytes": 5}
    assert file_settings({"knobSize": "1MiB"}, "test", WithKnob) == {"knob_bytes": 1 << 20}


def test_member_store_defaults() -> None:
    store = DLedgerConfig().store
    assert (store.data_file_size, store.index_file_size, store.flush_mode) == (1 << 30, 160 << 20, "async")
    assert (store.release_behind_bytes, store.warm_ahead_bytes) == (256 << 20, 8 << 20)
    assert member_store_config(data_file_size=1 << 20).warm_ahead_bytes == 256 << 10
    assert member_store_config(warm_ahead_bytes=0, release_behind_bytes=0) == StoreConfig(warm_ahead_bytes=0)
    assert format_size(1 << 30) == "1GiB" and format_size(1000) == "1000" and format_size(0) == "0"


def test_cluster_passes_its_store_options_to_every_member(monkeypatch: pytest.MonkeyPatch) -> None:
    import dledger.cli.cluster_runner

    given: list[list[str]] = []

    class Runner:
        def __init__(self, **kwargs: object) -> None:
            given.append(list(kwargs["extra_args"]))  # type: ignore[call-overload]

        def run(self) -> int:
            return 0

    monkeypatch.setattr(dledger.cli.cluster_runner, "LocalCluster", Runner)
    assert CliRunner().invoke(main, ["cluster"]).exit_code == 0
    assert given[-1] == ["--segment-size", str(64 << 20), "--flush-mode", "async"]
    assert CliRunner().invoke(main, ["cluster", "--flush-mode", "sync", "--release-behind", "1MiB"]).exit_code == 0
    assert given[-1] == ["--segment-size", str(64 << 20), "--flush-mode", "sync", "--release-behind", str(1 << 20)]
    assert store_args({"data_file_size": 1 << 20, "flush_mode": None}) == ["--segment-size", str(1 << 20)]


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("storeBaseDir", ["x"], "expected text, not a list"),
        ("group", ["a", "b"], "expected text, not a list"),
        ("selfId", {"n": 0}, "expected text, not a mapping"),
        ("peers", True, "expected text, not a boolean"),
        ("storeBaseDir", None, "a value is needed"),
        ("stateMachine", 1.5, "expected text, not a float"),
        ("heartBeatTimeIntervalMs", "1KiB", "a size suffix is only for byte settings"),
        ("snapshotThreshold", "2k", "a size suffix is only for byte settings"),
        ("enableDiskForceClean", ["yes"], "expected true or false"),
    ],
)
def test_a_file_value_of_the_wrong_yaml_kind_is_refused(key: str, value: object, why: str) -> None:
    with pytest.raises(click.UsageError, match=f"bad value for {key}: .*{why}"):
        file_settings({key: value}, "c.yaml")


def test_file_values_that_fit_are_taken() -> None:
    got = file_settings(
        {"group": 7, "stateMachine": None, "heartBeatTimeIntervalMs": "500", "peerPushQuota": "1MiB"}, "c.yaml"
    )
    assert got == {"group": "7", "state_machine": None, "heart_beat_time_interval_ms": 500, "peer_push_quota": 1 << 20}


@pytest.mark.parametrize("line", ["storeBaseDir: null", "storeBaseDir: [x]"])
def test_server_with_a_bad_store_dir_in_its_file_is_a_usage_error(
    tmp_path: Path, line: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dledger.server

    def never(*_: object, **__: object) -> None:
        raise AssertionError("a server was started")

    monkeypatch.setattr(dledger.server, "DLedgerServer", never)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "g.yaml"
    path.write_text(f"selfId: n0\npeers: n0-127.0.0.1:26990\n{line}\n")
    result = CliRunner().invoke(main, ["server", "-c", str(path)])
    assert result.exit_code == 2 and "bad value for storeBaseDir" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.yaml"]


def test_metrics_on_port_0_log_the_port_bound(caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import types
    import urllib.request

    from prometheus_client import CollectorRegistry

    from dledger.server import DLedgerServer

    srv = DLedgerServer(DLedgerConfig())
    srv.node = types.SimpleNamespace(metrics=types.SimpleNamespace(registry=CollectorRegistry()))  # type: ignore[assignment]
    with caplog.at_level(logging.INFO, logger="dledger.server"):
        srv._start_metrics(0)
    try:
        port = srv.metrics_bound_port
        assert port is not None and port > 0
        assert f"metrics on http://127.0.0.1:{port}/metrics" in caplog.text
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
            assert answer.status == 200
    finally:
        srv._metrics.shutdown()


@pytest.mark.parametrize(
    ("args", "yaml", "said"),
    [
        (["--tls-cert", "a.crt"], "", "TLS needs a certificate, a key and a CA: --tls-key, --tls-ca missing"),
        (["--client-address", "127.0.0.1:26991"], "", "a client port needs both --client-address and --tokens-file"),
        ([], "flushMode: bogus", "flushMode must be 'async' or 'sync'"),
    ],
)
def test_refused_settings_are_named_as_the_user_gave_them(
    tmp_path: Path, args: list[str], yaml: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the Python field names (`tls_key, tls_ca missing`, `flush_mode must be`)."""
    import dledger.server

    def never(*_: object, **__: object) -> None:
        raise AssertionError("a server was started")

    monkeypatch.setattr(dledger.server, "DLedgerServer", never)
    path = tmp_path / "g.yaml"
    path.write_text(f"selfId: n0\npeers: n0-127.0.0.1:26990\nstoreBaseDir: {tmp_path}\n{yaml}\n")
    result = CliRunner().invoke(main, ["server", "-c", str(path), *args])
    assert result.exit_code == 2 and said in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("path", "repairing", "hinted"),
    [
        ("s/dledger-n0/data/00000000000000000000", False, True),
        ("s/dledger-n0/index/00000000000000000000", False, True),
        ("s/dledger-n0/checkpoint", False, True),
        ("s/dledger-n0/data/00000000000000000000", True, False),  # repairing already
        ("s/dledger-n0/currterm", False, False),  # --repair cannot help: its message says what can
        ("s/dledger-n0/currterm.bak", False, False),
        ("s/dledger-n0/identity", False, False),
    ],
)
def test_the_repair_hint_is_given_only_where_repair_helps(path: str, repairing: bool, hinted: bool) -> None:
    """Helper A: a garbage `currterm` was refused with "`dledger server --repair` cuts the
    log back ...", and `--repair` then failed the same way."""
    from dledger.cli.server_cmds import _repairable
    from dledger.codes import CorruptStoreError

    assert _repairable(CorruptStoreError(path, 0, "damaged"), repairing) is hinted
