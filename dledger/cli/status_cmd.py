"""`dledger status`: every member's role, term, log range, commit index, lag behind
the leader, vote hold and store health, as a table or JSON; exit 0 only when every member
answered, follows the leader, and every store takes writes (a health check)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from dledger.cli.client_cmds import CONTEXT, client_options, open_client
from dledger.cli.errors import GuardedCommand, fail
from dledger.client import NodeMetadata
from dledger.client.policy import ACCESS_STATUSES
from dledger.codes import DLedgerError, ResponseCode


def status_rows(members: list[NodeMetadata]) -> list[dict[str, Any]]:
    """One dict per member with its lag behind the leader's ledger end (None when no
    leader answered)."""
    leaders = [m for m in members if m.reachable and m.role == "LEADER"]
    leader = max(leaders, key=lambda m: m.term) if leaders else None
    rows = []
    for m in members:
        lag = leader.end_index - m.end_index if (leader is not None and m.reachable and m.error is None) else None
        rows.append(
            {
                "id": m.node_id,
                "address": m.address,
                "reachable": m.reachable,
                "role": _role(m),
                "term": m.term,
                "leader": m.leader_id,
                "begin_index": m.begin_index,
                "end_index": m.end_index,
                "committed_index": m.committed_index,
                "applied_index": m.applied_index,
                "snapshot_index": m.snapshot_index if m.reachable else -1,
                "vote_hold": m.vote_hold if m.reachable else "",
                "store": m.store_health if m.reachable else "",
                "machine": m.machine_health if m.reachable else "",
                "lag": lag,
                "error": m.error,
            }
        )
    return rows


def _role(member: NodeMetadata) -> str:
    """A member's role as `status` shows it: REFUSED when it answered with a refusal (of
    this client's credentials or role, of the group, or because another member answers at
    its address), UNREACHABLE when it did not answer."""
    if member.reachable:
        return member.role if member.error is None else "REFUSED"
    return "REFUSED" if _refused(member.error) else "UNREACHABLE"


def _refused(error: str | None) -> bool:
    """Whether a member that gave no status refused this client (its credentials or role)
    rather than not answering."""
    return error is not None and error.split(":", 1)[0] in ACCESS_STATUSES  # "<gRPC status>: <details>"


@click.command(cls=GuardedCommand, context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list instead of a table.")
@client_options
def status(as_json: bool, peers: str, group: str, timeout_s: float) -> None:
    """Show every member: role, term, log range, commit index and lag behind the leader.

    Members that do not answer are shown as UNREACHABLE, members that refuse this
    client's credentials, or another member answering at a member's address, as
    REFUSED (with why). The exit status is 0 only when every member answered, a leader
    is known and every other member follows it in its term, every member's store takes
    writes (not a full disk, not failed after an I/O error) and every state machine
    applies (none stopped after an apply error); else the table (or JSON) is still
    printed and the exit status is 1, with one line saying why.
    """
    with open_client(peers, group, timeout_s) as client:
        rows = status_rows(client.status())
    if as_json:
        click.echo(json.dumps(rows))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"group {group}")
        for name, key in (("id", "id"), ("address", "address"), ("role", "role")):
            width = max(len(name), *(len(str(r[key])) for r in rows))
            table.add_column(name, no_wrap=True, min_width=width)
        numbers = ["term", "begin_index", "end_index", "committed_index", "applied_index", "snapshot_index", "lag"]
        if all(r["applied_index"] in (-1, None) for r in rows):
            numbers.remove("applied_index")  # no state machine anywhere
        if all(r["snapshot_index"] in (-1, None) for r in rows):
            numbers.remove("snapshot_index")  # no snapshot anywhere
        for key in numbers:
            table.add_column(key.removesuffix("_index"), justify="right", no_wrap=True)
        style = {
            "LEADER": "bold green",
            "FOLLOWER": "cyan",
            "CANDIDATE": "yellow",
            "UNREACHABLE": "red",
            "REFUSED": "red",
        }
        for r in rows:
            cells = ["" if not r["reachable"] or r[key] is None else str(r[key]) for key in numbers]
            role = f"[{style[r['role']]}]{r['role']}[/]" if r["role"] in style else r["role"]
            if r["vote_hold"]:
                role += f" (holds vote: {r['vote_hold']})"
            if r["store"]:
                role += " [red](store takes no write)[/]"
            if r["machine"]:
                role += " [red](state machine stopped)[/]"
            table.add_row(r["id"], r["address"], role, *cells)
        Console(width=None if sys.stdout.isatty() else 120).print(table)
        for r in rows:
            for said in _problems(r):
                click.echo(f"{r['id']}: {' '.join(said.split())}")
    if rows and all(r["role"] == "REFUSED" for r in rows):
        fail(f"every member refused this client: {' '.join(str(rows[0]['error']).split())}")
    if not any(r["reachable"] for r in rows):
        raise DLedgerError(ResponseCode.NETWORK_ERROR, "no member answered")  # the guard adds a TLS hint if one fits
    problem = status_problem(rows)
    if problem:
        fail(problem)


def status_problem(rows: list[dict[str, Any]]) -> str | None:
    """Why `status` exits 1 when some member answered (None: every member answered and
    a leader is known); `status` itself reports that none did."""
    down = [r for r in rows if r["role"] in ("UNREACHABLE", "REFUSED")]
    said = []  # "n1 unreachable", "n2 refused"
    for kind, what in (("UNREACHABLE", "unreachable"), ("REFUSED", "refused")):
        ids = [r["id"] for r in down if r["role"] == kind]
        if ids:
            said.append(f"{', '.join(ids)} {what}")
    why = ", ".join(said)
    if not any(r["role"] == "LEADER" for r in rows):
        return f"no leader: no member that answered is leading{f' ({why})' if why else ''}"
    if down:
        return f"{why}: {len(rows) - len(down)} of {len(rows)} members answered"
    astray = _not_following(rows)
    if astray:
        return astray
    failing = [f"{r['id']} ({r['store'].split(':')[0]})" for r in rows if r["store"]]
    if failing:
        return f"the store of {', '.join(failing)} takes no write"
    stopped = [r["id"] for r in rows if r["machine"]]
    if stopped:
        return f"the state machine of {', '.join(stopped)} stopped"
    return None


def _not_following(rows: list[dict[str, Any]]) -> str | None:
    """Which members that answered do not follow the leader of the highest term (helper K:
    a member that changed its address, or refuses its leader's pushes, showed as healthy):
    None when every one does. Right after an election a member may not have heard the new
    leader yet: a health check then fails once."""
    leader = max((r for r in rows if r["role"] == "LEADER"), key=lambda r: r["term"])
    astray = []
    for r in rows:
        if r is not leader and (r["leader"] != leader["id"] or r["term"] != leader["term"]):
            seen = f"leader {r['leader']}" if r["leader"] else "no leader"
            astray.append(f"{r['id']} ({r['role']}, term {r['term']}, sees {seen})")
    if not astray:
        return None
    verb = "does" if len(astray) == 1 else "do"
    return f"{', '.join(astray)} {verb} not follow leader {leader['id']} (term {leader['term']})"


def _problems(row: dict[str, Any]) -> list[str]:
    """What the lines under the table say about one member."""
    if row["error"]:
        return [row["error"]]
    said = [f"store {row['store']}"] if row["store"] else []
    return said + ([f"state machine stopped: {row['machine']}"] if row["machine"] else [])
