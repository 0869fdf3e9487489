"""The lease's clock-drift bound: YAML `leaseDriftMs`, never negative."""

from __future__ import annotations

import click
import pytest

from dledger.cli.server_cmds import build_config, file_settings
from dledger.config import ConfigError, DLedgerConfig

pytestmark = pytest.mark.unit


def test_lease_drift_is_read_from_yaml_and_checked() -> None:
    assert DLedgerConfig().lease_drift_ms == 500
    settings = file_settings({"leaseDriftMs": 250}, "test.yaml")
    assert build_config(settings, {}).lease_drift_ms == 250
    with pytest.raises(click.UsageError, match="leaseDriftMs"):  # the file's name for it
        build_config(file_settings({"leaseDriftMs": -1}, "test.yaml"), {})
    with pytest.raises(ConfigError):
        DLedgerConfig(lease_drift_ms=-5)
