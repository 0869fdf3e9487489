"""Switches and strings of `StoreConfig` and `DLedgerConfig` are checked for their type
(`dledger.config_bounds.mistyped`): `read_only="false"` is true in Python and opened a
store read-only, `pre_vote="no"` turned pre-vote on. `delete_when` must be DLedger's
hours (00-23, ';'-separated): an int failed in the clean thread at every pass and "25"
never came, so retention never ran."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from dledger.config import ConfigError, DLedgerConfig, StoreConfig
from dledger.config_bounds import (
    MEMBER_OPTIONAL_TEXTS,
    MEMBER_SWITCHES,
    MEMBER_TEXTS,
    STORE_SWITCHES,
    STORE_TEXTS,
)

pytestmark = pytest.mark.unit

CHECKED_BY_VALUE = {"flush_mode", "data_writes"}
"""StoreConfig's str settings whose values are listed (a wrong type fails that check)."""


def fields_of(cls: type, kind: object) -> set[str]:
    """The init fields of `cls` annotated as `kind`."""
    hints = typing.get_type_hints(cls)
    return {f.name for f in dataclasses.fields(cls) if f.init and hints[f.name] == kind}


def test_every_switch_and_string_setting_is_checked() -> None:
    assert fields_of(StoreConfig, bool) == set(STORE_SWITCHES)
    assert {f.name for f in dataclasses.fields(StoreConfig) if isinstance(f.default, str)} == {
        *STORE_TEXTS,
        *CHECKED_BY_VALUE,
    }
    assert fields_of(DLedgerConfig, bool) == set(MEMBER_SWITCHES)
    assert fields_of(DLedgerConfig, str) == set(MEMBER_TEXTS)
    assert fields_of(DLedgerConfig, str | None) == set(MEMBER_OPTIONAL_TEXTS)


SWITCH_CASES = [("store", name) for name in STORE_SWITCHES] + [("member", name) for name in MEMBER_SWITCHES]


def make(owner: str, name: str, value: object) -> object:
    """A StoreConfig or DLedgerConfig with `value` for `name`."""
    return StoreConfig(**{name: value}) if owner == "store" else DLedgerConfig(**{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(("owner", "name"), SWITCH_CASES, ids=[name for _, name in SWITCH_CASES])
def test_a_switch_that_is_not_a_bool_is_refused_naming_it(owner: str, name: str) -> None:
    for value in ("false", "no", "true", "", 0, 1, None):
        with pytest.raises(ConfigError, match=f"^{name} must be True or False, not {value!r}"):
            make(owner, name, value)
    for value in (True, False):
        assert getattr(make(owner, name, value), name) is value


def test_the_reported_switches_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"^read_only must be True or False, not 'false'"):
        StoreConfig(read_only="false")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^write_crc must be True or False, not 'no'"):
        StoreConfig(write_crc="no")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^java_compat must be True or False, not 1"):
        StoreConfig(java_compat=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^pre_vote must be True or False, not 'no'"):
        DLedgerConfig(pre_vote="no")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", MEMBER_TEXTS)
def test_a_member_string_that_is_not_a_str_is_refused_naming_it(name: str) -> None:
    for value in (4, None, b"n0", ["n0"]):
        with pytest.raises(ConfigError, match=f"^{name} must be a string, not "):
            DLedgerConfig(**{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", MEMBER_OPTIONAL_TEXTS)
def test_an_optional_member_string_is_a_str_or_none(name: str) -> None:
    for value in (4, b"x", True):
        with pytest.raises(ConfigError, match=f"^{name} must be a string or None, not "):
            DLedgerConfig(**{name: value})  # type: ignore[arg-type]
    assert getattr(DLedgerConfig(**{name: None}), name) is None  # type: ignore[arg-type]


def test_a_member_store_that_is_not_a_store_config_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^store must be a StoreConfig, not dict"):
        DLedgerConfig(store={"data_file_size": 4096})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["04", "4", "00", "0", "23", "03;15", " 04 ; 16 ;", "1;2;3", ""])
def test_delete_when_takes_dlegers_hours(value: str) -> None:
    assert StoreConfig(delete_when=value).delete_when == value


@pytest.mark.parametrize("value", ["25", "24", "-1", "+4", "4am", "004", "04,16", "04;25", "04:00", "\u0664", "x"])
def test_delete_when_refuses_what_is_no_hour(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^delete_when must be hours 00-23 separated by ';'"):
        StoreConfig(delete_when=value)


@pytest.mark.parametrize("value", [4, None, 4.0, b"04"])
def test_delete_when_must_be_a_string(value: object) -> None:
    with pytest.raises(ConfigError, match=f"^delete_when must be a string, not {value!r}"):
        StoreConfig(delete_when=value)  # type: ignore[arg-type]
