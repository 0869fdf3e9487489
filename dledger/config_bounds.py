"""The ranges of the numeric settings of `DLedgerConfig` and `StoreConfig`.

A setting outside its range is refused when the config is made (`dledger.config`), with
a message that names the setting and the range, instead of misbehaving later: a negative
flush or clean interval spun a thread, a force-clean disk ratio of 0 or less took any
disk more than 5 % used for full (every append refused, DISK_FULL), a value past int64
failed as an OverflowError when the store opened.

Milliseconds stop at Java's `int` (2**31 - 1, ~24.8 days), the type of DLedger's own
settings; byte sizes and counts at int64; segment sizes at 1 TiB; an entry at 2 GiB - 1
(its size is an `int` in the header).

Switches and strings are checked for their type as well (`mistyped`): a switch given
as the string "false" is true in Python (`read_only="false"` opened a store read-only),
and `delete_when` must be DLedger's hours (`bad_delete_when`): an int there failed in
the clean thread at every pass, "25" never came, and retention never ran.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dledger.entry import HEADER_SIZE, INDEX_UNIT_SIZE

MS_MAX = 2**31 - 1
"""The longest duration setting, in milliseconds (Java's Integer.MAX_VALUE)."""
INT64_MAX = 2**63 - 1
SEGMENT_MAX = 1 << 40
"""The largest data or index segment (1 TiB)."""
MAX_STREAMS = 56
"""The most stream slots of one kind a member serves: both kinds together leave 16 of a
member's 128 client calls (`ServiceLimits.max_client_calls`) to unary calls."""

Bounds = Mapping[str, tuple[float, float]]

MEMBER_BOUNDS: Bounds = {
    "heart_beat_time_interval_ms": (1, MS_MAX),
    "max_heart_beat_leak": (1, 1_000),
    "min_vote_interval_ms": (0, MS_MAX),
    "max_vote_interval_ms": (1, MS_MAX),
    "min_take_leadership_vote_interval_ms": (0, MS_MAX),
    "max_take_leadership_vote_interval_ms": (1, MS_MAX),
    "max_leadership_transfer_wait_index": (0, INT64_MAX),
    "leadership_transfer_wait_timeout_ms": (1, MS_MAX),
    "check_preferred_leader_interval_ms": (1, MS_MAX),
    "max_vote_hold_ms": (0, MS_MAX),
    "lease_drift_ms": (0, MS_MAX),
    "producer_id_expiration_ms": (1, MS_MAX),
    "max_producers": (1, INT64_MAX),
    "max_pending_requests_num": (1, INT64_MAX),
    "max_pending_bytes": (1, INT64_MAX),
    "max_wait_ack_time_ms": (1, MS_MAX),
    "max_push_timeout_ms": (1, MS_MAX),
    "peer_push_quota": (1, INT64_MAX),
    "peer_push_throttle_point": (0, INT64_MAX),
    "peer_push_throttle_lag_entries": (0, INT64_MAX),
    "max_push_batch_bytes": (1, INT64_MAX),
    "max_push_in_flight_per_peer": (1, INT64_MAX),
    "max_push_in_flight_bytes": (1, INT64_MAX),
    "commit_push_interval_ms": (1, MS_MAX),
    "standby_push_ms": (0, MS_MAX),
    "push_gather_ms": (0, MS_MAX),
    "follower_push_timeout_ms": (1, MS_MAX),
    "rpc_timeout_ms": (1, MS_MAX),
    "max_append_streams": (1, MAX_STREAMS),
    "max_read_streams": (1, MAX_STREAMS),
    "max_streams_per_caller": (1, MAX_STREAMS),
    "snapshot_threshold": (1, INT64_MAX),
    "max_snapshot_reserved_num": (1, INT64_MAX),
    "reset_snapshot_entries_but_keep_last_entries_num": (0, INT64_MAX),
    "snapshot_catch_up_entries": (0, INT64_MAX),
}
"""`DLedgerConfig`'s numeric settings: (lowest, highest) of whole numbers, both allowed;
of fractions (floats), above the lowest and at most the highest."""

STORE_BOUNDS: Bounds = {
    "data_file_size": (64, SEGMENT_MAX),
    "index_file_size": (INDEX_UNIT_SIZE, SEGMENT_MAX),
    "flush_file_interval_ms": (1, MS_MAX),
    "checkpoint_interval_ms": (0, MS_MAX),  # 0: at every flush pass
    "warm_ahead_bytes": (0, INT64_MAX),
    "release_behind_bytes": (0, INT64_MAX),
    "max_entry_size": (HEADER_SIZE, MS_MAX),
    "file_reserved_hours": (0, MS_MAX),
    "disk_space_ratio_to_check_expired": (0.0, 1.0),
    "disk_space_ratio_to_force_clean": (0.0, 1.0),
    "clean_interval_ms": (1, MS_MAX),
}
"""`StoreConfig`'s numeric settings."""


def out_of_bounds(settings: Any, bounds: Bounds) -> str | None:
    """What is wrong with the first of `bounds`' attributes of `settings` that is not a
    number in its range (a whole number unless its range is of floats), or None."""
    for name, (low, high) in bounds.items():
        value = getattr(settings, name)
        whole = isinstance(low, int)
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
            kind = "a whole number" if whole else "a number"
            return f"{name} must be {kind}, not {value!r:.80}"
        if whole and not low <= value <= high:
            return f"{name} must be in [{low:,}, {high:,}], not {value!r:.80}"
        if not whole and not low < value <= high:  # NaN fails too
            return f"{name} must be above {low} and at most {high}, not {value!r:.80}"
    return None


STORE_SWITCHES = ("write_crc", "verify_crc", "java_compat", "read_only", "enable_disk_force_clean")
"""`StoreConfig`'s bool settings."""
STORE_TEXTS = ("delete_when",)
"""`StoreConfig`'s str settings checked here (flush_mode and data_writes are checked
against their values by `StoreConfig.validate`)."""
MEMBER_SWITCHES = (
    "enable_leader_elector",
    "pre_vote",
    "check_quorum",
    "enable_fast_advance_commit_index",
    "enable_snapshot",
)
"""`DLedgerConfig`'s bool settings."""
MEMBER_TEXTS = (
    "group",
    "self_id",
    "peers",
    "store_base_dir",
    "store_type",
    "initial_cluster_state",
    "snapshot_entry_reset_strategy",
)
"""`DLedgerConfig`'s str settings."""
MEMBER_OPTIONAL_TEXTS = (
    "data_store_path",
    "read_only_data_store_dirs",
    "preferred_leader_ids",
    "tls_cert",
    "tls_key",
    "tls_ca",
    "client_address",
    "tokens_file",
    "state_machine",
)
"""`DLedgerConfig`'s settings that are a str or None (unset)."""

_HOUR = re.compile(r"[0-9]{1,2}")


def mistyped(
    settings: Any, switches: tuple[str, ...], texts: tuple[str, ...], optional: tuple[str, ...] = ()
) -> str | None:
    """What is wrong with the first of `settings`' `switches` that is not a bool, of its
    `texts` that is not a str, or of its `optional` texts that is neither a str nor
    None; None when all have their type."""
    for name in switches:
        value = getattr(settings, name)
        if not isinstance(value, bool):
            return f"{name} must be True or False, not {value!r:.80}"
    for name in (*texts, *optional):
        value = getattr(settings, name)
        if not isinstance(value, str) and not (value is None and name in optional):
            kind = "a string or None" if name in optional else "a string"
            return f"{name} must be {kind}, not {value!r:.80}"
    return None


def bad_delete_when(value: str) -> str | None:
    """What is wrong with a `delete_when` (DLedger's deleteWhen: the hours 00-23 at which
    retention runs, several separated by ';', e.g. "04" or "03;15"; "" for none, as
    `dledger.store.clean` reads it), or None."""
    for item in value.split(";"):
        hour = item.strip()
        if hour and not (_HOUR.fullmatch(hour) and int(hour) <= 23):
            return f"delete_when must be hours 00-23 separated by ';' (e.g. '04' or '03;15'), not {value!r:.80}"
    return None


def store_problem(settings: Any) -> str | None:
    """What is wrong with the first wrongly typed or out-of-range setting of a
    `StoreConfig`, or with its `delete_when`; None when nothing is."""
    problem = mistyped(settings, STORE_SWITCHES, STORE_TEXTS) or out_of_bounds(settings, STORE_BOUNDS)
    return problem or bad_delete_when(settings.delete_when)


def member_mistyped(settings: Any) -> str | None:
    """What is wrong with the first switch or string of a `DLedgerConfig` that does not
    have its type, or None (its numeric settings: `out_of_bounds` with MEMBER_BOUNDS)."""
    return mistyped(settings, MEMBER_SWITCHES, MEMBER_TEXTS, MEMBER_OPTIONAL_TEXTS)


def name_problem(name: str, what: str = "name") -> str | None:
    """What is wrong with a group, member or client name (None: nothing). The names go
    into TLS identities (`dledger://<group>/<member>`) and log lines: no '/', '\\',
    '?', '#', ':', spaces or other unprintable characters (a name from bytes that are
    not UTF-8 is one), and no leading '.'."""
    if not name:
        return f"{what} must not be empty"
    if not name.isprintable() or any(c in name for c in "/\\?#: ") or name.startswith("."):
        return f"bad {what} {name!r}: no '/', '\\', '?', '#', ':', spaces, control characters or leading '.'"
    return None
