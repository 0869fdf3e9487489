"""`dledger server` option handling: sizes, DLedger YAML files, precedence, --help."""

from __future__ import annotations

import faulthandler
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dledger.cli.main import main
from dledger.cli.server_cmds import build_config, index_segment_size, load_config_file, parse_size
from dledger.config import DLedgerConfig

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
        "mapped_file_size_for_entry_data": 16 << 20,
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
        {"group": "cli", "heart_beat_time_interval_ms": None, "mapped_file_size_for_entry_data": 8 << 20},
    )
    assert (config.group, config.heart_beat_time_interval_ms) == ("cli", 900)
    assert config.mapped_file_size_for_entry_index == 8 << 20
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
    assert started[0].mapped_file_size_for_entry_data == 16 << 20
    assert started[0].release_behind_bytes == 64 << 20
    assert tuned == [True]  # the server process keeps freed buffers (dledger.allocator)
    assert CliRunner().invoke(main, [*args[:-1], "lots"]).exit_code == 2
