"""The snapshot settings of DLedgerConfig: DLedger's YAML names and defaults, validated."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from dledger.cli.server_cmds import build_config, load_config_file
from dledger.config import ConfigError, DLedgerConfig

pytestmark = pytest.mark.unit


def test_defaults_are_dledgers() -> None:
    config = DLedgerConfig()
    assert (config.enable_snapshot, config.snapshot_threshold, config.max_snapshot_reserved_num) == (False, 1000, 3)


def test_yaml_file_sets_them_by_dledgers_names(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "group: g\nselfId: n0\npeers: n0-localhost:20911\n"
        "enableSnapshot: true\nsnapshotThreshold: 50\nmaxSnapshotReservedNum: 5\n",
        encoding="utf-8",
    )
    config = build_config(load_config_file(path), {})
    assert (config.enable_snapshot, config.snapshot_threshold, config.max_snapshot_reserved_num) == (True, 50, 5)


@pytest.mark.parametrize(
    "name", ["snapshot_threshold", "max_snapshot_reserved_num", "producer_id_expiration_ms", "max_producers"]
)
@pytest.mark.parametrize("value", [0, -1, True, 2.5, "3"])
def test_non_positive_or_non_integer_values_are_refused(name: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"{name} must be"):
        DLedgerConfig(**{name: value})  # type: ignore[arg-type]


def test_a_bad_value_in_a_file_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("snapshotThreshold: 0\n", encoding="utf-8")
    with pytest.raises(click.UsageError, match="snapshotThreshold must be in"):
        build_config(load_config_file(path), {})


def test_reset_strategy_defaults_names_and_refusals(tmp_path: Path) -> None:
    config = DLedgerConfig()
    assert config.snapshot_entry_reset_strategy == "RESET_ALL_SYNC"
    assert config.reset_snapshot_entries_but_keep_last_entries_num == 10
    path = tmp_path / "c.yaml"
    path.write_text(
        "snapshotEntryResetStrategy: RESET_BUT_KEEP_SOME_SYNC\nresetSnapshotEntriesButKeepLastEntriesNum: 64\n",
        encoding="utf-8",
    )
    loaded = build_config(load_config_file(path), {})
    assert (loaded.snapshot_entry_reset_strategy, loaded.reset_snapshot_entries_but_keep_last_entries_num) == (
        "RESET_BUT_KEEP_SOME_SYNC",
        64,
    )
    with pytest.raises(ConfigError, match="RESET_ALL_SYNC, RESET_BUT_KEEP_SOME_SYNC"):
        DLedgerConfig(snapshot_entry_reset_strategy="RESET_ALL_LATER")  # DLedger's, not supported
    for bad in (-1, True, "10"):
        with pytest.raises(ConfigError, match="reset_snapshot_entries_but_keep_last_entries_num"):
            DLedgerConfig(reset_snapshot_entries_but_keep_last_entries_num=bad)  # type: ignore[arg-type]
