"""Every numeric setting has a range (`dledger.config_bounds`): a config outside it is
refused when made, naming the setting; a config file's switches and whole numbers are
read strictly (no `maybe` switch, no 1.5 entries)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
import pytest

from dledger.cli.server_cmds import build_config, file_settings, load_config_file
from dledger.config import ConfigError, DLedgerConfig, StoreConfig
from dledger.config_bounds import MEMBER_BOUNDS, STORE_BOUNDS
from dledger.node import DLedgerNode

pytestmark = pytest.mark.unit

RELATED = {"min_vote_interval_ms", "max_vote_interval_ms"} | {
    "min_take_leadership_vote_interval_ms",
    "max_take_leadership_vote_interval_ms",
}
"""Settings checked against each other too (min < max): their edges are tested in pairs."""


def make(name: str, value: object) -> object:
    """The config that `name` belongs to, with `value` for it."""
    if name in STORE_BOUNDS:
        return StoreConfig(**{name: value})  # type: ignore[arg-type]
    return DLedgerConfig(**{name: value})  # type: ignore[arg-type]


def numeric_fields(cls: type) -> set[str]:
    return {
        f.name
        for f in dataclasses.fields(cls)
        if f.init and isinstance(f.default, int | float) and not isinstance(f.default, bool)
    }


def test_every_numeric_setting_has_a_range_that_holds_its_default() -> None:
    assert numeric_fields(DLedgerConfig) == set(MEMBER_BOUNDS)
    assert numeric_fields(StoreConfig) == set(STORE_BOUNDS)
    for bounds, cls in ((MEMBER_BOUNDS, DLedgerConfig), (STORE_BOUNDS, StoreConfig)):
        for name, (low, high) in bounds.items():
            default = next(f.default for f in dataclasses.fields(cls) if f.name == name)
            assert low <= default <= high, name


CASES = [(name, low, high) for name, (low, high) in {**MEMBER_BOUNDS, **STORE_BOUNDS}.items()]


@pytest.mark.parametrize(("name", "low", "high"), CASES, ids=[c[0] for c in CASES])
def test_values_outside_a_range_are_refused_naming_the_setting(name: str, low: float, high: float) -> None:
    whole = isinstance(low, int)
    outside: list[object] = [high * 2 if whole else high + 0.01, True, "5", None]
    outside += [low - 1, 1 << 70, float(low) + 0.5] if whole else [low, -1.0, float("nan"), float("inf")]
    for value in outside:
        with pytest.raises(ConfigError, match=f"^{name} must be"):
            make(name, value)


ALONE = [case for case in CASES if case[0] not in RELATED]


@pytest.mark.parametrize(("name", "low", "high"), ALONE, ids=[c[0] for c in ALONE])
def test_the_edges_of_a_range_are_taken(name: str, low: float, high: float) -> None:
    edges = [low, high] if isinstance(low, int) else [high, low + 1e-9]
    if name == "index_file_size":
        edges = [low, high - high % 32]
    for value in edges:
        assert getattr(make(name, value), name) == value


def test_related_intervals_take_their_edges_in_pairs() -> None:
    config = DLedgerConfig(min_vote_interval_ms=0, max_vote_interval_ms=1)
    assert (config.min_vote_interval_ms, config.max_vote_interval_ms) == (0, 1)
    config = DLedgerConfig(
        min_take_leadership_vote_interval_ms=2**31 - 2, max_take_leadership_vote_interval_ms=2**31 - 1
    )
    assert config.max_take_leadership_vote_interval_ms == 2**31 - 1
    with pytest.raises(ConfigError, match="need min_vote_interval_ms < max_vote_interval_ms"):
        DLedgerConfig(min_vote_interval_ms=5, max_vote_interval_ms=5)


def test_a_member_config_changed_after_it_was_made_is_checked_as_the_node_starts(tmp_path: Path) -> None:
    """A DLedgerConfig can be changed after it was made (a StoreConfig is frozen): a node
    checks it again before it opens anything."""
    member = DLedgerConfig(peers="n0-127.0.0.1:1", store_base_dir=str(tmp_path / "m"))
    member.commit_push_interval_ms = 0  # would have pushed COMMITs in a busy loop
    with pytest.raises(ConfigError, match="commit_push_interval_ms must be in"):
        DLedgerNode(member)
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("enableDiskForceClean", "maybe"),
        ("enableDiskForceClean", 2),
        ("preVote", 0.5),
        ("maxProducers", 1.5),
        ("maxProducers", True),
        ("maxProducers", [1]),
        ("snapshotThreshold", "lots"),
        ("diskSpaceRatioToForceClean", True),
        ("diskSpaceRatioToForceClean", "high"),
    ],
)
def test_a_file_value_that_is_not_of_its_settings_kind_is_a_usage_error(key: str, value: object) -> None:
    with pytest.raises(click.UsageError, match=f"bad value for {key}"):
        file_settings({key: value}, "c.yaml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("yes", True), ("Off", False), ("1", True), ("false", False)],
)
def test_switch_words_and_whole_floats_in_a_file(text: str, expected: bool, tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"enableDiskForceClean: '{text}'\nmaxProducers: 5.0\ndiskSpaceRatioToForceClean: 1\n")
    config = build_config(load_config_file(path), {})
    assert config.store.enable_disk_force_clean is expected
    assert config.max_producers == 5 and config.store.disk_space_ratio_to_force_clean == 1.0


def test_a_range_error_from_a_file_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("commitPushIntervalMs: -1\n")
    # named as the file names it, not by the Python field (helper D)
    with pytest.raises(click.UsageError, match=r"^commitPushIntervalMs must be in \[1, 2,147,483,647\], not -1"):
        build_config(load_config_file(path), {})
    path.write_text("heartbeatMs: 0\n")  # one of a setting's DLedger names: the first is said
    with pytest.raises(click.UsageError, match=r"^heartBeatTimeIntervalMs must be in"):
        build_config(load_config_file(path), {})


def test_a_files_stream_slots_become_the_members_service_limits(tmp_path: Path) -> None:
    """`maxAppendStreams`, `maxReadStreams` and `maxStreamsPerCaller` (a member's stream
    slots) are config-file settings with ranges, and what a member's server serves."""
    from dledger.transport.service_core import ServiceLimits

    path = tmp_path / "c.yaml"
    path.write_text("maxAppendStreams: 40\nmaxReadStreams: 8\nmaxStreamsPerCaller: 2\n")
    limits = ServiceLimits.of(build_config(load_config_file(path), {}))
    assert (limits.max_append_streams, limits.max_read_streams, limits.max_streams_per_caller) == (40, 8, 2)
    assert limits.max_client_calls == ServiceLimits().max_client_calls
    path.write_text("maxReadStreams: 57\n")
    with pytest.raises(click.UsageError, match=r"maxReadStreams must be in \[1, 56\], not 57"):
        build_config(load_config_file(path), {})


@pytest.mark.parametrize("setting", ["data_store_path", "read_only_data_store_dirs"])
def test_dledgers_multi_path_settings_are_refused_not_ignored(tmp_path: Path, setting: str) -> None:
    """They were taken and ignored: the data went to the store base dir all the same."""
    with pytest.raises(ConfigError, match="multi-path storage\\) is not supported"):
        DLedgerConfig(self_id="n0", peers="n0-127.0.0.1:20911", store_base_dir=str(tmp_path), **{setting: "/data2"})
