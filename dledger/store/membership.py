"""A member's place in its group, on disk: the `identity` file (the group id and this
member's incarnation) and the `rejoin` marker (the member lost data and must catch up
with a leader before it votes or stands again).

The group id is fixed when the group is bootstrapped (`--initial-cluster-state new`):
every founding member derives the same id from the group name and the member ids, so
no founding member needs to hear from another first. A member that joins a running group
(`existing`) with no store adopts the id of the first leader it accepts. The incarnation
is a random id, new each time a member starts from an empty store: a member whose disk
was replaced is a new incarnation of the same member id.

The `rejoin` marker is written before a member that lost data (an empty store told
`existing`, or a store cut by `--repair`) runs, and removed once it has caught up; while
it exists the Raft core holds the member's vote (`dledger.raft.vote_hold`), across any
number of restarts. A member of a group of several started with an empty store and told
`new` writes it too, marked `founding`: it may be a member that lost its whole directory,
so it asks its peers first; the marker goes when they show that the group is being
founded, and loses its `founding` mark when they show that the group exists. The
identity's `leaderSeen` records that this incarnation has followed or led a leader (what
such a member learns the group exists from). Java DLedger ignores both files.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dledger.store import kvfile
from dledger.store.checkpoint import load_checkpoint
from dledger.store.layout import IDENTITY_FILE, LOCAL_LOG_FILE, REJOIN_FILE, holds_store

if TYPE_CHECKING:
    from dledger.store.mmap_store import MmapLogStore

__all__ = [
    "IDENTITY_FILE",
    "REJOIN_FILE",
    "NodeIdentity",
    "RejoinMarker",
    "clear_rejoin",
    "derive_group_id",
    "load_identity",
    "load_rejoin",
    "mark_before_repair",
    "mark_repaired",
    "new_incarnation",
    "write_identity",
    "write_rejoin",
]


def derive_group_id(group: str, member_ids: Iterable[str]) -> str:
    """The id every founding member of `group` computes alike (16 hex digits)."""
    text = group + "\0" + "\0".join(sorted(member_ids))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def new_incarnation() -> str:
    """A fresh random incarnation id (16 hex digits)."""
    return secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """What `<node_dir>/identity` holds.

    Attributes:
        group_id: the group's id ("" while a joining member has not yet heard a leader).
        member_id: the member this store belongs to.
        incarnation: this store's incarnation of that member.
        group: the group's name ("" in a file that does not say).
        leader_seen: this incarnation has followed or been a leader: its group exists
            (what a member that lost its disk learns from it, dledger.raft.vote_hold).
        data_file_size, index_file_size: the segment sizes its store was made with (0:
            not recorded, a file written before they were): a member opens its store
            with them whatever it is configured with (see dledger.node_store).
    """

    group_id: str
    member_id: str
    incarnation: str
    group: str = ""
    leader_seen: bool = False
    data_file_size: int = 0
    index_file_size: int = 0


@dataclass(frozen=True, slots=True)
class RejoinMarker:
    """What `<node_dir>/rejoin` holds.

    Attributes:
        catch_up_index: the member holds its vote at least until its committed index
            reaches this (the committed index it had recorded before it lost data; -1
            when unknown); and in any case until it caught up with a leader.
        reason: why the member is rejoining (for operators and logs).
        founding: the member was started with an empty store to found its group: it
            holds until it learned whether the group exists (dledger.raft.vote_hold).
    """

    catch_up_index: int
    reason: str
    founding: bool = False


def load_identity(node_dir: str | os.PathLike[str]) -> NodeIdentity | None:
    """The identity in `node_dir`, or None when there is none (a new or a pre-identity
    store). A file without a member id counts as none."""
    values = kvfile.read(Path(node_dir) / IDENTITY_FILE)
    member = kvfile.read_str(values, "memberId")
    if values is None or not member:
        return None
    return NodeIdentity(
        kvfile.read_str(values, "groupId"),
        member,
        kvfile.read_str(values, "incarnation"),
        kvfile.read_str(values, "group"),
        kvfile.read_str(values, "leaderSeen") == "true",
        kvfile.read_int(values, "dataFileSize", 0),
        kvfile.read_int(values, "indexFileSize", 0),
    )


def write_identity(node_dir: str | os.PathLike[str], identity: NodeIdentity) -> None:
    """Write `identity` durably and atomically."""
    Path(node_dir).mkdir(parents=True, exist_ok=True)
    values = {
        "group": identity.group,
        "groupId": identity.group_id,
        "memberId": identity.member_id,
        "incarnation": identity.incarnation,
    }
    if identity.leader_seen:
        values["leaderSeen"] = "true"
    if identity.data_file_size and identity.index_file_size:
        values["dataFileSize"] = str(identity.data_file_size)
        values["indexFileSize"] = str(identity.index_file_size)
    kvfile.write_atomic(Path(node_dir) / IDENTITY_FILE, values)


def load_rejoin(node_dir: str | os.PathLike[str]) -> RejoinMarker | None:
    """The rejoin marker in `node_dir`, or None when the member holds all it had."""
    values = kvfile.read(Path(node_dir) / REJOIN_FILE)
    if values is None:
        return None
    return RejoinMarker(
        kvfile.read_int(values, "catchUpIndex", -1),
        kvfile.read_str(values, "reason"),
        kvfile.read_str(values, "founding") == "true",
    )


def write_rejoin(node_dir: str | os.PathLike[str], marker: RejoinMarker) -> None:
    """Write the marker durably (before the member runs): it then holds its vote."""
    Path(node_dir).mkdir(parents=True, exist_ok=True)
    values = {"catchUpIndex": str(marker.catch_up_index), "reason": marker.reason}
    if marker.founding:
        values["founding"] = "true"
    kvfile.write_atomic(Path(node_dir) / REJOIN_FILE, values)


def mark_before_repair(node_dir: str | os.PathLike[str], reason: str) -> RejoinMarker | None:
    """Before an open with `repair=True`: write the marker first, with the committed
    index of the checkpoint, so that a repair that dies after cutting the log and before
    `mark_repaired` (a full disk, a kill) still leaves the member holding its vote; the
    caller removes it when nothing was cut. Returns the marker written; None for a local
    log, a directory without a store, or when a marker is there already (it stays)."""
    node = Path(node_dir)
    if not holds_store(node) or (node / LOCAL_LOG_FILE).exists() or load_rejoin(node) is not None:
        return None
    info = load_checkpoint(node)
    marker = RejoinMarker(info.committed if info.known else -1, reason)
    write_rejoin(node, marker)
    return marker


def mark_repaired(store: MmapLogStore, reason: str) -> RejoinMarker | None:
    """After an open with `repair=True`: when recovery cut the log, the member may have
    lost entries it acknowledged, so it must rejoin. Writes (and returns) the marker with
    the committed index its checkpoint had recorded (-1 when none was valid); None when
    nothing was cut, or for a local log (`open_log`: no group to rejoin)."""
    if not store.recovery.stop_file or (store.node_dir / LOCAL_LOG_FILE).exists():
        return None
    info = store.checkpoint_info
    marker = RejoinMarker(info.committed if info.known else -1, reason)
    write_rejoin(store.node_dir, marker)
    return marker


def clear_rejoin(node_dir: str | os.PathLike[str]) -> None:
    """Remove the marker (and its backup) once the member caught up."""
    path = Path(node_dir) / REJOIN_FILE
    kvfile.remove_durably(path.with_name(path.name + ".bak"))
    kvfile.remove_durably(path)
